"""Thresholds tuned per site: ``[monitoring]`` reaches rules, panels and runbook pages.

* an override changes the alert's expression (and promtool proves the alert then fires
  where it did not), the dashboards' threshold colours and lines, and the runbook page;
* ``disabled_alerts`` leaves an alert out of the rules and the pages;
* unknown names and out-of-range values are configuration errors naming the key;
* ``gotthard rules thresholds`` lists every threshold and what uses it;
* every alert has a page template (docs/runbooks/ is their render at the defaults, which
  ``make generate`` writes and tests/test_docs.py compares).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gotthard.monitoring import rules, runbook_pages
from gotthard.monitoring.components import THRESHOLDS, slingshot
from gotthard.monitoring.components.job import FINDINGS as JOB_FINDINGS
from gotthard.monitoring.dashboards import build
from gotthard.monitoring.settings import MonitoringConfig
from tests.support.cli import run, run_in_process
from tests.support.monitoring import binary

TUNED = MonitoringConfig(
    thresholds={"lustre_ost_fill_warning": 0.8, "lustre_recovery_stuck_for": 2700},
    disabled_alerts=["GPUPowerThrottling"],
)


def _alert_rule(document: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for g in document["groups"] for r in g["rules"] if r.get("alert") == name)


def _panel(dashboards: list[dict[str, Any]], uid: str, title: str) -> dict[str, Any]:
    dash = next(d for d in dashboards if d["uid"] == uid)
    return next(p for p in dash["panels"] if p["title"] == title)


def _steps(panel: dict[str, Any]) -> list[tuple[Any, str]]:
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    return [(step.get("value"), step["color"]) for step in steps]


def test_an_override_changes_the_rule_the_panel_and_the_page() -> None:
    default = yaml.safe_load(rules.render_alerting_rules())
    tuned = yaml.safe_load(rules.render_alerting_rules(monitoring=TUNED))
    assert _alert_rule(default, "LustreOSTFillHigh")["expr"].endswith("> 0.85")
    high = _alert_rule(tuned, "LustreOSTFillHigh")
    assert high["expr"] == "site_cluster_fs_target:gotthard_lustre_ost_fill:ratio > 0.8"
    assert high["annotations"]["summary"] == "A Lustre OST is more than 80% full."
    assert _alert_rule(tuned, "LustreRecoveryStuck")["for"] == "45m"
    # the critical threshold is untouched
    assert _alert_rule(tuned, "LustreOSTFillCritical")["expr"].endswith("> 0.9")

    fill = ("gotthard-lustre-storage", "OST fill")
    assert _steps(_panel(build.build_dashboards(), *fill)) == [
        (None, "green"),
        (0.85, "orange"),
        (0.9, "red"),
    ]
    tuned_dashboards = build.build_dashboards(TUNED)
    assert _steps(_panel(tuned_dashboards, *fill)) == [
        (None, "green"),
        (0.8, "orange"),
        (0.9, "red"),
    ]
    fullest = _panel(tuned_dashboards, "gotthard-site-overview", "Lustre fullest OST by site")
    assert fullest["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"] == {"mode": "line"}
    assert (0.8, "orange") in _steps(fullest)

    page = runbook_pages.render_pages(TUNED)["LustreOSTFillHigh.md"]
    assert "| Summary | A Lustre OST is more than 80% full. |" in page
    assert "```promql\nsite_cluster_fs_target:gotthard_lustre_ost_fill:ratio > 0.8\n```" in page
    assert "more than 80% full for 30 minutes" in page and "below 0.8 for the OST" in page
    critical = runbook_pages.render_pages(TUNED)["LustreOSTFillCritical.md"]
    assert "then below 80%" in critical
    stuck = runbook_pages.render_pages(TUNED)["LustreRecoveryStuck.md"]
    assert "| For | 45m |" in stuck and "for 45 minutes" in stuck


def test_promtool_fires_the_tuned_alert_where_the_default_stays_quiet(tmp_path: Path) -> None:
    """An OST at 82% for 40 minutes: LustreOSTFillHigh fires at 0.8, not at 0.85."""
    (tmp_path / "recording.rules.yml").write_text(rules.render_recording_rules())
    fill = {
        "input_series": [
            {
                "series": 'gotthard_lustre_target_capacity_bytes{site="s", cluster="c", fs="fs", '
                'target="fs-OST0000", component="ost"}',
                "values": "100x40",
            },
            {
                "series": 'gotthard_lustre_target_available_bytes{site="s", cluster="c", fs="fs", '
                'target="fs-OST0000", component="ost"}',
                "values": "18x40",
            },
        ],
        "interval": "1m",
    }
    labels = {"severity": "warning", "site": "s", "cluster": "c", "fs": "fs"}
    for name, monitoring, fires in (("tuned", TUNED, True), ("default", None, False)):
        (tmp_path / "alerts.rules.yml").write_text(
            rules.render_alerting_rules(monitoring=monitoring)
        )
        annotations = {
            "summary": "A Lustre OST is more than 80% full.",
            "description": "OST fs-OST0000 of fs in s/c is 82% full.",
            "runbook_url": f"{rules.DEFAULT_RUNBOOK_BASE_URL}/LustreOSTFillHigh.md",
            "dashboard_url": f"{rules.DEFAULT_DASHBOARD_BASE_URL}/d/gotthard-lustre-storage"
            "?var-site=s&var-cluster=c",
        }
        alert = {"exp_labels": {**labels, "target": "fs-OST0000"}, "exp_annotations": annotations}
        expected = [alert] if fires else []
        test = {
            "rule_files": ["recording.rules.yml", "alerts.rules.yml"],
            "evaluation_interval": "1m",
            "tests": [
                {
                    **fill,
                    "alert_rule_test": [
                        {"eval_time": "40m", "alertname": "LustreOSTFillHigh", "exp_alerts": []}
                    ],
                }
            ],
        }
        test["tests"][0]["alert_rule_test"][0]["exp_alerts"] = expected
        path = tmp_path / f"{name}.test.yml"
        path.write_text(yaml.safe_dump(test))
        result = run([binary("promtool"), "test", "rules", str(path)])
        assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_accepts_the_tuned_rules(tmp_path: Path) -> None:
    (tmp_path / "alerts.rules.yml").write_text(rules.render_alerting_rules(monitoring=TUNED))
    result = run([binary("promtool"), "check", "rules", str(tmp_path / "alerts.rules.yml")])
    assert result.returncode == 0, result.stdout + result.stderr
    # the site groups: every site alert but the one TUNED disables
    site = [rule for rule in rules.ALERTS if rule.placement == "site"]
    assert f"SUCCESS: {len(site) - 1} rules found" in result.stdout


def test_disabled_alerts_leave_the_rules_and_the_pages() -> None:
    names = rules.alert_names(TUNED)
    assert "GPUPowerThrottling" not in names and "GPUThermalThrottling" in names
    assert len(names) == len(rules.ALERTS) - 1
    assert "GPUPowerThrottling" not in rules.render_alerting_rules(monitoring=TUNED)
    assert "GPUPowerThrottling.md" not in runbook_pages.render_pages(TUNED)


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        (
            "[monitoring.thresholds]\nlustre_ost_fill_warnin = 0.8\n",
            "monitoring.thresholds.lustre_ost_fill_warnin: unknown threshold (known: ",
        ),
        (
            "[monitoring.thresholds]\nlustre_ost_fill_warning = 85\n",
            "monitoring.thresholds.lustre_ost_fill_warning: is a ratio: must be between 0 and 1",
        ),
        (
            '[monitoring.thresholds]\nslurm_pending_resources_jobs = "many"\n',
            "monitoring.thresholds.slurm_pending_resources_jobs: Input should be a valid number",
        ),
        (
            "[monitoring.thresholds]\nslurm_pending_resources_jobs = 10.5\n",
            "monitoring.thresholds.slurm_pending_resources_jobs: is a count",
        ),
        (
            "[monitoring.thresholds]\nlustre_recovery_stuck_for = 90\n",
            "monitoring.thresholds.lustre_recovery_stuck_for: is a duration",
        ),
        (
            '[monitoring]\ndisabled_alerts = ["GPUPowerThrottle"]\n',
            "monitoring.disabled_alerts.GPUPowerThrottle: unknown alert (known: ",
        ),
        ('[monitoring]\ngpu_source = "nvml"\n', "monitoring.gpu_source: Input should be"),
    ],
)
def test_bad_monitoring_settings_are_errors_that_name_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], toml: str, message: str
) -> None:
    site = tmp_path / "site.toml"
    site.write_text(toml)
    assert run_in_process("--config", str(site), "rules", "thresholds") == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_thresholds_command_lists_every_threshold_and_what_uses_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    site = tmp_path / "site.toml"
    site.write_text("[monitoring.thresholds]\nlustre_ost_fill_warning = 0.8\n")
    assert run_in_process("--config", str(site), "rules", "thresholds", "--format", "json") == 0
    listed = {entry["name"]: entry for entry in json.loads(capsys.readouterr().out)}
    assert set(listed) == {t.name for t in THRESHOLDS}
    warning = listed["lustre_ost_fill_warning"]
    assert (warning["default"], warning["value"], warning["unit"]) == (0.85, 0.8, "ratio")
    assert warning["alerts"] == ["LustreOSTFillHigh"]
    assert "Gotthard / Lustre storage / OST fill" in warning["panels"]
    assert "Gotthard / Site overview / Lustre — $site" in warning["panels"]
    flaps = listed["slingshot_flaps_1h"]
    assert flaps["alerts"] == ["SlingshotLinkFlapping"]
    assert flaps["panels"] == ["Gotthard / Slingshot network health / Link restarts (flaps)"]
    # every threshold is used by an alert, but those of the job report's findings
    assert all(entry["alerts"] for name, entry in listed.items() if name not in JOB_FINDINGS)
    assert set(listed) >= JOB_FINDINGS

    assert run_in_process("rules", "thresholds") == 0
    text = capsys.readouterr().out
    assert "lustre_ost_fill_warning = 0.85 ratio: OST used fraction" in text
    assert "  alerts: LustreOSTFillHigh\n" in text


def test_every_alert_has_a_page_template_and_every_template_an_alert() -> None:
    """(docs/runbooks/ is their render at the defaults: tests/test_docs.py compares it with
    what ``make generate`` writes.)"""
    pages = runbook_pages.render_pages()
    assert sorted(pages) == sorted(f"{name}.md" for name in rules.alert_names())
    assert runbook_pages.template_names() == sorted(rules.alert_names())


def test_write_runbooks_writes_the_tuned_pages(tmp_path: Path) -> None:
    written = runbook_pages.write_runbooks(tmp_path / "runbooks", TUNED)
    assert len(written) == len(rules.ALERTS) - 1
    text = (tmp_path / "runbooks" / "LustreOSTFillHigh.md").read_text(encoding="utf-8")
    assert "more than 80% full" in text


def test_a_tuned_lookback_reaches_the_records_of_the_last_reading(tmp_path: Path) -> None:
    """The records that keep a link's last reading look back as far as its alert: a link
    down at 1m whose node is then down for 7 hours, reads up for 3 minutes and stops
    again is quiet with a lookback of 8 hours: the records keep its reading up, 7 hours
    after the last down one (records that looked back 6 hours, the default, would not)."""
    tuned = MonitoringConfig(thresholds={"slingshot_link_lookback_seconds": 8 * 3600})
    recording = yaml.safe_load(rules.render_recording_rules(monitoring=tuned))
    records = {r["record"]: r["expr"] for g in recording["groups"] for r in g["rules"]}
    assert records[slingshot.LINK_DOWN.good_record].endswith("[8h])")
    assert "[8h]" in rules.alert("SlingshotLinkDown", monitoring=tuned).expr
    for name, document in (
        ("recording.rules.yml", recording),
        ("alerts.rules.yml", yaml.safe_load(rules.render_alerting_rules(monitoring=tuned))),
    ):
        prefixes = ("gotthard-slingshot.", "gotthard-slurm.")
        groups = [g for g in document["groups"] if g["name"].startswith(prefixes)]
        (tmp_path / name).write_text(yaml.safe_dump({"groups": groups}))
    labels = {"site": "s", "cluster": "c", "instance": "nid001:9877", "device": "cxi0"}
    series = "gotthard_slingshot_link_up{" + ", ".join(f'{k}="{v}"' for k, v in labels.items())
    down = {
        "exp_labels": {**labels, "node": "nid001", "severity": "warning"},
        "exp_annotations": {
            "summary": "A Slingshot NIC link is down.",
            "description": "The link of cxi0 on nid001:9877 in s/c has been down for 5 minutes.",
            "runbook_url": f"{rules.DEFAULT_RUNBOOK_BASE_URL}/SlingshotLinkDown.md",
            "dashboard_url": f"{rules.DEFAULT_DASHBOARD_BASE_URL}/d/"
            "gotthard-slingshot-network-health?var-site=s&var-cluster=c",
            "repair_query": rules.alert("SlingshotLinkDown").repair_query,
        },
    }
    checks = [("6h", [down]), ("7h30m", [])]
    test = {
        "rule_files": ["recording.rules.yml", "alerts.rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                # down 1m-3m, no series 4m-7h, up 7h-7h2m, no series after
                "input_series": [{"series": series + "}", "values": "1 0x2 stale _x415 1x2 stale"}],
                "alert_rule_test": [
                    {"eval_time": at, "alertname": "SlingshotLinkDown", "exp_alerts": alerts}
                    for at, alerts in checks
                ],
            }
        ],
    }
    path = tmp_path / "tuned.test.yml"
    path.write_text(yaml.safe_dump(test))
    result = run([binary("promtool"), "test", "rules", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr
