"""Velero backup and restore hooks: the site file's models and the Velero objects' specs.

Hooks make a backup application-consistent: a *pre* exec hook quiesces the application in
its pod (flush and lock tables, freeze a file system) before Velero backs the pod up, a
*post* hook releases it afterwards; a restore's *post* exec hook runs once the restored
pod's container is up (a schema check, a cache warm-up). Velero runs them only for Pods, by
namespace and label selector, through the pod exec API (no shell: wrap the command in
``["/bin/sh", "-c", "..."]`` when one is needed).

The site file spells the keys in snake_case (``label_selector``, ``on_error``,
``timeout_seconds``); Velero's objects use camelCase (``labelSelector.matchLabels``,
``onError``, ``timeout: "60s"``). A failed hook leaves the Backup or Restore
``PartiallyFailed`` in Velero, whatever its ``on_error`` (``Fail`` also skips that pod's
remaining hooks); Gotthard, like Velero, treats only ``Completed`` as usable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from gotthard.base import Name, Seconds, Strict

#: A command run through the pod exec API: the program and its arguments, none empty.
Command = Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
OnError = Literal["Fail", "Continue"]


def go_duration(seconds: float) -> str:
    """*seconds* as a Go duration string (``60s``, ``1.5s``), as Velero's specs take it."""
    return f"{seconds:g}s"


class _Exec(Strict):
    """What every exec hook has: where and what to run, and what a failure does."""

    #: Container to run the command in; "" = the pod's first container (Velero's default).
    container: str = ""
    command: Command
    #: ``Fail`` stops this pod's remaining hooks; either way the Velero object ends
    #: PartiallyFailed.
    on_error: OnError = "Fail"

    def _render(self, **timeouts: float) -> dict[str, Any]:
        """``{"exec": {...}}`` with the *timeouts* (camelCase key -> seconds)."""
        exec_: dict[str, Any] = {"command": list(self.command), "onError": self.on_error}
        exec_.update((key, go_duration(seconds)) for key, seconds in timeouts.items())
        if self.container:
            exec_["container"] = self.container
        return {"exec": exec_}


class ExecHook(_Exec):
    """One exec hook of a backup (``pre`` or ``post``)."""

    #: How long the command may run (Velero's default is 30 s).
    timeout_seconds: Seconds = 30.0

    def render(self) -> dict[str, Any]:
        """Velero's ``ExecHook``."""
        return self._render(timeout=self.timeout_seconds)


class RestoreExecHook(_Exec):
    """One exec hook run in a restored pod (Velero's ``postHooks[].exec``)."""

    #: How long the command may run.
    exec_timeout_seconds: Seconds = 30.0
    #: How long to wait for the container to be Running before the command; bounded here
    #: (Velero's unset waits forever) so a drill cannot hang on a pod that never starts.
    wait_timeout_seconds: Seconds = 300.0

    def render(self) -> dict[str, Any]:
        """Velero's ``postHooks[]`` item with an ``ExecRestoreHook``."""
        return self._render(
            execTimeout=self.exec_timeout_seconds, waitTimeout=self.wait_timeout_seconds
        )


class _HookTarget(Strict):
    """Which pods a hook runs in: namespaces and a label selector."""

    name: Name
    #: Namespaces whose pods run the hook; empty = every namespace of the backup/restore.
    namespaces: list[str] = Field(default_factory=list)
    #: ``matchLabels`` of the pods; empty = every pod of those namespaces.
    label_selector: dict[str, str] = Field(default_factory=dict)

    def _resource(self, namespaces: Sequence[str]) -> dict[str, Any]:
        resource: dict[str, Any] = {"name": self.name, "includedNamespaces": list(namespaces)}
        if self.label_selector:
            resource["labelSelector"] = {"matchLabels": dict(self.label_selector)}
        return resource


class BackupHook(_HookTarget):
    """``[[dr.schedules.hooks]]``: pre and post exec hooks of a schedule's backups."""

    pre: list[ExecHook] = Field(default_factory=list)
    post: list[ExecHook] = Field(default_factory=list)

    @model_validator(mode="after")
    def _has_a_hook(self) -> BackupHook:
        if not self.pre and not self.post:
            raise ValueError("a backup hook needs at least one pre or post exec hook")
        return self

    def render(self, namespaces: Sequence[str]) -> dict[str, Any]:
        """Velero's ``BackupResourceHookSpec``; *namespaces* are the backup's, the
        default when the hook names none."""
        resource = self._resource(self.namespaces or namespaces)
        if self.pre:
            resource["pre"] = [hook.render() for hook in self.pre]
        if self.post:
            resource["post"] = [hook.render() for hook in self.post]
        return resource


class RestoreHook(_HookTarget):
    """``[[dr.drills.restore_hooks]]``: exec hooks run in the restored pods."""

    post_hooks: list[RestoreExecHook] = Field(min_length=1)

    def render(self, namespace_mapping: Mapping[str, str]) -> dict[str, Any]:
        """Velero's ``RestoreResourceHookSpec``. Velero matches a restore hook's namespaces
        against the *target* namespace (after ``namespaceMapping``), so the source
        namespaces named here are mapped; none named = every restored namespace."""
        sources = self.namespaces or list(namespace_mapping)
        resource = self._resource([namespace_mapping.get(ns, ns) for ns in sources])
        resource["postHooks"] = [hook.render() for hook in self.post_hooks]
        return resource


def backup_hooks_spec(hooks: Sequence[BackupHook], namespaces: Sequence[str]) -> dict[str, Any]:
    """``spec.hooks`` of a Backup (and of a Schedule's ``spec.template``)."""
    return {"resources": [hook.render(namespaces) for hook in hooks]}


def restore_hooks_spec(
    hooks: Sequence[RestoreHook], namespace_mapping: Mapping[str, str]
) -> dict[str, Any]:
    """``spec.hooks`` of a Restore."""
    return {"resources": [hook.render(namespace_mapping) for hook in hooks]}


def hook_status(obj: Mapping[str, Any] | None) -> str:
    """``status.hookStatus`` of a Backup or Restore in words ("" when no hook ran):
    ``hooks: 1 of 3 failed``."""
    status = ((obj or {}).get("status") or {}).get("hookStatus") or {}
    attempted = int(status.get("hooksAttempted") or 0)
    failed = int(status.get("hooksFailed") or 0)
    if not attempted and not failed:
        return ""
    return f"hooks: {failed} of {attempted} failed"


__all__ = [
    "BackupHook",
    "ExecHook",
    "RestoreExecHook",
    "RestoreHook",
    "backup_hooks_spec",
    "go_duration",
    "hook_status",
    "restore_hooks_spec",
]
