"""Where the ``lustre`` collector reads from: procfs/sysfs/debugfs trees or ``lctl get_param``.

Both sources produce the same :class:`ParamTree` (``subsystem -> device -> param -> text``,
as in ``lctl get_param subsystem.device.param``), and :func:`assemble` turns it into a
:class:`~gotthard.exporters.lustre.snapshot.LustreSnapshot`, so a node reads the same
whichever source it uses.

Lustre moved parameters between versions (``obdfilter/*/kbytes*`` to ``osd-*/*`` in 2.12;
most single values from /proc/fs/lustre to /sys/fs/lustre; client ``llite`` stats to
debugfs). Rather than a table per version, the procfs source looks in every place a
parameter has lived -- ``<sysfs>/fs/lustre``, ``<procfs>/fs/lustre`` and
``<sysfs>/kernel/debug/lustre``, in that order -- and takes the first it finds, as
``lctl get_param`` itself does. Only subsystems and devices that exist are read, so a node
without a role (or without Lustre) reads nothing and reports no error.
"""

from __future__ import annotations

import logging
import os
import subprocess
from dataclasses import dataclass, field

from gotthard.exporters.lustre.parse import (
    SERVER_COMPONENT,
    client_device,
    llite_fs,
    parse_health_check,
    parse_int,
    parse_job_stats,
    parse_lctl_output,
    parse_lnet_stats,
    parse_recovery_status,
    parse_stats,
    parse_target_name,
    parse_version,
)
from gotthard.exporters.lustre.snapshot import (
    ROLES,
    Capacity,
    ExportStat,
    LustreSnapshot,
    OperationStats,
    Recovery,
    TargetExportStats,
    TargetJobStats,
)

log = logging.getLogger("gotthard.exporter.lustre")

CAPACITY = ("kbytestotal", "kbytesfree", "kbytesavail", "filestotal", "filesfree")
#: what a server target (OST, MDT) says about its clients: recovery, evictions, exports
SERVING = ("recovery_status", "eviction_count", "num_exports")
#: subsystem -> parameters read from each of its devices ("osd" stands for every osd-*).
#: osc/mdc read ``active`` first and skip the rest of an inactive device.
WANTED: dict[str, tuple[str, ...]] = {
    "osd": CAPACITY,
    "obdfilter": (*CAPACITY, "stats", *SERVING),
    "mdt": (*CAPACITY, "md_stats", *SERVING),
    "mgs": (),
    "osc": ("active", *CAPACITY),
    "mdc": ("active", *CAPACITY, "md_stats"),
    "llite": ("stats",),
}
#: extra parameters with --lustre.job-stats
JOB_STATS = {"obdfilter": ("job_stats",), "mdt": ("job_stats",)}
#: subsystems whose devices list per-client ``exports/<nid>/stats`` (--lustre.export-stats)
EXPORTS = ("obdfilter", "mdt")
#: node-wide parameters (no subsystem) read from the first Lustre root that has them
TOP = ("version", "health_check")
#: LNet's counters, relative to procfs (up to 2.10) and sysfs (debugfs, 2.12 and later)
LNET_STATS = (("procfs", "sys/lnet/stats"), ("sysfs", "kernel/debug/lnet/stats"))


def wanted(subsystem: str, job_stats: bool) -> tuple[str, ...]:
    key = "osd" if subsystem.startswith("osd-") else subsystem
    params = WANTED.get(key, ())
    if job_stats:
        params = params + JOB_STATS.get(key, ())
    return params


def is_wanted_subsystem(subsystem: str) -> bool:
    return subsystem in WANTED or (subsystem.startswith("osd-") and len(subsystem) > 4)


@dataclass(slots=True)
class ParamTree:
    """Raw parameter texts as read, before parsing."""

    #: subsystem -> device -> param -> text; a device without readable params is still listed
    params: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)
    #: text of the ``version`` parameter, None when absent
    version: str | None = None
    #: text of the ``health_check`` parameter, None when absent
    health_check: str | None = None
    #: subsystem -> device -> client NID -> text of ``exports.<nid>.stats``
    exports: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)
    #: text of LNet's ``stats``, None when absent
    lnet_stats: str | None = None
    errors: int = 0


def read_lnet_stats(tree: ParamTree, procfs: str, sysfs: str) -> None:
    """Fill ``tree.lnet_stats`` from the first LNet ``stats`` file that exists.

    LNet's counters are no ``lctl get_param`` parameter, so both sources read this file.
    """
    roots = {"procfs": procfs, "sysfs": sysfs}
    for root, relative in LNET_STATS:
        path = os.path.join(roots[root], relative)
        try:
            with open(path, "rb") as handle:
                tree.lnet_stats = handle.read().decode("utf-8", "replace")
                return
        except FileNotFoundError:
            continue
        except PermissionError:
            continue  # debugfs is root-only: as for llite stats, not an error each poll
        except OSError as err:
            tree.errors += 1
            log.debug("lustre: cannot read %s: %s", path, err)
            return


