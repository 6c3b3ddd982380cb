"""``gotthard deploy render --target thanos``: the global view of a production site.

Each Prometheus of the site model (a cluster's ``prometheus_url``, else its site's) runs
as an HA pair with a Thanos sidecar; one Thanos Query fans out over every sidecar's gRPC
Store API and deduplicates the pairs on the ``replica`` external label. Alertmanagers of
all sites form one gossip cluster and every Prometheus sends to all of them.

What is written, for the two ways a site runs Prometheus:

* prometheus-operator (kube-prometheus): merge patches of the ``Prometheus`` custom
  resource (``spec.externalLabels``, ``spec.replicaExternalLabelName``, ``spec.thanos``)
  and of the ``Alertmanager`` resource (``spec.additionalPeers``), and the Secret of the
  other sites' Alertmanagers (``spec.additionalAlertManagerConfigs``);
* plain Prometheus (Debian packages, systemd): per replica the ``global`` and ``alerting``
  parts of prometheus.yml, the Prometheus and sidecar flags and Alertmanager's ``ARGS``;
* both: the Thanos Query Deployment and Service, and an object store template.

Thanos itself does not run in the sandbox: its configuration is checked here with
promtool and the Kubernetes schemas, nothing more.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from gotthard.config import Config
from gotthard.deploy.kubernetes import CONTAINER_SECURITY, spread_over_nodes
from gotthard.deploy.kubernetes import labels as gotthard_labels
from gotthard.deploy.manifest import RenderError, dump, dump_all
from gotthard.deploy.settings import ThanosDeploy

#: The external label that tells the replicas of an HA pair apart; Query and Alertmanager
#: drop it (deduplication, one notification).
REPLICA_LABEL = "replica"
#: Secret keys the Prometheus resource reads.
OBJSTORE_KEY = "objstore.yml"
ALERTMANAGERS_SECRET = "thanos-additional-alertmanagers"
ALERTMANAGERS_KEY = "alertmanager-configs.yaml"
QUERY_NAME = "thanos-query"
#: Thanos' default HTTP port (Query's UI and API, the sidecar's metrics).
HTTP_PORT = 10902
#: Debian's Prometheus storage (``/etc/default/prometheus``), where the sidecar reads blocks.
DEBIAN_TSDB = "/var/lib/prometheus/metrics2"
#: Where a plain sidecar finds the object store configuration.
OBJSTORE_FILE = "/etc/thanos/objstore.yml"
#: Query runs as nobody: it keeps no state.
QUERY_UID = 65534


@dataclass(frozen=True)
class SitePrometheus:
    """One Prometheus (an HA pair) of the site model and the clusters it scrapes."""

    site: str
    clusters: tuple[str, ...]
    url: str
    #: It is a cluster's own Prometheus rather than the site's.
    own: bool

    @property
    def name(self) -> str:
        """``SITE``, or ``SITE-CLUSTER`` for a cluster's own Prometheus."""
        return f"{self.site}-{self.clusters[0]}" if self.own else self.site

    @property
    def external_labels(self) -> dict[str, str]:
        """``site``, and ``cluster`` when it scrapes one cluster only: a Prometheus of
        several clusters leaves ``cluster`` to each series (scrape relabelling)."""
        out = {"site": self.site}
        if len(self.clusters) == 1:
            out["cluster"] = self.clusters[0]
        return out

    @property
    def host(self) -> str:
        return url_host(self.url)


def url_host(url: str) -> str:
    """The host of *url* as it goes before ``:PORT`` (IPv6 in brackets); "" if none."""
    host = urlsplit(url).hostname or ""
    return f"[{host}]" if ":" in host else host


def prometheuses(cfg: Config) -> list[SitePrometheus]:
    """Every Prometheus of the site model, in site and cluster order.

    A site whose clusters have no Prometheus at all cannot join the global view: that is
    a :class:`RenderError` naming the key to set."""
    found = []
    for site_name, site in cfg.site_model.items():
        by_url: dict[str, list[str]] = {}
        for cluster_name in site.clusters:
            url = site.prometheus_of(cluster_name)
            if not url:
                raise RenderError(
                    f"sites.{site_name}.clusters.{cluster_name}: no prometheus_url, and the"
                    f" site has none; the global view needs every cluster's Prometheus"
                    f" (set sites.{site_name}.prometheus_url)"
                )
            by_url.setdefault(url, []).append(cluster_name)
        for url, clusters in by_url.items():
            if not url_host(url):
                raise RenderError(f"sites.{site_name}: {url!r} is not an http(s) URL with a host")
            own = url != site.prometheus_url
            found.append(SitePrometheus(site_name, tuple(clusters), url, own))
    if not found:
        raise RenderError("the site model names no cluster: nothing to render")
    names = [p.name for p in found]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise RenderError(f"two Prometheus would both be named {', '.join(twice)}; rename one")
    return found


