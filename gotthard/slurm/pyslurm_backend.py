"""Slurm backend on pyslurm 25.11 (libslurm through Cython), used only where it imports.

pyslurm is built against one Slurm major release and refuses any other, so this backend
is chosen only when ``import pyslurm`` works. It reads the controller with the same RPCs
``squeue``, ``sinfo``, ``sdiag`` and ``scontrol ping`` use, without fork/exec or text
parsing, and fills the same :class:`SlurmSnapshot` as the cli and rest backends.

Every entry point and attribute this module reads is listed in the constants below.
``tests/exporters/test_slurm_pyslurm_contract.py`` checks each of them against the pyslurm
25.11.2 sources, and ``tests/exporters/test_slurm_pyslurm.py`` runs the mapping on strict
fakes built from the same lists, so the code cannot read anything the contract does not cover.

What pyslurm 25.11 returns (read from its sources; see docs/pyslurm.md):

* ``Job.state`` ``str`` (``RUNNING``), ``Job.state_reason`` ``str`` (code or description),
  ``Job.account``/``partition`` ``str | None``, ``Job.user_name`` ``str | None`` (the uid
  as text when it has no passwd entry), ``Job.cpus`` ``int`` (1 when unset),
  ``Job.num_nodes``/``ntasks``/``sockets_per_node`` ``int | None``;
  ``Job.array_id``/``array_task_id`` ``int | None`` where **0 also reads as None**, and
  ``Job.array_tasks_waiting`` ``str | None`` (``"0-3"``) on a pending array's meta record.
* ``Job.gpus`` ``dict[str, GPU]`` (``{"gpu": GPU, "gpu:a100": GPU}``, ``GPU.count``
  ``int``) from the allocated TRES of a running job, the requested TRES otherwise; it is
  empty unless ``AccountingStorageTRES`` tracks ``gres/gpu``.
* ``Job.gres_per_node`` ``dict[str, int]`` parsed from ``tres_per_node``; keys keep a
  ``gres/`` prefix on 23.02+ strings (``{"gres/gpu:a100": 2}``), lose ``gres:`` on older.
* ``Job.tres_per_job``/``tres_per_task``/``tres_per_socket`` ``TrackableResources | None``
  (``.gres`` is a ``dict[str, GPU]``); pyslurm parses them as ``key=value`` lists, so
  Slurm's ``gres/gpu:2`` form comes back as ``None``.
* ``Node.state`` ``str`` (``IDLE+DRAIN``, ``MIXED``, ``DOWN+NOT_RESPONDING``),
  ``Node.total_cpus``/``allocated_cpus``/``idle_cpus`` ``int`` (idle = effective - alloc),
  ``Node.real_memory`` ``int | None`` and ``allocated_memory`` ``int``, both MiB,
  ``Node.configured_gres`` ``dict`` (``{"gpu:a100": 4}``), ``Node.allocated_gres``
  ``dict`` from the node's allocated TRES (``{"gpu": 1, "gpu:a100": 1}``; empty unless
  ``gres/gpu`` is tracked), ``Node.partitions`` ``list[str] | None``.
* ``Partition.state`` ``str`` (``UP``), ``Partition.is_default`` ``bool``.
* ``Reservation.is_active`` ``bool`` (start <= now <= end), ``Reservation.node_count``
  ``int | None``, ``Reservation.flags`` a ``ReservationFlags`` (``enum.Flag``) built from
  the raw bits, which **raises ValueError** on bits it has no member for (``TIME_FLOAT``,
  ``REPLACE``, ...), ``Reservation.reoccurrence`` a ``str`` enum (``NO``, ``DAILY``, ...)
  whose bit pyslurm takes out of ``flags``.
* ``slurmctld.Statistics``: plain ``int`` counters; cycle times in microseconds;
  ``rpcs_by_type``/``rpcs_by_user`` are dicts keyed by RPC name / user name (uid as text
  when unknown) of objects with ``count`` and ``time`` (total, microseconds).
"""

from __future__ import annotations

import importlib
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any