# --- procfs / sysfs / debugfs ------------------------------------------------------------


class ProcfsSource:
    """Reads Lustre parameters from the kernel's file trees."""

    def __init__(self, procfs: str = "/proc", sysfs: str = "/sys") -> None:
        self.sysfs_root = os.path.join(sysfs, "fs", "lustre")
        self.procfs_root = os.path.join(procfs, "fs", "lustre")
        self.debugfs_root = os.path.join(sysfs, "kernel", "debug", "lustre")
        self.roots = (self.sysfs_root, self.procfs_root, self.debugfs_root)
        self.procfs = procfs
        self.sysfs = sysfs
        self._warned: set[str] = set()

    def _listdir(self, path: str, tree: ParamTree, *, dirs: bool) -> list[str]:
        """Names in *path* (directories only with *dirs*); a missing path is no error."""
        try:
            with os.scandir(path) as entries:
                names = []
                for entry in entries:
                    try:
                        if not dirs or entry.is_dir():
                            names.append(entry.name)
                    except OSError:
                        continue
                return names
        except (FileNotFoundError, NotADirectoryError):
            return []
        except PermissionError as err:
            if path.startswith(self.debugfs_root):
                # debugfs is root-only on most systems: say so once, do not count it
                # every poll (client llite stats live there from 2.12 on)
                self._warn_once(path, f"cannot read {path} ({err}); run as root for its stats")
                return []
            tree.errors += 1
            self._warn_once(path, f"cannot list {path}: {err}")
            return []
        except OSError as err:
            tree.errors += 1
            self._warn_once(path, f"cannot list {path}: {err}")
            return []

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("lustre: %s", message)

    def _read(self, path: str, tree: ParamTree) -> str | None:
        try:
            with open(path, "rb") as handle:
                return handle.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return None
        except OSError as err:
            tree.errors += 1
            log.debug("lustre: cannot read %s: %s", path, err)
            return None

    def read(self, *, job_stats: bool, export_stats: bool = False) -> ParamTree:
        tree = ParamTree()
        for name in TOP:
            for root in (self.sysfs_root, self.procfs_root):
                text = self._read(os.path.join(root, name), tree)
                if text is not None:
                    setattr(tree, name, text)
                    break
        read_lnet_stats(tree, self.procfs, self.sysfs)
        if export_stats:
            self._read_exports(tree)
        # subsystem -> device -> {param: directory holding it}, first root wins per param
        located: dict[str, dict[str, dict[str, str]]] = {}
        for root in self.roots:
            for subsystem in self._listdir(root, tree, dirs=True):
                if not is_wanted_subsystem(subsystem):
                    continue
                params = wanted(subsystem, job_stats)
                devices = located.setdefault(subsystem, {})
                base = os.path.join(root, subsystem)
                for device in self._listdir(base, tree, dirs=True):
                    found = devices.setdefault(device, {})
                    if not params:
                        continue
                    directory = os.path.join(base, device)
                    present = set(self._listdir(directory, tree, dirs=False))
                    for param in params:
                        if param in present and param not in found:
                            found[param] = directory
        for subsystem in sorted(located):
            out: dict[str, dict[str, str]] = {}
            for device in sorted(located[subsystem]):
                where = located[subsystem][device]
                texts: dict[str, str] = {}
                out[device] = texts
                if "active" in where:
                    text = self._read(os.path.join(where["active"], "active"), tree)
                    if text is None:
                        continue
                    texts["active"] = text
                    if _inactive(text):
                        continue  # an inactive OSC's statfs can block or fail: skip it
                for param, directory in where.items():
                    if param == "active":
                        continue
                    text = self._read(os.path.join(directory, param), tree)
                    if text is not None:
                        texts[param] = text
            tree.params[subsystem] = out
        return tree

    def _read_exports(self, tree: ParamTree) -> None:
        """``<subsystem>/<device>/exports/<nid>/stats`` of every server target, first root wins."""
        for subsystem in EXPORTS:
            devices = tree.exports.setdefault(subsystem, {})
            for root in (self.procfs_root, self.sysfs_root):
                base = os.path.join(root, subsystem)
                for device in self._listdir(base, tree, dirs=True):
                    folder = os.path.join(base, device, "exports")
                    nids = devices.setdefault(device, {})
                    for nid in self._listdir(folder, tree, dirs=True):
                        if nid in nids:
                            continue
                        text = self._read(os.path.join(folder, nid, "stats"), tree)
                        if text is not None:
                            nids[nid] = text


