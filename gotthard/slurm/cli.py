"""The ``cli`` Slurm backend: narrow squeue/sinfo formats plus sdiag.

Costs on the controller per poll: one ``REQUEST_JOB_INFO`` (squeue), two
``REQUEST_NODE_INFO``/``REQUEST_PARTITION_INFO`` pairs (sinfo), one
``REQUEST_STATS_INFO`` (sdiag) and, with the probe, one ping and one
``sbatch --test-only``. ``squeue --json`` is never used: on 10k jobs it costs about
20 times the time and 1,000 times the memory of a narrow format.

The parsers are pure functions over text so they can be tested on recorded output,
fuzzed, and benchmarked without Slurm.
"""

from __future__ import annotations

import math
import operator
import os
import re
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gotthard.exporters.slurm.snapshot import (
    SCHEDULER_COUNTERS,
    Controller,
    JobTally,
    Node,
    Partition,
    PollOptions,
    ProbeResult,
    Reservation,
    RunningJob,
    SchedulerStats,
    SlurmSnapshot,
    SlurmUnavailable,
    controller_role,
    gpus_from_tres,
    job_gpus,
    reservation_flags,
)
from gotthard.slurm_state import normalize

SEP = "|"

# squeue -O fields. User and job id come last so that rows differing only in them
# collapse into one group before any per-field work is done.
SQUEUE_FIELDS = (
    "State",
    "Partition",
    "Account",
    "NumCPUs",
    "NumNodes",
    "NumTasks",
    "tres-per-job",
    "tres-per-node",
    "tres-per-task",
    "tres-per-socket",
    "Reason",
    "UserName",
    "JobID",
)
SINFO_NODE_FIELDS = (
    "NodeList",
    "Partition",
    "StateComplete",
    "CPUsState",
    "Memory",
    "AllocMem",
    "Gres",
    "GresUsed",
    "Reason",
)
#: Partition view: name, availability, node count and CPUs alloc/idle/other/total. sinfo
#: groups rows by the fields printed, and %D/%C are sums, so a partition is one row.
SINFO_PARTITION_FORMAT = "%P|%a|%D|%C"

_N_JOB = len(SQUEUE_FIELDS)
_N_NODE = len(SINFO_NODE_FIELDS)
_NULLS = frozenset(("", "(null)", "N/A", "n/a", "none", "None"))
MIB = 1024 * 1024


def _long_format(fields: tuple[str, ...]) -> str:
    # ":0" means "no width" (never truncated, never padded); the suffix is our separator.
    return ",".join(f"{name}:0{SEP}" for name in fields)


def squeue_argv(squeue: str = "squeue") -> list[str]:
    # --states=all keeps completed/failed/cancelled jobs visible for MinJobAge.
    return [squeue, "-a", "-r", "-h", "--states=all", "-O", _long_format(SQUEUE_FIELDS)]


def sinfo_nodes_argv(sinfo: str = "sinfo") -> list[str]:
    return [sinfo, "-a", "-h", "-N", "-O", _long_format(SINFO_NODE_FIELDS)]


def sinfo_partitions_argv(sinfo: str = "sinfo") -> list[str]:
    return [sinfo, "-a", "-h", "-o", SINFO_PARTITION_FORMAT]


def reservations_argv(scontrol: str = "scontrol") -> list[str]:
    # -o: one reservation per line, KEY=VALUE words
    return [scontrol, "show", "reservation", "-o"]


#: Slurm's NO_VAL/INFINITE sentinels (0xfffffffe, 0xffffffff) print as huge numbers.
_UNSET = 0xFFFFFFFE


def _int(text: str) -> int:
    text = text.strip()
    if text in _NULLS:
        return 0
    value = int(text)
    return 0 if value >= _UNSET else value


