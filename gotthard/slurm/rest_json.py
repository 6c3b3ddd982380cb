"""slurmrestd JSON -> snapshot: the field table read from decoded documents.

Records are read through :class:`~gotthard.slurm.fields.RecordReader`: OpenAPI v0.0.38
(Slurm 22.05) exactly and v0.0.39-v0.0.44 tolerantly (numbers wrapped as ``{"set": true,
"infinite": false, "number": N}``, job and node states as lists of strings, partition
fields nested as ``partition.state``), as the table's keys say. The transport (HTTP,
version negotiation, ``update_time``) is :mod:`.rest`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gotthard.slurm import fields, snapshot
from gotthard.slurm.values import json_int, json_number, json_text

JsonDict = dict[str, Any]
#: What reading a decoded record that lacks a field or has one of the wrong type raises.
RECORD_ERRORS = (KeyError, TypeError, ValueError, AttributeError)

_JOBS = fields.RecordReader(fields.JOB_FIELDS, "rest")
_NODES = fields.RecordReader(fields.NODE_FIELDS, "rest")
_PARTITIONS = fields.RecordReader(fields.PARTITION_FIELDS, "rest")
_CONTROLLERS = fields.RecordReader(fields.CONTROLLER_FIELDS, "rest")
_EVERY_USER = snapshot.PollOptions(per_user=True)


def release(document: Mapping[str, Any]) -> str:
    """The Slurm release (``22.05.8``) from a response's ``meta``, or ``""``."""
    meta = document.get("meta")
    if not isinstance(meta, Mapping):
        return ""
    slurm = meta.get("Slurm") or meta.get("slurm")
    if not isinstance(slurm, Mapping):
        return ""
    found = slurm.get("release")
    if isinstance(found, str) and found:
        return found
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


def errors_text(document: Mapping[str, Any]) -> str:
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


def map_job(
    record: Mapping[str, Any], options: snapshot.PollOptions | None = None
) -> snapshot.JobRecord:
    """Map one element of ``/jobs``' ``jobs`` list; raises on a record it cannot read.
    The user is read when *options* need it (default: every user)."""
    return fields.job_from(_JOBS.values(record), options or _EVERY_USER)


def map_node(record: Mapping[str, Any]) -> snapshot.Node:
    """Map one element of ``/nodes``' ``nodes`` list."""
    return fields.node_from(_NODES.values(record))


def map_partition(record: Mapping[str, Any]) -> snapshot.Partition:
    """Map one element of ``/partitions``' ``partitions`` list. v0.0.40+ do not say which
    partition is the default: ``is_default`` stays False unless a field says otherwise."""
    return fields.partition_from(_PARTITIONS.values(record))


def map_reservation(record: Mapping[str, Any], now: float) -> snapshot.Reservation:
    """Map one element of ``/reservations``' ``reservations`` list; it is ``active``
    between its start and end time (*now*: the controller's clock)."""
    reader = fields.RecordReader(fields.RESERVATION_FIELDS, "rest", {"now": now})
    return fields.reservation_from(reader.values(record))


def _rpc_stats(entries: Any, key: str, fallback_key: str) -> dict[str, tuple[int, float]]:
    """``(count, total microseconds)`` per RPC type or user."""
    stats: dict[str, tuple[int, float]] = {}
    if not isinstance(entries, list):
        return stats
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        name = json_text(entry.get(key)) or json_text(entry.get(fallback_key))
        if not name:
            continue
        stats[name] = (json_int(entry.get("count")), json_int(entry.get("total_time")))
    return stats


def map_diag(statistics: Mapping[str, Any]) -> snapshot.SchedulerStats | None:
    """Map ``/diag``'s ``statistics`` object; durations arrive in microseconds.

    A counter the object lacks is left unset (no series); ``{}`` maps to None.
    """
    counters = {}
    for counter in fields.SCHEDULER_COUNTERS:
        number = json_number(statistics.get(counter.rest_key))
        if number is not None:
            counters[counter.field] = number
    stats = snapshot.SchedulerStats.from_counters(
        counters,
        rpc_by_type=_rpc_stats(statistics.get("rpcs_by_message_type"), "message_type", "type_id"),
        rpc_by_user=_rpc_stats(statistics.get("rpcs_by_user"), "user", "user_id"),
    )
    return None if stats.empty else stats


def map_controllers(document: Mapping[str, Any]) -> tuple[tuple[snapshot.Controller, ...], int]:
    """Every controller of a ``/ping`` answer, and how many entries could not be read.

    Entries come in ``SlurmctldHost`` order (their index). v0.0.38 entries:
    ``{"hostname", "ping": "UP", "status": 0, "mode": "primary"}``; v0.0.40+:
    ``{"hostname", "pinged": "UP", "responding": true, "latency", ...}``.
    """
    pings = document.get("pings")
    if not isinstance(pings, list):
        return (), 0
    controllers: list[snapshot.Controller] = []
    errors = 0
    for entry in pings:
        try:
            found = _CONTROLLERS.values(entry)
        except RECORD_ERRORS:  # not an entry, or one without its host
            errors += 1
            continue
        controllers.append(fields.controller_from(found, len(controllers)))
    return tuple(controllers), errors


def map_ping(document: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether ``/ping`` says a controller answers, and why not."""
    pings = document.get("pings")
    if not isinstance(pings, list) or not pings:
        return False, errors_text(document) or "no controller in the ping response"
    entries = [entry for entry in pings if isinstance(entry, Mapping)]
    if any(fields.rest_controller_up(entry, {}) for entry in entries):
        return True, ""
    down = [
        f"{json_text(entry.get('hostname')) or '?'}: "
        f"{fields.rest_ping_answer(entry) or 'not responding'}"
        for entry in entries
    ]
    return False, "; ".join(down) or "no controller responds"


#: The first OpenAPI version with ``/slurm/{v}/shares`` (Slurm 23.11); 22.05's v0.0.38 and
#: 23.02's v0.0.39 have none.
SHARES_SINCE = (0, 0, 40)


def map_shares(document: Mapping[str, Any]) -> tuple[tuple[snapshot.Share, ...], int]:
    """The associations of a ``/slurm/v0.0.40+/shares`` answer
    (``{"shares": {"shares": [...], "total_shares": N}}``): a user association is
    ``type: ["USER"]`` with the user as ``name`` and its account as ``parent``; an
    account is ``name``. Raises KeyError/TypeError when the answer has no such list."""
    wrapper = document["shares"]
    records = wrapper["shares"] if isinstance(wrapper, Mapping) else wrapper
    if not isinstance(records, list):
        raise TypeError("shares is not a list")
    shares, errors = snapshot.map_each(records, _share, RECORD_ERRORS)
    return snapshot.unique_shares(shares), errors


def _share(record: Mapping[str, Any]) -> snapshot.Share:
    is_user = "USER" in (str(kind).upper() for kind in record.get("type") or ())
    name = json_text(record["name"])
    account = json_text(record["parent"]) if is_user else name
    if not account:
        raise ValueError("association without an account")
    raw = json_number(record["usage"])
    effective = json_number(record["effective_usage"])
    if raw is None or effective is None:
        raise ValueError("usage not set")
    factor = None
    if is_user:
        fairshare = record.get("fairshare")
        factor = json_number(fairshare.get("factor")) if isinstance(fairshare, Mapping) else None
    return snapshot.Share(account, name if is_user else "", raw, effective, factor)
