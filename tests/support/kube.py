"""kmock's ``KubernetesEmulator`` served over real HTTP from a background thread.

The emulator is an in-memory Kubernetes API (not a kube-apiserver): the code under test
talks to it with the official ``kubernetes`` client, through an ``ApiClient`` or a
kubeconfig file. :class:`KubeEmulator` adds what kmock 0.8 lacks and Gotthard depends on,
so that the code under test meets the API server's behaviour, not the test double's:

* CREATE answers 201 (kmock: 200, which kubernetes>=35 does not deserialise) and an
  existing name answers 409 with a Status of reason ``AlreadyExists``;
* every object carries ``metadata.resourceVersion`` (one counter per emulator, bumped on
  every write, like etcd's revision), ``uid`` and ``creationTimestamp``;
* PUT (replace) is served; a PUT, or a merge patch carrying ``metadata.resourceVersion``,
  whose resourceVersion is not the stored one answers 409 with reason ``Conflict``;
* LIST honours ``labelSelector`` (``=``, ``==``, ``!=``, ``in``, ``notin``, ``key``,
  ``!key``); a malformed selector answers 400;
* ``/api/v1/namespaces`` (core, cluster-scoped) fails in kmock's path parser (500) ->
  Namespaces are served here from a dict (create, list, get, delete); deleting one
  deletes every object in it at once (a real API server finalizes asynchronously);
* writes are serialised by one lock, so a version check and its write are atomic.

The Lease API (``coordination.k8s.io/v1`` leases, :data:`LEASES`) gets all of the above.
Watches stream what kmock streams; they are not filtered by label selectors.

Faults (an HTTP error status and/or a slow answer) can be queued per method and path
prefix, for a number of requests or until cleared.

Only the resources registered on the :class:`EmulatorThread` exist; :func:`crd_resources`
reads them from CRD manifests.

Every API call an emulator serves is recorded as an :class:`ApiCall` (verb, API group,
resource, namespace, which code made it, in which test file), so that the deployment's
RBAC can be checked against what the code really asks for. Recording only observes: the
answers are unchanged. Calls are kept, without repeats, in :data:`RECORDED` and, when
``$GOTTHARD_KUBE_CALLS`` names a file, appended to it as JSON lines (a child pytest hands
its calls to its parent that way). The ``kubernetes`` client of this process names the
module that made each call in the ``X-Gotthard-Caller`` header (the first frame outside
the client and ``gotthard.kube``): ``gotthard.dr.lease`` for the DR daemon's code,
``tests.dr.emulator`` for the test harness. A call without that header came from another
process (a ``gotthard`` child) and is attributed by its test file.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import json
import os
import re
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Self

import aiohttp.web
import attrs
import kmock
import pytest
import yaml
from kubernetes import client

from .lifecycle import StopOnExit

VERBS = frozenset({"get", "list", "watch", "create", "patch", "delete"})

#: File (JSON lines) the recorded API calls are appended to, when set.
CALLS_FILE_ENV = "GOTTHARD_KUBE_CALLS"
#: Request header naming the module that made a call (set by this process' client).
CALLER_HEADER = "X-Gotthard-Caller"


@dataclass(frozen=True)
class ApiCall:
    """One kind of API call as RBAC sees it, and where it came from.

    ``group`` is ``""`` for the core group; ``resource`` carries a subresource as
    ``backups/status``; ``namespace`` is ``""`` for cluster-scoped and all-namespace
    calls. ``caller`` is the module that made the call (``""``: another process) and
    ``test`` the test file that was running."""

    verb: str
    group: str
    resource: str
    namespace: str
    caller: str
    test: str


#: The distinct calls the emulators of this process have served.
RECORDED: set[ApiCall] = set()
_record_lock = threading.Lock()

#: Subresources of a Namespace (``/api/v1/namespaces/NAME/status``), not resources in it.
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})


def api_call(
    method: str, path: str, query: dict[str, str], caller: str, test: str
) -> ApiCall | None:
    """The RBAC view of one request, or None for a non-resource path (discovery)."""
    parts = [part for part in path.split("/") if part]
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    else:
        return None
    namespace = ""
    if rest[0] == "namespaces" and (
        len(rest) >= 4 or (len(rest) == 3 and rest[2] not in _NAMESPACE_SUBRESOURCES)
    ):
        namespace, rest = rest[1], rest[2:]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) >= 3 else "")
    item = len(rest) >= 2
    verb = {
        "GET": "get" if item else ("watch" if query.get("watch") in ("1", "true") else "list"),
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if item else "deletecollection",
    }.get(method, method.lower())
    return ApiCall(verb, group, resource, namespace, caller, test)


def record(raw: aiohttp.web.BaseRequest) -> None:
    """Add the call *raw* makes to :data:`RECORDED` (and the calls file), once."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split("::")[0]
    call = api_call(raw.method, raw.path, dict(raw.query), raw.headers.get(CALLER_HEADER, ""), test)
    if call is None:
        return
    with _record_lock:
        if call in RECORDED:
            return
        RECORDED.add(call)
        path = os.environ.get(CALLS_FILE_ENV)
        if path:
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(asdict(call)) + "\n")


