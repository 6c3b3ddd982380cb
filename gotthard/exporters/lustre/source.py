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
from collections.abc import Collection
from dataclasses import dataclass, field

from gotthard import command
from gotthard.command import CommandError
from gotthard.exporters.lustre.parse import (
    SERVER_COMPONENT,
    client_device,
    llite_fs,
    parse_health_check,
    parse_import,
    parse_int,
    parse_job_stats,
    parse_lctl_output,
    parse_lnet_stats,
    parse_recovery_status,
    parse_stats,
    parse_target_name,
    parse_version,
)
from gotthard.exporters.lustre.parse_optin import (
    QUOTA_TYPES,
    parse_brw_stats,
    parse_lnet_net_show,
    parse_quota_acct,
)
from gotthard.exporters.lustre.snapshot import (
    ROLES,
    Capacity,
    ClientIO,
    LustreSnapshot,
    OperationStats,
    Recovery,
    TargetBrwStats,
    TargetExportStats,
    TargetJobStats,
    TargetQuota,
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
    "osc": ("active", *CAPACITY, "import"),
    "mdc": ("active", *CAPACITY, "md_stats", "import"),
    "llite": ("stats",),
}
#: option -> subsystem -> the extra parameters that opt-in flag reads. Parameters below a
#: device's folder are dotted as lctl names them (``quota_slave.acct_user``).
OPTIONAL: dict[str, dict[str, tuple[str, ...]]] = {
    "job_stats": {"obdfilter": ("job_stats",), "mdt": ("job_stats",)},
    "quota": {"osd": tuple(f"quota_slave.{param}" for param, _ in QUOTA_TYPES.values())},
    "brw_stats": {"osd": ("brw_stats",), "obdfilter": ("brw_stats",)},
}
#: subsystems whose devices list per-client ``exports/<nid>/stats`` (--lustre.export-stats)
EXPORTS = ("obdfilter", "mdt")
#: node-wide parameters (no subsystem) read from the first Lustre root that has them
TOP = ("version", "health_check")
#: LNet's counters, relative to procfs (up to 2.10) and sysfs (debugfs, 2.12 and later)
LNET_STATS = (("procfs", "sys/lnet/stats"), ("sysfs", "kernel/debug/lnet/stats"))


def wanted(subsystem: str, job_stats: bool, extras: Collection[str] = ()) -> tuple[str, ...]:
    """The parameters read from each device of *subsystem* with these options on."""
    key = "osd" if subsystem.startswith("osd-") else subsystem
    params = WANTED.get(key, ())
    options = ("job_stats", *extras) if job_stats else extras
    for option in options:
        params = params + OPTIONAL[option].get(key, ())
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
    #: ``lnetctl net show -v 4`` output, None when not run
    lnet_net_show: str | None = None
    errors: int = 0


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

    def read_lnet_stats(self, tree: ParamTree) -> None:
        """Fill ``tree.lnet_stats`` from the first LNet ``stats`` file that exists.

        LNet's counters are no ``lctl get_param`` parameter, so both sources read this file.
        """
        roots = {"procfs": self.procfs, "sysfs": self.sysfs}
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

    def read(
        self, *, job_stats: bool, export_stats: bool = False, extras: Collection[str] = ()
    ) -> ParamTree:
        tree = ParamTree()
        for name in TOP:
            for root in (self.sysfs_root, self.procfs_root):
                text = self._read(os.path.join(root, name), tree)
                if text is not None:
                    setattr(tree, name, text)
                    break
        self.read_lnet_stats(tree)
        if export_stats:
            self._read_exports(tree)
        # subsystem -> device -> {param: directory holding it}, first root wins per param
        located: dict[str, dict[str, dict[str, str]]] = {}
        for root in self.roots:
            for subsystem in self._listdir(root, tree, dirs=True):
                if not is_wanted_subsystem(subsystem):
                    continue
                params = wanted(subsystem, job_stats, extras)
                devices = located.setdefault(subsystem, {})
                base = os.path.join(root, subsystem)
                for device in self._listdir(base, tree, dirs=True):
                    found = devices.setdefault(device, {})
                    if not params:
                        continue
                    directory = os.path.join(base, device)
                    present = set(self._listdir(directory, tree, dirs=False))
                    for param in params:
                        # a dotted parameter lives in a sub-folder: look for its first part
                        if param.partition(".")[0] in present and param not in found:
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
                    text = self._read(os.path.join(directory, *param.split(".")), tree)
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


#: ``lctl`` (or ``lnetctl``) could not be run or did not finish: no data from it. The
#: shared command runner's error, which names the command.
LctlError = CommandError


