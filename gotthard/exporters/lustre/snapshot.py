"""The typed snapshot the ``lustre`` collector's sources produce.

Labels follow one convention on every node role, so the same OST joins between a client
(``osc``) and its server (``obdfilter``/``osd-*``):

* ``target`` is the full Lustre target name, ``<fs>-OST0000`` / ``<fs>-MDT0000`` / ``MGS``.
  A client's ``osc``/``mdc`` device ``<fs>-OST0000-osc-<instance>`` reports the target it
  talks to, ``<fs>-OST0000``. Client ``llite`` statistics use the file system name.
* ``fs`` is the file system name: the part before ``-OSTxxxx`` / ``-MDTxxxx`` (empty for MGS).
* ``component`` says which side measured: ``ost``, ``mdt``, ``mgs`` (server targets),
  ``osc``, ``mdc`` (a client's view of a target) or ``client`` (a client mount, llite).
"""

from __future__ import annotations

from dataclasses import dataclass, field

ROLES = ("client", "oss", "mds", "mgs")


@dataclass(slots=True)
class TargetView:
    """One target as one component sees it: the ``fs``, ``target``, ``component`` labels."""

    fs: str
    target: str
    component: str

    @property
    def key(self) -> tuple[str, str, str]:
        """The label values ``(fs, target, component)``."""
        return (self.fs, self.target, self.component)


@dataclass(slots=True)
class Capacity(TargetView):
    """Space and inode counts of one target as one component sees it."""

    capacity_bytes: int | None = None
    free_bytes: int | None = None
    available_bytes: int | None = None
    files_total: int | None = None
    files_free: int | None = None


@dataclass(slots=True)
class OperationStats(TargetView):
    """One ``stats`` / ``md_stats`` block: per-operation counts, latency and bytes."""

    #: operation -> number of requests (the ``samples`` column)
    operations: dict[str, int] = field(default_factory=dict)
    #: operation -> summed latency in microseconds (``[usecs]`` lines with a sum only)
    latency_usecs: dict[str, int] = field(default_factory=dict)
    read_bytes: int | None = None
    write_bytes: int | None = None
    #: client ``openclosetime``: closes measured and the summed time those files were open
    open_closes: int | None = None
    open_time_usecs: int | None = None


@dataclass(slots=True)
class JobStat:
    """One ``- job_id:`` entry of a target's job_stats."""

    job_id: str
    read_bytes: int = 0
    write_bytes: int = 0
    #: operation -> samples, operations with zero samples left out
    operations: dict[str, int] = field(default_factory=dict)

    @property
    def io_bytes(self) -> int:
        return self.read_bytes + self.write_bytes


@dataclass(slots=True)
class TargetJobStats(TargetView):
    """All jobs one server target (OST or MDT) reports in its job_stats."""

    jobs: list[JobStat] = field(default_factory=list)


@dataclass(slots=True)
class ExportStat:
    """One client's ``exports.<nid>.stats`` on a server target."""

    nid: str
    read_bytes: int = 0
    write_bytes: int = 0
    #: operation -> samples
    operations: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class TargetExportStats(TargetView):
    """All client exports one server target lists."""

    exports: list[ExportStat] = field(default_factory=list)


@dataclass(slots=True)
class Recovery(TargetView):
    """A server target's ``recovery_status``."""

    status: str = ""
    completed_clients: int | None = None
    total_clients: int | None = None
    connected_clients: int | None = None
    time_remaining_seconds: int | None = None


@dataclass(slots=True)
class LustreSnapshot:
    """Everything one poll read; empty on a node without Lustre."""

    #: detected roles, a subset of ROLES in that order
    roles: tuple[str, ...] = ()
    #: Lustre version as the node reports it ("" when unknown)
    version: str = ""
    capacity: list[Capacity] = field(default_factory=list)
    #: (fs, target, component) -> 1 active / 0 inactive, for client osc/mdc devices
    active: dict[tuple[str, str, str], int] = field(default_factory=dict)
    stats: list[OperationStats] = field(default_factory=list)
    #: None when job stats are off; a list (maybe empty) when on
    job_stats: list[TargetJobStats] | None = None
    #: None when export stats are off; a list (maybe empty) when on
    export_stats: list[TargetExportStats] | None = None
    #: ``healthy``/``sick``/``lbug`` from health_check; "" when the node has none
    health: str = ""
    recovery: list[Recovery] = field(default_factory=list)
    #: (fs, target, component) -> eviction_count of a server target
    evictions: dict[tuple[str, str, str], int] = field(default_factory=dict)
    #: (fs, target, component) -> num_exports of a server target
    connected_clients: dict[tuple[str, str, str], int] = field(default_factory=dict)
    #: node-wide LNet counters (names as ``lnetctl stats show``); empty when not read
    lnet: dict[str, int] = field(default_factory=dict)
    #: recoverable problems: unreadable files, unparsable values and lines
    errors: int = 0
