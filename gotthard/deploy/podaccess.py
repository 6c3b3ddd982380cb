"""What the pods of the Kubernetes render reach, beyond their own files: Slurm from the
webhook's pod (a Slurm JWT and slurm.conf per cluster, or the host's munge socket; see
docs/deploy.md, "Slurm from pods") and each role's egress NetworkPolicy ("Egress")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gotthard.config import Config
from gotthard.deploy import objects
from gotthard.deploy.credentials import webhook_slurm_clusters
from gotthard.deploy.manifest import RenderError
from gotthard.deploy.roles import (
    AUDIT,
    AUDIT_METRICS,
    DR,
    NODE_EXPORTER,
    RUNBOOKS,
    SLURM_EXPORTER,
    Role,
)
from gotthard.deploy.settings import KubernetesDeploy

# --- Slurm from the webhook's pod -------------------------------------------------------------


def _by_directory(files: Mapping[str, str]) -> dict[str, list[dict[str, str]]]:
    """Directory -> ConfigMap/Secret ``items`` (key = cluster, path = file name)."""
    out: dict[str, list[dict[str, str]]] = {}
    for cluster, path in sorted(files.items()):
        directory, _, name = path.rpartition("/")
        out.setdefault(directory or "/", []).append({"key": cluster, "path": name})
    return out


def webhook_slurm_access(
    cfg: Config, settings: KubernetesDeploy
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(mounts, volumes) through which the webhook's scontrol and sinfo reach each Slurm
    cluster it owns: with a JWT, the cluster's ``slurm.conf`` from the ConfigMap
    ``slurm_conf_configmap`` (one key per cluster, named after it; its ``slurm_jwt_file``
    is a credential file, mounted with the others by :mod:`credentials`); with munge, the
    host's munge socket and slurm.conf directories. A path that no volume can provide is
    a :class:`RenderError` naming the site file's key."""
    slurm = webhook_slurm_clusters(cfg)
    default = f"{objects.SLURM_CONF_DIR}/slurm.conf"
    confs = {name: c.slurm_conf or default for name, c in slurm.items()}
    first: dict[str, str] = {}
    for name, path in sorted(confs.items()):
        key = f"sites.{cfg.site}.clusters.{name}.slurm_conf"
        other = first.setdefault(path, name)
        if other != name:  # one file cannot hold two ConfigMap keys
            raise RenderError(
                f"{key}: {path} is cluster {other}'s slurm.conf too; give each Slurm cluster"
                f" the webhook acts on its own"
            )
        if not path.startswith("/"):
            raise RenderError(f"{key}: must be an absolute path")
        if path.startswith(objects.CONFIG_DIR + "/"):
            raise RenderError(
                f"{key}: {path} cannot be mounted in the {RUNBOOKS.name} pod:"
                f" {objects.CONFIG_DIR} holds the site file; name another directory"
            )
    mounts: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    if settings.slurm_auth == "munge":
        for i, directory in enumerate(_by_directory(confs)):
            mounts.append(objects.mount(f"slurm-conf-{i}", directory))
            volumes.append(objects.host_path(f"slurm-conf-{i}", directory))
        return [*mounts, objects.mount("munge", objects.MUNGE_DIR)], [
            *volumes,
            objects.host_path("munge", objects.MUNGE_DIR),
        ]
    ref = {"name": settings.slurm_conf_configmap}
    for i, (directory, items) in enumerate(_by_directory(confs).items()):
        mounts.append(objects.mount(f"slurm-conf-{i}", directory))
        volumes.append({"name": f"slurm-conf-{i}", "configMap": {**ref, "items": items}})
    return mounts, volumes


# --- egress -----------------------------------------------------------------------------------

#: The destinations each workload may reach beyond DNS (see :func:`egress_policy`).
EGRESS: dict[str, tuple[str, ...]] = {
    NODE_EXPORTER.name: (),  # host files and the kubelet's socket: no network
    SLURM_EXPORTER.name: ("slurm",),
    DR.name: ("kubernetes_api", "prometheus"),
    RUNBOOKS.name: ("kubernetes_api", "slurm", "prometheus"),
    AUDIT.name: ("kubernetes_api",),
    AUDIT_METRICS.name: (),
}


def _egress_rule(cidrs: Sequence[str], ports: Sequence[int]) -> dict[str, Any]:
    rule: dict[str, Any] = {"ports": [{"protocol": "TCP", "port": p} for p in ports]}
    if cidrs:
        rule["to"] = [{"ipBlock": {"cidr": cidr}} for cidr in cidrs]
    return rule


def egress_policy(
    cfg: Config, role: Role, namespace: str, settings: KubernetesDeploy
) -> dict[str, Any]:
    """Egress of the role's pods: DNS, and the destinations of :data:`EGRESS` at the CIDRs
    and ports of ``[deploy.kubernetes.egress]`` (NetworkPolicy cannot name hosts)."""
    egress = settings.egress
    dns = {
        "to": [
            {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": egress.dns_namespace}
                },
                "podSelector": {"matchLabels": dict(egress.dns_pod_labels)},
            }
        ],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }
    rules = [dns]
    for kind in EGRESS[role.name]:
        rules.append(
            _egress_rule(getattr(egress, f"{kind}_cidrs"), getattr(egress, f"{kind}_ports"))
        )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": objects.meta(cfg, f"{role.full_name}-egress", namespace, role),
        "spec": {
            "podSelector": {"matchLabels": objects.selector(role)},
            "policyTypes": ["Egress"],
            "egress": rules,
        },
    }