from gotthard.exporters.slurm import snapshot
from gotthard.slurm_state import cpus_idle_other, normalize

#: The pyslurm series this backend is written and contract-tested against.
PYSLURM_SERIES = "25.11"

# --- entry points, as dotted paths below the ``pyslurm`` module -------------------------

JOBS_LOAD = "Jobs.load"
NODES_LOAD = "Nodes.load"
PARTITIONS_LOAD = "Partitions.load"
STATISTICS_LOAD = "slurmctld.Statistics.load"
RESERVATIONS_LOAD = "Reservations.load"
PING = "slurmctld.ping_primary"
CONFIG_LOAD = "slurmctld.Config.load"
#: Every callable this backend calls on the module (each without arguments).
ENTRY_POINTS = (
    JOBS_LOAD,
    NODES_LOAD,
    PARTITIONS_LOAD,
    STATISTICS_LOAD,
    RESERVATIONS_LOAD,
    PING,
    CONFIG_LOAD,
)
#: The exception pyslurm raises when an RPC to slurmctld fails.
ERROR_CLASS = "RPCError"
#: Module attributes read directly (besides the entry points).
MODULE_ATTRIBUTES = (ERROR_CLASS,)
#: Jobs/Nodes/Partitions/Reservations are ``MultiClusterMap`` collections, read this way.
COLLECTION_METHOD = "values"

# --- attributes read on each object, by pyslurm class ----------------------------------

#: ``pyslurm.Job``
JOB_ATTRIBUTES = (
    "id",
    "array_id",
    "array_task_id",
    "array_tasks_waiting",
    "state",
    "state_reason",
    "partition",
    "account",
    "user_name",
    "cpus",
    "num_nodes",
    "ntasks",
    "sockets_per_node",
    "gpus",
    "tres_per_job",
    "gres_per_node",
    "tres_per_task",
    "tres_per_socket",
)
#: ``pyslurm.Node``
NODE_ATTRIBUTES = (
    "name",
    "state",
    "partitions",
    "total_cpus",
    "allocated_cpus",
    "idle_cpus",
    "real_memory",
    "allocated_memory",
    "configured_gres",
    "allocated_gres",
    "reason",
)
#: ``pyslurm.Partition``
PARTITION_ATTRIBUTES = ("name", "state", "is_default", "total_cpus", "total_nodes")
#: ``pyslurm.Reservation``
RESERVATION_ATTRIBUTES = ("name", "is_active", "partition", "flags", "reoccurrence", "node_count")
#: ``pyslurm.ReservationFlags`` members by the name scontrol prints for the same bit.
RESERVATION_FLAG_NAMES: Mapping[str, str] = {
    "MAINTENANCE": "MAINT",
    "MAGNETIC": "MAGNETIC",
    "FLEX": "FLEX",
    "IGNORE_RUNNING_JOBS": "IGNORE_JOBS",
    "ANY_NODES": "ANY_NODES",
    "STATIC_NODES": "STATIC",
    "PARTITION_NODES_ONLY": "PART_NODES",
    "USER_DELETION": "USER_DELETE",
    "PURGE": "PURGE_COMP",
    "SPECIFIC_NODES": "SPEC_NODES",
    "NO_JOB_HOLD_AFTER_END": "NO_HOLD_JOBS_AFTER_END",
    "OVERLAP": "OVERLAP",
    "ALL_NODES": "ALL_NODES",
    "SKIP": "SKIP",
    "SCHED_FAILED": "SCHED_FAILED",
}
#: ``Reservation.flags`` when pyslurm cannot build them (a bit it has no member for).
UNREADABLE_FLAGS = "unknown"
#: ``pyslurm.slurmctld.Statistics``: the scheduler counters, then the RPC tables
STATISTICS_ATTRIBUTES = (
    *(counter.pyslurm_attribute for counter in snapshot.SCHEDULER_COUNTERS),
    "rpcs_by_type",
    "rpcs_by_user",
)
#: ``pyslurm.slurmctld.RPCType`` and ``pyslurm.slurmctld.RPCUser`` (values of the two dicts)
RPC_ATTRIBUTES = ("count", "time")
#: ``pyslurm.db.GPU`` (values of ``Job.gpus`` and of ``TrackableResources.gres``)
GPU_ATTRIBUTES = ("count",)
#: ``pyslurm.db.TrackableResources`` (``Job.tres_per_job/task/socket``)
TRES_ATTRIBUTES = ("gres",)
#: ``pyslurm.slurmctld.Config``
CONFIG_ATTRIBUTES = ("version",)

