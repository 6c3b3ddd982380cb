"""``gotthard job``: one Slurm job's efficiency (``report``), the summary stored with the
job when it ends (``epilog``), and the findings of every job of a period by account
(``digest``)."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from gotthard.cli_common import command_group

if TYPE_CHECKING:
    from gotthard.config import Config

FORMATS = ("table", "json", "markdown")
#: A Slurm job id: digits, or an array task (``123_4``).
_JOB_ID = re.compile(r"[0-9]+(_[0-9]+)?")
_DURATION = re.compile(r"(\d+)([smhdw])")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def duration(text: str) -> int:
    """``24h``, ``7d``, ``90m``, ``30s`` as seconds (argparse type)."""
    match = _DURATION.fullmatch(text.strip())
    if not match or int(match.group(1)) == 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a duration such as 30m, 24h or 7d")
    return int(match.group(1)) * _SECONDS[match.group(2)]


def job_id(text: str) -> str:
    if not _JOB_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r}: a Slurm job id (digits)")
    return text


def add_cli(subparsers: Any) -> None:
    sub = command_group(
        subparsers, "job", help="job efficiency: report, epilog summary, digest by account"
    )

    report = sub.add_parser(
        "report",
        help="one job's efficiency: request against use, GPUs, Lustre, Slingshot, findings",
        description="Report what a Slurm job asked for against what it used (per GPU and "
        "whole job), its Lustre I/O and its nodes' Slingshot traffic, and the findings with "
        "the metric and threshold that raised each. Exit 0 without findings, 1 with "
        "findings, 2 when the job is unknown or Prometheus cannot be reached.",
    )
    report.add_argument("job_id", metavar="JOBID", type=job_id)
    report.add_argument("--cluster", help="the job's cluster; default: ask every site's Prometheus")
    report.add_argument("--format", choices=FORMATS, default="table")
    report.add_argument(
        "--lookback",
        type=duration,
        default="7d",
        help="how far back to look for the job's series (default 7d)",
    )
    report.set_defaults(handler=cmd_report)

    epilog = sub.add_parser(
        "epilog",
        help="store a compact JSON summary in the ended job's AdminComment (EpilogSlurmctld)",
        description="Run from slurmctld's EpilogSlurmctld: report on the job "
        "($SLURM_JOB_ID) and store the compact summary in its AdminComment with scontrol "
        "update. Bounded by --timeout; always exits 0, logging one line on any error.",
    )
    epilog.add_argument("--job-id", type=job_id, help="default $SLURM_JOB_ID")
    epilog.add_argument("--cluster", help="the job's cluster (default: ask every site)")
    epilog.add_argument(
        "--timeout", type=float, default=20.0, help="seconds for all of it (default 20)"
    )
    epilog.add_argument(
        "--always",
        action="store_true",
        help="store the summary of every job, not only of jobs with a finding",
    )
    epilog.add_argument("--log-file", metavar="FILE", help="append the log line there too")
    epilog.set_defaults(handler=cmd_epilog)

    digest = sub.add_parser(
        "digest",
        help="the findings of every GPU job of a period, by account (the users' daily view)",
        description="Report every job that had a GPU process in the period, at every site "
        "(or --cluster), and list the findings by account. Exit 0 without findings, 1 with "
        "findings, 2 when no site's Prometheus answered.",
    )
    digest.add_argument(
        "--since", type=duration, default="24h", help="the period, back from now (default 24h)"
    )
    digest.add_argument("--cluster", help="only this cluster (default: every site's)")
    digest.add_argument("--format", choices=("table", "json"), default="table")
    digest.set_defaults(handler=cmd_digest)


def _report(args: argparse.Namespace, cfg: Config, **timeouts: float) -> Any:
    from gotthard.job.report import gather

    return gather(cfg, args.job_id, cluster=args.cluster, lookback=args.lookback, **timeouts)


def cmd_report(args: argparse.Namespace, cfg: Config) -> int:
    from gotthard.job import render
    from gotthard.job.report import JobError

    try:
        report = _report(args, cfg)
    except JobError as err:
        print(f"gotthard: {err}", file=sys.stderr)
        return 2
    writer = {"table": render.table, "json": render.as_json, "markdown": render.markdown}
    print(writer[args.format](report), end="")
    return 1 if report.findings else 0


def cmd_digest(args: argparse.Namespace, cfg: Config) -> int:
    from gotthard.job import digest
    from gotthard.job.report import JobError

    try:
        accounts, problems = digest.digest(cfg, args.since, args.cluster)
    except JobError as err:
        print(f"gotthard: {err}", file=sys.stderr)
        return 2
    if not accounts and problems:
        print(f"gotthard: job digest: {'; '.join(problems)}", file=sys.stderr)
        return 2
    if args.format == "json":
        print(digest.as_json(accounts, problems, args.since), end="")
    else:
        print(digest.table(accounts, problems), end="")
    return 1 if any(a.with_findings for a in accounts) else 0


class _OutOfTime(Exception):
    pass


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Raise :class:`_OutOfTime` in this (main) thread after *seconds*."""

    def expire(_signum: int, _frame: object) -> None:
        raise _OutOfTime(f"not done within {seconds:g}s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _log(args: argparse.Namespace, message: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    line = f"{stamp} gotthard job epilog: {message}"
    with contextlib.suppress(OSError):
        print(line, file=sys.stderr)
    if args.log_file:
        with contextlib.suppress(OSError):
            fd = os.open(args.log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "a") as log:
                log.write(line + "\n")


def cmd_epilog(args: argparse.Namespace, cfg: Config) -> int:
    """Never fails the epilog: exit 0 whatever happens, with one log line."""
    args.job_id = args.job_id or os.environ.get("SLURM_JOB_ID", "")
    args.lookback = 86400 * 7
    started = time.monotonic()
    try:
        if not _JOB_ID.fullmatch(args.job_id):
            raise ValueError("no job id: --job-id or $SLURM_JOB_ID")
        message = _epilog(args, cfg)
    except BaseException as err:  # the epilog must never fail the job
        message = f"job {args.job_id or '?'}: not stored: {type(err).__name__}: {err}"
    _log(args, f"{message} ({time.monotonic() - started:.2f}s)")
    return 0


def _epilog(args: argparse.Namespace, cfg: Config) -> str:
    from gotthard.job import render, slurm

    budget = max(args.timeout, 1.0)
    with _deadline(budget):
        share = budget / 4
        report = _report(args, cfg, slurm_timeout=share, prometheus_timeout=share)
        if not report.findings and not args.always:
            return f"job {args.job_id}: no findings, nothing stored"
        text = render.summary_text(report)
        try:
            slurm_conf = cfg.site_model[report.site].clusters[report.cluster].slurm_conf
        except KeyError:
            slurm_conf = ""
        tool = slurm.set_admin_comment(args.job_id, text, slurm_conf, timeout=share)
    kinds = ",".join(f.kind for f in report.findings) or "none"
    return f"job {args.job_id}: stored summary with {tool} ({len(text)} bytes; findings: {kinds})"