def _null(text: str) -> str:
    return "" if text in _NULLS else text


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
    gpu_cache: dict[tuple[str, ...], int] = {}
    for key, count in groups.items():
        fields = key.split(SEP)
        # "f0|...|f10|" splits into the fields plus an empty tail
        if len(fields) != n_fields + 1 or not fields[0] or not fields[1]:
            errors += count
            continue
        try:
            gpus = _gpus(fields, gpu_cache)
            cpus = _int(fields[3])
        except (ValueError, ArithmeticError):
            errors += count
            continue
        tally.add_group(
            fields[0].lower(),
            fields[1],
            _null(fields[2]),
            fields[11] if options.per_user else "",
            fields[10],
            count,
            cpus * count,
            gpus * count,
        )
    if options.job_info:
        running: list[RunningJob] = []
        for line in filter(_is_running_row, lines):
            fields = line.split(SEP)
            if len(fields) != _N_JOB + 1 or not fields[12]:
                continue  # a malformed row, already counted above
            running.append(RunningJob(fields[12], fields[11], _null(fields[2]), fields[1]))
        tally.running = running
    return ParsedJobs(tally, errors)


def _gpus(fields: list[str], cache: dict[tuple[str, ...], int]) -> int:
    """GPUs of a squeue row from its GRES/TRES fields, memoised per distinct request."""
    key = tuple(fields[4:10])
    gpus = cache.get(key)
    if gpus is None:
        gpus = job_gpus(
            per_job=fields[6],
            per_node=fields[7],
            per_task=fields[8],
            per_socket=fields[9],
            nodes=_int(fields[4]),
            tasks=_int(fields[5]),
        )
        cache[key] = gpus
    return gpus


def _cpu_states(text: str) -> tuple[int, int, int, int]:
    alloc, idle, other, total = (int(part) for part in text.split("/"))
    return alloc, idle, other, total


@dataclass(frozen=True, slots=True)
class ParsedNodes:
    nodes: tuple[Node, ...]
    default_partition: str
    errors: int


def parse_sinfo_nodes(text: str) -> ParsedNodes:
    """Parse :func:`sinfo_nodes_argv` output: one row per node and partition.

    Nodes of a homogeneous cluster print identical rows but for their names, so the
    parsed values are memoised per distinct row remainder.
    """
    errors = 0
    default = ""
    merged: dict[str, tuple[list[str], tuple]] = {}
    parsed: dict[str, tuple | None] = {}
    for line in text.splitlines():
        if not line:
            continue
        name, _, rest = line.partition(SEP)
        partition, _, rest = rest.partition(SEP)
        if partition.endswith("*"):
            partition = partition[:-1]
            default = partition
        if not name or not rest:
            errors += 1
            continue
        seen = merged.get(name)
        if seen is not None:
            if partition and partition not in seen[0]:
                seen[0].append(partition)
            continue
        values = parsed.get(rest, False)
        if values is False:
            values = parsed[rest] = _node_values(rest)
        if values is None:
            errors += 1
            continue
        merged[name] = ([partition] if partition else [], values)
    nodes = tuple(
        Node(name, *values[:2], tuple(partitions), *values[2:])
        for name, (partitions, values) in merged.items()
    )
    return ParsedNodes(nodes, default, errors)


def _node_values(rest: str) -> tuple | None:
    """The Node fields after name and partitions, in order; None when malformed."""
    fields = rest.split(SEP, _N_NODE - 3)
    if len(fields) != _N_NODE - 2:
        return None
    try:
        state, flags = normalize(fields[0])
        alloc, idle, other, total = _cpu_states(fields[1])
        memory = _int(fields[2]) * MIB
        memory_alloc = _int(fields[3]) * MIB
    except (ValueError, ArithmeticError):
        return None
    reason = _null(fields[6].rstrip(SEP).strip())
    gpus_total, gpus_alloc = gpus_from_tres(fields[4]), gpus_from_tres(fields[5])
    return (
        state,
        flags,
        alloc,
        idle,
        other,
        total,
        memory,
        memory_alloc,
        gpus_total,
        gpus_alloc,
        reason,
    )


