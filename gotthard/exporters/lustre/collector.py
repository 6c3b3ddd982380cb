"""The ``lustre`` collector: procfs/sysfs (or lctl) -> LustreSnapshot -> metric families."""

from __future__ import annotations

from gotthard.exporters.families import MetricFamily
from gotthard.exporters.lustre.render import render
from gotthard.exporters.lustre.snapshot import LustreSnapshot
from gotthard.exporters.lustre.source import LctlSource, ProcfsSource, assemble
from gotthard.exporters.settings import LustreExporterConfig


class LustreCollector:
    name = "lustre"

    def __init__(
        self, config: LustreExporterConfig, *, procfs: str = "/proc", sysfs: str = "/sys"
    ) -> None:
        self.poll_interval = config.poll_interval_seconds
        self.job_stats = config.job_stats
        self.job_stats_limit = config.job_stats_limit
        self.export_stats = config.export_stats
        self.export_stats_limit = config.export_stats_limit
        self.source: LctlSource | ProcfsSource
        if config.source == "lctl":
            self.source = LctlSource(
                config.lctl_path, config.command_timeout_seconds, procfs=procfs, sysfs=sysfs
            )
        else:
            self.source = ProcfsSource(procfs=procfs, sysfs=sysfs)

    def poll(self) -> LustreSnapshot:
        """Read the source; raises only when lctl cannot be run (procfs never raises)."""
        tree = self.source.read(job_stats=self.job_stats, export_stats=self.export_stats)
        return assemble(tree, job_stats=self.job_stats, export_stats=self.export_stats)

    def render(self, snapshot: LustreSnapshot) -> list[MetricFamily]:
        return render(
            snapshot,
            job_stats_limit=self.job_stats_limit,
            export_stats_limit=self.export_stats_limit,
        )

    def snapshot_errors(self, snapshot: LustreSnapshot) -> int:
        return snapshot.errors
