"""Recording/alerting rules, the Alertmanager configuration and the runbook pages.

* ``promtool check rules`` and ``promtool test rules`` (tests/monitoring/rules_tests/) on
  the generated rule files; every alert has a firing and a non-firing unit test with its
  annotations checked exactly.
* ``amtool check-config`` and ``amtool config routes test`` on the generated
  Alertmanager configuration.
* Every alert's ``runbook_url`` names a page in docs/runbooks/ with the required sections.
* End to end: a real Prometheus and a real Alertmanager, 1 s intervals, scraping a
  synthetic exposition that the test controls; an alert reaches a webhook with its
  ``runbook_url`` and ``severity``, is inhibited where it should be, and resolves.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from gotthard import areas
from gotthard.monitoring import alertmanager, rules
from tests.monitoring import promtool
from tests.support.cli import run, run_in_process
from tests.support.monitoring import (
    Processes,
    QuietHandler,
    WebhookReceiver,
    binary,
    build_fast_rules,
    get_json,
    load_yaml,
    serve_http,
    start_alerting,
)
from tests.support.wait import wait_until

REPO = Path(__file__).resolve().parents[2]
UNIT_TESTS = Path(__file__).resolve().parent / "rules_tests"
RUNBOOKS = REPO / "docs" / "runbooks"
RUNBOOK_SECTIONS = (
    "## Meaning",
    "## Impact",
    "## Diagnosis",
    "## Mitigation",
    "## Escalation",
    "## Resolution check",
)
#: Recording rules that must have a promql_expr_test of their own.
KEY_RECORDING_RULES = (
    "site_cluster_partition:gotthard_slurm_nodes_unavailable:ratio",
    "site_cluster_partition:gotthard_slurm_partition_cpus_alloc:ratio",
    "site_cluster_partition:gotthard_slurm_partition_gpus_alloc:ratio",
    "site_cluster:gotthard_slurm_node_cpus_alloc:ratio",
    "site_cluster_partition:gotthard_slurm_jobs_pending_resources:sum",
    "site_cluster_job_id:gotthard_gpu_utilization_ratio:avg",
    "site_cluster_job_id:gotthard_gpu_tensor_active_ratio:avg",
    "site_cluster_job_id:gotthard_gpu_memory_used_bytes:sum",
    "site_cluster_job_id_user_account_partition:gotthard_slurm_job_info:gpu_jobs",
    "site_cluster:gotthard_gpu_utilization_ratio:avg",
    # the sparse records of the alerts that keep a last reading (LastReading)
    "site_cluster_instance_gpu_uuid:gotthard_gpu_lost:lost_timestamp",
    "site_cluster_instance_gpu_uuid:gotthard_gpu_lost:not_lost_timestamp",
    "site_cluster_instance_gpu_uuid_state:gotthard_gpu_remapped_rows:failure_timestamp",
    "site_cluster_instance_gpu_uuid_state:gotthard_gpu_remapped_rows:no_failure_timestamp",
    "site_cluster_instance_device:gotthard_slingshot_link_up:down_timestamp",
    "site_cluster_instance_device:gotthard_slingshot_link_up:up_timestamp",
    "site_cluster_instance_device_type:gotthard_slingshot_fec_codewords:ratio_rate5m",
    "site_cluster_instance_device_type:gotthard_slingshot_fec_ber:ratio_rate5m",
    "site_cluster_fs_target:gotthard_lustre_ost_fill:ratio",
    "site_cluster_fs_job_id:gotthard_lustre_job_read_bytes:top10_rate5m",
    "site_cluster_fs:gotthard_lustre_ost_fill:spread",
    "site_cluster_fs_target_operation:gotthard_lustre_mdt_operations:rate5m",
    "site_cluster_fs_target:gotthard_lustre_mdt_operation_latency_seconds:mean5m",
    # what the Job dashboard reads, and the global view's per-cluster Slingshot rates
    "site_cluster_fs_job_id:gotthard_lustre_job_read_bytes:rate5m",
    "site_cluster_fs_job_id:gotthard_lustre_job_write_bytes:rate5m",
    "site_cluster_fs_job_id:gotthard_lustre_job_mdt_operations:rate5m",
    "site_cluster_type:gotthard_slingshot_fec_codewords:rate5m",
    "site_cluster_type:gotthard_slingshot_timeouts:rate5m",
    # the Slingshot dashboard's per-cluster and busiest-NIC rates, the Job dashboard's traffic
    "site_cluster_direction_class:gotthard_slingshot_pause_frames:rate5m",
    "site_cluster_instance_device:gotthard_slingshot_pause_frames:rate5m",
    "site_cluster_instance_device_direction:gotthard_slingshot_bytes:rate5m",
    "site_cluster_direction:gotthard_slingshot_bytes:rate5m",
)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``gotthard rules build --out DIR`` with the default URLs."""
    out = tmp_path_factory.mktemp("rules")
    assert run_in_process("rules", "build", "--out", str(out)) == 0
    return out


