"""Slurm backend that reads slurmrestd's OpenAPI endpoints.

One poll asks ``/slurm/{v}/ping`` (when probing), ``/diag``, ``/jobs``, ``/nodes`` and
``/partitions``. The OpenAPI version ``v`` is negotiated on the first poll (and again
after a 404): the newest version that both the server offers and this module maps.

Job, node and partition listings are fetched with ``?update_time=<epoch>``: when nothing
changed since then, slurmrestd answers ``304 Not Modified`` with an empty body (about
10 ms instead of seconds for a large queue) and the previous decoded listing, and what
was mapped from it, is reused.

The mapping lives in small pure functions (:func:`map_job`, :func:`map_node`,
:func:`map_partition`, :func:`map_diag`, :func:`map_ping`) that take decoded JSON. They
read v0.0.38 (Slurm 22.05) exactly and v0.0.39-v0.0.44 tolerantly: numbers wrapped as
``{"set": true, "infinite": false, "number": N}``, job and node states as lists of
strings, partition fields nested (``partition.state``).
"""

from __future__ import annotations

import base64
import binascii
import http.client
import json
import math
import re
import socket
import ssl
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from gotthard.exporters.slurm.snapshot import (
    JobTally,
    Node,
    Partition,
    PollOptions,
    ProbeResult,
    RpcStat,
    SchedulerStats,
    SlurmSnapshot,
    SlurmUnavailable,
    gpus_from_tres,
    job_gpus,
)

#: OpenAPI versions this module maps, newest first.
SUPPORTED_VERSIONS: tuple[str, ...] = (
    "v0.0.44",
    "v0.0.43",
    "v0.0.42",
    "v0.0.41",
    "v0.0.40",
    "v0.0.39",
    "v0.0.38",
)

_VERSION_IN_PATH = re.compile(r"/slurm/(v\d+\.\d+\.\d+)(?:/|$)")
_BODY_SNIPPET = 200
_MIB = 1024 * 1024

JsonDict = dict[str, Any]
_T = TypeVar("_T")


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


@dataclass(frozen=True, slots=True)
class RestJob:
    """One job record of ``/jobs`` mapped; ``count`` > 1 for a pending array's meta record."""

    job_id: str
    state: str
    partition: str
    account: str
    user: str
    reason: str
    #: CPUs and GPUs of one job (one task of an array).
    cpus: int
    gpus: int
    count: int = 1


