"""The site model of a sandbox: the site file it writes into its directory, with this
machine's ports and paths, from which ``gotthard deploy render --target local`` renders
everything it starts (:mod:`gotthard.sandbox.rendered`).

The sandbox's tuning is site-file settings like any site's: 2 s scrape and evaluation
intervals, every alert ``for`` threshold at one minute, fast Alertmanager grouping and
gossip, a webhook per site. :func:`seed_clusters` puts the placed applications on the
emulated clusters once they run.
"""

from __future__ import annotations

import json
import secrets
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gotthard.deploy import local
from gotthard.deploy.manifest import dump_toml
from gotthard.deploy.roles import DR, NODE_EXPORTER, RUNBOOKS, SLURM_EXPORTER
from gotthard.deploy.settings import APISERVER
from gotthard.sandbox import external
from gotthard.sandbox.external import EXTERNAL_API_UP, ExternalClusters
from gotthard.sandbox.layout import SITE_FILE, SandboxLayout, local_url
from gotthard.sandbox.processes import SandboxError, write_private

#: The one compute node of every site (node names repeat across Cray clusters).
NODE_NAME = "nid001"
#: A second node of every site, drained for maintenance, without a slurmd.
MAINTENANCE_NODE = "nid002"
#: Default ports of the first site; the n-th site (from 0) adds ``100 * n``.
DEFAULT_SITE_PORTS: dict[str, int] = {
    "slurmctld": 6917,
    "slurmd": 6918,
    SLURM_EXPORTER.name: 9977,
    NODE_EXPORTER.name: 9976,
    "prometheus": 9190,
    "alertmanager": 9193,
    "alertmanager-cluster": 9194,
    RUNBOOKS.name: 9978,
    "kubeapi": 6543,
    DR.name: 9979,
}
#: The Gotthard roles every site of a multi-site sandbox runs (the node exporter needs
#: NVML: tests add it on the fake library).
SITE_ROLES = (SLURM_EXPORTER.name, RUNBOOKS.name, DR.name)
#: Ports shared by the sites: the global view (a federating Prometheus), Karmada's API and
#: the simulated pager/ticket/dead man's switch.
DEFAULT_SHARED_PORTS: dict[str, int] = {"global": 9090, "karmada": 7443, "notifications": 9095}
#: Between two scrapes and rule evaluations (fast enough for failover tests).
SCRAPE_INTERVAL = "2s"
#: The emulated API servers are scraped twice per placement evaluation: the controller
#: reads an API health at most a second old.
APISERVER_INTERVAL = "1s"
#: The application namespaces the DR daemon places and backs up, by placement mode.
APP_NAMESPACES = {"failover": "shop", "spread": "inference"}
#: The Deployment of each application namespace.
APP_DEPLOYMENT = {"shop": "web", "inference": "inference"}


def site_port_key(site: str, name: str) -> str:
    """``zurich.prometheus``: the key of a site's port in :class:`SitePorts`."""
    return f"{site}.{name}"


def default_ports(sites: Sequence[str]) -> dict[str, int]:
    """Every port of a sandbox with *sites*, by ``SITE.NAME`` or shared name."""
    ports = dict(DEFAULT_SHARED_PORTS)
    for index, site in enumerate(sites):
        for name, port in DEFAULT_SITE_PORTS.items():
            ports[site_port_key(site, name)] = port + 100 * index
    return ports


