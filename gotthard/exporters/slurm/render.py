"""Pure function from a :class:`SlurmSnapshot` to Prometheus metric families.

Label sets are bounded by default: state, partition, account and pending reason.
``per_user`` adds ``user`` to the job families; ``gotthard_slurm_job_info`` (one series per
running job, the join key for GPU and Lustre metrics) can be switched off.
"""

from __future__ import annotations

import operator
from collections import defaultdict
from collections.abc import Sequence

from gotthard.exporters.families import Desc, MetricFamily, desc
from gotthard.slurm.snapshot import (
    JOB_EVENTS,
    JOB_STATES,
    Node,
    PollOptions,
    RpcStat,
    SlurmSnapshot,
    partition_names,
    partition_sums,
)

# --- the families, in output order ---------------------------------------------------

UP = desc("gotthard_slurm_up", "1 if the Slurm controller answered the last poll.")
INFO = desc(
    "gotthard_slurm_info", "Slurm release and exporter backend; always 1.", "version", "backend"
)
_JOB_LABELS = ("state", "partition", "account")
#: ``--slurm.per-user`` adds ``user`` to the job families.
_PER_USER = ("user",)
JOBS = desc(
    "gotthard_slurm_jobs", "Jobs by state, partition and account.", *_JOB_LABELS, optional=_PER_USER
)
JOBS_PENDING = desc(
    "gotthard_slurm_jobs_pending",
    "Pending jobs by partition and Slurm's pending reason.",
    "partition",
    "reason",
    optional=_PER_USER,
)
JOB_CPUS = desc(
    "gotthard_slurm_job_cpus",
    "CPUs held (running) or requested (pending) by jobs.",
    *_JOB_LABELS,
    optional=_PER_USER,
)
JOB_GPUS = desc(
    "gotthard_slurm_job_gpus",
    "GPUs held (running) or requested (pending) by jobs.",
    *_JOB_LABELS,
    optional=_PER_USER,
)
JOB_INFO = desc(
    "gotthard_slurm_job_info",
    "One series per running job; join key for GPU and Lustre metrics. Always 1.",
    "job_id",
    "user",
    "account",
    "partition",
)
NODES = desc(
    "gotthard_slurm_nodes",
    "Nodes by partition and state; each node counted once per partition in one state "
    "(drained, draining, down, fail, maint, reserved, idle, mixed, allocated, ...).",
    "state",
    "partition",
)
NODE_FLAGS = desc(
    "gotthard_slurm_node_flags",
    "Nodes carrying a state flag (drain, not_responding, maint, reserved, ...) by partition.",
    "flag",
    "partition",
)
NODE_INFO = desc(
    "gotthard_slurm_node_info",
    "One series per node with its full state (base+flags) and reason; always 1.",
    "node",
    "state",
    "reason",
)
_NODE_STATE = ("node", "state")
NODE_CPUS = desc(
    "gotthard_slurm_node_cpus", "Node CPUs by state (alloc, idle, other, total).", *_NODE_STATE
)
NODE_MEMORY = desc(
    "gotthard_slurm_node_memory_bytes", "Node memory by state (alloc, total).", *_NODE_STATE
)
NODE_GPUS = desc(
    "gotthard_slurm_node_gpus", "Node GPUs (GRES) by state (alloc, total).", *_NODE_STATE
)
NODE_LOAD = desc(
    "gotthard_slurm_node_cpu_load",
    "CPU load average of the node as slurmd last reported it (1 is one busy CPU).",
    "node",
)
_PARTITION_STATE = ("partition", "state")
PARTITION_CPUS = desc(
    "gotthard_slurm_partition_cpus",
    "Partition CPUs by state (alloc, idle, other, total).",
    *_PARTITION_STATE,
)
PARTITION_GPUS = desc(
    "gotthard_slurm_partition_gpus",
    "Partition GPUs by state (alloc, idle, total).",
    *_PARTITION_STATE,
)
PARTITION_MEMORY = desc(
    "gotthard_slurm_partition_memory_bytes",
    "Partition memory by state (alloc, idle, total).",
    *_PARTITION_STATE,
)
PARTITION_NODES = desc("gotthard_slurm_partition_nodes", "Nodes in the partition.", "partition")
PARTITION_INFO = desc(
    "gotthard_slurm_partition_info",
    "Partition availability and default flag; always 1.",
    "partition",
    "state",
    "default",
)
#: Attribute of the scheduler statistics -> its one-value sdiag family; a value the
#: source does not report (None) is no series rather than a false 0.
SCHEDULER: dict[str, Desc] = {
    "server_threads": desc("gotthard_slurm_scheduler_threads", "slurmctld server threads."),
    "agent_queue_size": desc(
        "gotthard_slurm_scheduler_agent_queue_size", "slurmctld agent queue size."
    ),
    "dbd_agent_queue_size": desc(
        "gotthard_slurm_scheduler_dbd_agent_queue_size", "Messages queued for slurmdbd."
    ),
    "queue_length": desc(
        "gotthard_slurm_scheduler_queue_length",
        "Jobs the main scheduler looked at in its last cycle.",
    ),
    "cycle_last_seconds": desc(
        "gotthard_slurm_scheduler_cycle_last_seconds", "Duration of the last main scheduling cycle."
    ),
    "cycle_max_seconds": desc(
        "gotthard_slurm_scheduler_cycle_max_seconds",
        "Longest main scheduling cycle since the statistics were reset.",
    ),
    "cycle_mean_seconds": desc(
        "gotthard_slurm_scheduler_cycle_mean_seconds",
        "Mean main scheduling cycle since the statistics were reset.",
    ),
    "backfill_cycle_last_seconds": desc(
        "gotthard_slurm_scheduler_backfill_cycle_last_seconds",
        "Duration of the last backfill cycle.",
    ),
    "backfill_cycle_mean_seconds": desc(
        "gotthard_slurm_scheduler_backfill_cycle_mean_seconds",
        "Mean backfill cycle since the statistics were reset.",
    ),
    "backfill_depth_mean": desc(
        "gotthard_slurm_scheduler_backfill_depth_mean",
        "Mean number of jobs the backfill scheduler considered per cycle.",
    ),
    "backfill_queue_length": desc(
        "gotthard_slurm_scheduler_backfill_queue_length",
        "Jobs in the backfill queue in its last cycle.",
    ),
    "backfilled_jobs_total": desc(
        "gotthard_slurm_scheduler_backfilled_jobs_total",
        "Jobs started by the backfill scheduler since slurmctld started.",
    ),
}
SCHEDULER_JOBS = desc(
    "gotthard_slurm_scheduler_jobs_total",
    "Jobs slurmctld counted since its statistics were reset, by event.",
    "event",
)
RPC_CALLS = desc(
    "gotthard_slurm_rpc_calls_total", "RPCs slurmctld served, by message type.", "type"
)
RPC_SECONDS = desc(
    "gotthard_slurm_rpc_duration_seconds_total",
    "Time slurmctld spent serving RPCs, by message type.",
    "type",
)
#: Only with ``--slurm.per-user``.
RPC_USER_CALLS = desc(
    "gotthard_slurm_rpc_user_calls_total", "RPCs slurmctld served, by user.", "user"
)
RPC_USER_SECONDS = desc(
    "gotthard_slurm_rpc_user_duration_seconds_total",
    "Time slurmctld spent on RPCs, by user.",
    "user",
)
PROBE_SUCCESS = desc(
    "gotthard_slurm_probe_success",
    "1 if the synthetic user-path probe succeeded (ping, submit).",
    "op",
)
PROBE_DURATION = desc(
    "gotthard_slurm_probe_duration_seconds", "Duration of the synthetic probe.", "op"
)
CONTROLLER_UP = desc(
    "gotthard_slurm_controller_up",
    "1 if the slurmctld answered the ping probe; role is primary or backup, index its "
    "position in SlurmctldHost.",
    "controller",
    "role",
    "index",
)
DBD_UP = desc(
    "gotthard_slurm_dbd_up",
    "1 if the slurmdbd answered sacctmgr ping (Slurm 24.11+); role is primary or backup. "
    "Absent where the ping cannot run.",
    "dbd",
    "role",
)
RESERVATION_INFO = desc(
    "gotthard_slurm_reservation_info",
    "One series per advance reservation: state (active, inactive), partition, flags. Always 1.",
    "reservation",
    "state",
    "partition",
    "flags",
)
RESERVATION_NODES = desc(
    "gotthard_slurm_reservation_nodes", "Nodes in the reservation.", "reservation"
)
#: The fair-share tree (``--slurm.fairshare``): one series per association, an account's
#: with ``user=""``. Named in the ``gotthard_slurm_`` namespace from the start.
_SHARE_LABELS = ("account", "user")
ACCOUNT_FAIRSHARE = desc(
    "gotthard_slurm_account_fairshare",
    "Fair-share factor (0..1; sshare FairShare) of each user association; higher runs sooner.",
    *_SHARE_LABELS,
)
ACCOUNT_RAW_USAGE = desc(
    "gotthard_slurm_account_raw_usage_seconds",
    "Decayed usage of each association (sshare RawUsage): billing TRES-seconds, "
    "CPU-seconds unless TRESBillingWeights say otherwise.",
    *_SHARE_LABELS,
)
ACCOUNT_EFFECTIVE_USAGE = desc(
    "gotthard_slurm_account_effective_usage_ratio",
    "Each association's share of its parent's usage (0..1; sshare EffectvUsage).",
    *_SHARE_LABELS,
)


