"""Prometheus recording rules: the expressions dashboards and alerts build on.

Named ``level:metric:operations`` (see :mod:`gotthard.dashboards.rules`).
"""

from __future__ import annotations

from gotthard.dashboards.rule_model import RecordingRule, regex_any
from gotthard.dashboards.thresholds import SLURM_UNAVAILABLE_STATES

#: The labels every aggregation keeps.
SC = "site, cluster"
#: Names of recording rules the alerts build on.
FEC_RATE = "site_cluster_instance_device_type:slingshot_fec_codewords:rate5m"
OST_FILL = "site_cluster_fs_target:lustre_ost_fill:ratio"
LUSTRE_EVICTIONS = "site_cluster_fs_target:lustre_evictions:increase10m"
LNET_DROPS = "site_cluster_instance:lustre_lnet_drops:rate5m"
#: Utilisation of every GPU a job holds, one series per (GPU, job).
GPU_JOBS = (
    "max by (site, cluster, instance, gpu, uuid, job_id) (gpu_job_info)"
    " * on (site, cluster, instance, gpu, uuid) group_left () gpu_utilization_ratio"
)

RECORDING_RULES: tuple[RecordingRule, ...] = (
    # Slurm: nodes by state, unavailable nodes, utilisation, backlog.
    RecordingRule(
        "slurm",
        "site_cluster_partition_state:slurm_nodes:sum",
        "sum by (site, cluster, partition, state) (slurm_nodes)",
    ),
    RecordingRule(
        "slurm",
        "site_cluster_partition:slurm_nodes:sum",
        "sum by (site, cluster, partition) (slurm_nodes)",
    ),
    RecordingRule(
        "slurm",
        "site_cluster_partition:slurm_nodes_unavailable:sum",
        "sum by (site, cluster, partition) "
        f'(slurm_nodes{{state=~"{regex_any(SLURM_UNAVAILABLE_STATES)}"}})'
        "\nor\n0 * sum by (site, cluster, partition) (slurm_nodes)",
    ),
    RecordingRule(
        "slurm",
        "site_cluster_partition:slurm_nodes_unavailable:ratio",
        "site_cluster_partition:slurm_nodes_unavailable:sum"
        "\n/\n(site_cluster_partition:slurm_nodes:sum > 0)",
    ),
    RecordingRule(
        "slurm",
        "site_cluster_partition:slurm_partition_cpus_alloc:ratio",
        'sum by (site, cluster, partition) (slurm_partition_cpus{state="alloc"})'
        '\n/\n(sum by (site, cluster, partition) (slurm_partition_cpus{state="total"}) > 0)',
    ),
    RecordingRule(
        "slurm",
        "site_cluster_partition:slurm_partition_gpus_alloc:ratio",
        'sum by (site, cluster, partition) (slurm_partition_gpus{state="alloc"})'
        '\n/\n(sum by (site, cluster, partition) (slurm_partition_gpus{state="total"}) > 0)',
    ),
    RecordingRule(
        "slurm",
        "site_cluster:slurm_node_cpus_alloc:ratio",
        f'sum by ({SC}) (slurm_node_cpus{{state="alloc"}})'
        f'\n/\n(sum by ({SC}) (slurm_node_cpus{{state="total"}}) > 0)',
    ),
    RecordingRule(
        "slurm",
        "site_cluster:slurm_node_gpus_alloc:ratio",
        f'sum by ({SC}) (slurm_node_gpus{{state="alloc"}})'
        f'\n/\n(sum by ({SC}) (slurm_node_gpus{{state="total"}}) > 0)',
    ),
    RecordingRule(
        "slurm",
        "site_cluster_partition:slurm_jobs_pending_resources:sum",
        'sum by (site, cluster, partition) (slurm_jobs_pending{reason="Resources"})',
    ),
    # GPU: utilisation per job (join on gpu_job_info) and per cluster.
    RecordingRule(
        "gpu",
        "site_cluster_job_id:gpu_utilization_ratio:sum",
        f"sum by (site, cluster, job_id) (\n  {GPU_JOBS}\n)",
    ),
    RecordingRule(
        "gpu",
        "site_cluster_job_id:gpu_utilization_ratio:count",
        f"count by (site, cluster, job_id) (\n  {GPU_JOBS}\n)",
    ),
    RecordingRule(
        "gpu",
        "site_cluster_job_id:gpu_utilization_ratio:avg",
        "site_cluster_job_id:gpu_utilization_ratio:sum"
        "\n/\nsite_cluster_job_id:gpu_utilization_ratio:count",
    ),
    RecordingRule(
        "gpu",
        "site_cluster:gpu_utilization_ratio:avg",
        f"avg by ({SC}) (gpu_utilization_ratio)",
    ),
    # Slingshot: FEC codeword rates, codeword error ratios, BER, retransmission timeouts.
    RecordingRule(
        "slingshot",
        FEC_RATE,
        "sum by (site, cluster, instance, device, type) (rate(slingshot_fec_codewords_total[5m]))",
    ),
    RecordingRule(
        "slingshot",
        "site_cluster_instance_device_type:slingshot_fec_codewords:ratio_rate5m",
        f'{FEC_RATE}{{type=~"corrected|uncorrected"}}'
        "\n/ ignoring (type) group_left ()\n"
        f"(sum by (site, cluster, instance, device) ({FEC_RATE}) > 0)",
    ),
    RecordingRule(
        "slingshot",
        "site_cluster_type:slingshot_fec_codewords:ratio_rate5m",
        f'sum by (site, cluster, type) ({FEC_RATE}{{type=~"corrected|uncorrected"}})'
        "\n/ ignoring (type) group_left ()\n"
        f"(sum by (site, cluster) ({FEC_RATE}) > 0)",
    ),
    RecordingRule(
        "slingshot",
        "site_cluster_instance_device_type:slingshot_fec_ber:ratio_rate5m",
        f'{FEC_RATE}{{type=~"corrected|uncorrected"}}'
        "\n/ ignoring (type) group_left ()\n"
        "(max by (site, cluster, instance, device) (slingshot_link_speed_bits_per_second) > 0)",
    ),
    RecordingRule(
        "slingshot",
        "site_cluster_instance_device_type:slingshot_timeouts:rate5m",
        "sum by (site, cluster, instance, device, type) (rate(slingshot_timeouts_total[5m]))",
    ),
    # Lustre: OST fill (server or client view, deduplicated), spread, metadata operations.
    RecordingRule(
        "lustre",
        "site_cluster_fs_target:lustre_ost_capacity_bytes:max",
        'max by (site, cluster, fs, target) (lustre_target_capacity_bytes{component=~"ost|osc"})',
    ),
    RecordingRule(
        "lustre",
        "site_cluster_fs_target:lustre_ost_available_bytes:max",
        'max by (site, cluster, fs, target) (lustre_target_available_bytes{component=~"ost|osc"})',
    ),
    RecordingRule(
        "lustre",
        OST_FILL,
        "1 - (\n  site_cluster_fs_target:lustre_ost_available_bytes:max"
        "\n  /\n  (site_cluster_fs_target:lustre_ost_capacity_bytes:max > 0)\n)",
    ),
    RecordingRule(
        "lustre",
        "site_cluster_fs:lustre_ost_fill:ratio",
        "1 - (\n  sum by (site, cluster, fs) "
        "(site_cluster_fs_target:lustre_ost_available_bytes:max)"
        "\n  /\n  (sum by (site, cluster, fs) "
        "(site_cluster_fs_target:lustre_ost_capacity_bytes:max) > 0)\n)",
    ),
    RecordingRule(
        "lustre",
        "site_cluster_fs:lustre_ost_fill:spread",
        f"max by (site, cluster, fs) ({OST_FILL})\n-\nmin by (site, cluster, fs) ({OST_FILL})",
    ),
    RecordingRule(
        "lustre",
        "site_cluster_fs_target_operation:lustre_mdt_operations:rate5m",
        "sum by (site, cluster, fs, target, operation) "
        '(rate(lustre_operations_total{component="mdt"}[5m]))',
    ),
    RecordingRule(
        "lustre",
        "site_cluster_fs:lustre_mdt_operations:rate5m",
        'sum by (site, cluster, fs) (rate(lustre_operations_total{component="mdt"}[5m]))',
    ),
    RecordingRule(
        "lustre",
        "site_cluster_fs_target:lustre_mdt_operation_latency_seconds:rate5m",
        "sum by (site, cluster, fs, target) "
        '(rate(lustre_operation_latency_seconds_total{component="mdt"}[5m]))',
    ),
    RecordingRule(
        "lustre",
        "site_cluster_fs_target:lustre_mdt_timed_operations:rate5m",
        "sum by (site, cluster, fs, target) (\n"
        '  rate(lustre_operations_total{component="mdt"}[5m])\n'
        '  and lustre_operation_latency_seconds_total{component="mdt"}\n)',
    ),
    RecordingRule(
        "lustre",
        "site_cluster_fs_target:lustre_mdt_operation_latency_seconds:mean5m",
        "site_cluster_fs_target:lustre_mdt_operation_latency_seconds:rate5m"
        "\n/\n(site_cluster_fs_target:lustre_mdt_timed_operations:rate5m > 0)",
    ),
    # Lustre: evictions per target and LNet drops per node.
    RecordingRule(
        "lustre",
        LUSTRE_EVICTIONS,
        "sum by (site, cluster, fs, target) (increase(lustre_target_evictions_total[10m]))",
    ),
    RecordingRule(
        "lustre",
        LNET_DROPS,
        "sum by (site, cluster, instance) (rate(lustre_lnet_drop_count_total[5m]))",
    ),
)
