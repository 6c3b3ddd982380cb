"""An emulated Kubernetes API server: kmock's ``KubernetesEmulator`` served over real HTTP.

NOT a kube-apiserver: an in-memory Kubernetes API that the two-site sandbox runs in place
of the real clusters (one per site, and one as the Karmada API) and that the tests share.
Code talks to it with the official ``kubernetes`` client, through an ``ApiClient`` or a
kubeconfig file. :class:`KubeEmulator` adds what kmock 0.8 lacks and Gotthard depends on,
so that the code meets the API server's behaviour, not the emulator's:

* CREATE answers 201 (kmock: 200, which kubernetes>=35 does not deserialise) and an
  existing name answers 409 with a Status of reason ``AlreadyExists``;
* every write is validated and refused as the API server refuses it (422 ``Invalid`` with
  ``details.causes``; :mod:`gotthard_testing.resources` says against what), and ``status``
  is written only where the real server lets it be written (per kind: the ``/status``
  subresource, or create and update; also there);
* every object carries ``metadata.resourceVersion`` (one counter per emulator, bumped on
  every write, like etcd's revision), ``uid``, ``creationTimestamp`` and ``generation``
  (1 on create, bumped when anything but metadata and status changes);
* PUT (replace) is served; a PUT, or a merge patch carrying ``metadata.resourceVersion``,
  whose resourceVersion is not the stored one answers 409 with reason ``Conflict``;
* LIST honours ``labelSelector`` (``=``, ``==``, ``!=``, ``in``, ``notin``, ``key``,
  ``!key``); a malformed selector answers 400;
* ``/api/v1/namespaces`` (core, cluster-scoped) fails in kmock's path parser (500) ->
  Namespaces are served here from a dict (create, list, get, delete); deleting one
  deletes every object in it at once (a real API server finalizes asynchronously);
* writes are serialised by one lock, so a version check and its write are atomic.

Watches stream what kmock streams; they are not filtered by label selectors.

Faults (an HTTP error status and/or a slow answer) can be queued per method and path
prefix, for a number of requests or until cleared. A health switch makes the server look
down to monitoring while its API keeps answering: ``PUT /_emulator/health`` with
``{"healthy": false}`` (or :meth:`EmulatorThread.set_healthy`) turns ``/livez``,
``/readyz`` and ``/metrics`` into 503s. ``/metrics`` serves
``apiserver_emulated_objects{resource,version}`` per registered resource.

Only the registered resources exist; :func:`~gotthard_testing.resources.crd_resources`
reads them from CRD manifests and :func:`sandbox_resources` names those of an emulated
cluster or Karmada API (the CRDs are in ``gotthard_testing/crds/``). Every request is
handed to the callables in :data:`REQUEST_HOOKS` first (the tests record API calls that
way).

Standalone, one process per API server::

    python -m gotthard_testing.kubeapi --listen 127.0.0.1:PORT --kind kubernetes \\
        --name zurich --kubeconfig zurich.kubeconfig

writes a kubeconfig for it (mode 0600) and serves until SIGTERM or SIGINT; it is ready
when ``GET /readyz`` answers 200.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import datetime as dt
import json
import signal
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, Self

import aiohttp.web
import attrs
import kmock
import yaml
from kmock._internal.dicts import patch_dict  # kmock is pinned: its own patch semantics
from kubernetes import client

from gotthard.files import write_private_atomically
from gotthard_testing.resources import (
    CONFIGMAPS,
    CRD_DIR,
    DEPLOYMENTS,
    LEASES,
    NAMESPACES,
    NODES,
    PODS,
    SECRETS,
    SERVICES,
    STATUS_SUBRESOURCE,
    STORAGE_CLASSES,
    Resource,
    crd_resources,
    rejection,
    validate,
    without_nulls,
)
from gotthard_testing.selectors import label_selector, labels_of

__all__ = [
    "CONFIGMAPS",
    "CRD_DIR",
    "DEPLOYMENTS",
    "KINDS",
    "LEASES",
    "NODES",
    "PODS",
    "REQUEST_HOOKS",
    "SECRETS",
    "SERVICES",
    "STORAGE_CLASSES",
    "EmulatorThread",
    "Fault",
    "KubeEmulator",
    "Resource",
    "UsageParser",
    "crd_resources",
    "label_selector",
    "main",
    "sandbox_resources",
    "timestamp",
    "write_kubeconfig",
]

VERBS = frozenset({"get", "list", "watch", "create", "update", "patch", "delete"})

#: Called with every request before it is served (observers: their result is ignored).
REQUEST_HOOKS: list[Callable[[aiohttp.web.BaseRequest], None]] = []

#: What an emulated API server can stand for (``--kind``).
KINDS = ("kubernetes", "karmada")


def sandbox_resources(kind: str) -> list[Resource]:
    """What an emulated API server of *kind* serves: ``kubernetes`` a cluster with Velero
    (its CRDs, the workloads a backup holds, the Lease); ``karmada`` the Karmada API (its
    CRDs and the Lease). Raises ValueError for another kind."""
    if kind == "kubernetes":
        crds = sorted(CRD_DIR.glob("velero.io_*.yaml"))
        return [*crd_resources(*crds), DEPLOYMENTS, PODS, SERVICES, CONFIGMAPS, LEASES]
    if kind == "karmada":
        return [*crd_resources(*sorted(CRD_DIR.glob("policy.karmada.io_*.yaml"))), LEASES]
    raise ValueError(f"unknown API server kind {kind!r} (one of: {', '.join(KINDS)})")


@dataclass
class Fault:
    """Answer requests of *method* whose path starts with *prefix* with *status* (0: the
    real answer) after *delay* seconds; for *times* requests (``None``: until cleared).
    With *agent*, only requests whose User-Agent is *agent* (one client of several)."""

    method: str
    prefix: str
    status: int
    delay: float
    times: int | None
    agent: str = ""

    def matches(self, raw: aiohttp.web.BaseRequest) -> bool:
        return (
            raw.method == self.method
            and raw.path.startswith(self.prefix)
            and (not self.agent or raw.headers.get("User-Agent") == self.agent)
        )


def _status(
    code: int, reason: str = "", message: str = "", details: Mapping[str, Any] | None = None
) -> aiohttp.web.Response:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}}
    body.update(status="Failure", code=code, reason=reason, message=message)
    if details:
        body["details"] = dict(details)
    return aiohttp.web.json_response(body, status=code)


def _fail(
    code: int, reason: str, message: str, details: Mapping[str, Any] | None = None
) -> NoReturn:
    """Answer the request with a Status of *code* and *reason* (raised through kmock)."""
    details = dict(details or {"causes": []})  # kmock shows a traceback for no details
    raise kmock.KubernetesError(status=code, reason=reason, message=message, details=details)


def timestamp() -> str:
    """Now, as the API server writes a time (RFC 3339, UTC, whole seconds)."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: The path of the health switch (not a Kubernetes path: no API group starts with ``_``).
