"""The ``gpu`` collector: NVML source -> GpuSnapshot -> metric families."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gotthard.exporters.families import MetricFamily
from gotthard.exporters.gpu.nvml import NvmlSource
from gotthard.exporters.gpu.render import render
from gotthard.exporters.gpu.snapshot import GpuSnapshot
from gotthard.exporters.settings import GpuExporterConfig

if TYPE_CHECKING:
    from gotthard.config import Config


class GpuCollector:
    name = "gpu"

    def __init__(self, config: GpuExporterConfig, *, procfs: str = "/proc") -> None:
        self.poll_interval = config.poll_interval_seconds
        self.source = NvmlSource(
            procfs=procfs,
            kubelet_socket=config.kubelet_socket,
            gpm=config.gpm,
            xid_events=config.xid_events,
            xid_health_window_seconds=config.xid_health_window_seconds,
            nvlink_per_link=config.nvlink_per_link,
        )

    def poll(self) -> GpuSnapshot:
        return self.source.poll()

    def render(self, snapshot: GpuSnapshot) -> list[MetricFamily]:
        return render(snapshot)

    def snapshot_errors(self, snapshot: GpuSnapshot) -> int:
        return snapshot.errors

    def close(self) -> None:
        self.source.close()


def from_config(cfg: Config) -> GpuCollector:
    return GpuCollector(cfg.exporter.gpu, procfs=cfg.exporter.path_procfs)
