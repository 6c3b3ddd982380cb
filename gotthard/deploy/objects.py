"""Small building blocks of the Kubernetes render's objects, shared by
:mod:`gotthard.deploy.kubernetes` and the modules it composes (:mod:`podaccess`): the
labels and selectors of every object, volume mounts, and the fixed paths in the pods."""

from __future__ import annotations

from typing import Any

from gotthard.config import Config
from gotthard.deploy.roles import Role

#: Where the site file (the ConfigMap) is mounted.
CONFIG_DIR = "/etc/gotthard"
#: The host's munge socket directory and Slurm configuration (``slurm_auth = "munge"``).
MUNGE_DIR = "/run/munge"
SLURM_CONF_DIR = "/etc/slurm"


def labels(cfg: Config, role: Role | None = None) -> dict[str, str]:
    """Labels of every object: Gotthard's, the component, and the site model's names."""
    out = {
        "app.kubernetes.io/name": "gotthard",
        "app.kubernetes.io/part-of": "gotthard",
        "app.kubernetes.io/managed-by": "gotthard",
        "gotthard.io/site": cfg.site,
        "gotthard.io/cluster": cfg.cluster,
    }
    if role is not None:
        out["app.kubernetes.io/component"] = role.name
    return out


def selector(role: Role) -> dict[str, str]:
    return {"app.kubernetes.io/name": "gotthard", "app.kubernetes.io/component": role.name}


def meta(cfg: Config, name: str, namespace: str, role: Role | None = None) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": labels(cfg, role)}


def mount(name: str, path: str, read_only: bool = True) -> dict[str, Any]:
    return {"name": name, "mountPath": path, "readOnly": read_only}


def host_path(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "hostPath": {"path": path, "type": "Directory"}}
