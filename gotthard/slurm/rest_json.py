"""slurmrestd JSON -> snapshot: small pure functions over decoded documents.

:func:`map_job`, :func:`map_node`, :func:`map_partition`, :func:`map_diag` and
:func:`map_ping` read OpenAPI v0.0.38 (Slurm 22.05) exactly and v0.0.39-v0.0.44
tolerantly: numbers wrapped as ``{"set": true, "infinite": false, "number": N}``, job and
node states as lists of strings, partition fields nested (``partition.state``). The
transport (HTTP, version negotiation, ``update_time``) is :mod:`.rest`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from gotthard.exporters.slurm import snapshot
from gotthard.slurm_state import cpus_idle_other, normalize_words

JsonDict = dict[str, Any]
_MIB = 1024 * 1024
#: What reading a decoded record that lacks a field or has one of the wrong type raises.
RECORD_ERRORS = (KeyError, TypeError, ValueError, AttributeError)


# --- value helpers ------------------------------------------------------------------------


def _num(value: Any) -> float | None:
    """A number in any of the shapes slurmrestd writes, or None when unset/infinite.

    v0.0.38 writes plain numbers (``null`` when unset); v0.0.39+ wraps many as
    ``{"set": bool, "infinite": bool, "number": N}``.
    """
    if isinstance(value, Mapping):
        if value.get("infinite") or value.get("set") is False:
            return None
        return _num(value.get("number"))
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _int(value: Any, default: int = 0) -> int:
    number = _num(value)
    return default if number is None else int(number)


def _str(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return ",".join(str(item) for item in value)
    return str(value)


def _str_list(value: Any) -> list[str]:
    """A list of strings from a list, a single string or a comma-separated string."""
    if value is None:
        return []
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list):
        return [str(item) for item in value if item is not None and str(item) != ""]
    return [str(value)]


def _release(document: Mapping[str, Any]) -> str:
    """The Slurm release (``22.05.8``) from a response's ``meta``, or ``""``."""
    meta = document.get("meta")
    if not isinstance(meta, Mapping):
        return ""
    slurm = meta.get("Slurm") or meta.get("slurm")
    if not isinstance(slurm, Mapping):
        return ""
    release = slurm.get("release")
    if isinstance(release, str) and release:
        return release
    version = slurm.get("version")
    if isinstance(version, Mapping) and "major" in version:
        try:
            major = int(version["major"])
            minor = int(version.get("minor", 0))
            micro = int(version.get("micro", 0))
        except (TypeError, ValueError):
            return ""
        return f"{major}.{minor:02d}.{micro}"
    return ""


def _errors_text(document: Mapping[str, Any]) -> str:
    """The ``errors`` list of a response as one line, or ``""``."""
    errors = document.get("errors")
    if not isinstance(errors, list):
        return ""
    texts = []
    for error in errors:
        if isinstance(error, Mapping):
            text = error.get("description") or error.get("error") or ""
            number = error.get("error_number", error.get("errno"))
            texts.append(f"{text} ({number})" if number not in (None, 0) else str(text))
        else:
            texts.append(str(error))
    return "; ".join(text for text in texts if text)


# --- mappers --------------------------------------------------------------------------------

#: Job state flags in the precedence Slurm's job_state_string() shows one over the base state.
_JOB_FLAG_STATES = (
    "COMPLETING",
    "STAGE_OUT",
    "CONFIGURING",
    "RESIZING",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "SPECIAL_EXIT",
    "STOPPED",
    "REVOKED",
    "RESV_DEL_HOLD",
    "SIGNALING",
)
_JOB_BASE_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "SUSPENDED",
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
    }
)


def _job_state(value: Any) -> str:
    """``RUNNING`` (v0.0.38) or ``["RUNNING", "COMPLETING"]`` (v0.0.40+) -> ``completing``.

    Like squeue, a transitional flag (completing, configuring, ...) wins over the base state.
    """
    states = [state.upper() for state in _str_list(value)]
    if not states:
        raise ValueError("job without job_state")
    for flag in _JOB_FLAG_STATES:
        if flag in states:
            return flag.lower()
    for state in states:
        if state in _JOB_BASE_STATES:
            return state.lower()
    return states[0].lower()


def count_array_tasks(text: str) -> int:
    """Tasks in a pending array's task string: ``0-3`` -> 4, ``1,3,5-9:2%4`` -> 5.

    A string Slurm cut short (``...``) counts the tasks it still lists.
    """
    text = text.split("%", 1)[0].strip()
    total = 0
    for part in text.split(","):
        part = part.strip()
        if not part or "..." in part:
            continue
        step = 1
        if ":" in part:
            part, step_text = part.split(":", 1)
            step = max(int(step_text), 1)
        if "-" in part:
            first, last = part.split("-", 1)
            total += len(range(int(first), int(last) + 1, step))
        else:
            int(part)
            total += 1
    return max(total, 1)


def map_job(record: Mapping[str, Any]) -> snapshot.JobRecord:
    """Map one element of ``/jobs``' ``jobs`` list; raises on a record it cannot read."""
    job_number = _int(record["job_id"], -1)
    if job_number < 0:
        raise ValueError(f"job without a job_id: {record.get('job_id')!r}")
    state = _job_state(record.get("job_state"))
    array_job_id = _int(record.get("array_job_id"))
    array_task = _num(record.get("array_task_id"))
    count = 1
    if array_job_id and array_task is not None:
        job_id = f"{array_job_id}_{int(array_task)}"
    elif array_job_id and _str(record.get("array_task_string")):
        task_string = _str(record.get("array_task_string"))
        count = count_array_tasks(task_string)
        job_id = f"{array_job_id}_[{task_string}]"
    else:
        job_id = str(job_number)

    nodes = max(_int(record.get("node_count"), 1), 1)
    tasks = max(_int(record.get("tasks"), 1), 1)
    sockets = max(_int(record.get("sockets_per_node"), 1), 1)
    gpus = snapshot.job_gpus(
        per_job=_str(record.get("tres_per_job")),
        per_node=_str(record.get("tres_per_node")),
        per_task=_str(record.get("tres_per_task")),
        per_socket=_str(record.get("tres_per_socket")),
        nodes=nodes,
        tasks=tasks,
        sockets=sockets,
    )
    if not gpus and state == "running":
        # Without AccountingStorageTRES=gres/gpu (no slurmdbd) the allocation only shows
        # up per node in gres_detail: ["gpu:1(IDX:0)", ...].
        gpus = sum(
            snapshot.gpus_from_tres(detail) for detail in _str_list_raw(record.get("gres_detail"))
        )
        if not gpus:
            gpus = snapshot.gpus_from_tres(_str(record.get("tres_alloc_str")))

    user = _str(record.get("user_name")) or _str(record.get("user_id"))
    return snapshot.JobRecord(
        job_id=job_id,
        state=state,
        partition=_str(record.get("partition")),
        account=_str(record.get("account")),
        user=user,
        reason=_str(record.get("state_reason")),
        cpus=_job_cpus(record, nodes),
        gpus=gpus,
        count=count,
    )


_TRES_CPU = re.compile(r"(?:^|,)cpu=(\d+)")


def _job_cpus(record: Mapping[str, Any], nodes: int) -> int:
    """``cpus``, or for a job that ended before it ever ran (``cpus: null`` in 22.05) what
    it asked for, as squeue's %C shows: ``cpu=`` of tres_req_str, else the per-node minimum."""
    cpus = _int(record.get("cpus"))
    if cpus:
        return cpus
    match = _TRES_CPU.search(_str(record.get("tres_req_str")))
    if match:
        return int(match.group(1))
    return _int(record.get("minimum_cpus_per_node")) * nodes


def _str_list_raw(value: Any) -> list[str]:
    """Like :func:`_str_list` but never splits a string on commas (gres_detail entries)."""
    if isinstance(value, list):
        return [str(item) for item in value if item]
    if isinstance(value, str) and value:
        return [value]
    return []


