"""Pure parsers for Lustre's parameter texts, identical for procfs/sysfs files and lctl output.

Error policy:

* Value parsers (:func:`parse_int`, :func:`parse_version`, :func:`parse_health_check`)
  raise :class:`ValueError` when the text is not a value of that kind; the caller counts
  it as one error.
* Block parsers (:func:`parse_stats`, :func:`parse_job_stats`, :func:`parse_lctl_output`,
  :func:`parse_recovery_status`, :func:`parse_lnet_stats`) never raise on any ``str``: they
  return what they understood plus ``errors``, the number of non-blank lines they could
  not place.
* Name helpers (:func:`parse_target_name`, :func:`client_device`, :func:`llite_fs`) never
  raise; a name they do not recognise comes back as itself with an empty ``fs``.

Nothing but :class:`ValueError` escapes a parser (property-tested with random text).

Formats (see docs/lustre.md):

``stats`` / ``md_stats`` -- header lines ``snapshot_time``/``start_time``/``elapsed_time``
then ``<name> <count> samples [<unit>] [<min> <max> <sum> [<sumsq>]]``: count-only lines
(2.10 ``[reqs]``), ``[bytes]`` lines with min/max/sum, and ``[usecs]`` lines with
min/max/sum/sumsq (2.12 and later).

``job_stats`` -- YAML-like ``- job_id:`` entries with one
``<op>: { samples: N, unit: U[, min: .., max: .., sum: S[, sumsq: ..]] }`` line per
operation. Parsed with hand-rolled scanners (no YAML library): a 10,000-job OST (22 MB)
parses in about 0.15 s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gotthard.exporters.lustre.snapshot import ClientIO, RecoveryProgress, StatCounters

# --- names -------------------------------------------------------------------------------

_TARGET = re.compile(
    r"(?P<fs>\S+?)-(?P<kind>OST|MDT)(?P<index>[0-9a-fA-F]{4,8})(?:-(?P<rest>\S+))?"
)
_SERVER_INSTANCE = re.compile(r"(?:MDT|OST)[0-9a-fA-F]{4,8}")
_LLITE = re.compile(r"(?P<fs>\S+)-(?P<instance>[0-9a-fA-F]{8,})")

#: target kind as in the name -> component of a server target
SERVER_COMPONENT = {"OST": "ost", "MDT": "mdt"}


def parse_target_name(name: str) -> tuple[str, str, str, str]:
    """``(fs, target, kind, rest)`` of a device name; kind is OST, MDT, MGS or "".

    ``lustre-OST0000`` -> ("lustre", "lustre-OST0000", "OST", "");
    ``lustre-OST0000-osc-ffff8810`` -> ("lustre", "lustre-OST0000", "OST", "osc-ffff8810");
    ``MGS`` -> ("", "MGS", "MGS", ""); anything else -> ("", name, "", "").
    """
    match = _TARGET.fullmatch(name)
    if match is None:
        if name == "MGS":
            return "", "MGS", "MGS", ""
        return "", name, "", ""
    fs = match["fs"]
    return fs, f"{fs}-{match['kind']}{match['index']}", match["kind"], match["rest"] or ""


def client_device(name: str, kind: str) -> tuple[str, str] | None:
    """``(fs, target)`` of a client's ``osc``/``mdc`` device, None for anything else.

    ``lustre-OST0000-osc-ffff88105db50000`` with kind ``osc`` -> ("lustre", "lustre-OST0000").
    Server-side connections (``lustre-OST0000-osc-MDT0000``, an MDS's view through osp)
    return None so they never mix with a client's view.
    """
    fs, target, _, rest = parse_target_name(name)
    prefix = kind + "-"
    if not fs or not rest.startswith(prefix):
        return None
    instance = rest[len(prefix) :]
    if not instance or _SERVER_INSTANCE.fullmatch(instance):
        return None
    return fs, target


def llite_fs(name: str) -> str:
    """The file system of a client mount: ``lustre-ffff88105db50000`` -> ``lustre``."""
    match = _LLITE.fullmatch(name)
    return match["fs"] if match else name


# --- single values -----------------------------------------------------------------------


def matching_lines(text: str, pattern: re.Pattern[str]) -> tuple[list[re.Match[str]], int]:
    """The full match of *pattern* on each non-blank line, and how many lines had none."""
    matches = []
    misses = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        match = pattern.fullmatch(line)
        if match is None:
            misses += 1
        else:
            matches.append(match)
    return matches, misses


_INT = re.compile(r"\s*([0-9]+)\s*", re.ASCII)
_VERSION = re.compile(r"\s*(?:lustre:\s*)?v?([0-9]+\.[0-9]+[0-9A-Za-z_.+\-]*)", re.ASCII)


def parse_int(text: str) -> int:
    """A file holding one non-negative integer (``kbytestotal``, ``active``, ...)."""
    match = _INT.fullmatch(text)
    if match is None:
        raise ValueError(f"not an integer: {text[:40]!r}")
    return int(match[1])


def parse_version(text: str) -> str:
    """``2.15.4`` from ``version`` (2.12+: ``2.15.4``; older: ``lustre: 2.10.1\\nkernel: ...``)."""
    match = _VERSION.match(text)
    if match is None:
        raise ValueError(f"not a Lustre version: {text[:40]!r}")
    return match[1][:64]


# --- stats / md_stats --------------------------------------------------------------------

_STATS_LINE = re.compile(
    r"[ \t]*(\S+)[ \t]+([0-9]+)[ \t]+samples[ \t]+\[([^\]\s]*)\]"
    r"(?:[ \t]+([0-9]+)[ \t]+([0-9]+)[ \t]+([0-9]+)(?:[ \t]+([0-9]+))?)?[ \t]*",
    re.ASCII,
)
_STATS_HEADERS = frozenset(
    (
        "snapshot_time",
        "start_time",
        "elapsed_time",
        "snapshot_time:",
        "start_time:",
        "elapsed_time:",
    )
)
_LATENCY_UNITS = frozenset(("usec", "usecs"))
#: client llite lines that are not operations: ``openclosetime`` samples how long each
#: closed file had been open (a sum of open times, not a service time); ``opencount``
#: samples how often a file had been opened when it is opened again (its count repeats
#: ``open``, its sum is no count of anything)
_OPEN_TIME = "openclosetime"
_NOT_OPERATIONS = frozenset((_OPEN_TIME, "opencount"))
#: byte-counting lines -> the operation their sample count stands for when the block has no
#: line of that name (2.10 obdfilter stats: write_bytes but no write)
_BYTES_LINES = {"read_bytes": "read", "write_bytes": "write"}


@dataclass(slots=True)
class StatsBlock(StatCounters):
    """One parsed ``stats`` / ``md_stats`` text and its unplaced lines."""

    errors: int = 0


def parse_stats(text: str) -> StatsBlock:
    """Parse a ``stats`` or ``md_stats`` block (any version); never raises.

    * every line's ``samples`` count goes to ``operations[name]`` (repeated names, such as
      the two ``statfs`` lines of 2.10 obdfilter stats, are summed);
    * ``[usec]``/``[usecs]`` lines with a sum add the sum to ``latency_usecs[name]``;
    * ``read_bytes``/``write_bytes`` ``[bytes]`` lines give ``read_bytes``/``write_bytes``
      from their sum and count as operations ``read``/``write`` unless the block has its
      own ``read``/``write`` line (2.12+), so counts mean the same in every version;
    * ``openclosetime`` (client, 2.15) gives ``open_closes`` and ``open_time_usecs``;
      ``opencount`` is skipped: neither is an operation nor a latency.
    """
    block = StatsBlock()
    operations = block.operations
    latency = block.latency_usecs
    fallback: dict[str, int] = {}
    for line in text.splitlines():
        match = _STATS_LINE.fullmatch(line)
        if match is None:
            head = line.split(None, 1)
            if head and head[0] not in _STATS_HEADERS:
                block.errors += 1
            continue
        name, samples_text, unit, _min, _max, total, _sumsq = match.groups()
        samples = int(samples_text)
        unit = unit.lower()
        if name in _NOT_OPERATIONS:
            if name == _OPEN_TIME and unit in _LATENCY_UNITS:
                block.open_closes = (block.open_closes or 0) + samples
                block.open_time_usecs = (block.open_time_usecs or 0) + int(total or 0)
            continue
        as_op = _BYTES_LINES.get(name) if unit == "bytes" else None
        if as_op is not None:
            fallback[as_op] = fallback.get(as_op, 0) + samples
            if total is not None:
                if name == "read_bytes":
                    block.read_bytes = (block.read_bytes or 0) + int(total)
                else:
                    block.write_bytes = (block.write_bytes or 0) + int(total)
            continue
        operations[name] = operations.get(name, 0) + samples
        if total is not None and unit in _LATENCY_UNITS:
            latency[name] = latency.get(name, 0) + int(total)
    for op, samples in fallback.items():
        if op not in operations:
            operations[op] = samples
    return block


# --- job_stats ---------------------------------------------------------------------------

# The patterns below start with a literal newline, so the regex engine hops from line to
# line instead of trying every character (``^`` with MULTILINE is several times slower on a
# 20 MB job_stats), and use possessive quantifiers so a line that does not match (an
# operation with zero samples, most lines of a real job_stats) fails without backtracking.
_JOB_START = re.compile(r"\n- job_id:[ \t]*+([^\n]*)")
_JOB_FIRST = re.compile(r"- job_id:[ \t]*+([^\n]*)")
#: an operation line with a non-zero sample count; zero lines are never matched
_JOB_OP = re.compile(
    r"\n[ \t]++([A-Za-z_][A-Za-z0-9_]*+):[ \t]*+\{[ \t]*+samples:[ \t]*+0*+([1-9][0-9]*+)"
    r"[ \t]*+,[ \t]*+unit:[ \t]*+[A-Za-z]++(?:[ \t]*+,[ \t]*+min:[ \t]*+[0-9]++[ \t]*+,"
    r"[ \t]*+max:[ \t]*+[0-9]++[ \t]*+,[ \t]*+sum:[ \t]*+([0-9]++))?[^\n]*\}",
    re.ASCII,
)
_NONBLANK = re.compile(r"^[ \t]*\S", re.M)
_PREAMBLE = re.compile(r"^[ \t]*job_stats:[ \t]*$", re.M)
_ESCAPE = re.compile(r"\\(.)")
#: what every recognised line of a job entry contains (counted, not matched, for speed)
_JOB_LINE_MARKERS = ("{ samples:", "_time:")  # _time: snapshot_time, start_time, elapsed_time


@dataclass(slots=True)
class JobStatsResult:
    """The jobs of one target's job_stats, in file order, plus unplaced lines."""

    jobs: list[ClientIO] = field(default_factory=list)
    errors: int = 0