def parse_sinfo_partitions(text: str) -> tuple[tuple[Partition, ...], int]:
    """Parse :func:`sinfo_partitions_argv` output (``%P|%a`` rows are read too, totals unset).

    Should sinfo split a partition over several rows, their node and CPU counts add up.
    """
    partitions: dict[str, Partition] = {}
    errors = 0
    for line in text.splitlines():
        if not line:
            continue
        fields = line.split(SEP)
        name = fields[0].strip()
        if len(fields) not in (2, 4) or not name:
            errors += 1
            continue
        default = name.endswith("*")
        name = name.rstrip("*")
        total_nodes = total_cpus = None
        if len(fields) == 4:
            try:
                total_nodes = _int(fields[2])
                total_cpus = _cpu_states(fields[3])[3]
            except (ValueError, ArithmeticError):
                errors += 1
                continue
            seen = partitions.get(name)
            if seen is not None:
                total_nodes += seen.total_nodes or 0
                total_cpus += seen.total_cpus or 0
                default = default or seen.is_default
        availability = fields[1].strip().lower() or "unknown"
        partitions[name] = Partition(name, availability, default, total_cpus, total_nodes)
    return tuple(partitions.values()), errors


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
        fields = dict(word.partition("=")[::2] for word in line.split())
        name = fields.get("ReservationName", "")
        try:
            nodes = _int(fields.get("NodeCnt", "0"))
        except (ValueError, ArithmeticError):
            nodes = -1
        if not name or nodes < 0:
            errors += 1
            continue
        reservations.append(
            Reservation(
                name,
                fields.get("State", "").lower() or "unknown",
                _null(fields.get("PartitionName", "")),
                reservation_flags(_null(fields.get("Flags", "")).split(",")),
                nodes,
            )
        )
    return tuple(reservations), errors


_PING_LINE = re.compile(r"^Slurmctld\(([^)]*)\) at (\S+) is (UP|DOWN)\b", re.IGNORECASE)


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
        mode, host, state = match.groups()
        index = len(controllers)
        controllers.append(
            Controller(host, controller_role(mode, index), index, state.upper() == "UP")
        )
    return tuple(controllers), errors


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


# --- running the commands ----------------------------------------------------------------

_COMMANDS = ("squeue", "sinfo", "sdiag", "scontrol", "sbatch")


