"""Builders for Lustre parameter trees and texts, from the documented formats.

* :func:`stats_text` / :func:`job_stats_text` write ``stats``/``md_stats`` and ``job_stats``
  bodies as Lustre 2.10, 2.12 and 2.15 print them (docs/lustre.md, "Formats").
* :func:`build_job_stats` makes a realistic job_stats text with many jobs (10,000 for the
  benchmark: ``from tests.exporters.lustre_tree import build_job_stats``).
* :data:`NODES` describes the fixture nodes (client, OSS, MDS, combined) and
  :func:`write_tree` lays one out as a ``proc/`` + ``sys/`` tree for a Lustre version;
  :func:`lctl_text` prints the same parameters as ``lctl get_param`` would.

``python tests/exporters/lustre_tree.py`` rewrites the fixture trees and lctl recordings
under ``tests/fixtures/lustre/`` (review the diff; the HPE tree there is not touched).
"""

from __future__ import annotations

import random
import shutil
import sys
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "lustre"
VERSIONS = ("2.10", "2.12", "2.15")
FULL_VERSION = {"2.10": "2.10.8", "2.12": "2.12.9", "2.15": "2.15.4"}
#: a realistic poll time; stats/job_stats headers count from here
NOW = 1_733_150_000

OST_OPS = (
    "read_bytes",
    "write_bytes",
    "read",
    "write",
    "getattr",
    "setattr",
    "punch",
    "sync",
    "destroy",
    "create",
    "statfs",
    "get_info",
    "set_info",
    "quotactl",
    "prealloc",
)
MDT_OPS = (
    "open",
    "close",
    "mknod",
    "link",
    "unlink",
    "mkdir",
    "rmdir",
    "rename",
    "getattr",
    "setattr",
    "getxattr",
    "setxattr",
    "statfs",
    "sync",
    "samedir_rename",
    "crossdir_rename",
)
#: 2.10 had no read/write latency lines (bytes only) and no prealloc
OST_OPS_210 = tuple(op for op in OST_OPS if op not in ("read", "write", "prealloc"))

# --- texts -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Op:
    """One stats line: name, sample count, and (for timed/bytes lines) the summed value."""

    name: str
    samples: int
    total: int = 0
    unit: str = ""  # "" = decided by name and version


def _unit(op: Op, version: str) -> str:
    if op.unit:
        return op.unit
    if op.name.endswith("_bytes"):
        return "bytes"
    return "reqs" if version == "2.10" else "usecs"