def _inactive(text: str) -> bool:
    try:
        return parse_int(text) == 0
    except ValueError:
        return False


# --- lctl --------------------------------------------------------------------------------


class LctlError(RuntimeError):
    """``lctl`` could not be run or did not finish: no data this poll."""


class LctlSource:
    """Runs one ``lctl get_param`` for all parameters and parses its output."""

    def __init__(
        self,
        lctl_path: str = "lctl",
        timeout: float = 10.0,
        *,
        procfs: str = "/proc",
        sysfs: str = "/sys",
    ) -> None:
        self.lctl_path = lctl_path
        self.timeout = timeout
        self.procfs = procfs
        self.sysfs = sysfs
        self._last_complaint = ""

    def argv(self, *, job_stats: bool, export_stats: bool = False) -> list[str]:
        """The exact command: ``lctl get_param <param>...``.

        No ``-n``: the output must name each parameter. Every parameter is spelled out (no
        ``kbytes*``), one argv list, never a shell.
        """
        patterns = list(TOP)
        for subsystem in WANTED:
            glob = "osd-*" if subsystem == "osd" else subsystem
            params = wanted(glob, job_stats) or ("num_exports",)  # mgs: presence only
            patterns.extend(f"{glob}.*.{param}" for param in params)
        if export_stats:
            patterns.extend(f"{subsystem}.*.exports.*.stats" for subsystem in EXPORTS)
        return [self.lctl_path, "get_param", *patterns]

    def read(self, *, job_stats: bool, export_stats: bool = False) -> ParamTree:
        argv = self.argv(job_stats=job_stats, export_stats=export_stats)
        try:
            done = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=self.timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise LctlError(
                f"{self.lctl_path} get_param timed out after {self.timeout:g}s"
            ) from None
        except OSError as err:
            raise LctlError(f"cannot run {self.lctl_path}: {err.strerror or err}") from None
        stdout = done.stdout.decode("utf-8", "replace")
        stderr = done.stderr.decode("utf-8", "replace")
        tree = tree_from_lctl(stdout, job_stats=job_stats, export_stats=export_stats)
        read_lnet_stats(tree, self.procfs, self.sysfs)
        # lctl exits non-zero when any pattern matches nothing (a client has no
        # obdfilter.*): that is the normal case, not an error; nor are complaints about
        # a deactivated OSC/MDC (its statfs fails). Anything else is.
        inactive = [
            device
            for subsystem in ("osc", "mdc")
            for device, texts in tree.params.get(subsystem, {}).items()
            if _inactive(texts.get("active", ""))
        ]
        unexpected = [
            line.strip()
            for line in stderr.splitlines()
            if line.strip()
            and "No such file or directory" not in line
            and not any(device in line for device in inactive)
        ]
        if done.returncode != 0 and unexpected:
            tree.errors += 1
            complaint = unexpected[0][:200]
            if complaint != self._last_complaint:
                self._last_complaint = complaint
                log.warning("lustre: %s exited %d: %s", self.lctl_path, done.returncode, complaint)
        return tree


def tree_from_lctl(text: str, *, job_stats: bool, export_stats: bool = False) -> ParamTree:
    """A :class:`ParamTree` from ``lctl get_param`` output.

    Only the parameters :meth:`LctlSource.argv` asks for are taken: ``<subsystem>.<device>.
    <param>`` with a device name without dots (Lustre device names have none), and, with
    *export_stats*, ``<obdfilter|mdt>.<device>.exports.<nid>.stats`` (NIDs have dots:
    ``10.0.0.1@o2ib``). Anything else a pattern matched (a per-client ``exports`` entry
    without *export_stats*, a deeper parameter) is ignored, never taken for a target.
    """
    output = parse_lctl_output(text)
    tree = ParamTree(errors=output.errors)
    for name, value in output.params.items():
        if name in TOP:
            setattr(tree, name, value)
            continue
        subsystem, _, rest = name.partition(".")
        device, _, param = rest.partition(".")
        if not device or not param or not is_wanted_subsystem(subsystem):
            continue
        texts = tree.params.setdefault(subsystem, {}).setdefault(device, {})
        if param.startswith("exports.") and param.endswith(".stats"):
            nid = param[len("exports.") : -len(".stats")]
            if export_stats and subsystem in EXPORTS and nid:
                nids = tree.exports.setdefault(subsystem, {}).setdefault(device, {})
                nids[nid] = value
            continue
        if param in wanted(subsystem, job_stats):
            texts[param] = value
    return tree