@dataclass(frozen=True)
class Topology:
    """What every site's files need to know about all of them."""

    directory: Path
    sites: tuple[str, ...]
    ports: Mapping[str, int]
    runbooks_mode: str = "dry-run"
    #: The Gotthard roles each site runs (:data:`SITE_ROLES`).
    roles: tuple[str, ...] = SITE_ROLES
    #: Merged into the site file: the tests' tuning (``[exporter]`` tables, more scrape
    #: targets in ``[deploy.prometheus.extra_targets]``, ...).
    settings: Mapping[str, Any] = field(default_factory=dict)
    #: When the DR daemon backs up the failover service's namespace, and drills it.
    backup_cron: str = "0 2 * * *"
    drill_cron: str = "0 4 * * 0"
    #: ``[[dr.schedules.hooks]]`` of that backup schedule (site-file tables), e.g. a
    #: pre hook that quiesces a database pod: a pod it cannot run in leaves the backup
    #: PartiallyFailed, as in Velero.
    backup_hooks: tuple[Mapping[str, Any], ...] = ()
    #: The Kubernetes and Karmada APIs the sandbox does not run (from a site file).
    external: ExternalClusters = field(default_factory=ExternalClusters)

    def port(self, site: str, name: str) -> int:
        return self.ports[site_port_key(site, name)]

    def url(self, site: str, name: str) -> str:
        return local_url(self.port(site, name))

    def site_dir(self, site: str) -> Path:
        return self.directory / site

    def kubeconfig(self, site: str) -> Path:
        real = self.external.sites.get(site)
        return real.kubeconfig if real else self.site_dir(site) / "kubeconfig"

    def kube_context(self, site: str) -> str:
        real = self.external.sites.get(site)
        return real.context if real else site

    def kubeapi_url(self, site: str) -> str:
        """The site's Kubernetes API: the external server, or the emulated one's URL."""
        real = self.external.sites.get(site)
        return real.server if real else self.url(site, "kubeapi")

    @property
    def karmada_kubeconfig(self) -> Path:
        real = self.external.karmada
        return real.kubeconfig if real else self.directory / "karmada.kubeconfig"

    @property
    def karmada_context(self) -> str:
        return self.external.karmada.context if self.external.karmada else "karmada"

    @property
    def karmada_url(self) -> str:
        real = self.external.karmada
        return real.server if real else local_url(self.ports["karmada"])

    @property
    def webhook_token(self) -> Path:
        return self.directory / "webhook.token"

    @property
    def notifications_url(self) -> str:
        """The simulated pager, ticket system and dead man's switch."""
        return local_url(self.ports["notifications"])

    @property
    def notifications_log(self) -> Path:
        return self.directory / "notifications.jsonl"

    @property
    def object_store(self) -> Path:
        return self.directory / "object-store"

    @property
    def site_file(self) -> Path:
        return self.directory / SITE_FILE

    def cluster_dir(self, site: str) -> Path:
        """Where the rendered site file and state of the site's one cluster (named after
        the site) are."""
        return local.cluster_dir(self.directory, site, site)

    def config_file(self, site: str) -> Path:
        return self.cluster_dir(site) / local.SITE_FILE

    def audit_log(self, site: str) -> Path:
        return self.cluster_dir(site) / local.AUDIT_LOG


# --------------------------------------------------------------------------- the site file


def merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """*base* with the tables of *extra* merged in, key by key (other values replaced)."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def fast_thresholds() -> dict[str, float]:
    """Every alert ``for`` duration threshold at its minimum (one minute), so alerts fire
    within a test's patience; ``gotthard rules thresholds`` lists them."""
    from gotthard.monitoring.components import THRESHOLDS

    return {t.name: 60.0 for t in THRESHOLDS if t.unit == "duration"}


def tuning(token: Path) -> dict[str, Any]:
    """What every sandbox tunes: intervals, thresholds, grouping, the webhooks' token."""
    return {
        "runbooks": {
            "token_file": str(token),
            # one node per cluster: the default 10% of a partition would refuse every drain
            "limits": {"max_partition_fraction": 1.0},
        },
        # the slow records (per-job Lustre IO) every few scrapes, not every 2 minutes
        "monitoring": {"thresholds": fast_thresholds(), "slow_rule_interval": "10s"},
        "deploy": {
            "prometheus": {
                "file_sd_dir": "",
                "scrape_interval": SCRAPE_INTERVAL,
                "scrape_timeout": SCRAPE_INTERVAL,
                "evaluation_interval": SCRAPE_INTERVAL,
                "retention": "2d",
                "alert_resend_delay": "1s",
            },
            # gossip fast; the peer timeout stays Alertmanager's 15 s: a peer waits that
            # long for the first one's notification (a runbook webhook that drains a node
            # takes a few seconds to answer) before it notifies itself
            "alertmanager": {
                "group_wait": "1s",
                "group_interval": "2s",
                "gossip_interval": "100ms",
                "pushpull_interval": "2s",
            },
        },
    }


