"""The typed snapshot every Slurm backend (cli, rest, pyslurm) fills, and the records
the runbooks and the sandbox read (:class:`Node`).

A snapshot is what one poll of the controller saw. It is already aggregated where
that keeps it small: jobs are grouped by their bounded labels (state, partition,
account, reason and, with per-user labels, user); only running jobs are kept one by
one, for ``gotthard_slurm_job_info``. Nodes and partitions are kept whole.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, TypeVar

from gotthard import slurm_state

#: Microseconds per second: slurmctld keeps durations in microseconds.
_USEC = 1_000_000.0


class SlurmUnavailable(Exception):
    """The controller could not be reached or a Slurm command is unusable."""


@dataclass(frozen=True, slots=True)
class JobGroup:
    """Jobs that share every label; ``state`` is lower-case (``running``, ``pending``)."""

    state: str
    partition: str
    account: str
    reason: str
    user: str = ""
    count: int = 0
    cpus: int = 0
    gpus: int = 0


class RunningJob(NamedTuple):
    """A running job, for ``gotthard_slurm_job_info`` (the join key of GPU and Lustre metrics).

    A named tuple: it doubles as the label values of its ``gotthard_slurm_job_info`` series.
    """

    job_id: str
    user: str
    account: str
    partition: str


class Node(NamedTuple):
    """One node as the controller reports it (a named tuple: 10,000s are built per poll)."""

    name: str
    #: Base state, lower-case: idle, mixed, allocated, down, future, unknown, error.
    state: str
    #: State flags, lower-case: drain, maint, reserved, not_responding, completing, ...
    flags: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    cpus_alloc: int = 0
    cpus_idle: int = 0
    cpus_other: int = 0
    cpus_total: int = 0
    memory_total_bytes: int = 0
    memory_alloc_bytes: int = 0
    gpus_total: int = 0
    gpus_alloc: int = 0
    reason: str = ""
    #: The OS load average slurmd last reported (1.0: one busy CPU); None if it has none.
    cpu_load: float | None = None

    @property
    def full_state(self) -> str:
        """``idle+drain+not_responding``: the base state and every flag."""
        return "+".join((self.state, *self.flags))

    @property
    def effective_state(self) -> str:
        """One exclusive state per node, as sinfo's long state shows it."""
        return slurm_state.effective_state(self.state, self.flags)

    @property
    def unavailable(self) -> bool:
        """Whether the scheduler starts no new job on it (:func:`slurm_state.is_unavailable`)."""
        return slurm_state.is_unavailable(self.state, self.flags)

    @property
    def in_maintenance(self) -> bool:
        """An operator's drain or MAINT (:func:`slurm_state.in_maintenance`)."""
        return slurm_state.in_maintenance(self.flags, self.reason)


@dataclass(frozen=True, slots=True)
class Partition:
    name: str
    state: str = "up"
    is_default: bool = False
    #: The controller's own totals for the partition; None when the backend has none.
    total_cpus: int | None = None
    total_nodes: int | None = None


@dataclass(frozen=True, slots=True)
class Reservation:
    """One advance reservation (``scontrol show reservation``, ``/reservations``)."""

    name: str
    #: ``active`` or ``inactive`` (not started yet), as scontrol prints it, lower-case.
    state: str
    partition: str = ""
    #: Flags, lower-case, comma-separated in Slurm's order (``maint,spec_nodes``).
    flags: str = ""
    nodes: int = 0


@dataclass(frozen=True, slots=True)
class Share:
    """One association of the fair-share tree (``sshare``, slurmrestd ``/shares``): an
    account (``user`` empty) or a user in an account, as slurmctld's priority plugin last
    computed it (``priority/multifactor``; once per ``PriorityCalcPeriod``)."""

    account: str
    user: str
    #: Decayed usage in billing TRES-seconds (CPU-seconds unless TRESBillingWeights).
    raw_usage: float
    #: The association's share of its parent's usage (0..1; ``EffectvUsage``).
    effective_usage: float
    #: The fair-share factor (0..1) of a user association; None for an account.
    fairshare: float | None = None


@dataclass(frozen=True, slots=True)
class RpcStat:
    count: int
    total_seconds: float


