"""A simulated Velero for the emulated clusters (:mod:`gotthard_testing.kubeapi`).

NOT Velero: a loop that moves the Backups and Restores of one or more clusters through
Velero's phases, so that the code driving Velero sees what Velero would produce. It
writes them as Velero does, by patching the objects (Velero's CRDs have no ``/status``
subresource). Its parts, each modelled on the Velero controller that does the real work:

* phases: New -> InProgress -> the terminal phase chosen by :attr:`SimulatedVelero.outcome`
  (``Completed`` by default; ``PartiallyFailed``, ``Failed``, ``FailedValidation``, or
  ``stuck``: InProgress forever);
* the object store (a BackupStorageLocation that every cluster shares): a finished Backup
  is written there with the objects it holds (``backups/<name>/velero-backup.json`` and
  ``backups/<name>/resources/<resource>/namespaces/<ns>/<name>.json``, the layout of a
  Velero backup tarball) and synced as a Backup object into every other cluster, as the
  backup-sync controller does; at start, the store's backups are synced into clusters
  that lack them, and each gets an Available BackupStorageLocation ``default`` for the
  directory. Without a directory the store is kept in memory (and no location made);
* restores: the backed-up objects of the restored namespaces are created in the mapped
  namespace, labelled ``velero.io/backup-name`` and ``velero.io/restore-name`` as Velero
  labels them; the API server drops their status, and the restored Pods are then
  reported Running through ``/status`` (no kubelet runs them). A Restore of a backup the
  store does not hold (its phase was set by someone else) copies what its source
  namespace holds now on the restoring cluster;
* hooks, only for Pods, as Velero runs them (``spec.hooks.resources[]``: ``pre`` and
  ``post`` exec hooks of a Backup, ``postHooks`` exec hooks of a Restore; namespaces,
  label selector, container, command, onError). Nothing is executed: a hook "runs" when
  its pod is Running and has the container (the first one by default), and fails as in
  Velero otherwise. A failed ``onError: Fail`` hook stops the remaining hooks of its pod;
  any failed hook leaves the Backup or Restore ``PartiallyFailed``. The counts go to
  ``status.hookStatus`` and every hook to an ordered log (:meth:`SimulatedVelero.hook_log`;
  with a store directory also ``hooks/<kind>-<name>.jsonl``). Pod annotation hooks and
  init restore hooks are not simulated.

The same loop runs the clusters' simulated Deployment controller
(:class:`~gotthard_testing.controllers.DeploymentController`): every Deployment turns
Ready through ``/status``, a restored one *ready_delay* seconds after it appeared.

Standalone, over the kubeconfigs of the emulated API servers::

    python -m gotthard_testing.velero_sim --cluster zurich=KUBECONFIG \\
        --cluster lugano=KUBECONFIG --object-store DIR [--ready-delay SECONDS]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from kubernetes import client

from gotthard.kube import KubeError, client_for
from gotthard.site import KubeAccess
from gotthard_testing.controllers import RESTORE_LABEL, DeploymentController
from gotthard_testing.kubeapi import (
    CONFIGMAPS,
    DEPLOYMENTS,
    PODS,
    SERVICES,
    Resource,
    UsageParser,
    timestamp,
)
from gotthard_testing.selectors import label_selector as parse_selector
from gotthard_testing.selectors import labels_of, selector_string

__all__ = ["BACKED_UP", "BACKUP_LABEL", "ObjectStore", "SimulatedVelero", "main"]

#: What a backup holds of each included namespace (the resources a drill verifies).
BACKED_UP: tuple[Resource, ...] = (DEPLOYMENTS, PODS, SERVICES, CONFIGMAPS)
#: Velero's phases after which a backup is in the object store.
_STORED_PHASES = frozenset({"Completed", "PartiallyFailed"})
_GROUP = ("velero.io", "v1")
#: The label Velero puts on every object it restores (its value: the Backup's name).
BACKUP_LABEL = "velero.io/backup-name"

Obj = dict[str, Any]


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


# -- label selectors and namespaces ---------------------------------------------------------


def _in_namespaces(namespace: str, spec: Mapping[str, Any]) -> bool:
    """Whether *namespace* is selected by a spec's included/excludedNamespaces."""
    included = spec.get("includedNamespaces") or ["*"]
    excluded = spec.get("excludedNamespaces") or []
    return ("*" in included or namespace in included) and namespace not in excluded