def _job_id(raw: str) -> str:
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        inner = raw[1:-1]
        if raw[0] == '"' and "\\" in inner:
            inner = _ESCAPE.sub(r"\1", inner)
        elif raw[0] == "'":
            inner = inner.replace("''", "'")
        return inner
    return raw


def _unplaced(preamble: str) -> int:
    """Non-blank lines before the first job other than the ``job_stats:`` line."""
    return len(_NONBLANK.findall(preamble)) - len(_PREAMBLE.findall(preamble))


def parse_job_stats(text: str) -> JobStatsResult:
    """Parse a ``job_stats`` text of an OST or MDT (2.10 to 2.15 forms); never raises.

    Accepts bare (2.10) and quoted (2.12+) job ids, count-only ``{ samples: N, unit: reqs }``
    entries, entries with or without ``sumsq`` (and trailing fields such as ``hist``), and
    ``snapshot_time``/``start_time``/``elapsed_time`` lines. Operations with zero samples
    are left out (and not even matched: that is most lines of a real job_stats).
    ``read_bytes``/``write_bytes`` give the byte sums; the ``read``/``write`` counts come
    from the ``read``/``write`` lines, or from the ``read_bytes``/``write_bytes`` sample
    counts where there are none (2.10). Entries repeating a job id are summed.

    ``errors`` counts lines before the first job other than ``job_stats:``, and lines in
    the job entries that carry none of the markers of a job line (``- job_id:``,
    ``{ samples:``, ``snapshot_time:``, ``start_time:``, ``elapsed_time:``).
    """
    starts = [(match.start(), match.end(), match[1]) for match in _JOB_START.finditer(text)]
    head = _JOB_FIRST.match(text)
    if head is not None:
        starts.insert(0, (0, head.end(), head[1]))
    if not starts:
        return JobStatsResult([], _unplaced(text))
    first = starts[0][0]
    errors = _unplaced(text[:first])
    # every line from the first job on is either blank, a job_id line or carries a marker
    lines = text.count("\n", first) + (1 if head is not None else 0)
    blank = text.count("\n\n", first) + (1 if text.endswith("\n") else 0)
    known = len(starts) + sum(text.count(marker, first) for marker in _JOB_LINE_MARKERS)
    errors += max(lines - blank - known, 0)

    jobs: dict[str, ClientIO] = {}
    findall = _JOB_OP.findall
    ends = [start for start, _, _ in starts[1:]]
    ends.append(len(text))
    for (_, body, raw_id), end in zip(starts, ends, strict=True):
        job_id = _job_id(raw_id)
        job = jobs.get(job_id)
        if job is None:
            job = jobs[job_id] = ClientIO(job_id)
        operations = job.operations
        read_samples = write_samples = 0
        for name, samples, total in findall(text, body, end):
            if name == "read_bytes":
                read_samples = int(samples)
                if total:
                    job.read_bytes += int(total)
            elif name == "write_bytes":
                write_samples = int(samples)
                if total:
                    job.write_bytes += int(total)
            else:
                operations[name] = operations.get(name, 0) + int(samples)
        if read_samples and "read" not in operations:
            operations["read"] = read_samples
        if write_samples and "write" not in operations:
            operations["write"] = write_samples
    return JobStatsResult(list(jobs.values()), errors)


