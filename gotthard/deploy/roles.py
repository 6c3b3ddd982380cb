"""The roles Gotthard is deployed as: what each runs, where, and on which port.

Every target (Kubernetes, systemd, Prometheus, local) lays out the same roles; their
names are the ``app.kubernetes.io/component`` label, the systemd unit names, the scrape
jobs and the local processes. :func:`command` is the one command line of each role.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: Ports the roles listen on: distinct, so that roles can share a host (systemd).
NODE_EXPORTER_PORT = 9877
RUNBOOKS_PORT = 9878
DR_PORT = 9879
SLURM_EXPORTER_PORT = 9880


@dataclass(frozen=True)
class Role:
    #: ``node-exporter``: object, unit and job names are ``gotthard-<name>``.
    name: str
    #: What it does, for comments and the docs.
    summary: str
    #: The ``gotthard`` arguments that run it (after ``--config FILE``; see :func:`command`).
    subcommand: tuple[str, ...]
    #: Port of its /metrics and /healthz; 0: it serves nothing (a job or a timer).
    port: int
    #: It calls the Kubernetes API (and gets a ServiceAccount token and RBAC).
    kube_api: bool = False
    #: The path that answers 200 once it serves (the DR daemon's /healthz is 503 on a
    #: replica that is not the leader, so readiness is its /metrics).
    ready_path: str = "/healthz"

    @property
    def full_name(self) -> str:
        return f"gotthard-{self.name}"


NODE_EXPORTER = Role(
    "node-exporter",
    "GPU, Slingshot and Lustre metrics of each node",
    ("exporter",),
    NODE_EXPORTER_PORT,
)
SLURM_EXPORTER = Role(
    "slurm-exporter",
    "Slurm scheduler metrics",
    ("exporter", "--collectors=slurm"),
    SLURM_EXPORTER_PORT,
)
DR = Role(
    "dr",
    "DR daemon: Velero backups, restore drills, placement",
    ("dr", "daemon"),
    DR_PORT,
    kube_api=True,
    ready_path="/metrics",
)
RUNBOOKS = Role(
    "runbooks",
    "runbook webhook for Alertmanager",
    ("runbooks", "serve"),
    RUNBOOKS_PORT,
    kube_api=True,
)
AUDIT = Role("audit", "policy audit of the live cluster", ("audit", "cluster"), 0, kube_api=True)

#: Kubernetes only: a textfile exporter serving the audit CronJob's last metrics, which the
#: CronJob leaves in the ConfigMap below (timers write node_exporter's textfile directory).
AUDIT_METRICS_PORT = 9881
AUDIT_METRICS_CONFIGMAP = "gotthard-audit-metrics"
AUDIT_METRICS = Role(
    "audit-metrics",
    "serves the last cluster audit's metrics (Kubernetes)",
    ("exporter", "--collectors=textfile"),
    AUDIT_METRICS_PORT,
)

ROLES: tuple[Role, ...] = (NODE_EXPORTER, SLURM_EXPORTER, DR, RUNBOOKS, AUDIT)
#: The roles the Kubernetes render runs a workload of: every role, and the audit's metrics.
KUBERNETES_ROLES: tuple[Role, ...] = (*ROLES, AUDIT_METRICS)
#: The roles Prometheus scrapes.
SCRAPED: tuple[Role, ...] = tuple(role for role in ROLES if role.port)
#: The roles that call the Kubernetes API (each gets RBAC).
API_CLIENTS: tuple[Role, ...] = tuple(role for role in ROLES if role.kube_api)


def command(role: Role, listen: str, node_collectors: Sequence[str] = ("gpu",)) -> list[str]:
    """``gotthard`` arguments (after ``--config FILE``) that run *role* on *listen*
    (``HOST:PORT``; ignored for a role that serves nothing); *node_collectors* are the node
    exporter's."""
    args = list(role.subcommand)
    if role == NODE_EXPORTER:
        args.append(f"--collectors={','.join(node_collectors)}")
    return [*args, f"--listen={listen}"] if role.port else args