def store_endpoints(proms: list[SitePrometheus], settings: ThanosDeploy) -> dict[str, list[str]]:
    """Prometheus name -> the Store API addresses of its sidecars.

    ``[deploy.thanos.endpoints]`` where given, else the Prometheus' host at the sidecar's
    gRPC port. Two Prometheus deriving the same address (one host) cannot both be reached
    there: that is a :class:`RenderError` asking for explicit endpoints."""
    names = [p.name for p in proms]
    unknown = sorted(set(settings.endpoints) - set(names))
    if unknown:
        raise RenderError(
            f"deploy.thanos.endpoints: no Prometheus named {', '.join(unknown)};"
            f" known: {', '.join(names)}"
        )
    out: dict[str, list[str]] = {}
    seen: dict[str, str] = {}
    for prom in proms:
        addresses = settings.endpoints.get(prom.name) or [
            f"{prom.host}:{settings.sidecar_grpc_port}"
        ]
        for address in addresses:
            if address in seen:
                raise RenderError(
                    f"{seen[address]} and {prom.name} would both be reached at {address}"
                    f" (one host); set [deploy.thanos.endpoints] for them"
                )
            seen[address] = prom.name
        out[prom.name] = list(addresses)
    return out


def alertmanager_hosts(
    cfg: Config, proms: list[SitePrometheus], settings: ThanosDeploy
) -> dict[str, list[str]]:
    """Site -> its Alertmanager hosts (``[deploy.thanos.alertmanager_hosts]``, else the
    host of the site's Prometheus)."""
    sites = list(dict.fromkeys(p.site for p in proms))
    unknown = sorted(set(settings.alertmanager_hosts) - set(sites))
    if unknown:
        raise RenderError(
            f"deploy.thanos.alertmanager_hosts: {', '.join(unknown)} is not a site"
            f" of the site model; known: {', '.join(sites)}"
        )
    out = {}
    for site in sites:
        first = next(p for p in proms if p.site == site)
        derived = url_host(cfg.site_model[site].prometheus_url or first.url)
        out[site] = list(settings.alertmanager_hosts.get(site) or [derived])
    return out


def _addresses(hosts: dict[str, list[str]], port: int, sites: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(f"{h}:{port}" for site in sites for h in hosts[site]))


# --- plain Prometheus --------------------------------------------------------------------------


def prometheus_fragment(
    prom: SitePrometheus, replica: int, alertmanagers: list[str]
) -> dict[str, Any]:
    """The ``global`` and ``alerting`` parts of prometheus.yml for one replica."""
    return {
        "global": {"external_labels": {**prom.external_labels, REPLICA_LABEL: str(replica)}},
        "alerting": {
            # the pair's alerts differ only in the replica label: dropping it makes them one
            "alert_relabel_configs": [{"action": "labeldrop", "regex": REPLICA_LABEL}],
            "alertmanagers": [{"static_configs": [{"targets": alertmanagers}]}],
        },
    }


def sidecar_args(settings: ThanosDeploy) -> list[str]:
    """``thanos sidecar`` next to a Debian Prometheus on the same host."""
    return [
        "sidecar",
        f"--tsdb.path={DEBIAN_TSDB}",
        "--prometheus.url=http://localhost:9090",
        f"--grpc-address=0.0.0.0:{settings.sidecar_grpc_port}",
        f"--http-address=0.0.0.0:{HTTP_PORT}",
        f"--objstore.config-file={OBJSTORE_FILE}",
    ]


#: Prometheus flags a sidecar that uploads blocks needs: 2 h blocks, no local compaction
#: (keep ``--storage.tsdb.retention.time`` at 6 h or more: blocks wait there for upload).
PROMETHEUS_ARGS = ("--storage.tsdb.min-block-duration=2h", "--storage.tsdb.max-block-duration=2h")


def alertmanager_args(peers: list[str], settings: ThanosDeploy) -> list[str]:
    """Flags of every Alertmanager of every site: one gossip cluster, the same peer list
    everywhere (listing itself does no harm)."""
    listen = f"--cluster.listen-address=0.0.0.0:{settings.alertmanager_cluster_port}"
    return [listen, *(f"--cluster.peer={peer}" for peer in peers)]