# --- assembly ----------------------------------------------------------------------------


def _capacity(
    fs: str, target: str, component: str, texts: dict[str, str], errors: list[int]
) -> Capacity | None:
    values: dict[str, int] = {}
    for param in CAPACITY:
        text = texts.get(param)
        if text is None:
            continue
        try:
            values[param] = parse_int(text)
        except ValueError:
            errors[0] += 1
    if not values:
        return None

    def kib(param: str) -> int | None:
        value = values.get(param)
        return None if value is None else value * 1024

    return Capacity(
        fs,
        target,
        component,
        capacity_bytes=kib("kbytestotal"),
        free_bytes=kib("kbytesfree"),
        available_bytes=kib("kbytesavail"),
        files_total=values.get("filestotal"),
        files_free=values.get("filesfree"),
    )


def _add_stats(
    stats: dict[tuple[str, str, str], OperationStats],
    key: tuple[str, str, str],
    text: str | None,
    errors: list[int],
) -> None:
    if text is None:
        return
    block = parse_stats(text)
    errors[0] += block.errors
    if (
        not block.operations
        and block.read_bytes is None
        and block.write_bytes is None
        and block.open_closes is None
    ):
        return
    entry = stats.get(key)
    if entry is None:
        stats[key] = OperationStats(
            *key,
            operations=block.operations,
            latency_usecs=block.latency_usecs,
            read_bytes=block.read_bytes,
            write_bytes=block.write_bytes,
            open_closes=block.open_closes,
            open_time_usecs=block.open_time_usecs,
        )
        return
    # a second mount of the same file system on a client: add its counters
    for name, value in block.operations.items():
        entry.operations[name] = entry.operations.get(name, 0) + value
    for name, value in block.latency_usecs.items():
        entry.latency_usecs[name] = entry.latency_usecs.get(name, 0) + value
    if block.read_bytes is not None:
        entry.read_bytes = (entry.read_bytes or 0) + block.read_bytes
    if block.write_bytes is not None:
        entry.write_bytes = (entry.write_bytes or 0) + block.write_bytes
    if block.open_closes is not None:
        entry.open_closes = (entry.open_closes or 0) + block.open_closes
        entry.open_time_usecs = (entry.open_time_usecs or 0) + (block.open_time_usecs or 0)


def _serving(
    params: dict[str, dict[str, dict[str, str]]], snapshot: LustreSnapshot, errors: list[int]
) -> None:
    """Recovery, evictions and connected clients of every OST and MDT."""
    for subsystem, component in (("obdfilter", "ost"), ("mdt", "mdt")):
        for device, texts in sorted(params.get(subsystem, {}).items()):
            fs, target, _, _ = parse_target_name(device)
            key = (fs, target, component)
            for param, into in (
                ("eviction_count", snapshot.evictions),
                ("num_exports", snapshot.connected_clients),
            ):
                text = texts.get(param)
                if text is None:
                    continue
                try:
                    into[key] = parse_int(text)
                except ValueError:
                    errors[0] += 1
            text = texts.get("recovery_status")
            if text is None:
                continue
            status = parse_recovery_status(text)
            errors[0] += status.errors
            if not status.status:
                errors[0] += 1
                continue
            snapshot.recovery.append(
                Recovery(
                    *key,
                    status=status.status,
                    completed_clients=status.completed_clients,
                    total_clients=status.total_clients,
                    connected_clients=status.connected_clients,
                    time_remaining_seconds=status.time_remaining_seconds,
                )
            )


def _export_stats(
    exports: dict[str, dict[str, dict[str, str]]], errors: list[int]
) -> list[TargetExportStats]:
    out: list[TargetExportStats] = []
    for subsystem, component in (("obdfilter", "ost"), ("mdt", "mdt")):
        for device, nids in sorted(exports.get(subsystem, {}).items()):
            if not nids:
                continue  # lctl prints nothing for a target without exports: neither do we
            fs, target, _, _ = parse_target_name(device)
            entry = TargetExportStats(fs, target, component)
            for nid, text in sorted(nids.items()):
                block = parse_stats(text)
                errors[0] += block.errors
                entry.exports.append(
                    ExportStat(
                        nid,
                        read_bytes=block.read_bytes or 0,
                        write_bytes=block.write_bytes or 0,
                        operations=block.operations,
                    )
                )
            out.append(entry)
    return out