def render(snapshot: SlurmSnapshot, options: PollOptions) -> list[MetricFamily]:
    up = UP.new()
    up.add((), 1 if snapshot.up else 0)
    families = [up]
    if not snapshot.up:
        return families
    if snapshot.version:
        info = INFO.new()
        info.add((snapshot.version, snapshot.backend), 1)
        families.append(info)
    families += _jobs(snapshot, options)
    families += _nodes(snapshot)
    families += _partitions(snapshot)
    families += _scheduler(snapshot, options)
    families += _probes(snapshot)
    families += _controllers(snapshot)
    families += _dbds(snapshot)
    families += _reservations(snapshot)
    families += _shares(snapshot)
    return families


def _jobs(snapshot: SlurmSnapshot, options: PollOptions) -> list[MetricFamily]:
    per_user = options.per_user
    jobs = JOBS.new(optional=per_user)
    cpus = JOB_CPUS.new(optional=per_user)
    gpus = JOB_GPUS.new(optional=per_user)
    pending = JOBS_PENDING.new(optional=per_user)
    totals: dict[tuple[str, ...], list[int]] = defaultdict(lambda: [0, 0, 0])
    pending_totals: dict[tuple[str, ...], int] = defaultdict(int)
    for group in snapshot.job_groups:
        key = (group.state, group.partition, group.account)
        if options.per_user:
            key = (*key, group.user)
        row = totals[key]
        row[0] += group.count
        row[1] += group.cpus
        row[2] += group.gpus
        if group.state == "pending":
            pkey = (group.partition, group.reason)
            if options.per_user:
                pkey = (*pkey, group.user)
            pending_totals[pkey] += group.count
    # Known partitions report every job state, at 0 when empty: an idle cluster still has
    # gotthard_slurm_jobs series, and a panel shows 0 rather than "No data".
    seen = {(group.state, group.partition) for group in snapshot.job_groups}
    no_account = ("", "") if options.per_user else ("",)
    for partition in partition_names(snapshot.nodes, snapshot.partitions):
        for state in JOB_STATES:
            if (state, partition) not in seen:
                totals[(state, partition, *no_account)] = [0, 0, 0]
    for key, (count, n_cpus, n_gpus) in sorted(totals.items()):
        jobs.add(key, count)
        cpus.add(key, n_cpus)
        gpus.add(key, n_gpus)
    for key, count in sorted(pending_totals.items()):
        pending.add(key, count)
    families = [jobs, pending, cpus, gpus]
    if options.job_info:
        info = JOB_INFO.new()
        info.samples = [
            ((job.job_id, job.user, job.account, job.partition), 1) for job in snapshot.running_jobs
        ]
        families.append(info)
    return families


