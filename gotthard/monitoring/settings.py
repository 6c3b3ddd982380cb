"""``[monitoring]``: the site's tuning of the rules, alerts and dashboards.

Pydantic only: the component modules that know the threshold and alert names are loaded
when a name needs checking, never grafanalib.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StrictBool, StrictFloat, field_validator

from gotthard.base import Duration, Strict

GpuSource = Literal["gotthard", "dcgm"]


class MonitoringConfig(Strict):
    #: threshold name -> value, overriding the default (``gotthard rules thresholds``)
    thresholds: dict[str, StrictFloat] = Field(default_factory=dict)
    #: alerts left out of the generated rules
    disabled_alerts: Annotated[list[str], Field(max_length=1000)] = Field(default_factory=list)
    #: where the GPU metrics come from: Gotthard's exporter or NVIDIA's dcgm-exporter
    gpu_source: GpuSource = "gotthard"
    #: also record each pre-1.0 metric name from its new name (the rename table of
    #: docs/exporter.md), so a previous release's dashboards and alerts keep working;
    #: for one release
    legacy_names: StrictBool = False
    #: the interval of the slow rule groups (``gotthard-<component>.slow-recording``):
    #: the records that read many series to feed panels, not alerts (per-job Lustre IO);
    #: Prometheus evaluates them this often instead of at every evaluation interval
    slow_rule_interval: Duration = "2m"

    @field_validator("thresholds")
    @classmethod
    def _known_thresholds(cls, value: dict[str, float]) -> dict[str, float]:
        from gotthard.monitoring.components import threshold_values

        threshold_values(value)  # raises "<name>: <reason>" for the first bad entry
        return value

    @field_validator("disabled_alerts")
    @classmethod
    def _known_alerts(cls, value: list[str]) -> list[str]:
        from gotthard.monitoring.components import ALERT_NAMES

        for name in value:
            if name not in ALERT_NAMES:
                raise ValueError(f"{name}: unknown alert (known: {', '.join(ALERT_NAMES)})")
        return value
