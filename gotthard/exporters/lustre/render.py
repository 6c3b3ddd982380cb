"""Pure function from a :class:`LustreSnapshot` to metric families.

Label conventions (see snapshot.py): ``fs`` the file system, ``target`` the full target
name (``<fs>-OST0000``), ``component`` the side that measured (``ost``/``mdt``/``mgs`` on
servers, ``osc``/``mdc``/``client`` on clients). Help texts name the Lustre parameter.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from gotthard.exporters.families import MetricFamily, counter, gauge
from gotthard.exporters.lustre.snapshot import JobStat, LustreSnapshot, TargetJobStats

TARGET = ("fs", "target", "component")


def top_jobs(jobs: list[JobStat], limit: int) -> tuple[list[JobStat], int]:
    """At most *limit* jobs, highest IO (read + write bytes) first, then most operations.

    Returns the jobs kept (in their original order when none are dropped) and how many
    were dropped. Ties keep the earlier job.
    """
    if len(jobs) <= limit:
        return jobs, 0
    kept = heapq.nlargest(
        max(limit, 0),
        jobs,
        key=lambda job: (job.read_bytes + job.write_bytes, sum(job.operations.values())),
    )
    return kept, len(jobs) - len(kept)


def render_job_stats(targets: Iterable[TargetJobStats], limit: int) -> list[MetricFamily]:
    """The job families for *targets*, each capped at *limit* jobs."""
    operations = counter(
        "lustre_job_operations_total",
        "Operations per job on a target, from job_stats (obdfilter.*.job_stats, "
        "mdt.*.job_stats) samples; zero counts are left out.",
        "fs",
        "target",
        "job_id",
        "operation",
    )
    read = counter(
        "lustre_job_read_bytes_total",
        "Bytes read per job on a target, from job_stats read_bytes sum.",
        "fs",
        "target",
        "job_id",
    )
    write = counter(
        "lustre_job_write_bytes_total",
        "Bytes written per job on a target, from job_stats write_bytes sum.",
        "fs",
        "target",
        "job_id",
    )
    listed = gauge(
        "lustre_job_stats_jobs",
        "Jobs listed in the target's job_stats this poll, before --lustre.job-stats-limit.",
        "target",
    )
    truncated = gauge(
        "lustre_job_stats_truncated",
        "Number of jobs dropped from the target's job series by --lustre.job-stats-limit "
        "(lowest IO first); 0 when none were.",
        "target",
    )
    op_samples = operations.samples
    read_samples = read.samples
    write_samples = write.samples
    for entry in targets:
        kept, dropped = top_jobs(entry.jobs, limit)
        fs = entry.fs
        target = entry.target
        listed.add((target,), len(entry.jobs))
        truncated.add((target,), dropped)
        for job in kept:
            job_id = job.job_id
            if job.read_bytes:
                read_samples.append(((fs, target, job_id), job.read_bytes))
            if job.write_bytes:
                write_samples.append(((fs, target, job_id), job.write_bytes))
            op_samples.extend(
                [((fs, target, job_id, name), count) for name, count in job.operations.items()]
            )
    return [operations, read, write, listed, truncated]


def render(snapshot: LustreSnapshot, *, job_stats_limit: int = 1000) -> list[MetricFamily]:
    info = gauge(
        "lustre_info", "Lustre version of this node (version parameter); always 1.", "version"
    )
    if snapshot.version:
        info.add((snapshot.version,), 1)
    role = gauge(
        "lustre_node_role",
        "Lustre roles detected on this node (client, oss, mds, mgs); always 1.",
        "role",
    )
    for name in snapshot.roles:
        role.add((name,), 1)

    capacity = gauge(
        "lustre_target_capacity_bytes",
        "Size of the target in bytes (kbytestotal of osd-*, obdfilter, mdt, osc or mdc).",
        *TARGET,
    )
    available = gauge(
        "lustre_target_available_bytes",
        "Bytes available to users on the target (kbytesavail).",
        *TARGET,
    )
    free = gauge(
        "lustre_target_free_bytes",
        "Free bytes on the target, including space reserved for root (kbytesfree).",
        *TARGET,
    )
    files = gauge(
        "lustre_target_files",
        "Inodes (objects on an OST) of the target: state=total (filestotal) or free (filesfree).",
        *TARGET,
        "state",
    )
    for entry in snapshot.capacity:
        key = entry.key
        if entry.capacity_bytes is not None:
            capacity.add(key, entry.capacity_bytes)
        if entry.available_bytes is not None:
            available.add(key, entry.available_bytes)
        if entry.free_bytes is not None:
            free.add(key, entry.free_bytes)
        if entry.files_total is not None:
            files.add((*key, "total"), entry.files_total)
        if entry.files_free is not None:
            files.add((*key, "free"), entry.files_free)
    active = gauge(
        "lustre_target_active",
        "1 if the client's connection to the target is active, 0 if deactivated "
        "(osc.*.active, mdc.*.active); inactive targets report no capacity.",
        *TARGET,
    )
    for key, value in snapshot.active.items():
        active.add(key, value)

    operations = counter(
        "lustre_operations_total",
        "Operations counted by the target's stats (obdfilter.*.stats, mdt.*.md_stats, "
        "mdc.*.md_stats, llite.*.stats); read/write fall back to the read_bytes/write_bytes "
        "sample counts where a version has no read/write line.",
        *TARGET,
        "operation",
    )
    latency = counter(
        "lustre_operation_latency_seconds_total",
        "Summed service time of the operations, from the sum of [usecs] stats lines "
        "(Lustre 2.12 and later).",
        *TARGET,
        "operation",
    )
    read = counter(
        "lustre_read_bytes_total",
        "Bytes read, from the sum of the stats read_bytes line.",
        *TARGET,
    )
    write = counter(
        "lustre_write_bytes_total",
        "Bytes written, from the sum of the stats write_bytes line.",
        *TARGET,
    )
    for entry in snapshot.stats:
        key = entry.key
        operations.samples.extend(
            [((*key, name), count) for name, count in entry.operations.items()]
        )
        latency.samples.extend(
            [((*key, name), usecs / 1e6) for name, usecs in entry.latency_usecs.items()]
        )
        if entry.read_bytes is not None:
            read.add(key, entry.read_bytes)
        if entry.write_bytes is not None:
            write.add(key, entry.write_bytes)

    families = [info, role, capacity, available, free, files, active]
    families += [operations, latency, read, write]
    if snapshot.job_stats is not None:
        families += render_job_stats(snapshot.job_stats, job_stats_limit)
    return families