@dataclass(frozen=True, slots=True)
class SchedulerStats:
    """slurmctld's statistics; a counter the source did not report is None (no series)."""

    server_threads: int | None = None
    agent_queue_size: int | None = None
    dbd_agent_queue_size: int | None = None
    queue_length: int | None = None
    cycles_total: int | None = None
    cycle_last_seconds: float | None = None
    cycle_max_seconds: float | None = None
    cycle_mean_seconds: float | None = None
    backfill_cycles_total: int | None = None
    backfill_cycle_last_seconds: float | None = None
    backfill_cycle_mean_seconds: float | None = None
    backfill_depth_mean: float | None = None
    backfill_queue_length: int | None = None
    backfilled_jobs_total: int | None = None
    jobs_submitted_total: int | None = None
    jobs_started_total: int | None = None
    jobs_completed_total: int | None = None
    jobs_canceled_total: int | None = None
    jobs_failed_total: int | None = None
    rpc_by_type: dict[str, RpcStat] = field(default_factory=dict)
    rpc_by_user: dict[str, RpcStat] = field(default_factory=dict)

    @classmethod
    def from_counters(
        cls,
        counters: Mapping[str, float],
        rpc_by_type: Mapping[str, tuple[int, float]] | None = None,
        rpc_by_user: Mapping[str, tuple[int, float]] | None = None,
    ) -> SchedulerStats:
        """Statistics from slurmctld's counters as it keeps them: durations in microseconds.

        Raises ValueError on a non-finite counter; with no counters at all it returns
        None-valued statistics, which :attr:`empty` tells apart.

        *counters* are keyed by field name: ``*_seconds`` fields are converted to seconds,
        ``backfill_depth_mean`` stays a float, every other field becomes an int. The RPC
        tables map a message type or user to ``(count, total microseconds)``.
        """
        fields: dict[str, Any] = {}
        for name, number in counters.items():
            if not math.isfinite(number):
                raise ValueError(f"{name}: not a finite number: {number}")
            if name.endswith("_seconds"):
                fields[name] = number / _USEC
            elif name == "backfill_depth_mean":
                fields[name] = float(number)
            else:
                fields[name] = int(number)
        return cls(
            **fields,
            rpc_by_type=_rpc_table(rpc_by_type),
            rpc_by_user=_rpc_table(rpc_by_user),
        )

    @property
    def empty(self) -> bool:
        """True when the source reported no statistics at all (``{}``)."""
        return (
            not self.rpc_by_type
            and not self.rpc_by_user
            and all(
                getattr(self, counter.name) is None
                for counter in dataclasses.fields(self)
                if counter.name not in ("rpc_by_type", "rpc_by_user")
            )
        )


def _rpc_table(raw: Mapping[str, tuple[int, float]] | None) -> dict[str, RpcStat]:
    return {name: RpcStat(int(count), usec / _USEC) for name, (count, usec) in (raw or {}).items()}


#: The job events of slurmctld's counters, as ``gotthard_slurm_scheduler_jobs_total{event}``
#: shows them.
JOB_EVENTS = ("submitted", "started", "completed", "canceled", "failed")

#: Job states every known partition reports, at 0 when empty, so an idle cluster still has
#: ``gotthard_slurm_jobs`` series (dashboards show 0, not "No data").
JOB_STATES = (
    "pending",
    "running",
    "suspended",
    "completing",
    "completed",
    "cancelled",
    "failed",
    "timeout",
    "node_fail",
    "preempted",
    "out_of_memory",
)


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """One synthetic user-path check: ``ping`` or ``submit`` (``sbatch --test-only``)."""

    op: str
    success: bool
    duration_seconds: float
    error: str = ""


@dataclass(frozen=True, slots=True)
class Controller:
    """One slurmctld (``SlurmctldHost``) and whether it answered the ping.

    ``index`` is its position in the controller list (0 is the primary); ``role`` is
    ``primary`` or ``backup`` (Slurm's ``backup1``, ``backup2`` are all ``backup``).
    """

    hostname: str
    role: str
    index: int
    up: bool


def controller_role(mode: str, index: int) -> str:
    """``primary`` or ``backup`` from Slurm's mode text, or from the position without one.

    ``scontrol ping`` prints ``primary``, ``backup`` or ``backup1``..; newer releases may
    print ``primary/backup1``; slurmrestd's ``mode`` field is ``primary`` or ``backup``.
    """
    word = mode.strip().lower().split("/", 1)[0]
    if word.startswith("primary"):
        return "primary"
    if word.startswith("backup"):
        return "backup"
    return "primary" if index == 0 else "backup"


