"""Pure function from a :class:`GpuSnapshot` to metric families.

Every GPU series carries ``gpu`` (the NVML index) and ``uuid``; series that MIG
instances also report carry ``gpu_instance`` (empty, so absent, for a whole GPU).
Help texts name the unit and the NVML source. Readings NVML does not support are
absent, never 0. Attribution is exported as ``gpu_job_info`` / ``gpu_pod_info`` info
series only, to be joined in PromQL; no GPU metric is repeated per job.
"""

from __future__ import annotations

from collections.abc import Callable

from gotthard.exporters.families import MetricFamily, counter, gauge
from gotthard.exporters.gpu.snapshot import DeviceReading, GpuSnapshot

GPU = ("gpu", "uuid")
MIG = ("gpu", "uuid", "gpu_instance")

#: (name, help, reading attribute) for one value per device, whole GPUs only.
SCALARS: tuple[tuple[str, str, str], ...] = (
    (
        "gpu_utilization_ratio",
        "Fraction of time a kernel ran on the GPU, 0-1 (nvmlDeviceGetUtilizationRates.gpu).",
        "utilization_ratio",
    ),
    (
        "gpu_memory_utilization_ratio",
        "Fraction of time device memory was read or written, 0-1 "
        "(nvmlDeviceGetUtilizationRates.memory).",
        "memory_utilization_ratio",
    ),
    ("gpu_power_watts", "Power draw in watts (nvmlDeviceGetPowerUsage).", "power_watts"),
    (
        "gpu_power_limit_watts",
        "Enforced power limit in watts (nvmlDeviceGetEnforcedPowerLimit).",
        "power_limit_watts",
    ),
)
#: (name, help, reading attribute) for memory: whole GPUs and MIG instances.
MEMORY: tuple[tuple[str, str, str], ...] = (
    (
        "gpu_memory_used_bytes",
        "Device memory in use, bytes (nvmlDeviceGetMemoryInfo_v2.used).",
        "memory_used_bytes",
    ),
    (
        "gpu_memory_total_bytes",
        "Device memory in total, bytes (nvmlDeviceGetMemoryInfo_v2.total).",
        "memory_total_bytes",
    ),
    (
        "gpu_memory_reserved_bytes",
        "Device memory reserved by the driver and firmware, bytes "
        "(nvmlDeviceGetMemoryInfo_v2.reserved).",
        "memory_reserved_bytes",
    ),
)
#: (family maker, name, help, extra label, reading attribute) for whole GPUs, in output
#: order. Without an extra label the attribute is one value (absent when None); with
#: one it is a dict from that label's value to the reading.
PER_GPU: tuple[tuple[Callable[..., MetricFamily], str, str, str | None, str], ...] = (
    (
        counter,
        "gpu_energy_joules_total",
        "Energy used since the driver loaded, joules (nvmlDeviceGetTotalEnergyConsumption).",
        None,
        "energy_joules",
    ),
    (
        gauge,
        "gpu_temperature_celsius",
        "Temperature in degrees Celsius; sensor gpu (nvmlDeviceGetTemperatureV) or "
        "memory (field NVML_FI_DEV_MEMORY_TEMP).",
        "sensor",
        "temperature_celsius",
    ),
    (
        gauge,
        "gpu_clock_hertz",
        "Current clock in hertz; clock sm or memory (nvmlDeviceGetClockInfo).",
        "clock",
        "clock_hertz",
    ),
    (
        gauge,
        "gpu_clocks_event_reasons",
        "1 while this reason holds the clocks down, one series per bit of the "
        "clocks-event mask (nvmlDeviceGetCurrentClocksEventReasons).",
        "reason",
        "clocks_event_reasons",
    ),
    (
        counter,
        "gpu_throttle_seconds_total",
        "Seconds the clocks were held back, by reason (nvmlDeviceGetViolationStatus).",
        "reason",
        "throttle_seconds",
    ),
    (
        counter,
        "gpu_ecc_errors_total",
        "ECC memory errors since the driver loaded, by type "
        "(nvmlDeviceGetTotalEccErrors, volatile).",
        "type",
        "ecc_errors",
    ),
    (
        gauge,
        "gpu_remapped_rows",
        "Remapped memory rows by state: correctable and uncorrectable counts, "
        "pending and failure as 0/1 (nvmlDeviceGetRemappedRows).",
        "state",
        "remapped_rows",
    ),
    (
        counter,
        "gpu_pcie_replay_total",
        "PCIe replays since the driver loaded (nvmlDeviceGetPcieReplayCounter).",
        None,
        "pcie_replay",
    ),
    (
        counter,
        "gpu_pcie_bytes_total",
        "PCIe bytes by direction (fields NVML_FI_DEV_PCIE_COUNT_TX_BYTES/RX_BYTES).",
        "direction",
        "pcie_bytes",
    ),
)
GPM_HELP = {
    "sm_active": (
        "gpu_sm_active_ratio",
        "Fraction of SMs busy over the last poll interval, 0-1 (GPM NVML_GPM_METRIC_SM_UTIL).",
    ),
    "sm_occupancy": (
        "gpu_sm_occupancy_ratio",
        "Active warps over the theoretical maximum over the last poll interval, 0-1 "
        "(GPM NVML_GPM_METRIC_SM_OCCUPANCY).",
    ),
    "tensor_active": (
        "gpu_tensor_active_ratio",
        "Fraction of time SMs ran any tensor operation over the last poll interval, 0-1 "
        "(GPM NVML_GPM_METRIC_ANY_TENSOR_UTIL).",
    ),
    "dram_active": (
        "gpu_dram_active_ratio",
        "DRAM bandwidth used over the theoretical maximum over the last poll interval, 0-1 "
        "(GPM NVML_GPM_METRIC_DRAM_BW_UTIL).",
    ),
}


