"""Pure function from a :class:`GpuSnapshot` to metric families.

Every GPU series carries ``gpu`` (the NVML index) and ``uuid``; series that MIG
instances also report carry ``gpu_instance`` (empty, so absent, for a whole GPU).
Help texts name the unit and the NVML source. Readings NVML does not support are
absent, never 0. Attribution is exported as ``gotthard_gpu_job_info`` /
``gotthard_gpu_pod_info`` info series only, to be joined in PromQL; no GPU metric is
repeated per job.
"""

from __future__ import annotations

from collections.abc import Callable

from gotthard.exporters.families import Desc, MetricFamily, desc
from gotthard.exporters.gpu.snapshot import DeviceReading, GpuSnapshot

GPU = ("gpu", "uuid")
MIG = ("gpu", "uuid", "gpu_instance")

# --- the families, in output order ---------------------------------------------------

INFO = desc(
    "gotthard_gpu_info",
    "GPU inventory; always 1 (nvmlDeviceGetName, nvmlDeviceGetPciInfo, "
    "nvmlSystemGetDriverVersion, nvmlSystemGetCudaDriverVersion).",
    *GPU,
    "name",
    "pci_bus_id",
    "driver_version",
    "cuda_version",
)
HEALTH = desc(
    "gotthard_gpu_health",
    "1 when the GPU is healthy; 0 when NVML reports it lost (GPU_IS_LOST), its row "
    "remapping failed, or a fatal XID was seen within the health window.",
    *MIG,
)
LOST = desc(
    "gotthard_gpu_lost",
    "1 when NVML reports the GPU lost: it answers GPU_IS_LOST, or this exporter listed it "
    "(by UUID) and NVML's device list no longer has it; 0 while it reads. Whole GPUs only.",
    *GPU,
)
#: (family, reading attribute) for one value per device, whole GPUs only.
SCALARS: tuple[tuple[Desc, str], ...] = (
    (
        desc(
            "gotthard_gpu_utilization_ratio",
            "Fraction of time a kernel ran on the GPU, 0-1 (nvmlDeviceGetUtilizationRates.gpu).",
            *GPU,
        ),
        "utilization_ratio",
    ),
    (
        desc(
            "gotthard_gpu_memory_utilization_ratio",
            "Fraction of time device memory was read or written, 0-1 "
            "(nvmlDeviceGetUtilizationRates.memory).",
            *GPU,
        ),
        "memory_utilization_ratio",
    ),
    (
        desc("gotthard_gpu_power_watts", "Power draw in watts (nvmlDeviceGetPowerUsage).", *GPU),
        "power_watts",
    ),
    (
        desc(
            "gotthard_gpu_power_limit_watts",
            "Enforced power limit in watts (nvmlDeviceGetEnforcedPowerLimit).",
            *GPU,
        ),
        "power_limit_watts",
    ),
)
#: (family, reading attribute) for memory: whole GPUs and MIG instances.
MEMORY: tuple[tuple[Desc, str], ...] = (
    (
        desc(
            "gotthard_gpu_memory_used_bytes",
            "Device memory in use, bytes (nvmlDeviceGetMemoryInfo_v2.used).",
            *MIG,
        ),
        "memory_used_bytes",
    ),
    (
        desc(
            "gotthard_gpu_memory_total_bytes",
            "Device memory in total, bytes (nvmlDeviceGetMemoryInfo_v2.total).",
            *MIG,
        ),
        "memory_total_bytes",
    ),
    (
        desc(
            "gotthard_gpu_memory_reserved_bytes",
            "Device memory reserved by the driver and firmware, bytes "
            "(nvmlDeviceGetMemoryInfo_v2.reserved).",
            *MIG,
        ),
        "memory_reserved_bytes",
    ),
)
#: (family, reading attribute) for whole GPUs. A family with the GPU labels alone reads
#: one value (absent when None); one with an extra label reads a dict from that label's
#: value to the reading.
PER_GPU: tuple[tuple[Desc, str], ...] = (
    (
        desc(
            "gotthard_gpu_energy_joules_total",
            "Energy used since the driver loaded, joules (nvmlDeviceGetTotalEnergyConsumption).",
            *GPU,
        ),
        "energy_joules",
    ),
    (
        desc(
            "gotthard_gpu_temperature_celsius",
            "Temperature in degrees Celsius; sensor gpu (nvmlDeviceGetTemperatureV) or "
            "memory (field NVML_FI_DEV_MEMORY_TEMP).",
            *GPU,
            "sensor",
        ),
        "temperature_celsius",
    ),
    (
        desc(
            "gotthard_gpu_clock_hertz",
            "Current clock in hertz; clock sm or memory (nvmlDeviceGetClockInfo).",
            *GPU,
            "clock",
        ),
        "clock_hertz",
    ),
    (
        desc(
            "gotthard_gpu_clocks_event_reasons",
            "1 while this reason holds the clocks down, one series per bit of the "
            "clocks-event mask (nvmlDeviceGetCurrentClocksEventReasons).",
            *GPU,
            "reason",
        ),
        "clocks_event_reasons",
    ),
    (
        desc(
            "gotthard_gpu_throttle_seconds_total",
            "Seconds the clocks were held back, by reason (nvmlDeviceGetViolationStatus).",
            *GPU,
            "reason",
        ),
        "throttle_seconds",
    ),
    (
        desc(
            "gotthard_gpu_ecc_errors_total",
            "ECC memory errors since the driver loaded, by type "
            "(nvmlDeviceGetTotalEccErrors, volatile).",
            *GPU,
            "type",
        ),
        "ecc_errors",
    ),
    (
        desc(
            "gotthard_gpu_remapped_rows",
            "Remapped memory rows by state: correctable and uncorrectable counts, "
            "pending and failure as 0/1 (nvmlDeviceGetRemappedRows).",
            *GPU,
            "state",
        ),
        "remapped_rows",
    ),
    (
        desc(
            "gotthard_gpu_pcie_replays_total",
            "PCIe replays since the driver loaded (nvmlDeviceGetPcieReplayCounter).",
            *GPU,
        ),
        "pcie_replay",
    ),
    (
        desc(
            "gotthard_gpu_pcie_bytes_total",
            "PCIe bytes by direction (fields NVML_FI_DEV_PCIE_COUNT_TX_BYTES/RX_BYTES).",
            *GPU,
            "direction",
        ),
        "pcie_bytes",
    ),
    (
        desc(
            "gotthard_gpu_nvlink_errors_total",
            "NVLink errors by type, summed over the GPU's links (nvmlDeviceGetFieldValues, "
            "NVML_FI_DEV_NVLINK_COUNT_* scoped by link); never decreasing: a link that does "
            "not answer, or whose counters were reset, keeps what it counted in the sum.",
            *GPU,
            "type",
        ),
        "nvlink_errors",
    ),
    (
        desc(
            "gotthard_gpu_nvlink_bytes_total",
            "NVLink data bytes by direction, summed over the GPU's links in the same way "
            "(nvmlDeviceGetFieldValues, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX scoped by link).",
            *GPU,
            "direction",
        ),
        "nvlink_bytes",
    ),
)
#: Per-link NVLink series: only with ``--gpu.nvlink-per-link`` (7 series per link).
NVLINK_LINK_ERRORS = desc(
    "gotthard_gpu_nvlink_link_errors_total",
    "NVLink errors by link and type, as each link's counter reads (nvmlDeviceGetFieldValues, "
    "NVML_FI_DEV_NVLINK_COUNT_* scoped by link); only with --gpu.nvlink-per-link.",
    *GPU,
    "link",
    "type",
)
NVLINK_LINK_BYTES = desc(
    "gotthard_gpu_nvlink_link_bytes_total",
    "NVLink data bytes by link and direction (nvmlDeviceGetFieldValues, "
    "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX scoped by link); only with --gpu.nvlink-per-link.",
    *GPU,
    "link",
    "direction",
)
#: GPM reading -> its family (whole GPUs and MIG instances).
GPM: dict[str, Desc] = {
    "sm_active": desc(
        "gotthard_gpu_sm_active_ratio",
        "Fraction of SMs busy over the last poll interval, 0-1 (GPM NVML_GPM_METRIC_SM_UTIL).",
        *MIG,
    ),
    "sm_occupancy": desc(
        "gotthard_gpu_sm_occupancy_ratio",
        "Active warps over the theoretical maximum over the last poll interval, 0-1 "
        "(GPM NVML_GPM_METRIC_SM_OCCUPANCY).",
        *MIG,
    ),
    "tensor_active": desc(
        "gotthard_gpu_tensor_active_ratio",
        "Fraction of time SMs ran any tensor operation over the last poll interval, 0-1 "
        "(GPM NVML_GPM_METRIC_ANY_TENSOR_UTIL).",
        *MIG,
    ),
    "dram_active": desc(
        "gotthard_gpu_dram_active_ratio",
        "DRAM bandwidth used over the theoretical maximum over the last poll interval, 0-1 "
        "(GPM NVML_GPM_METRIC_DRAM_BW_UTIL).",
        *MIG,
    ),
}
XID_ERRORS = desc(
    "gotthard_gpu_xid_errors_total",
    "XID errors by code since the exporter started (NVML XID events, nvmlEventSetWait_v2).",
    *GPU,
    "xid",
)
LAST_XID = desc(
    "gotthard_gpu_last_xid", "Code of the last XID error seen, 0 when none (NVML XID events).", *GPU
)
XID_SEEN = desc(
    "gotthard_gpu_xid_last_timestamp_seconds",
    "Unix time of the last event of this XID since the exporter started (NVML XID events): "
    "an XID is new by this time, whatever gaps the scrapes had.",
    *GPU,
    "xid",
)
JOB_INFO = desc(
    "gotthard_gpu_job_info",
    "A Slurm job with a compute process on the GPU (NVML process list and "
    "/proc/PID/cgroup); always 1. Join on job_id with gotthard_slurm_job_info.",
    *MIG,
    "job_id",
)
POD_INFO = desc(
    "gotthard_gpu_pod_info",
    "A Kubernetes pod using the GPU (process cgroups for pod_uid, kubelet pod-resources "
    "for namespace, pod and container); always 1.",
    *MIG,
    "pod_uid",
    "namespace",
    "pod",
    "container",
)


