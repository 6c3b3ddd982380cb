"""The one table of metric renames before 1.0: old name -> new name, and why.
migrate-names: skip-file

Every family of the exporter's collectors now starts ``gotthard_<area>_``
(``gotthard_slurm_``, ``gotthard_gpu_``, ``gotthard_lustre_``, ``gotthard_slingshot_``),
a namespace no other project's exporter uses: the bare ``slurm_`` and ``lustre_`` prefixes
are those of vpenso's and SckyzO's Slurm exporters and of HPE's lustre_exporter and
lustrefs-exporter, and some names were identical with other semantics (see
tests/fixtures/foreign-names/). A few names also change to follow Prometheus' naming
conventions. The recording rules that record a renamed family keep their
``level:metric:operations`` shape with the new metric part.

Everything that moves old names to new ones reads this table: ``gotthard rules
migrate-names`` (text files: code, tests, docs, a site's own dashboards and alerts),
``[monitoring] legacy_names = true`` (a recording-rule group that records each old name
from the new one, for one release; :func:`legacy_rules`), and the rename table of
docs/exporter.md (``scripts/generate.py``).

This module holds the old names on purpose; ``migrate-names`` leaves it alone (the
``skip-file`` marker above).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "AREAS",
    "LEGACY_GROUP",
    "RENAMES",
    "Rename",
    "legacy_rules",
    "mapping",
    "markdown_table",
]

#: The collector areas whose families take the ``gotthard_<area>_`` namespace.
AREAS = ("slurm", "gpu", "lustre", "slingshot")
#: The recording-rule group ``[monitoring] legacy_names = true`` adds.
LEGACY_GROUP = "gotthard-legacy.recording"

RenameKind = Literal["family", "recording rule"]


@dataclass(frozen=True, slots=True)
class Rename:
    old: str
    new: str
    why: str
    kind: RenameKind = "family"


_NAMESPACE_WHY = {
    "slurm": "namespace: `slurm_` is the prefix of vpenso's and SckyzO's Slurm exporters",
    "gpu": "namespace: `gpu_` named no project; GPU families get `gotthard_gpu_`",
    "lustre": "namespace: `lustre_` is the prefix of HPE's lustre_exporter and lustrefs-exporter",
    "slingshot": "namespace: one `gotthard_<area>_` prefix per area",
}

#: Old family -> (new name, why) where more than the namespace changes or the old name
#: was taken by another exporter; every other family is ``gotthard_`` + its old name.
_SPECIAL: dict[str, tuple[str, str]] = {
    "slurm_info": (
        "gotthard_slurm_info",
        "SckyzO's slurm_exporter exports `slurm_info` with other labels",
    ),
    "slurm_jobs_pending": (
        "gotthard_slurm_jobs_pending",
        "SckyzO's `slurm_jobs_pending` is a count without labels",
    ),
    "slurm_reservation_info": (
        "gotthard_slurm_reservation_info",
        "SckyzO's slurm_exporter exports `slurm_reservation_info` with other labels",
    ),
    "slurm_nodes": (
        "gotthard_slurm_nodes",
        "SckyzO's `slurm_nodes_total` (a gauge) is the same family name in OpenMetrics, "
        "where a counter `x` is exposed as `x_total`",
    ),
    "slurm_partition_cpus": (
        "gotthard_slurm_partition_cpus",
        "vpenso's and SckyzO's `slurm_partition_cpus_total` (a gauge) is the same family "
        "name in OpenMetrics, where a counter `x` is exposed as `x_total`",
    ),
    "slurm_scheduler_threads": (
        "gotthard_slurm_scheduler_threads",
        "vpenso's and SckyzO's name for the same sdiag value: a site running both "
        "would get two series under one name",
    ),
    "slurm_scheduler_backfill_depth_mean": (
        "gotthard_slurm_scheduler_backfill_depth_mean",
        "vpenso's and SckyzO's name for the same sdiag value: a site running both "
        "would get two series under one name",
    ),
    "gpu_pcie_replay_total": (
        "gotthard_gpu_pcie_replays_total",
        "namespace; a counter counts replays (plural unit, as `_errors_total`)",
    ),
    "gpu_nvlink_errors_total": (
        "gotthard_gpu_nvlink_errors_total",
        "namespace; summed over the GPU's links, without the `link` label: per link it is "
        "`gotthard_gpu_nvlink_link_errors_total`, with `--gpu.nvlink-per-link`",
    ),
    "gpu_nvlink_bytes_total": (
        "gotthard_gpu_nvlink_bytes_total",
        "namespace; summed over the GPU's links, without the `link` label: per link it is "
        "`gotthard_gpu_nvlink_link_bytes_total`, with `--gpu.nvlink-per-link`",
    ),
    "lustre_health_check": (
        "gotthard_lustre_health_state",
        "HPE's `lustre_health_check` is one 1/0 series; Gotthard's is a state set "
        "(`state` label), so HPE's `== 0` alert fired on healthy nodes",
    ),
    "lustre_node_role": (
        "gotthard_lustre_node_role_info",
        "namespace; an always-1 series of labels is an `_info`",
    ),
    "lustre_read_bytes_total": (
        "gotthard_lustre_read_bytes_total",
        "HPE's and lustrefs-exporter's name without the `fs` label: `sum()` over both "
        "double counted",
    ),
    "lustre_write_bytes_total": (
        "gotthard_lustre_write_bytes_total",
        "HPE's and lustrefs-exporter's name without the `fs` label: `sum()` over both "
        "double counted",
    ),
    "lustre_job_read_bytes_total": (
        "gotthard_lustre_job_read_bytes_total",
        "HPE's and lustrefs-exporter's name with other labels (`jobid`)",
    ),
    "lustre_job_write_bytes_total": (
        "gotthard_lustre_job_write_bytes_total",
        "HPE's and lustrefs-exporter's name with other labels (`jobid`)",
    ),
    "lustre_quota_used_inodes": (
        "gotthard_lustre_quota_used_inodes",
        "lustrefs-exporter's name with other labels",
    ),
    "lustre_lnet_send_count_total": (
        "gotthard_lustre_lnet_send_messages_total",
        "`_count` is a histogram/summary suffix; the counter counts messages",
    ),
    "lustre_lnet_receive_count_total": (
        "gotthard_lustre_lnet_receive_messages_total",
        "`_count` is a histogram/summary suffix; the counter counts messages",
    ),
    "lustre_lnet_drop_count_total": (
        "gotthard_lustre_lnet_drop_messages_total",
        "`_count` is a histogram/summary suffix; the counter counts messages",
    ),
    "slingshot_octets_total": (
        "gotthard_slingshot_bytes_total",
        "base unit: octets are bytes (`_bytes_total`)",
    ),
    "slingshot_pause_total": (
        "gotthard_slingshot_pause_frames_total",
        "the counter counts pause frames; `pause_total` named no unit",
    ),
}

_FAMILIES: dict[str, tuple[str, ...]] = {
    "slurm": (
        "slurm_up",
        "slurm_info",
        "slurm_jobs",
        "slurm_jobs_pending",
        "slurm_job_cpus",
        "slurm_job_gpus",
        "slurm_job_info",
        "slurm_nodes",
        "slurm_node_flags",
        "slurm_node_info",
        "slurm_node_cpus",
        "slurm_node_memory_bytes",
        "slurm_node_gpus",
        "slurm_node_cpu_load",
        "slurm_partition_cpus",
        "slurm_partition_gpus",
        "slurm_partition_memory_bytes",
        "slurm_partition_nodes",
        "slurm_partition_info",
        "slurm_scheduler_threads",
        "slurm_scheduler_agent_queue_size",
        "slurm_scheduler_dbd_agent_queue_size",
        "slurm_scheduler_queue_length",
        "slurm_scheduler_cycle_last_seconds",
        "slurm_scheduler_cycle_max_seconds",
        "slurm_scheduler_cycle_mean_seconds",
        "slurm_scheduler_backfill_cycle_last_seconds",
        "slurm_scheduler_backfill_cycle_mean_seconds",
        "slurm_scheduler_backfill_depth_mean",
        "slurm_scheduler_backfill_queue_length",
        "slurm_scheduler_backfilled_jobs_total",
        "slurm_scheduler_jobs_total",
        "slurm_rpc_calls_total",
        "slurm_rpc_duration_seconds_total",
        "slurm_rpc_user_calls_total",
        "slurm_rpc_user_duration_seconds_total",
        "slurm_probe_success",
        "slurm_probe_duration_seconds",
        "slurm_controller_up",
        "slurm_dbd_up",
        "slurm_reservation_info",
        "slurm_reservation_nodes",
    ),
    "gpu": (
        "gpu_info",
        "gpu_health",
        "gpu_lost",
        "gpu_utilization_ratio",
        "gpu_memory_utilization_ratio",
        "gpu_power_watts",
        "gpu_power_limit_watts",
        "gpu_memory_used_bytes",
        "gpu_memory_total_bytes",
        "gpu_memory_reserved_bytes",
        "gpu_energy_joules_total",
        "gpu_temperature_celsius",
        "gpu_clock_hertz",
        "gpu_clocks_event_reasons",
        "gpu_throttle_seconds_total",
        "gpu_ecc_errors_total",
        "gpu_remapped_rows",
        "gpu_pcie_replay_total",
        "gpu_pcie_bytes_total",
        "gpu_nvlink_errors_total",
        "gpu_nvlink_bytes_total",
        "gpu_sm_active_ratio",
        "gpu_sm_occupancy_ratio",
        "gpu_tensor_active_ratio",
        "gpu_dram_active_ratio",
        "gpu_xid_errors_total",
        "gpu_last_xid",
        "gpu_xid_last_timestamp_seconds",
        "gpu_job_info",
        "gpu_pod_info",
    ),
    "lustre": (
        "lustre_info",
        "lustre_node_role",
        "lustre_health_check",
        "lustre_target_files",
        "lustre_target_active",
        "lustre_target_connected_clients",
        "lustre_target_import_connected",
        "lustre_target_capacity_bytes",
        "lustre_target_available_bytes",
        "lustre_target_free_bytes",
        "lustre_target_evictions_total",
        "lustre_target_recovery_status",
        "lustre_target_recovery_clients",
        "lustre_target_recovery_completed_clients",
        "lustre_target_recovery_connected_clients",
        "lustre_target_recovery_time_remaining_seconds",
        "lustre_target_brw_rpcs_total",
        "lustre_target_brw_disk_ios_total",
        "lustre_read_bytes_total",
        "lustre_write_bytes_total",
        "lustre_operations_total",
        "lustre_operation_latency_seconds_total",
        "lustre_client_file_closes_total",
        "lustre_client_file_open_seconds_total",
        "lustre_job_operations_total",
        "lustre_job_read_bytes_total",
        "lustre_job_write_bytes_total",
        "lustre_job_stats_jobs",
        "lustre_job_stats_truncated",
        "lustre_export_operations_total",
        "lustre_export_read_bytes_total",
        "lustre_export_write_bytes_total",
        "lustre_export_stats_clients",
        "lustre_export_stats_truncated",
        "lustre_quota_used_bytes",
        "lustre_quota_used_inodes",
        "lustre_quota_ids",
        "lustre_quota_truncated",
        "lustre_lnet_send_count_total",
        "lustre_lnet_receive_count_total",
        "lustre_lnet_drop_count_total",
        "lustre_lnet_send_bytes_total",
        "lustre_lnet_receive_bytes_total",
        "lustre_lnet_drop_bytes_total",
        "lustre_lnet_errors_total",
        "lustre_lnet_ni_health",
        "lustre_lnet_ni_status",
    ),
    "slingshot": (
        "slingshot_info",
        "slingshot_link_info",
        "slingshot_link_up",
        "slingshot_link_healthy",
        "slingshot_link_speed_bits_per_second",
        "slingshot_link_restarts_recent",
        "slingshot_link_restart_last_timestamp_seconds",
        "slingshot_fec_codewords_total",
        "slingshot_fec_lane_errors_total",
        "slingshot_llr_replays_total",
        "slingshot_pause_total",
        "slingshot_paused_seconds_total",
        "slingshot_discards_total",
        "slingshot_pfc_fifo_overflows_total",
        "slingshot_rx_bad_frames_total",
        "slingshot_tx_poisoned_frames_total",
        "slingshot_timeouts_total",
        "slingshot_srb_retries_total",
        "slingshot_nacks_total",
        "slingshot_transport_drops_total",
        "slingshot_rx_drops_total",
        "slingshot_octets_total",
        "slingshot_packets_total",
        "slingshot_pcie_errors_total",
        "slingshot_memory_errors_total",
        "slingshot_counter",
    ),
}

#: The recording rules whose metric part was an exporter family's (or a name made from
#: one): ``level:metric:operations`` keeps its level and operations, the metric part
#: takes the area's namespace.
_RECORDING_RULES: tuple[str, ...] = (
    "site_cluster_partition_state:slurm_nodes:sum",
    "site_cluster_partition:slurm_nodes:sum",
    "site_cluster_partition:slurm_nodes_unavailable:sum",
    "site_cluster_partition:slurm_nodes_unavailable:ratio",
    "site_cluster_partition:slurm_nodes_failed:sum",
    "site_cluster_partition:slurm_nodes_failed:ratio",
    "site_cluster_partition:slurm_partition_cpus_idle:ratio",
    "site_cluster_partition:slurm_partition_gpus_idle:ratio",
    "site_cluster:slurm_nodes_maintenance_drained:count",
    "site_cluster_node:slurm_node_maintenance:group",
    "site_cluster_partition:slurm_partition_cpus_alloc:ratio",
    "site_cluster_partition:slurm_partition_gpus_alloc:ratio",
    "site_cluster:slurm_node_cpus_alloc:ratio",
    "site_cluster:slurm_node_gpus_alloc:ratio",
    "site_cluster_partition:slurm_jobs_pending_resources:sum",
    "site_cluster_job_id:gpu_utilization_ratio:sum",
    "site_cluster_job_id:gpu_utilization_ratio:count",
    "site_cluster_job_id:gpu_utilization_ratio:avg",
    "site_cluster:gpu_utilization_ratio:avg",
    "site_cluster_instance_device_type:slingshot_fec_codewords:rate5m",
    "site_cluster_instance_device_type:slingshot_fec_codewords:ratio_rate5m",
    "site_cluster_type:slingshot_fec_codewords:ratio_rate5m",
    "site_cluster_instance_device_type:slingshot_fec_ber:ratio_rate5m",
    "site_cluster_instance_device_type:slingshot_timeouts:rate5m",
    "site_cluster_fs_target:lustre_ost_capacity_bytes:max",
    "site_cluster_fs_target:lustre_ost_available_bytes:max",
    "site_cluster_fs_target:lustre_ost_fill:ratio",
    "site_cluster_fs_target:lustre_mdt_capacity_bytes:max",
    "site_cluster_fs_target:lustre_mdt_available_bytes:max",
    "site_cluster_fs_target:lustre_mdt_fill:ratio",
    "site_cluster_fs:lustre_ost_fill:ratio",
    "site_cluster_fs:lustre_ost_fill:spread",
    "site_cluster_fs_target_operation:lustre_mdt_operations:rate5m",
    "site_cluster_fs:lustre_mdt_operations:rate5m",
    "site_cluster_fs_target:lustre_mdt_operation_latency_seconds:rate5m",
    "site_cluster_fs_target:lustre_mdt_timed_operations:rate5m",
    "site_cluster_fs_target:lustre_mdt_operation_latency_seconds:mean5m",
    "site_cluster_fs_target:lustre_evictions:increase10m",
    "site_cluster_fs_target:lustre_target_files_used:ratio",
    "site_cluster_instance:lustre_lnet_drops:rate5m",
)


def _recording_rename(old: str) -> Rename:
    level, metric, operations = old.split(":")
    new = f"{level}:gotthard_{metric}:{operations}"
    return Rename(old, new, "its metric part takes the area's namespace", "recording rule")


def _renames() -> tuple[Rename, ...]:
    found: list[Rename] = []
    for area, olds in _FAMILIES.items():
        for old in olds:
            new, why = _SPECIAL.get(old, (f"gotthard_{old}", _NAMESPACE_WHY[area]))
            found.append(Rename(old, new, why))
    found.extend(_recording_rename(old) for old in _RECORDING_RULES)
    return tuple(found)


#: Every rename, families (by area, in exposition order) then recording rules.
RENAMES: tuple[Rename, ...] = _renames()


def mapping() -> dict[str, str]:
    """Old name -> new name."""
    return {rename.old: rename.new for rename in RENAMES}


def legacy_rules() -> list[dict[str, str]]:
    """The rules of :data:`LEGACY_GROUP`: each old name recorded from its new name.

    A family and the recording rules made from it keep their labels (a recording rule
    keeps every label of its expression), so a query of a previous release's dashboard
    or alert reads the same series under the old name."""
    return [{"record": rename.old, "expr": rename.new} for rename in RENAMES]


def markdown_table() -> str:
    """The rename table of docs/exporter.md."""
    lines = ["| old name | new name | why |", "|---|---|---|"]
    for rename in RENAMES:
        what = "" if rename.kind == "family" else f" ({rename.kind})"
        lines.append(f"| `{rename.old}` | `{rename.new}`{what} | {rename.why} |")
    return "\n".join(lines) + "\n"
