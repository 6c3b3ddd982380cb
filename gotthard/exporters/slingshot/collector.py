"""The ``slingshot`` collector: sysfs source -> SlingshotSnapshot -> metric families."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from gotthard.exporters.families import MetricFamily
from gotthard.exporters.settings import SlingshotExporterConfig
from gotthard.exporters.slingshot.render import (
    PROPERTY_COUNTERS,
    TELEMETRY_NAMES,
    HealthRule,
    render,
)
from gotthard.exporters.slingshot.snapshot import SlingshotSnapshot
from gotthard.exporters.slingshot.sysfs import SysfsSource

if TYPE_CHECKING:
    from gotthard.config import Config


class SlingshotCollector:
    """HPE Slingshot NICs from ``<sysfs>/class/cxi``.

    ``source.files()`` lists the absolute paths one poll reads (for benchmarks);
    *clock* is "now" for the link restart windows (injectable for tests).
    """

    name = "slingshot"

    def __init__(
        self,
        config: SlingshotExporterConfig,
        *,
        sysfs: str = "/sys",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.poll_interval = config.poll_interval_seconds
        self.rule = HealthRule(
            max_restarts_1h=config.max_restarts_1h, max_restarts_10h=config.max_restarts_10h
        )
        extra = re.compile(config.extra_counters) if config.extra_counters else None
        self.source = SysfsSource(
            sysfs,
            telemetry=TELEMETRY_NAMES,
            property_counters=tuple(row[0] for row in PROPERTY_COUNTERS),
            extra=extra,
            clock=clock,
        )

    def poll(self) -> SlingshotSnapshot:
        return self.source.poll()

    def render(self, snapshot: SlingshotSnapshot) -> list[MetricFamily]:
        return render(snapshot, self.rule)

    def snapshot_errors(self, snapshot: SlingshotSnapshot) -> int:
        return snapshot.errors


def from_config(cfg: Config) -> SlingshotCollector:
    return SlingshotCollector(cfg.exporter.slingshot, sysfs=cfg.exporter.path_sysfs)
