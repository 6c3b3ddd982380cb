"""What a job asked Slurm for, and when it ran: ``scontrol show job`` (while slurmctld
still holds the job: running, or ended less than ``MinJobAge`` ago), else ``sacct``
(with accounting). Argv lists only, through :mod:`gotthard.command`; the parsers are
pure functions over the commands' text.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import datetime

from gotthard import command

#: Job states after which the job no longer runs (COMPLETING: its processes ended, Slurm
#: cleans up; EpilogSlurmctld sees it so).
ENDED = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "COMPLETING",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
    }
)
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}


class SlurmError(Exception):
    """Slurm could not be asked, or does not know the job."""


@dataclass(frozen=True)
class SlurmJob:
    """A job's request and run as Slurm reports it (``None``: not reported)."""

    job_id: str
    state: str = ""
    user: str = ""
    account: str = ""
    partition: str = ""
    nodes: int | None = None
    node_list: str = ""
    cpus: int | None = None
    gpus: int | None = None
    memory_bytes: int | None = None
    #: the time limit in seconds; None when unlimited
    time_limit_seconds: int | None = None
    start: float | None = None
    end: float | None = None
    #: peak resident memory of its steps (sacct MaxRSS, with job accounting)
    max_rss_bytes: int | None = None
    admin_comment: str = ""

    @property
    def ended(self) -> bool:
        return self.state.split()[0] in ENDED if self.state else False


def memory(text: str) -> int | None:
    """``1024M``, ``4G``, ``512`` (MiB, Slurm's default unit) as bytes."""
    match = re.fullmatch(r"([0-9.]+)([KMGTP]?)[nc]?", text.strip())
    if not match:
        return None
    number, unit = match.groups()
    return int(float(number) * _UNITS[unit or "M"])


def duration(text: str) -> int | None:
    """A Slurm duration in seconds: ``days-hours[:minutes[:seconds]]``,
    ``hours:minutes:seconds``, ``minutes:seconds`` or ``minutes``; None for
    ``UNLIMITED``, ``Partition_Limit`` or anything else."""
    days, dash, rest = text.strip().rpartition("-")
    parts = rest.split(":")
    if not all(p.isdigit() for p in parts) or len(parts) > 3 or (dash and not days.isdigit()):
        return None
    numbers = [int(p) for p in parts]
    if dash:  # hours first
        numbers += [0] * (3 - len(numbers))
    else:  # minutes, minutes:seconds, hours:minutes:seconds
        numbers = {1: [0, numbers[0], 0], 2: [0, *numbers], 3: numbers}[len(numbers)]
    hours, minutes, seconds = numbers
    return int(days or 0) * 86400 + hours * 3600 + minutes * 60 + seconds


def timestamp(text: str) -> float | None:
    """Slurm's local ``2026-12-05T07:00:00`` as a Unix time; None for ``Unknown``/``None``."""
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        return None


def _number(text: str) -> int | None:
    return int(text) if text.strip().isdigit() else None


def tres(text: str) -> dict[str, str]:
    """``cpu=2,mem=1G,node=1,gres/gpu=2`` as a dict (``gres/gpu:h100`` counts as gpu)."""
    found: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep:
            key = "gres/gpu" if key.startswith("gres/gpu") else key
            found[key] = value
    return found


def parse_scontrol(text: str) -> dict[str, str]:
    """``scontrol -o show job N``: its ``Key=Value`` fields (values may hold spaces)."""
    fields: dict[str, str] = {}
    last = ""
    for token in text.strip().split(" "):
        key, sep, value = token.partition("=")
        if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9_:/]*", key):
            fields[key] = value
            last = key
        elif last:
            fields[last] += " " + token
    return fields


def _per(text: str) -> int | None:
    """GPUs in a ``TresPerJob``/``TresPerNode`` value: ``gres:gpu:2``, ``gres/gpu:h100:4``,
    ``gres:gpu:h100:1,gres:nic:1``."""
    for item in text.split(","):
        parts = re.split(r"[:/]", item)
        if len(parts) >= 3 and parts[0] == "gres" and parts[1] == "gpu" and parts[-1].isdigit():
            return int(parts[-1])
    return None


def _gpus(fields: dict[str, str], alloc: dict[str, str]) -> int:
    """GPUs of the job: its allocated TRES, else (an ended job's TRES lose the gres) its
    request per job or per node."""
    if "gres/gpu" in alloc and alloc["gres/gpu"].isdigit():
        return int(alloc["gres/gpu"])
    per_job = _per(fields.get("TresPerJob", ""))
    if per_job is not None:
        return per_job
    per_node = _per(fields.get("TresPerNode", ""))
    if per_node is not None:
        return per_node * (_number(fields.get("NumNodes", "")) or 1)
    return 0


def from_scontrol(job_id: str, text: str) -> SlurmJob:
    fields = parse_scontrol(text)
    if not fields.get("JobId"):
        raise SlurmError(f"job {job_id}: scontrol printed no job")
    alloc = tres(fields.get("AllocTRES", "") or fields.get("TRES", "") or fields.get("ReqTRES", ""))
    mem = alloc.get("mem", "")
    return SlurmJob(
        job_id=fields["JobId"],
        state=fields.get("JobState", ""),
        user=fields.get("UserId", "").split("(")[0],
        account=fields.get("Account", "") if fields.get("Account") != "(null)" else "",
        partition=fields.get("Partition", ""),
        nodes=_number(fields.get("NumNodes", "")),
        node_list=fields.get("NodeList", "") if fields.get("NodeList") != "(null)" else "",
        cpus=_number(fields.get("NumCPUs", "")),
        gpus=_gpus(fields, alloc),
        memory_bytes=memory(mem) if mem else None,
        time_limit_seconds=duration(fields.get("TimeLimit", "")),
        start=timestamp(fields.get("StartTime", "")),
        end=timestamp(fields.get("EndTime", "")),
        admin_comment=fields.get("AdminComment", "").strip(),
    )


#: The columns asked of ``sacct``, in order.
SACCT_FIELDS = (
    "JobID",
    "State",
    "User",
    "Account",
    "Partition",
    "NNodes",
    "NodeList",
    "AllocCPUS",
    "AllocTRES",
    "Timelimit",
    "Start",
    "End",
    "MaxRSS",
    "AdminComment",
)


def from_sacct(job_id: str, text: str) -> SlurmJob:
    """``sacct -P -n -j N -o ...``: the job's line, and its steps' peak MaxRSS."""
    rows = [line.split("|") for line in text.splitlines() if line.strip()]
    rows = [row for row in rows if len(row) >= len(SACCT_FIELDS)]
    line = next((r for r in rows if r[0] == job_id), None)
    if line is None:
        raise SlurmError(f"job {job_id}: not in Slurm's accounting (sacct)")
    job = dict(zip(SACCT_FIELDS, line, strict=False))
    rss = [memory(r[SACCT_FIELDS.index("MaxRSS")]) for r in rows if r[0].startswith(job_id)]
    alloc = tres(job["AllocTRES"])
    gpus = alloc.get("gres/gpu")
    return SlurmJob(
        job_id=job_id,
        state=job["State"],
        user=job["User"],
        account=job["Account"],
        partition=job["Partition"],
        nodes=_number(job["NNodes"]),
        node_list=job["NodeList"],
        cpus=_number(job["AllocCPUS"]),
        gpus=_number(gpus) if gpus is not None else 0,
        memory_bytes=memory(alloc["mem"]) if "mem" in alloc else None,
        time_limit_seconds=duration(job["Timelimit"]),
        start=timestamp(job["Start"]),
        end=timestamp(job["End"]),
        max_rss_bytes=max((r for r in rss if r is not None), default=None),
        # the last column, which may itself hold a "|"
        admin_comment="|".join(line[len(SACCT_FIELDS) - 1 :]).strip(),
    )


def slurm_env(slurm_conf: str) -> dict[str, str]:
    env = dict(os.environ)
    if slurm_conf:
        env["SLURM_CONF"] = slurm_conf
    env["LC_ALL"] = "C"
    return env


def read_job(job_id: str, slurm_conf: str = "", *, timeout: float = 10.0) -> SlurmJob:
    """The job from ``scontrol show job``, else from ``sacct``; :class:`SlurmError` when
    neither knows it or neither can run."""
    env = slurm_env(slurm_conf)
    conf = env.get("SLURM_CONF", "")
    if conf and not os.path.exists(conf):
        # Slurm's commands would retry a missing file for a minute
        raise SlurmError(f"slurm.conf {conf} does not exist")
    errors = []
    try:
        done = command.run(["scontrol", "-o", "show", "job", job_id], timeout=timeout, env=env)
        return from_scontrol(job_id, done.stdout)
    except command.CommandError as err:
        if err.timed_out or err.returncode is None:  # slurmctld unreachable, or no scontrol
            raise SlurmError(str(err)) from None
        errors.append(str(err))
    except SlurmError as err:
        errors.append(str(err))
    try:
        argv = ["sacct", "-P", "-n", "-j", job_id, "-o", ",".join(SACCT_FIELDS)]
        done = command.run(argv, timeout=timeout, env=env)
        return from_sacct(job_id, done.stdout)
    except (command.CommandError, SlurmError) as err:
        errors.append(str(err))
    raise SlurmError("; ".join(errors))


def set_admin_comment(
    job_id: str, text: str, slurm_conf: str = "", *, timeout: float = 10.0
) -> str:
    """Store *text* as the job's AdminComment; the command that stored it.

    ``scontrol update JobId=N AdminComment=TEXT`` while slurmctld still lets the job be
    updated; slurmctld refuses that once the job has ended ("Job has already finished",
    also from EpilogSlurmctld), and then ``sacctmgr -i update job where jobid=N set
    AdminComment=TEXT`` writes it to the accounting database, as sacct shows it (sacctmgr
    stores each ``"`` as a backtick: :func:`read_summary`). Argv lists: no shell."""
    env = slurm_env(slurm_conf)
    try:
        argv = ["scontrol", "update", f"JobId={job_id}", f"AdminComment={text}"]
        command.run(argv, timeout=timeout, env=env)
        return "scontrol update"
    except command.CommandError as err:
        if err.timed_out or "finished" not in str(err):
            raise
    argv = ["sacctmgr", "-i", "update", "job", "where", f"jobid={job_id}", "set"]
    command.run([*argv, f"AdminComment={text}"], timeout=timeout, env=env)
    return "sacctmgr update job"


def read_summary(admin_comment: str) -> dict[str, object] | None:
    """The summary JSON of an AdminComment as scontrol or sacct prints it (sacctmgr turns
    each ``"`` into a backtick; the summary holds no backtick of its own); None when the
    comment is not a summary."""
    import json

    text = admin_comment.strip().replace("`", '"')
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
