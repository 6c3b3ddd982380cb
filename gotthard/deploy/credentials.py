"""Credentials as mounts: every file the site file names that a pod reads.

The site file (the ``gotthard-site`` ConfigMap) names files by path: the kubeconfigs of
the other site's clusters and of Karmada, the Slurm REST token, the Slurm JWT of each
cluster the webhook drains (``slurm_jwt_file``), the web configs (TLS and basic auth) and
the SPIFFE SVID files. Each is provided, at exactly that path, by a
Secret the render declares as a volume of the pod whose role reads it, so a pod never
starts without the file it needs (DR and the audit exit 2 on a missing kubeconfig).

Files in one directory share one ``projected`` volume mounted there (the site ConfigMap
joins it when that directory is ``/etc/gotthard``); a file in a sub-directory of a
mounted directory is an item of that volume, since a mount inside a read-only volume
cannot be created. Projected Secrets are updated in place when the Secret changes (no
``subPath``), so rotated SVIDs and tokens reach the pod.

Which Secret holds which file, under which key, is :func:`expected_secrets` (written as
``credentials.txt`` beside the manifests, and documented in docs/deploy.md).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from gotthard.config import Config
from gotthard.deploy.manifest import RenderError
from gotthard.deploy.roles import (
    AUDIT,
    AUDIT_METRICS,
    DR,
    KUBERNETES_ROLES,
    NODE_EXPORTER,
    RUNBOOKS,
    SLURM_EXPORTER,
    Role,
)
from gotthard.deploy.settings import KubernetesDeploy
from gotthard.site import ClusterConfig

#: (site-file key, path, the roles that read it) of one credential file.
_Entry = tuple[str, str, tuple[str, ...]]
#: Where the example site file puts each Slurm cluster's JWT (``slurm_jwt_file``).
SLURM_JWT_DIR = "/var/run/secrets/gotthard-slurm"
#: Characters a Secret key may hold.
_KEY_CHARS = re.compile(r"[^-._a-zA-Z0-9]")


@dataclass(frozen=True)
class CredentialFile:
    """One file the site file names (*key*, dotted) that the pods of *roles* read."""

    key: str
    path: str
    secret: str
    #: Key of the file in the Secret; "" = the whole Secret is projected into the file's
    #: directory (a web config and the TLS files it names relative to itself).
    item: str
    roles: tuple[str, ...]
    what: str


def _kube_files(cfg: Config) -> list[tuple[str, str, tuple[str, ...]]]:
    """(key, path, roles) of every kubeconfig: DR reads every site's and Karmada's; the
    webhook and the audit read their own site's."""
    found = []
    for site_name, site in cfg.site_model.items():
        for cluster_name, cluster in site.clusters.items():
            access = cluster.kubernetes
            if access is None or access.in_cluster or not access.kubeconfig:
                continue
            readers: tuple[str, ...] = (DR.name,)
            if site_name == cfg.site:
                readers += (RUNBOOKS.name,)
                if cluster_name == site.kube_cluster:
                    readers += (AUDIT.name,)
            key = f"sites.{site_name}.clusters.{cluster_name}.kubernetes.kubeconfig"
            found.append((key, access.kubeconfig, readers))
    karmada = cfg.dr.placement.karmada
    if karmada.kubeconfig and not karmada.in_cluster:
        found.append(("dr.placement.karmada.kubeconfig", karmada.kubeconfig, (DR.name,)))
    return found


def webhook_slurm_clusters(cfg: Config) -> dict[str, ClusterConfig]:
    """The Slurm clusters the webhook of *cfg* acts on (its owned clusters that run Slurm)."""
    site = cfg.site_config()
    available = site.clusters or {cfg.cluster: ClusterConfig()}
    try:
        owned = cfg.runbooks.owned_clusters(cfg.site, list(available))
    except ValueError as err:
        raise RenderError(str(err)) from None
    return {name: available[name] for name in owned if available[name].runs_slurm}


def _slurm_jwt_files(cfg: Config, settings: KubernetesDeploy) -> list[tuple[str, str, str]]:
    """(key, path, cluster) of the JWT file of each Slurm cluster the webhook acts on: the
    webhook reads it before each scontrol/sinfo. With ``slurm_auth = "slurmrestd-token"``
    the pod has no munge socket, so every such cluster must name one."""
    found = []
    for name, cluster in webhook_slurm_clusters(cfg).items():
        key = f"sites.{cfg.site}.clusters.{name}.slurm_jwt_file"
        if cluster.slurm_jwt_file:
            found.append((key, cluster.slurm_jwt_file, name))
        elif settings.slurm_auth == "slurmrestd-token":
            raise RenderError(
                f'{key}: empty, but [deploy.kubernetes] slurm_auth = "slurmrestd-token":'
                f" the webhook's pod has no munge socket; name the JWT file, e.g."
                f" {SLURM_JWT_DIR}/{name}"
            )
    return found