# --- prometheus-operator ------------------------------------------------------------------------


def prometheus_patch(prom: SitePrometheus, settings: ThanosDeploy) -> dict[str, Any]:
    """Merge patch of the ``Prometheus`` resource: HA pair, labels, sidecar, all sites'
    Alertmanagers. The operator names each replica by its pod and drops that label from
    alerts itself."""
    return {
        "spec": {
            "replicas": settings.prometheus_replicas,
            "replicaExternalLabelName": REPLICA_LABEL,
            "externalLabels": prom.external_labels,
            "additionalAlertManagerConfigs": {
                "name": ALERTMANAGERS_SECRET,
                "key": ALERTMANAGERS_KEY,
            },
            "thanos": {
                "objectStorageConfig": {"name": settings.objstore_secret, "key": OBJSTORE_KEY}
            },
        }
    }


def alertmanager_patch(others: list[str]) -> dict[str, Any]:
    """Merge patch of the ``Alertmanager`` resource: the other sites' cluster peers (the
    operator already peers the replicas of its own resource)."""
    return {"spec": {"additionalPeers": others}}


def _meta(cfg: Config, name: str, settings: ThanosDeploy, component: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": settings.namespace,
        "labels": {
            **gotthard_labels(cfg),
            "app.kubernetes.io/name": "thanos",
            "app.kubernetes.io/component": component,
        },
    }


def alertmanagers_secret(
    cfg: Config, alertmanagers: list[str], settings: ThanosDeploy
) -> dict[str, Any]:
    configs = [{"static_configs": [{"targets": alertmanagers}]}]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(cfg, ALERTMANAGERS_SECRET, settings, "alertmanagers"),
        "type": "Opaque",
        "stringData": {ALERTMANAGERS_KEY: dump(configs)},
    }


# --- Thanos Query -----------------------------------------------------------------------------


QUERY_SELECTOR = {"app.kubernetes.io/name": "thanos", "app.kubernetes.io/component": "query"}


def query_args(endpoints: dict[str, list[str]], settings: ThanosDeploy) -> list[str]:
    return [
        "query",
        f"--http-address=0.0.0.0:{HTTP_PORT}",
        f"--grpc-address=0.0.0.0:{settings.sidecar_grpc_port}",
        f"--query.replica-label={REPLICA_LABEL}",
        *(f"--endpoint={a}" for addresses in endpoints.values() for a in addresses),
    ]


def query_deployment(
    cfg: Config, endpoints: dict[str, list[str]], settings: ThanosDeploy
) -> dict[str, Any]:
    probe = {"httpGet": {"path": "/-/healthy", "port": "http"}, "periodSeconds": 30}
    container = {
        "name": "query",
        "image": settings.image,
        "args": query_args(endpoints, settings),
        "ports": [
            {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
            {"name": "grpc", "containerPort": settings.sidecar_grpc_port, "protocol": "TCP"},
        ],
        "livenessProbe": probe,
        "readinessProbe": {**probe, "httpGet": {"path": "/-/ready", "port": "http"}},
        "resources": {
            "requests": {"cpu": "100m", "memory": "256Mi"},
            "limits": {"cpu": "2", "memory": "2Gi"},
        },
        "securityContext": CONTAINER_SECURITY,
    }
    pod = {
        "automountServiceAccountToken": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": QUERY_UID,
            "runAsGroup": QUERY_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "affinity": spread_over_nodes(QUERY_SELECTOR),
        "containers": [container],
    }
    meta = _meta(cfg, QUERY_NAME, settings, "query")
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": settings.query_replicas,
            "selector": {"matchLabels": QUERY_SELECTOR},
            "template": {"metadata": {"labels": meta["labels"]}, "spec": pod},
        },
    }


def query_service(cfg: Config, settings: ThanosDeploy) -> dict[str, Any]:
    port = settings.sidecar_grpc_port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(cfg, QUERY_NAME, settings, "query"),
        "spec": {
            "selector": QUERY_SELECTOR,
            "ports": [
                {"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"},
                {"name": "grpc", "port": port, "targetPort": "grpc", "protocol": "TCP"},
            ],
        },
    }


# --- object store -----------------------------------------------------------------------------

