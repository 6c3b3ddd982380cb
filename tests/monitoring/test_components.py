"""Monitoring components: one module per area, each concept defined once.

* every area has a component module with its thresholds, recording rules and alerts, in
  the rule files' group order, and each alert links a dashboard that is built;
* the GPU join key, the dashboard uids and the Slingshot flap limits have one definition;
* dashboards read recorded series instead of recomputing a recording rule's rate, and
  draw the alerts' thresholds.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from gotthard import areas
from gotthard.exporters.settings import SlingshotExporterConfig
from gotthard.exporters.slingshot import limits
from gotthard.exporters.slingshot.render import HealthRule
from gotthard.monitoring import components, rules, shared
from gotthard.monitoring.components import gpu, job, lustre, slingshot
from gotthard.monitoring.dashboards import build
from gotthard.monitoring.rule_model import COMPONENTS

PACKAGE = Path(components.__file__).resolve().parents[1]


def _exprs(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def test_one_component_module_per_area_in_rule_group_order() -> None:
    assert tuple(module.COMPONENT for module in components.MODULES) == COMPONENTS
    assert tuple(area.name for area in areas.AREAS) == COMPONENTS
    for module in components.MODULES:
        assert module.DASHBOARD in shared.DASHBOARD_UIDS, module.__name__
        made = module.alerts(components.threshold_values())
        if module.COMPONENT == "job":  # the job report's findings, no alert of its own
            assert made == () and module.FINDINGS
            continue
        assert made, module.__name__
        assert {rule.component for rule in made} == {module.COMPONENT}
        assert {rule.component for rule in module.RECORDING_RULES} <= {module.COMPONENT}
    names = [t.name for t in components.THRESHOLDS]
    assert len(names) == len(set(names))
    assert all(re.fullmatch(r"[a-z][a-z0-9_]+", name) for name in names)
    assert rules.alert_names() == [rule.name for rule in components.all_alerts()]


def test_every_threshold_default_is_valid_and_used_by_an_alert() -> None:
    """(The job report's thresholds are its findings', tests/job/test_report.py.)"""
    defaults = components.threshold_values()
    for threshold in components.THRESHOLDS:
        assert threshold.check(threshold.default) == threshold.default
        if threshold.name in job.FINDINGS:
            continue
        changed = defaults.overridden(threshold.name, threshold.perturbed(threshold.default))
        before = {rule.name: rule for rule in components.all_alerts(defaults)}
        after = components.all_alerts(changed)
        assert any(rule != before[rule.name] for rule in after), threshold.name


def test_alert_dashboard_links_come_from_the_one_uid_table() -> None:
    built = {d["uid"] for d in build.build_dashboards()}
    assert set(shared.DASHBOARD_UIDS.values()) == built
    assert rules.DASHBOARD_UIDS is shared.DASHBOARD_UIDS
    for rule in rules.ALERTS:
        uid = shared.DASHBOARD_UIDS[rule.dashboard]
        url = rule.dashboard_url("https://g")
        assert url == f"https://g/d/{uid}" or url.startswith(f"https://g/d/{uid}?"), url


def test_join_keys_and_uids_are_written_once_in_the_package() -> None:
    gpu_key = shared.GPU_KEY
    holders = {}
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        holders[path.relative_to(PACKAGE).as_posix()] = (
            text.count(f'"{gpu_key}"'),
            len(re.findall(r'"gotthard-[a-z-]+"', text)),
            text.count('"gotthard_slurm_job_info"'),
        )
    assert [name for name, counts in holders.items() if counts[0]] == ["shared.py"]
    # the live check's allow-list names panels by uid (its keys are what it prints)
    assert [name for name, counts in holders.items() if counts[1]] in ([], ["dashboards/check.py"])
    assert [name for name, counts in holders.items() if counts[2]] == ["shared.py"]


def test_slingshot_flap_limits_have_one_definition() -> None:
    config = SlingshotExporterConfig()
    assert (config.max_restarts_1h, config.max_restarts_10h) == (
        limits.MAX_RESTARTS_1H,
        limits.MAX_RESTARTS_10H,
    )
    assert HealthRule() == HealthRule(limits.MAX_RESTARTS_1H, limits.MAX_RESTARTS_10H)
    defaults = components.threshold_values()
    assert defaults[slingshot.FLAPS_1H] == limits.MAX_RESTARTS_1H
    assert defaults[slingshot.FLAPS_10H] == limits.MAX_RESTARTS_10H


def _rated(expr: str, range_: str) -> set[tuple[str, frozenset[str]]]:
    """(counter, matchers) of every ``rate``/``increase`` over *range_* in *expr*."""
    found = set()
    pattern = rf"(?:rate|increase)\((\w+)(?:\{{([^}}]*)\}})?\[{re.escape(range_)}\]\)"
    for metric, matchers in re.findall(pattern, expr):
        found.add((metric, frozenset(m.strip() for m in matchers.split(",") if m.strip())))
    return found


def test_dashboards_read_the_recorded_series_instead_of_recomputing_them() -> None:
    """A panel never rates a counter a record rates, unless it needs the chosen nodes'
    own series and the record has no ``instance`` (a per-cluster record)."""
    recorded = {
        (*use, "instance" in rule.record.partition(":")[0].split("_"))
        for rule in rules.RECORDING_RULES
        for use in _rated(rule.expr, "5m") | _rated(rule.expr, "10m")
    }
    assert recorded, "the recording rules rate counters"
    for dash in build.build_dashboards():
        for expr in _exprs(dash):
            for metric, matchers in _rated(expr, "$__rate_interval"):
                per_node = 'instance=~"$instance"' in matchers
                for counter, needed, per_instance in recorded:
                    if counter == metric and needed <= matchers and (per_instance or not per_node):
                        raise AssertionError(f"{dash['uid']}: {expr} recomputes {counter}")
    used = {
        name
        for d in build.build_dashboards()
        for e in _exprs(d)
        for name in re.findall(r"site_cluster\w*:\w+:\w+", e)
    }
    records = {rule.record for rule in rules.RECORDING_RULES}
    assert used <= records
    for record in (lustre.OST_FILL, lustre.FILL_SPREAD, slingshot.BER_TOP, slingshot.TIMEOUTS_TOP):
        assert record in used, record


def test_gpu_job_views_read_the_per_job_records_and_the_gpu_jobs_owners() -> None:
    """The GPU board's per-job views read the per-job records and the GPU jobs' owners
    instead of joining every GPU to its jobs and every job to its owner at every step.
    The records have no ``instance``: the table (an instant query) keeps the jobs with a
    GPU on the chosen nodes; the time series shows each cluster's least utilised GPU jobs."""
    board = next(d for d in build.build_dashboards() if d["uid"] == "gotthard-gpu-fleet")
    panels = {p["title"]: [t["expr"] for t in p["targets"]] for p in board["panels"]}
    on_nodes = (
        ' and on (site, cluster, job_id) gotthard_gpu_job_info{site=~"$site", '
        'cluster=~"$cluster", instance=~"$instance"})'
    )
    table = panels["GPU jobs"]
    assert [e.count(on_nodes) for e in table[1:]] == [1, 1, 1]
    for record, expr in zip(
        (gpu.JOB_UTILIZATION, gpu.JOB_TENSOR_ACTIVE, gpu.JOB_MEMORY_USED), table[1:], strict=True
    ):
        assert expr.startswith(f"({record}{{"), expr
    [series] = panels["Least utilised GPU jobs: bottom 10"]
    assert series.startswith(f"({gpu.LEAST_UTILIZED_JOBS}{{")
    assert "gotthard_gpu_job_info" not in series
    for expr in [*table, series]:
        assert f"({gpu.JOB_OWNERS}{{" in expr and "gotthard_slurm_job_info{" not in expr, expr
    for metric in (
        "gotthard_gpu_utilization_ratio",
        "gotthard_gpu_tensor_active_ratio",
        "gotthard_gpu_memory_used_bytes",
    ):
        joined = [e for e in _exprs(board) if "gotthard_gpu_job_info" in e and f"{metric}{{" in e]
        assert joined == [], joined
    records = {rule.record: rule.expr for rule in rules.RECORDING_RULES}
    for record in (gpu.JOB_TENSOR_ACTIVE, gpu.JOB_MEMORY_USED):
        assert "gpu_instance) group_left ()" in records[record], record


