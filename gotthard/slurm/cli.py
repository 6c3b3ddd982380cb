"""The ``cli`` Slurm backend: the narrow ``squeue``/``sinfo`` formats plus ``sdiag``; and
the one reader of ``sinfo``'s node listing, for the runbooks and the sandbox too
(:meth:`CliBackend.nodes`).

Costs on the controller per poll: one ``REQUEST_JOB_INFO`` (squeue), two
``REQUEST_NODE_INFO``/``REQUEST_PARTITION_INFO`` pairs (sinfo), one
``REQUEST_STATS_INFO`` (sdiag) and, with the probe, one ping and one
``sbatch --test-only``. ``squeue --json`` is never used: on 10k jobs it costs about
20 times the time and 1,000 times the memory of a narrow format.

The commands run through :mod:`gotthard.command`; what they print is parsed by the pure
functions of :mod:`gotthard.slurm.text`.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from gotthard import command
from gotthard.slurm.snapshot import (
    Controller,
    Node,
    PollOptions,
    ProbeResult,
    SlurmSnapshot,
    SlurmUnavailable,
)
from gotthard.slurm.text import (
    parse_dbd_ping,
    parse_ping,
    parse_reservations,
    parse_sdiag,
    parse_sinfo_nodes,
    parse_sinfo_partitions,
    parse_squeue,
    parse_sshare,
    reservations_argv,
    sinfo_nodes_argv,
    sinfo_partitions_argv,
    squeue_argv,
    sshare_argv,
)

# --- running the commands ----------------------------------------------------------------

T = TypeVar("T")

_COMMANDS = ("squeue", "sinfo", "sdiag", "scontrol", "sbatch", "sacctmgr", "sshare")
_PROBE_SUBMIT = ("--test-only", "--job-name=gotthard-probe", "--output=/dev/null", "--wrap=true")


def slurm_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for Slurm commands: *base* (default: ours) in the C locale, without
    the user's output overrides (``SQUEUE_FORMAT``, ``SINFO_SORT``, ...)."""
    env = {
        key: value
        for key, value in (os.environ if base is None else base).items()
        if not key.startswith(("SQUEUE_", "SINFO_", "SBATCH_", "SLURM_TIME_FORMAT"))
    }
    env["LC_ALL"] = "C"
    return env


