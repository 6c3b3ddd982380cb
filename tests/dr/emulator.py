"""kmock ``KubernetesEmulator`` over real HTTP for the DR tests, plus a simulated Velero.

The emulator is an in-memory Kubernetes API (not a kube-apiserver). This wrapper fills
the kmock 0.8 gaps the DR code meets:

* CREATE answers 200, but kubernetes>=35 only deserialises 201 -> answer 201;
* ``/api/v1/namespaces`` (core, cluster-scoped) fails in kmock's path parser -> served
  here from a small dict (create/get/list/delete);
* label selectors are ignored -> the code under test filters client-side anyway;
* no PUT -> the Lease code only uses get/create/patch;
* no resourceVersion/uid/creationTimestamp -> the Lease reads back its holder instead.

Faults (HTTP 500 or a slow answer) can be queued per method/path for retry tests.

:class:`SimulatedVeleroController` is NOT Velero: a test-side loop that moves Backups
and Restores through Velero's phases (and copies Deployments into the mapped namespace
on a Completed restore) so the daemon's code sees what Velero would produce.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp.web
import attrs
import kmock
import yaml
from kubernetes import client

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "dr"


@attrs.define(kw_only=True)
class DrEmulator(kmock.KubernetesEmulator):
    namespaces: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    faults: list[tuple[str, str, int, float]] = attrs.field(factory=list)

    async def _serve_create(self, request: kmock.Request) -> kmock.Payload:
        return kmock.Response(status=201, payload=await super()._serve_create(request))

    async def __call__(self, raw: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        for i, (method, prefix, status, delay) in enumerate(self.faults):
            if raw.method == method and raw.path.startswith(prefix):
                del self.faults[i]
                if delay:
                    await asyncio.sleep(delay)
                if status:
                    body = {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "status": "Failure",
                        "code": status,
                    }
                    return aiohttp.web.json_response(body, status=status)
                break
        parts = raw.path.strip("/").split("/")
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) <= 4:
            return await self._namespaces(raw, parts[3] if len(parts) == 4 else None)
        return await super().__call__(raw)

    async def _namespaces(
        self, raw: aiohttp.web.BaseRequest, name: str | None
    ) -> aiohttp.web.Response:
        def status(code: int) -> aiohttp.web.Response:
            return aiohttp.web.json_response({"kind": "Status", "code": code}, status=code)

        if raw.method == "POST" and name is None:
            obj = json.loads(await raw.read())
            key = obj["metadata"]["name"]
            if key in self.namespaces:
                return status(409)
            obj.update(apiVersion="v1", kind="Namespace", status={"phase": "Active"})
            self.namespaces[key] = obj
            return aiohttp.web.json_response(obj, status=201)
        if raw.method == "GET" and name is None:
            return aiohttp.web.json_response(
                {
                    "kind": "NamespaceList",
                    "apiVersion": "v1",
                    "metadata": {},
                    "items": list(self.namespaces.values()),
                }
            )
        if name not in self.namespaces:
            return status(404)
        if raw.method == "GET":
            return aiohttp.web.json_response(self.namespaces[name])
        if raw.method == "DELETE":
            return aiohttp.web.json_response(self.namespaces.pop(name))
        return status(405)


def crd_resources() -> list[tuple[str, str, str, bool]]:
    """(group, version, plural, kind, namespaced) from the fixture CRDs."""
    out = []
    for path in sorted(FIXTURES.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        spec = crd["spec"]
        for version in spec["versions"]:
            out.append(
                (
                    f"{spec['group']}/{version['name']}/{spec['names']['plural']}",
                    spec["names"]["kind"],
                    spec["scope"] == "Namespaced",
                )
            )
    return out


class EmulatorThread:
    """The emulator served over HTTP from a background event loop."""

    def __init__(self) -> None:
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self.url = ""
        self.emulator: DrEmulator

    async def _main(self) -> None:
        emu = DrEmulator()
        verbs = {"get", "list", "watch", "create", "patch", "delete"}
        for key, kind, namespaced in crd_resources():
            emu.resources[key] = kmock.ResourceInfo(kind=kind, namespaced=namespaced, verbs=verbs)
        emu.resources["apps/v1/deployments"] = kmock.ResourceInfo(
            kind="Deployment", namespaced=True, verbs=verbs
        )
        emu.resources["coordination.k8s.io/v1/leases"] = kmock.ResourceInfo(
            kind="Lease", namespaced=True, verbs=verbs
        )
        self._stop = asyncio.Event()
        async with emu, kmock.Server(emu) as server:
            self.emulator, self.url, self.loop = (
                emu,
                str(server.url).rstrip("/"),
                asyncio.get_running_loop(),
            )
            self._ready.set()
            await self._stop.wait()

    def start(self) -> EmulatorThread:
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def api(self) -> client.ApiClient:
        cfg = client.Configuration()
        cfg.host = self.url
        cfg.retries = 0  # urllib3's own retries would hide the code's back-off
        return client.ApiClient(cfg)

    def fault(
        self, method: str, prefix: str, status: int = 500, delay: float = 0.0, times: int = 1
    ) -> None:
        self.emulator.faults.extend([(method, prefix, status, delay)] * times)


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class SimulatedVeleroController:
    """A test stand-in for Velero's backup/restore controllers (see module docstring).

    ``outcome(kind, name)`` chooses the terminal phase: ``Completed`` (default),
    ``PartiallyFailed``, ``Failed``, ``FailedValidation`` or ``stuck`` (InProgress forever).
    """

    def __init__(self, api: client.ApiClient, namespace: str = "velero") -> None:
        self.custom = client.CustomObjectsApi(api)
        self.ns = namespace
        self.outcome: Callable[[str, str], str] = lambda kind, name: "Completed"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> SimulatedVeleroController:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _loop(self) -> None:
        while not self._stop.wait(0.02):
            with contextlib.suppress(Exception):  # injected faults: try again next tick
                self.tick()

    def _status(self, plural: str, name: str, status: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object_status(
            "velero.io", "v1", self.ns, plural, name, {"status": status}
        )

    def tick(self) -> None:
        for plural, kind in (("backups", "Backup"), ("restores", "Restore")):
            items = self.custom.list_namespaced_custom_object("velero.io", "v1", self.ns, plural)[
                "items"
            ]
            for item in items:
                name = item["metadata"]["name"]
                phase = (item.get("status") or {}).get("phase", "")
                if phase in ("", "New"):
                    result = self.outcome(kind, name)
                    if result == "FailedValidation":
                        self._status(
                            plural, name, {"phase": "FailedValidation", "validationErrors": ["bad"]}
                        )
                    else:
                        self._status(
                            plural, name, {"phase": "InProgress", "startTimestamp": _now()}
                        )
                elif phase == "InProgress":
                    result = self.outcome(kind, name)
                    if result == "stuck":
                        continue
                    if kind == "Restore" and result == "Completed":
                        self._restore_objects(item)
                    self._status(plural, name, {"phase": result, "completionTimestamp": _now()})

    def _restore_objects(self, restore: dict[str, Any]) -> None:
        for source, target in (restore["spec"].get("namespaceMapping") or {}).items():
            for dep in self.custom.list_namespaced_custom_object(
                "apps", "v1", source, "deployments"
            )["items"]:
                if dep["metadata"].get("namespace") != source:
                    continue
                copy = {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": dep["metadata"]["name"], "namespace": target},
                    "spec": dep["spec"],
                    "status": {"readyReplicas": dep["spec"].get("replicas", 1)},
                }
                try:
                    self.custom.create_namespaced_custom_object(
                        "apps", "v1", target, "deployments", copy
                    )
                except client.ApiException as err:
                    if err.status != 409:
                        raise


def wait_for(pred: Callable[[], bool], timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)
