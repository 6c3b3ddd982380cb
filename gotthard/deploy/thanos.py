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
* both: the Thanos Query Deployment and Service, Thanos Ruler (a Deployment, its Service
  and a ConfigMap of the global alerting groups, placement ``global``: the rules that
  need both sites' data, evaluated against Query and sent to every site's
  Alertmanagers; the site Prometheus load only the site groups), and an object store
  template.

Thanos itself does not run in the sandbox: its configuration is checked here with
promtool and the Kubernetes schemas, nothing more.
"""

from __future__ import annotations

from typing import Any

from gotthard.config import Config
from gotthard.deploy.alerting import cluster_flags
from gotthard.deploy.kubernetes import CONTAINER_SECURITY, spread_over_nodes
from gotthard.deploy.kubernetes import labels as gotthard_labels
from gotthard.deploy.manifest import RenderError, dump, dump_all
from gotthard.deploy.prometheus import alerting_section, rule_documents
from gotthard.deploy.settings import ThanosDeploy
from gotthard.deploy.topology import SitePrometheus, alertmanagers, prometheuses
from gotthard.monitoring.deliver import GLOBAL_ALERTS_FILE

#: The external label that tells the replicas of an HA pair apart; Query and Alertmanager
#: drop it (deduplication, one notification).
REPLICA_LABEL = "replica"
#: Secret keys the Prometheus resource reads.
OBJSTORE_KEY = "objstore.yml"
ALERTMANAGERS_SECRET = "thanos-additional-alertmanagers"
ALERTMANAGERS_KEY = "alertmanager-configs.yaml"
QUERY_NAME = "thanos-query"
#: The ConfigMap of the global alerting groups, mounted at RULES_MOUNT in the ruler.
RULES_CONFIGMAP = "gotthard-global-rules"
RULES_MOUNT = "/etc/thanos/rules"
RULER_DATA = "/var/thanos/rule"
#: Thanos' default HTTP port (Query's UI and API, the sidecar's metrics).
HTTP_PORT = 10902
#: Debian's Prometheus storage (``/etc/default/prometheus``), where the sidecar reads blocks.
DEBIAN_TSDB = "/var/lib/prometheus/metrics2"
#: Where a plain sidecar finds the object store configuration.
OBJSTORE_FILE = "/etc/thanos/objstore.yml"
#: Query runs as nobody: it keeps no state.
QUERY_UID = 65534
#: Where every Thanos pod mounts the gRPC TLS Secret, and the files in it.
TLS_MOUNT = "/etc/thanos/tls"
TLS_CERT, TLS_KEY, TLS_CA = "tls.crt", "tls.key", "ca.crt"
#: Where the store gateway and the compactor mount the object store Secret.
OBJSTORE_MOUNT = "/etc/thanos/objstore"
STORE_DATA = "/var/thanos/store"
COMPACT_DATA = "/var/thanos/compact"


def grpc_server_tls_args(directory: str = TLS_MOUNT) -> list[str]:
    """Flags of a gRPC Store API server that only admits clients with a certificate of
    the site CA (the Store API crosses sites)."""
    return [
        f"--grpc-server-tls-cert={directory}/{TLS_CERT}",
        f"--grpc-server-tls-key={directory}/{TLS_KEY}",
        f"--grpc-server-tls-client-ca={directory}/{TLS_CA}",
    ]


def grpc_client_tls_args(directory: str = TLS_MOUNT) -> list[str]:
    """Flags of Query's gRPC client: TLS, the server checked against the CA, its own
    certificate presented."""
    return [
        "--grpc-client-tls-secure",
        f"--grpc-client-tls-cert={directory}/{TLS_CERT}",
        f"--grpc-client-tls-key={directory}/{TLS_KEY}",
        f"--grpc-client-tls-ca={directory}/{TLS_CA}",
    ]


def _tls_volume(settings: ThanosDeploy) -> dict[str, Any]:
    return {"name": "grpc-tls", "secret": {"secretName": settings.grpc_tls_secret}}


_TLS_MOUNT = {"name": "grpc-tls", "mountPath": TLS_MOUNT, "readOnly": True}


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


# --- plain Prometheus --------------------------------------------------------------------------


def prometheus_fragment(prom: SitePrometheus, replica: int, targets: list[str]) -> dict[str, Any]:
    """The ``global`` and ``alerting`` parts of prometheus.yml for one replica; the pair's
    alerts differ only in the replica label: dropping it makes them one."""
    return {
        "global": {"external_labels": {**prom.external_labels, REPLICA_LABEL: str(replica)}},
        "alerting": alerting_section(targets, drop=(REPLICA_LABEL,)),
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
        *grpc_server_tls_args(),
    ]


#: Prometheus flags a sidecar that uploads blocks needs: 2 h blocks, no local compaction
#: (keep ``--storage.tsdb.retention.time`` at 6 h or more: blocks wait there for upload).
PROMETHEUS_ARGS = ("--storage.tsdb.min-block-duration=2h", "--storage.tsdb.max-block-duration=2h")


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
                "objectStorageConfig": {"name": settings.objstore_secret, "key": OBJSTORE_KEY},
                # the sidecar's Store API is reached from the other site: mutual TLS
                "grpcServerTlsConfig": {
                    "cert": {"secret": {"name": settings.grpc_tls_secret, "key": TLS_CERT}},
                    "keySecret": {"name": settings.grpc_tls_secret, "key": TLS_KEY},
                    "ca": {"secret": {"name": settings.grpc_tls_secret, "key": TLS_CA}},
                },
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


def _selector(component: str) -> dict[str, str]:
    """The labels that select the pods of a Thanos component."""
    return {"app.kubernetes.io/name": "thanos", "app.kubernetes.io/component": component}


def query_args(endpoints: dict[str, list[str]], settings: ThanosDeploy) -> list[str]:
    """Every sidecar and the store gateway (the blocks in the object store), over mutual
    TLS."""
    store = f"thanos-store.{settings.namespace}.svc:{settings.sidecar_grpc_port}"
    return [
        "query",
        f"--http-address=0.0.0.0:{HTTP_PORT}",
        f"--grpc-address=0.0.0.0:{settings.sidecar_grpc_port}",
        f"--query.replica-label={REPLICA_LABEL}",
        *grpc_server_tls_args(),
        *grpc_client_tls_args(),
        *(f"--endpoint={a}" for addresses in endpoints.values() for a in addresses),
        f"--endpoint={store}",
    ]


def thanos_deployment(
    cfg: Config,
    settings: ThanosDeploy,
    component: str,
    args: list[str],
    replicas: int,
    resources: dict[str, dict[str, str]],
    **extra: list[dict[str, Any]],
) -> dict[str, Any]:
    """A stateless Thanos component (``thanos-<component>``), spread over nodes, its HTTP
    and gRPC ports probed; *extra* holds the container's ``env`` and ``volumeMounts`` and
    the pod's ``volumes``."""
    probe = {"httpGet": {"path": "/-/healthy", "port": "http"}, "periodSeconds": 30}
    container: dict[str, Any] = {
        "name": component,
        "image": settings.image,
        "args": args,
        **{key: value for key, value in extra.items() if key == "env"},
        "ports": [
            {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
            {"name": "grpc", "containerPort": settings.sidecar_grpc_port, "protocol": "TCP"},
        ],
        "livenessProbe": probe,
        "readinessProbe": {**probe, "httpGet": {"path": "/-/ready", "port": "http"}},
        "resources": resources,
        "securityContext": CONTAINER_SECURITY,
        **{key: value for key, value in extra.items() if key == "volumeMounts"},
    }
    selector = _selector(component)
    pod = {
        "automountServiceAccountToken": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": QUERY_UID,
            "runAsGroup": QUERY_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "affinity": spread_over_nodes(selector),
        "containers": [container],
        **{key: value for key, value in extra.items() if key == "volumes"},
    }
    meta = _meta(cfg, f"thanos-{component}", settings, component)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": meta["labels"]}, "spec": pod},
        },
    }


