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
from typing import NamedTuple

ROLES = ("client", "oss", "mds", "mgs")
#: The components that are a client's view of a server's target.
CLIENT_VIEWS = ("osc", "mdc")


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
class StatCounters:
    """The counters of one ``stats`` / ``md_stats`` block: per-operation counts, latency, bytes."""

    #: operation -> number of requests (the ``samples`` column)
    operations: dict[str, int] = field(default_factory=dict)
    #: operation -> summed latency in microseconds (``[usecs]`` lines with a sum only)
    latency_usecs: dict[str, int] = field(default_factory=dict)
    read_bytes: int | None = None
    write_bytes: int | None = None
    #: client ``openclosetime``: closes measured and the summed time those files were open
    open_closes: int | None = None
    open_time_usecs: int | None = None

    def is_empty(self) -> bool:
        """True when the block counted nothing at all."""
        return (
            not self.operations
            and self.read_bytes is None
            and self.write_bytes is None
            and (self.open_closes is None)
        )

    def add(self, other: StatCounters) -> None:
        """Add *other*'s counters to these (a second mount of the same file system)."""
        for name, value in other.operations.items():
            self.operations[name] = self.operations.get(name, 0) + value
        for name, value in other.latency_usecs.items():
            self.latency_usecs[name] = self.latency_usecs.get(name, 0) + value
        if other.read_bytes is not None:
            self.read_bytes = (self.read_bytes or 0) + other.read_bytes
        if other.write_bytes is not None:
            self.write_bytes = (self.write_bytes or 0) + other.write_bytes
        if other.open_closes is not None:
            self.open_closes = (self.open_closes or 0) + other.open_closes
            self.open_time_usecs = (self.open_time_usecs or 0) + (other.open_time_usecs or 0)


@dataclass(slots=True)
class OperationStats(TargetView):
    """One target's ``stats`` / ``md_stats`` as one component sees it."""

    counters: StatCounters = field(default_factory=StatCounters)


@dataclass(slots=True)
class ClientIO:
    """IO one client made on a server target: a job (job_stats) or a client NID (exports)."""

    #: the job id or the client NID
    name: str
    read_bytes: int = 0
    write_bytes: int = 0
    #: operation -> samples, operations with zero samples left out
    operations: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class TargetJobStats(TargetView):
    """All jobs one server target (OST or MDT) reports in its job_stats."""

    jobs: list[ClientIO] = field(default_factory=list)


@dataclass(slots=True)
class TargetExportStats(TargetView):
    """All client exports one server target lists."""

    exports: list[ClientIO] = field(default_factory=list)


@dataclass(slots=True)
class RecoveryProgress:
    """What a server target's ``recovery_status`` says."""

    #: one of the recovery states (parse.RECOVERY_STATES); "" when there is no ``status:``
    status: str = ""
    #: clients that finished recovery (``completed_clients: 4/8`` -> 4)
    completed_clients: int | None = None
    #: clients the target expects to recover (the ``/8`` of completed or connected clients)
    total_clients: int | None = None
    #: clients reconnected so far, while recovering (``connected_clients: 3/7`` -> 3)
    connected_clients: int | None = None
    #: seconds left of the recovery window, while recovering
    time_remaining_seconds: int | None = None


@dataclass(slots=True)
class Recovery(TargetView):
    """A server target's ``recovery_status``."""

    progress: RecoveryProgress = field(default_factory=RecoveryProgress)


class QuotaUsage(NamedTuple):
    """Space and inodes one user, group or project uses on one target."""

    id: str
    used_bytes: int
    inodes: int


@dataclass(slots=True)
class TargetQuota(TargetView):
    """One target's ``quota_slave.acct_*`` of one quota type."""

    #: ``user``, ``group`` or ``project``
    type: str = ""
    usage: list[QuotaUsage] = field(default_factory=list)


@dataclass(slots=True)
class TargetBrwStats(TargetView):
    """One target's ``brw_stats`` tables: title -> ``(lower bound, reads, writes)``."""

    tables: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)


@dataclass(slots=True)
class LnetNi:
    """One local LNet network interface (``lnetctl net show -v 4``)."""

    net: str
    nid: str
    #: ``up`` / ``down`` as lnetctl prints it; "" when not printed
    status: str = ""
    #: LNet's health value, 1000 when healthy and lower after send errors; None before 2.12
    health_value: int | None = None


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
    #: (fs, target, component) -> (import state, server NID), for active osc/mdc devices
    imports: dict[tuple[str, str, str], tuple[str, str]] = field(default_factory=dict)
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
    #: None when LNet NI health is off; the node's NIs (maybe none) when on
    lnet_nis: list[LnetNi] | None = None
    #: None when quota accounting is off; a list (maybe empty) when on
    quota: list[TargetQuota] | None = None
    #: None when brw_stats are off; a list (maybe empty) when on
    brw_stats: list[TargetBrwStats] | None = None
    #: recoverable problems: unreadable files, unparsable values and lines
    errors: int = 0