def _nodes(snapshot: SlurmSnapshot) -> list[MetricFamily]:
    nodes, flags, info = NODES.new(), NODE_FLAGS.new(), NODE_INFO.new()
    node_cpus, node_memory, node_gpus = NODE_CPUS.new(), NODE_MEMORY.new(), NODE_GPUS.new()
    node_load = NODE_LOAD.new()
    counts: dict[tuple[str, str], int] = defaultdict(int)
    flag_counts: dict[tuple[str, str], int] = defaultdict(int)
    all_nodes = snapshot.nodes
    for node in all_nodes:
        state = node.effective_state
        for partition in node.partitions or ("",):
            counts[(state, partition)] += 1
            for flag in node.flags:
                flag_counts[(flag, partition)] += 1
    # Per-node families are the bulk of a big cluster's output: build them in bulk.
    info.samples = [((n.name, n.full_state, n.reason), 1) for n in all_nodes]
    node_cpus.samples = _per_node(all_nodes, "cpus_{}", ("alloc", "idle", "other", "total"))
    node_memory.samples = _per_node(all_nodes, "memory_{}_bytes", ("alloc", "total"))
    node_gpus.samples = _per_node(
        [n for n in all_nodes if n.gpus_total], "gpus_{}", ("alloc", "total")
    )
    node_load.samples = [((n.name,), n.cpu_load) for n in all_nodes if n.cpu_load is not None]
    for key, count in sorted(counts.items()):
        nodes.add(key, count)
    for key, count in sorted(flag_counts.items()):
        flags.add(key, count)
    return [nodes, flags, info, node_cpus, node_memory, node_gpus, node_load]