#: Modules skipped when looking for the caller of an API call.
_PLUMBING = ("kubernetes.", "urllib3.", "pydantic.", "gotthard.kube", __name__)


def _caller() -> str:
    """The module of the innermost frame outside the client and ``gotthard.kube``."""
    frame = sys._getframe(2)
    while frame is not None:
        name = str(frame.f_globals.get("__name__", ""))
        if not name.startswith(_PLUMBING):
            return name
        frame = frame.f_back
    return ""


def _naming_caller(call_api: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(call_api)
    def wrapper(
        self: Any, method: str, url: str, header_params: Any = None, *args: Any, **kwargs: Any
    ) -> Any:
        headers = {**(header_params or {}), CALLER_HEADER: _caller()}
        return call_api(self, method, url, headers, *args, **kwargs)

    wrapper.names_caller = True  # type: ignore[attr-defined]
    return wrapper


def pytest_configure(config: pytest.Config) -> None:
    """Make this process' kubernetes client name the caller of each API call."""
    if not getattr(client.ApiClient.call_api, "names_caller", False):
        client.ApiClient.call_api = _naming_caller(client.ApiClient.call_api)  # type: ignore[method-assign]


@dataclass(frozen=True)
class Resource:
    """A resource the emulator serves: ``key`` is ``GROUP/VERSION/PLURAL`` (``v1/PLURAL``
    for the core group)."""

    key: str
    kind: str
    namespaced: bool = True


PODS = Resource("v1/pods", "Pod")
NODES = Resource("v1/nodes", "Node", namespaced=False)
STORAGE_CLASSES = Resource("storage.k8s.io/v1/storageclasses", "StorageClass", namespaced=False)
DEPLOYMENTS = Resource("apps/v1/deployments", "Deployment")
LEASES = Resource("coordination.k8s.io/v1/leases", "Lease")


def crd_resources(*paths: Path) -> list[Resource]:
    """One :class:`Resource` per served version of each CRD manifest in *paths*."""
    found = []
    for path in paths:
        spec = yaml.safe_load(path.read_text())["spec"]
        for version in spec["versions"]:
            found.append(
                Resource(
                    f"{spec['group']}/{version['name']}/{spec['names']['plural']}",
                    spec["names"]["kind"],
                    spec["scope"] == "Namespaced",
                )
            )
    return found


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


def _status(code: int, reason: str = "", message: str = "") -> aiohttp.web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"}
    body.update(code=code, reason=reason, message=message)
    return aiohttp.web.json_response(body, status=code)


# -- label selectors -------------------------------------------------------------------

_SELECTOR_TERM = re.compile(
    r"\s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9][A-Za-z0-9_./-]*)\s*"
    r"(?:(?P<op>==|=|!=)\s*(?P<value>[A-Za-z0-9_.-]*)"
    r"|\s+(?P<setop>in|notin)\s*\((?P<values>[^)]*)\))?\s*$"
)
LabelPredicate = Callable[[Mapping[str, str]], bool]


def _selector_terms(selector: str) -> list[str]:
    """*selector* split at the commas outside ``( )``."""
    terms, depth, start = [], 0, 0
    for i, char in enumerate(selector):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(selector[start:i])
            start = i + 1
    terms.append(selector[start:])
    return [term for term in terms if term.strip()]


def _term_predicate(term: str) -> LabelPredicate:
    match = _SELECTOR_TERM.match(term)
    if match is None or (match["neg"] and (match["op"] or match["setop"])):
        raise ValueError(f"unable to parse requirement: {term.strip()!r}")
    key, value = match["key"], match["value"]
    if match["op"] in ("=", "=="):
        return lambda labels: labels.get(key) == value
    if match["op"] == "!=":
        return lambda labels: labels.get(key) != value
    if match["setop"]:
        values = {v.strip() for v in match["values"].split(",") if v.strip()}
        if match["setop"] == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if match["neg"]:
        return lambda labels: key not in labels
    return lambda labels: key in labels


def label_selector(selector: str) -> LabelPredicate:
    """The predicate of a Kubernetes equality- and set-based label *selector* (all its
    terms, ANDed). ``!=`` and ``notin`` match objects without the key, as the API does.
    Raises ValueError for a malformed selector."""
    predicates = [_term_predicate(term) for term in _selector_terms(selector)]
    return lambda labels: all(predicate(labels) for predicate in predicates)


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _timestamp() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@attrs.define(kw_only=True)
class KubeEmulator(kmock.KubernetesEmulator):
    """kmock's emulator with the API-server behaviour and the fault queue of the module
    docstring."""

    namespaces: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    faults: list[Fault] = attrs.field(factory=list)
    #: The last resourceVersion handed out (one counter for all objects).
    revision: int = 0
    _writes: asyncio.Lock = attrs.field(factory=asyncio.Lock, init=False)

    def _next_version(self) -> str:
        self.revision += 1
        return str(self.revision)

    def _stamp(self, metadata: dict[str, Any]) -> None:
        """What the API server sets on a new object."""
        metadata.update(
            resourceVersion=self._next_version(),
            uid=str(uuid.uuid4()),
            creationTimestamp=_timestamp(),
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
            raise kmock.KubernetesError(
                status=409,
                reason="Conflict",
                message=(
                    f'Operation cannot be fulfilled on {plural} "{request.name}": the object '
                    "has been modified; please apply your changes to the latest version and "
                    "try again"
                ),
                details={"name": request.name, "kind": plural},
            )

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        """Writes: checked and applied under one lock; PUT served here (kmock has none)."""
        if request.resource is None or str(request.method.value) not in _WRITES:
            return await super()._handle(request)
        async with self._writes:
            if request.method.value == "PUT":
                return await self._replace(request)
            data = request.data if isinstance(request.data, dict) else None
            if request.action == kmock.action.CREATE and data is not None:
                meta = data.setdefault("metadata", {})
                namespace = request.namespace or meta.get("namespace")
                if self._stored(request, namespace, meta.get("name")) is not None:
                    plural = request.resource.plural
                    raise kmock.KubernetesError(
                        status=409,
                        reason="AlreadyExists",
                        message=f'{plural} "{meta.get("name")}" already exists',
                        details={"name": meta.get("name"), "kind": plural},
                    )
                self._stamp(meta)
                if namespace:
                    meta["namespace"] = namespace
            elif request.action == kmock.action.UPDATE and data is not None:
                stored = self._stored(request, request.namespace, request.name)
                if stored is not None:
                    self._check_version(request, stored, data.get("metadata"))
                    data.setdefault("metadata", {})["resourceVersion"] = self._next_version()
            return await super()._handle(request)

    async def _replace(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        """PUT: replace the object (or, on ``/status``, its status) after the version check."""
        stored = self._stored(request, request.namespace, request.name)
        if stored is None or not isinstance(request.data, dict):
            raise kmock.KubernetesError(
                status=404, reason="NotFound", message=f'"{request.name}" not found'
            )
        body = request.data
        self._check_version(request, stored, body.get("metadata"))
        old = stored.raw
        if request.subresource == "status":
            new = {**old, "status": body.get("status")}
        else:
            new = {**body, "status": body.get("status", old.get("status"))}
        kept = {k: v for k, v in (old.get("metadata") or {}).items() if k in _SERVER_FIELDS}
        new["metadata"] = {**(body.get("metadata") or {}), **kept}
        new["metadata"]["resourceVersion"] = self._next_version()
        new = {k: v for k, v in new.items() if v is not None}
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
        record(raw)
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

    # -- namespaces -------------------------------------------------------------------
    async def _namespaces(
        self, raw: aiohttp.web.BaseRequest, name: str | None
    ) -> aiohttp.web.Response:
        """Core Namespaces: POST and GET on the collection, GET and DELETE on one."""
        if name is None and raw.method == "POST":
            obj = json.loads(await raw.read())
            key = obj["metadata"]["name"]
            if key in self.namespaces:
                return _status(409, "AlreadyExists", f'namespaces "{key}" already exists')
            async with self._writes:
                self._stamp(obj["metadata"])
            obj.update(apiVersion="v1", kind="Namespace", status={"phase": "Active"})
            self.namespaces[key] = obj
            return aiohttp.web.json_response(obj, status=201)
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

    async def _delete_contents(self, namespace: str) -> None:
        """Delete every object in *namespace* (the namespace's finalization)."""
        for (resource, obj_namespace, _), obj in list(self.objects.items()):
            if obj_namespace == namespace and not obj.deleted:
                last = obj.raw
                obj.delete()
                await self._buses[resource].put({"type": "DELETED", "object": last})


#: Metadata the API server owns: a PUT cannot change them.
_SERVER_FIELDS = frozenset({"name", "namespace", "uid", "creationTimestamp"})


def _select(items: list[dict[str, Any]], selector: str) -> list[dict[str, Any]]:
    """*items* matching the label *selector* (all of them for ``""``); 400 if malformed."""
    if not selector:
        return items
    try:
        matches = label_selector(selector)
    except ValueError as err:
        raise kmock.KubernetesError(status=400, reason="BadRequest", message=str(err)) from None
    return [item for item in items if matches(_labels(item))]


class EmulatorThread(StopOnExit):
    """A :class:`KubeEmulator` serving *resources* over HTTP from a background event loop
    (the kubernetes client is synchronous). A context manager: started on entry, stopped
    on exit."""

    def __init__(self, *resources: Resource) -> None:
        self.resources = list(resources)
        self.url = ""
        self.emulator = KubeEmulator()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    def register(self, *resources: Resource) -> None:
        """Serve *resources* too (before or after :meth:`start`)."""
        for resource in resources:
            self.emulator.resources[resource.key] = kmock.ResourceInfo(
                kind=resource.kind, namespaced=resource.namespaced, verbs=set(VERBS)
            )

    async def _main(self) -> None:
        self.register(*self.resources)
        self._stop = asyncio.Event()
        async with self.emulator, kmock.Server(self.emulator) as server:
            self.url = str(server.url).rstrip("/")
            self.loop = asyncio.get_running_loop()
            self._ready.set()
            await self._stop.wait()

    def start(self) -> EmulatorThread:
        self._thread.start()
        assert self._ready.wait(10), "the Kubernetes API emulator did not start"
        return self

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def __enter__(self) -> Self:
        self.start()
        return self

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

    def kubeconfig(self, path: Path, server: str | None = None) -> Path:
        """Write a kubeconfig (context ``emu``) for the emulator, or for *server*, to *path*."""
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emu", "cluster": {"server": server or self.url}}],
            "users": [{"name": "emu", "user": {"token": "not-checked"}}],
            "contexts": [{"name": "emu", "context": {"cluster": "emu", "user": "emu"}}],
            "current-context": "emu",
        }
        path.write_text(yaml.safe_dump(doc))
        return path

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


@pytest.fixture
def kube_emulator() -> Iterator[Callable[..., EmulatorThread]]:
    """Start emulators serving the given resources; all are stopped after the test."""
    started: list[EmulatorThread] = []

    def start(*resources: Resource) -> EmulatorThread:
        started.append(EmulatorThread(*resources).start())
        return started[-1]

    yield start
    # last started, first stopped: kmock's resolver chain expects that order
    for emulator in reversed(started):
        emulator.stop()
