"""The one way to reach Kubernetes: client factory, retries with back-off, errors.

* :func:`client_for` builds an ``ApiClient`` from a :class:`~gotthard.site.KubeAccess`:
  the explicit kubeconfig and context, or the pod's service account only when the
  configuration says ``in_cluster = true``. A kubeconfig that cannot be loaded is an
  error naming the site and cluster; it never falls back to the in-cluster config (a
  daemon in a pod would otherwise act on its own cluster instead of the configured one).
* :func:`call` retries server-side failures (5xx, 429), timeouts and connection errors
  with exponential back-off, and lets client errors (404, 409, ...) through at once:
  those are answers.
* :func:`reaching` turns whatever a block of API calls raises into one
  :class:`KubeError` line naming the site and cluster; the CLI prints it and exits 2.

The ``kubernetes`` package is imported when a client is first needed, so the roles that
never talk to Kubernetes (the node exporter) do not load it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from gotthard import spiffe
from gotthard.site import KubeAccess, SiteConfig

log = logging.getLogger(__name__)
T = TypeVar("T")


class KubeError(Exception):
    """A cluster cannot be reached or its access cannot be loaded (exit status 2)."""


@dataclass
class Retry:
    attempts: int = 5
    backoff_seconds: float = 1.0
    backoff_max_seconds: float = 30.0
    #: Per-request timeout handed to the kubernetes client (``_request_timeout``).
    timeout_seconds: float = 30.0
    sleep: Callable[[float], None] = time.sleep
    #: Called with the operation name on every retry (metrics hook).
    on_retry: Callable[[str], None] = field(default=lambda op: None)


def is_transient(err: BaseException) -> bool:
    """Worth retrying: the server failed or could not be reached, rather than answered."""
    import urllib3.exceptions
    from kubernetes.client import ApiException

    if isinstance(err, ApiException):
        return err.status in (0, 429) or err.status >= 500
    return isinstance(err, urllib3.exceptions.HTTPError | TimeoutError | ConnectionError | OSError)


def status_of(err: BaseException) -> int | None:
    from kubernetes.client import ApiException

    return err.status if isinstance(err, ApiException) else None


def call(retry: Retry, op: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call ``fn(*args, **kwargs)`` with retries on transient failures."""
    kwargs.setdefault("_request_timeout", retry.timeout_seconds)
    delay = retry.backoff_seconds
    for attempt in range(1, retry.attempts + 1):
        try:
            return fn(*args, **kwargs)
        except Exception as err:
            if attempt == retry.attempts or not is_transient(err):
                raise
            log.warning("%s failed (attempt %d/%d): %s", op, attempt, retry.attempts, err)
            retry.on_retry(op)
            retry.sleep(delay)
            delay = min(max(delay * 2, 0.001), retry.backoff_max_seconds)
    raise AssertionError("unreachable")  # pragma: no cover


def call_unless(
    status: int, retry: Retry, op: str, fn: Callable[..., T], *args: Any, **kwargs: Any
) -> tuple[bool, T | None]:
    """:func:`call` -> ``(True, result)``; ``(False, None)`` where the API answers *status*
    (404: not there, 409: already exists), which the caller takes as an answer."""
    try:
        return True, call(retry, op, fn, *args, **kwargs)
    except Exception as err:
        if status_of(err) == status:
            return False, None
        raise


class CustomObjects:
    """Namespaced custom objects of one API group and version, every call retried.

    An operation is ``<verb>_namespaced_custom_object`` of the client's
    ``CustomObjectsApi``; retry logs and metrics name it ``<verb> <kind>``, *kind* being
    the plural unless given."""

    def __init__(self, api: Any, group: str, version: str, retry: Retry) -> None:
        from kubernetes import client

        self.custom = client.CustomObjectsApi(api)
        self.group, self.version, self.retry = group, version, retry

    def _op(
        self, verb: str, namespace: str, plural: str, kind: str
    ) -> tuple[str, Callable[..., Any], str, str, str, str]:
        fn = getattr(self.custom, f"{verb}_namespaced_custom_object")
        return f"{verb} {kind or plural}", fn, self.group, self.version, namespace, plural

    def call(
        self, verb: str, namespace: str, plural: str, *args: Any, kind: str = "", **kwargs: Any
    ) -> Any:
        return call(self.retry, *self._op(verb, namespace, plural, kind), *args, **kwargs)

    def call_unless(
        self, status: int, verb: str, namespace: str, plural: str, *args: Any, kind: str = ""
    ) -> tuple[bool, Any]:
        """:meth:`call`, as :func:`call_unless` takes *status*."""
        return call_unless(status, self.retry, *self._op(verb, namespace, plural, kind), *args)