_MIB = 1024 * 1024
_LEADING_DIGITS = re.compile(r"\d+")
_ARRAY_RANGE = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")


class PyslurmBackend:
    """Polls slurmctld through pyslurm 25.11.

    ``poll`` raises :class:`SlurmUnavailable` when jobs, nodes or partitions cannot be
    loaded (``pyslurm.RPCError`` or anything else). Statistics that cannot be loaded, a
    failed ping and objects that cannot be mapped are counted in ``errors`` or reported
    as a failed probe; the snapshot is still ``up``.
    """

    name = "pyslurm"

    def __init__(self, module: Any | None = None) -> None:
        if module is None:
            try:
                module = importlib.import_module("pyslurm")
            except Exception as exc:  # ImportError, or libslurm failing to load/init
                raise snapshot.SlurmUnavailable(
                    f"pyslurm is not importable: {type(exc).__name__}: {exc}"
                ) from exc
        self._module: Any = module
        self._rpc_error: type[BaseException] = getattr(module, ERROR_CLASS)
        self._version = ""
        self._version_tried = False

    # --- poll ---------------------------------------------------------------------------

    def poll(self, options: snapshot.PollOptions) -> snapshot.SlurmSnapshot:
        probes = (self._ping(),) if options.probe else ()
        jobs = self._load(JOBS_LOAD)
        nodes = self._load(NODES_LOAD)
        partitions = self._load(PARTITIONS_LOAD)
        errors = 0
        # Like a failed sdiag in the cli backend: no scheduler stats, one error, still up.
        statistics: Any = None
        try:
            statistics = self._resolve(STATISTICS_LOAD)()
        except Exception:
            errors += 1

        records, job_errors = snapshot.map_each(_values(jobs), lambda job: _map_job(job, options))
        tally = snapshot.JobTally(options)
        for record in records:
            tally.add(record)
        node_list, node_errors = snapshot.map_each(_values(nodes), _map_node)
        partition_list, partition_errors = snapshot.map_each(_values(partitions), _map_partition)
        errors += job_errors + node_errors + partition_errors
        scheduler: snapshot.SchedulerStats | None = None
        if statistics is not None:
            try:
                scheduler = _map_statistics(statistics)
            except Exception:
                errors += 1
        # Like scontrol show reservation in the cli backend: a failure costs one error and
        # the reservation series, not the poll.
        reservations: tuple[snapshot.Reservation, ...] | None = None
        try:
            loaded = self._resolve(RESERVATIONS_LOAD)()
        except Exception:
            errors += 1
        else:
            mapped, reservation_errors = snapshot.map_each(_values(loaded), _map_reservation)
            reservations = tuple(sorted(mapped, key=lambda r: r.name))
            errors += reservation_errors

        return snapshot.SlurmSnapshot(
            up=True,
            job_groups=tally.groups(),
            running_jobs=tuple(tally.running),
            nodes=tuple(sorted(node_list, key=lambda n: n.name)),
            partitions=tuple(sorted(partition_list, key=lambda p: p.name)),
            scheduler=scheduler,
            probes=probes,
            errors=errors,
            backend=self.name,
            version=self._slurm_version(),
            reservations=reservations,
        )

    # --- calls into pyslurm -------------------------------------------------------------

    def _resolve(self, path: str) -> Any:
        target: Any = self._module
        for part in path.split("."):
            target = getattr(target, part)
        return target

    def _load(self, path: str) -> Any:
        try:
            return self._resolve(path)()
        except self._rpc_error as exc:
            raise snapshot.SlurmUnavailable(f"pyslurm {path}: slurmctld RPC failed: {exc}") from exc
        except Exception as exc:
            raise snapshot.SlurmUnavailable(
                f"pyslurm {path} failed: {type(exc).__name__}: {exc}"
            ) from exc

    def _ping(self) -> snapshot.ProbeResult:
        start = time.perf_counter()
        try:
            self._resolve(PING)()
        except Exception as exc:
            return snapshot.ProbeResult("ping", False, time.perf_counter() - start, _describe(exc))
        return snapshot.ProbeResult("ping", True, time.perf_counter() - start)

    def _slurm_version(self) -> str:
        """The controller's release (``slurmctld.Config.version``), asked once per backend."""
        if not self._version_tried:
            self._version_tried = True
            try:
                self._version = _text(self._resolve(CONFIG_LOAD)().version)
            except Exception:
                self._version = ""
        return self._version