def _selects(spec: Mapping[str, Any], obj: Mapping[str, Any]) -> bool:
    """Whether a hook's resource spec (namespaces, labelSelector) selects *obj*."""
    matches = parse_selector(selector_string(spec.get("labelSelector")))
    labels = _meta(obj).get("labels") or {}
    return _in_namespaces(str(_meta(obj).get("namespace", "")), spec) and matches(labels)


# -- the object store -----------------------------------------------------------------------


def resource_of(obj: Mapping[str, Any]) -> Resource:
    """The backed-up resource *obj* is of."""
    return next(r for r in BACKED_UP if r.kind == obj.get("kind"))


def _resource_dir(resource: Resource) -> str:
    """``deployments.apps``, ``pods``: how a Velero tarball names a resource."""
    parts = resource.key.split("/")
    return f"{parts[2]}.{parts[0]}" if len(parts) == 3 else parts[1]


class ObjectStore:
    """Finished backups and their objects: in a directory shared by every cluster, or in
    memory (*root* None)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root
        self._memory: dict[str, tuple[Obj, list[Obj]]] = {}

    def put(self, backup: Obj, objects: Sequence[Obj]) -> None:
        name = _meta(backup)["name"]
        if self.root is None:
            self._memory[name] = (backup, list(objects))
            return
        where = self.root / "backups" / name
        for obj in objects:
            meta = _meta(obj)
            resource = _resource_dir(resource_of(obj))
            path = where / "resources" / resource / "namespaces" / meta["namespace"]
            path.mkdir(parents=True, exist_ok=True)
            (path / f"{meta['name']}.json").write_text(json.dumps(obj, indent=1))
        where.mkdir(parents=True, exist_ok=True)
        (where / "velero-backup.json").write_text(json.dumps(backup, indent=1))

    def get(self, name: str) -> tuple[Obj, list[Obj]] | None:
        """The stored Backup object and its objects, or None."""
        if self.root is None:
            return self._memory.get(name)
        where = self.root / "backups" / name
        if not (where / "velero-backup.json").is_file():
            return None
        backup = json.loads((where / "velero-backup.json").read_text())
        files = sorted(where.glob("resources/*/namespaces/*/*.json"))
        return backup, [json.loads(path.read_text()) for path in files]

    def backups(self) -> list[Obj]:
        """Every stored Backup object."""
        if self.root is None:
            return [backup for backup, _ in self._memory.values()]
        files = sorted((self.root / "backups").glob("*/velero-backup.json"))
        return [json.loads(path.read_text()) for path in files]

    def log_hooks(self, kind: str, name: str, entries: Sequence[Obj]) -> None:
        if self.root is not None and entries:
            (self.root / "hooks").mkdir(parents=True, exist_ok=True)
            lines = "".join(json.dumps(entry) + "\n" for entry in entries)
            (self.root / "hooks" / f"{kind.lower()}-{name}.jsonl").write_text(lines)


# -- one cluster ----------------------------------------------------------------------------


def _snake(kind: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", kind).lower()


class _Cluster:
    """The calls the simulation makes to one cluster, on plain dicts."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.ns = namespace

    def velero(self, plural: str) -> list[Obj]:
        return self.custom.list_namespaced_custom_object(*_GROUP, self.ns, plural)["items"]

    def set_status(self, plural: str, name: str, status: Obj) -> None:
        """Patch the object's status (Velero's CRDs have no ``/status`` subresource)."""
        body = {"status": status}
        self.custom.patch_namespaced_custom_object(*_GROUP, self.ns, plural, name, body)

    def set_pod_phase(self, namespace: str, name: str, phase: str) -> None:
        """Report a Pod in *phase* through ``/status``, as its kubelet would."""
        body = {"status": {"phase": phase}}
        self.core.patch_namespaced_pod_status(name, namespace, body, _preload_content=False)

    def create_velero(self, plural: str, body: Obj) -> None:
        create = self.custom.create_namespaced_custom_object
        _unless_exists(create, *_GROUP, self.ns, plural, body)

    def list(self, resource: Resource, namespace: str | None) -> list[Obj]:
        """The objects of *resource* in *namespace* (None: all); [] if not served."""
        group_version, _, plural = resource.key.rpartition("/")
        try:
            if "/" in group_version:
                group, version = group_version.split("/")
                if namespace is None:
                    found = self.custom.list_cluster_custom_object(group, version, plural)
                else:
                    found = self.custom.list_namespaced_custom_object(
                        group, version, namespace, plural
                    )
                items = found["items"]
            else:
                name = _snake(resource.kind)
                if namespace is None:
                    call = getattr(self.core, f"list_{name}_for_all_namespaces")
                    answer = call(_preload_content=False)
                else:
                    call = getattr(self.core, f"list_namespaced_{name}")
                    answer = call(namespace, _preload_content=False)
                items = json.loads(answer.data)["items"]
        except client.ApiException as err:
            if err.status == 404:
                return []
            raise
        kind = {"apiVersion": group_version, "kind": resource.kind}
        keep = [
            item for item in items if namespace is None or _meta(item).get("namespace") == namespace
        ]
        return [{**kind, **item} for item in keep]

    def create(self, resource: Resource, namespace: str, body: Obj) -> None:
        """Create *body*; one that exists is left alone (existingResourcePolicy none)."""
        group_version, _, plural = resource.key.rpartition("/")
        if "/" in group_version:
            group, version = group_version.split("/")
            create = self.custom.create_namespaced_custom_object
            _unless_exists(create, group, version, namespace, plural, body)
        else:
            create = getattr(self.core, f"create_namespaced_{_snake(resource.kind)}")
            _unless_exists(create, namespace, body, _preload_content=False)

    def ensure_namespace(self, name: str) -> None:
        """Create the Namespace *name* unless it exists (Velero creates a restore's)."""
        _unless_exists(self.core.create_namespace, {"metadata": {"name": name}})


