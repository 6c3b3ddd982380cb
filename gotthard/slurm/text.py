"""The Slurm commands' narrow text output: the argv that asks for exactly the table's
columns, and the pure parsers of what they print.

``sinfo`` and ``squeue`` are asked for the columns of :mod:`gotthard.slurm.fields` with
``-O NAME:0|,...`` (no width: never truncated, never padded; ``|`` after each cell);
``scontrol show reservation -o``, ``scontrol ping`` and ``sdiag`` print what they print.
Every parser is a pure function over text, so it can be tested on recorded output,
fuzzed, and benchmarked without Slurm; malformed input is counted, never raised.
"""

from __future__ import annotations

import math
import operator
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from gotthard.slurm.fields import (
    CONTROLLER_FIELDS,
    JOB_FIELDS,
    NODE_FIELDS,
    PARTITION_FIELDS,
    RESERVATION_FIELDS,
    SCHEDULER_COUNTERS,
    TextReader,
    controller_from,
    node_from,
    partition_from,
    requested_gpus,
    reservation_from,
)
from gotthard.slurm.snapshot import (
    Controller,
    JobTally,
    Node,
    Partition,
    PollOptions,
    Reservation,
    RunningJob,
    SchedulerStats,
    Share,
    unique_shares,
)

SEP = "|"
#: Errors a row's cells can raise when read.
ROW_ERRORS = (ValueError, ArithmeticError, TypeError)

NODE_COLUMNS = TextReader(NODE_FIELDS)
JOB_COLUMNS = TextReader(JOB_FIELDS)
PARTITION_COLUMNS = TextReader(PARTITION_FIELDS)
RESERVATION_KEYS = TextReader(RESERVATION_FIELDS)
PING_PARTS = TextReader(CONTROLLER_FIELDS)


def long_format(columns: Sequence[str]) -> str:
    """``-O`` for *columns*: ``:0`` is "no width", the suffix is our separator."""
    return ",".join(f"{name}:0{SEP}" for name in columns)


def squeue_argv(squeue: str = "squeue") -> list[str]:
    # --states=all keeps completed/failed/cancelled jobs visible for MinJobAge.
    return [squeue, "-a", "-r", "-h", "--states=all", "-O", long_format(JOB_COLUMNS.columns)]


def sinfo_nodes_argv(sinfo: str = "sinfo", names: Sequence[str] = ()) -> list[str]:
    """One row per node and partition; only the nodes *names* lists, when it lists any."""
    only = ["-n", ",".join(names)] if names else []
    return [sinfo, "-a", "-h", "-N", *only, "-O", long_format(NODE_COLUMNS.columns)]


def sinfo_partitions_argv(sinfo: str = "sinfo") -> list[str]:
    """The partition view: sinfo groups rows by the fields printed and sums the node
    count and the CPUs, so a partition is one row (or a few that add up)."""
    return [sinfo, "-a", "-h", "-O", long_format(PARTITION_COLUMNS.columns)]


def reservations_argv(scontrol: str = "scontrol") -> list[str]:
    # -o: one reservation per line, KEY=VALUE words
    return [scontrol, "show", "reservation", "-o"]


def _cells(line: str, columns: int) -> list[str] | None:
    """The cells of one ``-O`` row, or None when it has not *columns* of them. The last
    column may hold the separator (free text, a node's reason): it takes the rest."""
    cells = line.split(SEP, columns - 1)
    if len(cells) != columns:
        return None
    last = cells[-1]
    cells[-1] = last[:-1] if last.endswith(SEP) else last
    return cells


# --- squeue -----------------------------------------------------------------------------------

_N_JOB = len(JOB_COLUMNS.columns)
_JOB = {name: index for index, name in enumerate(JOB_COLUMNS.columns)}
_STATE, _PARTITION, _ACCOUNT, _CPUS, _REASON, _USER, _ID = (
    _JOB[column]
    for column in ("State", "Partition", "Account", "NumCPUs", "Reason", "UserName", "JobID")
)
assert (_USER, _ID) == (_N_JOB - 2, _N_JOB - 1), "squeue's user and job id must come last"
#: What a job asks for: node and task counts, then the GPUs per job, node, task, socket;
#: adjacent columns, so that one slice of a row is the key of its GPU count.
_REQUEST_COLUMNS = (
    "NumNodes",
    "NumTasks",
    *(field.column for field in JOB_COLUMNS.fields if field.name.startswith("gpus_per_")),
)
_REQUEST = slice(_JOB["NumNodes"], _JOB["NumNodes"] + len(_REQUEST_COLUMNS))
assert JOB_COLUMNS.columns[_REQUEST] == _REQUEST_COLUMNS, "squeue's request columns adjacent"
_KIND = {field.column: field.kind for field in JOB_COLUMNS.fields}
_TEXT, _COUNT, _GPUS = _KIND["Account"].text, _KIND["NumCPUs"].text, _KIND["tres-per-job"].text