def _per_node(
    nodes: Sequence[Node], attribute: str, states: tuple[str, ...]
) -> list[tuple[tuple[str, str], int]]:
    """``((node, state), value)`` per node and state, in bulk (the bulk of a big cluster's
    output): the value is the Node attribute *attribute* names with the state filled in
    (``"cpus_{}"``: ``cpus_alloc``, ``cpus_idle``, ...)."""
    values = operator.attrgetter(*(attribute.format(state) for state in states))
    return [
        ((n.name, state), value)
        for n in nodes
        for state, value in zip(states, values(n), strict=True)
    ]


def _partitions(snapshot: SlurmSnapshot) -> list[MetricFamily]:
    cpus, gpus, memory = PARTITION_CPUS.new(), PARTITION_GPUS.new(), PARTITION_MEMORY.new()
    node_count, info = PARTITION_NODES.new(), PARTITION_INFO.new()
    records = {partition.name: partition for partition in snapshot.partitions}
    for name, row in partition_sums(snapshot).items():
        record = records.get(name)
        total_cpus = row.cpus_total
        total_nodes = row.nodes
        if record is not None and record.total_cpus is not None:
            total_cpus = record.total_cpus
        if record is not None and record.total_nodes is not None:
            total_nodes = record.total_nodes
        cpus.add((name, "alloc"), row.cpus_alloc)
        cpus.add((name, "idle"), row.cpus_idle)
        cpus.add((name, "other"), row.cpus_other)
        cpus.add((name, "total"), total_cpus)
        gpus.add((name, "alloc"), row.gpus_alloc)
        gpus.add((name, "idle"), max(row.gpus_total - row.gpus_alloc, 0))
        gpus.add((name, "total"), row.gpus_total)
        memory.add((name, "alloc"), row.memory_alloc)
        memory.add((name, "idle"), row.memory_idle)
        memory.add((name, "total"), row.memory_total)
        node_count.add((name,), total_nodes)
    for partition in snapshot.partitions:
        info.add((partition.name, partition.state, "true" if partition.is_default else "false"), 1)
    return [cpus, gpus, memory, node_count, info]


