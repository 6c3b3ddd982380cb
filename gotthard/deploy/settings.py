"""``[deploy]``: how ``gotthard deploy render`` lays Gotthard out at a site.

One table per target or part: ``[deploy.kubernetes]`` (namespaces, image, the node
exporter's host access, Secrets), ``[deploy.systemd]`` (binary, site file, textfile
directory, timers), ``[deploy.prometheus]`` (every site Prometheus: targets, intervals,
rules), ``[deploy.federation]`` (a federating global view), ``[deploy.alertmanager]``
(receivers, grouping, where each site's Alertmanagers run), ``[deploy.local]`` (the
programs ``--target local`` starts) and ``[deploy.thanos]`` (the production global view:
replicas, ports, Secrets, address overrides). The site and cluster names come from the
site model, never from here.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field, field_validator, model_validator

from gotthard.base import DnsLabel, Duration, ListenAddress, Name, Strict
from gotthard.deploy.roles import SCRAPED
from gotthard.monitoring.rule_model import DEFAULT_DASHBOARD_BASE_URL, DEFAULT_RUNBOOK_BASE_URL


class Toleration(Strict):
    """A pod toleration (``spec.tolerations[]``) of the node exporter DaemonSet."""

    key: str = ""
    operator: Literal["Exists", "Equal"] = "Exists"
    value: str = ""
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = ""


def _cidrs(value: list[str]) -> list[str]:
    for cidr in value:
        try:
            ipaddress.ip_network(cidr)
        except ValueError:
            raise ValueError(f"{cidr!r} is not a CIDR (e.g. 10.0.0.0/16)") from None
    return value


Cidrs = Annotated[list[str], AfterValidator(_cidrs)]
Ports = list[Annotated[int, Field(ge=1, le=65535)]]


class EgressSettings(Strict):
    """``[deploy.kubernetes.egress]``: the destinations of the roles' egress policies."""

    #: The Kubernetes API servers (this cluster's, the other site's, Karmada's).
    kubernetes_api_cidrs: Cidrs = Field(default_factory=list)
    kubernetes_api_ports: Ports = Field(default_factory=lambda: [443, 6443])
    #: slurmctld (scontrol/sinfo with a JWT or munge) and slurmrestd.
    slurm_cidrs: Cidrs = Field(default_factory=list)
    slurm_ports: Ports = Field(default_factory=lambda: [6817, 6820])
    #: The sites' Prometheus (repair checks, placement queries).
    prometheus_cidrs: Cidrs = Field(default_factory=list)
    prometheus_ports: Ports = Field(default_factory=lambda: [9090])
    #: The cluster DNS every pod resolves through (kube-dns/CoreDNS pods' labels).
    dns_namespace: DnsLabel = "kube-system"
    dns_pod_labels: dict[str, str] = Field(default_factory=lambda: {"k8s-app": "kube-dns"})


# --- [deploy.kubernetes]: a site's own settings (resources, scheduling, image, links) ---------

