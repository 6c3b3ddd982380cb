"""The DR tests' Kubernetes: the shared API emulator with the DR resources, plus a
simulated Velero.

:class:`SimulatedVeleroController` is NOT Velero: a test-side loop that moves Backups
and Restores through Velero's phases (and copies Deployments into the mapped namespace
on a Completed restore) so the daemon's code sees what Velero would produce.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client

from tests.support.kube import DEPLOYMENTS, LEASES, Resource, crd_resources

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "dr"


def dr_resources() -> list[Resource]:
    """What the DR code reads and writes: the fixture CRDs (Velero, Karmada), Deployments
    and the Lease."""
    return [*crd_resources(*sorted(FIXTURES.glob("*.yaml"))), DEPLOYMENTS, LEASES]


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
