"""The ``lustre`` collector: procfs/sysfs (or lctl) -> LustreSnapshot -> metric families."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gotthard.exporters.families import MetricFamily
from gotthard.exporters.lustre.render import render
from gotthard.exporters.lustre.render_optin import render_optin
from gotthard.exporters.lustre.snapshot import LustreSnapshot
from gotthard.exporters.lustre.source import LctlSource, LnetctlReader, ProcfsSource, assemble
from gotthard.exporters.settings import LustreExporterConfig

if TYPE_CHECKING:
    from gotthard.config import Config


class LustreCollector:
    name = "lustre"

    def __init__(
        self, config: LustreExporterConfig, *, procfs: str = "/proc", sysfs: str = "/sys"
    ) -> None:
        self.poll_interval = config.poll_interval_seconds
        self.job_stats = config.job_stats
        self.client_target_space = config.client_target_space
        self.client_target_imports = config.client_target_imports
        self.job_stats_limit = config.job_stats_limit
        self.export_stats = config.export_stats
        self.export_stats_limit = config.export_stats_limit
        self.quota_limit = config.quota_limit
        #: opt-in parameters read from the targets (see source.OPTIONAL)
        self.extras = tuple(
            name for name, on in (("quota", config.quota), ("brw_stats", config.brw_stats)) if on
        )
        self.lnetctl = (
            LnetctlReader(config.lnetctl_path, config.command_timeout_seconds)
            if config.lnet_health
            else None
        )
        files = ProcfsSource(procfs=procfs, sysfs=sysfs)
        self.source: LctlSource | ProcfsSource = files
        if config.source == "lctl":
            # lctl has no parameter for LNet's counters: those still come from the files
            self.source = LctlSource(config.lctl_path, config.command_timeout_seconds, files)

    def poll(self) -> LustreSnapshot:
        """Read the source; raises only when lctl cannot be run (procfs never raises)."""
        options = {"job_stats": self.job_stats, "export_stats": self.export_stats}
        tree = self.source.read(**options, extras=self.extras)
        if self.lnetctl is not None:
            self.lnetctl.read(tree)
        return assemble(tree, **options, extras=self.extras)

    def render(self, snapshot: LustreSnapshot) -> list[MetricFamily]:
        families = render(
            snapshot,
            job_stats_limit=self.job_stats_limit,
            export_stats_limit=self.export_stats_limit,
            client_target_space=self.client_target_space,
            client_target_imports=self.client_target_imports,
        )
        return families + render_optin(snapshot, quota_limit=self.quota_limit)

    def snapshot_errors(self, snapshot: LustreSnapshot) -> int:
        return snapshot.errors


def from_config(cfg: Config) -> LustreCollector:
    exporter = cfg.exporter
    return LustreCollector(exporter.lustre, procfs=exporter.path_procfs, sysfs=exporter.path_sysfs)
