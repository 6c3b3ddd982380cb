"""The configuration files of the two-site sandbox: each site's ``gotthard.toml`` and
``prometheus.yml``, the global view's ``prometheus.yml`` and the Alertmanager
configuration both sites share.

Everything here renders text, except :func:`seed_clusters`, which puts the placed
applications on the emulated clusters once they run; :mod:`gotthard.sandbox.sites` decides
where the files go and starts the processes that read them.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gotthard.sandbox import external
from gotthard.sandbox.external import EXTERNAL_API_UP, ExternalClusters
from gotthard.sandbox.layout import local_url
from gotthard.sandbox.processes import SandboxError

#: The one compute node of every site (node names repeat across Cray clusters).
NODE_NAME = "nid001"
#: A second node of every site, drained for maintenance, without a slurmd.
MAINTENANCE_NODE = "nid002"
#: Default ports of the first site; the n-th site (from 0) adds ``100 * n``.
DEFAULT_SITE_PORTS: dict[str, int] = {
    "slurmctld": 6917,
    "slurmd": 6918,
    "exporter": 9977,
    "prometheus": 9190,
    "alertmanager": 9193,
    "alertmanager-cluster": 9194,
    "runbooks": 9978,
    "kubeapi": 6543,
    "dr": 9979,
}
#: Ports shared by the sites: the global view (a federating Prometheus) and Karmada's API.
DEFAULT_SHARED_PORTS: dict[str, int] = {"global": 9090, "karmada": 7443}
#: Seconds between two scrapes and rule evaluations (fast enough for failover tests).
SCRAPE_SECONDS = 2
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
    #: Per site: extra ``[exporter]`` keys and tables (not ``[exporter.slurm]``).
    exporter_toml: Mapping[str, str] = field(default_factory=dict)
    #: Per site: more scrape targets, job name -> ``HOST:PORT``.
    extra_targets: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: When the DR daemon backs up the failover service's namespace, and drills it.
    backup_cron: str = "0 2 * * *"
    drill_cron: str = "0 4 * * 0"
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
    def rules_dir(self) -> Path:
        return self.directory / "rules"

    @property
    def webhook_token(self) -> Path:
        return self.directory / "webhook.token"

    @property
    def object_store(self) -> Path:
        return self.directory / "object-store"

    def audit_log(self, site: str) -> Path:
        return self.site_dir(site) / "logs" / "runbooks-audit.jsonl"


# --------------------------------------------------------------------------- gotthard.toml


def _q(value: object) -> str:
    """A TOML basic string (JSON's escaping is TOML's for these values)."""
    return json.dumps(str(value))


def _site_model(top: Topology) -> list[str]:
    """``[sites.*]``: each site with one cluster of its own name (Slurm + Kubernetes)."""
    lines: list[str] = []
    for site in top.sites:
        slurm_conf = top.site_dir(site) / "slurm.conf"
        lines += [
            f"[sites.{site}]",
            f"display_name = {_q(site.capitalize())}",
            f"prometheus_url = {_q(top.url(site, 'prometheus'))}",
            f"kubernetes_cluster = {_q(site)}",
            "",
            f"[sites.{site}.clusters.{site}]",
            f"slurm_conf = {_q(slurm_conf)}",
            f"karmada_members = [{_q(site)}]",
            'velero_namespace = "velero"',
            "",
            f"[sites.{site}.clusters.{site}.kubernetes]",
            f"kubeconfig = {_q(top.kubeconfig(site))}",
            f"context = {_q(top.kube_context(site))}",
            "",
        ]
    return lines


def _dr(top: Topology, site: str) -> list[str]:
    """``[dr]``: a replica per site, leader-elected on the first site's Lease, placing one
    failover-mode and (when the settings know modes) one spread-mode service."""
    home = top.sites[0]
    shop, inference = APP_NAMESPACES["failover"], APP_NAMESPACES["spread"]
    lines = [
        "[dr]",
        f"jobstore_url = {_q('sqlite:///' + str(top.site_dir(site) / 'dr-jobs.sqlite'))}",
        f'listen = "127.0.0.1:{top.port(site, "dr")}"',
        "poll_interval_seconds = 1",
        "api_attempts = 2",
        "api_backoff_seconds = 0.2",
        "api_timeout_seconds = 5",
        "backup_timeout_seconds = 120",
        "restore_timeout_seconds = 120",
        "",
        "[dr.lease]",
        f"site = {_q(home)}",
        "duration_seconds = 6",
        "renew_seconds = 2",
        "",
        "[dr.tiers.gold]",
        "rpo_seconds = 86400",
        "rto_seconds = 600",
        "",
        "[[dr.schedules]]",
        'name = "nightly"',
        'tier = "gold"',
        f"namespaces = [{_q(shop)}]",
        f"cron = {_q(top.backup_cron)}",
        "",
        "[[dr.drills]]",
        f"site = {_q(home)}",
        f"namespace = {_q(shop)}",
        'tier = "gold"',
        f"target_site = {_q(top.sites[-1])}",
        f"cron = {_q(top.drill_cron)}",
        "",
        "[dr.placement]",
        "enabled = true",
        "interval_seconds = 2",
        "failover_after = 2",
        "failback_cooldown_seconds = 20",
        f"state_file = {_q(top.site_dir(site) / 'dr-placement.json')}",
        "",
        "[dr.placement.karmada]",
        f"kubeconfig = {_q(top.karmada_kubeconfig)}",
        f"context = {_q(top.karmada_context)}",
        "",
        "[[dr.placement.services]]",
        f"name = {_q(shop)}",
        f"namespace = {_q(shop)}",
        f"primary_site = {_q(home)}",
        'tier = "gold"',
        f'resources = [{{ apiVersion = "apps/v1", kind = "Deployment", name = "{APP_DEPLOYMENT[shop]}" }}]',  # noqa: E501
        "",
        "[[dr.placement.services]]",
        f"name = {_q(inference)}",
        f"namespace = {_q(inference)}",
        f"primary_site = {_q(home)}",
        'mode = "spread"',
        f'resources = [{{ apiVersion = "apps/v1", kind = "Deployment", name = "{APP_DEPLOYMENT[inference]}" }}]',  # noqa: E501
        "",
    ]
    lines += [
        "[dr.placement.queries]",
        "# what the sandbox measures: its emulated API server and its real Slurm",
        _api_up(top),
        'slurm_up = "min(slurm_up)"',
        "# no ingress, GPU inventory or scheduled drill runs here: constants, so that only",
        "# the two real signals above decide a site's health",
        'ingress_up = "vector(1)"',
        'gpu_capacity = "vector(8)"',
        'drill_ok = "vector(1)"',
        "",
    ]
    return lines


def _api_up(top: Topology) -> str:
    """The ``api_up`` query line: the emulated API servers' scrape; with an external
    cluster (not scraped) the site file's query, or one that counts it as up."""
    if not top.external:
        return """api_up = 'min(up{job="apiserver"})'"""
    query = top.external.api_up or EXTERNAL_API_UP
    return f"# an external API server is not scraped\napi_up = {_q(query)}"