@dataclass(frozen=True, slots=True)
class SlurmSnapshot:
    up: bool
    job_groups: tuple[JobGroup, ...] = ()
    running_jobs: tuple[RunningJob, ...] = ()
    nodes: tuple[Node, ...] = ()
    partitions: tuple[Partition, ...] = ()
    scheduler: SchedulerStats | None = None
    probes: tuple[ProbeResult, ...] = ()
    #: Recoverable problems met while building it: malformed lines, bad fields.
    errors: int = 0
    backend: str = ""
    #: Slurm release as the backend saw it (``22.05.8``), when known.
    version: str = ""
    #: Advance reservations; None when the backend could not read them (no series).
    reservations: tuple[Reservation, ...] | None = None
    #: Every controller the ping probe saw, in ``SlurmctldHost`` order; empty without it.
    controllers: tuple[Controller, ...] = ()
    #: Every slurmdbd ``sacctmgr ping`` saw (Slurm 24.11+, the cli backend's probe);
    #: empty without it.
    dbds: tuple[Controller, ...] = ()
    #: The fair-share tree (``fairshare`` option); None when not asked for or unreadable.
    shares: tuple[Share, ...] | None = None


@dataclass(frozen=True, slots=True)
class PollOptions:
    per_user: bool = False
    job_info: bool = True
    probe: bool = True
    #: Read the fair-share tree too (needs slurmdbd and priority/multifactor).
    fairshare: bool = False


class SlurmBackend(Protocol):
    """Anything that turns one poll of the controller into a :class:`SlurmSnapshot`.

    ``poll`` raises :class:`SlurmUnavailable` when the controller cannot be reached.
    """

    name: str

    def poll(self, options: PollOptions) -> SlurmSnapshot: ...


# --- helpers shared by the backends ----------------------------------------------------

_T = TypeVar("_T")


def map_each(
    items: Iterable[Any],
    mapper: Callable[[Any], _T],
    errors: tuple[type[Exception], ...] = (Exception,),
) -> tuple[tuple[_T, ...], int]:
    """*mapper* applied to every item, and how many items it raised one of *errors* on.

    A record a backend cannot read is counted (in a snapshot's ``errors``), never fatal.
    """
    mapped: list[_T] = []
    failed = 0
    for item in items:
        try:
            mapped.append(mapper(item))
        except errors:
            failed += 1
    return tuple(mapped), failed


_REASON_DESCRIPTIONS = {
    "Nodes required for job are DOWN, DRAINED or reserved": "ReqNodeNotAvail",
    "ReqNodeNotAvail": "ReqNodeNotAvail",
}


@functools.lru_cache(maxsize=4096)
def normalize_reason(text: str | None) -> str:
    """Bound a pending reason to Slurm's short code.

    Slurm prints either a code (``Resources``, ``JobHeldUser``) or, when the
    scheduler left a description, free text (``ReqNodeNotAvail, UnavailableNodes:n1``,
    ``Nodes required for job are DOWN, ...``). Node lists and prose never reach a label.
    """
    if not text or text in ("None", "(null)", "n/a", "N/A"):
        return "None"
    for prefix, code in _REASON_DESCRIPTIONS.items():
        if text.startswith(prefix):
            return code
    head = text.split(",", 1)[0].split(":", 1)[0].strip().strip("()")
    if not head or " " in head or len(head) > 40:
        return "Other"
    return head


class JobRecord(NamedTuple):
    """One job as a per-job backend (rest, pyslurm) reads it, before aggregation.

    *cpus* and *gpus* are those of one job. ``count > 1`` is a record that stands for
    several jobs (a pending array's meta record): it is counted once per job, as
    ``squeue -r`` lists them, and gets no ``gotthard_slurm_job_info`` series.
    """

    job_id: str
    state: str
    partition: str
    account: str
    user: str
    reason: str
    cpus: int
    gpus: int
    count: int = 1


