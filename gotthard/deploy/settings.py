"""``[deploy]``: how ``gotthard deploy render`` lays Gotthard out at a site.

One table per target: ``[deploy.kubernetes]`` (namespaces, image, the node exporter's
host access, Secrets), ``[deploy.systemd]`` (binary, site file, textfile directory,
timers), ``[deploy.prometheus]`` (where the scrape targets come from) and
``[deploy.thanos]`` (the global view: replicas, ports, Secrets, address overrides).
The site and cluster names come from the site model, never from here.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

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


class PrometheusDeploy(Strict):
    """``[deploy.prometheus]``."""

    #: file_sd directory: ``DIR/ROLE/SITE-CLUSTER.yml`` lists the targets of one role on
    #: one cluster (clusters without static targets below).
    file_sd_dir: str = "/etc/prometheus/file_sd/gotthard"
    #: Static targets: cluster -> role -> ``["host:port", ...]``.
    targets: dict[Name, dict[str, list[str]]] = Field(default_factory=dict)
    scrape_interval: str = "30s"

    @field_validator("targets")
    @classmethod
    def _roles(cls, value: dict[str, dict[str, list[str]]]) -> dict[str, dict[str, list[str]]]:
        scraped = [role.name for role in SCRAPED]
        for cluster, roles in value.items():
            unknown = sorted(set(roles) - set(scraped))
            if unknown:
                raise ValueError(
                    f"{cluster}: unknown role(s) {', '.join(unknown)}; known: {', '.join(scraped)}"
                )
        return value


Port = Annotated[int, Field(ge=1, le=65535)]


class ThanosDeploy(Strict):
    """``[deploy.thanos]``: the global view of a production site (Thanos sidecar + Query).

    Addresses come from the site model: each Prometheus (a cluster's ``prometheus_url``,
    else its site's) serves the sidecar's gRPC Store API on the same host at
    ``sidecar_grpc_port``, and each site's Alertmanagers run on that host too, unless
    ``endpoints`` / ``alertmanager_hosts`` say otherwise.
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
    #: gRPC port of the sidecar's Store API and of Query's own.
    sidecar_grpc_port: Port = 10901
    #: Secret (key ``objstore.yml``) with the object store configuration of the sidecars.
    objstore_secret: DnsLabel = "thanos-objstore"
    #: Store API addresses (``host:port``) by Prometheus name (``SITE`` or
    #: ``SITE-CLUSTER``), one per replica where they differ; unset = derived.
    endpoints: dict[str, list[ListenAddress]] = Field(default_factory=dict)
    #: Alertmanager hosts by site; unset = the host of the site's Prometheus.
    alertmanager_hosts: dict[Name, list[str]] = Field(default_factory=dict)
    alertmanager_port: Port = 9093
    alertmanager_cluster_port: Port = 9094

    @field_validator("endpoints", "alertmanager_hosts")
    @classmethod
    def _not_empty(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        empty = sorted(name for name, entries in value.items() if not entries)
        if empty:
            raise ValueError(f"{', '.join(empty)}: give at least one address")
        return value


class DeployConfig(Strict):
    """The ``[deploy]`` table."""

    kubernetes: KubernetesDeploy = KubernetesDeploy()
    systemd: SystemdDeploy = SystemdDeploy()
    prometheus: PrometheusDeploy = PrometheusDeploy()
    thanos: ThanosDeploy = ThanosDeploy()