@dataclass(frozen=True, slots=True)
class ParsedJobs:
    tally: JobTally
    errors: int


_is_running_row = operator.methodcaller("startswith", "RUNNING" + SEP)


def parse_squeue(text: str, options: PollOptions) -> ParsedJobs:
    """Aggregate the rows of :func:`squeue_argv` output.

    Rows are first counted by their text without the trailing job id (and user, when
    per-user labels are off) using :class:`Counter`, so a queue of many similar jobs
    (arrays, sweeps) is parsed once per distinct row, not once per job. Every
    non-blank row ends up either counted as a job or counted in ``errors``.
    """
    tally = JobTally(options)
    lines = text.splitlines()
    if options.per_user:
        keys = (line[: line.rfind(SEP, 0, -1) + 1] for line in lines)
    else:
        keys = (line[: line.rfind(SEP, 0, line.rfind(SEP, 0, -1)) + 1] for line in lines)
    groups = Counter(keys)
    errors = groups.pop("", 0) - lines.count("")
    n_fields = _N_JOB - 1 if options.per_user else _N_JOB - 2
    state, partition, account, cpus, reason, user = (
        _STATE,
        _PARTITION,
        _ACCOUNT,
        _CPUS,
        _REASON,
        _USER,
    )
    add, count_cpus, text, gpus_of = tally.add_group, _COUNT, _TEXT, _gpus
    gpu_cache: dict[tuple[str, ...], int] = {}
    for key, count in groups.items():
        fields = key.split(SEP)
        # "f0|...|f10|" splits into the fields plus an empty tail
        if len(fields) != n_fields + 1 or not fields[state] or not fields[partition]:
            errors += count
            continue
        try:
            gpus = gpus_of(fields, gpu_cache)
            n_cpus = count_cpus(fields[cpus])
        except ROW_ERRORS:
            errors += count
            continue
        add(
            fields[state].lower(),
            fields[partition],
            text(fields[account]),
            fields[user] if options.per_user else "",
            fields[reason],
            count,
            n_cpus * count,
            gpus * count,
        )
    if options.job_info:
        running: list[RunningJob] = []
        for line in filter(_is_running_row, lines):
            fields = line.split(SEP)
            if len(fields) != _N_JOB + 1 or not fields[_ID]:
                continue  # a malformed row, already counted above
            running.append(
                RunningJob(fields[_ID], fields[user], text(fields[account]), fields[partition])
            )
        tally.running = running
    return ParsedJobs(tally, errors)


def _gpus(fields: list[str], cache: dict[tuple[str, ...], int]) -> int:
    """GPUs of a squeue row from its GRES/TRES fields, memoised per distinct request."""
    key = tuple(fields[_REQUEST])
    gpus = cache.get(key)
    if gpus is None:
        nodes, tasks, per_job, per_node, per_task, per_socket = key
        gpus = requested_gpus(
            _GPUS(per_job),
            _GPUS(per_node),
            _GPUS(per_task),
            _GPUS(per_socket),
            _COUNT(nodes),
            _COUNT(tasks),
            1,
        )
        cache[key] = gpus
    return gpus


# --- sinfo --------------------------------------------------------------------------------

#: The two columns that differ between a node's rows (one per partition), and the rest.
_NODE_KEYS = ("NodeList", "Partition")
_NODE_REST = TextReader(tuple(f for f in NODE_FIELDS if f.column not in _NODE_KEYS))
assert NODE_COLUMNS.columns == (*_NODE_KEYS, *_NODE_REST.columns), "sinfo -N: name, partition first"
_NODE_KIND = {field.name: field.kind for field in NODE_FIELDS}
_NAME, _PARTITIONS = _NODE_KIND["name"].text, _NODE_KIND["partitions"].text
_NAME_AT, _PARTITIONS_AT = Node._fields.index("name"), Node._fields.index("partitions")


@dataclass(frozen=True, slots=True)
class ParsedNodes:
    nodes: tuple[Node, ...]
    errors: int


