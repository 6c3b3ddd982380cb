"""Velero ``velero.io/v1`` through the official kubernetes client (CustomObjectsApi).

Backups are named deterministically per schedule slot (``<schedule>-<YYYYMMDDhhmmss>``,
Velero's own convention for scheduled backups), so a retried or duplicated trigger is
a no-op: HTTP 409 on create means the slot is already done.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from gotthard.dr.hooks import backup_hooks_spec, hook_status
from gotthard.dr.settings import BackupSchedule
from gotthard.kube import CustomObjects, Retry, status_of

GROUP, VERSION = "velero.io", "v1"
TERMINAL_PHASES = frozenset({"Completed", "PartiallyFailed", "Failed", "FailedValidation"})
#: Every phase Velero reports; only Completed is usable.
KNOWN_PHASES = frozenset(
    {
        "",
        "New",
        "InProgress",
        "WaitingForPluginOperations",
        "WaitingForPluginOperationsPartiallyFailed",
        "Finalizing",
        "FinalizingPartiallyFailed",
        "Deleting",
    }
    | TERMINAL_PHASES
)
LABEL_MANAGED = "gotthard.io/managed-by"
LABEL_SCHEDULE = "gotthard.io/schedule"
LABEL_NAMESPACE = "gotthard.io/namespace"
LABEL_SLOT = "gotthard.io/slot"
LABEL_SITE = "gotthard.io/site"
#: Label Velero puts on the Backups its Schedule controller creates.
LABEL_VELERO_SCHEDULE = "velero.io/schedule-name"


class PhaseTimeout(Exception):
    """A Backup or Restore stayed in a non-terminal phase past its timeout."""

    def __init__(self, kind: str, name: str, phase: str | None, waited: float) -> None:
        state = "not found" if phase is None else f"still {phase or 'New'}"
        super().__init__(f"{kind} {name} {state} after {waited:.0f}s")
        self.kind, self.name, self.phase = kind, name, phase


def slot_name(prefix: str, slot: dt.datetime) -> str:
    """``<prefix>-<YYYYMMDDhhmmss>`` (UTC), at most 63 characters."""
    stamp = slot.astimezone(dt.UTC).strftime("%Y%m%d%H%M%S")
    return f"{prefix[: 63 - len(stamp) - 1]}-{stamp}"


def parse_time(value: str | None) -> float | None:
    if not value:
        return None
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def format_time(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def phase_of(obj: Mapping[str, Any] | None) -> str:
    return str(((obj or {}).get("status") or {}).get("phase") or "")


def backup_spec(schedule: BackupSchedule) -> dict[str, Any]:
    spec: dict[str, Any] = {"includedNamespaces": list(schedule.namespaces), "ttl": schedule.ttl}
    if schedule.storage_location:
        spec["storageLocation"] = schedule.storage_location
    if schedule.snapshot_volumes is not None:
        spec["snapshotVolumes"] = schedule.snapshot_volumes
    if schedule.default_volumes_to_fs_backup is not None:
        spec["defaultVolumesToFsBackup"] = schedule.default_volumes_to_fs_backup
    if schedule.hooks:
        spec["hooks"] = backup_hooks_spec(schedule.hooks, schedule.namespaces)
    return spec


def describe_phase(obj: Mapping[str, Any] | None) -> str:
    """The phase of a Backup or Restore with what explains a PartiallyFailed one: its hook
    results (``PartiallyFailed (hooks: 1 of 2 failed)``) and error count."""
    status = (obj or {}).get("status") or {}
    notes = [hook_status(obj)]
    if status.get("errors"):
        notes.append(f"{status['errors']} errors")
    notes = [note for note in notes if note]
    return phase_of(obj) + (f" ({', '.join(notes)})" if notes else "")


@dataclass
class Outcome:
    """A finished (or timed-out) Backup or Restore."""

    name: str
    phase: str
    started: float | None
    completed: float | None
    obj: dict[str, Any]

    @property
    def usable(self) -> bool:
        return self.phase == "Completed"

    @property
    def detail(self) -> str:
        """The phase, with hook results and errors when Velero reports them."""
        return describe_phase(self.obj)

    @property
    def duration(self) -> float | None:
        if self.started is None or self.completed is None:
            return None
        return max(0.0, self.completed - self.started)


def outcome_of(obj: dict[str, Any]) -> Outcome:
    """The :class:`Outcome` of a Backup or Restore *obj* in a terminal phase."""
    status = obj.get("status") or {}
    return Outcome(
        (obj.get("metadata") or {}).get("name", ""),
        phase_of(obj),
        parse_time(status.get("startTimestamp")),
        parse_time(status.get("completionTimestamp")),
        obj,
    )


class Velero:
    """Velero objects in one cluster's Velero namespace."""

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str = "velero",
        retry: Retry | None = None,
        *,
        poll_seconds: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.retry = retry or Retry()
        self.objects = CustomObjects(api, GROUP, VERSION, self.retry)
        self.poll_seconds = poll_seconds
        self.clock = clock

    # -- generic -----------------------------------------------------------------
    def _create(self, plural: str, body: dict[str, Any]) -> bool:
        """Create; True if created, False if it already existed (409)."""
        return self.objects.call_unless(409, "create", self.namespace, plural, body)[0]

    def get(self, plural: str, name: str) -> dict[str, Any] | None:
        return self.objects.call_unless(404, "get", self.namespace, plural, name)[1]

    def _body(
        self, kind: str, name: str, spec: dict[str, Any], labels: Mapping[str, str] | None
    ) -> dict[str, Any]:
        """A Velero object of *kind* in this namespace, labelled as managed by Gotthard."""
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": kind,
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": {LABEL_MANAGED: "gotthard", **(labels or {})},
            },
            "spec": spec,
        }

    def list(self, plural: str, labels: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
        selector = ",".join(f"{k}={v}" for k, v in (labels or {}).items())
        data = self.objects.call("list", self.namespace, plural, label_selector=selector or None)
        items = list(data.get("items", []))
        # Filter again here: a selector the server ignores must not widen the result.
        return [
            item
            for item in items
            if all(
                ((item.get("metadata") or {}).get("labels") or {}).get(k) == v
                for k, v in (labels or {}).items()
            )
        ]

    def delete(self, plural: str, name: str) -> bool:
        """Delete; False if it was already gone (404)."""
        return self.objects.call_unless(404, "delete", self.namespace, plural, name)[0]

    def wait(self, plural: str, name: str, timeout: float) -> Outcome:
        """Poll until a terminal phase; raise :class:`PhaseTimeout` when stuck. An object
        not there yet is waited for too: a Backup taken at another site appears here only
        once Velero's backup sync has copied it from the shared storage location."""
        kind = "Backup" if plural == "backups" else "Restore"
        start = self.clock()
        while True:
            obj = self.get(plural, name)
            phase = phase_of(obj)
            if obj is not None and phase in TERMINAL_PHASES:
                return outcome_of(obj)
            waited = self.clock() - start
            if waited >= timeout:
                raise PhaseTimeout(kind, name, None if obj is None else phase, waited)
            time.sleep(min(self.poll_seconds, max(0.0, timeout - waited)))

    # -- backups -----------------------------------------------------------------
    def create_backup(
        self, name: str, spec: dict[str, Any], labels: Mapping[str, str] | None = None
    ) -> bool:
        return self._create("backups", self._body("Backup", name, spec, labels))

    def latest_completed_backup(self, namespace: str) -> dict[str, Any] | None:
        """Newest Completed backup that includes *namespace* (any creator)."""
        return self.latest_completed_backups([namespace]).get(namespace)

    def latest_completed_backups(
        self, namespaces: list[str], backups: list[dict[str, Any]] | None = None
    ) -> dict[str, dict[str, Any]]:
        """Namespace -> newest Completed backup that includes it, from ONE list call
        (the daemon refreshes hundreds of namespaces per site; one LIST each would not scale).
        """
        wanted = set(namespaces)
        best: dict[str, tuple[float, dict[str, Any]]] = {}
        for item in self.list("backups") if backups is None else backups:
            if phase_of(item) != "Completed":
                continue
            included = (item.get("spec") or {}).get("includedNamespaces") or ["*"]
            covered = wanted if "*" in included else wanted.intersection(included)
            if not covered:
                continue
            done = parse_time((item.get("status") or {}).get("completionTimestamp")) or 0.0
            for ns in covered:
                if ns not in best or done > best[ns][0]:
                    best[ns] = (done, item)
        return {ns: item for ns, (_, item) in best.items()}

    # -- restores ----------------------------------------------------------------
    def create_restore(
        self,
        name: str,
        backup: str,
        namespace_mapping: Mapping[str, str],
        labels: Mapping[str, str] | None = None,
        hooks: Mapping[str, Any] | None = None,
    ) -> bool:
        """Create a Restore of *backup*; *hooks* is its ``spec.hooks`` (restore hooks)."""
        spec: dict[str, Any] = {
            "backupName": backup,
            "includedNamespaces": list(namespace_mapping),
            "namespaceMapping": dict(namespace_mapping),
            "existingResourcePolicy": "none",
        }
        if hooks:
            spec["hooks"] = dict(hooks)
        return self._create("restores", self._body("Restore", name, spec, labels))

    # -- storage locations and schedules -----------------------------------------
    def storage_locations(self) -> dict[str, bool]:
        """BSL name -> Available."""
        return {
            (item.get("metadata") or {}).get("name", ""): phase_of(item) == "Available"
            for item in self.list("backupstoragelocations")
        }

    def apply_schedule(
        self, name: str, cron: str, spec: dict[str, Any], labels: Mapping[str, str] | None = None
    ) -> str:
        """Create or update a Velero Schedule; returns ``created`` or ``updated``.

        An update is a JSON merge patch of the whole ``spec`` (template lists are replaced,
        not merged), so the object follows the configuration."""
        schedule = {
            "schedule": cron,
            "template": spec,
            "useOwnerReferencesInBackup": False,
            "paused": False,
        }
        body = self._body("Schedule", name, schedule, labels)
        if self._create("schedules", body):
            return "created"
        patch = {"metadata": {"labels": body["metadata"]["labels"]}, "spec": body["spec"]}
        self.objects.call("patch", self.namespace, "schedules", name, patch)
        return "updated"

    def managed_schedules(self, site: str) -> list[str]:
        """Names of the Velero Schedules Gotthard manages for *site* (by label)."""
        return [
            (item.get("metadata") or {}).get("name", "")
            for item in self.list("schedules", {LABEL_MANAGED: "gotthard", LABEL_SITE: site})
        ]


__all__ = [
    "KNOWN_PHASES",
    "LABEL_VELERO_SCHEDULE",
    "TERMINAL_PHASES",
    "Outcome",
    "PhaseTimeout",
    "Velero",
    "backup_spec",
    "describe_phase",
    "format_time",
    "outcome_of",
    "parse_time",
    "phase_of",
    "slot_name",
    "status_of",
]
