"""Pure function from a :class:`LustreSnapshot` to metric families.

Label conventions (see snapshot.py): ``fs`` the file system, ``target`` the full target
name (``<fs>-OST0000``), ``component`` the side that measured (``ost``/``mdt``/``mgs`` on
servers, ``osc``/``mdc``/``client`` on clients). Help texts name the Lustre parameter.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from gotthard.exporters.families import MetricFamily, counter, gauge
from gotthard.exporters.lustre.parse import (
    CONNECTED_IMPORT_STATES,
    HEALTH_STATES,
    RECOVERY_STATES,
)
from gotthard.exporters.lustre.snapshot import (
    CLIENT_VIEWS,
    ClientIO,
    LustreSnapshot,
    TargetExportStats,
    TargetJobStats,
)

TARGET = ("fs", "target", "component")
#: The ``state`` values of ``gotthard_lustre_client_imports``, each always exported.
IMPORT_STATES = ("connected", "disconnected", "deactivated")
Key = tuple[str, str, str]


Entry = TypeVar("Entry", bound=ClientIO)


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
    "gotthard_lustre_job_stats_jobs",
    "--lustre.job-stats-limit",
)
_EXPORTS = _PerClient(
    "export",
    "nid",
    "client (NID)",
    "exports.<nid>.stats (obdfilter.*.exports.*.stats, mdt.*.exports.*.stats)",
    "gotthard_lustre_export_stats_clients",
    "--lustre.export-stats-limit",
)


def _render_per_client(
    kind: _PerClient,
    targets: Iterable[tuple[Key, list[Entry]]],
    limit: int,
) -> list[MetricFamily]:
    """Operations and bytes per client of each target, at most *limit* clients a target."""
    operations = counter(
        f"gotthard_lustre_{kind.prefix}_operations_total",
        f"Operations per {kind.what} on a target, from {kind.source} samples; zero counts "
        "are left out.",
        *TARGET,
        kind.label,
        "operation",
    )
    read = counter(
        f"gotthard_lustre_{kind.prefix}_read_bytes_total",
        f"Bytes read per {kind.what} on a target, from {kind.source} read_bytes sum.",
        *TARGET,
        kind.label,
    )
    write = counter(
        f"gotthard_lustre_{kind.prefix}_write_bytes_total",
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
        f"gotthard_lustre_{kind.prefix}_stats_truncated",
        f"Number of entries ({kind.label}) dropped from the target's series by {kind.flag} "
        "(lowest IO first); 0 when none were.",
        *TARGET,
    )
    op_samples = operations.samples
    read_samples = read.samples
    write_samples = write.samples
    for key, entries in targets:
        kept, dropped = top_jobs(entries, limit)
        listed.add(key, len(entries))
        truncated.add(key, dropped)
        for entry in kept:
            labels = (*key, entry.name)
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
    return _render_per_client(_JOBS, ((entry.key, entry.jobs) for entry in targets), limit)


def render_export_stats(targets: Iterable[TargetExportStats], limit: int) -> list[MetricFamily]:
    """Per-client families from ``exports.<nid>.stats``, each target capped at *limit* NIDs."""
    return _render_per_client(_EXPORTS, ((entry.key, entry.exports) for entry in targets), limit)


def _state_set(
    name: str,
    help_text: str,
    labels: tuple[str, ...],
    states: tuple[str, ...],
    current: Iterable[tuple[tuple[str, ...], str]],
) -> MetricFamily:
    """A gauge per (key, state): 1 for each key's current state, 0 for the other *states*."""
    family = gauge(name, help_text, *labels)
    for key, now in current:
        family.samples.extend([((*key, state), 1 if state == now else 0) for state in states])
    return family


#: (metric, help, attribute) -> one family per spec, the attribute of each entry where set
FieldSpecs = tuple[tuple[str, str, str], ...]


def _fields(
    make: Callable[..., MetricFamily], specs: FieldSpecs, entries: list[tuple[Key, object]]
) -> list[MetricFamily]:
    """One family (made by gauge or counter) per spec, one sample per entry that has a value."""
    families = []
    for name, help_text, attribute in specs:
        family = make(name, help_text, *TARGET)
        for key, item in entries:
            value = getattr(item, attribute)
            if value is not None:
                family.samples.append((key, value))
        families.append(family)
    return families


RECOVERY_GAUGES: FieldSpecs = (
    (
        "gotthard_lustre_target_recovery_completed_clients",
        "Clients that completed recovery on the target (recovery_status completed_clients).",
        "completed_clients",
    ),
    (
        "gotthard_lustre_target_recovery_clients",
        "Clients the target expects in recovery (the total of recovery_status "
        "completed_clients or connected_clients A/B).",
        "total_clients",
    ),
    (
        "gotthard_lustre_target_recovery_connected_clients",
        "Clients reconnected so far while the target recovers (recovery_status connected_clients).",
        "connected_clients",
    ),
    (
        "gotthard_lustre_target_recovery_time_remaining_seconds",
        "Seconds left of the recovery window while the target recovers (recovery_status "
        "time_remaining).",
        "time_remaining_seconds",
    ),
)