# --- lctl get_param output ---------------------------------------------------------------

#: ``param.path=value``: a dotted name without blanks or '=' at the start of a line (a
#: literal newline first, as for job_stats: lctl output carries whole job_stats texts)
_LCTL_HEADER = re.compile(r"\n([A-Za-z][A-Za-z0-9_\-]*+(?:\.[^\s=]++)*+)=")
_LCTL_FIRST = re.compile(r"([A-Za-z][A-Za-z0-9_\-]*+(?:\.[^\s=]++)*+)=")


@dataclass(slots=True)
class LctlOutput:
    """``lctl get_param`` output split into ``param.path -> value`` (in output order)."""

    params: dict[str, str] = field(default_factory=dict)
    errors: int = 0


def parse_lctl_output(text: str) -> LctlOutput:
    """Split ``lctl get_param`` output into parameters; never raises.

    Each parameter starts with a ``param.path=`` line. A single-line value follows the
    ``=`` on the same line (``obdfilter.fs-OST0000.num_exports=2``; also
    ``...job_stats=job_stats:`` for an empty job_stats); a multi-line value (stats,
    job_stats) starts on the next line and runs to the next ``param.path=`` line.
    Non-blank lines before the first parameter are counted as errors. A parameter printed
    twice keeps its last value.
    """
    result = LctlOutput()
    headers = [(match.start() + 1, match.end(), match[1]) for match in _LCTL_HEADER.finditer(text)]
    head = _LCTL_FIRST.match(text)
    if head is not None:
        headers.insert(0, (0, head.end(), head[1]))
    if not headers:
        result.errors = len(_NONBLANK.findall(text))
        return result
    result.errors = len(_NONBLANK.findall(text, 0, headers[0][0]))
    ends = [start for start, _, _ in headers[1:]]
    ends.append(len(text))
    params = result.params
    for (_, value_start, name), end in zip(headers, ends, strict=True):
        value = text[value_start:end]
        if value.startswith("\n"):
            value = value[1:]
        params[name] = value
    return result