def _unless_exists(create: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """*create*; an object that exists already (409) is left as it is."""
    try:
        create(*args, **kwargs)
    except client.ApiException as err:
        if err.status != 409:
            raise


# -- hooks ----------------------------------------------------------------------------------


def _hook_error(pod: Obj, container: str) -> str:
    """Why an exec hook cannot run in *container* of *pod* (``""``: it runs), in Velero's
    words."""
    names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
    if container not in names:
        return f"no such container: {container!r}"
    if (pod.get("status") or {}).get("phase") != "Running":
        return f"pod {_meta(pod).get('name')} is not running"
    return ""


def _run_hooks(phase: str, pod: Obj, resources: Sequence[Obj], key: str, log: list[Obj]) -> bool:
    """Run the *key* exec hooks (``pre``, ``post``, ``postHooks``) of every resource spec
    that selects *pod*, in spec order, appending to *log*. False when a failed
    ``onError: Fail`` hook stopped them (the pod's remaining hooks must not run)."""
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    for spec in resources:
        if not _selects(spec, pod):
            continue
        for hook in spec.get(key) or []:
            execution = hook.get("exec")
            if execution is None:
                continue  # an init restore hook: not simulated
            container = execution.get("container") or containers[0].get("name", "")
            error = _hook_error(pod, container)
            log.append(
                {
                    "phase": phase,
                    "hook": spec.get("name", ""),
                    "namespace": _meta(pod).get("namespace", ""),
                    "pod": _meta(pod).get("name", ""),
                    "container": container,
                    "command": list(execution.get("command") or []),
                    "ok": not error,
                    "error": error,
                }
            )
            if error and execution.get("onError", "Fail") != "Continue":
                return False
    return True


def _hook_status(log: Sequence[Obj]) -> Obj:
    return {"hooksAttempted": len(log), "hooksFailed": sum(not entry["ok"] for entry in log)}


#: The metadata a backup keeps (not the server's: uid, resourceVersion, timestamps).
_KEPT_METADATA = ("name", "namespace", "labels", "annotations")


def _stored_copy(obj: Obj) -> Obj:
    """*obj* as a backup keeps it."""
    meta = {k: v for k, v in _meta(obj).items() if k in _KEPT_METADATA}
    return {**obj, "metadata": meta}


def _restored(obj: Obj, namespace: str, backup: str, restore: str) -> Obj:
    """A stored object as the restore creates it in *namespace*: labelled with its backup
    and restore, as Velero labels it, and without status (the server's to set)."""
    body = {k: v for k, v in obj.items() if k != "status"}
    labels = {**labels_of(obj), BACKUP_LABEL: backup, RESTORE_LABEL: restore}
    body["metadata"] = {**_meta(obj), "namespace": namespace, "labels": labels}
    return body


# -- the controller -------------------------------------------------------------------------


class SimulatedVelero:
    """The simulation over *clusters* (name -> client); see the module docstring.

    ``outcome(kind, name)`` chooses the terminal phase of a Backup or Restore."""

    def __init__(
        self,
        clusters: Mapping[str, client.ApiClient],
        object_store: Path | None = None,
        namespace: str = "velero",
        interval: float = 0.02,
        ready_delay: float = 0.0,
    ) -> None:
        self.clusters = {name: _Cluster(api, namespace) for name, api in clusters.items()}
        #: The clusters' simulated Deployment controller, run by the same loop.
        self.deployments = DeploymentController(clusters, ready_delay)
        self.store = ObjectStore(object_store)
        self.ns = namespace
        self.interval = interval
        self.outcome: Callable[[str, str], str] = lambda kind, name: "Completed"
        self._hooks: dict[tuple[str, str], list[Obj]] = {}
        self._last_error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def hook_log(self, kind: str, name: str) -> list[Obj]:
        """The hooks run for the Backup or Restore *name*, in order."""
        return list(self._hooks.get((kind.lower(), name), []))

    def _loop(self) -> None:
        synced = False
        while not self._stop.wait(self.interval):
            try:  # an API that fails (an injected fault): try again next tick
                if not synced:  # the store's backups, once every API answers
                    self.sync()
                    synced = True
                self.tick()
            except Exception as err:
                self._report(err)
            try:
                self.deployments.tick()
            except Exception as err:
                self._report(err)

    def _report(self, err: Exception) -> None:
        """Say on stderr why a tick failed, once until the reason changes (a process's
        log shows it; a fault injected by a test repeats)."""
        why = f"{type(err).__name__}: {err}".splitlines()[0]
        if isinstance(err, client.ApiException):
            with contextlib.suppress(ValueError, TypeError, AttributeError, KeyError):
                why = f"HTTP {err.status}: {json.loads(err.body)['message']}"
        line = f"simulated Velero: tick failed: {why}"
        if line != self._last_error:
            self._last_error = line
            print(line, file=sys.stderr, flush=True)

    def sync(self) -> None:
        """Create every stored backup in the clusters that lack it (backup sync); with a
        store directory, also the BackupStorageLocation ``default`` pointing at it,
        Available (what ``velero install`` and the BSL controller would leave)."""
        if self.store.root is not None:
            location = {
                "apiVersion": "velero.io/v1",
                "kind": "BackupStorageLocation",
                "metadata": {"name": "default", "namespace": self.ns},
                "spec": {
                    "provider": "gotthard-simulated",
                    "objectStorage": {"bucket": str(self.store.root)},
                    "default": True,
                },
                "status": {"phase": "Available", "lastValidationTime": timestamp()},
            }
            for cluster in self.clusters.values():
                cluster.create_velero("backupstoragelocations", location)
        for backup in self.store.backups():
            self._sync(backup, skip="")

    def _sync(self, backup: Obj, skip: str) -> None:
        for name, cluster in self.clusters.items():
            if name != skip:
                cluster.create_velero("backups", backup)

    def tick(self) -> None:
        """One pass over every cluster's Backups and Restores."""
        for cluster_name, cluster in self.clusters.items():
            for plural, kind in (("backups", "Backup"), ("restores", "Restore")):
                for item in cluster.velero(plural):
                    self._advance(cluster_name, cluster, plural, kind, item)

    def _advance(self, where: str, cluster: _Cluster, plural: str, kind: str, item: Obj) -> None:
        """Move *item* one phase on, as Velero's backup or restore controller would."""
        name = _meta(item)["name"]
        phase = (item.get("status") or {}).get("phase", "")
        if phase in ("", "New"):
            if self.outcome(kind, name) == "FailedValidation":
                cluster.set_status(
                    plural, name, {"phase": "FailedValidation", "validationErrors": ["bad"]}
                )
            else:
                cluster.set_status(
                    plural, name, {"phase": "InProgress", "startTimestamp": timestamp()}
                )
        elif phase == "InProgress" and (result := self.outcome(kind, name)) != "stuck":
            self._finish(where, cluster, plural, kind, item, result)

    def _finish(
        self, where: str, cluster: _Cluster, plural: str, kind: str, item: Obj, result: str
    ) -> None:
        """The work of an InProgress Backup or Restore, then its terminal *result*
        (PartiallyFailed when a hook failed, whatever its onError, as in Velero)."""
        name = _meta(item)["name"]
        status: Obj = {}
        objects: list[Obj] = []
        if kind == "Backup" and result in _STORED_PHASES:
            status, objects = self._back_up(cluster, item)
        elif kind == "Restore" and result == "Completed":
            status = self._restore(cluster, item)
        if status.get("hookStatus", {}).get("hooksFailed"):
            result = "PartiallyFailed"
        status.update(phase=result, completionTimestamp=timestamp())
        stored = {**_stored_copy(item), "status": {**(item.get("status") or {}), **status}}
        if kind == "Backup" and result in _STORED_PHASES:
            self.store.put(stored, objects)  # uploaded before it is Completed, as in Velero
        cluster.set_status(plural, name, status)
        if kind == "Backup" and result in _STORED_PHASES:
            self._sync(stored, skip=where)

    def _log(self, kind: str, name: str, log: list[Obj]) -> Obj:
        self._hooks[kind.lower(), name] = log
        self.store.log_hooks(kind, name, log)
        return {"hookStatus": _hook_status(log)} if log else {}

    def _back_up(self, cluster: _Cluster, backup: Obj) -> tuple[Obj, list[Obj]]:
        """Pre hooks, the snapshot of the included namespaces, post hooks: the status and
        the objects backed up (not a pod whose ``onError: Fail`` pre hook failed)."""
        spec = backup.get("spec") or {}
        included = spec.get("includedNamespaces") or ["*"]
        matches = parse_selector(selector_string(spec.get("labelSelector")))
        objects: list[Obj] = []
        for resource in BACKED_UP:
            scopes: list[str | None] = [None] if "*" in included else list(included)
            for namespace in scopes:
                for obj in cluster.list(resource, namespace):
                    ns = str(_meta(obj).get("namespace", ""))
                    if _in_namespaces(ns, spec) and matches(_meta(obj).get("labels") or {}):
                        objects.append(obj)
        pods = [obj for obj in objects if obj["kind"] == "Pod"]
        hooks = (spec.get("hooks") or {}).get("resources") or []
        log: list[Obj] = []
        stopped = {id(pod) for pod in pods if not _run_hooks("pre", pod, hooks, "pre", log)}
        for pod in pods:
            if id(pod) not in stopped:
                _run_hooks("post", pod, hooks, "post", log)
        kept = [_stored_copy(obj) for obj in objects if id(obj) not in stopped]
        return self._log("Backup", _meta(backup)["name"], log), kept

    def _restore(self, cluster: _Cluster, restore: Obj) -> Obj:
        """Create the backup's objects in the mapped namespaces, then run the restore's
        post hooks on the restored pods; the status."""
        spec = restore.get("spec") or {}
        mapping: Mapping[str, str] = spec.get("namespaceMapping") or {}
        stored = self.store.get(str(spec.get("backupName", "")))
        if stored is None:  # not a backup of this simulation: the live source namespaces
            objects = [
                _stored_copy(obj)
                for source in mapping
                for resource in BACKED_UP
                for obj in cluster.list(resource, source)
            ]
        else:
            objects = stored[1]
        restored: list[Obj] = []
        backup, name = str(spec.get("backupName", "")), str(_meta(restore)["name"])
        for obj in objects:
            source = str(_meta(obj).get("namespace", ""))
            if not _in_namespaces(source, spec):
                continue
            target = mapping.get(source, source)
            cluster.ensure_namespace(target)
            body = _restored(obj, target, backup, name)
            cluster.create(resource_of(obj), target, body)
            if body["kind"] == "Pod":
                cluster.set_pod_phase(target, _meta(body)["name"], "Running")
                body["status"] = {"phase": "Running"}
            restored.append(body)
        hooks = (spec.get("hooks") or {}).get("resources") or []
        log: list[Obj] = []
        for pod in (obj for obj in restored if obj["kind"] == "Pod"):
            _run_hooks("post", pod, hooks, "postHooks", log)
        return self._log("Restore", _meta(restore)["name"], log)


# -- the standalone process -----------------------------------------------------------------


def _cluster(value: str) -> tuple[str, Path]:
    name, sep, path = value.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=KUBECONFIG, got {value!r}")
    return name, Path(path)


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {value!r}")
    return seconds


def main(
    argv: Sequence[str] | None = None, prog: str = "python -m gotthard_testing.velero_sim"
) -> int:
    """Run the simulation until SIGTERM/SIGINT: 0; 2 for bad arguments or an unreadable
    kubeconfig (one line on stderr)."""
    parser = UsageParser(
        prog=prog,
        description="A simulated Velero and Deployment controller (not Velero, not Kubernetes).",
    )
    parser.add_argument(
        "--cluster", type=_cluster, action="append", required=True, metavar="NAME=KUBECONFIG"
    )
    parser.add_argument("--object-store", type=Path, required=True, metavar="DIR")
    parser.add_argument("--namespace", default="velero")
    parser.add_argument("--interval", type=_seconds, default=0.1, metavar="SECONDS")
    parser.add_argument(
        "--ready-delay",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="restored Deployments turn ready this long after they appear (default: at once)",
    )
    args = parser.parse_args(argv)
    clusters: dict[str, client.ApiClient] = {}
    for name, path in args.cluster:
        try:
            clusters[name] = client_for(KubeAccess(kubeconfig=str(path)), f"cluster {name}")
        except KubeError as err:
            print(f"{prog}: error: {err}", file=sys.stderr)
            return 2
    try:
        args.object_store.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        print(f"{prog}: error: object store {args.object_store}: {err.strerror}", file=sys.stderr)
        return 2
    velero = SimulatedVelero(
        clusters, args.object_store, args.namespace, args.interval, args.ready_delay
    )
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    velero.start()
    about = f"{', '.join(clusters)}, store {args.object_store}, ready delay {args.ready_delay}s"
    print(f"simulated Velero and Deployment controller over {about}", flush=True)
    stop.wait()
    velero.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