def render_serving(snapshot: LustreSnapshot) -> list[MetricFamily]:
    """Health, recovery, evictions, connected clients and LNet counters."""
    health = _state_set(
        "gotthard_lustre_health_state",
        "1 for the node's current health_check state: healthy, sick (NOT HEALTHY) or lbug "
        "(LBUG: the node needs a reboot); 0 for the others.",
        ("state",),
        HEALTH_STATES,
        [((), snapshot.health)] if snapshot.health else [],
    )
    status = _state_set(
        "gotthard_lustre_target_recovery_status",
        "1 for the target's current recovery_status status (complete, recovering, waiting, "
        "inactive, other); 0 for the others.",
        (*TARGET, "status"),
        RECOVERY_STATES,
        [(entry.key, entry.progress.status) for entry in snapshot.recovery],
    )
    progress = [(entry.key, entry.progress) for entry in snapshot.recovery]
    families = [health, status, *_fields(gauge, RECOVERY_GAUGES, progress)]
    evictions = counter(
        "gotthard_lustre_target_evictions_total",
        "Clients the target evicted since it was mounted (eviction_count).",
        *TARGET,
    )
    for key, value in snapshot.evictions.items():
        evictions.add(key, value)
    connected = gauge(
        "gotthard_lustre_target_connected_clients",
        "Connections (exports) to the target, clients and other servers (num_exports).",
        *TARGET,
    )
    for key, value in snapshot.connected_clients.items():
        connected.add(key, value)
    families += [evictions, connected]
    lnet = snapshot.lnet
    for name, field, help_text in LNET_COUNTERS:
        family = counter(name, help_text)
        if field in lnet:
            family.add((), lnet[field])
        families.append(family)
    return families


CAPACITY_GAUGES: FieldSpecs = (
    (
        "gotthard_lustre_target_capacity_bytes",
        "Size of the target in bytes (kbytestotal of osd-*, obdfilter, mdt, osc or mdc).",
        "capacity_bytes",
    ),
    (
        "gotthard_lustre_target_available_bytes",
        "Bytes available to users on the target (kbytesavail).",
        "available_bytes",
    ),
    (
        "gotthard_lustre_target_free_bytes",
        "Free bytes on the target, including space reserved for root (kbytesfree).",
        "free_bytes",
    ),
)
BYTES_COUNTERS: FieldSpecs = (
    (
        "gotthard_lustre_read_bytes_total",
        "Bytes read, from the sum of the stats read_bytes line.",
        "read_bytes",
    ),
    (
        "gotthard_lustre_write_bytes_total",
        "Bytes written, from the sum of the stats write_bytes line.",
        "write_bytes",
    ),
)

#: (metric, LNet counter, help) of the node-wide LNet counters
LNET_COUNTERS = (
    ("gotthard_lustre_lnet_send_messages_total", "send_count", "LNet messages sent (send_count)."),
    (
        "gotthard_lustre_lnet_receive_messages_total",
        "recv_count",
        "LNet messages received (recv_count).",
    ),
    (
        "gotthard_lustre_lnet_drop_messages_total",
        "drop_count",
        "LNet messages dropped (drop_count): no route, no buffer, a dead peer.",
    ),
    ("gotthard_lustre_lnet_send_bytes_total", "send_length", "LNet bytes sent (send_length)."),
    (
        "gotthard_lustre_lnet_receive_bytes_total",
        "recv_length",
        "LNet bytes received (recv_length).",
    ),
    ("gotthard_lustre_lnet_drop_bytes_total", "drop_length", "LNet bytes dropped (drop_length)."),
    ("gotthard_lustre_lnet_errors_total", "errors", "LNet message errors (errors)."),
)


def client_imports(snapshot: LustreSnapshot) -> MetricFamily:
    """Each file system's client imports (``osc``, ``mdc``) of this node counted by state:
    every state of every component the node imports, 0 included, so that a rule can read
    a whole site's clients from a few series each instead of one per target."""
    family = gauge(
        "gotthard_lustre_client_imports",
        "Imports of the file system's OSTs (component osc) or MDTs (mdc) on this client, by "
        "state: connected (as gotthard_lustre_target_import_connected 1), disconnected (0) "
        "or deactivated (gotthard_lustre_target_active 0).",
        "fs",
        "component",
        "state",
    )
    counts: dict[tuple[str, str], dict[str, int]] = {}
    for key in sorted(snapshot.active.keys() | snapshot.imports.keys()):
        fs, _, component = key
        state = _import_state(snapshot, key)
        if state:
            counts.setdefault((fs, component), dict.fromkeys(IMPORT_STATES, 0))[state] += 1
    for (fs, component), by_state in counts.items():
        family.samples.extend(((fs, component, state), n) for state, n in by_state.items())
    return family