#: The template's settings: every value a placeholder.
OBJSTORE_BODY = """\
type: S3
config:
  bucket: REPLACE_BUCKET
  endpoint: REPLACE_HOST:443
  region: REPLACE_REGION
  access_key: REPLACE_ACCESS_KEY
  secret_key: REPLACE_SECRET_KEY
"""


def objstore_template(settings: ThanosDeploy) -> str:
    """``objstore.yml`` with placeholders: the credentials go only into the Secret."""
    secret = f"{settings.objstore_secret} --from-file={OBJSTORE_KEY}=COPY"
    return f"""\
# Rendered by `gotthard deploy render --target thanos`: the object store of the sidecars
# (Thanos' S3 client; see the objstore documentation for GCS, Azure, Swift). A template:
# replace each REPLACE_ value in a copy, then make it the Secret the Prometheus resources read
#   kubectl -n {settings.namespace} create secret generic {secret}
# and delete the copy. Leave access_key/secret_key out to use the pod's own identity
# (IAM role, workload identity); never commit the filled-in copy.
{OBJSTORE_BODY}"""


# --- the whole output -------------------------------------------------------------------------


def _header(*lines: str) -> str:
    return "".join(
        f"# {line}\n" if line else "#\n"
        for line in ("Rendered by `gotthard deploy render --target thanos`.", *lines)
    )


def render(cfg: Config, settings: ThanosDeploy) -> dict[str, str]:
    """Relative path -> text (layout in docs/multisite.md)."""
    proms = prometheuses(cfg)
    endpoints = store_endpoints(proms, settings)
    hosts = alertmanager_hosts(cfg, proms, settings)
    alertmanagers = _addresses(hosts, settings.alertmanager_port, hosts)
    peers = _addresses(hosts, settings.alertmanager_cluster_port, hosts)
    ns = settings.namespace
    files = {
        "thanos-query.yaml": _header(
            "The global view: apply at the site that serves it (kubectl apply -f).",
            f"Query deduplicates the HA pairs on the `{REPLICA_LABEL}` label.",
        )
        + dump_all([query_deployment(cfg, endpoints, settings), query_service(cfg, settings)]),
        "alertmanagers-secret.yaml": _header(
            "Every site's Alertmanagers, for spec.additionalAlertManagerConfigs: apply in",
            f"the namespace of each Prometheus resource ({ns}) at every site.",
        )
        + dump(alertmanagers_secret(cfg, alertmanagers, settings)),
        OBJSTORE_KEY: objstore_template(settings),
        "plain/thanos-sidecar.args": _header(
            "Arguments of `thanos` next to a Debian Prometheus, one per line.",
        )
        + "\n".join(sidecar_args(settings))
        + "\n",
        "plain/prometheus.default": _header(
            "Merge into /etc/default/prometheus: 2 h blocks the sidecar uploads, no local",
            "compaction; keep --storage.tsdb.retention.time at 6h or more (3 blocks).",
        )
        + f'ARGS="{" ".join(PROMETHEUS_ARGS)}"\n',
        "plain/prometheus-alertmanager.default": _header(
            "Merge into /etc/default/prometheus-alertmanager on every Alertmanager host of",
            "every site: one cluster, so an alert seen at both sites notifies once.",
        )
        + f'ARGS="{" ".join(alertmanager_args(peers, settings))}"\n',
    }
    for prom in proms:
        for replica in range(settings.prometheus_replicas):
            files[f"plain/prometheus-{prom.name}-{replica}.yml"] = _header(
                f"The global and alerting sections of prometheus.yml of replica {replica}",
                f"of the Prometheus at {prom.url} (site {prom.site}).",
            ) + dump(prometheus_fragment(prom, replica, alertmanagers))
        files[f"patches/prometheus-{prom.name}.yaml"] = _header(
            f"The Prometheus resource of {prom.url} (site {prom.site}):",
            f"kubectl -n {ns} patch prometheus {settings.prometheus_name} --type merge \\",
            f"  --patch-file patches/prometheus-{prom.name}.yaml",
        ) + dump(prometheus_patch(prom, settings))
    for site in hosts:
        others = _addresses(
            hosts, settings.alertmanager_cluster_port, [s for s in hosts if s != site]
        )
        files[f"patches/alertmanager-{site}.yaml"] = _header(
            f"The Alertmanager resource of site {site}:",
            f"kubectl -n {ns} patch alertmanager {settings.alertmanager_name} --type merge \\",
            f"  --patch-file patches/alertmanager-{site}.yaml",
        ) + dump(alertmanager_patch(others))
    return files