def _minmax(op: Op) -> tuple[int, int]:
    if op.samples == 0:
        return 0, 0
    mean = op.total // op.samples
    if op.name.endswith("_bytes"):
        return mean, mean  # fixed-size IO, as benchmarks and checkpoints do
    return max(mean // 3, 0), min(mean * 4 + 1, op.total)


def stats_text(ops: Iterable[Op], version: str, *, start: int = NOW - 86_400) -> str:
    """A ``stats``/``md_stats`` body: header lines, then one line per operation."""
    lines = [f"{'snapshot_time':<25} {NOW}.{123456789:09d} secs.nsecs"]
    if version == "2.15":
        lines.append(f"{'start_time':<25} {start}.{987654321:09d} secs.nsecs")
        lines.append(f"{'elapsed_time':<25} {NOW - start}.{135802468:09d} secs.nsecs")
    for op in ops:
        if op.samples == 0:
            continue  # stats print only counters that moved
        unit = _unit(op, version)
        line = f"{op.name:<25} {op.samples} samples [{unit}]"
        if unit != "reqs":
            low, high = _minmax(op)
            line += f" {low} {high} {op.total}"
            if version != "2.10" or unit != "bytes":
                line += f" {op.total * max(high, 1)}"
        lines.append(line)
    return "\n".join(lines) + "\n"


@dataclass
class Job:
    """One job_stats entry: job id and operation -> (samples, sum)."""

    job_id: str
    ops: dict[str, tuple[int, int]] = field(default_factory=dict)


def _job_id_text(job_id: str, version: str) -> str:
    if version == "2.10":
        return job_id
    return '"' + job_id.replace("\\", "\\\\").replace('"', '\\"') + '"'


def job_stats_text(jobs: Iterable[Job], version: str, kind: str = "ost") -> str:
    """A ``job_stats`` body for an OST (``kind="ost"``) or MDT in the version's form."""
    if kind == "ost":
        names = OST_OPS_210 if version == "2.10" else OST_OPS
    else:
        names = MDT_OPS if version == "2.10" else (*MDT_OPS, "read", "write", "punch", "migrate")
    out = ["job_stats:"]
    append = out.append
    for job in jobs:
        append(f"- job_id:          {_job_id_text(job.job_id, version)}")
        if version == "2.15":
            append(f"  snapshot_time:   {NOW}.{24680:09d} secs.nsecs")
            append(f"  start_time:      {NOW - 3600}.{13579:09d} secs.nsecs")
            append(f"  elapsed_time:    3600.{11101:09d} secs.nsecs")
        else:
            append(f"  snapshot_time:   {NOW}")
        for name in names:
            samples, total = job.ops.get(name, (0, 0))
            label = f"{name}:"
            if name.endswith("_bytes"):
                unit = "bytes"
            elif version == "2.10":
                append(f"  {label:<16} {{ samples: {samples:>11}, unit:  reqs }}")
                continue
            else:
                unit = "usecs"
            low, high = _minmax(Op(name, samples, total))
            tail = f", sumsq: {total * max(high, 1):>17}" if version != "2.10" else ""
            append(
                f"  {label:<16} {{ samples: {samples:>11}, unit: {unit}, min: {low:>7}, "
                f"max: {high:>7}, sum: {total:>15}{tail} }}"
            )
    return "\n".join(out) + "\n"


def build_job_stats(
    jobs: int = 10_000, *, version: str = "2.15", kind: str = "ost", seed: int = 2024
) -> str:
    """A realistic job_stats text of one OST (or MDT) with *jobs* entries.

    Job ids are Slurm job ids (``jobid_var=SLURM_JOB_ID``) with a few ``procname.uid``
    ones (``jobid_var=procname_uid``, processes outside jobs). Most jobs write, about half
    read, a few punch/sync/setattr; everything else is zero, as on a real OST.
    """
    rng = random.Random(seed)
    entries = []
    for index in range(jobs):
        if index % 50 == 49:
            program = rng.choice(("python3", "cp", "rsync", "dd", "tar"))
            job_id = f"{program}.{rng.randrange(1000, 60000)}"
        else:
            job_id = str(4_000_000 + index * 3 + rng.randrange(3))
        ops: dict[str, tuple[int, int]] = {}
        if kind == "ost":
            if rng.random() < 0.8:
                writes = rng.randrange(1, 200_000)
                ops["write_bytes"] = (writes, writes * rng.choice((4096, 65536, 1 << 20, 4 << 20)))
                ops["write"] = (writes, writes * rng.randrange(50, 3000))
            if rng.random() < 0.5:
                reads = rng.randrange(1, 300_000)
                ops["read_bytes"] = (reads, reads * rng.choice((4096, 1 << 20, 4 << 20)))
                ops["read"] = (reads, reads * rng.randrange(30, 2000))
            for name, chance in (
                ("punch", 0.2),
                ("sync", 0.1),
                ("setattr", 0.15),
                ("getattr", 0.3),
            ):
                if rng.random() < chance:
                    count = rng.randrange(1, 500)
                    ops[name] = (count, count * rng.randrange(5, 400))
        else:
            for name, chance in (("open", 0.9), ("close", 0.9), ("getattr", 0.95), ("mknod", 0.3)):
                if rng.random() < chance:
                    count = rng.randrange(1, 100_000)
                    ops[name] = (count, count * rng.randrange(5, 900))
        entries.append(Job(job_id, ops))
    return job_stats_text(entries, version, kind)


# --- nodes -------------------------------------------------------------------------------


@dataclass
class Target:
    """A server target (OST/MDT/MGS) and what it reports."""

    name: str  # e.g. lustre-OST0000 or MGS
    kbytes_total: int
    kbytes_free: int
    kbytes_avail: int
    files_total: int
    files_free: int
    ops: tuple[Op, ...] = ()
    jobs: tuple[Job, ...] = ()
    #: recovery_status text (None: the default, complete with every client back)
    recovery: str | None = None
    evictions: int = 0
    #: client NID -> its exports.<nid>.stats operations
    exports: dict[str, tuple[Op, ...]] = field(default_factory=dict)


def recovery_complete(clients: int, duration: int = 150) -> str:
    """``recovery_status`` of a target whose recovery finished with all *clients* back."""
    return (
        f"status: COMPLETE\nrecovery_start: {NOW - 86_400}\nrecovery_duration: {duration}\n"
        f"completed_clients: {clients}/{clients}\nreplayed_requests: 0\n"
        f"last_transno: 4294967296\nVBR: DISABLED\nIR: ENABLED\n"
    )


def recovery_recovering(connected: int, total: int, remaining: int) -> str:
    """``recovery_status`` of a target still waiting for clients (the 2.12+ form)."""
    return (
        f"status: RECOVERING\nrecovery_start: {NOW - 120}\ntime_remaining: {remaining}\n"
        f"connected_clients: {connected}/{total}\nreq_replay_clients: 0\n"
        f"lock_repay_clients: 0\ncompleted_clients: {connected}\nevicted_clients: 0\n"
        f"replayed_requests: 0\nqueued_requests: 0\nnext_transno: 4294967297\n"
    )


@dataclass
class ClientView:
    """A client's osc/mdc device for one target."""

    device: str  # e.g. lustre-OST0000-osc-ffff9a4c2d1e8000
    active: bool
    kbytes_total: int
    kbytes_free: int
    kbytes_avail: int
    files_total: int
    files_free: int
    md_ops: tuple[Op, ...] = ()  # mdc md_stats
    #: the import's connection state (osc/mdc ``import``)
    import_state: str = "FULL"


@dataclass
class Node:
    name: str
    osts: list[Target] = field(default_factory=list)
    mdts: list[Target] = field(default_factory=list)
    mgs: Target | None = None
    oscs: list[ClientView] = field(default_factory=list)
    mdcs: list[ClientView] = field(default_factory=list)
    #: llite mount name -> stats
    mounts: dict[str, tuple[Op, ...]] = field(default_factory=dict)
    #: an MDS's server-side OSC devices (<fs>-OST0000-osc-MDT0000): must not count as client
    mds_oscs: list[ClientView] = field(default_factory=list)
    #: health_check text
    health: str = "healthy\n"
    #: LNet counters: send_count, recv_count, drop_count, send/recv/drop bytes
    lnet: tuple[int, int, int, int, int, int] = (0, 0, 0, 0, 0, 0)


TIB = 1024**3  # KiB per TiB


def _ost(name: str, fill: float, ops: tuple[Op, ...] = (), jobs: tuple[Job, ...] = ()) -> Target:
    total = 15 * TIB
    free = int(total * (1 - fill))
    return Target(
        name,
        total,
        free,
        max(free - total // 50, 0),
        16_777_216,
        16_000_000 - int(fill * 1e6),
        ops,
        jobs,
    )


def _mdt(name: str, ops: tuple[Op, ...] = (), jobs: tuple[Job, ...] = ()) -> Target:
    total = 2 * TIB
    return Target(
        name,
        total,
        total - 123_456_789,
        total - 150_000_000,
        1_342_177_280,
        1_300_001_234,
        ops,
        jobs,
    )


def _view(
    target: Target, device: str, active: bool = True, md_ops: tuple[Op, ...] = ()
) -> ClientView:
    return ClientView(
        device,
        active,
        target.kbytes_total,
        target.kbytes_free,
        target.kbytes_avail,
        target.files_total,
        target.files_free,
        md_ops,
    )


def _scaled(scale: int, table: Iterable[tuple[str, int, int]]) -> tuple[Op, ...]:
    """One :class:`Op` per (name, count, mean size): ``count * scale`` samples."""
    return tuple(Op(name, count * scale, count * scale * mean) for name, count, mean in table)


def _ost_ops(scale: int) -> tuple[Op, ...]:
    table = (
        ("read_bytes", 120_345, 1_048_576),
        ("write_bytes", 98_765, 4_194_304),
        ("read", 120_345, 812),
        ("write", 98_765, 2_310),
        ("getattr", 31, 9),
        ("setattr", 17, 40),
        ("punch", 12, 300),
        ("sync", 3, 21_000),
        ("destroy", 44, 650),
        ("create", 8, 1_100),
        ("statfs", 52_011, 3),
    )
    return (*_scaled(scale, table), Op("get_info", 4, 1_739))


def _mdt_ops(scale: int) -> tuple[Op, ...]:
    table = (
        ("open", 400_123, 41),
        ("close", 400_100, 12),
        ("mknod", 20_031, 350),
        ("unlink", 19_870, 410),
        ("mkdir", 1_203, 500),
        ("rmdir", 1_100, 380),
        ("rename", 88, 900),
        ("getattr", 1_500_321, 4),
        ("setattr", 5_040, 60),
        ("getxattr", 7_001, 3),
        ("statfs", 44_863, 7),
        ("samedir_rename", 80, 850),
        ("crossdir_rename", 8, 1_400),
    )
    return _scaled(scale, table)


def _client_ops(scale: int) -> tuple[Op, ...]:
    table = (
        ("read_bytes", 2_000, 1_048_576),
        ("write_bytes", 1_500, 4_194_304),
        ("read", 2_000, 140),
        ("write", 1_500, 620),
        ("open", 3_100, 90),
        ("close", 3_100, 30),
        ("getattr", 9_800, 25),
    )
    return (
        *_scaled(scale, table),
        Op("statfs", 12, 12 * 410),
        Op("inode_permission", 41_000 * scale, 41_000 * scale),
        # 2.15 only (dropped for older versions): how long closed files had been open, and
        # how often a file had been opened before; neither is an operation
        Op("opencount", 3_100 * scale, 3_100 * scale * 2, unit="reqs"),
        Op("openclosetime", 3_100 * scale, 3_100 * scale * 2_500_000, unit="usecs"),
    )


NIDS = ("10.20.0.11@o2ib", "10.20.0.12@o2ib", "10.20.0.13@o2ib")


def _exports(kind: str, scale: int) -> dict[str, tuple[Op, ...]]:
    """Per-client export stats of an OST (IO) or MDT (metadata) for the NIDS."""
    out = {}
    for index, nid in enumerate(NIDS, start=1):
        if kind == "ost":
            table = (("read_bytes", 100 * index, 1_048_576), ("write_bytes", 50 * index, 4_194_304))
            table += (("read", 100 * index, 700), ("write", 50 * index, 2_000))
        else:
            table = (("open", 400 * index, 40), ("close", 400 * index, 12))
            table += (("getattr", 900 * index, 4),)
        out[nid] = _scaled(scale, table)
    return out


def _jobs(kind: str, ids: Iterable[tuple[str, int]]) -> tuple[Job, ...]:
    jobs = []
    for job_id, scale in ids:
        if kind == "ost":
            ops = {
                "write_bytes": (1_000 * scale, 1_000 * scale * 4_194_304),
                "write": (1_000 * scale, 1_000 * scale * 1_700),
                "punch": (scale % 3, (scale % 3) * 210),
            }
            if scale % 2:
                ops["read_bytes"] = (500 * scale, 500 * scale * 1_048_576)
                ops["read"] = (500 * scale, 500 * scale * 600)
        else:
            ops = {
                "open": (300 * scale, 300 * scale * 45),
                "close": (300 * scale, 300 * scale * 13),
                "getattr": (1_200 * scale, 1_200 * scale * 5),
                "mknod": (10 * scale, 10 * scale * 330),
            }
        jobs.append(Job(job_id, ops))
    return tuple(jobs)


def _nodes() -> dict[str, Node]:
    fs = "lustre"
    osts = [
        _ost(f"{fs}-OST{index:04x}", fill)
        for index, fill in enumerate((0.61, 0.64, 0.58, 0.93, 0.62, 0.66, 0.71, 0.59))
    ]
    mdts = [_mdt(f"{fs}-MDT0000"), _mdt(f"{fs}-MDT0001")]
    scratch_osts = [_ost(f"scratch-OST{index:04x}", fill) for index, fill in enumerate((0.2, 0.35))]
    scratch_mdt = _mdt("scratch-MDT0000")
    mount = "ffff9a4c2d1e8000"
    mount2 = "ffff9a4c31f6c800"
    client = Node(
        "client",
        oscs=[
            _view(ost, f"{ost.name}-osc-{mount}", active=ost.name != f"{fs}-OST0003")
            for ost in osts
        ]
        # scratch-OST0000's import is idle (2.12+ idle_timeout), which is connected
        + [
            replace(_view(ost, f"{ost.name}-osc-{mount2}"), import_state=state)
            for ost, state in zip(scratch_osts, ("IDLE", "FULL"), strict=True)
        ],
        mdcs=[_view(mdt, f"{mdt.name}-mdc-{mount}", md_ops=_mdt_ops(1)[:4]) for mdt in mdts]
        + [_view(scratch_mdt, f"{scratch_mdt.name}-mdc-{mount2}", md_ops=_mdt_ops(1)[:2])],
        mounts={f"{fs}-{mount}": _client_ops(3), f"scratch-{mount2}": _client_ops(1)},
        lnet=(464_970, 464_963, 4, 261_865_376, 254_091_008, 4_832),
    )
    oss = Node(
        "oss",
        osts=[
            _ost(
                f"{fs}-OST0000",
                0.61,
                _ost_ops(7),
                _jobs("ost", [("4201337", 9), ("4201338", 2), ("python3.1001", 1)]),
            ),
            _ost(
                f"{fs}-OST0001", 0.64, _ost_ops(5), _jobs("ost", [("4201337", 8), ("4201400", 3)])
            ),
            _ost(f"{fs}-OST0002", 0.58, ()),  # idle: no stats lines, empty job_stats
        ],
        lnet=(101_719_323, 101_719_291, 11, 21_201_322_992, 53_029_565_353_720, 4_832),
    )
    oss.osts[0].exports = _exports("ost", 3)
    oss.osts[0].evictions = 2
    oss.osts[1].exports = _exports("ost", 1)
    # OST0002 was just failed over to this OSS: still waiting for 3 of its 12 clients
    oss.osts[2].recovery = recovery_recovering(9, 12, 231)
    mgs = Target("MGS", 500_000, 480_000, 460_000, 32_768, 32_500)
    mds = Node(
        "mds",
        mgs=mgs,
        mdts=[
            _mdt(
                f"{fs}-MDT0000",
                _mdt_ops(4),
                _jobs("mdt", [("4201337", 7), ("4201338", 30), ("ls.0", 1)]),
            ),
            _mdt(f"{fs}-MDT0001", _mdt_ops(1), _jobs("mdt", [("4201337", 2)])),
        ],
        mds_oscs=[_view(ost, f"{ost.name}-osc-MDT0000") for ost in osts[:2]],
        lnet=(52_011_873, 52_011_790, 0, 9_870_112_768, 12_504_332_416, 0),
    )
    mds.mdts[0].exports = _exports("mdt", 2)
    mds.mdts[0].evictions = 17
    small_ost = _ost("testfs-OST0000", 0.4, _ost_ops(1), _jobs("ost", [("1001", 2), ("1002", 1)]))
    small_mdt = _mdt("testfs-MDT0000", _mdt_ops(1), _jobs("mdt", [("1001", 1)]))
    combined = Node(
        "combined",
        osts=[small_ost],
        mdts=[small_mdt],
        mgs=Target("MGS", 491_092, 489_920, 463_708, 32_768, 32_573),
        # its OST's server does not answer: the client keeps trying to connect
        oscs=[replace(_view(small_ost, f"testfs-OST0000-osc-{mount}"), import_state="CONNECTING")],
        mdcs=[_view(small_mdt, f"testfs-MDT0000-mdc-{mount}", md_ops=_mdt_ops(1)[:3])],
        mounts={f"testfs-{mount}": _client_ops(1)},
        mds_oscs=[_view(small_ost, "testfs-OST0000-osc-MDT0000")],
        health="device testfs-OST0000 reported unhealthy\nNOT HEALTHY\n",
        lnet=(180_076, 180_072, 4, 94_371_840, 94_360_512, 1_664),
    )
    combined.osts[0].exports = _exports("ost", 1)
    return {node.name: node for node in (client, oss, mds, combined)}


NODES = _nodes()
#: fixture tree name -> (node, Lustre version)
TREES = {
    "client-2.15": ("client", "2.15"),
    "oss-2.15": ("oss", "2.15"),
    "mds-2.15": ("mds", "2.15"),
    "combined-2.12": ("combined", "2.12"),
    "combined-2.10": ("combined", "2.10"),
}

# --- layouts -----------------------------------------------------------------------------

PROC = "proc/fs/lustre"
SYS = "sys/fs/lustre"
DEBUG = "sys/kernel/debug/lustre"


@dataclass(frozen=True)
class Param:
    """One parameter: where it lives in the tree and its lctl name."""

    where: str  # PROC, SYS or DEBUG
    subsystem: str
    device: str
    name: str
    text: str

    @property
    def path(self) -> str:
        return f"{self.where}/{self.subsystem}/{self.device}/{self.name}"


def _capacity(where: str, subsystem: str, device: str, item: Target | ClientView) -> list[Param]:
    values = {
        "kbytestotal": item.kbytes_total,
        "kbytesfree": item.kbytes_free,
        "kbytesavail": item.kbytes_avail,
        "filestotal": item.files_total,
        "filesfree": item.files_free,
    }
    return [Param(where, subsystem, device, name, f"{value}\n") for name, value in values.items()]


def import_text(view: ClientView) -> str:
    """A client's ``import`` of a target, as Lustre prints it (abridged: the lines up to
    the connection; MDTs on 10.10.0.1, OSTs on two OSS pairs by index)."""
    target = view.device.rsplit("-", 2)[0]
    index = int(target[-4:], 16)
    host = 1 if "-MDT" in target else 11 + 2 * (index % 2)
    nids = f"10.10.0.{host}@o2ib, 10.10.0.{host + 1}@o2ib"
    return (
        f"import:\n    name: {view.device}\n    target: {target}_UUID\n"
        f"    state: {view.import_state}\n"
        "    connect_flags: [ write_grant, server_lock, version, request_portal ]\n"
        "    import_flags: [ replayable, pingable, connect_tried ]\n"
        f"    connection:\n       failover_nids: [ {nids} ]\n"
        f"       current_connection: 10.10.0.{host}@o2ib\n"
        "       connection_attempts: 1\n       generation: 1\n"
    )


def params(node: Node, version: str) -> list[Param]:
    """Every parameter of *node* as Lustre *version* lays it out.

    2.10: everything under /proc/fs/lustre; OST space only in ``obdfilter/*`` (the
    pre-2.12 place), MDT/MGS space in ``osd-ldiskfs/*``. 2.12 and 2.15: space in
    ``/sys/fs/lustre/osd-ldiskfs/*`` and ``osc``/``mdc`` single values in /sys; stats and
    job_stats of servers in /proc; client ``llite`` stats and ``mdc`` md_stats in debugfs.
    Each directory also holds a few parameters the collector does not read.
    """
    old = version == "2.10"
    single = PROC if old else SYS
    out: list[Param] = []
    for ost in node.osts:
        if old:
            out += _capacity(PROC, "obdfilter", ost.name, ost)
        else:
            out += _capacity(SYS, "osd-ldiskfs", ost.name, ost)
            out.append(Param(SYS, "osd-ldiskfs", ost.name, "fstype", "ldiskfs\n"))
        out += _serving(old, "obdfilter", ost, 12)
        out += _optin(old, version, ost, len(ost.ops) and 1 + len(ost.jobs))
        ops = ost.ops
        if old:  # 2.10 counts reads/writes only in read_bytes/write_bytes
            ops = _without_read_write(ops)
        out.append(Param(PROC, "obdfilter", ost.name, "stats", stats_text(ops, version)))
        out.append(
            Param(
                PROC, "obdfilter", ost.name, "job_stats", job_stats_text(ost.jobs, version, "ost")
            )
        )
    for mdt in node.mdts:
        out += _capacity(PROC if old else SYS, "osd-ldiskfs", mdt.name, mdt)
        out += _serving(old, "mdt", mdt, 14)
        out += _optin(old, version, mdt, 1 + len(mdt.jobs))
        out.append(Param(PROC, "mdt", mdt.name, "md_stats", stats_text(mdt.ops, version)))
        out.append(
            Param(PROC, "mdt", mdt.name, "job_stats", job_stats_text(mdt.jobs, version, "mdt"))
        )
    if node.mgs is not None:
        out += _capacity(PROC if old else SYS, "osd-ldiskfs", "MGS", node.mgs)
        out.append(Param(single, "mgs", "MGS", "num_exports", "3\n"))
    for view in node.mds_oscs:
        # 2.10 shows an MDS's OSP devices under osc/ as well; newer ones under osp/
        subsystem = "osc" if old else "osp"
        out.append(Param(single, subsystem, view.device, "active", "1\n"))
        out += _capacity(single, subsystem, view.device, view)
    for subsystem, views in (("osc", node.oscs), ("mdc", node.mdcs)):
        for view in views:
            out.append(Param(single, subsystem, view.device, "active", f"{int(view.active)}\n"))
            out += _capacity(single, subsystem, view.device, view)
            out.append(Param(single, subsystem, view.device, "max_rpcs_in_flight", "8\n"))
            out.append(Param(PROC, subsystem, view.device, "import", import_text(view)))
            if view.md_ops:
                where = PROC if old else DEBUG
                out.append(
                    Param(
                        where, subsystem, view.device, "md_stats", stats_text(view.md_ops, version)
                    )
                )
    for mount, ops in node.mounts.items():
        if version != "2.15":  # openclosetime and opencount are new in 2.15
            ops = tuple(op for op in ops if not op.name.startswith("open") or op.name == "open")
        if old:
            ops = _without_read_write(ops)
        out.append(Param(PROC if old else DEBUG, "llite", mount, "stats", stats_text(ops, version)))
        out.append(Param(single, "llite", mount, "blocksize", "4096\n"))
    return out


def _serving(old: bool, subsystem: str, target: Target, clients: int) -> list[Param]:
    """num_exports, recovery_status, eviction_count (2.12+) and per-client export stats."""
    version = "2.10" if old else "2.15"
    single = PROC if old else SYS
    out = [Param(single, subsystem, target.name, "num_exports", f"{clients}\n")]
    recovery = target.recovery or recovery_complete(clients)
    out.append(Param(PROC, subsystem, target.name, "recovery_status", recovery))
    if not old:
        out.append(Param(SYS, subsystem, target.name, "eviction_count", f"{target.evictions}\n"))
    for nid, ops in target.exports.items():
        device = f"{target.name}/exports/{nid}"
        out.append(Param(PROC, subsystem, device, "stats", stats_text(ops, version)))
        out.append(Param(PROC, subsystem, device, "uuid", f"{zlib.crc32(nid.encode()):08x}-uuid\n"))
    return out


#: quota type -> (file, first line); ids with (kbytes, inodes) per target, scaled by target
QUOTA = {
    "user": (
        "acct_user",
        "usr_accounting:",
        (("0", 138_926_301, 251), ("1001", 52_428_800, 9_120)),
    ),
    "group": (
        "acct_group",
        "grp_accounting:",
        (("0", 138_926_301, 251), ("500", 52_430_000, 9_125)),
    ),
    "project": ("acct_project", "prj_accounting:", (("0", 191_355_101, 9_371),)),
}


def quota_text(kind: str, scale: int) -> str:
    """``quota_slave.acct_<kind>`` as 2.10 to 2.15 print it (the HPE and lustrefs captures)."""
    _, header, ids = QUOTA[kind]
    lines = [header]
    for ident, kbytes, inodes in ids:
        lines.append(f"- id:      {ident}")
        lines.append(f"  usage:   {{ inodes: {inodes * scale:>20}, kbytes: {kbytes * scale:>20} }}")
    return "\n".join(lines) + "\n"


#: brw_stats tables: title, count column, reads and writes per bucket (index i: 2**i)
BRW = (
    (
        "pages per bulk r/w",
        "rpcs",
        {0: (13, 153), 1: (10, 157), 8: (2_210, 58_945), 10: (0, 4_059)},
    ),
    ("discontiguous pages", "rpcs", {0: (2_233, 63_297), 1: (0, 17)}),
    ("disk I/Os in flight", "ios", {0: (2_233, 60_740), 1: (0, 2_574)}),
    ("I/O time (1/1000s)", "ios", {0: (2_100, 58_000), 3: (133, 5_314)}),
    ("disk I/O size", "ios", {12: (23, 310), 13: (10, 157), 20: (2_200, 62_847)}),
)


def _bucket(index: int) -> str:
    value, suffix = 1 << index, ""
    for unit in ("K", "M", "G"):
        if value >= 1024:
            value, suffix = value // 1024, unit
    return f"{value}{suffix}:"


def brw_stats_text(version: str, scale: int) -> str:
    """A target's ``brw_stats``: ``(secs.nsecs)`` headers up to 2.12; 2.15 adds start and
    elapsed times. Rows run from the first to the last non-zero bucket, as Lustre prints."""
    if version == "2.15":
        lines = [
            f"snapshot_time:            {NOW}.482011935 secs.nsecs",
            f"start_time:               {NOW - 86_400}.000170512 secs.nsecs",
            "elapsed_time:             86400.481841423 secs.nsecs",
        ]
    else:
        lines = [f"snapshot_time:         {NOW}.797216394 (secs.nsecs)"]
    for title, unit, buckets in BRW:
        lines += ["", "                           read      |     write"]
        lines.append(f"{title:<22} {unit}  % cum % |  {unit}        % cum %")
        reads = sum(r for r, _ in buckets.values()) * scale
        writes = sum(w for _, w in buckets.values()) * scale
        read_cum = write_cum = 0
        for index in range(min(buckets) if scale else 0, (max(buckets) + 1) if scale else 0):
            read, write = (count * scale for count in buckets.get(index, (0, 0)))
            read_cum, write_cum = read_cum + read, write_cum + write
            pct = [
                count * 100 // total if total else 0
                for count, total in (
                    (read, reads),
                    (read_cum, reads),
                    (write, writes),
                    (write_cum, writes),
                )
            ]
            label = _bucket(index)
            head = f"{label:<18}{read:>8}" if version == "2.15" else f"{label}\t\t{read:>10}"
            lines.append(f"{head} {pct[0]:>3} {pct[1]:>3}   | {write:>4} {pct[2]:>3} {pct[3]:>3}")
    return "\n".join(lines) + "\n"


def _optin(old: bool, version: str, target: Target, scale: int) -> list[Param]:
    """quota_slave.acct_* of an OST or MDT and brw_stats of an OST (obdfilter up to 2.10)."""
    out = [
        Param(PROC, "osd-ldiskfs", target.name, f"quota_slave/{name}", quota_text(kind, scale))
        for kind, (name, _, _) in QUOTA.items()
    ]
    if "-OST" in target.name:
        where = "obdfilter" if old else "osd-ldiskfs"
        out.append(Param(PROC, where, target.name, "brw_stats", brw_stats_text(version, scale)))
    return out


def _without_read_write(ops: tuple[Op, ...]) -> tuple[Op, ...]:
    return tuple(op for op in ops if op.name not in ("read", "write"))


def version_text(version: str) -> tuple[str, str]:
    """(path, text) of the version parameter: 2.10 prints the old multi-line form in /proc."""
    full = FULL_VERSION[version]
    if version == "2.10":
        return f"{PROC}/version", f"lustre: {full}\nkernel: patchless_client\nbuild:  {full}-RC1\n"
    return f"{SYS}/version", f"{full}\n"


def health_text(node: Node, version: str) -> tuple[str, str]:
    """(path, text) of health_check: /proc up to 2.10, /sys from 2.12."""
    return f"{PROC if version == '2.10' else SYS}/health_check", node.health


def lnet_stats_text(node: Node, version: str) -> tuple[str, str]:
    """(path, text) of LNet's one-line stats: /proc/sys/lnet up to 2.10, debugfs from 2.12."""
    send, recv, drop, send_bytes, recv_bytes, drop_bytes = node.lnet
    fields = (0, 28, 0, send, recv, 0, drop, send_bytes, recv_bytes, 0, drop_bytes)
    path = "proc/sys/lnet/stats" if version == "2.10" else "sys/kernel/debug/lnet/stats"
    return path, " ".join(map(str, fields)) + "\n"


def write_tree(root: Path, node: Node, version: str) -> Path:
    """Lay *node* out under *root* (``root/proc``, ``root/sys``); returns *root*."""
    for param in params(node, version):
        path = root / param.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(param.text)
    for path, text in (version_text(version), health_text(node, version)):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    lnet_path, lnet = lnet_stats_text(node, version)
    (root / lnet_path).parent.mkdir(parents=True, exist_ok=True)
    (root / lnet_path).write_text(lnet)
    # decoys the collector must skip: a file among the devices, an unrelated subsystem
    for where in (PROC, SYS):
        for subsystem in ("osc", "mdc", "obdfilter", "mdt"):
            folder = root / where / subsystem
            if folder.is_dir():
                (folder / "num_refs").write_text("1\n")
    (root / PROC / "ldlm").mkdir(parents=True, exist_ok=True)
    (root / PROC / "ldlm" / "lock_limit_mb").write_text("77282\n")
    (root / "proc" / "sys" / "lnet").mkdir(parents=True, exist_ok=True)
    (root / "proc" / "sys" / "lnet" / "lnet_memused").write_text("53243084\n")
    return root


def lctl_text(node: Node, version: str) -> str:
    """What ``lctl get_param`` prints for the collector's parameters on *node*.

    Framing as real lctl output shows it: one ``name=value`` line for a single-line
    value (including ``...job_stats=job_stats:`` when no job is listed), ``name=`` then
    the lines for a multi-line value.
    """
    wanted = {"active", "kbytestotal", "kbytesfree", "kbytesavail", "filestotal", "filesfree"}
    wanted |= {"stats", "md_stats", "job_stats", "num_exports", "recovery_status"}
    wanted |= {"eviction_count", "brw_stats", "import"}
    wanted |= {f"quota_slave/{name}" for name, _, _ in QUOTA.values()}
    health = node.health.rstrip("\n")
    out = [f"version={FULL_VERSION[version]}", f"health_check={health}"]
    if "\n" in health:
        out[-1:] = ["health_check=", health]
    items = []
    for param in params(node, version):
        if param.name not in wanted:
            continue
        # lctl's osc.* also matches an MDS's OSP devices (<fs>-OST0000-osc-MDT0000)
        subsystem = "osc" if param.subsystem == "osp" else param.subsystem
        items.append((subsystem, param.name, param.device, param.text))
    items.sort()
    for subsystem, name, device, text in items:
        text = text.rstrip("\n")
        # exports/<nid>/stats is printed as <target>.exports.<nid>.stats: the recordings
        # hold them always, as lctl prints them for obdfilter.*.exports.*.stats
        lctl_name = f"{subsystem}.{device.replace('/', '.')}.{name.replace('/', '.')}"
        if "\n" in text:
            out.append(f"{lctl_name}=")
            out.append(text)
        else:
            out.append(f"{lctl_name}={text}")
    return "\n".join(out) + "\n"


def lctl_missing(node: Node) -> str:
    """The stderr lines real lctl prints for patterns that match nothing on *node*."""
    present = {"osc" if p.subsystem == "osp" else p.subsystem for p in params(node, "2.15")}
    lines = []
    for subsystem, names in (
        ("obdfilter", ("stats",)),
        ("mdt", ("md_stats",)),
        ("osc", ("active",)),
        ("mdc", ("active",)),
        ("llite", ("stats",)),
    ):
        if subsystem not in present:
            lines += [
                f"error: get_param: param_path '{subsystem}/*/{name}': No such file or directory"
                for name in names
            ]
    return "".join(line + "\n" for line in lines)


REPLAY = FIXTURES / "recorded-lctl"


def write_recording(name: str, node: Node, version: str) -> Path:
    """A recorded-lctl folder: ``lctl`` (link to the replayer) plus stdout/stderr/rc."""
    folder = REPLAY / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "stdout.txt").write_text(lctl_text(node, version))
    missing = lctl_missing(node)
    (folder / "stderr.txt").write_text(missing)
    (folder / "rc").write_text("2\n" if missing else "0\n")
    link = folder / "lctl"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to("../_replay")
    return folder


def regenerate() -> None:
    """Rewrite the generated fixture trees and recordings (not the HPE tree)."""
    for name, (node, version) in TREES.items():
        root = FIXTURES / name
        if root.exists():
            shutil.rmtree(root)
        write_tree(root, NODES[node], version)
    for name in ("client-2.15", "oss-2.15", "mds-2.15"):
        node, version = TREES[name]
        write_recording(name, NODES[node], version)


if __name__ == "__main__":
    regenerate()
    sys.stdout.write(f"wrote {', '.join(TREES)} and recordings under {FIXTURES}\n")