def run_tool(argv: list[str], timeout: float) -> tuple[int, str, str]:
    """Run *argv* (a list, never a shell) with no stdin: ``(exit status, stdout, stderr)``.

    Raises :class:`LctlError` when the program cannot be started or runs past *timeout*.
    """
    done = command.run(argv, timeout=timeout, check=False)
    return done.returncode, done.stdout, done.stderr


class LnetctlReader:
    """Runs ``lnetctl net show -v 4`` for the health of the node's LNet interfaces.

    A second command, so opt-in (--lustre.lnet-health): when it fails the poll keeps the
    rest and counts one error, with one warning per new complaint.
    """

    def __init__(self, lnetctl_path: str = "lnetctl", timeout: float = 10.0) -> None:
        self.argv = [lnetctl_path, "net", "show", "-v", "4"]
        self.timeout = timeout
        self._last_complaint = ""

    def read(self, tree: ParamTree) -> None:
        """Fill ``tree.lnet_net_show``; a failure counts one error in *tree*."""
        try:
            returncode, stdout, stderr = run_tool(self.argv, self.timeout)
        except LctlError as err:
            complaint = str(err)
        else:
            if returncode == 0:
                tree.lnet_net_show = stdout
                return
            complaint = f"{self.argv[0]} exited {returncode}: {stderr.strip()[:200]}"
        tree.errors += 1
        if complaint != self._last_complaint:
            self._last_complaint = complaint
            log.warning("lustre: %s", complaint)


class LctlSource:
    """Runs one ``lctl get_param`` for all parameters and parses its output.

    What no ``lctl get_param`` parameter holds (LNet's counters) comes from *files*.
    """

    def __init__(
        self, lctl_path: str = "lctl", timeout: float = 10.0, files: ProcfsSource | None = None
    ) -> None:
        self.lctl_path = lctl_path
        self.timeout = timeout
        self.files = files if files is not None else ProcfsSource()
        self._last_complaint = ""

    def argv(
        self, *, job_stats: bool, export_stats: bool = False, extras: Collection[str] = ()
    ) -> list[str]:
        """The exact command: ``lctl get_param <param>...``.

        No ``-n``: the output must name each parameter. Every parameter is spelled out (no
        ``kbytes*``), one argv list, never a shell.
        """
        patterns = list(TOP)
        for subsystem in WANTED:
            glob = "osd-*" if subsystem == "osd" else subsystem
            params = wanted(glob, job_stats, extras) or ("num_exports",)  # mgs: presence only
            patterns.extend(f"{glob}.*.{param}" for param in params)
        if export_stats:
            patterns.extend(f"{subsystem}.*.exports.*.stats" for subsystem in EXPORTS)
        return [self.lctl_path, "get_param", *patterns]

    def read(
        self, *, job_stats: bool, export_stats: bool = False, extras: Collection[str] = ()
    ) -> ParamTree:
        argv = self.argv(job_stats=job_stats, export_stats=export_stats, extras=extras)
        returncode, stdout, stderr = run_tool(argv, self.timeout)
        tree = tree_from_lctl(stdout, job_stats=job_stats, export_stats=export_stats, extras=extras)
        self.files.read_lnet_stats(tree)
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
        if returncode != 0 and unexpected:
            tree.errors += 1
            complaint = unexpected[0][:200]
            if complaint != self._last_complaint:
                self._last_complaint = complaint
                log.warning("lustre: %s exited %d: %s", self.lctl_path, returncode, complaint)
        return tree


def tree_from_lctl(
    text: str, *, job_stats: bool, export_stats: bool = False, extras: Collection[str] = ()
) -> ParamTree:
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
        if param in wanted(subsystem, job_stats, extras):
            texts[param] = value
    return tree


# --- assembly ----------------------------------------------------------------------------


def _ints(texts: dict[str, str], params: tuple[str, ...], errors: list[int]) -> dict[str, int]:
    """The integer value of each of *params* present in *texts*; a bad value counts one error."""
    values: dict[str, int] = {}
    for param in params:
        text = texts.get(param)
        if text is None:
            continue
        try:
            values[param] = parse_int(text)
        except ValueError:
            errors[0] += 1
    return values


def _capacity(
    fs: str, target: str, component: str, texts: dict[str, str], errors: list[int]
) -> Capacity | None:
    values = _ints(texts, CAPACITY, errors)
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
    if block.is_empty():
        return
    entry = stats.get(key)
    if entry is None:
        stats[key] = OperationStats(*key, block)
    else:
        entry.counters.add(block)  # a second mount of the same file system on a client