HEALTH_SWITCH = "/_emulator/health"
_HEALTH_PATHS = frozenset({HEALTH_SWITCH, "/livez", "/readyz", "/metrics"})
#: Metadata the API server owns: an update cannot change them.
_SERVER_FIELDS = ("name", "namespace", "uid", "creationTimestamp", "generation")


def _typed(resource: Resource, body: dict[str, Any]) -> None:
    """Fill in *body*'s apiVersion and kind from the endpoint, as the server decodes a
    body without them; 400 when they name another kind."""
    for key, wanted in (("apiVersion", resource.api_version), ("kind", resource.kind)):
        given = body.setdefault(key, wanted)
        if given != wanted:
            _fail(400, "BadRequest", f"the {key} in the data ({given}) does not match {wanted!r}")


def _content(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What a change of bumps ``metadata.generation``: all but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


@attrs.define(kw_only=True)
class KubeEmulator(kmock.KubernetesEmulator):
    """kmock's emulator with the API-server behaviour and the fault queue of the module
    docstring."""

    namespaces: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    faults: list[Fault] = attrs.field(factory=list)
    #: The health switch: False turns /livez, /readyz and /metrics into 503s.
    healthy: bool = True
    #: The last resourceVersion handed out (one counter for all objects).
    revision: int = 0
    #: The registered resources and their rules, by (group, version, plural).
    served: dict[tuple[str, str, str], Resource] = attrs.field(factory=dict)
    _writes: asyncio.Lock = attrs.field(factory=asyncio.Lock, init=False)

    def register(self, *resources: Resource) -> None:
        """Serve *resources* (all verbs, their rules)."""
        for resource in resources:
            self.resources[resource.key] = kmock.ResourceInfo(
                kind=resource.kind,
                namespaced=resource.namespaced,
                verbs=set(VERBS),
                subresources={"status"} if resource.has_status_subresource else set(),
            )
            group, _, version = resource.api_version.rpartition("/")
            self.served[(group, version, resource.plural)] = resource

    def _next_version(self) -> str:
        self.revision += 1
        return str(self.revision)

    def _stamp(self, metadata: dict[str, Any]) -> None:
        """What the API server sets on a new object."""
        metadata.update(
            resourceVersion=self._next_version(),
            uid=str(uuid.uuid4()),
            creationTimestamp=timestamp(),
            generation=1,
        )

    # -- objects of registered resources ------------------------------------------------
    def _stored(self, request: kmock.Request, namespace: str | None, name: str | None) -> Any:
        """The live kmock object at *namespace*/*name* of the request's resource, or None."""
        key = (request.resource, namespace, name)
        if name is None or key not in self.objects or self.objects[key].deleted:
            return None
        return self.objects[key]

    @staticmethod
    def _check_version(request: kmock.Request, stored: Any, metadata: Any) -> None:
        """409 Conflict when the request names a resourceVersion that is not the stored one."""
        wanted = metadata.get("resourceVersion") if isinstance(metadata, Mapping) else None
        current = (stored.raw.get("metadata") or {}).get("resourceVersion")
        if wanted and str(wanted) != str(current):
            plural = request.resource.plural if request.resource else ""
            _fail(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {plural} "{request.name}": the object '
                "has been modified; please apply your changes to the latest version and "
                "try again",
                {"name": request.name, "kind": plural},
            )

    @staticmethod
    def _check(resource: Resource, obj: Mapping[str, Any], request: kmock.Request) -> None:
        """Refuse *obj* as the API server would (422 Invalid, or 400)."""
        strict = request.params.get("fieldValidation") == "Strict"
        causes = validate(resource, obj, strict)
        if causes:
            name = str((obj.get("metadata") or {}).get("name") or "")
            builtin = resource.schema is None
            _fail(*rejection(resource, name, causes, builtin))

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        """Writes, under one lock: creates checked and prepared here, then stored by
        kmock; updates done here; deletes kmock's."""
        method = str(request.method.value)
        if request.resource is None or method not in _WRITES:
            return await super()._handle(request)
        resource = self.served.get(_resource_key(request.resource))
        if resource is None:
            return await super()._handle(request)  # kmock's 404 for an unknown resource
        if request.subresource and not (
            request.subresource == "status" and resource.has_status_subresource
        ):
            _fail(404, "NotFound", "the server could not find the requested resource")
        async with self._writes:
            if method == "DELETE":
                return await super()._handle(request)
            if method == "POST" and request.name is None:
                self._prepare_create(request, resource)
                return await super()._handle(request)
            if method in ("PUT", "PATCH") and request.name is not None:
                return await self._update(request, resource)
        _fail(405, "MethodNotAllowed", f"{method} is not allowed on {request.url.path}")

    def _prepare_create(self, request: kmock.Request, resource: Resource) -> None:
        """The object as the server stores it (in ``request.data``, which kmock then
        stores): typed, status as the kind allows, validated, stamped; 409 if it exists."""
        if not isinstance(request.data, dict):
            _fail(400, "BadRequest", "the body of a create must be a JSON object")
        body = without_nulls(request.data)
        _typed(resource, body)
        meta = body.setdefault("metadata", {})
        namespace = request.namespace or meta.get("namespace")
        if request.namespace and meta.get("namespace", request.namespace) != request.namespace:
            message = "the namespace of the provided object does not match the namespace "
            _fail(400, "BadRequest", message + "sent on the request")
        if resource.status == STATUS_SUBRESOURCE:
            body.pop("status", None)
            if resource.initial_status is not None:
                body["status"] = copy.deepcopy(dict(resource.initial_status))
        self._check(resource, body, request)
        if self._stored(request, namespace, meta.get("name")) is not None:
            plural = resource.plural
            _fail(
                409,
                "AlreadyExists",
                f'{plural} "{meta.get("name")}" already exists',
                {"name": meta.get("name"), "kind": plural},
            )
        self._stamp(meta)
        if namespace and resource.namespaced:
            meta["namespace"] = namespace
        request.data.clear()
        request.data.update(body)

    async def _update(self, request: kmock.Request, resource: Resource) -> aiohttp.web.Response:
        """PUT (replace) and PATCH (merge or JSON patch), of the object or of its
        ``/status``: the new object after the version check, with what the kind lets
        this write change, validated."""
        stored = self._stored(request, request.namespace, request.name)
        if stored is None:
            _fail(404, "NotFound", f'{resource.plural} "{request.name}" not found')
        body = request.data
        if request.method.value == "PUT" and not isinstance(body, dict):
            _fail(400, "BadRequest", "the body of a replace must be a JSON object")
        if isinstance(body, dict):
            self._check_version(request, stored, body.get("metadata"))
        old = copy.deepcopy(stored.raw)
        try:
            given = body if request.method.value == "PUT" else patch_dict(old, body)
        except (TypeError, ValueError, LookupError) as err:  # a patch that does not apply
            _fail(422, "Invalid", f"the patch does not apply: {err}")
        new = without_nulls(copy.deepcopy(dict(given)))
        if request.subresource == "status":
            new = {**old, "status": new.get("status")}
        elif resource.has_status_subresource:
            new["status"] = old.get("status")
        _typed(resource, new)
        server = {k: v for k, v in (old.get("metadata") or {}).items() if k in _SERVER_FIELDS}
        new["metadata"] = {**(new.get("metadata") or {}), **server}
        if _content(new) != _content(old):
            new["metadata"]["generation"] = int(server.get("generation") or 1) + 1
        new = {k: v for k, v in new.items() if v is not None}
        self._check(resource, new, request)
        new["metadata"]["resourceVersion"] = self._next_version()
        stored.create(new)
        await self._buses[request.resource].put({"type": "MODIFIED", "object": new})
        return aiohttp.web.json_response(new)

    async def _serve_create(self, request: kmock.Request) -> kmock.Payload:
        return kmock.Response(status=201, payload=await super()._serve_create(request))

    async def _serve_list(self, request: kmock.Request) -> kmock.Payload:
        listed: dict[str, Any] = await super()._serve_list(request)  # type: ignore[assignment]
        selected = _select(listed["items"], request.params.get("labelSelector", ""))
        return {**listed, "items": selected, "metadata": {"resourceVersion": str(self.revision)}}

    # -- faults and the request entry point ---------------------------------------------
    def _take_fault(self, raw: aiohttp.web.BaseRequest) -> Fault | None:
        """The first fault for this request, used up once its count reaches 0."""
        for fault in self.faults:
            if fault.matches(raw):
                if fault.times is not None:
                    fault.times -= 1
                    if fault.times <= 0:
                        self.faults.remove(fault)
                return fault
        return None

    async def __call__(self, raw: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        for hook in REQUEST_HOOKS:
            hook(raw)
        if raw.path in _HEALTH_PATHS:
            return await self._health(raw)
        fault = self._take_fault(raw)
        if fault is not None:
            if fault.delay:
                await asyncio.sleep(fault.delay)
            if fault.status:
                return _status(fault.status)
        parts = raw.path.strip("/").split("/")
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) <= 4:
            return await self._namespaces(raw, parts[3] if len(parts) == 4 else None)
        return await super().__call__(raw)

    # -- health and metrics -------------------------------------------------------------
    async def _health(self, raw: aiohttp.web.BaseRequest) -> aiohttp.web.Response:
        """The health switch, ``/livez``, ``/readyz`` and ``/metrics`` (module docstring)."""
        if raw.path == HEALTH_SWITCH:
            if raw.method == "PUT":
                try:
                    wanted = json.loads(await raw.read())["healthy"]
                except (ValueError, KeyError, TypeError):
                    wanted = None
                if not isinstance(wanted, bool):
                    return _status(400, "BadRequest", 'expected {"healthy": true|false}')
                self.healthy = wanted
            elif raw.method != "GET":
                return _status(405, "MethodNotAllowed")
            return aiohttp.web.json_response({"healthy": self.healthy})
        if not self.healthy:
            return aiohttp.web.Response(status=503, text="unhealthy (emulator health switch)\n")
        if raw.path == "/metrics":
            return aiohttp.web.Response(text=self.metrics(), content_type="text/plain")
        return aiohttp.web.Response(text="ok")

    def metrics(self) -> str:
        """Prometheus text: the number of live objects per registered resource, labelled
        like kube-apiserver's ``apiserver_storage_objects`` (``deployments.apps``)."""
        counts: dict[tuple[str, str, str], int] = {}
        for (resource, _, _), obj in self.objects.items():
            if not obj.deleted:
                key = _resource_key(resource)
                counts[key] = counts.get(key, 0) + 1
        lines = [
            "# HELP apiserver_emulated_objects Objects stored in the emulated API server.",
            "# TYPE apiserver_emulated_objects gauge",
        ]
        served = sorted({_resource_key(resource) for resource in self.resources})
        for group, version, plural in served:
            name = f"{plural}.{group}" if group else plural
            count = counts.get((group, version, plural), 0)
            labels = f'resource="{name}",version="{version}"'
            lines.append(f"apiserver_emulated_objects{{{labels}}} {count}")
        labels = 'resource="namespaces",version="v1"'
        lines.append(f"apiserver_emulated_objects{{{labels}}} {len(self.namespaces)}")
        return "\n".join(lines) + "\n"

    # -- namespaces -------------------------------------------------------------------
    async def _namespaces(
        self, raw: aiohttp.web.BaseRequest, name: str | None
    ) -> aiohttp.web.Response:
        """Core Namespaces: POST and GET on the collection, GET and DELETE on one."""
        if name is None and raw.method == "POST":
            return await self._create_namespace(raw)
        if name is None and raw.method == "GET":
            try:
                found = _select(list(self.namespaces.values()), raw.query.get("labelSelector", ""))
            except kmock.KubernetesError as err:
                return _status(err.status, err.reason or "", err.message or "")
            items = [
                {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")} for obj in found
            ]
            meta = {"resourceVersion": str(self.revision)}  # a real LIST omits kind in items
            body = {"kind": "NamespaceList", "apiVersion": "v1", "metadata": meta, "items": items}
            return aiohttp.web.json_response(body)
        if name not in self.namespaces:
            return _status(404, "NotFound", f'namespaces "{name}" not found')
        if raw.method == "GET":
            return aiohttp.web.json_response(self.namespaces[name])
        if raw.method == "DELETE":
            async with self._writes:
                await self._delete_contents(name)
                return aiohttp.web.json_response(self.namespaces.pop(name))
        return _status(405, "MethodNotAllowed")

    async def _create_namespace(self, raw: aiohttp.web.BaseRequest) -> aiohttp.web.Response:
        """A Namespace as the server creates it: validated, phase Active, stamped."""
        try:
            obj = without_nulls(json.loads(await raw.read()))
        except ValueError:
            return _status(400, "BadRequest", "the body is not JSON")
        if not isinstance(obj, dict):
            return _status(400, "BadRequest", "the body of a create must be a JSON object")
        obj.update(apiVersion=obj.get("apiVersion", "v1"), kind=obj.get("kind", "Namespace"))
        obj["status"] = dict(NAMESPACES.initial_status or {})
        meta = obj.setdefault("metadata", {})
        causes = validate(NAMESPACES, obj, raw.query.get("fieldValidation") == "Strict")
        if causes:
            return _status(*rejection(NAMESPACES, str(meta.get("name") or ""), causes, True))
        key = meta["name"]
        async with self._writes:
            if key in self.namespaces:
                return _status(409, "AlreadyExists", f'namespaces "{key}" already exists')
            self._stamp(meta)
            self.namespaces[key] = obj
        return aiohttp.web.json_response(obj, status=201)

    async def _delete_contents(self, namespace: str) -> None:
        """Delete every object in *namespace* (the namespace's finalization)."""
        for (resource, obj_namespace, _), obj in list(self.objects.items()):
            if obj_namespace == namespace and not obj.deleted:
                last = obj.raw
                obj.delete()
                await self._buses[resource].put({"type": "DELETED", "object": last})


def _resource_key(resource: Any) -> tuple[str, str, str]:
    """(group, version, plural) of a kmock resource."""
    return (resource.group or "", resource.version or "", resource.plural or "")


def _select(items: list[dict[str, Any]], selector: str) -> list[dict[str, Any]]:
    """*items* matching the label *selector* (all of them for ``""``); 400 if malformed."""
    if not selector:
        return items
    try:
        matches = label_selector(selector)
    except ValueError as err:
        raise kmock.KubernetesError(status=400, reason="BadRequest", message=str(err)) from None
    return [item for item in items if matches(labels_of(item))]


@contextlib.asynccontextmanager
async def serving(
    emulator: KubeEmulator, host: str = "127.0.0.1", port: int | None = None
) -> AsyncIterator[str]:
    """Serve *emulator* over HTTP on *host*:*port* (None: any free port) while in the
    block; yields its URL. Binding a busy port raises OSError."""
    async with emulator, kmock.Server(emulator, host=host, port=port) as server:
        yield str(server.url).rstrip("/")


def write_kubeconfig(
    path: Path, server: str, name: str = "emu", token: str | None = "not-checked"
) -> Path:
    """Write a kubeconfig whose cluster, user and context are all *name* to *path*
    (mode 0600: a kubeconfig may hold credentials). ``token=None``: a user without one."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server}}],
        "users": [{"name": name, "user": {} if token is None else {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }
    write_private_atomically(path, yaml.safe_dump(doc))
    return path


class EmulatorThread:
    """A :class:`KubeEmulator` serving *resources* over HTTP from a background event loop
    (the kubernetes client is synchronous), on *host*:*port* (None: a free port). A
    context manager: started on entry, stopped on exit."""

    def __init__(self, *resources: Resource, host: str = "127.0.0.1", port: int | None = None):
        self.resources = list(resources)
        self.url = ""
        self.emulator = KubeEmulator()
        self._address = (host, port)
        self._error: BaseException | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def register(self, *resources: Resource) -> None:
        """Serve *resources* too (before or after :meth:`start`)."""
        self.emulator.register(*resources)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as err:  # handed to start(): it raises it in the caller
            self._error = err
            self._ready.set()

    async def _main(self) -> None:
        self.register(*self.resources)
        self._stop = asyncio.Event()
        async with serving(self.emulator, *self._address) as url:
            self.url = url
            self.loop = asyncio.get_running_loop()
            self._ready.set()
            await self._stop.wait()

    def start(self) -> EmulatorThread:
        """Start serving; raises what stopped it from starting (OSError: port in use)."""
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the Kubernetes API emulator did not start")
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        if self._error is None and self._ready.is_set():
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def set_healthy(self, ok: bool) -> None:
        """Flip the health switch (``/livez``, ``/readyz`` and ``/metrics``)."""
        self.emulator.healthy = ok

    def api(self, agent: str = "") -> client.ApiClient:
        """A client for the emulator; no urllib3 retries (they would hide the code's own).
        *agent* is its User-Agent, which :meth:`fault` can single out."""
        config = client.Configuration()
        config.host = self.url
        config.retries = 0
        api = client.ApiClient(config)
        if agent:
            api.user_agent = agent
        return api

    def kubeconfig(self, path: Path, server: str | None = None, name: str = "emu") -> Path:
        """Write a kubeconfig (context *name*) for the emulator, or for *server*, to *path*."""
        return write_kubeconfig(path, server or self.url, name)

    def fault(
        self,
        method: str,
        prefix: str,
        status: int = 500,
        delay: float = 0.0,
        times: int | None = 1,
        agent: str = "",
    ) -> None:
        """Queue a :class:`Fault` (``times=None``: until :meth:`clear_faults`)."""
        self.emulator.faults.append(Fault(method, prefix, status, delay, times, agent))

    def clear_faults(self) -> None:
        self.emulator.faults.clear()

    def store_unchecked(self, resource: Resource, body: dict[str, Any]) -> None:
        """Put *body* into the store as it is, past every check of the API: an object the
        API server refuses (and this one does), which tests of code that must survive one
        need, as a cluster can still hold objects that an older, laxer version stored."""

        async def put() -> None:
            meta = body["metadata"]
            self.emulator.objects[(resource.key, meta.get("namespace"), meta["name"])] = body

        asyncio.run_coroutine_threadsafe(put(), self.loop).result(10)


# -- the standalone process ---------------------------------------------------------------


class UsageParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line and exit 2 (argparse's own
    print the usage too); the sandbox's standalone processes use it."""

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host, int(port)


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = UsageParser(
        prog=prog, description="An emulated Kubernetes API server (not Kubernetes)."
    )
    parser.add_argument("--listen", type=_listen, required=True, metavar="HOST:PORT")
    parser.add_argument("--kind", choices=KINDS, default="kubernetes")
    parser.add_argument("--name", required=True, help="cluster, user and context name")
    parser.add_argument("--kubeconfig", type=Path, required=True, metavar="OUT")
    return parser


async def _serve(emulator: KubeEmulator, host: str, port: int, name: str, out: Path) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with serving(emulator, host, port) as url:
        write_kubeconfig(out, url, name, token=None)
        print(f"emulated {name} API server on {url}", flush=True)
        await stop.wait()


def main(
    argv: Sequence[str] | None = None, prog: str = "python -m gotthard_testing.kubeapi"
) -> int:
    """Run one emulated API server until SIGTERM/SIGINT: 0; 2 for bad arguments, a port
    in use or an unwritable kubeconfig (one line on stderr)."""
    args = _parser(prog).parse_args(argv)
    (host, port), emulator = args.listen, KubeEmulator()
    emulator.register(*sandbox_resources(args.kind))
    try:
        asyncio.run(_serve(emulator, host, port, args.name, args.kubeconfig))
    except OSError as err:  # binding the port, or writing the kubeconfig (a file name)
        where = err.filename or f"{host}:{port}"
        print(f"{prog}: error: {where}: {err.strerror or err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