def render(snapshot: GpuSnapshot) -> list[MetricFamily]:
    devices = snapshot.devices
    whole = [d for d in devices if not d.gpu_instance]
    families: list[MetricFamily] = []

    info = INFO.new()
    for d in whole:
        info.add(
            (d.index, d.uuid, d.name, d.pci_bus_id, snapshot.driver_version, snapshot.cuda_version),
            1,
        )
    health = HEALTH.new()
    for d in devices:
        health.add((d.index, d.uuid, d.gpu_instance), 1 if d.healthy else 0)
    lost = LOST.new()
    for d in whole:
        lost.add((d.index, d.uuid), 1 if d.lost else 0)
    families += [info, health, lost]

    for decl, attribute in SCALARS:
        families.append(_scalar(decl, whole, lambda d, a=attribute: getattr(d, a)))
    for decl, attribute in MEMORY:
        families.append(_scalar(decl, devices, lambda d, a=attribute: getattr(d, a)))
    for decl, attribute in PER_GPU:
        if decl.labels == GPU:
            family = _scalar(decl, whole, lambda d, a=attribute: getattr(d, a))
        else:
            family = _labeled(decl.new(), whole, lambda d, a=attribute: getattr(d, a))
        families.append(family)
    link_errors, link_bytes = NVLINK_LINK_ERRORS.new(), NVLINK_LINK_BYTES.new()
    for d in whole:
        # insertion order is link order (the source reads links in order)
        link_errors.samples += [
            ((d.index, d.uuid, link, kind), value)
            for (link, kind), value in d.nvlink_link_errors.items()
        ]
        link_bytes.samples += [
            ((d.index, d.uuid, link, direction), value)
            for (link, direction), value in d.nvlink_link_bytes.items()
        ]
    families += [link_errors, link_bytes]

    for key, decl in GPM.items():
        families.append(_scalar(decl, devices, lambda d, k=key: d.gpm.get(k)))

    xids, last_xid, seen = XID_ERRORS.new(), LAST_XID.new(), XID_SEEN.new()
    for d in whole:
        if d.xid_counts is None:
            continue
        for xid, count in sorted(d.xid_counts.items()):
            xids.add((d.index, d.uuid, str(xid)), count)
        last_xid.add((d.index, d.uuid), d.last_xid or 0)
        for xid, at in sorted(d.xid_seen_at.items()):
            seen.add((d.index, d.uuid, str(xid)), at)
    families += [xids, last_xid, seen]

    jobs = JOB_INFO.new()
    for job in snapshot.jobs:
        jobs.add((job.index, job.uuid, job.gpu_instance, job.job_id), 1)
    pods = POD_INFO.new()
    for pod in snapshot.pods:
        pods.add(
            (
                pod.index,
                pod.uuid,
                pod.gpu_instance,
                pod.pod_uid,
                pod.namespace,
                pod.pod,
                pod.container,
            ),
            1,
        )
    families += [jobs, pods]
    return families


def _scalar(
    decl: Desc,
    devices: list[DeviceReading] | tuple[DeviceReading, ...],
    value_of: Callable[[DeviceReading], float | None],
) -> MetricFamily:
    family = decl.new()
    for d in devices:
        value = value_of(d)
        if value is None:
            continue
        key = (d.index, d.uuid, d.gpu_instance) if decl.labels == MIG else (d.index, d.uuid)
        family.add(key, value)
    return family


def _labeled(
    family: MetricFamily,
    devices: list[DeviceReading],
    values_of: Callable[[DeviceReading], dict[str, float] | dict[str, int]],
) -> MetricFamily:
    for d in devices:
        for label, value in values_of(d).items():
            family.add((d.index, d.uuid, label), value)
    return family