def render(snapshot: GpuSnapshot) -> list[MetricFamily]:
    devices = snapshot.devices
    whole = [d for d in devices if not d.gpu_instance]
    families: list[MetricFamily] = []

    info = gauge(
        "gpu_info",
        "GPU inventory; always 1 (nvmlDeviceGetName, nvmlDeviceGetPciInfo, "
        "nvmlSystemGetDriverVersion, nvmlSystemGetCudaDriverVersion).",
        "gpu",
        "uuid",
        "name",
        "pci_bus_id",
        "driver_version",
        "cuda_version",
    )
    for d in whole:
        info.add(
            (d.index, d.uuid, d.name, d.pci_bus_id, snapshot.driver_version, snapshot.cuda_version),
            1,
        )
    health = gauge(
        "gpu_health",
        "1 when the GPU is healthy; 0 when NVML reports it lost (GPU_IS_LOST), its row "
        "remapping failed, or a fatal XID was seen within the health window.",
        *MIG,
    )
    for d in devices:
        health.add((d.index, d.uuid, d.gpu_instance), 1 if d.healthy else 0)
    families += [info, health]

    for name, help_text, attribute in SCALARS:
        families.append(_scalar(name, help_text, whole, lambda d, a=attribute: getattr(d, a)))
    for name, help_text, attribute in MEMORY:
        families.append(
            _scalar(name, help_text, devices, lambda d, a=attribute: getattr(d, a), labels=MIG)
        )
    for make, name, help_text, label, attribute in PER_GPU:
        if label is None:
            family = _scalar(name, help_text, whole, lambda d, a=attribute: getattr(d, a), make)
        else:
            family = _labeled(
                make(name, help_text, *GPU, label), whole, lambda d, a=attribute: getattr(d, a)
            )
        families.append(family)
    nvlink_errors = counter(
        "gpu_nvlink_errors_total",
        "NVLink errors by link and type (nvmlDeviceGetFieldValues, "
        "NVML_FI_DEV_NVLINK_COUNT_* scoped by link).",
        *GPU,
        "link",
        "type",
    )
    nvlink_bytes = counter(
        "gpu_nvlink_bytes_total",
        "NVLink data bytes by link and direction (nvmlDeviceGetFieldValues, "
        "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX scoped by link).",
        *GPU,
        "link",
        "direction",
    )
    for d in whole:
        # insertion order is link order (the source reads links in order)
        nvlink_errors.samples += [
            ((d.index, d.uuid, link, kind), value)
            for (link, kind), value in d.nvlink_errors.items()
        ]
        nvlink_bytes.samples += [
            ((d.index, d.uuid, link, direction), value)
            for (link, direction), value in d.nvlink_bytes.items()
        ]
    families += [nvlink_errors, nvlink_bytes]

    for key, (name, help_text) in GPM_HELP.items():
        families.append(
            _scalar(name, help_text, devices, lambda d, k=key: d.gpm.get(k), labels=MIG)
        )

    xids = counter(
        "gpu_xid_errors_total",
        "XID errors by code since the exporter started (NVML XID events, nvmlEventSetWait_v2).",
        *GPU,
        "xid",
    )
    last_xid = gauge(
        "gpu_last_xid",
        "Code of the last XID error seen, 0 when none (NVML XID events).",
        *GPU,
    )
    for d in whole:
        if d.xid_counts is None:
            continue
        for xid, count in sorted(d.xid_counts.items()):
            xids.add((d.index, d.uuid, str(xid)), count)
        last_xid.add((d.index, d.uuid), d.last_xid or 0)
    families += [xids, last_xid]

    jobs = gauge(
        "gpu_job_info",
        "A Slurm job with a compute process on the GPU (NVML process list and "
        "/proc/PID/cgroup); always 1. Join on job_id with slurm_job_info.",
        *MIG,
        "job_id",
    )
    for job in snapshot.jobs:
        jobs.add((job.index, job.uuid, job.gpu_instance, job.job_id), 1)
    pods = gauge(
        "gpu_pod_info",
        "A Kubernetes pod using the GPU (process cgroups for pod_uid, kubelet pod-resources "
        "for namespace, pod and container); always 1.",
        *MIG,
        "pod_uid",
        "namespace",
        "pod",
        "container",
    )
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
    name: str,
    help_text: str,
    devices: list[DeviceReading] | tuple[DeviceReading, ...],
    value_of: Callable[[DeviceReading], float | None],
    make: Callable[..., MetricFamily] = gauge,
    labels: tuple[str, ...] = GPU,
) -> MetricFamily:
    family = make(name, help_text, *labels)
    for d in devices:
        value = value_of(d)
        if value is None:
            continue
        key = (d.index, d.uuid, d.gpu_instance) if labels == MIG else (d.index, d.uuid)
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