def parse_sinfo_nodes(text: str) -> ParsedNodes:
    """Parse :func:`sinfo_nodes_argv` output: one row per node and partition.

    A node's rows differ only in the partition: their partitions are merged. Nodes of a
    homogeneous cluster print identical rows but for their names, so the fields after
    name and partition are read once per distinct row remainder.
    """
    errors = 0
    merged: dict[str, tuple[list[str], Node]] = {}
    parsed: dict[str, Node | None] = {}
    for line in text.splitlines():
        if not line:
            continue
        name, _, rest = line.partition(SEP)
        partition, _, rest = rest.partition(SEP)
        name = _NAME(name)
        if not name or not rest:
            errors += 1
            continue
        seen = merged.get(name)
        if seen is not None:
            seen[0].extend(p for p in _PARTITIONS(partition) if p not in seen[0])
            continue
        template = parsed.get(rest, False)
        if template is False:
            template = parsed[rest] = _node_template(rest)
        if template is None:
            errors += 1
            continue
        merged[name] = (list(_PARTITIONS(partition)), template)
    nodes = []
    for name, (partitions, template) in merged.items():
        values = list(template)
        values[_NAME_AT], values[_PARTITIONS_AT] = name, tuple(partitions)
        nodes.append(Node._make(values))
    return ParsedNodes(tuple(nodes), errors)


def _node_template(rest: str) -> Node | None:
    """The node a row's cells after name and partition describe (no name, no partitions
    yet); None when malformed."""
    cells = _cells(rest, len(_NODE_REST.columns))
    if cells is None:
        return None
    try:
        found = _NODE_REST.row(cells)
        return node_from({**found, "name": "", "partitions": ()})
    except ROW_ERRORS:
        return None


def parse_sinfo_partitions(text: str) -> tuple[tuple[Partition, ...], int]:
    """Parse :func:`sinfo_partitions_argv` output. Should sinfo split a partition over
    several rows, their node and CPU counts add up."""
    partitions: dict[str, Partition] = {}
    errors = 0
    for line in text.splitlines():
        if not line:
            continue
        cells = _cells(line, len(PARTITION_COLUMNS.columns))
        try:
            if cells is None:
                raise ValueError(line)
            partition = partition_from(PARTITION_COLUMNS.row(cells))
        except ROW_ERRORS:
            errors += 1
            continue
        seen = partitions.get(partition.name)
        if seen is not None:
            partition = Partition(
                partition.name,
                partition.state,
                partition.is_default or seen.is_default,
                (partition.total_cpus or 0) + (seen.total_cpus or 0),
                (partition.total_nodes or 0) + (seen.total_nodes or 0),
            )
        partitions[partition.name] = partition
    return tuple(partitions.values()), errors


# --- scontrol -------------------------------------------------------------------------------


def _content_lines(text: str, *skip: str) -> Iterator[str]:
    """The stripped, non-empty lines of *text*, less those starting with one of *skip*."""
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(skip):
            yield line


def parse_reservations(text: str) -> tuple[tuple[Reservation, ...], int]:
    """Parse ``scontrol show reservation -o``: one ``KEY=VALUE ...`` line per reservation.

    ``No reservations in the system`` is an empty result, not an error.
    """
    reservations: list[Reservation] = []
    errors = 0
    for line in _content_lines(text, "No reservations"):
        words = dict(word.partition("=")[::2] for word in line.split())
        try:
            reservations.append(reservation_from(RESERVATION_KEYS.values(words)))
        except ROW_ERRORS:
            errors += 1
    return tuple(reservations), errors


# --- sshare ----------------------------------------------------------------------------------

#: The columns of ``sshare -P`` that a :class:`Share` is read from, in this order.
SSHARE_COLUMNS = ("Account", "User", "RawUsage", "EffectvUsage", "FairShare")


def sshare_argv(sshare: str = "sshare") -> list[str]:
    # -a: every user association too; -n -P: no header, '|' between the columns
    return [sshare, "-a", "-n", "-P", "-o", ",".join(SSHARE_COLUMNS)]


def parse_sshare(text: str) -> tuple[tuple[Share, ...], int]:
    """Parse :func:`sshare_argv`'s output: one association a line, an account's name
    indented by its depth, the factor left empty on an account's line."""
    shares: list[Share] = []
    errors = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = line.split(SEP)
        try:
            if len(cells) != len(SSHARE_COLUMNS):
                raise ValueError(f"{len(cells)} columns")
            account, user, raw, effective, factor = (cell.strip() for cell in cells)
            if not account:
                raise ValueError("no account")
            shares.append(
                Share(
                    account,
                    user,
                    _finite(raw),
                    _finite(effective),
                    _finite(factor) if user and factor else None,
                )
            )
        except ROW_ERRORS:
            errors += 1
    return unique_shares(shares), errors