def _web_configs(cfg: Config) -> list[tuple[str, str, tuple[str, ...]]]:
    # the audit's metrics are served by ``gotthard exporter`` too
    exporters = (NODE_EXPORTER.name, SLURM_EXPORTER.name, AUDIT_METRICS.name)
    given = [
        ("exporter.web_config", cfg.exporter.web_config, exporters),
        ("runbooks.web_config", cfg.runbooks.web_config, (RUNBOOKS.name,)),
        ("dr.web_config", cfg.dr.web_config, (DR.name,)),
    ]
    return [entry for entry in given if entry[1]]


def _spiffe_files(cfg: Config) -> list[tuple[str, str, tuple[str, ...]]]:
    every = tuple(role.name for role in KUBERNETES_ROLES)
    spiffe = cfg.spiffe
    given = [
        ("spiffe.cert_file", spiffe.cert_file),
        ("spiffe.key_file", spiffe.key_file),
        ("spiffe.bundle_file", spiffe.bundle_file),
    ]
    return [(key, path, every) for key, path in given if path]


def _item_keys(paths: Iterable[str]) -> dict[str, str]:
    """Path -> its key in a Secret: the file name, or the whole path where two files of
    one Secret share a name."""
    paths = sorted(set(paths))
    names = [posixpath.basename(p) for p in paths]
    out = {}
    for path, name in zip(paths, names, strict=True):
        if names.count(name) > 1:
            name = path.strip("/").replace("/", "_")
        out[path] = _KEY_CHARS.sub("_", name)
    return out


def files(cfg: Config, settings: KubernetesDeploy) -> list[CredentialFile]:
    """Every credential file of the site file, with the Secret and key that provide it.
    A relative path is refused (a pod has no working directory to resolve it against), and
    so are two files under one key of one Secret."""
    rest = cfg.exporter.slurm.rest_token_file
    slurm_token = [("exporter.slurm.rest_token_file", rest, (SLURM_EXPORTER.name,))] if rest else []
    jwt_files = _slurm_jwt_files(cfg, settings)
    webhook_jwt = [(key, path, (RUNBOOKS.name,)) for key, path, _ in jwt_files]
    # (Secret, what it holds, its files, the key of each: "" = the file name, "*" = the
    # whole Secret beside the file, else that key, or the key of each path)
    groups: tuple[tuple[str, str, list[_Entry], str | dict[str, str]], ...] = (
        (settings.kubeconfig_secret, "kubeconfig", _kube_files(cfg), ""),
        (settings.web_config_secret, "web config (with its TLS files)", _web_configs(cfg), "*"),
        (settings.svid_secret, "SPIFFE SVID file", _spiffe_files(cfg), ""),
        (settings.slurm_token_secret, "slurmrestd JWT", slurm_token, "token"),
        (
            settings.slurm_token_secret,
            "the webhook's Slurm JWT (scontrol/sinfo with SLURM_JWT)",
            webhook_jwt,
            {path: cluster for _, path, cluster in reversed(jwt_files)},
        ),
    )
    out: list[CredentialFile] = []
    for secret, what, entries, item_key in groups:
        for key, path, _ in entries:
            if not path.startswith("/"):
                raise RenderError(f"{key}: {path!r} is relative; a pod needs an absolute path")
        keys = _item_keys(path for _, path, _ in entries)
        readers: dict[str, set[str]] = {}
        for _, path, roles in entries:
            readers.setdefault(path, set()).update(roles)
        seen: set[str] = set()
        for key, path, _ in entries:
            if path in seen:  # one file named by several keys: mounted once
                continue
            seen.add(path)
            roles = tuple(r.name for r in KUBERNETES_ROLES if r.name in readers[path])
            if isinstance(item_key, dict):
                item = item_key[path]
            else:
                item = {"": keys[path], "*": ""}.get(item_key, item_key)
            out.append(CredentialFile(key, path, secret, item, roles, what))
    _check_keys(out)
    return out


def _check_keys(credentials: Sequence[CredentialFile]) -> None:
    """One key of one Secret holds one file (a cluster named ``token`` would take the
    Slurm exporter's key)."""
    holder: dict[tuple[str, str], CredentialFile] = {}
    for cred in credentials:
        if not cred.item:
            continue
        first = holder.setdefault((cred.secret, cred.item), cred)
        if first.path != cred.path:
            raise RenderError(
                f"{cred.key}: key {cred.item!r} of the Secret {cred.secret} holds"
                f" {first.key} already; rename one"
            )