# --- health_check ------------------------------------------------------------------------

#: the states ``gotthard_lustre_health_state`` reports, in that order
HEALTH_STATES = ("healthy", "sick", "lbug")


def parse_health_check(text: str) -> str:
    """``healthy``, ``sick`` or ``lbug`` from the ``health_check`` parameter.

    Lustre prints ``healthy``; ``NOT HEALTHY`` (older: ``device <name> reported unhealthy``
    lines, then ``NOT HEALTHY``) when a target or service is unhealthy; ``LBUG`` after a
    kernel assertion (the node needs a reboot). Anything else raises ValueError.
    """
    if "LBUG" in text:
        return "lbug"
    stripped = text.strip()
    if stripped == "healthy":
        return "healthy"
    if "NOT HEALTHY" in text or "unhealthy" in text:
        return "sick"
    raise ValueError(f"not a health_check value: {text[:40]!r}")


# --- import ------------------------------------------------------------------------------

#: import states of a client that has a connection to the target's server: in use,
#: idle (2.12+ idle_timeout disconnects unused imports on purpose), or replaying and
#: recovering with it after a server restart (LustreRecoveryStuck judges those)
CONNECTED_IMPORT_STATES = ("FULL", "IDLE", "REPLAY", "REPLAY_LOCKS", "REPLAY_WAIT", "RECOVER")
_IMPORT_STATE = re.compile(r"^[ \t]+state:[ \t]*([A-Z_]+)[ \t]*$", re.M | re.ASCII)
_IMPORT_NID = re.compile(r"^[ \t]+current_connection:[ \t]*(\S+)[ \t]*$", re.M)


