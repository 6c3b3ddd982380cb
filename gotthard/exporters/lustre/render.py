"""Pure function from a :class:`LustreSnapshot` to metric families.

Label conventions (see snapshot.py): ``fs`` the file system, ``target`` the full target
name (``<fs>-OST0000``), ``component`` the side that measured (``ost``/``mdt``/``mgs`` on
servers, ``osc``/``mdc``/``client`` on clients). Help texts name the Lustre parameter.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from gotthard.exporters.families import MetricFamily, counter, gauge
from gotthard.exporters.lustre.parse import HEALTH_STATES, RECOVERY_STATES
from gotthard.exporters.lustre.snapshot import LustreSnapshot, TargetExportStats, TargetJobStats

TARGET = ("fs", "target", "component")


class _IOCounters(Protocol):
    read_bytes: int
    write_bytes: int
    operations: dict[str, int]


Entry = TypeVar("Entry", bound=_IOCounters)


def top_jobs(jobs: list[Entry], limit: int) -> tuple[list[Entry], int]:
    """At most *limit* jobs (or client exports), highest IO first, then most operations.

    IO is read + write bytes. Returns the entries kept (in their original order when none
    are dropped) and how many were dropped. Ties keep the earlier entry.
    """
    if len(jobs) <= limit:
        return jobs, 0
    kept = heapq.nlargest(
        max(limit, 0),
        jobs,
        key=lambda job: (job.read_bytes + job.write_bytes, sum(job.operations.values())),
    )
    return kept, len(jobs) - len(kept)


@dataclass(frozen=True, slots=True)
class _PerClient:
    """How one kind of per-client IO (jobs, client NIDs) is named and documented."""

    prefix: str  # lustre_<prefix>_...
    label: str  # the label naming the client: job_id, nid
    what: str  # "job", "client (NID)"
    source: str  # the parameter, for help texts
    listed: str  # name of the gauge of entries listed per target
    flag: str  # the limit flag


_JOBS = _PerClient(
    "job",
    "job_id",
    "job",
    "job_stats (obdfilter.*.job_stats, mdt.*.job_stats)",
    "lustre_job_stats_jobs",
    "--lustre.job-stats-limit",
)
_EXPORTS = _PerClient(
    "export",
    "nid",
    "client (NID)",
    "exports.<nid>.stats (obdfilter.*.exports.*.stats, mdt.*.exports.*.stats)",
    "lustre_export_stats_clients",
    "--lustre.export-stats-limit",
)


def _render_per_client(
    kind: _PerClient,
    targets: Iterable[tuple[tuple[str, str, str], list[tuple[str, Entry]]]],
    limit: int,
) -> list[MetricFamily]:
    """Operations and bytes per client of each target, at most *limit* clients a target."""
    operations = counter(
        f"lustre_{kind.prefix}_operations_total",
        f"Operations per {kind.what} on a target, from {kind.source} samples; zero counts "
        "are left out.",
        *TARGET,
        kind.label,
        "operation",
    )
    read = counter(
        f"lustre_{kind.prefix}_read_bytes_total",
        f"Bytes read per {kind.what} on a target, from {kind.source} read_bytes sum.",
        *TARGET,
        kind.label,
    )
    write = counter(
        f"lustre_{kind.prefix}_write_bytes_total",
        f"Bytes written per {kind.what} on a target, from {kind.source} write_bytes sum.",
        *TARGET,
        kind.label,
    )
    listed = gauge(
        kind.listed,
        f"Entries ({kind.label}) listed by the target this poll, before {kind.flag}.",
        *TARGET,
    )
    truncated = gauge(
        f"lustre_{kind.prefix}_stats_truncated",
        f"Number of entries ({kind.label}) dropped from the target's series by {kind.flag} "
        "(lowest IO first); 0 when none were.",
        *TARGET,
    )
    op_samples = operations.samples
    read_samples = read.samples
    write_samples = write.samples
    for key, named in targets:
        by_id = {id(entry): name for name, entry in named}
        kept, dropped = top_jobs([entry for _, entry in named], limit)
        listed.add(key, len(named))
        truncated.add(key, dropped)
        for entry in kept:
            labels = (*key, by_id[id(entry)])
            if entry.read_bytes:
                read_samples.append((labels, entry.read_bytes))
            if entry.write_bytes:
                write_samples.append((labels, entry.write_bytes))
            op_samples.extend(
                [((*labels, name), count) for name, count in entry.operations.items()]
            )
    return [operations, read, write, listed, truncated]


def render_job_stats(targets: Iterable[TargetJobStats], limit: int) -> list[MetricFamily]:
    """The job families for *targets*, each capped at *limit* jobs."""
    named = (((entry.key, [(job.job_id, job) for job in entry.jobs])) for entry in targets)
    return _render_per_client(_JOBS, named, limit)


def render_export_stats(targets: Iterable[TargetExportStats], limit: int) -> list[MetricFamily]:
    """Per-client families from ``exports.<nid>.stats``, each target capped at *limit* NIDs."""
    named = ((entry.key, [(export.nid, export) for export in entry.exports]) for entry in targets)
    return _render_per_client(_EXPORTS, named, limit)


def render_serving(snapshot: LustreSnapshot) -> list[MetricFamily]:
    """Health, recovery, evictions, connected clients and LNet counters."""
    health = gauge(
        "lustre_health_check",
        "1 for the node's current health_check state: healthy, sick (NOT HEALTHY) or lbug "
        "(LBUG: the node needs a reboot); 0 for the others.",
        "state",
    )
    if snapshot.health:
        for state in HEALTH_STATES:
            health.add((state,), 1 if state == snapshot.health else 0)
    status = gauge(
        "lustre_target_recovery_status",
        "1 for the target's current recovery_status status (complete, recovering, waiting, "
        "inactive, other); 0 for the others.",
        *TARGET,
        "status",
    )
    completed = gauge(
        "lustre_target_recovery_completed_clients",
        "Clients that completed recovery on the target (recovery_status completed_clients).",
        *TARGET,
    )
    expected = gauge(
        "lustre_target_recovery_clients",
        "Clients the target expects in recovery (the total of recovery_status "
        "completed_clients or connected_clients A/B).",
        *TARGET,
    )
    connected_recovery = gauge(
        "lustre_target_recovery_connected_clients",
        "Clients reconnected so far while the target recovers (recovery_status connected_clients).",
        *TARGET,
    )
    remaining = gauge(
        "lustre_target_recovery_time_remaining_seconds",
        "Seconds left of the recovery window while the target recovers (recovery_status "
        "time_remaining).",
        *TARGET,
    )
    for entry in snapshot.recovery:
        key = entry.key
        for state in RECOVERY_STATES:
            status.add((*key, state), 1 if state == entry.status else 0)
        if entry.completed_clients is not None:
            completed.add(key, entry.completed_clients)
        if entry.total_clients is not None:
            expected.add(key, entry.total_clients)
        if entry.connected_clients is not None:
            connected_recovery.add(key, entry.connected_clients)
        if entry.time_remaining_seconds is not None:
            remaining.add(key, entry.time_remaining_seconds)
    evictions = counter(
        "lustre_target_evictions_total",
        "Clients the target evicted since it was mounted (eviction_count).",
        *TARGET,
    )
    for key, value in snapshot.evictions.items():
        evictions.add(key, value)
    connected = gauge(
        "lustre_target_connected_clients",
        "Connections (exports) to the target, clients and other servers (num_exports).",
        *TARGET,
    )
    for key, value in snapshot.connected_clients.items():
        connected.add(key, value)
    families = [health, status, completed, expected, connected_recovery, remaining]
    families += [evictions, connected]
    lnet = snapshot.lnet
    for name, field, help_text in LNET_COUNTERS:
        family = counter(name, help_text)
        if field in lnet:
            family.add((), lnet[field])
        families.append(family)
    return families


#: (metric, LNet counter, help) of the node-wide LNet counters
LNET_COUNTERS = (
    ("lustre_lnet_send_count_total", "send_count", "LNet messages sent (send_count)."),
    ("lustre_lnet_receive_count_total", "recv_count", "LNet messages received (recv_count)."),
    (
        "lustre_lnet_drop_count_total",
        "drop_count",
        "LNet messages dropped (drop_count): no route, no buffer, a dead peer.",
    ),
    ("lustre_lnet_send_bytes_total", "send_length", "LNet bytes sent (send_length)."),
    ("lustre_lnet_receive_bytes_total", "recv_length", "LNet bytes received (recv_length)."),
    ("lustre_lnet_drop_bytes_total", "drop_length", "LNet bytes dropped (drop_length)."),
    ("lustre_lnet_errors_total", "errors", "LNet message errors (errors)."),
)


def render(
    snapshot: LustreSnapshot, *, job_stats_limit: int = 1000, export_stats_limit: int = 1000
) -> list[MetricFamily]:
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
    open_time = counter(
        "lustre_client_file_open_seconds_total",
        "Summed time files were held open, from open to close, over the closes counted by "
        "lustre_client_file_closes_total (llite.*.stats openclosetime sum); not a latency.",
        *TARGET,
    )
    closes = counter(
        "lustre_client_file_closes_total",
        "Closes whose open time was measured (llite.*.stats openclosetime samples).",
        *TARGET,
    )
    for entry in snapshot.stats:
        key = entry.key
        if entry.open_closes is not None:
            closes.add(key, entry.open_closes)
            open_time.add(key, (entry.open_time_usecs or 0) / 1e6)
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
    families += [operations, latency, read, write, open_time, closes]
    families += render_serving(snapshot)
    if snapshot.job_stats is not None:
        families += render_job_stats(snapshot.job_stats, job_stats_limit)
    if snapshot.export_stats is not None:
        families += render_export_stats(snapshot.export_stats, export_stats_limit)
    return families