def _covers(directory: str, path: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def volumes(
    role: Role,
    credentials: Sequence[CredentialFile],
    site_dir: str,
    site_source: dict[str, Any],
    taken: Sequence[str],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, mounts) that provide *role*'s credential files, the site ConfigMap
    (*site_source*, a projected source, at *site_dir*) included. *taken* are the pod's
    other mount paths: a credential file inside one of them, or a directory holding one,
    cannot be mounted and is refused naming its key."""
    mine = [c for c in credentials if role.name in c.roles]
    directories = sorted({posixpath.dirname(c.path) for c in mine} | {site_dir})
    roots: list[str] = []
    for directory in directories:  # a directory inside a mounted one joins it
        if not any(_covers(root, directory) for root in roots):
            roots.append(directory)
    for cred in mine:
        root = next(r for r in roots if _covers(r, cred.path))
        for other in taken:
            if _covers(other, root) or _covers(root, other):
                raise RenderError(
                    f"{cred.key}: {cred.path} cannot be mounted in the {role.name} pod:"
                    f" {other} is mounted there already; name another directory"
                )
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    for index, root in enumerate(roots):
        sources: list[dict[str, Any]] = [site_source] if root == site_dir else []
        for cred in (c for c in mine if _covers(root, c.path)):
            relative = posixpath.relpath(cred.path, root)
            if cred.item:
                items = [{"key": cred.item, "path": relative}]
                sources.append({"secret": {"name": cred.secret, "items": items}})
            else:  # the whole Secret, beside the web config it holds
                sub = posixpath.dirname(relative)
                if sub:
                    raise RenderError(
                        f"{cred.key}: {cred.path} must lie directly in a mounted directory"
                    )
                sources.append({"secret": {"name": cred.secret}})
        name = "site" if root == site_dir else f"credentials-{index}"
        if sources == [site_source]:  # the site file alone
            volumes.append({"name": name, **site_source})
        else:
            projected = {"sources": _merged(sources), "defaultMode": 0o440}
            volumes.append({"name": name, "projected": projected})
        mounts.append({"name": name, "mountPath": root, "readOnly": True})
    return volumes, mounts


def _merged(sources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One source per Secret (its items together), in first-seen order."""
    out: list[dict[str, Any]] = []
    by_name: dict[str, dict[str, Any]] = {}
    for source in sources:
        secret = source.get("secret")
        if secret is None:
            out.append(source)
            continue
        known = by_name.get(secret["name"])
        if known is None:
            copy = {
                "name": secret["name"],
                **({"items": list(secret["items"])} if "items" in secret else {}),
            }
            by_name[secret["name"]] = copy
            out.append({"secret": copy})
        elif "items" in known and "items" in secret:
            known["items"].extend(i for i in secret["items"] if i not in known["items"])
        else:  # the whole Secret wins over some of its keys
            known.pop("items", None)
    return out


def expected_secrets(
    credentials: Sequence[CredentialFile], namespace_of: dict[str, str]
) -> list[tuple[str, str, list[CredentialFile]]]:
    """(namespace, Secret, its files) of every Secret the pods mount; *namespace_of*
    maps each role to its namespace."""
    found: dict[tuple[str, str], list[CredentialFile]] = {}
    for cred in credentials:
        for role in cred.roles:  # a role, or another reader such as "alertmanager"
            found.setdefault((namespace_of[role], cred.secret), [])
            if cred not in found[namespace_of[role], cred.secret]:
                found[namespace_of[role], cred.secret].append(cred)
    return [(ns, name, creds) for (ns, name), creds in sorted(found.items())]


def describe(credentials: Sequence[CredentialFile], namespace_of: dict[str, str]) -> str:
    """``credentials.txt``: the Secrets to create before applying, with their keys."""
    lines = [
        '# The Secrets the rendered pods mount (docs/deploy.md, "Credentials"). Create each',
        "# before applying; a pod whose Secret is missing does not start.",
    ]
    if not credentials:
        lines.append("# The site file names no credential file: none.")
    for namespace, secret, creds in expected_secrets(credentials, namespace_of):
        lines.append("")
        lines.append(f"Secret {namespace}/{secret}:")
        by_key: dict[str, list[str]] = {}
        for cred in creds:
            readers = ", ".join(r for r in cred.roles if namespace_of[r] == namespace)
            name = cred.item or posixpath.basename(cred.path)
            text = f"{cred.what}: {cred.key} = {cred.path} ({readers})"
            if not cred.item:
                text += f"; its other keys land beside it in {posixpath.dirname(cred.path)}"
            by_key.setdefault(name, []).append(text)
        for name, texts in by_key.items():
            lines.append(f"  key {name}: {'; '.join(texts)}")
        args = " ".join(f"--from-file={name}=FILE" for name in by_key)
        lines.append(f"  kubectl -n {namespace} create secret generic {secret} {args}")
    return "\n".join(lines) + "\n"