def _import_state(snapshot: LustreSnapshot, key: Key) -> str:
    """The summary state of one import ("" when neither deactivated nor read)."""
    if snapshot.active.get(key) == 0:
        return "deactivated"
    if key not in snapshot.imports:
        return ""
    return "connected" if snapshot.imports[key][0] in CONNECTED_IMPORT_STATES else "disconnected"


def render(
    snapshot: LustreSnapshot,
    *,
    job_stats_limit: int = 1000,
    export_stats_limit: int = 1000,
    client_target_space: bool = True,
    client_target_imports: bool = True,
) -> list[MetricFamily]:
    """The families of *snapshot*; without *client_target_space*, no space or inode gauges
    of a client's view of a target (``osc``, ``mdc``): its servers export them. Without
    *client_target_imports*, a client's per-target import gauges only for the imports that
    are not connected or are deactivated; the per-file-system summary counts them all."""
    capacity = [
        entry
        for entry in snapshot.capacity
        if client_target_space or entry.component not in CLIENT_VIEWS
    ]
    info = gauge(
        "gotthard_lustre_info",
        "Lustre version of this node (version parameter); always 1.",
        "version",
    )
    if snapshot.version:
        info.add((snapshot.version,), 1)
    role = gauge(
        "gotthard_lustre_node_role_info",
        "Lustre roles detected on this node (client, oss, mds, mgs); always 1.",
        "role",
    )
    for name in snapshot.roles:
        role.add((name,), 1)

    files = gauge(
        "gotthard_lustre_target_files",
        "Inodes (objects on an OST) of the target: state=total (filestotal) or free (filesfree).",
        *TARGET,
        "state",
    )
    for entry in capacity:
        key = entry.key
        if entry.files_total is not None:
            files.add((*key, "total"), entry.files_total)
        if entry.files_free is not None:
            files.add((*key, "free"), entry.files_free)
    active = gauge(
        "gotthard_lustre_target_active",
        "1 if the client's connection to the target is active, 0 if deactivated "
        "(osc.*.active, mdc.*.active); inactive targets report no capacity. A client run "
        "with --lustre.client-target-imports=false exports only the 0s.",
        *TARGET,
    )
    for key, value in snapshot.active.items():
        if client_target_imports or value == 0:
            active.add(key, value)
    connected = gauge(
        "gotthard_lustre_target_import_connected",
        "1 if the client's import of the target (osc.*.import, mdc.*.import) is connected "
        "to the server at LNet NID nid (current_connection): FULL, IDLE, or replaying and "
        "recovering; 0 while DISCONN, CONNECTING, EVICTED, CLOSED or NEW. A client run with "
        "--lustre.client-target-imports=false exports only the 0s.",
        *TARGET,
        "nid",
    )
    for key, (state, nid) in snapshot.imports.items():
        up = state in CONNECTED_IMPORT_STATES
        if client_target_imports or not up:
            connected.add((*key, nid), 1 if up else 0)

    operations = counter(
        "gotthard_lustre_operations_total",
        "Operations counted by the target's stats (obdfilter.*.stats, mdt.*.md_stats, "
        "mdc.*.md_stats, llite.*.stats); read/write fall back to the read_bytes/write_bytes "
        "sample counts where a version has no read/write line.",
        *TARGET,
        "operation",
    )
    latency = counter(
        "gotthard_lustre_operation_latency_seconds_total",
        "Summed service time of the operations, from the sum of [usecs] stats lines "
        "(Lustre 2.12 and later).",
        *TARGET,
        "operation",
    )
    open_time = counter(
        "gotthard_lustre_client_file_open_seconds_total",
        "Summed time files were held open, from open to close, over the closes counted by "
        "gotthard_lustre_client_file_closes_total (llite.*.stats openclosetime sum); "
        "not a latency.",
        *TARGET,
    )
    closes = counter(
        "gotthard_lustre_client_file_closes_total",
        "Closes whose open time was measured (llite.*.stats openclosetime samples).",
        *TARGET,
    )
    counters = [(entry.key, entry.counters) for entry in snapshot.stats]
    for key, block in counters:
        if block.open_closes is not None:
            closes.add(key, block.open_closes)
            open_time.add(key, (block.open_time_usecs or 0) / 1e6)
        operations.samples.extend(
            [((*key, name), count) for name, count in block.operations.items()]
        )
        latency.samples.extend(
            [((*key, name), usecs / 1e6) for name, usecs in block.latency_usecs.items()]
        )

    families = [info, role]
    families += _fields(gauge, CAPACITY_GAUGES, [(entry.key, entry) for entry in capacity])
    families += [files, active, connected, client_imports(snapshot), operations, latency]
    families += _fields(counter, BYTES_COUNTERS, counters)
    families += [open_time, closes]
    families += render_serving(snapshot)
    if snapshot.job_stats is not None:
        families += render_job_stats(snapshot.job_stats, job_stats_limit)
    if snapshot.export_stats is not None:
        families += render_export_stats(snapshot.export_stats, export_stats_limit)
    return families
