"""Slurm backend on pyslurm 25.11 (libslurm through Cython), used only where it imports.

pyslurm is built against one Slurm major release and refuses any other, so this backend
is chosen only when ``import pyslurm`` works. It reads the controller with the same RPCs
``squeue``, ``sinfo``, ``sdiag`` and ``scontrol ping`` use, without fork/exec or text
parsing, and fills the same :class:`SlurmSnapshot` as the cli and rest backends.

Every entry point this module calls is listed in the constants below, and every attribute
it reads in the ``*_ATTRIBUTES`` constants, taken from the field table
(:mod:`gotthard.slurm.fields`). ``tests/exporters/test_slurm_pyslurm_contract.py`` checks
each of them against the pyslurm 25.11.2 sources, and ``tests/exporters/test_slurm_pyslurm.py``
runs the mapping on strict fakes built from the same lists, so the code cannot read
anything the contract does not cover.

The fair-share tree (``--slurm.fairshare``) is not read: pyslurm 25.11 binds no call of
:data:`SHARES_RPC` (what ``sshare`` and slurmrestd's ``/shares`` use), and its
``db.Association`` carries shares but no usage or factor. The snapshot's ``shares`` stay
None (no series); the contract test fails once a pyslurm release binds it.

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
import time
from collections.abc import Iterable, Mapping
from typing import Any

from gotthard.slurm import fields, snapshot
from gotthard.slurm.values import obj_int, obj_text

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
#: libslurm's call for the fair-share tree (REQUEST_SHARE_INFO), which pyslurm 25.11 lacks.
SHARES_RPC = "slurm_associations_get_shares"
#: The exception pyslurm raises when an RPC to slurmctld fails.
ERROR_CLASS = "RPCError"
#: Module attributes read directly (besides the entry points).
MODULE_ATTRIBUTES = (ERROR_CLASS,)
#: Jobs/Nodes/Partitions/Reservations are ``MultiClusterMap`` collections, read this way.
COLLECTION_METHOD = "values"

# --- attributes read on each object, by pyslurm class ----------------------------------

#: ``pyslurm.Job``
JOB_ATTRIBUTES = fields.pyslurm_attributes(fields.JOB_FIELDS)
#: ``pyslurm.Node``
NODE_ATTRIBUTES = fields.pyslurm_attributes(fields.NODE_FIELDS)
#: ``pyslurm.Partition``
PARTITION_ATTRIBUTES = fields.pyslurm_attributes(fields.PARTITION_FIELDS)
#: ``pyslurm.Reservation``
RESERVATION_ATTRIBUTES = fields.pyslurm_attributes(fields.RESERVATION_FIELDS)
#: ``pyslurm.slurmctld.Statistics``: the scheduler counters, then the RPC tables
STATISTICS_ATTRIBUTES = (
    *(counter.pyslurm_attribute for counter in fields.SCHEDULER_COUNTERS),
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

_JOBS = fields.RecordReader(fields.JOB_FIELDS, "pyslurm")
_NODES = fields.RecordReader(fields.NODE_FIELDS, "pyslurm")
_PARTITIONS = fields.RecordReader(fields.PARTITION_FIELDS, "pyslurm")
_RESERVATIONS = fields.RecordReader(fields.RESERVATION_FIELDS, "pyslurm")


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

        records, job_errors = snapshot.map_each(
            _values(jobs), lambda job: fields.job_from(_JOBS.values(job), options)
        )
        tally = snapshot.JobTally(options)
        for record in records:
            tally.add(record)
        node_list, node_errors = snapshot.map_each(
            _values(nodes), lambda node: fields.node_from(_NODES.values(node))
        )
        partition_list, partition_errors = snapshot.map_each(
            _values(partitions),
            lambda partition: fields.partition_from(_PARTITIONS.values(partition)),
        )
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
            mapped, reservation_errors = snapshot.map_each(
                _values(loaded),
                lambda record: fields.reservation_from(_RESERVATIONS.values(record)),
            )
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
                self._version = obj_text(self._resolve(CONFIG_LOAD)().version)
            except Exception:
                self._version = ""
        return self._version


# --- mapping (module-level, pure: tested on strict fakes) ------------------------------


def _values(collection: Any) -> Iterable[Any]:
    return collection.values()


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _rpc_stats(by_key: Mapping[Any, Any] | None) -> dict[str, tuple[int, float]]:
    """``(count, total microseconds)`` per RPC type or user."""
    return {
        str(key): (obj_int(stat.count), obj_int(stat.time)) for key, stat in (by_key or {}).items()
    }


def _map_statistics(stats: Any) -> snapshot.SchedulerStats:
    return snapshot.SchedulerStats.from_counters(
        {
            counter.field: obj_int(getattr(stats, counter.pyslurm_attribute))
            for counter in fields.SCHEDULER_COUNTERS
        },
        rpc_by_type=_rpc_stats(stats.rpcs_by_type),
        rpc_by_user=_rpc_stats(stats.rpcs_by_user),
    )