def parse_import(text: str) -> tuple[str, str]:
    """``(state, nid)`` of a client's ``import`` of a target (``osc.*.import``,
    ``mdc.*.import``): its connection ``state`` (``FULL``, ``DISCONN``, ``CONNECTING``, ...)
    and the LNet NID of the server it is connected to or trying (``current_connection``;
    "" when none is printed). ValueError when the text has no state."""
    state = _IMPORT_STATE.search(text)
    if state is None:
        raise ValueError(f"not an import: {text[:40]!r}")
    nid = _IMPORT_NID.search(text)
    peer = nid[1] if nid is not None and "@" in nid[1] else ""
    return state[1], peer


# --- recovery_status ---------------------------------------------------------------------

#: recovery states as Lustre prints them (``status:``), lower-cased; others are ``other``
RECOVERY_STATES = ("complete", "recovering", "waiting", "inactive", "other")
_RECOVERY_LINE = re.compile(r"[ \t]*([A-Za-z_]+):[ \t]*(\S[^\n]*?)?[ \t]*", re.ASCII)
_CLIENTS = re.compile(r"([0-9]+)(?:/([0-9]+))?", re.ASCII)


@dataclass(slots=True)
class RecoveryStatus(RecoveryProgress):
    """One target's parsed ``recovery_status`` and its unplaced lines."""

    errors: int = 0


def parse_recovery_status(text: str) -> RecoveryStatus:
    """Parse an OST's or MDT's ``recovery_status``; never raises.

    ``key: value`` lines (2.10 to 2.15): ``status`` (COMPLETE, RECOVERING, WAITING,
    INACTIVE, ...), ``completed_clients: A/B`` when complete, ``connected_clients: A/B``,
    ``completed_clients: A`` and ``time_remaining: S`` while recovering. Other keys
    (``recovery_start``, ``VBR``, ...) are understood and ignored; a line that is not
    ``key: value`` counts one error, as does a client count that is not a number.
    """
    result = RecoveryStatus()
    matches, result.errors = matching_lines(text, _RECOVERY_LINE)
    for match in matches:
        key, value = match[1], match[2] or ""
        if key == "status":
            status = value.lower()
            result.status = status if status in RECOVERY_STATES else "other"
        elif key in ("completed_clients", "connected_clients"):
            clients = _CLIENTS.fullmatch(value)
            if clients is None:
                result.errors += 1
                continue
            if key == "completed_clients":
                result.completed_clients = int(clients[1])
            else:
                result.connected_clients = int(clients[1])
            if clients[2] is not None:
                result.total_clients = int(clients[2])
        elif key == "time_remaining":
            try:
                result.time_remaining_seconds = parse_int(value)
            except ValueError:
                result.errors += 1
    return result


# --- LNet statistics ---------------------------------------------------------------------

#: the fields of ``/proc/sys/lnet/stats`` (debugfs ``lnet/stats`` from 2.12), in order
_LNET_FIELDS = (
    "msgs_alloc",
    "msgs_max",
    "errors",
    "send_count",
    "recv_count",
    "route_count",
    "drop_count",
    "send_length",
    "recv_length",
    "route_length",
    "drop_length",
)
_LNET_YAML = re.compile(r"^[ \t]*([a-z_]+):[ \t]*([0-9]+)[ \t]*$", re.M | re.ASCII)


@dataclass(slots=True)
class LnetStats:
    """Node-wide LNet message counters; the names of ``lnetctl stats show``."""

    values: dict[str, int] = field(default_factory=dict)
    errors: int = 0


def parse_lnet_stats(text: str) -> LnetStats:
    """Parse LNet's ``stats`` file or ``lnetctl stats show`` output; never raises.

    The file is one line of 11 numbers (``msgs_alloc msgs_max errors send_count recv_count
    route_count drop_count send_length recv_length route_length drop_length``); lnetctl
    prints the same counters as ``name: value`` YAML under ``statistics:``. A file line
    that is not 11 numbers counts one error.
    """
    result = LnetStats()
    if ":" in text:
        result.values = {key: int(value) for key, value in _LNET_YAML.findall(text)}
        return result
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        if len(fields) != len(_LNET_FIELDS) or not all(f.isascii() and f.isdigit() for f in fields):
            result.errors += 1
            continue
        result.values = dict(zip(_LNET_FIELDS, map(int, fields), strict=True))
    return result
