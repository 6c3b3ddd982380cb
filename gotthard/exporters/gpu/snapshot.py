"""The typed snapshot the NVML source produces for the ``gpu`` collector.

A reading that NVML does not support on a device is ``None`` (or missing from its
dict): the metric is then absent for that device, never 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class DeviceReading:
    """One physical GPU, or one MIG instance of it (``gpu_instance`` set)."""

    index: str
    uuid: str
    gpu_instance: str = ""
    name: str = ""
    pci_bus_id: str = ""
    #: False when the GPU is lost (NVML_ERROR_GPU_IS_LOST) or failing.
    healthy: bool = True
    #: True on NVML's word only: the GPU answers GPU_IS_LOST, or this exporter listed it
    #: and NVML no longer does.
    lost: bool = False
    health_reason: str = ""
    utilization_ratio: float | None = None
    memory_utilization_ratio: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    memory_reserved_bytes: int | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    energy_joules: float | None = None
    #: sensor ("gpu", "memory") -> degrees Celsius
    temperature_celsius: dict[str, float] = field(default_factory=dict)
    #: clock ("sm", "memory") -> Hz
    clock_hertz: dict[str, float] = field(default_factory=dict)
    #: reason -> 0/1, one entry per known bit of the clocks-event mask
    clocks_event_reasons: dict[str, int] = field(default_factory=dict)
    #: reason -> seconds the clocks were held back (NVML violation time)
    throttle_seconds: dict[str, float] = field(default_factory=dict)
    #: "corrected" / "uncorrected" -> count since the driver loaded
    ecc_errors: dict[str, int] = field(default_factory=dict)
    #: "correctable" / "uncorrectable" / "pending" / "failure"
    remapped_rows: dict[str, int] = field(default_factory=dict)
    pcie_replay: int | None = None
    #: "tx" / "rx" -> bytes
    pcie_bytes: dict[str, int] = field(default_factory=dict)
    #: type -> count, summed over the GPU's links and never decreasing (:mod:`.links`)
    nvlink_errors: dict[str, int] = field(default_factory=dict)
    #: "tx" / "rx" -> bytes, summed over the GPU's links the same way
    nvlink_bytes: dict[str, int] = field(default_factory=dict)
    #: (link, type) -> count as the link answered; only with per-link series on
    nvlink_link_errors: dict[tuple[str, str], int] = field(default_factory=dict)
    #: (link, direction) -> bytes as the link answered; only with per-link series on
    nvlink_link_bytes: dict[tuple[str, str], int] = field(default_factory=dict)
    #: GPM metrics over the last poll interval: sm_active, sm_occupancy, tensor_active,
    #: dram_active, as 0..1 ratios
    gpm: dict[str, float] = field(default_factory=dict)
    #: xid -> count since the exporter started; None when events are unsupported
    xid_counts: dict[int, int] | None = None
    last_xid: int | None = None
    #: xid -> Unix time of its last event since the exporter started
    xid_seen_at: dict[int, float] = field(default_factory=dict)
    #: PIDs of compute processes on this device (or MIG instance)
    pids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class GpuAttribution:
    """The GPU (or MIG instance) an owner uses: the ``gpu``, ``uuid``, ``gpu_instance`` labels."""

    index: str
    uuid: str
    gpu_instance: str


@dataclass(frozen=True, slots=True)
class JobAttribution(GpuAttribution):
    job_id: str


@dataclass(frozen=True, slots=True)
class PodAttribution(GpuAttribution):
    pod_uid: str
    namespace: str = ""
    pod: str = ""
    container: str = ""


@dataclass(frozen=True, slots=True)
class GpuSnapshot:
    driver_version: str = ""
    cuda_version: str = ""
    devices: tuple[DeviceReading, ...] = ()
    jobs: tuple[JobAttribution, ...] = ()
    pods: tuple[PodAttribution, ...] = ()
    #: Recoverable problems: unexpected NVML errors, unreadable cgroup files, kubelet errors.
    errors: int = 0