def query_deployment(
    cfg: Config, endpoints: dict[str, list[str]], settings: ThanosDeploy
) -> dict[str, Any]:
    resources = {
        "requests": {"cpu": "100m", "memory": "256Mi"},
        "limits": {"cpu": "2", "memory": "2Gi"},
    }
    args = query_args(endpoints, settings)
    return thanos_deployment(
        cfg,
        settings,
        "query",
        args,
        settings.query_replicas,
        resources,
        volumeMounts=[_TLS_MOUNT],
        volumes=[_tls_volume(settings)],
    )


def thanos_service(cfg: Config, settings: ThanosDeploy, component: str) -> dict[str, Any]:
    """The HTTP and gRPC ports of the pods of ``thanos-<component>``."""
    port = settings.sidecar_grpc_port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(cfg, f"thanos-{component}", settings, component),
        "spec": {
            "selector": _selector(component),
            "ports": [
                {"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"},
                {"name": "grpc", "port": port, "targetPort": "grpc", "protocol": "TCP"},
            ],
        },
    }


def query_service(cfg: Config, settings: ThanosDeploy) -> dict[str, Any]:
    return thanos_service(cfg, settings, "query")


# --- Thanos Ruler -----------------------------------------------------------------------------


def ruler_args(cfg: Config, alertmanagers: list[str], settings: ThanosDeploy) -> list[str]:
    """``thanos rule``: the global groups, evaluated against Query (which deduplicates
    the HA pairs), every site's Alertmanagers; each replica labels its alerts with its
    pod name and drops that label before sending, so the replicas' alerts are one."""
    return [
        "rule",
        f"--http-address=0.0.0.0:{HTTP_PORT}",
        f"--grpc-address=0.0.0.0:{settings.sidecar_grpc_port}",
        f"--data-dir={RULER_DATA}",
        f"--eval-interval={cfg.deploy.prometheus.evaluation_interval}",
        f"--rule-file={RULES_MOUNT}/*.yml",
        *grpc_server_tls_args(),
        f"--query={QUERY_NAME}.{settings.namespace}.svc:{HTTP_PORT}",
        *(f"--alertmanagers.url=http://{address}" for address in alertmanagers),
        f'--label={REPLICA_LABEL}="$(POD_NAME)"',
        f"--alert.label-drop={REPLICA_LABEL}",
    ]


