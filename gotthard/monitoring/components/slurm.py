"""Slurm: nodes, partitions, the pending backlog and the controller."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from gotthard.monitoring.rule_model import AlertRule, RecordingRule, above, on_condition, regex_any
from gotthard.monitoring.shared import SC
from gotthard.monitoring.thresholds import (
    ThresholdValues,
    count,
    duration,
    lasting,
    num,
    pct,
    ratio,
    seconds,
)
from gotthard.slurm_state import (
    DRAIN_REASON_PREFIX,
    FAILED_EFFECTIVE_STATES,
    UNAVAILABLE_EFFECTIVE_STATES,
    full_state_pattern,
)

COMPONENT = "slurm"
DASHBOARD = "slurm-cluster"

UNAVAILABLE_RATIO = ratio("slurm_unavailable_ratio", 0.10, "share of a partition's nodes down")
UNAVAILABLE_MIN = count("slurm_unavailable_min_nodes", 2, "nodes of a partition down, at least")
PENDING_JOBS = count("slurm_pending_resources_jobs", 10, "jobs pending for Resources")
BACKLOG_IDLE = ratio(
    "slurm_backlog_idle_ratio",
    0.20,
    "share of a partition's GPUs (CPUs, without GPUs) idle while jobs pend",
)
SCHEDULER_CYCLE = seconds("slurm_scheduler_cycle_seconds", 2.0, "mean main scheduler cycle")
CONTROLLER_DOWN_FOR = lasting(
    "slurm_controller_down_for",
    300,
    "how long slurmctld may not answer: longer than SlurmctldTimeout (120 s by default) plus "
    "the backup's takeover, so that a failover does not page",
)
BACKUP_DOWN_FOR = lasting(
    "slurm_backup_controller_down_for", 900, "how long a backup slurmctld may not answer"
)
DBD_DOWN_FOR = lasting("slurm_dbd_down_for", 600, "how long slurmdbd may not answer its ping")
DBD_QUEUE = count("slurm_dbd_queue_messages", 5000, "messages queued for slurmdbd")
NOT_RESPONDING_FOR = lasting(
    "slurm_not_responding_for", 600, "how long a node may not answer slurmctld"
)
COMPLETING_FOR = lasting("slurm_completing_stuck_for", 1800, "how long a node may stay COMPLETING")

#: Recorded series the alerts and dashboards read.
UNAVAILABLE = "site_cluster_partition:gotthard_slurm_nodes_unavailable:ratio"
PENDING_RESOURCES = "site_cluster_partition:gotthard_slurm_jobs_pending_resources:sum"
NODE_CPUS_ALLOC = "site_cluster:gotthard_slurm_node_cpus_alloc:ratio"
PARTITION_CPUS_ALLOC = "site_cluster_partition:gotthard_slurm_partition_cpus_alloc:ratio"
PARTITION_GPUS_ALLOC = "site_cluster_partition:gotthard_slurm_partition_gpus_alloc:ratio"
NODES_BY_STATE = "site_cluster_partition_state:gotthard_slurm_nodes:sum"
NODE_GPUS_ALLOC = "site_cluster:gotthard_slurm_node_gpus_alloc:ratio"
FAILED = "site_cluster_partition:gotthard_slurm_nodes_failed:sum"
FAILED_RATIO = "site_cluster_partition:gotthard_slurm_nodes_failed:ratio"
IDLE_CPUS = "site_cluster_partition:gotthard_slurm_partition_cpus_idle:ratio"
#: Only partitions with GPUs have a series.
IDLE_GPUS = "site_cluster_partition:gotthard_slurm_partition_gpus_idle:ratio"
MAINTENANCE_DRAINS = "site_cluster:gotthard_slurm_nodes_maintenance_drained:count"
#: One series (1) per node out of service on purpose: see :data:`_MAINTENANCE_NODE`.
MAINTENANCE_NODES = "site_cluster_node:gotthard_slurm_node_maintenance:group"

#: Nodes drained (or draining) with a reason Gotthard did not write: an operator's drain
#: (the drain reason Gotthard's runbook webhook writes starts with DRAIN_REASON_PREFIX).
_OPERATOR_DRAIN = (
    f'gotthard_slurm_node_info{{state=~"{full_state_pattern(flags=("drain",))}", '
    f'reason!~"{DRAIN_REASON_PREFIX}.*"}}'
)
#: A node in maintenance: an operator's drain, or Slurm's MAINT flag (a maintenance
#: reservation). Such a node pages for nothing that its maintenance explains.
_MAINTENANCE_NODE = (
    f"{_OPERATOR_DRAIN}\n  or\n  gotthard_slurm_node_info"
    f'{{state=~"{full_state_pattern(flags=("maint",))}"}}'
)


#: The Slurm node of a per-host series, for the maintenance join: the host of ``instance``
#: without its domain and port. Assumes, as the runbook webhook does (its
#: ``slurm_strip_domain``), that a node's exporter is scraped by the node's host name and
#: that this name, less its domain, is the Slurm NodeName; an exporter scraped by IP
#: address matches no node, so its alerts are never taken for maintenance.
_SLURM_HOST = "([^.:]+)(?:[.][^:]*)?(?::[0-9]+)?"


def not_in_maintenance(expr: str) -> str:
    """*expr*, a per-host series (``instance``), without the hosts that are Slurm nodes in
    maintenance (an operator's drain or MAINT, :data:`MAINTENANCE_NODES`); its result gets
    the ``node`` label."""
    inner = expr.replace("\n", "\n  ")
    return (
        f'label_replace(\n  {inner},\n  "node", "$1", "instance", "{_SLURM_HOST}"\n)'
        f"\nunless on (site, cluster, node)\n{MAINTENANCE_NODES}"
    )


def respecting_maintenance(rule: AlertRule, exempt: frozenset[str] = frozenset()) -> AlertRule:
    """*rule* (about one host's GPUs, NICs or Lustre client), quiet for nodes in
    maintenance unless *exempt* names it: what an operator works on neither pages nor
    gets an automatic action."""
    if rule.name in exempt:
        return rule
    return replace(
        rule,
        expr=not_in_maintenance(rule.expr),
        expr_summary=rule.expr_summary + " (not on a node in maintenance)",
    )


def _allocated(name: str, metric: str, labels: str) -> RecordingRule:
    """Allocated over total of a ``state``-labelled Slurm gauge, summed by *labels*."""
    return RecordingRule(
        COMPONENT,
        name,
        f'sum by ({labels}) ({metric}{{state="alloc"}})'
        f'\n/\n(sum by ({labels}) ({metric}{{state="total"}}) > 0)',
    )


_PARTITION = "site, cluster, partition"
_PARTITION_NODES = "site_cluster_partition:gotthard_slurm_nodes:sum"


def _nodes_in(states: tuple[str, ...], total: str, share: str) -> tuple[RecordingRule, ...]:
    """Nodes of each partition in one of *states* (0, not absent, when none is) as
    *total*, and their share of the partition's nodes as *share*."""
    return (
        RecordingRule(
            COMPONENT,
            total,
            f"sum by ({_PARTITION}) "
            f'(gotthard_slurm_nodes{{state=~"{regex_any(states)}"}})'
            f"\nor\n0 * sum by ({_PARTITION}) (gotthard_slurm_nodes)",
        ),
        RecordingRule(COMPONENT, share, f"{total}\n/\n({_PARTITION_NODES} > 0)"),
    )


RECORDING_RULES = (
    RecordingRule(
        COMPONENT,
        NODES_BY_STATE,
        "sum by (site, cluster, partition, state) (gotthard_slurm_nodes)",
    ),
    RecordingRule(
        COMPONENT, _PARTITION_NODES, "sum by (site, cluster, partition) (gotthard_slurm_nodes)"
    ),
    # node states that make a node unavailable to the scheduler (gotthard_slurm_nodes{state}), as
    # the exporter's backends, the runbook webhook and the sandbox judge them
    *_nodes_in(
        UNAVAILABLE_EFFECTIVE_STATES,
        "site_cluster_partition:gotthard_slurm_nodes_unavailable:sum",
        UNAVAILABLE,
    ),
    # failed nodes page; drains do not: an operator's (or Slurm's own) drain is
    # maintenance, shown on the dashboard; a drain by Gotthard's runbooks follows another
    # alert, which pages already
    *_nodes_in(FAILED_EFFECTIVE_STATES, FAILED, FAILED_RATIO),
    *(
        RecordingRule(
            COMPONENT,
            record,
            f'sum by (site, cluster, partition) ({metric}{{state="idle"}})'
            f'\n/\n(sum by (site, cluster, partition) ({metric}{{state="total"}}) > 0)',
        )
        for record, metric in (
            (IDLE_CPUS, "gotthard_slurm_partition_cpus"),
            (IDLE_GPUS, "gotthard_slurm_partition_gpus"),
        )
    ),
    # Nodes drained (or draining) with a reason Gotthard did not write: maintenance.
    RecordingRule(
        COMPONENT, MAINTENANCE_DRAINS, f"count by (site, cluster) (\n  {_OPERATOR_DRAIN}\n)"
    ),
    RecordingRule(
        COMPONENT, MAINTENANCE_NODES, f"group by (site, cluster, node) (\n  {_MAINTENANCE_NODE}\n)"
    ),
    _allocated(PARTITION_CPUS_ALLOC, "gotthard_slurm_partition_cpus", _PARTITION),
    _allocated(PARTITION_GPUS_ALLOC, "gotthard_slurm_partition_gpus", _PARTITION),
    _allocated(NODE_CPUS_ALLOC, "gotthard_slurm_node_cpus", SC),
    _allocated(NODE_GPUS_ALLOC, "gotthard_slurm_node_gpus", SC),
    RecordingRule(
        COMPONENT,
        PENDING_RESOURCES,
        'sum by (site, cluster, partition) (gotthard_slurm_jobs_pending{reason="Resources"})',
    ),
)

_alert = partial(AlertRule, component=COMPONENT, dashboard=DASHBOARD)
_above = partial(above, _alert)


def _node_flag(
    name: str, flag: str, for_: str, summary: str, what: str, *, maintenance_explains: bool = False
) -> AlertRule:
    """A node that has carried Slurm state *flag* for *for_*, one alert per node; not for a
    node in maintenance when *maintenance_explains* the flag."""
    # one series per node whatever its base state, so that ``for`` survives a change
    # from idle+FLAG to down+FLAG
    expr = f'count by (site, cluster, node) (gotthard_slurm_node_info{{state=~".*{flag}.*"}})'
    expr_summary = f"a node with Slurm flag `{flag}` for {for_}"
    if maintenance_explains:
        expr += f"\nunless on (site, cluster, node)\n{MAINTENANCE_NODES}"
        expr_summary += " (not in maintenance: an operator's drain or MAINT)"
    return _alert(
        name=name,
        expr=expr,
        for_=for_,
        severity="warning",
        summary=summary,
        description="Node {{ $labels.node }} in {{ $labels.site }}/{{ $labels.cluster }} "
        + what
        + f" for {_in_words(for_)}.",
        expr_summary=expr_summary,
    )


def _in_words(for_: str) -> str:
    """``10m`` -> ``10 minutes``, ``2h`` -> ``2 hours``."""
    unit = {"m": "minutes", "h": "hours", "s": "seconds"}[for_[-1]]
    return f"{for_[:-1]} {unit}"


def alerts(t: ThresholdValues) -> tuple[AlertRule, ...]:
    unavailable, minimum, pending = t[UNAVAILABLE_RATIO], t[UNAVAILABLE_MIN], t[PENDING_JOBS]
    cycle, idle = t[SCHEDULER_CYCLE], t[BACKLOG_IDLE]
    down_for, backup_for = duration(t[CONTROLLER_DOWN_FOR]), duration(t[BACKUP_DOWN_FOR])
    dbd_for = duration(t[DBD_DOWN_FOR])
    return (
        _alert(
            name="SlurmControllerDown",
            # slurmctld does not answer the exporter's polls, which a backup controller
            # answers once it has taken over: for longer than SlurmctldTimeout plus the
            # takeover. No gotthard_slurm_up at all (the exporter or its host gone) says nothing
            # about slurmctld: GotthardExporterDown reports it.
            expr="gotthard_slurm_up == 0",
            for_=down_for,
            severity="critical",
            summary="The Slurm controller does not answer.",
            description=(
                "slurmctld of cluster {{ $labels.cluster }} at {{ $labels.site }} has not "
                f"answered the polls of {{{{ $labels.instance }}}} for {_in_words(down_for)}"
                ", longer than a failover to a backup controller takes: no jobs can be "
                "submitted or scheduled."
            ),
            expr_summary=(
                f"`gotthard_slurm_up == 0` for {down_for}: longer than `SlurmctldTimeout` "
                "(120 s by default) plus the backup's takeover; an exporter that reports "
                "nothing is `GotthardExporterDown`'s"
            ),
        ),
        _alert(
            name="SlurmControllerOnBackup",
            # The same exporter's ping sees the primary down and a backup up: Slurm failed
            # over and still serves, so gotthard_slurm_up stays 1 and SlurmControllerDown is quiet.
            # With every controller down there is no backup at 1 (SlurmControllerDown).
            expr='gotthard_slurm_controller_up{role="primary"} == 0\n'
            "and on (site, cluster, instance)\n"
            'gotthard_slurm_controller_up{role="backup"} == 1',
            for_="2m",
            severity="warning",
            summary="Slurm runs on its backup controller: the primary is down.",
            description=(
                "The primary slurmctld {{ $labels.controller }} of {{ $labels.site }}/"
                "{{ $labels.cluster }} has not answered the ping of {{ $labels.instance }} "
                "for 2 minutes while a backup controller answers: the cluster runs on its "
                "backup and fails completely if that one fails too."
            ),
            expr_summary=(
                '`gotthard_slurm_controller_up{role="primary"} == 0` while a backup of the same '
                "exporter reads 1"
            ),
        ),
        _alert(
            name="SlurmBackupControllerDown",
            # the mirror image: the primary serves and a backup does not answer, so the
            # next failure of the primary is an outage
            expr='gotthard_slurm_controller_up{role="backup"} == 0\n'
            "and on (site, cluster, instance)\n"
            'gotthard_slurm_controller_up{role="primary"} == 1',
            for_=backup_for,
            severity="warning",
            summary="A backup Slurm controller is down while the primary runs.",
            description=(
                "The backup slurmctld {{ $labels.controller }} of {{ $labels.site }}/"
                "{{ $labels.cluster }} has not answered the ping of {{ $labels.instance }} "
                f"for {_in_words(backup_for)} while the primary answers: the cluster has "
                "no failover if the primary fails."
            ),
            expr_summary=(
                '`gotthard_slurm_controller_up{role="backup"} == 0` while the primary of the same '
                f"exporter reads 1, for {backup_for}"
            ),
        ),
        _alert(
            name="SlurmDBDDown",
            # sacctmgr ping (Slurm 24.11+): every slurmdbd the exporter pinged says DOWN.
            # No gotthard_slurm_dbd_up (an older Slurm, no slurmdbd, another backend) is no
            # evidence.
            expr="max by (site, cluster, instance) (gotthard_slurm_dbd_up) == 0",
            for_=dbd_for,
            severity="critical",
            summary="slurmdbd, Slurm's accounting daemon, does not answer.",
            description=(
                "No slurmdbd of {{ $labels.site }}/{{ $labels.cluster }} has answered the "
                f"ping of {{{{ $labels.instance }}}} for {_in_words(dbd_for)}: sacct, "
                "sacctmgr and sreport fail, limits and fair share stop updating, and "
                "slurmctld queues accounting records until they overflow."
            ),
            expr_summary=(
                "every slurmdbd answers DOWN to `sacctmgr ping` (`gotthard_slurm_dbd_up`) "
                f"for {dbd_for}"
            ),
        ),
        on_condition(
            _alert,
            "SlurmSubmitProbeFailing",
            'gotthard_slurm_probe_success{op="submit"} == 0',
            "10m",
            "critical",
            "Users cannot submit Slurm jobs.",
            "The synthetic job submission of {{ $labels.instance }} to "
            "{{ $labels.site }}/{{ $labels.cluster }} has failed for 10 minutes.",
            " for 10 minutes",
        ),
        _above(
            "SlurmDBDBacklog",
            "gotthard_slurm_scheduler_dbd_agent_queue_size",
            t[DBD_QUEUE],
            "15m",
            "warning",
            "slurmctld cannot hand its accounting records to slurmdbd.",
            "slurmctld of {{ $labels.site }}/{{ $labels.cluster }} holds "
            "{{ $value | humanize }} messages for slurmdbd: slurmdbd or its database is "
            "down or too slow.",
            f"more than {num(t[DBD_QUEUE])} messages queued for slurmdbd",
        ),
        _alert(
            name="SlurmNodesUnavailable",
            expr=f"{FAILED_RATIO} > {num(unavailable)}\nand on (site, cluster, partition)\n"
            f"{FAILED} >= {num(minimum)}",
            for_="15m",
            severity="warning",
            summary="Many Slurm nodes are down or failing.",
            description=(
                "{{ $value | humanizePercentage }} of the nodes of partition "
                "{{ $labels.partition }} in {{ $labels.site }}/{{ $labels.cluster }} are down "
                "or failing."
            ),
            expr_summary=(
                f"share of nodes in {', '.join(FAILED_EFFECTIVE_STATES)} per partition "
                f"> {pct(unavailable)} and at least {num(minimum)} nodes (drains are not counted)"
            ),
        ),
        _node_flag(
            "SlurmNodeNotResponding",
            "not_responding",
            duration(t[NOT_RESPONDING_FOR]),
            "A Slurm node does not answer slurmctld.",
            "has not answered slurmctld",
            # an operator who drains a node to work on it often stops its slurmd
            maintenance_explains=True,
        ),
        _node_flag(
            "SlurmNodeStuckCompleting",
            "completing",
            duration(t[COMPLETING_FOR]),
            "A Slurm node is stuck completing jobs.",
            "has been COMPLETING (a job's processes do not end)",
            # the operator who drained the node is at it
            maintenance_explains=True,
        ),
        _alert(
            name="SlurmPendingResourcesBacklog",
            # a GPU partition is full when its GPUs are, however many CPUs its GPU jobs
            # leave idle: it is judged by GPUs; a partition without GPUs by CPUs
            expr=f"{PENDING_RESOURCES} > {num(pending)}\nand on (site, cluster, partition)\n"
            f"(\n  {IDLE_GPUS} > {num(idle)}\n  or\n  ({IDLE_CPUS} > {num(idle)}"
            f"\n    unless on (site, cluster, partition)\n    {IDLE_GPUS})\n)",
            for_="1h",
            severity="warning",
            summary="Slurm jobs pend for resources while resources sit idle.",
            description=(
                "{{ $value | humanize }} jobs of partition {{ $labels.partition }} in "
                "{{ $labels.site }}/{{ $labels.cluster }} have been pending with reason "
                f"Resources for over an hour while more than {pct(idle)} of its GPUs (of its "
                "CPUs, in a partition without GPUs) are idle."
            ),
            expr_summary=(
                f"more than {num(pending)} jobs pending with reason `Resources` per partition "
                f"while over {pct(idle)} of its GPUs are idle (its CPUs, without GPUs)"
            ),
        ),
        _above(
            "SlurmSchedulerCycleSlow",
            "avg_over_time(gotthard_slurm_scheduler_cycle_last_seconds[10m])",
            cycle,
            "15m",
            "warning",
            "The Slurm main scheduler cycle is slow.",
            "The main scheduling cycle of {{ $labels.site }}/{{ $labels.cluster }} took "
            "{{ $value | humanizeDuration }} on average over the last 10 minutes.",
            f"10-minute average of `gotthard_slurm_scheduler_cycle_last_seconds` > {num(cycle)} s",
        ),
    )