def fast_thresholds() -> dict[str, float]:
    """Every alert ``for`` duration threshold at its minimum (one minute), so alerts fire
    within a test's patience; ``gotthard rules thresholds`` lists them."""
    from gotthard.monitoring.components import THRESHOLDS

    return {t.name: 60.0 for t in THRESHOLDS if t.unit == "duration"}


def gotthard_toml(top: Topology, site: str, *, exporter_poll_interval: float = 2.0) -> str:
    """The site's ``gotthard.toml``: the full site model, with ``site = "<site>"``."""
    exporter_extra = top.exporter_toml.get(site, "")
    lines = [
        "# Written by gotthard sandbox up --sites; regenerated on every `up`.",
        f"site = {_q(site)}",
        f"cluster = {_q(site)}",
        "",
        *_site_model(top),
        "[exporter]",
        f'listen = "127.0.0.1:{top.port(site, "exporter")}"',
        exporter_extra.strip() if exporter_extra.strip() else 'collectors = ["slurm"]',
        "",
        "[exporter.slurm]",
        'backend = "cli"',
        f"poll_interval_seconds = {float(exporter_poll_interval)}",
        "",
        "[runbooks]",
        f'listen = "127.0.0.1:{top.port(site, "runbooks")}"',
        f"token_file = {_q(top.webhook_token)}",
        f"mode = {_q(top.runbooks_mode)}",
        f"audit_log = {_q(top.audit_log(site))}",
        f"kill_switch_file = {_q(top.site_dir(site) / 'runbooks.disabled')}",
        "",
        "[runbooks.limits]",
        "# one node per cluster: the default 10% of a partition would refuse every drain",
        "max_partition_fraction = 1.0",
        "",
        *_dr(top, site),
        "[monitoring.thresholds]",
        *(f"{name} = {value}" for name, value in sorted(fast_thresholds().items())),
    ]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- Prometheus


