"""Kubernetes API access for the DR daemon: clients per site and retries with back-off.

Every call that goes to an API server passes through :func:`call`, which retries
server-side failures (5xx, 429), timeouts and connection errors with exponential
back-off, and lets client errors (4xx: 404, 409, ...) through at once: those are answers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import urllib3.exceptions
from kubernetes import client, config

from gotthard.dr.settings import DrConfig, DrSite

log = logging.getLogger(__name__)
T = TypeVar("T")


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

    @classmethod
    def from_settings(cls, settings: DrConfig, **kwargs: Any) -> Retry:
        return cls(
            attempts=settings.api_attempts,
            backoff_seconds=settings.api_backoff_seconds,
            backoff_max_seconds=settings.api_backoff_max_seconds,
            timeout_seconds=settings.api_timeout_seconds,
            **kwargs,
        )


def is_transient(err: BaseException) -> bool:
    if isinstance(err, client.ApiException):
        return err.status in (0, 429) or err.status >= 500
    return isinstance(err, urllib3.exceptions.HTTPError | TimeoutError | ConnectionError | OSError)


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


def status_of(err: BaseException) -> int | None:
    return err.status if isinstance(err, client.ApiException) else None


def api_client_for(site: DrSite) -> client.ApiClient:
    """An ApiClient for a site's cluster from its kubeconfig context (or in-cluster)."""
    try:
        return config.new_client_from_config(
            config_file=site.kubeconfig or None, context=site.kube_context or None
        )
    except config.ConfigException:
        config.load_incluster_config()
        return client.ApiClient()


def api_client_for_url(url: str) -> client.ApiClient:
    """An ApiClient for a plain URL (tests, ``kubectl proxy``)."""
    cfg = client.Configuration()
    cfg.host = url.rstrip("/")
    return client.ApiClient(cfg)


def list_objects(
    api: client.ApiClient, retry: Retry, api_version: str, plural: str, namespace: str
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