def _default_kubeconfig() -> str:
    return os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or str(
        Path("~/.kube/config").expanduser()
    )


def client_for(access: KubeAccess, where: str) -> Any:
    """An ``ApiClient`` for one cluster; *where* (``site zurich cluster alps``) names it in
    every error. Raises :class:`KubeError`, never falls back to another configuration."""
    import yaml
    from kubernetes import client, config

    cfg = client.Configuration()
    if access.in_cluster:
        try:
            config.load_incluster_config(client_configuration=cfg)
        except config.ConfigException as err:
            raise KubeError(f"{where}: in_cluster = true but {_one_line(err)}") from None
        return client.ApiClient(cfg)
    path = access.kubeconfig or _default_kubeconfig()
    if not Path(path).is_file():
        raise KubeError(f"{where}: kubeconfig {path}: no such file")
    try:
        config.load_kube_config(
            config_file=path, context=access.context or None, client_configuration=cfg
        )
    except config.ConfigException as err:
        raise KubeError(f"{where}: kubeconfig {path}: {_one_line(err)}") from None
    except yaml.YAMLError as err:
        raise KubeError(f"{where}: kubeconfig {path}: not valid YAML: {_one_line(err)}") from None
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as err:
        # a kubeconfig with fields of the wrong shape surfaces as these
        raise KubeError(f"{where}: kubeconfig {path}: unusable: {_one_line(err)}") from None
    cfg.retries = 1  # urllib3: one reconnect, not a minute of back-off on a dead API
    svid = spiffe.kubernetes_client_files()
    if svid is not None:  # [spiffe] kubernetes = true: the SVID is the client certificate
        cfg.cert_file, cfg.key_file = svid
    return client.ApiClient(cfg)


def site_client(site_name: str, site: SiteConfig, cluster: str | None = None) -> Any:
    """The client of *cluster* of a site, by default the site's Kubernetes cluster."""
    name = cluster or site.kube_cluster
    conf = site.clusters.get(name) if name else None
    if conf is None or conf.kubernetes is None:
        what = where(site_name, name)
        raise KubeError(
            f"{what}: no Kubernetes access configured"
            f" ([sites.{site_name}.clusters.{name or 'NAME'}.kubernetes])"
        )
    return client_for(conf.kubernetes, where(site_name, name))


def where(site: str, cluster: str | None) -> str:
    return f"site {site} cluster {cluster}" if cluster else f"site {site}"


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def describe(err: BaseException) -> str:
    """A short, single-line account of an API failure (no response bodies)."""
    from kubernetes.client import ApiException

    if isinstance(err, ApiException):
        return f"HTTP {err.status} {err.reason or ''}".strip()
    if isinstance(err, KubeError):
        return str(err)
    text = _one_line(err)
    return text if len(text) <= 200 else text[:197] + "..."


@contextlib.contextmanager
def reaching(site_cluster: str) -> Iterator[None]:
    """Turn a failure inside the block into one :class:`KubeError` line naming the cluster."""
    try:
        yield
    except KubeError:
        raise
    except Exception as err:
        if is_transient(err) or status_of(err) is not None:
            raise KubeError(
                f"{site_cluster}: API unreachable or failing: {describe(err)}"
            ) from None
        raise


def list_objects(
    api: Any, retry: Retry, api_version: str, plural: str, namespace: str
) -> list[dict[str, Any]]:
    """LIST any namespaced resource (core or grouped) as plain dicts."""
    prefix = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    path = f"{prefix}/namespaces/{namespace}/{plural}"

    def get(_request_timeout: float | None = None) -> Any:
        method, url, headers, body, post = api.param_serialize(
            "GET", path, header_params={"Accept": "application/json"}, auth_settings=["BearerToken"]
        )
        response = api.call_api(method, url, headers, body, post, _request_timeout=_request_timeout)
        response.read()
        return api.response_deserialize(response, {"200": "object"}).data

    data = call(retry, f"list {plural}", get)
    return list((data or {}).get("items", []))