class JobTally:
    """Aggregates per-job records into a snapshot's job groups and running jobs.

    The rest and pyslurm backends see one record per job and feed it here; the cli
    backend aggregates its text rows itself and only uses :meth:`add_group`.
    """

    __slots__ = ("_groups", "_options", "running")

    def __init__(self, options: PollOptions) -> None:
        self._options = options
        self._groups: dict[tuple[str, str, str, str, str], list[int]] = {}
        self.running: list[RunningJob] = []

    def add(self, job: JobRecord) -> None:
        """One job record; see :class:`JobRecord` for what ``count > 1`` means."""
        state = job.state.lower()
        count = job.count
        self.add_group(
            state,
            job.partition,
            job.account,
            job.user,
            job.reason,
            count,
            job.cpus * count,
            job.gpus * count,
        )
        if count == 1 and state == "running" and self._options.job_info:
            self.running.append(RunningJob(job.job_id, job.user, job.account, job.partition))

    def add_group(
        self,
        state: str,
        partition: str,
        account: str,
        user: str,
        reason: str,
        count: int,
        cpus: int,
        gpus: int,
    ) -> None:
        reason = normalize_reason(reason) if state == "pending" else ""
        key = (state, partition, account, user if self._options.per_user else "", reason)
        totals = self._groups.get(key)
        if totals is None:
            self._groups[key] = [count, cpus, gpus]
        else:
            totals[0] += count
            totals[1] += cpus
            totals[2] += gpus

    def groups(self) -> tuple[JobGroup, ...]:
        return tuple(
            JobGroup(state, partition, account, reason, user, count, cpus, gpus)
            for (state, partition, account, user, reason), (count, cpus, gpus) in sorted(
                self._groups.items()
            )
        )


def unique_shares(shares: Iterable[Share]) -> tuple[Share, ...]:
    """*shares* sorted by account and user, the first of each pair kept (an association
    per partition repeats its account and user)."""
    seen: dict[tuple[str, str], Share] = {}
    for share in shares:
        seen.setdefault((share.account, share.user), share)
    return tuple(seen[key] for key in sorted(seen))


def partition_names(nodes: Iterable[Node], partitions: Iterable[Partition]) -> list[str]:
    names = {p.name for p in partitions}
    for node in nodes:
        names.update(node.partitions)
    return sorted(names)


@dataclass(slots=True)
class PartitionSums:
    """A partition's resources summed over its nodes."""

    nodes: int = 0
    cpus_alloc: int = 0
    cpus_idle: int = 0
    cpus_other: int = 0
    cpus_total: int = 0
    gpus_alloc: int = 0
    gpus_total: int = 0
    memory_alloc: int = 0
    #: Free memory of nodes that can run jobs: a down or drained node's memory is not idle.
    memory_idle: int = 0
    memory_total: int = 0


def partition_sums(snapshot: SlurmSnapshot) -> dict[str, PartitionSums]:
    """Every known partition (sorted by name) with its nodes' resources summed."""
    sums = {name: PartitionSums() for name in partition_names(snapshot.nodes, snapshot.partitions)}
    for node in snapshot.nodes:
        available = not node.unavailable
        free_memory = max(node.memory_total_bytes - node.memory_alloc_bytes, 0)
        for partition in node.partitions:
            row = sums[partition]
            row.nodes += 1
            row.cpus_alloc += node.cpus_alloc
            row.cpus_idle += node.cpus_idle
            row.cpus_other += node.cpus_other
            row.cpus_total += node.cpus_total
            row.gpus_alloc += node.gpus_alloc
            row.gpus_total += node.gpus_total
            row.memory_alloc += node.memory_alloc_bytes
            row.memory_total += node.memory_total_bytes
            if available:
                row.memory_idle += free_memory
    return sums


def partition_total_mismatches(snapshot: SlurmSnapshot) -> list[str]:
    """Partitions whose controller totals differ from the sum over their nodes, described.

    The exported totals are the controller's; a difference means the node listing and the
    partition record disagree (nodes listed in no partition, a stale read) and is logged.
    """
    sums = partition_sums(snapshot)
    found = []
    for partition in snapshot.partitions:
        row = sums.get(partition.name)
        if row is None:
            continue
        for what, reported, summed in (
            ("nodes", partition.total_nodes, row.nodes),
            ("cpus", partition.total_cpus, row.cpus_total),
        ):
            if reported is not None and reported != summed:
                found.append(
                    f"partition {partition.name}: {reported} {what} by its record, "
                    f"{summed} summed over its nodes"
                )
    return found
