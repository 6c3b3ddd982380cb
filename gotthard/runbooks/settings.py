"""``[runbooks]``: the typed settings of ``gotthard runbooks serve``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import Field

from gotthard.base import ListenAddress, Name, Seconds, Strict

Mode = Literal["dry-run", "enforce"]

DEFAULT_LISTEN = "127.0.0.1:9878"
DEFAULT_TOKEN_FILE = "/etc/gotthard/runbooks-webhook.token"
DEFAULT_AUDIT_LOG = "/var/log/gotthard/runbooks-audit.jsonl"
DEFAULT_KILL_SWITCH = "/etc/gotthard/runbooks.disabled"


class LimitSettings(Strict):
    """Rate and blast-radius limits on node actions (drain and cordon)."""

    #: At most this many distinct nodes drained/cordoned per window and cluster.
    max_nodes_per_window: Annotated[int, Field(ge=0, le=100_000)] = 3
    window_seconds: Seconds = 600.0
    #: Never leave more than this fraction of a Slurm partition unavailable; one unavailable
    #: node per partition is always allowed, whatever the fraction.
    max_partition_fraction: Annotated[float, Field(ge=0, le=1)] = 0.10


class RunbooksConfig(Strict):
    listen: ListenAddress = DEFAULT_LISTEN
    #: exporter-toolkit web configuration (TLS, basic auth, headers); empty = plain HTTP.
    web_config: str = ""
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
    #: The clusters of this site the webhook acts on; empty = every cluster of its site.
    #: An alert of any other cluster is audited as ``foreign-cluster`` and not acted on.
    clusters: list[Name] = Field(default_factory=list)
    #: The cluster of an alert without a ``cluster`` label; empty = the webhook's only
    #: cluster (with several, such an alert is ``foreign-cluster``).
    default_cluster: Literal[""] | Name = ""
    scontrol_path: str = "scontrol"
    sinfo_path: str = "sinfo"
    #: Strip the domain of a ``node`` label (``nid001.example.org`` -> ``nid001``) for Slurm.
    slurm_strip_domain: bool = True
    #: ``dr.failover`` also needs this switched on: a failover is never started by default.
    allow_failover: bool = False
    #: Per-request timeout of Kubernetes API calls (cordon, uncordon).
    kubernetes_timeout_seconds: Seconds = 10.0
    #: The Prometheus that confirms a repair (``repair_query``) before a node is resumed or
    #: uncordoned; empty = this cluster's (or else this site's) ``prometheus_url``.
    prometheus_url: str = ""
    #: Timeout of that query; no answer in time means the repair is unconfirmed.
    prometheus_timeout_seconds: Seconds = 10.0
    limits: LimitSettings = LimitSettings()

    def owned_clusters(self, site: str, available: Sequence[str]) -> list[str]:
        """The clusters the webhook of *site* owns, given the site's *available* ones:
        ``clusters``, or every one. ValueError naming the key when ``clusters`` or
        ``default_cluster`` names a cluster that is not the site's or not owned (checked
        when the site file loads and again when the webhook starts)."""
        for name in self.clusters:
            if name not in available:
                raise ValueError(
                    f"runbooks.clusters: {name!r} is not a cluster of site {site!r}"
                    f" (its clusters: {', '.join(available)})"
                )
        owned = list(self.clusters or available)
        if self.default_cluster and self.default_cluster not in owned:
            raise ValueError(
                f"runbooks.default_cluster: {self.default_cluster!r} is not one of the"
                f" webhook's clusters ({', '.join(owned)})"
            )
        return owned