def _unit_test_documents() -> dict[str, Any]:
    return {path.name: load_yaml(path) for path in sorted(UNIT_TESTS.glob("*.test.yml"))}


# --- generation --------------------------------------------------------------------------


def test_build_writes_four_files_with_deterministic_bytes(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    assert run_in_process("rules", "build", "--out", str(first)) == 0
    assert run_in_process("rules", "build", "--out", str(second)) == 0
    names = sorted(p.name for p in first.iterdir())
    assert names == [
        "alertmanager.yml",
        "alerts.rules.yml",
        "global-alerts.rules.yml",
        "recording.rules.yml",
        "runbooks",
    ]
    pages = sorted(p.name for p in (first / "runbooks").iterdir())
    assert len(pages) == len(rules.alert_names())
    for name in [*names[:4], *(f"runbooks/{page}" for page in pages)]:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_build_options_reach_the_files(tmp_path: Path) -> None:
    argv = [
        "rules",
        "build",
        "--out",
        str(tmp_path),
        "--runbook-base-url",
        "https://git.example/ops/gotthard/-/blob/main/docs/runbooks/",
        "--dashboard-base-url",
        "https://grafana.zurich.example",
        "--webhook-url",
        "http://runbooks.example:9878/alerts",
        "--webhook-token-file",
        "/run/secrets/token",
        "--pager-url",
        "zurich=https://pager.example/zh",
        "--pager-url",
        "geneva=https://pager.example/ge",
        "--ticket-url",
        "https://tickets.example/hook",
        "--deadman-url",
        "https://hc-ping.example/uuid",
    ]
    assert run_in_process(*argv) == 0
    alerts = load_yaml(tmp_path / "alerts.rules.yml")
    first = alerts["groups"][0]["rules"][0]
    assert first["annotations"]["runbook_url"] == (
        f"https://git.example/ops/gotthard/-/blob/main/docs/runbooks/{first['alert']}.md"
    )
    assert first["annotations"]["dashboard_url"].startswith(
        "https://grafana.zurich.example/d/gotthard-"
    )
    config = load_yaml(tmp_path / "alertmanager.yml")
    receivers = {r["name"]: r.get("webhook_configs", []) for r in config["receivers"]}
    hook = receivers["runbook-webhook"][0]
    assert hook["url"] == "http://runbooks.example:9878/alerts"
    assert hook["send_resolved"] is True
    assert hook["http_config"]["authorization"] == {
        "type": "Bearer",
        "credentials_file": "/run/secrets/token",
    }
    assert receivers["pager-zurich"][0]["url"] == "https://pager.example/zh"
    assert receivers["pager-geneva"][0]["url"] == "https://pager.example/ge"
    assert receivers["pager-lugano"][0]["url"] == "http://pager.invalid/lugano"
    assert receivers["ticket"][0]["url"] == "https://tickets.example/hook"
    assert receivers["null"] == []
    # the dead man's switch is pinged, never told that the Watchdog resolved
    assert receivers["deadman"] == [{"url": "https://hc-ping.example/uuid", "send_resolved": False}]


def test_build_rejects_a_malformed_pager_url(tmp_path: Path, capsys: Any) -> None:
    assert run_in_process("rules", "build", "--out", str(tmp_path), "--pager-url", "zurich") == 2
    assert "SITE=URL" in capsys.readouterr().err


def test_pager_routes_follow_the_sites_of_the_site_configuration(tmp_path: Path) -> None:
    site_file = tmp_path / "site.toml"
    site_file.write_text(
        'site = "bern"\ncluster = "eiger"\n[sites.bern.clusters.eiger]\n'
        "[sites.basel.clusters.rhine]\n"
    )
    out = tmp_path / "out"
    assert run_in_process("--config", str(site_file), "rules", "build", "--out", str(out)) == 0
    names = [r["name"] for r in load_yaml(out / "alertmanager.yml")["receivers"]]
    assert "pager-bern" in names and "pager-basel" in names
    assert "pager-zurich" not in names


# --- promtool ----------------------------------------------------------------------------


def test_promtool_check_rules(built: Path) -> None:
    files = (*promtool.RULE_FILES, promtool.GLOBAL_FILE)
    result = promtool.check_rules(*(built / name for name in files))
    placed = [rule.placement for rule in rules.ALERTS]
    assert f"SUCCESS: {len(rules.RECORDING_RULES)} rules found" in result.stdout
    assert f"SUCCESS: {placed.count('site')} rules found" in result.stdout
    assert f"SUCCESS: {placed.count('global')} rules found" in result.stdout


def test_each_alert_is_in_the_rule_file_of_its_placement(built: Path) -> None:
    """A site Prometheus loads alerts.rules.yml and never a global group; the global
    evaluator loads global-alerts.rules.yml, whose groups are named ``.global-alerts``."""
    placed = {"site": promtool.ALERTS_FILE, "global": promtool.GLOBAL_FILE}
    for placement, file in placed.items():
        groups = load_yaml(built / file)["groups"]
        names = [rule["alert"] for group in groups for rule in group["rules"]]
        assert names == [r.name for r in rules.ALERTS if r.placement == placement], file
        suffix = ".alerts" if placement == "site" else ".global-alerts"
        assert all(group["name"].endswith(suffix) for group in groups), file
    assert "DRLeaderAtBothSites" in [r.name for r in rules.ALERTS if r.placement == "global"]


@pytest.mark.parametrize("name", sorted(p.name for p in UNIT_TESTS.glob("*.test.yml")))
def test_promtool_unit_tests(built: Path, name: str, tmp_path: Path) -> None:
    promtool.unit_test(built, UNIT_TESTS / name, tmp_path)


def test_every_alert_has_a_firing_and_a_quiet_unit_test() -> None:
    firing: dict[str, int] = {}
    quiet: dict[str, int] = {}
    for name, document in _unit_test_documents().items():
        assert document["rule_files"] == ["recording.rules.yml", "alerts.rules.yml"], name
        for case in document["tests"]:
            for check in case.get("alert_rule_test", []):
                alertname = check["alertname"]
                assert alertname in rules.alert_names(), f"{name}: unknown alert {alertname}"
                expected = check.get("exp_alerts") or []
                bucket = firing if expected else quiet
                bucket[alertname] = bucket.get(alertname, 0) + 1
                for alert in expected:
                    # annotations are compared exactly: all of them must be spelled out
                    assert set(alert["exp_annotations"]) == set(
                        rules.alert(alertname).annotations()
                    ), f"{name}: {alertname}"
                    assert alert["exp_labels"]["severity"] == rules.alert(alertname).severity
    missing_firing = [a for a in rules.alert_names() if a not in firing]
    missing_quiet = [a for a in rules.alert_names() if a not in quiet]
    assert not missing_firing, f"alerts without a firing unit test: {missing_firing}"
    assert not missing_quiet, f"alerts without a non-firing unit test: {missing_quiet}"


def test_key_recording_rules_have_expression_tests() -> None:
    tested: set[str] = set()
    for document in _unit_test_documents().values():
        for case in document["tests"]:
            for check in case.get("promql_expr_test", []):
                tested.update(re.findall(r"[a-z_]+:[a-z0-9_]+:[a-z0-9_]+", check["expr"]))
    records = {rule.record for rule in rules.RECORDING_RULES}
    for record in KEY_RECORDING_RULES:
        assert record in records, record
        assert record in tested, f"no promql_expr_test for {record}"


# --- conventions -------------------------------------------------------------------------


def test_recording_rule_names_follow_level_metric_operations() -> None:
    pattern = re.compile(r"^site_cluster(_[a-z_]+)?:[a-z][a-z0-9_]*:[a-z0-9_]+$")
    names = [rule.record for rule in rules.RECORDING_RULES]
    assert len(names) == len(set(names))
    for name in names:
        assert pattern.match(name), name
        assert not name.split(":")[1].endswith("_total"), name


def test_slow_records_are_in_a_slow_group_at_the_configured_interval(tmp_path: Path) -> None:
    """The slow records (per-job Lustre IO, per-job GPU tensor activity and memory, the
    Slingshot dashboard's per-cluster and busiest-NIC rates) are evaluated in their
    component's slow group, every ``[monitoring] slow_rule_interval`` (2 minutes unless
    set), the others at every evaluation interval."""
    slow = {rule.record: rule.component for rule in rules.RECORDING_RULES if rule.cadence == "slow"}
    assert slow["site_cluster_fs_job_id:gotthard_lustre_job_read_bytes:rate5m"] == "lustre"
    assert slow["site_cluster_job_id:gotthard_gpu_memory_used_bytes:sum"] == "gpu"
    assert (
        slow["site_cluster_direction_class:gotthard_slingshot_pause_frames:rate5m"] == "slingshot"
    )
    site = tmp_path / "site.toml"
    site.write_text('[monitoring]\nslow_rule_interval = "5m"\n')
    for argv, interval in (((), "2m"), (("--config", str(site)), "5m")):
        out = tmp_path / interval
        assert run_in_process(*argv, "rules", "build", "--out", str(out)) == 0
        groups = load_yaml(out / promtool.RECORDING_FILE)["groups"]
        placed = {
            rule["record"]: (group["name"], group.get("interval"))
            for group in groups
            for rule in group["rules"]
        }
        for record, (group, every) in placed.items():
            if record in slow:
                expected = (f"gotthard-{slow[record]}.slow-recording", interval)
                assert (group, every) == expected, record
            else:
                assert every is None and ".slow-" not in group, record
    promtool.check_rules(tmp_path / "5m" / promtool.RECORDING_FILE)


def test_a_malformed_slow_rule_interval_is_a_usage_error_naming_the_key(
    tmp_path: Path, capsys: Any
) -> None:
    site = tmp_path / "site.toml"
    site.write_text('[monitoring]\nslow_rule_interval = "2 minutes"\n')
    assert run_in_process("--config", str(site), "rules", "build", "--out", str(tmp_path)) == 2
    assert "slow_rule_interval" in capsys.readouterr().err


def test_no_alert_or_evaluation_record_reads_a_slow_record() -> None:
    """A slow record lags by up to its interval: alerts, and the records they read, use
    what is evaluated every time."""
    slow = [rule.record for rule in rules.RECORDING_RULES if rule.cadence == "slow"]
    readers = [
        *(rule.expr for rule in rules.RECORDING_RULES if rule.cadence == "evaluation"),
        *(rule.expr for rule in rules.ALERTS),
    ]
    assert slow
    assert [record for record in slow if any(record in expr for expr in readers)] == []


def _alert_groups(built: Path) -> list[dict[str, Any]]:
    """The alerting groups of the site Prometheus and of the global evaluator."""
    files = (promtool.ALERTS_FILE, promtool.GLOBAL_FILE)
    return [group for name in files for group in load_yaml(built / name)["groups"]]


def test_every_alert_carries_severity_summary_description_and_urls(built: Path) -> None:
    uids = set(rules.DASHBOARD_UIDS.values())
    seen = []
    for group in _alert_groups(built):
        assert group["name"].startswith("gotthard-")
        assert group["name"].endswith((".alerts", ".global-alerts"))
        for rule in group["rules"]:
            name = rule["alert"]
            seen.append(name)
            definition = rules.alert(name)
            # the prefix its area declares in the registry
            prefix = areas.area(definition.component).alert_prefix
            assert re.fullmatch(r"[A-Z][A-Za-z0-9]+", name) and name.startswith(prefix), name
            assert rule["labels"]["severity"] in rules.SEVERITIES, name
            notes = rule["annotations"]
            expected_notes = {"summary", "description", "runbook_url", "dashboard_url"}
            if definition.repair_query:
                expected_notes.add("repair_query")
                assert notes["repair_query"] == definition.repair_query, name
            assert set(notes) == expected_notes, name
            assert notes["summary"] and "{{" not in notes["summary"], name
            # an alert about a labelled thing names it
            assert "{{ $labels." in notes["description"] or not definition.url_labels, name
            assert notes["runbook_url"] == f"{rules.DEFAULT_RUNBOOK_BASE_URL}/{name}.md"
            variables = "&".join(
                f"var-{label}={{{{ $labels.{label} }}}}" for label in definition.url_labels
            )
            match = re.fullmatch(
                re.escape(rules.DEFAULT_DASHBOARD_BASE_URL)
                + r"/d/([a-z0-9-]+)"
                + (re.escape(f"?{variables}") if variables else ""),
                notes["dashboard_url"],
            )
            assert match and match.group(1) in uids, notes["dashboard_url"]
            # every component but DR (whose metrics have no cluster) links site and cluster;
            # an alert about one GPU its node too (the GPU fleet has no "All" nodes)
            if definition.component != "dr":
                assert definition.url_labels[:2] == ("site", "cluster"), name
                assert definition.url_labels[2:] in ((), ("instance",)), name
                if definition.component == "gpu" and name != "GPUMissingFromNode":
                    assert definition.url_labels[2:] == ("instance",), name
    assert sorted(seen) == sorted(rules.alert_names()) and len(seen) == len(set(seen))
    assert len(seen) == len(set(seen))


def test_issue_minimum_alerts_are_present() -> None:
    required = {
        "SlurmControllerDown",
        "SlurmNodesUnavailable",
        "SlurmPendingResourcesBacklog",
        "SlurmSchedulerCycleSlow",
        "GPULost",
        "GPUFatalXid",
        "GPUUncorrectableECCErrors",
        "GPURowRemapFailure",
        "GPUThermalThrottling",
        "GPUPowerThrottling",
        "GPUIdleWhileAllocated",
        "SlingshotLinkFlapping",
        "SlingshotUncorrectedFECErrors",
        "SlingshotHighBER",
        "SlingshotRetransmissionTimeoutsHigh",
        "LustreOSTFillHigh",
        "LustreOSTFillCritical",
        "LustreOSTImbalance",
        "LustreMetadataLatencyHigh",
        "GotthardExporterDown",
        "GotthardCollectorDown",
        "DRBackupTooOld",
        "DRDrillFailed",
        "DRRTOOverTarget",
        "SecurityKubeBenchCheckFailed",
        "SecurityPolicyViolations",
    }
    assert required <= set(rules.alert_names())


def test_every_runbook_url_names_a_complete_runbook_page(built: Path) -> None:
    for group in _alert_groups(built):
        for rule in group["rules"]:
            name = rule["alert"]
            url = rule["annotations"]["runbook_url"]
            page = RUNBOOKS / url.rsplit("/", 1)[1]
            assert page.is_file(), f"{name}: {url} -> missing {page.relative_to(REPO)}"
            text = page.read_text(encoding="utf-8")
            assert text.startswith(f"# {name}\n"), page
            for section in RUNBOOK_SECTIONS:
                assert re.search(rf"^{re.escape(section)}\s*$", text, re.M), f"{page}: {section}"
            assert "Automated steps:" in text, page
            definition = rules.alert(name)
            assert f"| Severity | `{definition.severity}`" in text, f"{page}: severity"
            assert f"| For | {definition.for_} |" in text, f"{page}: for"
            assert f"```promql\n{definition.promql}\n```" in text, f"{page}: expression"
    pages = {p.stem for p in RUNBOOKS.glob("*.md")}
    assert pages == set(rules.alert_names()), "runbook pages without an alert"


def test_runbook_pages_name_receivers_that_exist(built: Path) -> None:
    """A page that says who is paged names the generated receiver that does it."""
    receivers = {r["name"] for r in load_yaml(built / "alertmanager.yml")["receivers"]}
    for page in sorted(RUNBOOKS.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        escalation = text.split("## Escalation", 1)[1].split("\n## ", 1)[0]
        named = re.findall(r"receiver `([^`]+)`", escalation)
        for name in named:
            sites = ("zurich", "lugano") if "SITE" in name else ("",)
            for site in sites:
                assert name.replace("SITE", site) in receivers, f"{page.name}: {name}"
        if rules.alert(page.stem).severity == "critical":
            assert "receiver `pager-SITE`" in escalation, f"{page.name}: who is paged"
        assert not re.search(r"pages the (?!site's on-call)", escalation), page.name


# --- amtool ------------------------------------------------------------------------------


def test_amtool_check_config(built: Path) -> None:
    result = run([binary("amtool"), "check-config", str(built / "alertmanager.yml")])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
    assert f"{len(alertmanager.INHIBITIONS)} inhibit rules" in result.stdout


@pytest.mark.parametrize(
    ("labels", "receivers"),
    [
        (["severity=critical", "site=zurich"], "runbook-webhook,pager-zurich"),
        (["severity=critical", "site=lugano"], "runbook-webhook,pager-lugano"),
        (["severity=critical", "site=elsewhere"], "runbook-webhook,pager-default"),
        (["severity=warning", "site=zurich"], "runbook-webhook,ticket"),
        (["severity=warning", "site=lugano"], "runbook-webhook,ticket"),
        (["severity=info", "site=zurich"], "null"),
        (["alertname=NoSeverity", "site=zurich"], "ticket"),
        # the dead man's switch only: never the webhook, a pager or a ticket
        (["alertname=GotthardWatchdog", "severity=info", "site=zurich"], "deadman"),
        (["alertname=GotthardWatchdog", "severity=critical", "site=lugano"], "deadman"),
        # an efficiency finding about a user's job: the users' receiver, never a page
        (["alertname=GPUIdleWhileAllocated", "severity=warning", "audience=users"], "efficiency"),
        (["severity=critical", "site=zurich", "audience=users"], "efficiency"),
    ],
)
def test_amtool_routes(built: Path, labels: list[str], receivers: str) -> None:
    result = run(
        [
            binary("amtool"),
            "config",
            "routes",
            "test",
            f"--config.file={built / 'alertmanager.yml'}",
            f"--verify.receivers={receivers}",
            *(["alertname=X"] if not any(x.startswith("alertname=") for x in labels) else []),
            *labels,
        ]
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == receivers


def test_the_watchdog_is_repeated_to_the_dead_mans_switch(built: Path) -> None:
    """Without ``--deadman-url`` the Watchdog goes to a receiver with no integrations;
    its route repeats every minute, so a dead man's switch sees it stop within minutes."""
    config = load_yaml(built / "alertmanager.yml")
    watchdog = config["route"]["routes"][0]
    assert watchdog["matchers"] == ['alertname="GotthardWatchdog"']
    assert watchdog["receiver"] == "deadman" and "continue" not in watchdog
    assert watchdog["repeat_interval"] == "1m"
    assert {"name": "deadman"} in config["receivers"]


@pytest.fixture(scope="module")
def built_per_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``gotthard alertmanager build`` with a runbook webhook per site."""
    out = tmp_path_factory.mktemp("alertmanager")
    per_site = ("--site-webhook-url", "zurich=http://zurich.invalid/alerts")
    per_site += ("--site-webhook-url", "lugano=http://lugano.invalid/alerts")
    assert run_in_process("alertmanager", "build", "--out", str(out), *per_site) == 0
    return out


@pytest.mark.parametrize(
    ("labels", "receivers"),
    [
        (["severity=critical", "site=zurich"], "runbook-webhook-zurich,pager-zurich"),
        (["severity=warning", "site=lugano"], "runbook-webhook-lugano,ticket"),
        # a site without a webhook of its own still reaches the shared one
        (["severity=critical", "site=elsewhere"], "runbook-webhook,pager-default"),
        (["severity=warning"], "runbook-webhook,ticket"),
        (["severity=info", "site=zurich"], "null"),
        (["alertname=GotthardWatchdog", "severity=info", "site=zurich"], "deadman"),
    ],
)
def test_amtool_routes_with_a_webhook_per_site(
    built_per_site: Path, labels: list[str], receivers: str
) -> None:
    config = built_per_site / "alertmanager.yml"
    check = run([binary("amtool"), "check-config", str(config)])
    assert check.returncode == 0, check.stdout + check.stderr
    result = run(
        [
            binary("amtool"),
            "config",
            "routes",
            "test",
            f"--config.file={config}",
            f"--verify.receivers={receivers}",
            *(["alertname=X"] if not any(x.startswith("alertname=") for x in labels) else []),
            *labels,
        ]
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert load_yaml(config)["receivers"][2]["webhook_configs"][0]["url"] in (
        "http://zurich.invalid/alerts",
        "http://lugano.invalid/alerts",
    )


def test_a_malformed_site_webhook_is_a_usage_error(tmp_path: Path, capsys: Any) -> None:
    argv = ("alertmanager", "build", "--out", str(tmp_path), "--site-webhook-url", "zurich")
    assert run_in_process(*argv) == 2
    assert "--site-webhook-url wants SITE=URL, got 'zurich'" in capsys.readouterr().err


def test_alertmanager_groups_by_alertname_site_cluster(built: Path) -> None:
    route = load_yaml(built / "alertmanager.yml")["route"]
    assert route["group_by"] == ["alertname", "site", "cluster"]
    # after the Watchdog's route to the dead man's switch and the users' findings' route
    # (grouped by job too, not continued)
    users = route["routes"][1]
    assert (users["receiver"], users["matchers"]) == ("efficiency", ['audience="users"'])
    assert users["group_by"] == ["alertname", "site", "cluster", "job_id"]
    assert "continue" not in users
    webhook_route = route["routes"][2]
    assert webhook_route["receiver"] == "runbook-webhook" and webhook_route["continue"] is True


# --- end to end --------------------------------------------------------------------------


class SyntheticExposition:
    """A test-controlled /metrics endpoint (synthetic data, not the Gotthard exporter)."""

    def __init__(self) -> None:
        self.text = ""
        owner = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                self.send_body(owner.text.encode())

        self.server = serve_http(Handler)
        self.port = self.server.server_address[1]


def _exposition(slurm_up: int) -> str:
    return (
        "# Synthetic exposition written by tests/monitoring/test_rules.py.\n"
        "# TYPE gotthard_collector_up gauge\n"
        'gotthard_collector_up{collector="slurm"} 1\n'
        "# TYPE gotthard_slurm_up gauge\n"
        f"gotthard_slurm_up {slurm_up}\n"
        "# TYPE gotthard_slurm_nodes gauge\n"
        'gotthard_slurm_nodes{partition="normal",state="down"} 5\n'
        'gotthard_slurm_nodes{partition="normal",state="idle"} 5\n'
    )


def test_end_to_end_alert_reaches_the_webhook_and_resolves(short_tmp: Path) -> None:
    started = time.monotonic()
    exporter, hooks = SyntheticExposition(), WebhookReceiver()
    exporter.text = _exposition(slurm_up=0)
    token = "e2e-token-0123456789"
    (short_tmp / "token").write_text(token + "\n")
    out = short_tmp / "rules"
    build_fast_rules(
        out,
        hooks.url,
        short_tmp / "token",
        pager_sites=("zurich", "lugano"),
        fast_alerts=("SlurmControllerDown", "SlurmNodesUnavailable"),
    )
    try:
        with Processes(short_tmp / "logs") as procs:
            am_url, _ = start_alerting(
                procs,
                out,
                short_tmp,
                target=f"127.0.0.1:{exporter.port}",
                labels={"site": "zurich", "cluster": "alps"},
                prometheus_flags=["--web.enable-lifecycle"],
            )
            _alert_fires_is_inhibited_and_resolves(exporter, hooks, am_url, token)
    finally:
        exporter.server.shutdown()
        hooks.close()
    assert time.monotonic() - started < 60


def _alert_fires_is_inhibited_and_resolves(
    exporter: SyntheticExposition, hooks: WebhookReceiver, am_url: str, token: str
) -> None:
    # Critical at zurich: the runbook webhook (with the bearer token) and zurich's pager.
    fired = wait_until(
        lambda: hooks.alerts("/alerts", "SlurmControllerDown", "firing"),
        25,
        "SlurmControllerDown at the runbook webhook",
    )
    auth, alert = fired[0]
    assert auth == f"Bearer {token}"
    assert alert["labels"]["severity"] == "critical"
    assert alert["labels"]["site"] == "zurich" and alert["labels"]["cluster"] == "alps"
    assert alert["annotations"]["runbook_url"] == (
        f"{rules.DEFAULT_RUNBOOK_BASE_URL}/SlurmControllerDown.md"
    )
    assert alert["annotations"]["dashboard_url"] == (
        f"{rules.DEFAULT_DASHBOARD_BASE_URL}/d/gotthard-slurm-cluster"
        "?var-site=zurich&var-cluster=alps"
    )
    wait_until(
        lambda: hooks.alerts("/pager/zurich", "SlurmControllerDown", "firing"),
        5,
        "SlurmControllerDown at zurich's pager",
    )

    # SlurmNodesUnavailable (50% down) fires too, but the controller outage inhibits it.
    def inhibited() -> bool:
        active = get_json(f"{am_url}/api/v2/alerts")
        return any(
            a["labels"]["alertname"] == "SlurmNodesUnavailable" and a["status"]["inhibitedBy"]
            for a in active
        )

    wait_until(inhibited, 10, "SlurmNodesUnavailable inhibited in Alertmanager")
    time.sleep(1.5)  # a group_wait + group_interval: nothing may have been sent for it
    for path in ("/alerts", "/ticket"):
        assert not hooks.alerts(path, "SlurmNodesUnavailable", "firing"), path
    assert not hooks.alerts("/pager/lugano", "SlurmControllerDown", "firing")

    # The controller answers again: resolved at the webhook; the inhibition lifts.
    exporter.text = _exposition(slurm_up=1)
    resolved = wait_until(
        lambda: hooks.alerts("/alerts", "SlurmControllerDown", "resolved"),
        15,
        "SlurmControllerDown resolved at the runbook webhook",
    )
    assert resolved[0][1]["endsAt"] != "0001-01-01T00:00:00Z"
    wait_until(
        lambda: hooks.alerts("/ticket", "SlurmNodesUnavailable", "firing"),
        10,
        "SlurmNodesUnavailable at the ticket receiver once no longer inhibited",
    )


def _section(text: str, heading: str) -> str:
    return text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize("name", [r.name for r in rules.ALERTS if r.severity == "critical"])
def test_a_page_that_pages_starts_with_concrete_steps(name: str) -> None:
    """Whoever a critical alert wakes gets commands to run (a shell block in Diagnosis)
    and numbered steps to take (Mitigation), not prose alone."""
    text = (RUNBOOKS / f"{name}.md").read_text(encoding="utf-8")
    diagnosis, mitigation = _section(text, "## Diagnosis"), _section(text, "## Mitigation")
    assert re.search(r"```sh\n\s*\S", diagnosis), f"{name}: no command to run in Diagnosis"
    assert re.search(r"^1\. \S", mitigation, re.M), f"{name}: no numbered steps in Mitigation"
