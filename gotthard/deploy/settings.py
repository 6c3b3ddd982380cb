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

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from gotthard.base import DnsLabel, ListenAddress, Name, Strict
from gotthard.deploy.roles import SCRAPED


class Toleration(Strict):
    """A pod toleration (``spec.tolerations[]``) of the node exporter DaemonSet."""

    key: str = ""
    operator: Literal["Exists", "Equal"] = "Exists"
    value: str = ""
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = ""


class KubernetesDeploy(Strict):
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
    #: How the Slurm exporter reaches Slurm: a slurmrestd JWT from a Secret, or the
    #: node's munge socket (hostPath; the exporter then runs where slurm.conf is).
    slurm_auth: Literal["slurmrestd-token", "munge"] = "slurmrestd-token"
    #: Secret (key ``token``) with the slurmrestd JWT.
    slurm_token_secret: DnsLabel = "gotthard-slurmrestd-token"
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
    #: Extra labels of ServiceMonitors, PodMonitors and PrometheusRules (e.g. the
    #: ``release`` label kube-prometheus-stack selects them by).
    monitor_labels: dict[str, str] = Field(default_factory=dict)
    #: Cron schedule of the ``gotthard audit cluster`` CronJob.
    audit_schedule: str = "17 3 * * *"

    @field_validator("image_registry")
    @classmethod
    def _registry(cls, value: str) -> str:
        if not value or value.endswith("/") or " " in value:
            raise ValueError("must be a registry host, optionally with a path, no trailing /")
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


#: A Prometheus duration: ``30s``, ``1m30s``, ``500ms``, ``2d``.
Duration = Annotated[str, Field(pattern=r"^([0-9]+(ms|s|m|h|d|w|y))+$")]

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
    #: More ``match[]`` selectors, beyond the recording rules and the dashboards' series.
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
    #: Secret (key ``objstore.yml``) with the object store configuration of the sidecars.
    objstore_secret: DnsLabel = "thanos-objstore"
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