class CliBackend:
    """Runs the Slurm client commands of one cluster and parses their narrow outputs.

    Commands are found in *bin_dir*, else on ``PATH``; *paths* names one explicitly
    (``{"sinfo": "/opt/slurm/bin/sinfo"}``). *env* is the environment they run in (default:
    ours; a cluster is chosen by its ``SLURM_CONF``), less the user's output overrides.
    """

    name = "cli"

    def __init__(
        self,
        *,
        bin_dir: str = "",
        timeout: float = 10.0,
        paths: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.timeout = timeout
        self.bin_dir = bin_dir
        paths = paths or {}
        self.paths = {command: self._resolve(command, paths) for command in _COMMANDS}
        #: Where each command was looked for, as errors say it.
        self._where = {command: paths.get(command, bin_dir or "PATH") for command in _COMMANDS}
        self.env = slurm_env(env)
        #: Slurm release from ``sinfo --version`` (read once; it is local, no RPC).
        self.version = ""

    def _resolve(self, command: str, paths: Mapping[str, str]) -> str | None:
        if command in paths:
            return shutil.which(paths[command])
        if self.bin_dir:
            candidate = Path(self.bin_dir) / command
            return str(candidate) if os.access(candidate, os.X_OK) else None
        return shutil.which(command)

    def missing(self) -> list[str]:
        return [command for command, path in self.paths.items() if path is None]

    def _required(self, *commands: str) -> list[str]:
        missing = [f"{c} not found in {self._where[c]}" for c in commands if self.paths[c] is None]
        if missing:
            raise SlurmUnavailable("; ".join(missing))
        return [self.paths[c] or c for c in commands]

    def _start(self, argv: Sequence[str]) -> command.Running | command.CommandError:
        try:
            return command.Running(argv, timeout=self.timeout, env=self.env)
        except command.CommandError as err:
            return err

    def nodes(self, names: Sequence[str] = ()) -> tuple[Node, ...]:
        """Every node (only those *names* lists, when it lists any) with its partitions,
        state and reason, read by the one sinfo parser. :class:`SlurmUnavailable` when
        sinfo fails; rows it cannot read are left out."""
        (sinfo,) = self._required("sinfo")
        try:
            done = command.run(sinfo_nodes_argv(sinfo, names), timeout=self.timeout, env=self.env)
        except command.CommandError as err:
            raise SlurmUnavailable(str(err)) from None
        return parse_sinfo_nodes(done.stdout).nodes

    def poll(self, options: PollOptions) -> SlurmSnapshot:
        squeue, sinfo = self._required("squeue", "sinfo")
        scontrol, sdiag, sbatch, sacctmgr, sshare = (
            self.paths[c] for c in ("scontrol", "sdiag", "sbatch", "sacctmgr", "sshare")
        )
        # All commands run at once: a poll costs the slowest, not the sum.
        argvs: dict[str, list[str]] = {
            "squeue": squeue_argv(squeue),
            "nodes": sinfo_nodes_argv(sinfo),
            "partitions": sinfo_partitions_argv(sinfo),
        }
        if sdiag:
            argvs["sdiag"] = [sdiag]
        if scontrol:
            argvs["reservations"] = reservations_argv(scontrol)
        if options.probe and scontrol:
            argvs["ping"] = [scontrol, "ping"]
        if options.probe and sbatch:
            argvs["submit"] = [sbatch, *_PROBE_SUBMIT]
        if options.probe and sacctmgr:
            argvs["dbd"] = [sacctmgr, "ping"]
        if options.fairshare:
            argvs["shares"] = sshare_argv(sshare or "sshare")
        if not self.version:
            argvs["version"] = [sinfo, "--version"]
        runs = {key: self._start(argv) for key, argv in argvs.items()}
        outputs = {key: _output(run) for key, run in runs.items()}
        for key in ("squeue", "nodes", "partitions"):
            if outputs[key].error:
                raise SlurmUnavailable(outputs[key].error)
        version = outputs.get("version")
        if version is not None and not version.error:
            self.version = (version.stdout.split() or [""])[-1]
        return assemble(outputs, options, backend=self.name, version=self.version)


def _output(run: command.Running | command.CommandError) -> CommandOutput:
    """What one command of the poll printed, and why it failed (``""`` when it did not)."""
    if isinstance(run, command.CommandError):
        return CommandOutput("", str(run))
    try:
        done = run.wait()
        done.check()
    except command.CommandError as err:
        # scontrol ping exits non-zero when a controller is down, yet lists them all; a
        # command killed at its timeout printed nothing worth reading
        stdout = err.stdout if err.returncode is not None else ""
        return CommandOutput(stdout, str(err), time.monotonic() - run.started)
    return CommandOutput(done.stdout, "", done.duration)


@dataclass(frozen=True, slots=True)
class CommandOutput:
    stdout: str
    error: str = ""
    duration: float = 0.0


def _parse_optional(
    outputs: Mapping[str, CommandOutput],
    key: str,
    parse: Callable[[str], tuple[T, int]],
) -> tuple[T | None, int]:
    """What *parse* makes of the optional command *key*'s output, and its malformed-line
    count: (None, 0) when it was not run, (None, 1) when it failed."""
    output = outputs.get(key)
    if output is None:
        return None, 0
    if output.error:
        return None, 1
    return parse(output.stdout)


def assemble(
    outputs: dict[str, CommandOutput],
    options: PollOptions,
    *,
    backend: str = "cli",
    version: str = "",
) -> SlurmSnapshot:
    """Build a snapshot from the outputs of one poll's commands.

    Keys: ``squeue``, ``nodes``, ``partitions`` (required), ``sdiag``, ``reservations``,
    ``ping``, ``submit``, ``dbd`` (``sacctmgr ping``) and ``shares`` (``sshare``)
    (optional). Malformed output is counted in ``errors``, never raised.
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
    reservations, reservation_errors = _parse_optional(outputs, "reservations", parse_reservations)
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
    dbd = outputs.get("dbd")
    # sacctmgr ping exits 1 when every slurmdbd is down, yet lists them all
    dbds = parse_dbd_ping(dbd.stdout) if dbd is not None else ()
    shares, share_errors = _parse_optional(outputs, "shares", parse_sshare)
    errors += share_errors
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
        dbds=dbds,
        shares=shares,
    )