def test_gpu_fleet_time_series_read_records_and_the_node_panels_the_chosen_nodes() -> None:
    """At a site's size a range over every GPU costs tens of seconds: the fleet section's
    time series read per-cluster or top-10 records only (each a slow record, which no
    alert reads), and every panel that reads a GPU's own series reads the chosen nodes'.
    The node variable has no "All"."""
    board = next(d for d in build.build_dashboards() if d["uid"] == "gotthard-gpu-fleet")
    slow = {rule.record for rule in rules.RECORDING_RULES if rule.cadence == "slow"}
    section, seen = "", set()
    for panel in board["panels"]:
        if panel["type"] == "row":
            section = panel["title"]
            continue
        for target in panel["targets"]:
            raw = set(re.findall(r"\b(gotthard_gpu_\w+)\{([^}]*)\}", target["expr"]))
            names = set(re.findall(r"([a-z_]+:gotthard_gpu_\w+:\w+)\{", target["expr"]))
            if section.startswith("Fleet") and panel["type"] == "timeseries":
                assert raw == set(), (panel["title"], raw)
                assert names and names <= slow | {gpu.CLUSTER_UTILIZATION}, panel["title"]
                seen.add(panel["title"])
            elif section.startswith("Nodes"):
                assert all('instance=~"$instance"' in matchers for _, matchers in raw), panel
    assert len(seen) == 8
    [node] = [v for v in board["templating"]["list"] if v["name"] == "instance"]
    assert node["includeAll"] is False and node["multi"] is True