def assemble(tree: ParamTree, *, job_stats: bool, export_stats: bool = False) -> LustreSnapshot:
    """Parse a :class:`ParamTree` into a snapshot: roles, deduplicated targets, stats, jobs."""
    errors = [tree.errors]
    version = ""
    if tree.version is not None:
        try:
            version = parse_version(tree.version)
        except ValueError:
            errors[0] += 1
    params = tree.params
    osd = {name: devices for name, devices in params.items() if name.startswith("osd-")}
    roles: set[str] = set()
    if params.get("obdfilter"):
        roles.add("oss")
    if params.get("mdt"):
        roles.add("mds")
    if params.get("mgs"):
        roles.add("mgs")
    if params.get("llite"):
        roles.add("client")

    capacity: dict[tuple[str, str, str], Capacity] = {}
    active: dict[tuple[str, str, str], int] = {}
    # server targets: osd-* first (2.12+ and 2.10 alike), then obdfilter/mdt (2.10 and older)
    for subsystem in sorted(osd):
        for device, texts in sorted(osd[subsystem].items()):
            fs, target, kind, rest = parse_target_name(device)
            if rest or not kind:
                continue
            component = SERVER_COMPONENT.get(kind, "mgs")
            roles.add({"ost": "oss", "mdt": "mds"}.get(component, "mgs"))
            key = (fs, target, component)
            if key not in capacity:
                entry = _capacity(fs, target, component, texts, errors)
                if entry is not None:
                    capacity[key] = entry
    for subsystem, component in (("obdfilter", "ost"), ("mdt", "mdt")):
        for device, texts in sorted(params.get(subsystem, {}).items()):
            fs, target, _, _ = parse_target_name(device)
            key = (fs, target, component)
            if key not in capacity:
                entry = _capacity(fs, target, component, texts, errors)
                if entry is not None:
                    capacity[key] = entry
    # a client's view of each OST and MDT; the first mount of a file system wins
    for subsystem in ("osc", "mdc"):
        for device, texts in sorted(params.get(subsystem, {}).items()):
            names = client_device(device, subsystem)
            if names is None:
                continue
            roles.add("client")
            key = (*names, subsystem)
            if key in active:
                continue
            text = texts.get("active")
            is_active = 1
            if text is not None:
                try:
                    is_active = 1 if parse_int(text) else 0
                except ValueError:
                    errors[0] += 1
            active[key] = is_active
            if not is_active:
                continue  # inactive (deactivated) OSTs: no capacity from this client
            entry = _capacity(*key, texts, errors)
            if entry is not None:
                capacity[key] = entry

    stats: dict[tuple[str, str, str], OperationStats] = {}
    for device, texts in sorted(params.get("obdfilter", {}).items()):
        fs, target, _, _ = parse_target_name(device)
        _add_stats(stats, (fs, target, "ost"), texts.get("stats"), errors)
    for device, texts in sorted(params.get("mdt", {}).items()):
        fs, target, _, _ = parse_target_name(device)
        _add_stats(stats, (fs, target, "mdt"), texts.get("md_stats"), errors)
    for device, texts in sorted(params.get("mdc", {}).items()):
        names = client_device(device, "mdc")
        if names is not None:
            _add_stats(stats, (*names, "mdc"), texts.get("md_stats"), errors)
    for device, texts in sorted(params.get("llite", {}).items()):
        fs = llite_fs(device)
        _add_stats(stats, (fs, fs, "client"), texts.get("stats"), errors)

    jobs: list[TargetJobStats] | None = None
    if job_stats:
        jobs = []
        for subsystem, component in (("obdfilter", "ost"), ("mdt", "mdt")):
            for device, texts in sorted(params.get(subsystem, {}).items()):
                text = texts.get("job_stats")
                if text is None:
                    continue
                fs, target, _, _ = parse_target_name(device)
                result = parse_job_stats(text)
                errors[0] += result.errors
                jobs.append(TargetJobStats(fs, target, component, result.jobs))

    snapshot = LustreSnapshot(
        roles=tuple(role for role in ROLES if role in roles),
        version=version,
        capacity=list(capacity.values()),
        active=active,
        stats=list(stats.values()),
        job_stats=jobs,
    )
    _serving(params, snapshot, errors)
    if export_stats:
        snapshot.export_stats = _export_stats(tree.exports, errors)
    if tree.health_check is not None:
        try:
            snapshot.health = parse_health_check(tree.health_check)
        except ValueError:
            errors[0] += 1
    if tree.lnet_stats is not None:
        lnet = parse_lnet_stats(tree.lnet_stats)
        errors[0] += lnet.errors
        snapshot.lnet = lnet.values
    snapshot.errors = errors[0]
    return snapshot
