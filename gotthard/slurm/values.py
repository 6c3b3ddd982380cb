"""How each Slurm source spells a value, and the one typed value Gotthard keeps.

The same node memory is ``22900`` in ``sinfo``'s text, ``22900`` or
``{"set": true, "number": 22900}`` in slurmrestd's JSON and ``22900`` (or None) on a
pyslurm object; the same GPU count is ``gres:gpu:2``, ``gres/gpu=2`` or
``{"gpu": 2}``. A :class:`Kind` reads one kind of value from each of the three forms:
``text`` (a cell of a command's narrow output), ``json`` (a decoded slurmrestd value) and
``obj`` (a pyslurm attribute). The field table (:mod:`gotthard.slurm.fields`) gives
every field its kind.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gotthard.slurm_state import normalize, normalize_words

#: How Slurm's commands print "no value".
NULLS = frozenset(("", "(null)", "N/A", "n/a", "none", "None"))
#: Slurm's NO_VAL/INFINITE sentinels (0xfffffffe, 0xffffffff) as plain numbers: unset.
NO_VAL = 0xFFFFFFFE
MIB = 1024 * 1024


# --- plain values ------------------------------------------------------------------------


def text_int(cell: str) -> int:
    """An integer as a command prints it; ``N/A``, NO_VAL and INFINITE are 0."""
    cell = cell.strip()
    if cell in NULLS:
        return 0
    value = int(cell)
    return 0 if value >= NO_VAL else value


def text_or_empty(cell: str) -> str:
    cell = cell.strip()
    return "" if cell in NULLS else cell


def json_number(value: Any) -> float | None:
    """A number in any of the shapes slurmrestd writes, or None when unset/infinite.

    v0.0.38 writes plain numbers (``null`` when unset); v0.0.39+ wraps many as
    ``{"set": bool, "infinite": bool, "number": N}``.
    """
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, dict):  # decoded JSON objects are dicts
        if value.get("infinite") or value.get("set") is False:
            return None
        return json_number(value.get("number"))
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def json_count(value: Any) -> int | None:
    """A count slurmrestd writes; None when unset, NO_VAL or INFINITE (a v0.0.38 plain
    number may be a sentinel)."""
    number = json_number(value)
    return None if number is None or number >= NO_VAL else int(number)


def json_int(value: Any, default: int = 0) -> int:
    number = json_number(value)
    return default if number is None else int(number)


def json_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return ",".join(str(item) for item in value)
    return str(value)


def json_names(value: Any) -> list[str]:
    """A list of strings from a list, a single string or a comma-separated string."""
    if value is None:
        return []
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list):
        return [str(item) for item in value if item is not None and str(item) != ""]
    return [str(value)]


def json_entries(value: Any) -> list[str]:
    """Like :func:`json_names` but never splits a string on commas (``gres_detail``)."""
    if isinstance(value, list):
        return [str(item) for item in value if item]
    if isinstance(value, str) and value:
        return [value]
    return []


def obj_text(value: Any) -> str:
    return "" if value is None else str(value)


def obj_int(value: Any) -> int:
    """pyslurm's ``int | None`` (None for unset, NO_VAL and often 0) as an int."""
    return 0 if value is None else int(value)


# --- GPUs, array tasks, reservation flags ------------------------------------------------

_GPU_COUNT = re.compile(r"(?:^|[,\s])(?:gres[:/])?gpu(?::[^:=,(\s]+)?[:=](\d+)")
_LEADING_DIGITS = re.compile(r"\d+")


@functools.lru_cache(maxsize=4096)
def gpus_from_tres(text: str | None) -> int:
    """GPU count in a GRES/TRES string, in any of the forms Slurm prints.

    ``gres:gpu:2``, ``gres/gpu:2``, ``gpu:a100:2``, ``gres/gpu:a100=2``,
    ``cpu=4,mem=1G,gres/gpu=2``, ``gpu:2(IDX:0-1)``. Typed and untyped entries of
    the same job (``gres/gpu=2,gres/gpu:a100=2``) count once, typed ones preferred
    only when no untyped total is present.
    """
    if not text or "gpu" not in text:
        return 0
    untyped = 0
    typed = 0
    for item in re.split(r",(?![^()]*\))", text):
        item = item.strip()
        match = _GPU_COUNT.search(item)
        if not match:
            continue
        body = item.split("(", 1)[0]
        parts = re.split(r"[:=/]", body)
        # parts like ["gres", "gpu", "2"] or ["gres", "gpu", "a100", "2"]
        name_index = parts.index("gpu") if "gpu" in parts else -1
        if len(parts) - name_index == 2:
            untyped += int(match.group(1))
        else:
            typed += int(match.group(1))
    return untyped or typed