def map_job(record: Mapping[str, Any]) -> RestJob:
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
    gpus = job_gpus(
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
        gpus = sum(gpus_from_tres(detail) for detail in _str_list_raw(record.get("gres_detail")))
        if not gpus:
            gpus = gpus_from_tres(_str(record.get("tres_alloc_str")))

    user = _str(record.get("user_name")) or _str(record.get("user_id"))
    return RestJob(
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


_NODE_BASE_STATES = frozenset(
    {"IDLE", "DOWN", "ALLOCATED", "ERROR", "MIXED", "FUTURE", "UNKNOWN", "END"}
)
#: A node in one of these states (or with one of these flags) holds its idle CPUs as "other",
#: as sinfo's CPUS(A/I/O/T) counts them.
_UNUSABLE_STATES = frozenset({"down", "error"})
_UNUSABLE_FLAGS = frozenset({"drain", "fail"})


def _node_state(record: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
    """Base state and flags from ``state`` (+ ``state_flags`` in v0.0.38)."""
    items = [item.upper() for item in _str_list(record.get("state"))]
    items.extend(item.upper() for item in _str_list(record.get("state_flags")))
    base = ""
    flags: list[str] = []
    for item in items:
        if not base and item in _NODE_BASE_STATES:
            base = item
        elif item not in _NODE_BASE_STATES:
            flag = item.lower()
            if flag not in flags:
                flags.append(flag)
    return (base or "UNKNOWN").lower(), tuple(flags)


def map_node(record: Mapping[str, Any]) -> Node:
    """Map one element of ``/nodes``' ``nodes`` list."""
    name = _str(record["name"])
    if not name:
        raise ValueError("node without a name")
    state, flags = _node_state(record)
    total = _int(record.get("cpus"))
    alloc = _int(record.get("alloc_cpus"))
    idle = _int(record.get("idle_cpus"), max(total - alloc, 0))
    if state in _UNUSABLE_STATES or _UNUSABLE_FLAGS.intersection(flags):
        idle = 0
    other = max(total - alloc - idle, 0)
    return Node(
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
        gpus_total=gpus_from_tres(_str(record.get("gres"))),
        gpus_alloc=gpus_from_tres(_str(record.get("gres_used"))),
        reason=_str(record.get("reason")),
    )


def map_partition(record: Mapping[str, Any]) -> Partition:
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
    return Partition(name=name, state=states[0] if states else "unknown", is_default=is_default)


def _seconds(value: Any) -> float:
    """Microseconds (possibly wrapped) -> seconds."""
    return _int(value) / 1e6


def _rpc_stats(entries: Any, key: str, fallback_key: str) -> dict[str, RpcStat]:
    stats: dict[str, RpcStat] = {}
    if not isinstance(entries, list):
        return stats
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        name = _str(entry.get(key)) or _str(entry.get(fallback_key))
        if not name:
            continue
        stats[name] = RpcStat(_int(entry.get("count")), _seconds(entry.get("total_time")))
    return stats


def map_diag(statistics: Mapping[str, Any]) -> SchedulerStats:
    """Map ``/diag``'s ``statistics`` object; durations arrive in microseconds."""
    return SchedulerStats(
        server_threads=_int(statistics.get("server_thread_count")),
        agent_queue_size=_int(statistics.get("agent_queue_size")),
        dbd_agent_queue_size=_int(statistics.get("dbd_agent_queue_size")),
        queue_length=_int(statistics.get("schedule_queue_length")),
        cycles_total=_int(statistics.get("schedule_cycle_total")),
        cycle_last_seconds=_seconds(statistics.get("schedule_cycle_last")),
        cycle_max_seconds=_seconds(statistics.get("schedule_cycle_max")),
        cycle_mean_seconds=_seconds(statistics.get("schedule_cycle_mean")),
        backfill_cycles_total=_int(statistics.get("bf_cycle_counter")),
        backfill_cycle_last_seconds=_seconds(statistics.get("bf_cycle_last")),
        backfill_cycle_mean_seconds=_seconds(statistics.get("bf_cycle_mean")),
        backfill_depth_mean=float(_num(statistics.get("bf_depth_mean")) or 0.0),
        backfill_queue_length=_int(statistics.get("bf_queue_len")),
        backfilled_jobs_total=_int(statistics.get("bf_backfilled_jobs")),
        rpc_by_type=_rpc_stats(statistics.get("rpcs_by_message_type"), "message_type", "type_id"),
        rpc_by_user=_rpc_stats(statistics.get("rpcs_by_user"), "user", "user_id"),
    )


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
        answer = _str(entry.get("pinged", entry.get("ping"))).upper()
        if entry.get("responding") is True or answer == "UP":
            return True, ""
        down.append(f"{_str(entry.get('hostname')) or '?'}: {answer or 'not responding'}")
    return False, "; ".join(down) or "no controller responds"


# --- HTTP -------------------------------------------------------------------------------------


def add_job(tally: JobTally, job: RestJob) -> None:
    """Count one mapped job record (``job.count`` > 1 for a pending array's meta record)."""
    tally.add(
        job_id=job.job_id,
        state=job.state,
        partition=job.partition,
        account=job.account,
        user=job.user,
        reason=job.reason,
        cpus=job.cpus,
        gpus=job.gpus,
        count=job.count,
    )


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over a unix stream socket (slurmrestd ``unix:/path`` listeners)."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self._socket_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


@dataclass(frozen=True, slots=True)
class _Target:
    scheme: str
    host: str
    port: int
    socket_path: str
    base_path: str

    @property
    def display(self) -> str:
        if self.scheme == "unix":
            return f"unix:{self.socket_path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.base_path}"


def parse_url(url: str) -> _Target:
    """Validate a slurmrestd URL: ``http(s)://host:port[/prefix]`` or ``unix:/abs/path``."""
    if not isinstance(url, str) or not url.strip():
        raise ValueError("slurmrestd URL is empty; use http://host:port or unix:/path/to.sock")
    url = url.strip()
    if url.startswith("unix:"):
        path = url[len("unix:") :]
        if path.startswith("//") and not path.startswith("///"):
            raise ValueError(
                f"invalid slurmrestd URL {url!r}: a unix socket URL is unix:/absolute/path"
            )
        if not path.startswith("/"):
            raise ValueError(
                f"invalid slurmrestd URL {url!r}: the unix socket path must be absolute "
                "(unix:/run/slurmrestd.sock)"
            )
        path = "/" + path.lstrip("/")
        if path == "/" or path.endswith("/"):
            raise ValueError(f"invalid slurmrestd URL {url!r}: no socket file name")
        return _Target("unix", "", 0, path, "")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(
            f"invalid slurmrestd URL {url!r}: scheme must be http, https or unix "
            "(http://host:6820, unix:/run/slurmrestd.sock)"
        )
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"invalid slurmrestd URL {url!r}: bad port ({exc})") from None
    if not parts.hostname:
        raise ValueError(f"invalid slurmrestd URL {url!r}: missing host")
    if port is None:
        raise ValueError(f"invalid slurmrestd URL {url!r}: missing port (slurmrestd has none)")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(
            f"invalid slurmrestd URL {url!r}: no query, fragment or credentials allowed"
        )
    return _Target(parts.scheme, parts.hostname, port, "", parts.path.rstrip("/"))


def jwt_user(token: str) -> str | None:
    """The user name (``sun`` claim) inside a Slurm JWT, without verifying it.

    slurmrestd 22.05 rejects a token sent without ``X-SLURM-USER-NAME`` (HTTP 401), so
    a token alone still works when the name can be read from it.
    """
    parts = token.strip().split(".")
    if len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (ValueError, binascii.Error):
        return None
    if not isinstance(claims, dict):
        return None
    name = claims.get("sun") or claims.get("username")
    return name if isinstance(name, str) and name else None


class _VersionGone(Exception):
    """A versioned endpoint answered 404: the server no longer offers the version."""


@dataclass(slots=True)
class _Response:
    status: int
    body: bytes
    seconds: float


@dataclass(slots=True)
class _Listing:
    """The last full answer of one listing endpoint and what was mapped from it."""

    #: Local time the request that produced ``records`` was sent.
    since: float
    records: list[Any]
    mapped_key: Any = None
    mapped: Any = None


def _snippet(body: bytes) -> str:
    text = body.decode("utf-8", "replace").strip()
    return " ".join(text[:_BODY_SNIPPET].split())


# --- backend ----------------------------------------------------------------------------------


class RestBackend:
    """Polls slurmrestd; see the module docstring.

    ``self.stats`` counts ``requests`` (HTTP requests sent), ``not_modified`` (304 answers),
    ``full`` (200 answers of the listing endpoints), ``negotiations``, ``retries`` (a
    listing asked again without ``update_time`` after a 5xx) and ``bytes`` received.
    """

    name = "rest"

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        user: str | None = None,
        timeout: float = 10.0,
        versions: tuple[str, ...] = SUPPORTED_VERSIONS,
    ) -> None:
        self._target = parse_url(url)
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        unknown = [v for v in versions if v not in SUPPORTED_VERSIONS]
        if unknown or not versions:
            raise ValueError(
                f"unsupported OpenAPI version(s) {unknown or list(versions)}; "
                f"this backend maps {', '.join(SUPPORTED_VERSIONS)}"
            )
        # Newest first, whatever order the caller gave.
        self._versions = tuple(sorted(set(versions), key=_version_key, reverse=True))
        self._timeout = timeout
        self._ssl = ssl.create_default_context() if self._target.scheme == "https" else None
        self._headers = {"Accept": "application/json", "Connection": "close"}
        if token:
            self._headers["X-SLURM-USER-TOKEN"] = token.strip()
        user = user or (jwt_user(token) if token else None)
        if user:
            self._headers["X-SLURM-USER-NAME"] = user
        self._api: str | None = None
        self._listings: dict[str, _Listing] = {}
        #: Controller clock minus ours, estimated from /diag's ``req_time`` (a lower bound).
        self._clock_offset: float | None = None
        self.stats: dict[str, int] = {
            "requests": 0,
            "not_modified": 0,
            "full": 0,
            "negotiations": 0,
            "retries": 0,
            "bytes": 0,
        }

    @property
    def url(self) -> str:
        return self._target.display

    @property
    def api_version(self) -> str | None:
        """The negotiated OpenAPI version (``v0.0.38``), None before the first poll."""
        return self._api

    # -- HTTP plumbing --

    def _connection(self) -> http.client.HTTPConnection:
        target = self._target
        if target.scheme == "unix":
            return UnixHTTPConnection(target.socket_path, self._timeout)
        if target.scheme == "https":
            return http.client.HTTPSConnection(
                target.host,
                target.port,
                timeout=self._timeout,
                context=self._ssl,
            )
        return http.client.HTTPConnection(target.host, target.port, timeout=self._timeout)

    def _request(self, path: str, query: Mapping[str, str] | None = None) -> _Response:
        full_path = self._target.base_path + path
        if query:
            full_path += "?" + urllib.parse.urlencode(query)
        self.stats["requests"] += 1
        started = time.monotonic()
        connection = self._connection()
        try:
            connection.request("GET", full_path, headers=self._headers)
            response = connection.getresponse()
            body = response.read()
            status = response.status
        except (OSError, http.client.HTTPException) as exc:
            reason = "timed out" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}"
            detail = str(exc) or reason
            raise SlurmUnavailable(
                f"slurmrestd {self.url}: GET {path} failed ({reason}: {detail})"
            ) from exc
        finally:
            connection.close()
        self.stats["bytes"] += len(body)
        return _Response(status, body, time.monotonic() - started)

    def _fail(self, path: str, response: _Response) -> SlurmUnavailable:
        status = response.status
        if status in (401, 403):
            what = "authentication rejected (check the JWT token and user)"
        elif status >= 500:
            what = "server error"
        else:
            what = "unexpected status"
        message = f"slurmrestd {self.url}: GET {path} -> HTTP {status} {what}"
        try:
            document = json.loads(response.body)
        except (ValueError, UnicodeDecodeError):
            document = None
        errors = _errors_text(document) if isinstance(document, dict) else ""
        if errors:
            message += f": {errors}"
        body = _snippet(response.body)
        if body:
            message += f" (body: {body})"
        return SlurmUnavailable(message)

    def _decode(self, path: str, response: _Response) -> JsonDict:
        try:
            document = json.loads(response.body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise SlurmUnavailable(
                f"slurmrestd {self.url}: GET {path} returned malformed JSON ({exc}): "
                f"{_snippet(response.body)}"
            ) from None
        if not isinstance(document, dict):
            raise SlurmUnavailable(
                f"slurmrestd {self.url}: GET {path} returned JSON that is not an object: "
                f"{_snippet(response.body)}"
            )
        return document

    def _get_json(self, path: str) -> tuple[JsonDict, float]:
        response = self._request(path)
        if response.status == 404:
            raise _VersionGone(path)
        if response.status != 200:
            raise self._fail(path, response)
        return self._decode(path, response), response.seconds

    # -- version negotiation --

    def _offered_from_openapi(self) -> list[str] | None:
        """Versions listed in the server's OpenAPI description, None if it has none."""
        for path in ("/openapi/v3", "/openapi"):
            response = self._request(path)
            if response.status in (401, 403):
                raise self._fail(path, response)
            if response.status != 200:
                continue
            try:
                document = json.loads(response.body)
            except (ValueError, UnicodeDecodeError):
                continue
            if not isinstance(document, dict):
                continue
            offered: set[str] = set()
            paths = document.get("paths")
            if isinstance(paths, Mapping):
                for key in paths:
                    match = _VERSION_IN_PATH.search(str(key))
                    if match:
                        offered.add(match.group(1))
            servers = document.get("servers")
            if isinstance(servers, list):
                for server in servers:
                    if isinstance(server, Mapping):
                        match = _VERSION_IN_PATH.search(_str(server.get("url")))
                        if match:
                            offered.add(match.group(1))
            return sorted(offered, key=_version_key, reverse=True)
        return None

    def _negotiate(self) -> str:
        self.stats["negotiations"] += 1
        offered = self._offered_from_openapi()
        if offered is not None:
            for version in offered:
                if version in self._versions:
                    return version
            raise SlurmUnavailable(
                f"slurmrestd {self.url} offers OpenAPI versions "
                f"{', '.join(offered) or '(none under /slurm/)'}; this backend maps "
                f"{', '.join(self._versions)}"
            )
        # No OpenAPI description: probe /ping, newest first.
        for version in self._versions:
            path = f"/slurm/{version}/ping"
            response = self._request(path)
            if response.status == 200:
                return version
            if response.status in (401, 403) or response.status >= 500:
                raise self._fail(path, response)
        raise SlurmUnavailable(
            f"slurmrestd {self.url} answers none of the OpenAPI versions "
            f"{', '.join(self._versions)} (no /openapi description either)"
        )

    def _forget_version(self) -> None:
        self._api = None
        self._listings.clear()

    # -- polling --

    def poll(self, options: PollOptions) -> SlurmSnapshot:
        try:
            return self._poll(options)
        except _VersionGone:
            self._forget_version()
        try:
            return self._poll(options)
        except _VersionGone as exc:
            self._forget_version()
            raise SlurmUnavailable(
                f"slurmrestd {self.url}: GET {exc} -> HTTP 404 right after version negotiation"
            ) from None

    def _ping(self, version: str) -> ProbeResult:
        path = f"/slurm/{version}/ping"
        response = self._request(path)
        if response.status == 404:
            raise _VersionGone(path)
        if response.status != 200:
            # slurmrestd answers 500 after ~9 s when slurmctld does not answer: the
            # other endpoints would do the same, so give up on this poll at once.
            raise self._fail(path, response)
        try:
            success, error = map_ping(self._decode(path, response))
        except SlurmUnavailable as exc:
            return ProbeResult("ping", False, response.seconds, str(exc))
        return ProbeResult("ping", success, response.seconds, error)

    def _listing(self, version: str, endpoint: str) -> tuple[_Listing, bool]:
        """The records of ``/slurm/{version}/{endpoint}``, from a 304 when unchanged.

        Returns the cache entry and whether it was refreshed by a full answer.
        """
        path = f"/slurm/{version}/{endpoint}"
        cached = self._listings.get(endpoint)
        query = None
        if cached is not None:
            query = {"update_time": str(self._update_time(cached.since))}
        started = time.time()
        response = self._request(path, query)
        if response.status >= 500 and query is not None:
            # slurmrestd 22.05 (v0.0.38) answers /nodes?update_time=T with HTTP 500
            # ("Unspecified error", errno -1) when the nodes changed since T but the
            # partitions did not: it loads both with T and takes "no change" for an
            # error. The same request without update_time works.
            self.stats["retries"] += 1
            started = time.time()
            response = self._request(path)
        if response.status == 304 and cached is not None:
            self.stats["not_modified"] += 1
            return cached, False
        if response.status == 404:
            raise _VersionGone(path)
        if response.status != 200:
            raise self._fail(path, response)
        document = self._decode(path, response)
        records = document.get(endpoint)
        if not isinstance(records, list):
            errors = _errors_text(document)
            raise SlurmUnavailable(
                f"slurmrestd {self.url}: GET {path} has no {endpoint!r} list"
                + (f": {errors}" if errors else f": {_snippet(response.body)}")
            )
        self.stats["full"] += 1
        listing = _Listing(since=started, records=records)
        self._listings[endpoint] = listing
        return listing, True

    def _poll(self, options: PollOptions) -> SlurmSnapshot:
        if self._api is None:
            self._api = self._negotiate()
        version = self._api
        errors = 0

        probes: tuple[ProbeResult, ...] = ()
        if options.probe:
            probes = (self._ping(version),)

        diag_path = f"/slurm/{version}/diag"
        diag_document, _ = self._get_json(diag_path)
        diag_received = time.time()
        statistics = diag_document.get("statistics")
        scheduler: SchedulerStats | None = None
        if isinstance(statistics, Mapping):
            try:
                scheduler = map_diag(statistics)
            except (KeyError, TypeError, ValueError, AttributeError):
                errors += 1
            self._update_clock_offset(statistics.get("req_time"), diag_received)
        else:
            errors_text = _errors_text(diag_document)
            raise SlurmUnavailable(
                f"slurmrestd {self.url}: GET {diag_path} has no statistics"
                + (f": {errors_text}" if errors_text else "")
            )

        jobs, _ = self._listing(version, "jobs")
        job_groups, running, job_errors = self._mapped_jobs(jobs, options)
        nodes_listing, _ = self._listing(version, "nodes")
        nodes, node_errors = self._mapped(nodes_listing, map_node)
        partitions_listing, _ = self._listing(version, "partitions")
        partitions, partition_errors = self._mapped(partitions_listing, map_partition)

        return SlurmSnapshot(
            up=True,
            job_groups=job_groups,
            running_jobs=running,
            nodes=nodes,
            partitions=partitions,
            scheduler=scheduler,
            probes=probes,
            errors=errors + job_errors + node_errors + partition_errors,
            backend=self.name,
            version=_release(diag_document),
        )

    def _update_time(self, since: float) -> int:
        """``update_time`` for a listing last fetched at local time ``since``.

        slurmctld answers 304 when ``update_time - 1 >= last_update`` (its clock, whole
        seconds). Sending a time at or before the controller's clock at ``since`` is
        safe: a change after ``since`` always produces a full answer. The controller's
        clock is estimated from /diag's ``req_time``; the estimate is never ahead of
        it (whole seconds, taken before our response arrived). Without one, one second
        of slack covers sub-second skew.
        """
        if self._clock_offset is None:
            return max(math.floor(since) - 1, 0)
        return max(math.floor(since + self._clock_offset), 0)

    def _update_clock_offset(self, server_time: Any, local_time: float) -> None:
        remote = _num(server_time)
        if remote is None or remote <= 0:
            self._clock_offset = None
            return
        self._clock_offset = remote - local_time

    def _mapped_jobs(
        self, listing: _Listing, options: PollOptions
    ) -> tuple[tuple[Any, ...], tuple[Any, ...], int]:
        key = ("jobs", options.per_user, options.job_info)
        if listing.mapped_key == key:
            return listing.mapped  # type: ignore[no-any-return]
        tally = JobTally(options)
        errors = 0
        for record in listing.records:
            try:
                job = map_job(record)
            except (KeyError, TypeError, ValueError, AttributeError):
                errors += 1
                continue
            add_job(tally, job)
        result = (tally.groups(), tuple(tally.running), errors)
        listing.mapped_key = key
        listing.mapped = result
        return result

    @staticmethod
    def _mapped(
        listing: _Listing, mapper: Callable[[Mapping[str, Any]], _T]
    ) -> tuple[tuple[_T, ...], int]:
        if listing.mapped_key == "records":
            return listing.mapped  # type: ignore[no-any-return]
        items, errors = _map_all(listing.records, mapper)
        listing.mapped_key = "records"
        listing.mapped = (items, errors)
        return items, errors


def _map_all(
    records: Iterable[Any], mapper: Callable[[Mapping[str, Any]], _T]
) -> tuple[tuple[_T, ...], int]:
    items: list[_T] = []
    errors = 0
    for record in records:
        try:
            items.append(mapper(record))
        except (KeyError, TypeError, ValueError, AttributeError):
            errors += 1
    return tuple(items), errors


def _version_key(version: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in version.lstrip("v").split("."))
    except ValueError:
        return (-1,)