def _finite(cell: str) -> float:
    number = float(cell)
    if not math.isfinite(number):
        raise ValueError(f"not a finite number: {cell}")
    return number


_PING_LINE = re.compile(
    r"^Slurmctld\((?P<mode>[^)]*)\) at (?P<host>\S+) is (?P<state>UP|DOWN)\b", re.IGNORECASE
)


#: ``sacctmgr ping`` (Slurm 24.11 and later; src/sacctmgr/sacctmgr.c ``_print_db_ping``):
#: ``slurmdbd(primary) at dbd1 is UP``, one line per slurmdbd, primary first.
_DBD_PING_LINE = re.compile(
    r"^slurmdbd\((?P<mode>primary|backup)\) at (?P<host>\S+) is (?P<state>UP|DOWN)$"
)


def parse_dbd_ping(text: str) -> tuple[Controller, ...]:
    """Every slurmdbd ``sacctmgr ping`` lists, with whether it answered. Anything else
    (an older sacctmgr without ``ping``, no slurmdbd configured, an error) is no evidence
    either way: an empty tuple, never a slurmdbd reported down."""
    found: list[Controller] = []
    for line in text.splitlines():
        match = _DBD_PING_LINE.match(line.strip())
        if match is not None:
            found.append(
                Controller(match["host"], match["mode"], len(found), match["state"] == "UP")
            )
    return tuple(found)


def parse_ping(text: str) -> tuple[tuple[Controller, ...], int]:
    """Parse ``scontrol ping``: one ``Slurmctld(primary) at ctl1 is UP`` line per controller.

    Controllers are listed in ``SlurmctldHost`` order, which is their index. The banner
    scontrol adds when a controller is down (lines of ``*``) is skipped; any other line is
    counted as an error.
    """
    controllers: list[Controller] = []
    errors = 0
    for line in _content_lines(text, "*"):
        match = _PING_LINE.match(line)
        if match is None:
            errors += 1
            continue
        found = PING_PARTS.values(match.groupdict())
        controllers.append(controller_from(found, len(controllers)))
    return tuple(controllers), errors


# --- sdiag ----------------------------------------------------------------------------------

_SDIAG_RPC = re.compile(
    r"^\s*(\S+)\s+\(\s*\d+\)\s+count:(\d+)\s+ave_time:(\d+)\s+total_time:(\d+)\s*$"
)
#: sdiag's (section, label) of each scheduler counter.
_SDIAG_KEYS = {
    (counter.sdiag_section, counter.sdiag_label): counter.field for counter in SCHEDULER_COUNTERS
}

#: Headings that open a section of sdiag's output, and the section's name.
_SDIAG_SECTIONS = (
    ("Main schedule statistics", "main"),
    ("Backfilling stats", "backfill"),
    ("Remote Procedure Call statistics by message type", "rpc_type"),
    ("Remote Procedure Call statistics by user", "rpc_user"),
    ("Pending RPC statistics", "pending"),
)


def _sdiag_section(line: str) -> str:
    """The section a line of sdiag output opens, or ``""`` when it is no heading."""
    for heading, section in _SDIAG_SECTIONS:
        if line.startswith(heading):
            return section
    return ""


def parse_sdiag(text: str) -> tuple[SchedulerStats, int]:
    """Parse plain ``sdiag`` output (22.05 has no ``--json``). Times become seconds."""
    values: dict[str, float] = {}
    by_type: dict[str, tuple[int, float]] = {}
    by_user: dict[str, tuple[int, float]] = {}
    section = ""
    errors = 0
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("*"):
            continue
        heading = _sdiag_section(line)
        if heading:
            section = heading
            continue
        if section in ("rpc_type", "rpc_user"):
            match = _SDIAG_RPC.match(raw)
            if match is None:
                errors += 1
                continue
            stat = (int(match.group(2)), float(match.group(4)))
            (by_type if section == "rpc_type" else by_user)[match.group(1)] = stat
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        field = _SDIAG_KEYS.get(("" if section not in ("main", "backfill") else section, key))
        if field is None:
            field = _SDIAG_KEYS.get(("", key))
        if field is None:
            continue
        try:
            number = float(value.split()[0])
        except (IndexError, ValueError):
            errors += 1
            continue
        if not math.isfinite(number):
            errors += 1  # "inf", "nan": a counter no integer can hold
            continue
        values[field] = number
    if not values:
        raise ValueError("no statistics found in sdiag output")
    return SchedulerStats.from_counters(values, by_type, by_user), errors