def gpu_count(value: Any) -> int:
    """GPU count in any form pyslurm hands out.

    ``None``; a GRES/TRES string; a dict keyed ``gpu``, ``gpu:<type>``, ``gres/gpu[:type]``
    whose values are ints, digit strings, ``{"count": n, "indexes": ...}`` or ``GPU``
    objects; or a ``TrackableResources`` (its ``gres`` dict). As with
    :func:`gpus_from_tres`, an untyped total wins over typed entries, which are summed
    only when no untyped one is present.
    """
    if value is None:
        return 0
    if isinstance(value, str):
        return gpus_from_tres(value)
    if not isinstance(value, Mapping):
        return gpu_count(value.gres)
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


_ARRAY_RANGE = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")


def count_array_tasks(spec: str) -> int:
    """Tasks in a pending array's task string: ``0-3`` -> 4, ``1,3,5-9:2%4`` -> 5.

    A string Slurm cut short (``0-3,7,...``) counts the tasks it still lists; a part that
    cannot be read counts nothing, and a record stands for one task at least.
    """
    total = 0
    for item in spec.split("%", 1)[0].split(","):
        match = _ARRAY_RANGE.match(item.strip())
        if match is None:
            continue
        first = int(match.group(1))
        last = int(match.group(2) or first)
        step = max(int(match.group(3) or 1), 1)
        total += len(range(first, last + 1, step))
    return max(total, 1)


#: Reservation flags in the order scontrol prints them (libslurm's
#: ``reservation_flags_string``), lower-case. Every backend lists a reservation's flags
#: in this order, so ``gotthard_slurm_reservation_info{flags}`` does not depend on the backend.
RESERVATION_FLAG_ORDER = (
    "maint",
    "no_maint",
    "flex",
    "overlap",
    "ignore_jobs",
    "hourly",
    "no_hourly",
    "daily",
    "no_daily",
    "weekday",
    "weekend",
    "weekly",
    "no_weekly",
    "spec_nodes",
    "all_nodes",
    "any_nodes",
    "no_any_nodes",
    "static",
    "no_static",
    "part_nodes",
    "no_part_nodes",
    "first_cores",
    "time_float",
    "replace",
    "replace_down",
    "purge_comp",
    "no_hold_jobs_after_end",
    "magnetic",
    "no_magnetic",
)
_FLAG_RANK = {flag: rank for rank, flag in enumerate(RESERVATION_FLAG_ORDER)}


def reservation_flags(names: Iterable[str]) -> str:
    """Reservation flags as the ``flags`` label shows them: ``maint,ignore_jobs``.

    Lower-case, each once, in scontrol's order; flags newer than that order follow in the
    order given. A flag's value is dropped (scontrol prints ``PURGE_COMP=00:05:00``).
    """
    flags: list[str] = []
    for name in names:
        flag = name.partition("=")[0].strip().lower()
        if flag and flag not in flags:
            flags.append(flag)
    flags.sort(key=lambda flag: _FLAG_RANK.get(flag, len(_FLAG_RANK)))
    return ",".join(flags)


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


def job_state_words(words: Iterable[str]) -> str:
    """``["RUNNING", "COMPLETING"]`` -> ``completing``: like squeue, a transitional flag
    (completing, configuring, ...) wins over the base state."""
    states = [state.upper() for state in words]
    if not states:
        raise ValueError("job without a state")
    for flag in _JOB_FLAG_STATES:
        if flag in states:
            return flag.lower()
    for state in states:
        if state in _JOB_BASE_STATES:
            return state.lower()
    return states[0].lower()