def _job(name: str, target: str, labels: Mapping[str, str], **options: Any) -> dict[str, Any]:
    return {
        "job_name": name,
        **options,
        "static_configs": [{"targets": [target], "labels": dict(labels)}],
    }


def site_prometheus_config(top: Topology, site: str) -> dict[str, Any]:
    """A site's Prometheus: external labels site/cluster, its exporter, its emulated API
    server (job ``apiserver``), its DR replica, alerts to every site's Alertmanager."""
    labels = {"site": site, "cluster": site}
    interval = f"{SCRAPE_SECONDS}s"
    # an external API server is not scraped: its /metrics needs credentials
    apiserver = [] if site in top.external.sites else ["apiserver"]
    jobs = [
        _job("gotthard", f"127.0.0.1:{top.port(site, 'exporter')}", labels),
        *(
            # scraped twice per placement evaluation: the controller reads an API health
            # at most a second old
            _job(
                job,
                f"127.0.0.1:{top.port(site, 'kubeapi')}",
                labels,
                metrics_path="/metrics",
                scrape_interval="1s",
                scrape_timeout="1s",
            )
            for job in apiserver
        ),
        _job(
            "gotthard-dr",
            f"127.0.0.1:{top.port(site, 'dr')}",
            labels,
            # the daemon's series name the site they describe; in the sandbox each site
            # has one cluster of its own name, so that site is their cluster too (the
            # webhook that owns it acts on their alerts)
            honor_labels=True,
            metric_relabel_configs=[
                {"source_labels": ["site"], "regex": "(.+)", "target_label": "cluster"}
            ],
        ),
        *(
            _job(job, target, labels)
            for job, target in sorted(top.extra_targets.get(site, {}).items())
        ),
    ]
    rules = top.rules_dir
    return {
        "global": {
            "scrape_interval": interval,
            "scrape_timeout": interval,
            "evaluation_interval": interval,
            "external_labels": labels,
        },
        "rule_files": [str(rules / "recording.rules.yml"), str(rules / "alerts.rules.yml")],
        "alerting": {
            "alertmanagers": [
                {
                    "static_configs": [
                        {"targets": [f"127.0.0.1:{top.port(s, 'alertmanager')}" for s in top.sites]}
                    ]
                }
            ]
        },
        "scrape_configs": jobs,
    }


def global_prometheus_config(top: Topology) -> dict[str, Any]:
    """The global view: federates every series of each site's Prometheus (``/federate``,
    ``honor_labels``), so site and cluster stay what the site said."""
    interval = f"{SCRAPE_SECONDS}s"
    return {
        "global": {"scrape_interval": interval, "scrape_timeout": interval},
        "scrape_configs": [
            {
                "job_name": f"federate-{site}",
                "honor_labels": True,
                "metrics_path": "/federate",
                "params": {"match[]": ['{__name__=~".+"}']},
                "static_configs": [{"targets": [f"127.0.0.1:{top.port(site, 'prometheus')}"]}],
            }
            for site in top.sites
        ],
    }


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