def _serving(
    params: dict[str, dict[str, dict[str, str]]], snapshot: LustreSnapshot, errors: list[int]
) -> None:
    """Recovery, evictions and connected clients of every OST and MDT."""
    for subsystem, component in (("obdfilter", "ost"), ("mdt", "mdt")):
        for device, texts in sorted(params.get(subsystem, {}).items()):
            fs, target, _, _ = parse_target_name(device)
            key = (fs, target, component)
            counts = _ints(texts, ("eviction_count", "num_exports"), errors)
            if "eviction_count" in counts:
                snapshot.evictions[key] = counts["eviction_count"]
            if "num_exports" in counts:
                snapshot.connected_clients[key] = counts["num_exports"]
            text = texts.get("recovery_status")
            if text is None:
                continue
            status = parse_recovery_status(text)
            errors[0] += status.errors
            if not status.status:
                errors[0] += 1
                continue
            snapshot.recovery.append(Recovery(*key, status))


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
                    ClientIO(
                        nid,
                        read_bytes=block.read_bytes or 0,
                        write_bytes=block.write_bytes or 0,
                        operations=block.operations,
                    )
                )
            out.append(entry)
    return out


#: brw_stats tables exported (--lustre.brw-stats), as titled in the file
BRW_TABLES = ("pages per bulk r/w", "disk I/O size")


def _server_devices(
    params: dict[str, dict[str, dict[str, str]]], subsystems: list[str], component: str | None
) -> list[tuple[tuple[str, str, str], dict[str, str]]]:
    """``(fs, target, component)`` and texts of every server target device of *subsystems*.

    *component* None: take it from the name (osd-* devices: OST, MDT or MGS).
    """
    out = []
    for subsystem in subsystems:
        for device, texts in sorted(params.get(subsystem, {}).items()):
            fs, target, kind, rest = parse_target_name(device)
            if rest or not kind:
                continue
            out.append(((fs, target, component or SERVER_COMPONENT.get(kind, "mgs")), texts))
    return out


def _optin(
    tree: ParamTree, snapshot: LustreSnapshot, extras: Collection[str], errors: list[int]
) -> None:
    """Quota accounting, brw_stats and LNet NI health, for the options that are on."""
    osd = sorted(name for name in tree.params if name.startswith("osd-"))
    if "quota" in extras:
        snapshot.quota = []
        seen: set[tuple[str, ...]] = set()
        for key, texts in _server_devices(tree.params, osd, None):
            for kind, (param, _) in QUOTA_TYPES.items():
                text = texts.get(f"quota_slave.{param}")
                if text is None or (*key, kind) in seen:
                    continue
                seen.add((*key, kind))
                accounting = parse_quota_acct(text)
                errors[0] += accounting.errors
                if accounting.supported:
                    snapshot.quota.append(TargetQuota(*key, type=kind, usage=accounting.usage))
    if "brw_stats" in extras:
        snapshot.brw_stats = []
        found: set[tuple[str, str, str]] = set()
        # osd-* first (2.12 and later), obdfilter where it has them (2.10)
        devices = _server_devices(tree.params, osd, None)
        devices += _server_devices(tree.params, ["obdfilter"], "ost")
        for key, texts in devices:
            text = texts.get("brw_stats")
            if text is None or key in found:
                continue
            found.add(key)
            brw = parse_brw_stats(text)
            errors[0] += brw.errors
            tables = {title: brw.tables[title] for title in BRW_TABLES if title in brw.tables}
            snapshot.brw_stats.append(TargetBrwStats(*key, tables=tables))
    if tree.lnet_net_show is not None:
        nis = parse_lnet_net_show(tree.lnet_net_show)
        errors[0] += nis.errors
        snapshot.lnet_nis = nis.nis


def assemble(
    tree: ParamTree,
    *,
    job_stats: bool,
    export_stats: bool = False,
    extras: Collection[str] = (),
) -> LustreSnapshot:
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
    imports: dict[tuple[str, str, str], tuple[str, str]] = {}
    # server targets: osd-* first (2.12+ and 2.10 alike), then obdfilter/mdt (2.10 and older)
    for key, texts in _server_devices(params, sorted(osd), None):
        roles.add({"ost": "oss", "mdt": "mds"}.get(key[2], "mgs"))
        if key not in capacity:
            entry = _capacity(*key, texts, errors)
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
            if "import" in texts:
                try:
                    imports[key] = parse_import(texts["import"])
                except ValueError:
                    errors[0] += 1
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
        imports=imports,
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
    _optin(tree, snapshot, extras, errors)
    snapshot.errors = errors[0]
    return snapshot
