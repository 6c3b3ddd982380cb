"""kmock's ``KubernetesEmulator`` served over real HTTP from a background thread.

The emulator is an in-memory Kubernetes API (not a kube-apiserver): the code under test
talks to it with the official ``kubernetes`` client, through an ``ApiClient`` or a
kubeconfig file. :class:`KubeEmulator` fills the kmock 0.8 gaps these tests meet:

* CREATE answers 200, but kubernetes>=35 only deserialises 201 -> answer 201;
* ``/api/v1/namespaces`` (core, cluster-scoped) fails in kmock's path parser (500) ->
  Namespaces are served here from a dict (create, list, get, delete);
* label selectors are ignored -> the code under test filters client-side anyway;
* no PUT, no resourceVersion/uid/creationTimestamp -> callers use get/create/patch.

Faults (an HTTP error status and/or a slow answer) can be queued per method and path
prefix, for a number of requests or until cleared.

Only the resources registered on the :class:`EmulatorThread` exist; :func:`crd_resources`
reads them from CRD manifests.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
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
    real answer) after *delay* seconds; for *times* requests (``None``: until cleared)."""

    method: str
    prefix: str
    status: int
    delay: float
    times: int | None

    def matches(self, raw: aiohttp.web.BaseRequest) -> bool:
        return raw.method == self.method and raw.path.startswith(self.prefix)


def _status(code: int) -> aiohttp.web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code}
    return aiohttp.web.json_response(body, status=code)


@attrs.define(kw_only=True)
class KubeEmulator(kmock.KubernetesEmulator):
    """kmock's emulator with the workarounds and the fault queue of the module docstring."""

    namespaces: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    faults: list[Fault] = attrs.field(factory=list)

    async def _serve_create(self, request: kmock.Request) -> kmock.Payload:
        return kmock.Response(status=201, payload=await super()._serve_create(request))

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

    async def _namespaces(
        self, raw: aiohttp.web.BaseRequest, name: str | None
    ) -> aiohttp.web.Response:
        """Core Namespaces: POST and GET on the collection, GET and DELETE on one."""
        if name is None and raw.method == "POST":
            obj = json.loads(await raw.read())
            key = obj["metadata"]["name"]
            if key in self.namespaces:
                return _status(409)
            obj.update(apiVersion="v1", kind="Namespace", status={"phase": "Active"})
            self.namespaces[key] = obj
            return aiohttp.web.json_response(obj, status=201)
        if name is None and raw.method == "GET":
            items = [
                {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}
                for obj in self.namespaces.values()
            ]  # a real LIST omits them in items
            body = {"kind": "NamespaceList", "apiVersion": "v1", "metadata": {}, "items": items}
            return aiohttp.web.json_response(body)
        if name not in self.namespaces:
            return _status(404)
        if raw.method == "GET":
            return aiohttp.web.json_response(self.namespaces[name])
        if raw.method == "DELETE":
            return aiohttp.web.json_response(self.namespaces.pop(name))
        return _status(405)


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

    def api(self) -> client.ApiClient:
        """A client for the emulator; no urllib3 retries (they would hide the code's own)."""
        config = client.Configuration()
        config.host = self.url
        config.retries = 0
        return client.ApiClient(config)

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
    ) -> None:
        """Queue a :class:`Fault` (``times=None``: until :meth:`clear_faults`)."""
        self.emulator.faults.append(Fault(method, prefix, status, delay, times))

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
    for emulator in started:
        emulator.stop()
