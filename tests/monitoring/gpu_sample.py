"""A GPU snapshot with every reading the ``gpu`` collector can export set."""

from __future__ import annotations

from gotthard.exporters.gpu.render import render
from gotthard.exporters.gpu.snapshot import (
    DeviceReading,
    GpuSnapshot,
    JobAttribution,
    PodAttribution,
)


def full_gpu_snapshot() -> GpuSnapshot:
    """One whole GPU with every reading set, one MIG instance, one job and one pod."""
    whole = DeviceReading(
        index="0",
        uuid="GPU-0",
        name="NVIDIA H200",
        pci_bus_id="00000000:18:00.0",
        utilization_ratio=0.5,
        memory_utilization_ratio=0.25,
        memory_used_bytes=1,
        memory_total_bytes=2,
        memory_reserved_bytes=0,
        power_watts=400.0,
        power_limit_watts=700.0,
        energy_joules=1.0,
        temperature_celsius={"gpu": 40.0, "memory": 45.0},
        clock_hertz={"sm": 1.9e9, "memory": 3.2e9},
        clocks_event_reasons={"sw_power_cap": 0},
        throttle_seconds={"power": 0.0},
        ecc_errors={"corrected": 0, "uncorrected": 0},
        remapped_rows={"correctable": 0, "uncorrectable": 0, "pending": 0, "failure": 0},
        pcie_replay=0,
        pcie_bytes={"tx": 1, "rx": 1},
        nvlink_errors={"rcv": 0},
        nvlink_bytes={"tx": 1},
        nvlink_link_errors={("0", "rcv"): 0},  # per link: with --gpu.nvlink-per-link
        nvlink_link_bytes={("0", "tx"): 1},
        gpm={"sm_active": 0.5, "sm_occupancy": 0.5, "tensor_active": 0.5, "dram_active": 0.5},
        xid_counts={79: 1},
        last_xid=79,
    )
    mig = DeviceReading(index="1", uuid="GPU-1", gpu_instance="3", memory_used_bytes=1)
    return GpuSnapshot(
        driver_version="570.133.20",
        cuda_version="12.8",
        devices=(whole, mig),
        jobs=(JobAttribution("0", "GPU-0", "", "1"),),
        pods=(PodAttribution("1", "GPU-1", "3", "uid-1", "ml", "train", "main"),),
    )


def gpu_family_names() -> set[str]:
    """Every family name the ``gpu`` collector exports (with samples) for that snapshot."""
    return {family.name for family in render(full_gpu_snapshot()) if family.samples}