# --- kinds -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind of value: how to read it from each source. Each function raises ValueError
    (or TypeError, AttributeError) on a value it cannot read: the backend counts the
    record as an error."""

    #: A cell of a command's narrow output (``sinfo -O``, ``squeue -O``, ``scontrol``).
    text: Callable[[str], Any]
    #: A decoded slurmrestd value (any OpenAPI version), None when absent.
    json: Callable[[Any], Any]
    #: A pyslurm attribute's value.
    obj: Callable[[Any], Any]


def _scaled(read: Callable[[Any], int | None], scale: int) -> Callable[[Any], int]:
    return lambda value: (read(value) or 0) * scale


def _names_text(cell: str) -> tuple[str, ...]:
    # sinfo prints a node once per partition, the default one marked with "*"
    name = text_or_empty(cell).rstrip("*")
    return (name,) if name else ()


def _json_job_id(value: Any) -> str:
    number = json_number(value)
    if number is None or number < 0:
        raise ValueError(f"not a job id: {value!r}")
    return str(int(number))


def _json_gpus(value: Any) -> int:
    if isinstance(value, int):  # what a derived source counted already
        return value
    return gpus_from_tres(json_text(value))


def _text_load(cell: str) -> float | None:
    cell = cell.strip()
    return None if cell in NULLS else float(cell)


def _json_load(value: Any) -> float | None:
    number = json_count(value)  # slurmrestd's hundredths
    return None if number is None else number / 100.0


def _obj_load(value: Any) -> float | None:
    return None if value is None else float(value)


def _json_node_state(value: Any) -> tuple[str, tuple[str, ...]]:
    words = json_names(value)
    return normalize_words(words) if words else ("unknown", ())


def _obj_node_state(value: Any) -> tuple[str, tuple[str, ...]]:
    text = obj_text(value)
    return normalize(text) if text.strip() else ("unknown", ())


def _json_state(value: Any) -> str:
    states = json_names(value)
    return states[0].lower() if states else "unknown"


def _obj_state(value: Any) -> str:
    if isinstance(value, bool):  # pyslurm's Reservation.is_active
        return "active" if value else "inactive"
    return obj_text(value).lower() or "unknown"


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _text_optional_int(cell: str) -> int | None:
    return None if cell.strip() in NULLS else text_int(cell)


#: A name or label; ``(null)``, ``N/A`` and ``none`` are empty.
TEXT = Kind(text_or_empty, json_text, obj_text)
#: Text kept as printed (a pending reason: ``None`` is Slurm's own code).
VERBATIM = Kind(str.strip, json_text, obj_text)
#: A partition's name; sinfo marks the default partition with ``*``.
PARTITION = Kind(lambda cell: text_or_empty(cell).rstrip("*"), json_text, obj_text)
#: Whether a partition is the default (sinfo's ``*`` after its name).
DEFAULT = Kind(lambda cell: cell.strip().endswith("*"), lambda value: value is True, bool)
#: A list of names (a node's partitions).
NAMES = Kind(_names_text, lambda value: tuple(json_names(value)), lambda v: tuple(v or ()))
#: A whole number; unset, ``N/A``, NO_VAL and INFINITE are 0.
COUNT = Kind(text_int, _scaled(json_count, 1), obj_int)
#: Mebibytes, as Slurm counts memory, kept in bytes.
MEBIBYTES = Kind(_scaled(text_int, MIB), _scaled(json_count, MIB), _scaled(obj_int, MIB))
#: A whole number that may be unknown (None), as a partition's controller totals.
OPTIONAL_COUNT = Kind(_text_optional_int, json_count, _optional_int)
#: A job id: squeue's text (``4_0``), slurmrestd's number, pyslurm's int.
JOB_ID = Kind(str.strip, _json_job_id, obj_text)
#: A GPU count from a GRES/TRES string (text, JSON) or pyslurm's dicts.
GPUS = Kind(gpus_from_tres, _json_gpus, gpu_count)
#: A CPU load: sinfo prints ``0.16``, slurmrestd hundredths (``16``), pyslurm ``0.16``;
#: None when the node has not reported one.
LOAD = Kind(_text_load, _json_load, _obj_load)
#: A node's ``(base, flags)`` (see :mod:`gotthard.slurm_state`); ``unknown`` if unset.
NODE_STATE = Kind(normalize, _json_node_state, _obj_node_state)
#: A job's state, lower-case (``running``, ``completing``).
JOB_STATE = Kind(
    lambda cell: cell.strip().lower(),
    lambda value: job_state_words(json_names(value)),
    lambda value: obj_text(value).lower() or "unknown",
)
#: A partition's or reservation's state, lower-case (``up``, ``active``).
AVAILABILITY = Kind(lambda cell: cell.strip().lower() or "unknown", _json_state, _obj_state)
#: A reservation's flags as the label shows them (:func:`reservation_flags`).
FLAGS = Kind(
    lambda cell: reservation_flags(text_or_empty(cell).split(",")),
    lambda value: reservation_flags(json_names(value)),
    reservation_flags,
)
#: Whether a controller answered: scontrol's ``UP``, slurmrestd's answer.
UP = Kind(lambda cell: cell.strip().upper() == "UP", lambda value: value is True, bool)