def single_site(layout: SandboxLayout, *, exporter: bool, monitoring: bool) -> dict[str, Any]:
    """The site file of ``gotthard sandbox up``: site ``local``, cluster ``sandbox``, its
    Slurm, and (as asked) the exporter, or Prometheus, Alertmanager and the webhook."""
    site: dict[str, Any] = {"display_name": "Sandbox"}
    targets: dict[str, list[str]] = {}
    if exporter:
        targets[SLURM_EXPORTER.name] = [f"127.0.0.1:{layout.port('exporter')}"]
    if monitoring:
        site["prometheus_url"] = layout.prometheus_url
        targets[RUNBOOKS.name] = [f"127.0.0.1:{layout.port('runbooks')}"]
    site["clusters"] = {"sandbox": {"slurm_conf": str(layout.slurm_conf)}}
    document = {
        "site": "local",
        "cluster": "sandbox",
        "sites": {"local": site},
        "exporter": {
            "listen": f"127.0.0.1:{layout.port('exporter')}",
            "collectors": ["slurm"],
            "slurm": {
                "backend": "cli",
                "poll_interval_seconds": layout.exporter_poll_interval,
                # the fair-share tree exists only with slurmdbd
                "fairshare": layout.accounting,
            },
        },
        "runbooks": {
            "listen": f"127.0.0.1:{layout.port('runbooks')}",
            "mode": "dry-run",
            "default_cluster": "sandbox",
        },
        "deploy": {
            "prometheus": {"targets": {"sandbox": targets}},
            "alertmanager": {
                "webhook_url": f"{layout.runbooks_url}/alerts",
                "ports": {"local": layout.port("alertmanager")},
            },
        },
    }
    return merge(merge(tuning(layout.webhook_token), document), layout.site_settings)


def _site_model(top: Topology) -> dict[str, Any]:
    """``[sites]``: each site with one cluster of its own name (Slurm + Kubernetes)."""
    return {
        site: {
            "display_name": site.capitalize(),
            "prometheus_url": top.url(site, "prometheus"),
            "kubernetes_cluster": site,
            "clusters": {
                site: {
                    "slurm_conf": str(top.site_dir(site) / "slurm.conf"),
                    "karmada_members": [site],
                    "velero_namespace": "velero",
                    "kubernetes": {
                        "kubeconfig": str(top.kubeconfig(site)),
                        "context": top.kube_context(site),
                    },
                }
            },
        }
        for site in top.sites
    }


def _targets(top: Topology, site: str) -> dict[str, list[str]]:
    """The addresses of the site's roles, and of its emulated API server (an external
    one is not scraped: its /metrics needs credentials)."""
    targets = {role: [f"127.0.0.1:{top.port(site, role)}"] for role in top.roles}
    if site not in top.external.sites:
        targets[APISERVER] = [f"127.0.0.1:{top.port(site, 'kubeapi')}"]
    return targets


def _dr(top: Topology) -> dict[str, Any]:
    """``[dr]``: a replica per site, leader-elected on the first site's Lease, placing one
    failover-mode and one spread-mode service."""
    home = top.sites[0]
    shop, inference = APP_NAMESPACES["failover"], APP_NAMESPACES["spread"]

    def service(name: str, **more: str) -> dict[str, Any]:
        resources = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": APP_DEPLOYMENT[name]}]
        return {
            "name": name,
            "namespace": name,
            "primary_site": home,
            **more,
            "resources": resources,
        }

    schedule: dict[str, Any] = {
        "name": "nightly",
        "tier": "gold",
        "namespaces": [shop],
        "cron": top.backup_cron,
    }
    if top.backup_hooks:
        schedule["hooks"] = [dict(hook) for hook in top.backup_hooks]
    queries = {
        # what the sandbox measures: its emulated API servers and its real Slurm; no
        # ingress, GPU inventory or scheduled drill runs here: constants, so that only
        # the two real signals decide a site's health
        "slurm_up": "min(gotthard_slurm_up)",  # migrate-names: keep (a DR signal key)
        "ingress_up": "vector(1)",
        "gpu_capacity": "vector(8)",
        "drill_ok": "vector(1)",
    }
    if top.external:  # an external API server is not scraped
        queries["api_up"] = top.external.api_up or EXTERNAL_API_UP
    return {
        "poll_interval_seconds": 1,
        # the game day's every-minute backups end within seconds: follow them as often
        "follow_interval_seconds": 5,
        "api_attempts": 2,
        "api_backoff_seconds": 0.2,
        "api_timeout_seconds": 5,
        "backup_timeout_seconds": 120,
        "restore_timeout_seconds": 120,
        "lease": {"site": home, "duration_seconds": 6, "renew_seconds": 2},
        "tiers": {"gold": {"rpo_seconds": 86400, "rto_seconds": 600}},
        "schedules": [schedule],
        "drills": [
            {
                "site": home,
                "namespace": shop,
                "tier": "gold",
                "target_site": top.sites[-1],
                "cron": top.drill_cron,
            }
        ],
        "placement": {
            "enabled": True,
            "interval_seconds": 2,
            "failover_after": 2,
            "failback_cooldown_seconds": 20,
            "karmada": {
                "kubeconfig": str(top.karmada_kubeconfig),
                "context": top.karmada_context,
            },
            "services": [service(shop, tier="gold"), service(inference, mode="spread")],
            "queries": queries,
        },
    }


