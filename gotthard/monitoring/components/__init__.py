"""Monitoring components, one module per area, in the style of the monitoring mixins.

Each module holds its area's thresholds (:class:`~gotthard.monitoring.thresholds.Threshold`
constants, with defaults), recording rules (``RECORDING_RULES``), alerts
(``alerts(values)``, each linking its runbook page and its ``DASHBOARD``), and where an
alert holds a device's last reading through the absence of its series, the
:class:`~gotthard.monitoring.rule_model.LastReading` behind it (``LAST_READINGS``, whose
records keep the alert's lookback threshold); the dashboards in
:mod:`gotthard.monitoring.dashboards.boards` read the same threshold values and recorded
series. No module here imports grafanalib: the site settings validate threshold and alert
names against them.

The registry of areas (:data:`gotthard.areas.AREAS`) names each area's module; each
module's ``COMPONENT`` is its area's name.

Adding an alert: its component module, its runbook page template
(``gotthard/monitoring/runbooks/<Alert>.md.tmpl``, rendered into docs/runbooks/ by
``make generate``) and its rule unit test (tests/monitoring/rules_tests/).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType

from gotthard import areas
from gotthard.monitoring.rule_model import AlertRule, RecordingRule
from gotthard.monitoring.thresholds import Threshold, ThresholdValues

#: The component modules, in :data:`~gotthard.monitoring.rule_model.COMPONENTS` order.
MODULES: tuple[ModuleType, ...] = tuple(areas.load(area.component) for area in areas.AREAS)

#: Every threshold: the :class:`Threshold` constants of the component modules, in
#: definition order.
THRESHOLDS: tuple[Threshold, ...] = tuple(
    value for module in MODULES for value in vars(module).values() if isinstance(value, Threshold)
)


def threshold_values(overrides: Mapping[str, object] = ()) -> ThresholdValues:
    """Every threshold's current value: the defaults with *overrides* (checked)."""
    return ThresholdValues(THRESHOLDS, overrides)


def recording_rules(values: ThresholdValues | None = None) -> tuple[RecordingRule, ...]:
    """Every recording rule, each component's ``RECORDING_RULES`` and then the records of
    its ``LAST_READINGS``, built with *values* (default: the defaults)."""
    current = values if values is not None else threshold_values()
    return tuple(
        rule
        for module in MODULES
        for rule in (
            *module.RECORDING_RULES,
            *(
                r
                for reading in getattr(module, "LAST_READINGS", ())
                for r in reading.records(current)
            ),
        )
    )


#: Every recording rule at the default thresholds.
RECORDING_RULES: tuple[RecordingRule, ...] = recording_rules()


def all_alerts(values: ThresholdValues | None = None) -> tuple[AlertRule, ...]:
    """Every alert of every component, built with *values* (default: the defaults)."""
    current = values if values is not None else threshold_values()
    return tuple(rule for module in MODULES for rule in module.alerts(current))


#: Every alert at the default thresholds.
ALERTS: tuple[AlertRule, ...] = all_alerts()
#: Every alert's name, for checking ``disabled_alerts``.
ALERT_NAMES: tuple[str, ...] = tuple(rule.name for rule in ALERTS)