# --- mapping (module-level, pure: tested on strict fakes) ------------------------------


def _values(collection: Any) -> Iterable[Any]:
    return collection.values()


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _int(value: Any, default: int = 0) -> int:
    """pyslurm's ``int | None`` (None for unset, NO_VAL and often 0) as an int."""
    if value is None:
        return default
    return int(value)


def _map_job(job: Any, options: snapshot.PollOptions) -> snapshot.JobRecord:
    state = _text(job.state).lower() or "unknown"
    job_id, count = _job_identity(job)
    partition = _text(job.partition)
    account = _text(job.account)
    # user_name resolves the uid through passwd: only ask when a label or job_info needs it.
    wants_user = options.per_user or (options.job_info and state == "running")
    user = _text(job.user_name) if wants_user else ""
    reason = _text(job.state_reason)
    cpus = _int(job.cpus)
    gpus = _job_gpus(job)
    # A pending array's meta record stands for every task not yet split off (count > 1);
    # squeue -r (the cli backend) prints one line per task, so it counts the same way.
    return snapshot.JobRecord(job_id, state, partition, account, user, reason, cpus, gpus, count)


def _job_identity(job: Any) -> tuple[str, int]:
    """``(job id as squeue -r prints it, number of jobs the record stands for)``."""
    array_id = job.array_id
    if array_id is None:
        return str(job.id), 1
    task_id = job.array_task_id
    if task_id is not None:
        return f"{array_id}_{task_id}", 1
    # pyslurm reads task id 0 as None, like the unset id of a meta record; only the meta
    # record has tasks waiting.
    waiting = _text(job.array_tasks_waiting)
    if not waiting:
        return f"{array_id}_0", 1
    return f"{array_id}_[{waiting}]", _count_array_tasks(waiting)


def _count_array_tasks(spec: str) -> int:
    """Tasks in an array range string: ``0-3`` → 4, ``1,3,5-9:2`` → 5; 1 when unreadable."""
    total = 0
    for item in spec.split("%", 1)[0].split(","):
        match = _ARRAY_RANGE.match(item.strip())
        if not match:
            return 1
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) else first
        step = int(match.group(3)) if match.group(3) else 1
        if last < first or step < 1:
            return 1
        total += (last - first) // step + 1
    return max(total, 1)


def _job_gpus(job: Any) -> int:
    """GPUs of one job record: its TRES total, else what it asked for per job/node/task/socket."""
    total = _gpu_total(job.gpus)
    if total:
        return total
    total = _gpu_total(job.tres_per_job)
    if total:
        return total
    nodes = max(_int(job.num_nodes, 1), 1)
    per_node = _gpu_total(job.gres_per_node)
    if per_node:
        return per_node * nodes
    per_task = _gpu_total(job.tres_per_task)
    if per_task:
        return per_task * max(_int(job.ntasks, 1), 1)
    per_socket = _gpu_total(job.tres_per_socket)
    if per_socket:
        return per_socket * max(_int(job.sockets_per_node, 1), 1) * nodes
    return 0


def _gpu_total(value: Any) -> int:
    """GPU count in any form pyslurm hands out.

    ``None``; a GRES/TRES string; a dict keyed ``gpu``, ``gpu:<type>``, ``gres/gpu[:type]``
    whose values are ints, digit strings, ``{"count": n, "indexes": ...}`` or ``GPU``
    objects; or a ``TrackableResources`` (its ``gres`` dict). As with
    :func:`~gotthard.exporters.slurm.snapshot.gpus_from_tres`, an untyped total wins over
    typed entries, which are summed only when no untyped one is present.
    """
    if value is None:
        return 0
    if isinstance(value, str):
        return snapshot.gpus_from_tres(value)
    if not isinstance(value, Mapping):
        return _gpu_total(value.gres)
    untyped = 0
    typed = 0
    for key, item in value.items():
        name = str(key)
        for prefix in ("gres/", "gres:"):
            name = name.removeprefix(prefix)
        if name == "gpu":
            untyped += _gres_count(item)
        elif name.startswith("gpu:"):
            typed += _gres_count(item)
    return untyped or typed


def _gres_count(item: Any) -> int:
    if item is None:
        return 0
    if isinstance(item, int):
        return item
    if isinstance(item, str):
        digits = _LEADING_DIGITS.match(item.strip())
        return int(digits.group()) if digits else 0
    if isinstance(item, Mapping):
        return int(item.get("count") or 0)
    return int(item.count)


def _map_node(node: Any) -> snapshot.Node:
    text = _text(node.state)
    state, flags = normalize(text) if text.strip() else ("unknown", ())
    total = _int(node.total_cpus)
    alloc = _int(node.allocated_cpus)
    idle, other = cpus_idle_other(state, flags, total=total, alloc=alloc, idle=_int(node.idle_cpus))
    return snapshot.Node(
        name=_text(node.name),
        state=state,
        flags=flags,
        partitions=tuple(node.partitions or ()),
        cpus_alloc=alloc,
        cpus_idle=idle,
        cpus_other=other,
        cpus_total=total,
        memory_total_bytes=_int(node.real_memory) * _MIB,
        memory_alloc_bytes=_int(node.allocated_memory) * _MIB,
        gpus_total=_gpu_total(node.configured_gres),
        gpus_alloc=_gpu_total(node.allocated_gres),
        reason=_text(node.reason),
    )


def _map_partition(partition: Any) -> snapshot.Partition:
    return snapshot.Partition(
        name=_text(partition.name),
        state=_text(partition.state).lower() or "unknown",
        is_default=bool(partition.is_default),
        total_cpus=_int(partition.total_cpus),
        total_nodes=_int(partition.total_nodes),
    )


def _map_reservation(reservation: Any) -> snapshot.Reservation:
    name = _text(reservation.name)
    if not name:
        raise ValueError("reservation without a name")
    return snapshot.Reservation(
        name=name,
        state="active" if reservation.is_active else "inactive",
        partition=_text(reservation.partition),
        flags=_reservation_flags(reservation),
        nodes=_int(reservation.node_count),
    )


def _reservation_flags(reservation: Any) -> str:
    """The flags as the cli backend shows them: scontrol's names, lower-case, its order."""
    try:
        flags = reservation.flags
    except ValueError:
        return UNREADABLE_FLAGS
    names = [RESERVATION_FLAG_NAMES.get(m.name, m.name) for m in type(flags) if m in flags]
    reoccurrence = _text(reservation.reoccurrence)
    if reoccurrence and reoccurrence != "NO":
        names.append(reoccurrence)
    return snapshot.reservation_flags(names)


def _rpc_stats(by_key: Mapping[Any, Any] | None) -> dict[str, tuple[int, float]]:
    """``(count, total microseconds)`` per RPC type or user."""
    return {str(key): (_int(stat.count), _int(stat.time)) for key, stat in (by_key or {}).items()}


def _map_statistics(stats: Any) -> snapshot.SchedulerStats:
    return snapshot.SchedulerStats.from_counters(
        {
            counter.field: _int(getattr(stats, counter.pyslurm_attribute))
            for counter in snapshot.SCHEDULER_COUNTERS
        },
        rpc_by_type=_rpc_stats(stats.rpcs_by_type),
        rpc_by_user=_rpc_stats(stats.rpcs_by_user),
    )