#: A Kubernetes quantity as the settings take it: ``250m``, ``1``, ``64Mi``, ``1.5Gi``.
Quantity = Annotated[str, Field(pattern=r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")]
_SUFFIXES = {
    "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
}  # fmt: skip


def quantity(value: str) -> float:
    """*value* (a :data:`Quantity`) as a number (cores, bytes)."""
    number = value.rstrip("kmMGTi")
    return float(number) * _SUFFIXES.get(value[len(number) :], 1)


class Resources(Strict):
    """Requests and limits of one role's container."""

    cpu_request: Quantity
    memory_request: Quantity
    cpu_limit: Quantity
    memory_limit: Quantity

    @model_validator(mode="after")
    def _requests_within_limits(self) -> Resources:
        for what in ("cpu", "memory"):
            request, limit = getattr(self, f"{what}_request"), getattr(self, f"{what}_limit")
            if quantity(request) > quantity(limit):
                raise ValueError(f"{what}_request {request} is above {what}_limit {limit}")
        return self


#: Role -> its default requests and limits, and where each comes from:
#: * slurm-exporter: ``benchmarks/slurm_scale.py`` measured a peak RSS of 78-83 MB parsing
#:   a 100,000-job, 10,000-node cluster and 42 MB steady at 10,000 jobs; its target is a
#:   300 MB peak, so the limit allows 320Mi and the request the steady 42 MB with headroom;
#:   one poll at 100,000 jobs takes 0.26-0.37 s of one core;
#: * node-exporter: ``benchmarks/startup.py`` holds it to 45 MB at start; 256Mi leaves room
#:   for per-GPU state and the NVML library;
#: * dr: ``benchmarks/dr_scale.py`` measured a peak RSS of 91-98 MiB with 1,000 backup jobs;
#: * runbooks: no benchmark measures it; the values every role had before (64Mi/256Mi);
#: * audit: the policy engine over every pod of a cluster; no benchmark; 512Mi as before;
#: * audit-metrics: the exporter with only its textfile collector (``benchmarks/startup.py``:
#:   about 33 MB RSS for ``exporter --once``), serving one small ConfigMap.
_RESOURCE_KEYS = ("cpu_request", "memory_request", "cpu_limit", "memory_limit")
DEFAULT_RESOURCES: dict[str, dict[str, str]] = {
    role: dict(zip(_RESOURCE_KEYS, values, strict=True))
    for role, values in {
        "node-exporter": ("50m", "64Mi", "500m", "256Mi"),
        "slurm-exporter": ("50m", "96Mi", "1", "320Mi"),
        "dr": ("50m", "128Mi", "500m", "384Mi"),
        "runbooks": ("50m", "64Mi", "500m", "256Mi"),
        "audit": ("100m", "128Mi", "1", "512Mi"),
        "audit-metrics": ("10m", "48Mi", "200m", "128Mi"),
    }.items()
}

#: The labels kube-prometheus-stack's Prometheus selects ServiceMonitors, PodMonitors and
#: PrometheusRules by: ``release: <Helm release name>`` (its ``*SelectorNilUsesHelmValues``
#: defaults), here for a release installed as ``kube-prometheus-stack``.
KUBE_PROMETHEUS_STACK_LABELS = {"release": "kube-prometheus-stack"}
#: ``sha256:`` and 64 hex digits: an image digest.
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
#: An OCI tag: letters, digits, ``_``, ``.``, ``-``; at most 128; not starting with . or -.
TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
#: A Kubernetes object name (RFC 1123 subdomain), as priority and runtime classes have.
ObjectName = Annotated[str, Field(max_length=253, pattern=r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?)?$")]


def _resources(value: object) -> object:
    """The given roles' values over the defaults of :data:`DEFAULT_RESOURCES`, so that a
    site sets only what it changes; an unknown role is an error naming the known ones."""
    if not isinstance(value, dict):
        return value
    unknown = sorted(set(value) - set(DEFAULT_RESOURCES))
    if unknown:
        raise ValueError(
            f"unknown role(s) {', '.join(unknown)}; known: {', '.join(DEFAULT_RESOURCES)}"
        )
    merged: dict[str, object] = {}
    for role, default in DEFAULT_RESOURCES.items():
        given = value.get(role, {})
        merged[role] = {**default, **given} if isinstance(given, dict) else given
    return merged


class KubernetesSiteSettings(Strict):
    """What a site sets for its own cluster in ``[deploy.kubernetes]``: resources,
    scheduling, the image by digest, the links on every alert, and the labels its
    Prometheus Operator selects by (:class:`KubernetesDeploy` holds the rest)."""

    #: Role -> ``cpu_request``, ``memory_request``, ``cpu_limit``, ``memory_limit``; a
    #: role or key left out keeps its default (:data:`DEFAULT_RESOURCES`).
    resources: Annotated[dict[str, Resources], BeforeValidator(_resources)] = Field(
        default_factory=lambda: {k: Resources(**v) for k, v in DEFAULT_RESOURCES.items()}
    )
    #: priorityClassName of the API-only roles' pods and of the node DaemonSet's ("" = none;
    #: the node exporter's "" = ``priority_class_name``).
    priority_class_name: ObjectName = ""
    node_priority_class_name: ObjectName = ""
    #: runtimeClassName of the API-only roles' pods (e.g. gvisor) and of the node
    #: DaemonSet's (e.g. ``nvidia``, where NVML needs the NVIDIA runtime); "" = none.
    runtime_class_name: ObjectName = ""
    node_runtime_class_name: ObjectName = ""
    #: Secrets (type kubernetes.io/dockerconfigjson) every pod pulls the image with.
    image_pull_secrets: list[DnsLabel] = Field(default_factory=list)
    #: Tolerations of the API-only roles' pods (``tolerations`` are the DaemonSet's).
    api_tolerations: list[Toleration] = Field(default_factory=list)
    #: ``sha256:<64 hex>``: the image by digest, ``REGISTRY/gotthard[:TAG]@sha256:...``
    #: (``make image`` prints it); "" = by tag only.
    image_digest: str = ""
    #: Where every alert's ``runbook_url`` and ``dashboard_url`` point (rules of every
    #: target, ``rules build``): the site's copy of docs/runbooks and its Grafana. Left at
    #: the example.org placeholders, ``deploy render`` warns naming the key.
    runbook_base_url: str = DEFAULT_RUNBOOK_BASE_URL
    dashboard_base_url: str = DEFAULT_DASHBOARD_BASE_URL
    #: Secrets that provide the files the site file names, at those paths (docs/deploy.md
    #: "Credentials"; ``credentials.txt`` beside the manifests lists their keys): the
    #: kubeconfigs, the web configs with their TLS files, the SPIFFE SVID files.
    kubeconfig_secret: DnsLabel = "gotthard-kubeconfigs"
    web_config_secret: DnsLabel = "gotthard-web-config"
    svid_secret: DnsLabel = "gotthard-spiffe-svid"
    #: site -> the ``cluster`` its pods' site file names (``deploy render --site``); unset:
    #: the file's own ``cluster`` at its own site, the site's Kubernetes cluster elsewhere.
    clusters: dict[Name, Name] = Field(default_factory=dict)
    #: Labels of the PrometheusRules (kube-prometheus-stack: ``ruleSelector``).
    rule_labels: dict[str, str] = Field(default_factory=lambda: dict(KUBE_PROMETHEUS_STACK_LABELS))

    @field_validator("image_digest")
    @classmethod
    def _digest(cls, value: str) -> str:
        if value and not DIGEST.match(value):
            raise ValueError("must be sha256: and 64 lowercase hex digits (an image digest)")
        return value

    @field_validator("runbook_base_url", "dashboard_base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("https://", "http://")) or " " in value:
            raise ValueError("must be an http(s) URL")
        return value.rstrip("/")

    def placeholders(self) -> list[str]:
        """The keys still at an example.org placeholder."""
        keys = ("runbook_base_url", "dashboard_base_url")
        return [key for key in keys if PLACEHOLDER_HOST in getattr(self, key)]


#: The host of the placeholder URLs nobody should page with.
PLACEHOLDER_HOST = "example.org"


class KubernetesDeploy(KubernetesSiteSettings):
    """``[deploy.kubernetes]``."""

    #: UID and GID the containers run as (the image's non-root user).
    run_as_user: Annotated[int, Field(ge=1, le=2**31 - 1)] = 10001
    #: Namespace of the API-only roles (Slurm exporter, DR, webhook, audit): it enforces
    #: the Pod Security Standards' restricted profile.
    namespace: DnsLabel = "gotthard"
    #: Namespace of the node exporter DaemonSet: it reads the host's /proc and /sys through
    #: hostPath, which only the privileged profile admits.
    node_namespace: DnsLabel = "gotthard-node"
    #: Image ``REGISTRY/gotthard:TAG``; an empty tag is the version that renders.
    image_registry: str = "localhost"
    image_tag: str = ""
    image_pull_policy: Literal["IfNotPresent", "Always", "Never"] = "IfNotPresent"
    #: Collectors of the node exporter DaemonSet.
    node_collectors: list[Literal["gpu", "slingshot", "lustre"]] = Field(
        default_factory=lambda: ["gpu"]
    )
    #: Share the host's PID namespace so that NVML's PIDs name processes the exporter can
    #: map to Slurm jobs through /proc; false leaves GPU usage attributed to pods only.
    host_pid: bool = True
    #: Node labels and taints of the GPU nodes the DaemonSet runs on.
    node_selector: dict[str, str] = Field(
        default_factory=lambda: {"nvidia.com/gpu.present": "true"}
    )
    tolerations: list[Toleration] = Field(
        default_factory=lambda: [Toleration(key="nvidia.com/gpu", effect="NoSchedule")]
    )
    #: How the Slurm exporter and the webhook reach Slurm: a Slurm JWT from a Secret
    #: (exporter: slurmrestd; webhook: scontrol/sinfo with ``SLURM_JWT``), or the node's
    #: munge socket and /etc/slurm (hostPath; both then run on ``slurm_node_selector``
    #: nodes, in the privileged namespace, with the ``-slurm`` image).
    slurm_auth: Literal["slurmrestd-token", "munge"] = "slurmrestd-token"
    #: Secret with the Slurm JWTs: key ``token``, the Slurm exporter's for slurmrestd, and
    #: one key per Slurm cluster the webhook acts on (named after it), its
    #: ``slurm_jwt_file`` for scontrol and sinfo (``credentials.txt`` lists them).
    slurm_token_secret: DnsLabel = "gotthard-slurmrestd-token"
    # --- Slurm from pods (docs/deploy.md, "Slurm from pods") ---
    #: Image of the roles that run Slurm's client commands (the webhook, and the Slurm
    #: exporter with munge): "" = ``REGISTRY/gotthard:TAG-slurm``, the variant with
    #: Debian's slurm-client and auth/jwt plugin that ``make image`` builds. Required with
    #: ``image_digest``: the variant has its own digest.
    slurm_image: str = ""
    #: ConfigMap with each Slurm cluster's slurm.conf (one key per cluster, named after it),
    #: mounted in the webhook at the cluster's ``slurm_conf`` when ``slurm_auth =
    #: "slurmrestd-token"`` (munge mounts the host's /etc/slurm).
    slurm_conf_configmap: DnsLabel = "gotthard-slurm-conf"
    #: Node labels of the nodes that run munged with the cluster's key and hold
    #: /etc/slurm: where the munge pods run (never the GPU ``node_selector``).
    slurm_node_selector: dict[str, str] = Field(
        default_factory=lambda: {"gotthard.io/slurm-client": "true"}
    )
    # --- egress NetworkPolicies (docs/deploy.md, "Egress") ---
    #: Where each kind of destination is: NetworkPolicy cannot name hosts, so CIDRs; an
    #: empty list allows any address, on that kind's ports only.
    egress: EgressSettings = EgressSettings()
    #: Secret (key ``token``) with the bearer token Alertmanager sends to the webhook.
    runbooks_token_secret: DnsLabel = "gotthard-runbooks-token"
    #: Namespace and pod labels of the Prometheus allowed to scrape (NetworkPolicy).
    prometheus_namespace: DnsLabel = "monitoring"
    prometheus_pod_labels: dict[str, str] = Field(
        default_factory=lambda: {"app.kubernetes.io/name": "prometheus"}
    )
    #: Pod labels of the Alertmanager allowed to call the webhook (same namespace).
    alertmanager_pod_labels: dict[str, str] = Field(
        default_factory=lambda: {"app.kubernetes.io/name": "alertmanager"}
    )
    #: Extra labels of ServiceMonitors and PodMonitors: by default the ``release`` label
    #: kube-prometheus-stack selects them by (``rule_labels``: the PrometheusRules').
    monitor_labels: dict[str, str] = Field(
        default_factory=lambda: dict(KUBE_PROMETHEUS_STACK_LABELS)
    )
    #: Cron schedule of the ``gotthard audit cluster`` CronJob.
    audit_schedule: str = "17 3 * * *"

    @field_validator("image_registry")
    @classmethod
    def _registry(cls, value: str) -> str:
        if not value or value.endswith("/") or " " in value:
            raise ValueError("must be a registry host, optionally with a path, no trailing /")
        return value

    @field_validator("image_tag")
    @classmethod
    def _tag(cls, value: str) -> str:
        if value and not TAG.match(value):
            raise ValueError(
                "must be an image tag (letters, digits, _ . -, at most 128); a digest goes"
                " in image_digest"
            )
        return value


class SystemdDeploy(Strict):
    """``[deploy.systemd]``."""

    #: Absolute path of the ``gotthard`` command on the hosts.
    gotthard_bin: str = "/usr/local/bin/gotthard"
    #: The site file every unit passes with ``--config``.
    config_file: str = "/etc/gotthard/site.toml"
    #: Run as this dedicated user; empty = a transient ``DynamicUser=yes`` per unit.
    user: str = ""
    #: node_exporter's textfile collector directory (audit and policy metrics).
    textfile_dir: str = "/var/lib/prometheus/node-exporter"
    #: ``OnCalendar=`` of the kube-bench audit and of the policy textfile timer.
    audit_calendar: str = "daily"
    policy_calendar: str = "*:0/15"

    @field_validator("gotthard_bin", "config_file", "textfile_dir")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("must be an absolute path")
        return value


_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_PART = re.compile(r"([0-9]+)(ms|s|m|h|d|w|y)")


def seconds(duration: str) -> float:
    """*duration* (a :data:`Duration`) in seconds."""
    return sum(int(n) * _UNITS[unit] for n, unit in _PART.findall(duration))


Port = Annotated[int, Field(ge=1, le=65535)]


def _each_given(value: dict[str, list[str]]) -> dict[str, list[str]]:
    empty = sorted(name for name, entries in value.items() if not entries)
    if empty:
        raise ValueError(f"{', '.join(empty)}: give at least one address")
    return value


#: What a cluster's targets name: a role Prometheus scrapes, or its Kubernetes API server.
APISERVER = "apiserver"


class ApiServerScrape(Strict):
    """``[deploy.prometheus.apiserver]``: how each cluster's Kubernetes API server is
    scraped (job ``apiserver``, the job DR's ``api_up`` query reads)."""

    scheme: Literal["https", "http"] = "https"
    #: CA bundle and bearer token file Prometheus presents; "" = none.
    ca_file: str = ""
    bearer_token_file: str = ""
    #: "" = the global ``scrape_interval``.
    scrape_interval: Duration | Literal[""] = ""


class PrometheusDeploy(Strict):
    """``[deploy.prometheus]``: every Prometheus of the site model (a cluster's
    ``prometheus_url``, else its site's)."""

    #: file_sd directory: ``DIR/ROLE/SITE-CLUSTER.yml`` lists the targets of one role on
    #: one cluster (clusters without static targets below); "" = static targets only.
    file_sd_dir: str = "/etc/prometheus/file_sd/gotthard"
    #: Static targets: cluster -> role (or ``apiserver``) -> ``["host:port", ...]``.
    targets: dict[Name, dict[str, list[ListenAddress]]] = Field(default_factory=dict)
    #: More jobs, scraped with the cluster's ``site`` and ``cluster`` labels: cluster ->
    #: job name -> ``["host:port", ...]``.
    extra_targets: dict[Name, dict[Name, list[ListenAddress]]] = Field(default_factory=dict)
    scrape_interval: Duration = "30s"
    scrape_timeout: Duration = "10s"
    evaluation_interval: Duration = "30s"
    #: Where prometheus.yml finds the rule files (the local target: its own ``rules/``).
    rules_dir: str = "/etc/prometheus/rules/gotthard"
    #: ``--storage.tsdb.retention.time`` and ``--rules.alert.resend-delay`` (local target).
    retention: Duration = "15d"
    alert_resend_delay: Duration = "1m"
    apiserver: ApiServerScrape = ApiServerScrape()

    @field_validator("targets")
    @classmethod
    def _roles(cls, value: dict[str, dict[str, list[str]]]) -> dict[str, dict[str, list[str]]]:
        known = [*(role.name for role in SCRAPED), APISERVER]
        for cluster, roles in value.items():
            unknown = sorted(set(roles) - set(known))
            if unknown:
                raise ValueError(
                    f"{cluster}: unknown role(s) {', '.join(unknown)}; known: {', '.join(known)}"
                )
        return value

    @model_validator(mode="after")
    def _timeout(self) -> PrometheusDeploy:
        if seconds(self.scrape_timeout) > seconds(self.scrape_interval):
            raise ValueError("scrape_timeout: longer than scrape_interval")
        return self


class FederationDeploy(Strict):
    """``[deploy.federation]``: a global-view Prometheus that federates every site's
    (the sandbox's global view; production uses Thanos, ``[deploy.thanos]``)."""

    #: ``host:port`` it listens on; "" = no federating global view.
    listen: ListenAddress | Literal[""] = ""
    #: "" = ``[deploy.prometheus] scrape_interval``.
    scrape_interval: Duration | Literal[""] = ""
    #: More ``match[]`` selectors, beyond the aggregate recording rules and the series the
    #: global alerts read.
    match: list[str] = Field(default_factory=list)


class AlertmanagerDeploy(Strict):
    """``[deploy.alertmanager]``: the one configuration every site's Alertmanagers run,
    and how they find each other. Routes, receivers and inhibitions are
    :mod:`gotthard.monitoring.alertmanager`'s."""

    #: The runbook webhook of sites without one of their own.
    webhook_url: str = "http://127.0.0.1:9878/alerts"
    #: site -> its runbook webhook; {} = ``http://<runbooks target>/alerts`` of each site
    #: whose clusters list a ``runbooks`` target in ``[deploy.prometheus.targets]``.
    webhook_urls: dict[Name, str] = Field(default_factory=dict)
    #: The bearer token Alertmanager sends to the webhooks; "" = ``[runbooks] token_file``.
    webhook_token_file: str = ""
    #: site -> pager webhook; {} = a placeholder (``http://pager.invalid/<site>``) per site.
    pager_urls: dict[Name, str] = Field(default_factory=dict)
    pager_fallback_url: str = "http://pager.invalid/default"
    ticket_url: str = "http://ticket.invalid/"
    #: Where efficiency findings about users' jobs go (GPUIdleWhileAllocated); "" = a
    #: receiver with no integrations (read them with ``gotthard job digest``).
    efficiency_url: str = "http://efficiency.invalid/"
    #: The external dead man's switch that receives the always-firing GotthardWatchdog;
    #: "" = a receiver with no integrations.
    deadman_url: str = ""
    deadman_repeat_interval: Duration = "1m"
    group_wait: Duration = "30s"
    group_interval: Duration = "5m"
    repeat_interval: Duration = "4h"
    resolve_timeout: Duration = "5m"
    #: site -> its Alertmanager hosts; {} = the host of the site's Prometheus.
    hosts: Annotated[dict[Name, list[str]], AfterValidator(_each_given)] = Field(
        default_factory=dict
    )
    #: API and gossip ports, and per site where its Alertmanagers use others.
    port: Port = 9093
    cluster_port: Port = 9094
    ports: dict[Name, Port] = Field(default_factory=dict)
    cluster_ports: dict[Name, Port] = Field(default_factory=dict)
    #: ``--cluster.gossip-interval`` and ``--cluster.pushpull-interval``.
    gossip_interval: Duration = "200ms"
    pushpull_interval: Duration = "1m"


class LocalDeploy(Strict):
    """``[deploy.local]``: ``--target local`` runs every site's processes on this machine."""

    #: The Prometheus and Alertmanager programs (a name on PATH, or a path).
    prometheus: str = "prometheus"
    alertmanager: str = "prometheus-alertmanager"


class ThanosDeploy(Strict):
    """``[deploy.thanos]``: the global view of a production site (Thanos sidecar + Query).

    Addresses come from the site model: each Prometheus (a cluster's ``prometheus_url``,
    else its site's) serves the sidecar's gRPC Store API on the same host at
    ``sidecar_grpc_port`` unless ``endpoints`` says otherwise; the Alertmanagers are
    ``[deploy.alertmanager]``'s.
    """

    #: Image of Thanos Query (the sidecar's image is the operator's default).
    image: str = "quay.io/thanos/thanos:v0.37.2"
    #: Namespace of Thanos Query, of the Prometheus and Alertmanager custom resources and
    #: of the Secrets they read (kube-prometheus: ``monitoring``).
    namespace: DnsLabel = "monitoring"
    #: Names of the Prometheus and Alertmanager custom resources the patches apply to
    #: (kube-prometheus: ``k8s`` and ``main``).
    prometheus_name: DnsLabel = "k8s"
    alertmanager_name: DnsLabel = "main"
    #: Replicas of each Prometheus (an HA pair by default) and of Thanos Query.
    prometheus_replicas: Annotated[int, Field(ge=1, le=10)] = 2
    query_replicas: Annotated[int, Field(ge=1, le=10)] = 2
    #: Replicas of Thanos Ruler, which evaluates the global alerting groups against Query
    #: (each sends every alert; Alertmanager deduplicates once ``replica`` is dropped).
    ruler_replicas: Annotated[int, Field(ge=1, le=10)] = 2
    #: gRPC port of the sidecar's Store API and of Query's own.
    sidecar_grpc_port: Port = 10901
    #: Secret (key ``objstore.yml``) with the object store configuration of the sidecars,
    #: the store gateway and the compactor.
    objstore_secret: DnsLabel = "thanos-objstore"
    #: Secret (keys ``tls.crt``, ``tls.key``, ``ca.crt``: cert-manager's layout) of the
    #: mutual TLS on every gRPC Store API (sidecars, store gateway, ruler) and of Query's
    #: client: the Store API crosses sites.
    grpc_tls_secret: DnsLabel = "thanos-grpc-tls"
    #: Store API addresses (``host:port``) by Prometheus name (``SITE`` or
    #: ``SITE-CLUSTER``), one per replica where they differ; unset = derived.
    endpoints: Annotated[dict[str, list[ListenAddress]], AfterValidator(_each_given)] = Field(
        default_factory=dict
    )


class DeployConfig(Strict):
    """The ``[deploy]`` table."""

    kubernetes: KubernetesDeploy = KubernetesDeploy()
    systemd: SystemdDeploy = SystemdDeploy()
    prometheus: PrometheusDeploy = PrometheusDeploy()
    federation: FederationDeploy = FederationDeploy()
    alertmanager: AlertmanagerDeploy = AlertmanagerDeploy()
    local: LocalDeploy = LocalDeploy()
    thanos: ThanosDeploy = ThanosDeploy()