def multi_site(top: Topology) -> dict[str, Any]:
    """The site file of ``gotthard sandbox up --sites``: every site, its roles, the DR
    daemons' placement, the global view; ``site`` is the first site."""
    first = top.sites[0]
    document = {
        "site": first,
        "cluster": first,
        "sites": _site_model(top),
        "exporter": {"collectors": ["slurm"], "slurm": {"poll_interval_seconds": 2.0}},
        "runbooks": {"mode": top.runbooks_mode},
        "dr": _dr(top),
        "deploy": {
            "prometheus": {
                "targets": {site: _targets(top, site) for site in top.sites},
                "apiserver": {"scheme": "http", "scrape_interval": APISERVER_INTERVAL},
            },
            "federation": {"listen": f"127.0.0.1:{top.ports['global']}"},
            "alertmanager": {
                # alerts of no known site go to the first site's webhook
                "webhook_url": f"{top.url(first, RUNBOOKS.name)}/alerts",
                # pages, tickets and the Watchdog are delivered, to the simulated receiver
                "pager_urls": {site: f"{top.notifications_url}/pager/{site}" for site in top.sites},
                "pager_fallback_url": f"{top.notifications_url}/pager/default",
                "ticket_url": f"{top.notifications_url}/ticket",
                "efficiency_url": f"{top.notifications_url}/efficiency",
                "deadman_url": f"{top.notifications_url}/deadman",
                "ports": {site: top.port(site, "alertmanager") for site in top.sites},
                "cluster_ports": {
                    site: top.port(site, "alertmanager-cluster") for site in top.sites
                },
            },
        },
    }
    return merge(merge(tuning(top.webhook_token), document), top.settings)


def ensure_token(path: Path) -> None:
    """The bearer token Alertmanager sends to the webhooks: made once, private."""
    if not path.exists():
        write_private(path, secrets.token_hex(16) + "\n")


def write_site_file(path: Path, document: Mapping[str, Any]) -> None:
    """The sandbox's site file: what ``deploy render`` reads, regenerated on every ``up``."""
    header = (
        "# Written by `gotthard sandbox up`: this machine's site model, regenerated on every\n"
        "# `up`; `gotthard deploy render --target local` renders what the sandbox starts.\n"
    )
    path.write_text(header + dump_toml(document), encoding="utf-8")


# --------------------------------------------------------------------------- clusters


def seed_clusters(top: Topology) -> None:
    """Namespaces on every site's emulated cluster (Velero's, the Lease's, and each placed
    application's with its Deployment), and the application namespaces on the emulated
    Karmada API, so that drills and placement have something to work on. On an external
    cluster only what is missing of the Lease's and the applications' namespaces and
    Deployments is created (not Velero's, nor Nodes); nothing there is ever deleted."""
    apps = list(APP_NAMESPACES.values())
    deployments = {namespace: APP_DEPLOYMENT[namespace] for namespace in apps}
    for site in top.sites:
        real = top.external.sites.get(site)
        if real is not None:
            external.seed(real, ["gotthard", *apps], deployments)
            continue
        base = top.url(site, "kubeapi")
        for namespace in ("velero", "gotthard", *apps):
            _create(f"{base}/api/v1/namespaces", _namespace(namespace))
        for namespace in apps:
            url = f"{base}/apis/apps/v1/namespaces/{namespace}/deployments"
            _create(url, external.pause_deployment(namespace, APP_DEPLOYMENT[namespace]))
        # the compute node, for the webhook's cordon (where the emulator serves Nodes)
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE_NAME}}
        _create(f"{base}/api/v1/nodes", node, unserved_ok=True)
    if top.external.karmada is not None:
        external.seed(top.external.karmada, apps, {})
        return
    karmada = local_url(top.ports["karmada"])
    for namespace in apps:
        _create(f"{karmada}/api/v1/namespaces", _namespace(namespace))


def _namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def _create(url: str, body: Mapping[str, Any], *, unserved_ok: bool = False) -> None:
    """POST *body* to the emulated API at *url*; an existing object (409) is fine, and
    with *unserved_ok* so is a resource the API does not serve (404)."""
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10):
            return
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code != 409 and not (unserved_ok and exc.code == 404):
            raise SandboxError(f"POST {url} answered {exc.code}") from exc
    except OSError as exc:
        raise SandboxError(f"POST {url}: {exc}") from exc
