"""grafanalib's schemaVersion-12 JSON -> the JSON current Grafana stores itself.

grafanalib 0.7.1 emits Grafana 5-era JSON (``schemaVersion`` 12: ``rows``, ``span``,
datasource names as plain strings, targets with ``step``/``intervalFactor``, bar gauges
with ``options.fieldOptions``). :func:`modernise` rewrites that into the shape current
Grafana stores itself (``schemaVersion`` :data:`SCHEMA_VERSION`): datasource references
``{"type": "prometheus", "uid": "${datasource}"}``, ``gridPos`` on every panel, units in
``fieldConfig.defaults.unit``, and only the keys Grafana's dashboard schema knows.
"""

from __future__ import annotations

from typing import Any

from grafanalib.core import TIME_SERIES_TARGET_FORMAT

from gotthard.monitoring.dashboards.panels import DATASOURCE, TAG, threshold_steps

#: Schema version written into the dashboards: Grafana 10.3/10.4 LTS and 11.0-11.2 store
#: 39; later versions (11.3+, 12.x) migrate 39 forward on load. See docs/dashboards.md.
SCHEMA_VERSION = 39

_DASHBOARD_KEYS = (
    "annotations",
    "description",
    "editable",
    "graphTooltip",
    "panels",
    "refresh",
    "tags",
    "templating",
    "time",
    "timezone",
    "title",
    "uid",
)
_PANEL_KEYS = (
    "datasource",
    "description",
    "gridPos",
    "id",
    "interval",
    "maxPerRow",
    "repeat",
    "repeatDirection",
    "targets",
    "timeFrom",
    "timeShift",
    "title",
    "transformations",
    "transparent",
    "type",
)
_FIELD_DEFAULT_KEYS = (
    "color",
    "custom",
    "decimals",
    "displayName",
    "mappings",
    "max",
    "min",
    "noValue",
    "thresholds",
    "unit",
)
_VARIABLE_KEYS = (
    "allValue",
    "datasource",
    "description",
    "hide",
    "includeAll",
    "label",
    "multi",
    "name",
    "options",
    "query",
    "refresh",
    "regex",
    "skipUrlSync",
    "sort",
    "type",
)


def _prune(value: Any) -> Any:
    """Drop ``None`` values from dicts (threshold steps keep their ``null`` base value)."""
    if isinstance(value, dict):
        return {
            key: item if key == "steps" else _prune(item)
            for key, item in value.items()
            if item is not None
        }
    if isinstance(value, list):
        return [_prune(item) for item in value]
    return value


def _modern_target(target: dict[str, Any]) -> dict[str, Any]:
    modern = {
        "datasource": dict(DATASOURCE),
        "editorMode": "code",
        "expr": target["expr"],
        "format": target.get("format") or TIME_SERIES_TARGET_FORMAT,
        "instant": bool(target.get("instant")),
        "legendFormat": target.get("legendFormat") or "",
        "range": not target.get("instant"),
        "refId": target["refId"],
    }
    if target.get("legendFormat") is None or modern["legendFormat"] == "":
        modern["legendFormat"] = "__auto"
    if target.get("interval"):
        modern["interval"] = target["interval"]
    return modern


def _modern_panel(panel: dict[str, Any]) -> dict[str, Any]:
    kind = panel["type"]
    modern = {key: panel[key] for key in _PANEL_KEYS if panel.get(key) not in (None, "", [])}
    if "repeat" not in modern:
        for key in ("repeatDirection", "maxPerRow"):
            modern.pop(key, None)
    modern["datasource"] = dict(DATASOURCE)
    modern["targets"] = [_modern_target(target) for target in panel.get("targets", [])]
    field_config = panel.get("fieldConfig") or {}
    defaults = dict(field_config.get("defaults") or {})
    options = dict(panel.get("options") or {})
    if kind == "bargauge":
        legacy = options.pop("fieldOptions", {})
        legacy_defaults = legacy.get("defaults", {})
        defaults.update(
            {
                "unit": legacy_defaults.get("unit"),
                "min": legacy_defaults.get("min"),
                "max": legacy_defaults.get("max"),
                "decimals": legacy_defaults.get("decimals"),
                "thresholds": {"mode": "absolute", "steps": legacy.get("thresholds", [])},
                "color": {"mode": "thresholds"},
            }
        )
        options = {
            "displayMode": options.get("displayMode", "gradient"),
            "orientation": options.get("orientation", "horizontal"),
            "reduceOptions": {
                "calcs": legacy.get("calcs", ["lastNotNull"]),
                "fields": "",
                "values": False,
            },
            "showUnfilled": True,
            "valueMode": "color",
        }
    elif kind == "table":
        custom = dict(defaults.get("custom") or {})
        custom.pop("displayMode", None)
        custom["cellOptions"] = {"type": "auto"}
        defaults["custom"] = custom
        options = {
            "cellHeight": "sm",
            "showHeader": options.get("showHeader", True),
            "sortBy": options.get("sortBy", []),
        }
    elif kind == "stat":
        defaults.pop("custom", None)
        options["reduceOptions"] = dict(options.get("reduceOptions") or {})
        options["reduceOptions"]["fields"] = ""
    defaults = {key: defaults[key] for key in _FIELD_DEFAULT_KEYS if key in defaults}
    if not isinstance(defaults.get("thresholds"), dict) or not isinstance(
        defaults["thresholds"].get("steps"), list
    ):
        defaults["thresholds"] = {"mode": "absolute", "steps": threshold_steps(())}
    modern["fieldConfig"] = {
        "defaults": defaults,
        "overrides": list(field_config.get("overrides") or []),
    }
    modern["options"] = options
    return _prune(modern)


def _modern_variable(variable: dict[str, Any]) -> dict[str, Any]:
    modern = {key: variable[key] for key in _VARIABLE_KEYS if variable.get(key) is not None}
    modern.setdefault("hide", 0)
    modern.setdefault("regex", "")
    modern["skipUrlSync"] = False
    if variable["type"] == "datasource":
        modern["current"] = {}
        modern.pop("datasource", None)
        modern.pop("sort", None)
    else:
        modern["datasource"] = dict(DATASOURCE)
        if modern.get("includeAll"):
            modern["current"] = {"selected": True, "text": ["All"], "value": ["$__all"]}
        else:
            modern["current"] = {}
    modern["options"] = []
    return modern


def modernise(legacy: dict[str, Any]) -> dict[str, Any]:
    """Rewrite grafanalib's schemaVersion-12 dashboard into current Grafana JSON."""
    if legacy.get("rows"):
        raise ValueError("dashboards must use panels with gridPos, not legacy rows")
    modern = {key: legacy[key] for key in _DASHBOARD_KEYS if legacy.get(key) is not None}
    modern["annotations"] = {"list": []}
    modern["fiscalYearStartMonth"] = 0
    modern["links"] = [
        {
            "asDropdown": True,
            "icon": "external link",
            "includeVars": True,
            "keepTime": True,
            "tags": [TAG],
            "targetBlank": False,
            "title": "Gotthard",
            "tooltip": "",
            "type": "dashboards",
        }
    ]
    modern["liveNow"] = False
    modern["panels"] = [_modern_panel(panel) for panel in legacy.get("panels", [])]
    modern["schemaVersion"] = SCHEMA_VERSION
    modern["templating"] = {
        "list": [_modern_variable(v) for v in legacy.get("templating", {}).get("list", [])]
    }
    modern["time"] = {"from": legacy["time"]["from"], "to": legacy["time"]["to"]}
    modern["version"] = 1
    modern["weekStart"] = ""
    return modern
