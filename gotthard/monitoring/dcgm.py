"""Gotthard's GPU metrics from NVIDIA's dcgm-exporter (``[monitoring] gpu_source = "dcgm"``).

Sites that run the GPU Operator already scrape dcgm-exporter. This recording-rule group
turns its ``DCGM_FI_*`` series into the names, units and labels of Gotthard's ``gpu``
collector (docs/exporter.md), so the GPU dashboards, recording rules and alerts work on
either source. Do not run both sources on one node: the records would collide with the
collector's series.

Labels: ``UUID`` becomes ``uuid``, ``GPU_I_ID`` (MIG) becomes ``gpu_instance``, and the
node name dcgm-exporter reports (``Hostname``, ``hostname`` since 2026) becomes
``instance``, so that alerts get the ``node`` label the runbooks act on. ``gpu``,
``site``, ``cluster`` and the scrape ``job`` are kept; everything else (``modelName``,
``device``, ``pci_bus_id``, Kubernetes and ``hpc_job`` labels) is dropped, and the
series dcgm-exporter repeats per HPC job collapse into one. Units: percent to a 0-1
ratio, MHz to Hz, mJ to J, MiB to bytes, ns to seconds.

Job attribution: dcgm-exporter's ``hpc_job`` label (``--hpc-job-mapping-dir``) becomes
``gotthard_gpu_job_info{job_id}``, and its Kubernetes labels ``gotthard_gpu_pod_info``.

Not mapped, for want of an equivalent: ``gotthard_gpu_xid_errors_total`` (dcgm-exporter exports
the last XID as a gauge, mapped to ``gotthard_gpu_last_xid``, and an optional windowed count, not
a counter, nor a time per XID, so ``GPUFatalXid`` does not fire), ``gotthard_gpu_lost``
(dcgm-exporter has no lost signal, so ``GPULost`` does not fire: absence of data is no
evidence), NVLink (dcgm-exporter's NVLink error fields, commented out in its default list,
are per-GPU totals of other counters than the collector's five error types: CRC flit and
data, replay and recovery errors; its bandwidth total has no direction; so
``GPUNVLinkErrors`` does not fire), PCIe byte counters, clock-event reasons and power
limits. The health gauge is 0 only on a row-remap failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Group name, in the ``gotthard-<component>.<kind>`` scheme of the other groups.
GROUP = "gotthard-dcgm.recording"
#: Labels every mapped series keeps (absent ones stay absent).
KEEP = ("site", "cluster", "job", "instance", "gpu", "uuid", "gpu_instance")
MIB = 1 << 20
#: Memory in use, one series per HPC job on the GPU (``hpc_job``), as ``job_id``.
JOB_ID = 'label_replace(DCGM_FI_DEV_FB_USED{hpc_job!=""}, "job_id", "$1", "hpc_job", "(.+)")'


@dataclass(frozen=True)
class Mapping:
    """``record`` = ``source`` (relabelled, one series per GPU) times ``scale``."""

    record: str
    source: str
    scale: float = 1.0
    #: a fixed label the rule adds, e.g. ("sensor", "gpu")
    label: tuple[str, str] | tuple[()] = ()


MAPPINGS: tuple[Mapping, ...] = (
    Mapping("gotthard_gpu_utilization_ratio", "DCGM_FI_DEV_GPU_UTIL", 0.01),
    Mapping("gotthard_gpu_memory_utilization_ratio", "DCGM_FI_DEV_MEM_COPY_UTIL", 0.01),
    Mapping("gotthard_gpu_power_watts", "DCGM_FI_DEV_POWER_USAGE"),
    Mapping("gotthard_gpu_energy_joules_total", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 0.001),
    Mapping("gotthard_gpu_temperature_celsius", "DCGM_FI_DEV_GPU_TEMP", label=("sensor", "gpu")),
    Mapping(
        "gotthard_gpu_temperature_celsius", "DCGM_FI_DEV_MEMORY_TEMP", label=("sensor", "memory")
    ),
    Mapping("gotthard_gpu_clock_hertz", "DCGM_FI_DEV_SM_CLOCK", 1e6, ("clock", "sm")),
    Mapping("gotthard_gpu_clock_hertz", "DCGM_FI_DEV_MEM_CLOCK", 1e6, ("clock", "memory")),
    Mapping("gotthard_gpu_memory_used_bytes", "DCGM_FI_DEV_FB_USED", MIB),
    Mapping("gotthard_gpu_memory_reserved_bytes", "DCGM_FI_DEV_FB_RESERVED", MIB),
    Mapping("gotthard_gpu_pcie_replays_total", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"),
    Mapping(
        "gotthard_gpu_ecc_errors_total",
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        label=("type", "corrected"),
    ),
    Mapping(
        "gotthard_gpu_ecc_errors_total",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        label=("type", "uncorrected"),
    ),
    Mapping(
        "gotthard_gpu_remapped_rows",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        label=("state", "correctable"),
    ),
    Mapping(
        "gotthard_gpu_remapped_rows",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        label=("state", "uncorrectable"),
    ),
    Mapping(
        "gotthard_gpu_remapped_rows", "DCGM_FI_DEV_ROW_REMAP_FAILURE", label=("state", "failure")
    ),
    Mapping(
        "gotthard_gpu_throttle_seconds_total",
        "DCGM_FI_DEV_POWER_VIOLATION",
        1e-9,
        ("reason", "power"),
    ),
    Mapping(
        "gotthard_gpu_throttle_seconds_total",
        "DCGM_FI_DEV_THERMAL_VIOLATION",
        1e-9,
        ("reason", "thermal"),
    ),
    Mapping("gotthard_gpu_sm_active_ratio", "DCGM_FI_PROF_SM_ACTIVE"),
    Mapping("gotthard_gpu_sm_occupancy_ratio", "DCGM_FI_PROF_SM_OCCUPANCY"),
    Mapping("gotthard_gpu_tensor_active_ratio", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"),
    Mapping("gotthard_gpu_dram_active_ratio", "DCGM_FI_PROF_DRAM_ACTIVE"),
    Mapping("gotthard_gpu_last_xid", "DCGM_FI_DEV_XID_ERRORS"),
)

#: dcgm-exporter label -> Gotthard label, applied in order (a later one wins).
RENAMES: tuple[tuple[str, str], ...] = (
    ("UUID", "uuid"),
    ("GPU_I_ID", "gpu_instance"),
    ("Hostname", "instance"),
    ("hostname", "instance"),
)


def relabel(selector: str) -> str:
    """*selector* with dcgm-exporter's labels copied to Gotthard's (see :data:`RENAMES`)."""
    expr = selector
    for source, target in RENAMES:
        expr = f'label_replace({expr}, "{target}", "$1", "{source}", "(.+)")'
    return expr


def _by(*extra: str) -> str:
    return ", ".join((*KEEP, *extra))


def per_gpu(selector: str, *extra: str) -> str:
    """One series per GPU (or MIG instance) of *selector*, with Gotthard's labels only."""
    return f"max by ({_by(*extra)}) ({relabel(selector)})"


def _scaled(expr: str, scale: float) -> str:
    # 15 significant digits: exact for the powers of ten and of two used here
    return expr if scale == 1.0 else f"{expr} * {scale:.15g}"


def _attribution(selector: str, *labels: str) -> str:
    """An info series (value 1) per GPU and value of *labels* among *selector*'s series."""
    return f"group by ({_by(*labels)}) ({relabel(selector)})"


def rules() -> list[dict[str, Any]]:
    """The recording rules, ``record``/``expr`` pairs in output order."""
    mapped: list[dict[str, Any]] = []
    for m in MAPPINGS:
        rule: dict[str, Any] = {"record": m.record, "expr": _scaled(per_gpu(m.source), m.scale)}
        if m.label:
            rule["labels"] = dict([m.label])
        mapped.append(rule)
    total = " + ".join(per_gpu(f"DCGM_FI_DEV_FB_{part}") for part in ("USED", "FREE", "RESERVED"))
    info = relabel(
        'label_replace(label_replace(DCGM_FI_DEV_GPU_TEMP, "name", "$1", "modelName", "(.+)"),'
        ' "driver_version", "$1", "DCGM_FI_DRIVER_VERSION", "(.+)")'
    )
    return [
        *mapped,
        {"record": "gotthard_gpu_memory_total_bytes", "expr": f"({total}) * {MIB}"},
        {
            "record": "gotthard_gpu_health",
            "expr": per_gpu("DCGM_FI_DEV_ROW_REMAP_FAILURE") + " == bool 0",
        },
        {
            "record": "gotthard_gpu_info",
            "expr": f"group by ({_by('name', 'pci_bus_id', 'driver_version')}) ({info})",
        },
        {
            "record": "gotthard_gpu_job_info",
            "expr": _attribution(JOB_ID, "job_id"),
        },
        {
            "record": "gotthard_gpu_pod_info",
            "expr": _attribution(
                'DCGM_FI_DEV_FB_USED{pod!=""}', "pod_uid", "namespace", "pod", "container"
            ),
        },
    ]


def recording_group() -> dict[str, Any]:
    """The group as ``recording.rules.yml`` holds it."""
    return {"name": GROUP, "rules": rules()}