def _clean_env() -> dict[str, str]:
    """The environment for Slurm commands: C locale, no user output overrides."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("SQUEUE_", "SINFO_", "SBATCH_", "SLURM_TIME_FORMAT"))
    }
    env["LC_ALL"] = "C"
    return env


@dataclass
class _Run:
    argv: list[str]
    process: subprocess.Popen[str] | None
    started: float
    stdout: str = ""
    stderr: str = ""
    returncode: int | None = None
    error: str = ""
    duration: float = 0.0


class CliBackend:
    """Runs the Slurm client commands and parses their narrow outputs."""

    name = "cli"

    def __init__(self, *, bin_dir: str = "", timeout: float = 10.0) -> None:
        self.timeout = timeout
        self.bin_dir = bin_dir
        self.paths = {command: self._resolve(command) for command in _COMMANDS}
        #: Slurm release from ``sinfo --version`` (read once; it is local, no RPC).
        self.version = ""

    def _resolve(self, command: str) -> str | None:
        if self.bin_dir:
            candidate = Path(self.bin_dir) / command
            return str(candidate) if os.access(candidate, os.X_OK) else None
        return shutil.which(command)

    def missing(self) -> list[str]:
        return [command for command, path in self.paths.items() if path is None]

    def _start(self, argv: list[str], env: dict[str, str]) -> _Run:
        started = time.monotonic()
        try:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
                env=env,
            )
        except OSError as err:
            return _Run(argv, None, started, error=f"{argv[0]}: {err.strerror or err}")
        return _Run(argv, process, started)

    def _finish(self, run: _Run, deadline: float) -> _Run:
        if run.process is None:
            return run
        try:
            run.stdout, run.stderr = run.process.communicate(
                timeout=max(deadline - time.monotonic(), 0.01)
            )
            run.returncode = run.process.returncode
            if run.returncode != 0:
                message = run.stderr.strip().splitlines()
                run.error = f"{Path(run.argv[0]).name} exited {run.returncode}: " + (
                    message[-1] if message else "no message"
                )
        except subprocess.TimeoutExpired:
            run.process.kill()
            run.process.communicate()
            run.error = f"{Path(run.argv[0]).name} timed out after {self.timeout:g}s"
        run.duration = time.monotonic() - run.started
        return run

    def poll(self, options: PollOptions) -> SlurmSnapshot:
        missing = [c for c in ("squeue", "sinfo") if self.paths[c] is None]
        if missing:
            where = self.bin_dir or "PATH"
            raise SlurmUnavailable(f"{', '.join(missing)} not found in {where}")
        env = _clean_env()
        deadline = time.monotonic() + self.timeout
        # All commands run at once: a poll costs the slowest, not the sum.
        runs: dict[str, _Run] = {
            "squeue": self._start(squeue_argv(self.paths["squeue"] or "squeue"), env),
            "nodes": self._start(sinfo_nodes_argv(self.paths["sinfo"] or "sinfo"), env),
            "partitions": self._start(sinfo_partitions_argv(self.paths["sinfo"] or "sinfo"), env),
        }
        if self.paths["sdiag"]:
            runs["sdiag"] = self._start([self.paths["sdiag"] or "sdiag"], env)
        if self.paths["scontrol"]:
            runs["reservations"] = self._start(reservations_argv(self.paths["scontrol"]), env)
        if options.probe and self.paths["scontrol"]:
            runs["ping"] = self._start([self.paths["scontrol"] or "scontrol", "ping"], env)
        if options.probe and self.paths["sbatch"]:
            runs["submit"] = self._start(
                [
                    self.paths["sbatch"] or "sbatch",
                    "--test-only",
                    "--job-name=gotthard-probe",
                    "--output=/dev/null",
                    "--wrap=true",
                ],
                env,
            )
        if not self.version:
            runs["version"] = self._start([self.paths["sinfo"] or "sinfo", "--version"], env)
        for run in runs.values():
            self._finish(run, deadline)
        for key in ("squeue", "nodes", "partitions"):
            if runs[key].error:
                raise SlurmUnavailable(runs[key].error)
        version = runs.get("version")
        if version is not None and not version.error:
            self.version = (version.stdout.split() or [""])[-1]
        outputs = {key: CommandOutput(r.stdout, r.error, r.duration) for key, r in runs.items()}
        return assemble(outputs, options, backend=self.name, version=self.version)


@dataclass(frozen=True, slots=True)
class CommandOutput:
    stdout: str
    error: str = ""
    duration: float = 0.0


def assemble(
    outputs: dict[str, CommandOutput],
    options: PollOptions,
    *,
    backend: str = "cli",
    version: str = "",
) -> SlurmSnapshot:
    """Build a snapshot from the outputs of one poll's commands.

    Keys: ``squeue``, ``nodes``, ``partitions`` (required), ``sdiag``, ``reservations``,
    ``ping`` and ``submit`` (optional). Malformed output is counted in ``errors``, never raised.
    """
    jobs = parse_squeue(outputs["squeue"].stdout, options)
    nodes = parse_sinfo_nodes(outputs["nodes"].stdout)
    partitions, partition_errors = parse_sinfo_partitions(outputs["partitions"].stdout)
    errors = jobs.errors + nodes.errors + partition_errors
    scheduler = None
    sdiag = outputs.get("sdiag")
    if sdiag is None or sdiag.error:
        errors += 1
    else:
        try:
            scheduler, sdiag_errors = parse_sdiag(sdiag.stdout)
            errors += sdiag_errors
        except (ValueError, ArithmeticError):
            errors += 1
    reservations = None
    listing = outputs.get("reservations")
    if listing is not None and listing.error:
        errors += 1
    elif listing is not None:
        reservations, reservation_errors = parse_reservations(listing.stdout)
        errors += reservation_errors
    probes = []
    controllers: tuple[Controller, ...] = ()
    ping = outputs.get("ping")
    if ping is not None:
        ok = not ping.error and " is UP" in ping.stdout
        probes.append(ProbeResult("ping", ok, ping.duration, ping.error or ping.stdout[:200]))
        # scontrol exits non-zero when a controller is down but still lists them all.
        controllers, ping_errors = parse_ping(ping.stdout)
        errors += ping_errors
    submit = outputs.get("submit")
    if submit is not None:
        probes.append(ProbeResult("submit", not submit.error, submit.duration, submit.error))
    return SlurmSnapshot(
        up=True,
        job_groups=jobs.tally.groups(),
        running_jobs=tuple(jobs.tally.running),
        nodes=nodes.nodes,
        partitions=partitions,
        scheduler=scheduler,
        probes=tuple(probes),
        errors=errors,
        backend=backend,
        version=version,
        reservations=reservations,
        controllers=controllers,
    )
