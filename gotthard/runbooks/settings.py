"""``[runbooks]``: the typed settings of ``gotthard runbooks serve``."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Mode = Literal["dry-run", "enforce"]
Seconds = Annotated[float, Field(gt=0, le=86400)]

DEFAULT_LISTEN = "127.0.0.1:9878"
DEFAULT_TOKEN_FILE = "/etc/gotthard/runbooks-webhook.token"
DEFAULT_AUDIT_LOG = "/var/log/gotthard/runbooks-audit.jsonl"
DEFAULT_KILL_SWITCH = "/etc/gotthard/runbooks.disabled"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KubernetesSettings(_Strict):
    """How to reach the Kubernetes API for ``k8s.cordon_node`` / ``k8s.uncordon_node``."""

    #: Use the pod's service account (``load_incluster_config``).
    in_cluster: bool = False
    #: kubeconfig file; empty means ``$KUBECONFIG`` or ``~/.kube/config``.
    kubeconfig: str = ""
    #: kubeconfig context; empty means the current context.
    context: str = ""
    request_timeout_seconds: Seconds = 10.0


class LimitSettings(_Strict):
    """Rate and blast-radius limits on node actions (drain and cordon)."""

    #: At most this many distinct nodes drained/cordoned per window and cluster.
    max_nodes_per_window: Annotated[int, Field(ge=0, le=100_000)] = 3
    window_seconds: Seconds = 600.0
    #: Never leave more than this fraction of a Slurm partition unavailable.
    max_partition_fraction: Annotated[float, Field(ge=0, le=1)] = 0.10


class RunbooksConfig(_Strict):
    listen: str = DEFAULT_LISTEN
    #: File holding the bearer token Alertmanager sends (``credentials_file``).
    token_file: str = DEFAULT_TOKEN_FILE
    #: ``enforce`` runs actions; anything else only plans and logs them.
    mode: Mode = "dry-run"
    audit_log: str = DEFAULT_AUDIT_LOG
    #: While this file exists, no action runs (decisions are still audited).
    kill_switch_file: str = DEFAULT_KILL_SWITCH
    max_body_bytes: Annotated[int, Field(ge=1024, le=64 * 1024 * 1024)] = 1024 * 1024
    max_alerts_per_request: Annotated[int, Field(ge=1, le=100_000)] = 1000
    action_timeout_seconds: Seconds = 30.0
    #: Remember handled (fingerprint, startsAt, status, step) keys this long.
    idempotency_ttl_seconds: Annotated[float, Field(gt=0, le=90 * 86400)] = 7 * 86400.0
    #: Cluster name used when an alert has no ``cluster`` label.
    default_cluster: str = "default"
    scontrol_path: str = "scontrol"
    sinfo_path: str = "sinfo"
    #: SLURM_CONF for scontrol/sinfo; empty means the environment's.
    slurm_conf: str = ""
    #: Strip the domain of a ``node`` label (``nid001.example.org`` -> ``nid001``) for Slurm.
    slurm_strip_domain: bool = True
    #: ``dr.failover`` also needs this switched on: a failover is never started by default.
    allow_failover: bool = False
    limits: LimitSettings = LimitSettings()
    kubernetes: KubernetesSettings = KubernetesSettings()

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        parse_listen(value)
        return value

    @field_validator("default_cluster")
    @classmethod
    def _cluster(cls, value: str) -> str:
        if not value or not value.replace("-", "").replace("_", "").isalnum():
            raise ValueError("must be a non-empty name of letters, digits, '-' or '_'")
        return value


def parse_listen(value: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[::1]:PORT`` for IPv6); ValueError when unusable."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{value!r} is not HOST:PORT")
    return host.strip("[]"), int(port)