def _scheduler(snapshot: SlurmSnapshot, options: PollOptions) -> list[MetricFamily]:
    stats = snapshot.scheduler
    if stats is None:
        return []
    families: list[MetricFamily] = []
    for attribute, decl in SCHEDULER.items():
        value = getattr(stats, attribute)
        if value is None:
            continue  # not reported by this source: no series rather than a false 0
        family = decl.new()
        family.add((), value)
        families.append(family)
    jobs = SCHEDULER_JOBS.new()
    for event in JOB_EVENTS:
        value = getattr(stats, f"jobs_{event}_total")
        if value is not None:
            jobs.add((event,), value)
    if jobs.samples:
        families.append(jobs)
    families += _rpc_families(stats.rpc_by_type, RPC_CALLS, RPC_SECONDS)
    if options.per_user:
        families += _rpc_families(stats.rpc_by_user, RPC_USER_CALLS, RPC_USER_SECONDS)
    return families


def _rpc_families(table: dict[str, RpcStat], calls: Desc, seconds: Desc) -> list[MetricFamily]:
    """Calls and time of one RPC table of sdiag, as two counters by its key."""
    calls_family = calls.new()
    seconds_family = seconds.new()
    for key, stat in sorted(table.items()):
        calls_family.add((key,), stat.count)
        seconds_family.add((key,), stat.total_seconds)
    return [calls_family, seconds_family]


def _probes(snapshot: SlurmSnapshot) -> list[MetricFamily]:
    success, duration = PROBE_SUCCESS.new(), PROBE_DURATION.new()
    for probe in snapshot.probes:
        success.add((probe.op,), 1 if probe.success else 0)
        duration.add((probe.op,), probe.duration_seconds)
    return [success, duration]


def _controllers(snapshot: SlurmSnapshot) -> list[MetricFamily]:
    if not snapshot.controllers:
        return []  # no ping this poll: absent, not "every controller down"
    up = CONTROLLER_UP.new()
    for controller in snapshot.controllers:
        up.add(
            (controller.hostname, controller.role, str(controller.index)),
            1 if controller.up else 0,
        )
    return [up]


def _dbds(snapshot: SlurmSnapshot) -> list[MetricFamily]:
    if not snapshot.dbds:
        return []  # no ping, or none understood: absent, not "slurmdbd down"
    up = DBD_UP.new()
    for dbd in snapshot.dbds:
        up.add((dbd.hostname, dbd.role), 1 if dbd.up else 0)
    return [up]


def _reservations(snapshot: SlurmSnapshot) -> list[MetricFamily]:
    if snapshot.reservations is None:
        return []  # the backend could not read them: absent, not "no reservations"
    info, nodes = RESERVATION_INFO.new(), RESERVATION_NODES.new()
    for reservation in sorted(snapshot.reservations, key=operator.attrgetter("name")):
        info.add((reservation.name, reservation.state, reservation.partition, reservation.flags), 1)
        nodes.add((reservation.name,), reservation.nodes)
    return [info, nodes]


def _shares(snapshot: SlurmSnapshot) -> list[MetricFamily]:
    if snapshot.shares is None:
        return []  # not asked for, or unreadable: absent, not "no usage"
    factor, raw, effective = (
        ACCOUNT_FAIRSHARE.new(),
        ACCOUNT_RAW_USAGE.new(),
        ACCOUNT_EFFECTIVE_USAGE.new(),
    )
    for share in snapshot.shares:
        labels = (share.account, share.user)
        if share.fairshare is not None:
            factor.add(labels, share.fairshare)
        raw.add(labels, share.raw_usage)
        effective.add(labels, share.effective_usage)
    return [factor, raw, effective]
