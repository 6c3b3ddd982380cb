"""The roles Gotthard is deployed as: what each runs, where, and on which port.

Every target (Kubernetes, systemd, Prometheus) lays out the same roles; their names are
the ``app.kubernetes.io/component`` label, the systemd unit names and the scrape jobs.
"""

from __future__ import annotations

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
    #: Port of its /metrics and /healthz; 0: it serves nothing (a job or a timer).
    port: int
    #: It calls the Kubernetes API (and gets a ServiceAccount token and RBAC).
    kube_api: bool = False

    @property
    def full_name(self) -> str:
        return f"gotthard-{self.name}"


NODE_EXPORTER = Role(
    "node-exporter", "GPU, Slingshot and Lustre metrics of each node", NODE_EXPORTER_PORT
)
SLURM_EXPORTER = Role("slurm-exporter", "Slurm scheduler metrics", SLURM_EXPORTER_PORT)
DR = Role("dr", "DR daemon: Velero backups, restore drills, placement", DR_PORT, kube_api=True)
RUNBOOKS = Role("runbooks", "runbook webhook for Alertmanager", RUNBOOKS_PORT, kube_api=True)
AUDIT = Role("audit", "policy audit of the live cluster", 0, kube_api=True)

ROLES: tuple[Role, ...] = (NODE_EXPORTER, SLURM_EXPORTER, DR, RUNBOOKS, AUDIT)
#: The roles Prometheus scrapes.
SCRAPED: tuple[Role, ...] = tuple(role for role in ROLES if role.port)
#: The roles that call the Kubernetes API (each gets RBAC).
API_CLIENTS: tuple[Role, ...] = tuple(role for role in ROLES if role.kube_api)