def _node_state(record: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
    """Base state and flags from ``state`` (+ ``state_flags`` in v0.0.38); unknown if unset."""
    words = _str_list(record.get("state")) + _str_list(record.get("state_flags"))
    return normalize_words(words) if words else ("unknown", ())


def map_node(record: Mapping[str, Any]) -> snapshot.Node:
    """Map one element of ``/nodes``' ``nodes`` list."""
    name = _str(record["name"])
    if not name:
        raise ValueError("node without a name")
    state, flags = _node_state(record)
    total = _int(record.get("cpus"))
    alloc = _int(record.get("alloc_cpus"))
    idle, other = cpus_idle_other(
        state,
        flags,
        total=total,
        alloc=alloc,
        idle=_int(record.get("idle_cpus"), max(total - alloc, 0)),
    )
    return snapshot.Node(
        name=name,
        state=state,
        flags=flags,
        partitions=tuple(_str_list(record.get("partitions"))),
        cpus_alloc=alloc,
        cpus_idle=idle,
        cpus_other=other,
        cpus_total=total,
        memory_total_bytes=_int(record.get("real_memory")) * _MIB,
        memory_alloc_bytes=_int(record.get("alloc_memory")) * _MIB,
        gpus_total=snapshot.gpus_from_tres(_str(record.get("gres"))),
        gpus_alloc=snapshot.gpus_from_tres(_str(record.get("gres_used"))),
        reason=_str(record.get("reason")),
    )


def map_partition(record: Mapping[str, Any]) -> snapshot.Partition:
    """Map one element of ``/partitions``' ``partitions`` list.

    v0.0.38: ``state: "UP"`` and ``flags: ["default"]``. v0.0.40+: ``partition.state:
    ["UP"]``; those versions do not say which partition is the default, so
    ``is_default`` stays False unless a ``flags``/``default`` field says otherwise.
    """
    name = _str(record["name"])
    if not name:
        raise ValueError("partition without a name")
    nested = record.get("partition")
    raw_state = nested.get("state") if isinstance(nested, Mapping) else record.get("state")
    states = [item.lower() for item in _str_list(raw_state)]
    flags = {flag.lower() for flag in _str_list(record.get("flags"))}
    is_default = "default" in flags or record.get("default") is True
    if isinstance(nested, Mapping) and nested.get("default") is True:
        is_default = True
    # v0.0.38: total_cpus/total_nodes; v0.0.40+: cpus.total/nodes.total
    cpus = record.get("cpus")
    nodes = record.get("nodes")
    total_cpus = _num(cpus.get("total") if isinstance(cpus, Mapping) else record.get("total_cpus"))
    total_nodes = _num(
        nodes.get("total") if isinstance(nodes, Mapping) else record.get("total_nodes")
    )
    return snapshot.Partition(
        name=name,
        state=states[0] if states else "unknown",
        is_default=is_default,
        total_cpus=None if total_cpus is None else int(total_cpus),
        total_nodes=None if total_nodes is None else int(total_nodes),
    )


def map_reservation(record: Mapping[str, Any], now: float) -> snapshot.Reservation:
    """Map one element of ``/reservations``' ``reservations`` list.

    slurmrestd gives no state: a reservation is ``active`` between its start and end
    time, as scontrol shows it, else ``inactive``.
    """
    name = _str(record["name"])
    if not name:
        raise ValueError("reservation without a name")
    start = _num(record.get("start_time"))
    end = _num(record.get("end_time"))
    active = start is not None and start <= now and (end is None or now < end)
    return snapshot.Reservation(
        name=name,
        state="active" if active else "inactive",
        partition=_str(record.get("partition")),
        flags=snapshot.reservation_flags(_str_list(record.get("flags"))),
        nodes=_int(record.get("node_count")),
    )


def _rpc_stats(entries: Any, key: str, fallback_key: str) -> dict[str, tuple[int, float]]:
    """``(count, total microseconds)`` per RPC type or user."""
    stats: dict[str, tuple[int, float]] = {}
    if not isinstance(entries, list):
        return stats
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        name = _str(entry.get(key)) or _str(entry.get(fallback_key))
        if not name:
            continue
        stats[name] = (_int(entry.get("count")), _int(entry.get("total_time")))
    return stats


def map_diag(statistics: Mapping[str, Any]) -> snapshot.SchedulerStats | None:
    """Map ``/diag``'s ``statistics`` object; durations arrive in microseconds.

    A counter the object lacks is left unset (no series); ``{}`` maps to None.
    """
    counters = {}
    for counter in snapshot.SCHEDULER_COUNTERS:
        number = _num(statistics.get(counter.rest_key))
        if number is not None:
            counters[counter.field] = number
    stats = snapshot.SchedulerStats.from_counters(
        counters,
        rpc_by_type=_rpc_stats(statistics.get("rpcs_by_message_type"), "message_type", "type_id"),
        rpc_by_user=_rpc_stats(statistics.get("rpcs_by_user"), "user", "user_id"),
    )
    return None if stats.empty else stats


def _ping_answer(entry: Mapping[str, Any]) -> str:
    """``UP``, ``DOWN`` or ``""``: one ``/ping`` entry's answer in either version's field."""
    return _str(entry.get("pinged", entry.get("ping"))).upper()


def _ping_up(entry: Mapping[str, Any]) -> bool:
    return entry.get("responding") is True or _ping_answer(entry) == "UP"


def map_ping(document: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether ``/ping`` says a controller answers, and why not.

    v0.0.38 entries: ``{"hostname", "ping": "UP", "status": 0, "mode": "primary"}``;
    v0.0.40+: ``{"hostname", "pinged": "UP", "responding": true, "latency", ...}``.
    """
    pings = document.get("pings")
    if not isinstance(pings, list) or not pings:
        return False, _errors_text(document) or "no controller in the ping response"
    down = []
    for entry in pings:
        if not isinstance(entry, Mapping):
            continue
        if _ping_up(entry):
            return True, ""
        answer = _ping_answer(entry)
        down.append(f"{_str(entry.get('hostname')) or '?'}: {answer or 'not responding'}")
    return False, "; ".join(down) or "no controller responds"


def map_controllers(document: Mapping[str, Any]) -> tuple[tuple[snapshot.Controller, ...], int]:
    """Every controller of a ``/ping`` answer, and how many entries could not be read.

    Entries come in ``SlurmctldHost`` order (their index); ``mode`` is ``primary`` or
    ``backup`` where the version writes it (v0.0.41+ also a ``primary`` boolean).
    """
    pings = document.get("pings")
    if not isinstance(pings, list):
        return (), 0
    controllers: list[snapshot.Controller] = []
    errors = 0
    for entry in pings:
        hostname = _str(entry.get("hostname")) if isinstance(entry, Mapping) else ""
        if not hostname:  # not an entry, or one without its host
            errors += 1
            continue
        index = len(controllers)
        mode = _str(entry.get("mode"))
        if not mode and isinstance(entry.get("primary"), bool):
            mode = "primary" if entry["primary"] else "backup"
        role = snapshot.controller_role(mode, index)
        controllers.append(snapshot.Controller(hostname, role, index, _ping_up(entry)))
    return tuple(controllers), errors
