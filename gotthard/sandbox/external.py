"""Real Kubernetes and Karmada APIs for the two-site sandbox, from a site file.

``gotthard sandbox up --sites zurich,lugano --site-file FILE`` reads from FILE (a
``gotthard.toml``) only how to reach each sandbox site's Kubernetes cluster
(``[sites.SITE.clusters.C.kubernetes]`` ``kubeconfig``/``context``, C being the site's
``kubernetes_cluster`` or its only cluster with a ``kubernetes`` table), the Karmada API
(``[dr.placement.karmada]``) and, optionally, the ``api_up`` health query
(``[dr.placement.queries]``). Every such API is *external*: the sandbox starts no emulated
API server for it, points its configuration at it, and never stops or cleans it.

Everything is checked before anything starts: a site file, kubeconfig or context that
cannot be used is a :class:`SiteFileError` naming the file and the site.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gotthard.base import format_validation_error
from gotthard.sandbox.processes import SandboxError
from gotthard.site import KubeAccess, SiteConfig

#: The ``api_up`` query of a sandbox with external clusters: the emulated API servers are
#: scraped (job ``apiserver``); an external one is not (its ``/metrics`` needs credentials
#: the sandbox does not hand to Prometheus), so where the job has no series it counts as up.
EXTERNAL_API_UP = 'min(up{job="apiserver"}) or vector(1)'


class SiteFileError(ValueError):
    """A site file, or a kubeconfig it names, that the sandbox cannot use (one line)."""


@dataclass(frozen=True)
class ExternalKube:
    """A Kubernetes API the sandbox does not run: its kubeconfig, context and server."""

    kubeconfig: Path
    context: str
    server: str

    def as_json(self) -> dict[str, str]:
        return {"kubeconfig": str(self.kubeconfig), "context": self.context, "server": self.server}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ExternalKube:
        return cls(Path(data["kubeconfig"]), str(data["context"]), str(data["server"]))


@dataclass(frozen=True)
class ExternalClusters:
    """The external APIs of a sandbox: per site, and Karmada's (None: emulated)."""

    sites: Mapping[str, ExternalKube] = field(default_factory=dict)
    karmada: ExternalKube | None = None
    #: The site file's ``[dr.placement.queries] api_up`` ("" = the sandbox's).
    api_up: str = ""

    def __bool__(self) -> bool:
        return bool(self.sites) or self.karmada is not None

    def as_json(self) -> dict[str, Any]:
        return {
            "sites": {site: kube.as_json() for site, kube in self.sites.items()},
            "karmada": self.karmada.as_json() if self.karmada else None,
            "api_up": self.api_up,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> ExternalClusters:
        if not data:
            return cls()
        karmada = data.get("karmada")
        return cls(
            {site: ExternalKube.from_json(kube) for site, kube in data["sites"].items()},
            ExternalKube.from_json(karmada) if karmada else None,
            str(data.get("api_up", "")),
        )


def read_site_file(path: Path, sites: Sequence[str]) -> ExternalClusters:
    """The external APIs *path* gives for *sites*; a site it does not name, or names
    without a Kubernetes cluster, stays emulated. Raises :class:`SiteFileError`."""
    from gotthard.config import ConfigError, read_toml

    try:
        data = read_toml(path)
    except ConfigError as exc:
        raise SiteFileError(f"site file {exc}") from None
    found: dict[str, ExternalKube] = {}
    raw_sites = _table(data, "sites", path)
    for site in sites:
        if site not in raw_sites:
            continue
        try:
            conf = SiteConfig.model_validate(raw_sites[site])
        except ValidationError as exc:
            raise SiteFileError(format_validation_error(str(path), exc, f"sites.{site}.")) from None
        cluster = conf.kube_cluster
        access = conf.clusters[cluster].kubernetes if cluster else None
        if access is not None:
            where = f"site file {path}: site {site} (cluster {cluster})"
            found[site] = _external(access, where)
    placement = _table(_table(data, "dr", path), "placement", path)
    karmada = None
    if "karmada" in placement:
        try:
            access = KubeAccess.model_validate(placement["karmada"])
        except ValidationError as exc:
            raise SiteFileError(
                format_validation_error(str(path), exc, "dr.placement.karmada.")
            ) from None
        if access.kubeconfig or access.context or access.in_cluster:
            karmada = _external(access, f"site file {path}: Karmada ([dr.placement.karmada])")
    api_up = _table(placement, "queries", path).get("api_up", "")
    if not isinstance(api_up, str):
        raise SiteFileError(f"site file {path}: dr.placement.queries.api_up: not a string")
    return ExternalClusters(found, karmada, api_up)


def _table(data: Mapping[str, Any], key: str, path: Path) -> Mapping[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise SiteFileError(f"site file {path}: {key}: not a table")
    return value


def _external(access: KubeAccess, where: str) -> ExternalKube:
    """*access* checked: an explicit kubeconfig that loads, with the context it names."""
    if access.in_cluster:
        raise SiteFileError(f"{where}: in_cluster = true; the sandbox needs a kubeconfig")
    if not access.kubeconfig:
        raise SiteFileError(f"{where}: no kubeconfig; the sandbox needs an explicit one")
    path = Path(access.kubeconfig).expanduser().absolute()
    context, server = kubeconfig_server(path, access.context, where)
    from gotthard.kube import KubeError, client_for

    try:  # what every Gotthard process will do with it (credentials, certificates)
        client_for(KubeAccess(kubeconfig=str(path), context=context), where).close()
    except KubeError as exc:
        raise SiteFileError(str(exc)) from None
    return ExternalKube(path, context, server)


def kubeconfig_server(path: Path, context: str, where: str) -> tuple[str, str]:
    """The context (*context*, or the file's current one) and the server it points at."""
    import yaml

    prefix = f"{where}: kubeconfig {path}"
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SiteFileError(f"{prefix}: cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise SiteFileError(f"{prefix}: not valid YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(doc, dict):
        raise SiteFileError(f"{prefix}: not a kubeconfig")
    name = context or str(doc.get("current-context") or "")
    if not name:
        raise SiteFileError(f"{prefix}: no context given and no current-context")
    contexts = _named(doc, "contexts", "context")
    if name not in contexts:
        known = ", ".join(sorted(contexts)) or "none"
        raise SiteFileError(f"{prefix}: no context {name!r} (it has: {known})")
    cluster = str(contexts[name].get("cluster", ""))
    server = str(_named(doc, "clusters", "cluster").get(cluster, {}).get("server", ""))
    if not server:
        raise SiteFileError(f"{prefix}: context {name!r}: cluster {cluster!r} has no server")
    return name, server


def _named(doc: Mapping[str, Any], key: str, inner: str) -> dict[str, Mapping[str, Any]]:
    """A kubeconfig list (``contexts``, ``clusters``) as name -> its inner mapping."""
    items = doc.get(key) or []
    return {
        str(item["name"]): item.get(inner) or {}
        for item in (items if isinstance(items, list) else [])
        if isinstance(item, dict) and "name" in item and isinstance(item.get(inner) or {}, dict)
    }


# --------------------------------------------------------------------------- seeding


def seed(kube: ExternalKube, namespaces: Sequence[str], deployments: Mapping[str, str]) -> None:
    """Create on an external cluster what is missing of *namespaces* and *deployments*
    (namespace -> Deployment name: a one-replica ``pause`` Deployment, valid on a real API
    server). Existing objects are left as they are; nothing is ever deleted.
    Raises :class:`SandboxError`."""
    from kubernetes import client

    from gotthard.kube import KubeError, client_for

    where = f"external cluster {kube.server} (context {kube.context})"
    try:
        api = client_for(KubeAccess(kubeconfig=str(kube.kubeconfig), context=kube.context), where)
    except KubeError as exc:
        raise SandboxError(str(exc)) from None
    with api:
        core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
        for namespace in namespaces:
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
            _create(where, f"namespace {namespace}", core.create_namespace, body)
        for namespace, name in deployments.items():
            body = pause_deployment(namespace, name)
            what = f"deployment {namespace}/{name}"
            _create(where, what, apps.create_namespaced_deployment, namespace, body)


def _create(where: str, what: str, create: Any, *args: Any) -> None:
    from kubernetes.client import ApiException
    from urllib3.exceptions import HTTPError

    try:
        create(*args, _request_timeout=10)
    except ApiException as exc:
        if exc.status != 409:
            raise SandboxError(f"{where}: cannot create {what}: HTTP {exc.status}") from None
    except (HTTPError, OSError) as exc:
        raise SandboxError(f"{where}: cannot create {what}: {exc}") from None


def pause_deployment(namespace: str, name: str) -> dict[str, Any]:
    """A valid one-replica ``pause`` Deployment (its status is the cluster's to write)."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": name, "image": "registry.k8s.io/pause:3.9"}]},
            },
        },
    }