def test_panels_draw_the_alert_thresholds() -> None:
    values = components.threshold_values()
    dashboards = {d["uid"]: d for d in build.build_dashboards()}
    slingshot_board = {
        p["title"]: p for p in dashboards["gotthard-slingshot-network-health"]["panels"]
    }
    flaps = slingshot_board["Link restarts (flaps)"]["fieldConfig"]["defaults"]
    assert flaps["custom"]["thresholdsStyle"] == {"mode": "line"}
    assert [s.get("value") for s in flaps["thresholds"]["steps"]] == [
        None,
        values[slingshot.FLAPS_1H],
        values[slingshot.FLAPS_10H],
    ]


def test_one_fatal_xid_list_for_the_exporter_and_the_alert() -> None:
    """The XIDs that make the exporter mark a GPU unhealthy are the XIDs that page."""
    from gotthard.exporters.gpu import events, xid

    assert events.FATAL_XIDS is xid.FATAL_XIDS
    assert set(gpu.PAGING_XIDS) == xid.FATAL_XIDS
    matched = re.findall(r'xid=~"([0-9|]+)"', rules.alert("GPUFatalXid").expr)
    assert matched and all(set(m.split("|")) == {str(x) for x in xid.FATAL_XIDS} for m in matched)


def test_time_series_over_slow_records_only_step_at_the_slow_interval() -> None:
    """A slow record changes every slow interval: a panel reading only such records has
    that as its "Min interval" (Grafana steps no finer); one reading a raw series or an
    evaluation record has none."""
    from gotthard.monitoring.dashboards.panels import Query, record_interval
    from gotthard.monitoring.rule_model import DEFAULT_SLOW_RULE_INTERVAL

    slow = {rule.record for rule in rules.RECORDING_RULES if rule.cadence == "slow"}
    stepped = 0
    for dash in build.build_dashboards():
        for panel in dash["panels"]:
            if panel["type"] != "timeseries":
                continue
            exprs = [t["expr"] for t in panel["targets"]]
            names = {n for e in exprs for n in re.findall(r"\w+:\w+:\w+", e)}
            raw = any(re.search(r"\bgotthard_\w+", re.sub(r"\w+:\w+:\w+", "", e)) for e in exprs)
            only_slow = bool(names) and names <= slow and not raw
            assert panel.get("interval") == (DEFAULT_SLOW_RULE_INTERVAL if only_slow else None), (
                dash["uid"],
                panel["title"],
            )
            stepped += only_slow
    assert stepped >= 30
    assert record_interval([Query(f"sum({gpu.CLUSTER_POWER})")]) == DEFAULT_SLOW_RULE_INTERVAL
    assert record_interval([Query(gpu.CLUSTER_UTILIZATION)]) is None  # evaluation group
    assert record_interval([Query(f"{gpu.CLUSTER_POWER} / gotthard_gpu_info")]) is None
