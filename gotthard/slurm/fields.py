"""The one table of the Slurm fields Gotthard reads, and how each backend gets each one.

A row (:class:`Field`) names a field of the typed snapshot (:mod:`gotthard.slurm.snapshot`),
its :class:`~gotthard.slurm.values.Kind` (its type, and how each source spells it) and
where each backend reads it:

* ``cli``: the column of the command's narrow output: a ``sinfo -O``/``squeue -O`` field
  (``CPUsState/1``: the second ``/``-separated part of it), a ``KEY`` of
  ``scontrol show reservation -o``, a part of the ``scontrol ping`` line;
* ``rest``: the keys of the slurmrestd record, tried in order (names of newer OpenAPI
  versions next to v0.0.38's, ``a.b`` for a nested key), or a :class:`Derived` function;
* ``pyslurm``: the attribute of the pyslurm 25.11 object, or a :class:`Derived` function.

``None`` means the backend has no such field; the builders (:func:`node_from`,
:func:`job_from`, ...) then derive it (a node's "other" CPUs) or leave it unset. The
backends read every table the same way (:class:`TextReader` for the commands'
text, :class:`RecordReader` for slurmrestd's JSON and pyslurm's objects); only the
builders here know how fields combine into a record. Adding a node field means one row
here, one field of :class:`~gotthard.slurm.snapshot.Node`, and its rendering.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from gotthard.slurm import values as v
from gotthard.slurm.snapshot import (
    JOB_EVENTS,
    Controller,
    JobRecord,
    Node,
    Partition,
    PollOptions,
    Reservation,
    controller_role,
)
from gotthard.slurm_state import cpus_idle_other

Backend = Literal["rest", "pyslurm"]


@dataclass(frozen=True, slots=True)
class Derived:
    """A field a backend computes from several keys or attributes of its record.

    ``function(record, context)`` returns the raw value the field's kind then reads;
    *reads* lists every key or attribute it reads (pyslurm's are contract-tested).
    ``context`` holds what the poll knows besides the record (``now``).
    """

    function: Callable[[Any, Mapping[str, Any]], Any]
    reads: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    kind: v.Kind
    cli: str | None
    rest: tuple[str, ...] | Derived | None
    pyslurm: str | Derived | None
    #: A record without it (or with it empty) cannot be read: an error, not a record.
    required: bool = False
    #: Read only when a builder asks for it (pyslurm resolves a job's user through passwd).
    lazy: bool = False

    @property
    def column(self) -> str:
        """The ``cli`` column without its part: ``CPUsState`` of ``CPUsState/1``."""
        return (self.cli or "").partition("/")[0]

    @property
    def part(self) -> int:
        """Which ``/``-separated part of the column holds the field; -1 for all of it."""
        _, sep, part = (self.cli or "").partition("/")
        return int(part) if sep else -1


# --- slurmrestd's irregular fields --------------------------------------------------------


def _rest_node_state(record: Mapping[str, Any], context: Mapping[str, Any]) -> list[str]:
    # v0.0.38: "state": "idle" and "state_flags": ["DRAIN"]; v0.0.39+: "state": [...]
    return v.json_names(record.get("state")) + v.json_names(record.get("state_flags"))


def _rest_job_cpus(record: Mapping[str, Any], context: Mapping[str, Any]) -> int:
    """``cpus``, or for a job that ended before it ever ran (``cpus: null`` in 22.05) what
    it asked for, as squeue's %C shows: ``cpu=`` of tres_req_str, else the per-node minimum."""
    cpus = v.json_int(record.get("cpus"))
    if cpus:
        return cpus
    for item in v.json_text(record.get("tres_req_str")).split(","):
        key, _, count = item.partition("=")
        if key == "cpu" and count.isdigit():
            return int(count)
    nodes = max(v.json_int(record.get("node_count"), 1), 1)
    return v.json_int(record.get("minimum_cpus_per_node")) * nodes


def _rest_job_gpus_held(record: Mapping[str, Any], context: Mapping[str, Any]) -> int:
    # Without AccountingStorageTRES=gres/gpu (no slurmdbd) the allocation only shows up
    # per node in gres_detail: ["gpu:1(IDX:0)", ...].
    held = sum(v.gpus_from_tres(entry) for entry in v.json_entries(record.get("gres_detail")))
    return held or v.gpus_from_tres(v.json_text(record.get("tres_alloc_str")))


def _rest_partition_default(record: Mapping[str, Any], context: Mapping[str, Any]) -> bool:
    # v0.0.38: flags ["default"]; v0.0.40+ do not say, unless a default field does
    flags = {flag.lower() for flag in v.json_names(record.get("flags"))}
    nested = record.get("partition")
    nested_default = isinstance(nested, Mapping) and nested.get("default") is True
    return "default" in flags or record.get("default") is True or nested_default


def _rest_reservation_state(record: Mapping[str, Any], context: Mapping[str, Any]) -> str:
    # slurmrestd gives no state: active between its start and end, as scontrol shows it
    now = context["now"]
    start = v.json_number(record.get("start_time"))
    end = v.json_number(record.get("end_time"))
    active = start is not None and start <= now and (end is None or now < end)
    return "active" if active else "inactive"


def rest_ping_answer(entry: Mapping[str, Any]) -> str:
    """``UP``, ``DOWN`` or ``""``: one ``/ping`` entry's answer in either version's field."""
    return v.json_text(entry.get("pinged", entry.get("ping"))).upper()


def rest_controller_up(entry: Mapping[str, Any], context: Mapping[str, Any]) -> bool:
    return entry.get("responding") is True or rest_ping_answer(entry) == "UP"


def _rest_controller_mode(entry: Mapping[str, Any], context: Mapping[str, Any]) -> str:
    # v0.0.38: "mode": "primary"; v0.0.41+ also a "primary" boolean
    mode = v.json_text(entry.get("mode"))
    if not mode and isinstance(entry.get("primary"), bool):
        mode = "primary" if entry["primary"] else "backup"
    return mode


# --- pyslurm's irregular fields ------------------------------------------------------------

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


def _pyslurm_reservation_flags(reservation: Any, context: Mapping[str, Any]) -> list[str]:
    """scontrol's names for the flags, and the reoccurrence pyslurm takes out of them."""
    try:
        flags = reservation.flags
    except ValueError:  # pyslurm's strict enum.Flag refusing a bit it has no member for
        return [UNREADABLE_FLAGS]
    names = [RESERVATION_FLAG_NAMES.get(m.name, m.name) for m in type(flags) if m in flags]
    reoccurrence = v.obj_text(reservation.reoccurrence)
    if reoccurrence and reoccurrence != "NO":
        names.append(reoccurrence)
    return names


# --- the table ------------------------------------------------------------------------------

_REST_NODE_STATE = Derived(_rest_node_state, ("state", "state_flags"))
_REST_JOB_CPUS = Derived(
    _rest_job_cpus, ("cpus", "tres_req_str", "minimum_cpus_per_node", "node_count")
)
_REST_JOB_GPUS_HELD = Derived(_rest_job_gpus_held, ("gres_detail", "tres_alloc_str"))
_REST_PARTITION_DEFAULT = Derived(
    _rest_partition_default, ("flags", "default", "partition.default")
)
_REST_RESERVATION_STATE = Derived(_rest_reservation_state, ("start_time", "end_time"))
_PYSLURM_RESERVATION_FLAGS = Derived(_pyslurm_reservation_flags, ("flags", "reoccurrence"))
_REST_CONTROLLER_MODE = Derived(_rest_controller_mode, ("mode", "primary"))
_REST_CONTROLLER_UP = Derived(rest_controller_up, ("responding", "pinged", "ping"))

#: Node fields: ``sinfo -N -O`` (one row per node and partition), ``/nodes``, ``Node``.
#: The columns keep this order: name and partition first (they vary per row), the reason
#: last (free text, the only column that may hold the separator).
NODE_FIELDS = (
    Field("name", v.TEXT, "NodeList", ("name",), "name", required=True),
    Field("partitions", v.NAMES, "Partition", ("partitions",), "partitions"),
    Field("state", v.NODE_STATE, "StateComplete", _REST_NODE_STATE, "state"),
    Field("cpus_alloc", v.COUNT, "CPUsState/0", ("alloc_cpus",), "allocated_cpus"),
    Field("cpus_idle", v.OPTIONAL_COUNT, "CPUsState/1", ("idle_cpus",), "idle_cpus"),
    Field("cpus_other", v.OPTIONAL_COUNT, "CPUsState/2", None, None),
    Field("cpus_total", v.COUNT, "CPUsState/3", ("cpus",), "total_cpus"),
    Field("memory_total_bytes", v.MEBIBYTES, "Memory", ("real_memory",), "real_memory"),
    Field("memory_alloc_bytes", v.MEBIBYTES, "AllocMem", ("alloc_memory",), "allocated_memory"),
    Field("gpus_total", v.GPUS, "Gres", ("gres",), "configured_gres"),
    Field("gpus_alloc", v.GPUS, "GresUsed", ("gres_used",), "allocated_gres"),
    Field("cpu_load", v.LOAD, "CPUsLoad", ("cpu_load",), "cpu_load"),
    Field("reason", v.TEXT, "Reason", ("reason",), "reason"),
)  # fmt: skip

#: Job fields: ``squeue -O`` (one row per job, array tasks expanded), ``/jobs``, ``Job``.
#: The columns keep this order: the user and the job id last, so that the cli backend
#: groups rows that differ only in them before reading any field.
JOB_FIELDS = (
    Field("state", v.JOB_STATE, "State", ("job_state",), "state"),
    Field("partition", v.TEXT, "Partition", ("partition",), "partition"),
    Field("account", v.TEXT, "Account", ("account",), "account"),
    Field("cpus", v.COUNT, "NumCPUs", _REST_JOB_CPUS, "cpus"),
    Field("nodes", v.COUNT, "NumNodes", ("node_count",), "num_nodes"),
    Field("tasks", v.COUNT, "NumTasks", ("tasks",), "ntasks"),
    Field("gpus_per_job", v.GPUS, "tres-per-job", ("tres_per_job",), "tres_per_job"),
    Field("gpus_per_node", v.GPUS, "tres-per-node", ("tres_per_node",), "gres_per_node"),
    Field("gpus_per_task", v.GPUS, "tres-per-task", ("tres_per_task",), "tres_per_task"),
    Field("gpus_per_socket", v.GPUS, "tres-per-socket", ("tres_per_socket",), "tres_per_socket"),
    Field("reason", v.VERBATIM, "Reason", ("state_reason",), "state_reason"),
    Field("user", v.TEXT, "UserName", ("user_name", "user_id"), "user_name", lazy=True),
    Field("job_id", v.JOB_ID, "JobID", ("job_id",), "id", required=True),
    # what squeue -r expands, the per-job backends read from the record itself
    Field("sockets", v.COUNT, None, ("sockets_per_node",), "sockets_per_node"),
    Field("gpus_held", v.GPUS, None, _REST_JOB_GPUS_HELD, "gpus", lazy=True),
    Field("array_job_id", v.COUNT, None, ("array_job_id",), "array_id"),
    Field("array_task_id", v.OPTIONAL_COUNT, None, ("array_task_id",), "array_task_id"),
    Field("array_tasks", v.TEXT, None, ("array_task_string",), "array_tasks_waiting"),
)  # fmt: skip

#: Partition fields: ``sinfo -O`` (summed per partition), ``/partitions``, ``Partition``.
PARTITION_FIELDS = (
    Field("name", v.PARTITION, "Partition", ("name",), "name", required=True),
    Field("is_default", v.DEFAULT, "Partition", _REST_PARTITION_DEFAULT, "is_default"),
    Field("state", v.AVAILABILITY, "Available", ("partition.state", "state"), "state"),
    Field("total_nodes", v.OPTIONAL_COUNT, "Nodes", ("nodes.total", "total_nodes"), "total_nodes"),
    Field("total_cpus", v.OPTIONAL_COUNT, "CPUsState/3", ("cpus.total", "total_cpus"),
          "total_cpus"),
)  # fmt: skip

#: Reservation fields: ``scontrol show reservation -o`` keys, ``/reservations``, ``Reservation``.
RESERVATION_FIELDS = (
    Field("name", v.TEXT, "ReservationName", ("name",), "name", required=True),
    Field("state", v.AVAILABILITY, "State", _REST_RESERVATION_STATE, "is_active"),
    Field("partition", v.TEXT, "PartitionName", ("partition",), "partition"),
    Field("flags", v.FLAGS, "Flags", ("flags",), _PYSLURM_RESERVATION_FLAGS),
    Field("nodes", v.COUNT, "NodeCnt", ("node_count",), "node_count"),
)  # fmt: skip

#: Controller fields: the parts of a ``scontrol ping`` line (``Slurmctld(MODE) at HOST is
#: STATE``), the entries of ``/ping``; pyslurm pings the primary only (a probe, no list).
CONTROLLER_FIELDS = (
    Field("hostname", v.TEXT, "host", ("hostname",), None, required=True),
    Field("mode", v.TEXT, "mode", _REST_CONTROLLER_MODE, None),
    Field("up", v.UP, "state", _REST_CONTROLLER_UP, None),
)  # fmt: skip


class SchedulerCounter(NamedTuple):
    """One :class:`~gotthard.slurm.snapshot.SchedulerStats` counter and how each backend's
    source names it (slurmctld keeps durations in microseconds, in every source)."""

    field: str
    #: sdiag's section (``""`` for the header, ``main``, ``backfill``) and line label.
    sdiag_section: str
    sdiag_label: str
    #: Key in slurmrestd's ``/diag`` ``statistics`` object.
    rest_key: str
    #: Attribute of ``pyslurm.slurmctld.Statistics`` where it is not ``rest_key``.
    pyslurm_name: str = ""

    @property
    def pyslurm_attribute(self) -> str:
        """Attribute of ``pyslurm.slurmctld.Statistics``."""
        return self.pyslurm_name or self.rest_key


#: The scheduler counters every backend reads, by sdiag section: field, sdiag label,
#: slurmrestd key, and the pyslurm attribute where it is not the slurmrestd key.
_SCHEDULER_COUNTER_ROWS: dict[str, tuple[tuple[str, ...], ...]] = {
    "": (
        ("server_threads", "Server thread count", "server_thread_count"),
        ("agent_queue_size", "Agent queue size", "agent_queue_size"),
        ("dbd_agent_queue_size", "DBD Agent queue size", "dbd_agent_queue_size"),
        # sdiag "Jobs submitted:", slurmrestd and pyslurm "jobs_submitted", ...
        *((f"jobs_{event}_total", f"Jobs {event}", f"jobs_{event}") for event in JOB_EVENTS),
    ),
    "main": (
        ("queue_length", "Last queue length", "schedule_queue_length"),
        ("cycles_total", "Total cycles", "schedule_cycle_total", "schedule_cycle_counter"),
        ("cycle_last_seconds", "Last cycle", "schedule_cycle_last"),
        ("cycle_max_seconds", "Max cycle", "schedule_cycle_max"),
        ("cycle_mean_seconds", "Mean cycle", "schedule_cycle_mean"),
    ),
    "backfill": (
        ("backfill_cycles_total", "Total cycles", "bf_cycle_counter", "backfill_cycle_counter"),
        ("backfill_cycle_last_seconds", "Last cycle", "bf_cycle_last", "backfill_cycle_last"),
        ("backfill_cycle_mean_seconds", "Mean cycle", "bf_cycle_mean", "backfill_cycle_mean"),
        ("backfill_depth_mean", "Depth Mean", "bf_depth_mean", "backfill_mean_depth"),
        ("backfill_queue_length", "Last queue length", "bf_queue_len", "backfill_queue_length"),
        (
            "backfilled_jobs_total",
            "Total backfilled jobs (since last slurm start)",
            "bf_backfilled_jobs",
            "backfilled_jobs",
        ),
    ),
}
SCHEDULER_COUNTERS = tuple(
    SchedulerCounter(field, section, label, *names)
    for section, rows in _SCHEDULER_COUNTER_ROWS.items()
    for field, label, *names in rows
)


def pyslurm_attributes(fields: Sequence[Field]) -> tuple[str, ...]:
    """Every attribute of the pyslurm object the fields read, in table order."""
    found: list[str] = []
    for field in fields:
        source = field.pyslurm
        names = source.reads if isinstance(source, Derived) else (source,) if source else ()
        found.extend(name for name in names if name not in found)
    return tuple(found)


# --- reading a table ------------------------------------------------------------------------


class _Lazy(dict[str, Any]):
    """A record's values; a lazy field is read from the record when first asked for, so
    that one the record needs not (a pending job's user) is never read."""

    __slots__ = ("_getters", "_record")

    def __init__(self, getters: Mapping[str, Callable[[Any], Any]], record: Any) -> None:
        super().__init__()
        self._getters = getters
        self._record = record

    def __missing__(self, name: str) -> Any:
        value = self[name] = self._getters[name](self._record)
        return value


def _unread(record: Any) -> None:
    return None


def _json_lookup(record: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = record
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def _getter(field: Field, backend: Backend, context: Mapping[str, Any]) -> Callable[[Any], Any]:
    """How *backend* reads *field* from one of its records."""
    source = field.rest if backend == "rest" else field.pyslurm
    decode = field.kind.json if backend == "rest" else field.kind.obj
    if source is None:
        return _unread
    if isinstance(source, Derived):
        function = source.function
        return lambda record: decode(function(record, context))
    if isinstance(source, str):  # a pyslurm attribute
        attribute = source
        return lambda record: decode(getattr(record, attribute))
    if field.required:
        key = source[0]
        return lambda record: decode(record[key])
    if len(source) == 1 and "." not in source[0]:
        key = source[0]
        return lambda record: decode(record.get(key))
    paths = tuple(tuple(path.split(".")) for path in source)

    def read(record: Mapping[str, Any]) -> Any:
        for path in paths:
            value = _json_lookup(record, path)
            if value is not None and value != "":
                return decode(value)
        return decode(None)

    return read


class RecordReader:
    """Reads a table's fields from one per-record backend's records: slurmrestd's decoded
    JSON objects (``rest``) or pyslurm's objects (``pyslurm``). A required field that is
    absent or empty raises; a lazy one is read when first asked for."""

    def __init__(
        self,
        fields: Sequence[Field],
        backend: Backend,
        context: Mapping[str, Any] | None = None,
    ) -> None:
        getters = [(field, _getter(field, backend, context or {})) for field in fields]
        self._eager = tuple((field.name, get) for field, get in getters if not field.lazy)
        self._lazy = {field.name: get for field, get in getters if field.lazy}
        self._required = tuple(field.name for field in fields if field.required)

    def values(self, record: Any) -> dict[str, Any]:
        found = _Lazy(self._lazy, record)
        for name, get in self._eager:
            found[name] = get(record)
        for name in self._required:
            if not found[name]:
                raise ValueError(f"record without a {name}")
        return found


class TextReader:
    """Reads a table's fields from a command's narrow text output: the columns it asks
    for (:attr:`columns`) and their cells, by column name."""

    def __init__(self, fields: Sequence[Field]) -> None:
        self.fields = tuple(field for field in fields if field.cli)
        #: The columns, in table order, each once.
        self.columns = tuple(dict.fromkeys(field.column for field in self.fields))
        self._required = tuple(field.name for field in self.fields if field.required)

    def values(self, cells: Mapping[str, str]) -> dict[str, Any]:
        """Every field from a row's cells by column name (a column not printed is empty)."""
        found: dict[str, Any] = {}
        for field in self.fields:
            cell = cells.get(field.column, "")
            part = field.part
            if part >= 0:
                pieces = cell.split("/")
                if len(pieces) <= part:
                    raise ValueError(f"{field.column}: no part {part} in {cell!r}")
                cell = pieces[part]
            found[field.name] = field.kind.text(cell)
        for name in self._required:
            if not found[name]:
                raise ValueError(f"row without a {name}")
        return found

    def row(self, cells: Sequence[str]) -> dict[str, Any]:
        """Every field from a row's cells in :attr:`columns` order."""
        if len(cells) != len(self.columns):
            raise ValueError(f"{len(cells)} columns, not {len(self.columns)}")
        return self.values(dict(zip(self.columns, cells, strict=True)))


# --- building records from the fields -------------------------------------------------------


#: Node fields taken as they are read; the state gives two (base and flags), and a node's
#: idle and other CPUs are counted as sinfo counts them.
_NODE_AS_READ = tuple(
    field.name for field in NODE_FIELDS if field.name not in ("state", "cpus_idle", "cpus_other")
)


def node_from(found: Mapping[str, Any]) -> Node:
    """A :class:`Node` from its fields. CPUs neither idle nor allocated are "other", as
    sinfo's ``CPUS(A/I/O/T)`` counts them, where the backend does not say."""
    state, flags = found["state"]
    total, alloc, idle, other = (
        found["cpus_total"],
        found["cpus_alloc"],
        found["cpus_idle"],
        found["cpus_other"],
    )
    if other is None:
        if idle is None:
            idle = max(total - alloc, 0)
        idle, other = cpus_idle_other(state, flags, total=total, alloc=alloc, idle=idle)
    return Node(
        state=state,
        flags=flags,
        cpus_idle=idle,
        cpus_other=other,
        **{name: found[name] for name in _NODE_AS_READ},
    )


def requested_gpus(
    per_job: int,
    per_node: int,
    per_task: int,
    per_socket: int,
    nodes: int,
    tasks: int,
    sockets: int,
) -> int:
    """GPUs a job asks for, from ``--gpus``, ``--gres``/``--gpus-per-node``,
    ``--gpus-per-task`` and ``--gpus-per-socket``, whichever it used."""
    nodes, tasks, sockets = max(nodes, 1), max(tasks, 1), max(sockets, 1)
    return per_job or per_node * nodes or per_task * tasks or per_socket * sockets * nodes


def job_identity(
    job_id: str, array_job_id: int, array_task_id: int | None, array_tasks: str
) -> tuple[str, int]:
    """``(job id as squeue -r prints it, number of jobs the record stands for)``.

    A pending array's meta record stands for every task not yet split off (``4_[0-3]``,
    4 jobs); squeue -r prints one line per task, so it is counted the same way.
    """
    if not array_job_id:
        return job_id, 1
    if array_task_id is not None:
        return f"{array_job_id}_{array_task_id}", 1
    if array_tasks:
        return f"{array_job_id}_[{array_tasks}]", v.count_array_tasks(array_tasks)
    # pyslurm reads task id 0 as None, like the unset id of a meta record; only the meta
    # record has tasks waiting
    return f"{array_job_id}_0", 1


def job_from(found: Mapping[str, Any], options: PollOptions) -> JobRecord:
    """A :class:`JobRecord` from a per-record backend's fields. Its GPUs are those it asks
    for (per job, node, task or socket), else those it holds where the backend says (a
    job that asked for none through these); its user is read only when a label
    (``per_user``) or ``gotthard_slurm_job_info`` needs it."""
    state = found["state"]
    job_id, count = job_identity(
        found["job_id"], found["array_job_id"], found["array_task_id"], found["array_tasks"]
    )
    gpus = (
        requested_gpus(
            found["gpus_per_job"],
            found["gpus_per_node"],
            found["gpus_per_task"],
            found["gpus_per_socket"],
            found["nodes"],
            found["tasks"],
            found["sockets"],
        )
        or found["gpus_held"]
    )
    wants_user = options.per_user or (options.job_info and state == "running")
    return JobRecord(
        job_id=job_id,
        state=state,
        partition=found["partition"],
        account=found["account"],
        user=found["user"] if wants_user else "",
        reason=found["reason"],
        cpus=found["cpus"],
        gpus=gpus,
        count=count,
    )


def partition_from(found: Mapping[str, Any]) -> Partition:
    return Partition(
        found["name"],
        found["state"],
        found["is_default"],
        found["total_cpus"],
        found["total_nodes"],
    )


def reservation_from(found: Mapping[str, Any]) -> Reservation:
    return Reservation(
        found["name"], found["state"], found["partition"], found["flags"], found["nodes"]
    )


def controller_from(found: Mapping[str, Any], index: int) -> Controller:
    """The controller at *index* in ``SlurmctldHost`` order."""
    return Controller(found["hostname"], controller_role(found["mode"], index), index, found["up"])