def rules_configmap(cfg: Config, settings: ThanosDeploy) -> dict[str, Any]:
    """The global alerting groups (``global-alerts.rules.yml``) for the ruler."""
    text = rule_documents(cfg)[f"rules/{GLOBAL_ALERTS_FILE}"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(cfg, RULES_CONFIGMAP, settings, "ruler"),
        "data": {GLOBAL_ALERTS_FILE: text},
    }


def ruler_deployment(
    cfg: Config, alertmanagers: list[str], settings: ThanosDeploy
) -> dict[str, Any]:
    resources = {
        "requests": {"cpu": "50m", "memory": "128Mi"},
        "limits": {"cpu": "1", "memory": "1Gi"},
    }
    return thanos_deployment(
        cfg,
        settings,
        "ruler",
        ruler_args(cfg, alertmanagers, settings),
        settings.ruler_replicas,
        resources,
        env=[{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        volumeMounts=[
            {"name": "rules", "mountPath": RULES_MOUNT, "readOnly": True},
            {"name": "data", "mountPath": RULER_DATA},
            _TLS_MOUNT,
        ],
        volumes=[
            {"name": "rules", "configMap": {"name": RULES_CONFIGMAP}},
            {"name": "data", "emptyDir": {}},
            _tls_volume(settings),
        ],
    )


def ruler_service(cfg: Config, settings: ThanosDeploy) -> dict[str, Any]:
    """The ruler's UI and API (its rules and alerts) and its Store API (the ``ALERTS``
    it evaluated, for Query as one more ``--endpoint``)."""
    return thanos_service(cfg, settings, "ruler")


# --- store gateway and compactor --------------------------------------------------------------


def _objstore_volume(settings: ThanosDeploy) -> dict[str, Any]:
    secret = {
        "secretName": settings.objstore_secret,
        "items": [{"key": OBJSTORE_KEY, "path": OBJSTORE_KEY}],
    }
    return {"name": "objstore", "secret": secret}


_OBJSTORE_MOUNT = {"name": "objstore", "mountPath": OBJSTORE_MOUNT, "readOnly": True}


def store_deployment(cfg: Config, settings: ThanosDeploy) -> dict[str, Any]:
    """``thanos store``: the blocks the sidecars uploaded, past the Prometheus' retention,
    for Query (its Store API over mutual TLS). Its index cache is an emptyDir."""
    args = [
        "store",
        f"--http-address=0.0.0.0:{HTTP_PORT}",
        f"--grpc-address=0.0.0.0:{settings.sidecar_grpc_port}",
        f"--data-dir={STORE_DATA}",
        f"--objstore.config-file={OBJSTORE_MOUNT}/{OBJSTORE_KEY}",
        *grpc_server_tls_args(),
    ]
    resources = {
        "requests": {"cpu": "100m", "memory": "512Mi"},
        "limits": {"cpu": "2", "memory": "4Gi"},
    }
    return thanos_deployment(
        cfg,
        settings,
        "store",
        args,
        1,
        resources,
        volumeMounts=[{"name": "data", "mountPath": STORE_DATA}, _OBJSTORE_MOUNT, _TLS_MOUNT],
        volumes=[
            {"name": "data", "emptyDir": {"sizeLimit": "20Gi"}},
            _objstore_volume(settings),
            _tls_volume(settings),
        ],
    )


def compactor_deployment(cfg: Config, settings: ThanosDeploy) -> dict[str, Any]:
    """``thanos compact --wait``: compacts and downsamples the bucket. Exactly one may
    run per bucket, so one replica and ``Recreate`` (never two during a rollout)."""
    args = [
        "compact",
        "--wait",
        f"--http-address=0.0.0.0:{HTTP_PORT}",
        f"--data-dir={COMPACT_DATA}",
        f"--objstore.config-file={OBJSTORE_MOUNT}/{OBJSTORE_KEY}",
    ]
    resources = {
        "requests": {"cpu": "100m", "memory": "512Mi"},
        "limits": {"cpu": "2", "memory": "4Gi"},
    }
    deployment = thanos_deployment(
        cfg,
        settings,
        "compactor",
        args,
        1,
        resources,
        volumeMounts=[{"name": "data", "mountPath": COMPACT_DATA}, _OBJSTORE_MOUNT],
        volumes=[{"name": "data", "emptyDir": {"sizeLimit": "100Gi"}}, _objstore_volume(settings)],
    )
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["ports"] = [p for p in container["ports"] if p["name"] == "http"]
    deployment["spec"]["strategy"] = {"type": "Recreate"}
    return deployment


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
    managers = alertmanagers(cfg)
    targets = managers.addresses()
    ns = settings.namespace
    files = {
        "thanos-query.yaml": _header(
            "The global view: apply at the site that serves it (kubectl apply -f).",
            f"Query deduplicates the HA pairs on the `{REPLICA_LABEL}` label.",
        )
        + dump_all([query_deployment(cfg, endpoints, settings), query_service(cfg, settings)]),
        "thanos-ruler.yaml": _header(
            "The global evaluator: apply next to Thanos Query (kubectl apply -f). It evaluates",
            "the alerting groups that need both sites' data against Query and sends to every",
            "site's Alertmanagers; the site Prometheus never load these groups.",
        )
        + dump_all(
            [
                rules_configmap(cfg, settings),
                ruler_deployment(cfg, targets, settings),
                ruler_service(cfg, settings),
            ]
        ),
        "thanos-store.yaml": _header(
            "The store gateway: the uploaded blocks for Query; apply next to Thanos Query.",
            f"Needs the Secrets {settings.objstore_secret} and {settings.grpc_tls_secret}.",
        )
        + dump_all([store_deployment(cfg, settings), thanos_service(cfg, settings, "store")]),
        "thanos-compactor.yaml": _header(
            "The compactor: one per bucket (one replica, Recreate); apply at one site only.",
        )
        + dump(compactor_deployment(cfg, settings)),
        "alertmanagers-secret.yaml": _header(
            "Every site's Alertmanagers, for spec.additionalAlertManagerConfigs: apply in",
            f"the namespace of each Prometheus resource ({ns}) at every site.",
        )
        + dump(alertmanagers_secret(cfg, targets, settings)),
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
    }
    for prom in proms:
        for replica in range(settings.prometheus_replicas):
            files[f"plain/prometheus-{prom.name}-{replica}.yml"] = _header(
                f"The global and alerting sections of prometheus.yml of replica {replica}",
                f"of the Prometheus at {prom.url} (site {prom.site}).",
            ) + dump(prometheus_fragment(prom, replica, targets))
        files[f"patches/prometheus-{prom.name}.yaml"] = _header(
            f"The Prometheus resource of {prom.url} (site {prom.site}):",
            f"kubectl -n {ns} patch prometheus {settings.prometheus_name} --type merge \\",
            f"  --patch-file patches/prometheus-{prom.name}.yaml",
        ) + dump(prometheus_patch(prom, settings))
    for site in managers.hosts:
        listen = f"0.0.0.0:{managers.cluster_ports[site]}"
        files[f"plain/prometheus-alertmanager-{site}.default"] = (
            _header(
                "Merge into /etc/default/prometheus-alertmanager on every Alertmanager host",
                f"of {site}: every site's Alertmanagers are one cluster, so an alert seen at",
                "both sites notifies once.",
            )
            + f'ARGS="{" ".join(cluster_flags(cfg, managers, listen))}"\n'
        )
        others = managers.peers([s for s in managers.hosts if s != site])
        files[f"patches/alertmanager-{site}.yaml"] = _header(
            f"The Alertmanager resource of site {site}:",
            f"kubectl -n {ns} patch alertmanager {settings.alertmanager_name} --type merge \\",
            f"  --patch-file patches/alertmanager-{site}.yaml",
        ) + dump(alertmanager_patch(others))
    return files
