"""Recording/alerting rules, the Alertmanager configuration and the runbook pages.

* ``promtool check rules`` and ``promtool test rules`` (tests/dashboards/rules_tests/) on
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

import argparse
import json
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from gotthard.dashboards import alertmanager, rules, rules_cli
from gotthard.sandbox import SandboxError, find_binary, free_ports

REPO = Path(__file__).resolve().parents[2]
UNIT_TESTS = Path(__file__).resolve().parent / "rules_tests"
RUNBOOKS = REPO / "docs" / "runbooks"
ALERTS_DOC = REPO / "docs" / "alerts.md"
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
    "site_cluster_partition:slurm_nodes_unavailable:ratio",
    "site_cluster_partition:slurm_partition_cpus_alloc:ratio",
    "site_cluster_partition:slurm_partition_gpus_alloc:ratio",
    "site_cluster:slurm_node_cpus_alloc:ratio",
    "site_cluster_partition:slurm_jobs_pending_resources:sum",
    "site_cluster_job_id:gpu_utilization_ratio:avg",
    "site_cluster:gpu_utilization_ratio:avg",
    "site_cluster_instance_device_type:slingshot_fec_codewords:ratio_rate5m",
    "site_cluster_instance_device_type:slingshot_fec_ber:ratio_rate5m",
    "site_cluster_fs_target:lustre_ost_fill:ratio",
    "site_cluster_fs:lustre_ost_fill:spread",
    "site_cluster_fs_target_operation:lustre_mdt_operations:rate5m",
    "site_cluster_fs_target:lustre_mdt_operation_latency_seconds:mean5m",
)


def _binary(name: str) -> str:
    try:
        return find_binary(name)
    except SandboxError as err:
        pytest.fail(str(err), pytrace=False)


def _run(argv: list[str], timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gotthard")
    parser.add_argument("--config")
    rules_cli.add_cli(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return int(args.func(args))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``gotthard rules build --out DIR`` with the default URLs."""
    out = tmp_path_factory.mktemp("rules")
    assert _cli(["rules", "build", "--out", str(out)]) == 0
    return out


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _unit_test_documents() -> dict[str, Any]:
    return {path.name: _load(path) for path in sorted(UNIT_TESTS.glob("*.test.yml"))}


# --- generation --------------------------------------------------------------------------


def test_build_writes_three_files_with_deterministic_bytes(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    assert _cli(["rules", "build", "--out", str(first)]) == 0
    assert _cli(["rules", "build", "--out", str(second)]) == 0
    names = sorted(p.name for p in first.iterdir())
    assert names == ["alertmanager.yml", "alerts.rules.yml", "recording.rules.yml"]
    for name in names:
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
    ]
    assert _cli(argv) == 0
    alerts = _load(tmp_path / "alerts.rules.yml")
    first = alerts["groups"][0]["rules"][0]
    assert first["annotations"]["runbook_url"] == (
        f"https://git.example/ops/gotthard/-/blob/main/docs/runbooks/{first['alert']}.md"
    )
    assert first["annotations"]["dashboard_url"].startswith(
        "https://grafana.zurich.example/d/gotthard-"
    )
    config = _load(tmp_path / "alertmanager.yml")
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


def test_build_rejects_a_malformed_pager_url(tmp_path: Path, capsys: Any) -> None:
    assert _cli(["rules", "build", "--out", str(tmp_path), "--pager-url", "zurich"]) == 2
    assert "SITE=URL" in capsys.readouterr().err


def test_pager_routes_follow_the_sites_of_the_site_configuration(tmp_path: Path) -> None:
    site_file = tmp_path / "site.toml"
    site_file.write_text(
        'site = "bern"\n[sites.bern]\nclusters = ["eiger"]\n[sites.basel]\nclusters = ["rhine"]\n'
    )
    out = tmp_path / "out"
    assert _cli(["--config", str(site_file), "rules", "build", "--out", str(out)]) == 0
    names = [r["name"] for r in _load(out / "alertmanager.yml")["receivers"]]
    assert "pager-bern" in names and "pager-basel" in names
    assert "pager-zurich" not in names


# --- promtool ----------------------------------------------------------------------------


def test_promtool_check_rules(built: Path) -> None:
    promtool = _binary("promtool")
    result = _run(
        [
            promtool,
            "check",
            "rules",
            "--lint=all",
            "--lint-fatal",
            str(built / "recording.rules.yml"),
            str(built / "alerts.rules.yml"),
        ]
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules.RECORDING_RULES)} rules found" in result.stdout
    assert f"SUCCESS: {len(rules.ALERTS)} rules found" in result.stdout


@pytest.mark.parametrize("name", sorted(p.name for p in UNIT_TESTS.glob("*.test.yml")))
def test_promtool_unit_tests(built: Path, name: str, tmp_path: Path) -> None:
    promtool = _binary("promtool")
    for rule_file in ("recording.rules.yml", "alerts.rules.yml"):
        shutil.copy(built / rule_file, tmp_path / rule_file)
    shutil.copy(UNIT_TESTS / name, tmp_path / name)
    result = _run([promtool, "test", "rules", str(tmp_path / name)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


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
                    # annotations are compared exactly: all four must be spelled out
                    assert set(alert["exp_annotations"]) == {
                        "summary",
                        "description",
                        "runbook_url",
                        "dashboard_url",
                    }, f"{name}: {alertname}"
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


def test_every_alert_carries_severity_summary_description_and_urls(built: Path) -> None:
    uids = set(rules.DASHBOARD_UIDS.values())
    prefixes = ("Gotthard", "Slurm", "GPU", "Slingshot", "Lustre", "DR", "Security")
    seen = []
    for group in _load(built / "alerts.rules.yml")["groups"]:
        assert group["name"].startswith("gotthard-") and group["name"].endswith(".alerts")
        for rule in group["rules"]:
            name = rule["alert"]
            seen.append(name)
            assert re.fullmatch(r"[A-Z][A-Za-z0-9]+", name) and name.startswith(prefixes), name
            assert rule["labels"]["severity"] in rules.SEVERITIES, name
            notes = rule["annotations"]
            assert set(notes) == {"summary", "description", "runbook_url", "dashboard_url"}
            assert notes["summary"] and "{{" not in notes["summary"], name
            assert "{{ $labels." in notes["description"], name
            assert notes["runbook_url"] == f"{rules.DEFAULT_RUNBOOK_BASE_URL}/{name}.md"
            match = re.fullmatch(
                re.escape(rules.DEFAULT_DASHBOARD_BASE_URL)
                + r"/d/([a-z0-9-]+)\?var-site=\{\{ \$labels\.site \}\}"
                r"&var-cluster=\{\{ \$labels\.cluster \}\}",
                notes["dashboard_url"],
            )
            assert match and match.group(1) in uids, notes["dashboard_url"]
    assert seen == rules.alert_names()
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
    for group in _load(built / "alerts.rules.yml")["groups"]:
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


def test_alerts_doc_index_matches_the_rules() -> None:
    text = ALERTS_DOC.read_text(encoding="utf-8")
    assert rules.alerts_markdown_table() in text, (
        "docs/alerts.md index is out of date; paste rules.alerts_markdown_table()"
    )
    assert rules.recording_rules_markdown_table() in text, (
        "docs/alerts.md recording rules are out of date; "
        "paste rules.recording_rules_markdown_table()"
    )


# --- amtool ------------------------------------------------------------------------------


def test_amtool_check_config(built: Path) -> None:
    result = _run([_binary("amtool"), "check-config", str(built / "alertmanager.yml")])
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
    ],
)
def test_amtool_routes(built: Path, labels: list[str], receivers: str) -> None:
    result = _run(
        [
            _binary("amtool"),
            "config",
            "routes",
            "test",
            f"--config.file={built / 'alertmanager.yml'}",
            f"--verify.receivers={receivers}",
            "alertname=X",
            *labels,
        ]
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == receivers


def test_alertmanager_groups_by_alertname_site_cluster(built: Path) -> None:
    route = _load(built / "alertmanager.yml")["route"]
    assert route["group_by"] == ["alertname", "site", "cluster"]
    webhook_route = route["routes"][0]
    assert webhook_route["receiver"] == "runbook-webhook" and webhook_route["continue"] is True


# --- end to end --------------------------------------------------------------------------


class SyntheticExposition:
    """A test-controlled /metrics endpoint (synthetic data, not the Gotthard exporter)."""

    def __init__(self) -> None:
        self.text = ""
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = owner.text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


class WebhookReceiver:
    """Records every Alertmanager notification: (path, Authorization header, payload)."""

    def __init__(self) -> None:
        self.received: list[tuple[str, str, dict[str, Any]]] = []
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                payload = json.loads(self.rfile.read(length) or b"{}")
                with owner.lock:
                    owner.received.append(
                        (self.path, self.headers.get("Authorization", ""), payload)
                    )
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def alerts(self, path: str, alertname: str, status: str) -> list[tuple[str, dict[str, Any]]]:
        """(Authorization, alert) of each ``alertname`` alert with ``status`` sent to path."""
        with self.lock:
            found = []
            for got_path, auth, payload in self.received:
                if got_path != path:
                    continue
                for alert in payload.get("alerts", []):
                    if alert["labels"].get("alertname") == alertname and alert["status"] == status:
                        found.append((auth, alert))
            return found


def _wait(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}", pytrace=False)


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=2) as response:
        return json.loads(response.read())


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short /tmp directory (socket paths and TSDB locks stay short)."""
    path = Path(tempfile.mkdtemp(prefix="gtr-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _exposition(slurm_up: int) -> str:
    return (
        "# Synthetic exposition written by tests/dashboards/test_rules.py.\n"
        "# TYPE gotthard_collector_up gauge\n"
        'gotthard_collector_up{collector="slurm"} 1\n'
        "# TYPE slurm_up gauge\n"
        f"slurm_up {slurm_up}\n"
        "# TYPE slurm_nodes gauge\n"
        'slurm_nodes{partition="normal",state="down"} 5\n'
        'slurm_nodes{partition="normal",state="idle"} 5\n'
    )


def test_end_to_end_alert_reaches_the_webhook_and_resolves(short_tmp: Path) -> None:
    prometheus_bin, am_bin, promtool = (
        _binary("prometheus"),
        _binary("prometheus-alertmanager"),
        _binary("promtool"),
    )
    started = time.monotonic()
    exporter, hooks = SyntheticExposition(), WebhookReceiver()
    exporter.text = _exposition(slurm_up=0)
    prom_port, am_port = free_ports(2)
    token = "e2e-token-0123456789"
    (short_tmp / "token").write_text(token + "\n")
    hook = f"http://127.0.0.1:{hooks.port}"
    out = short_tmp / "rules"
    assert (
        _cli(
            [
                "rules",
                "build",
                "--out",
                str(out),
                "--webhook-url",
                f"{hook}/alerts",
                "--webhook-token-file",
                str(short_tmp / "token"),
                "--pager-url",
                f"zurich={hook}/pager/zurich",
                "--pager-url",
                f"lugano={hook}/pager/lugano",
                "--pager-fallback-url",
                f"{hook}/pager/default",
                "--ticket-url",
                f"{hook}/ticket",
            ]
        )
        == 0
    )
    # Test-speed patches: 1 s Alertmanager grouping, and `for: 0s` on the two alerts used.
    config = _load(out / "alertmanager.yml")
    config["route"].update(group_wait="1s", group_interval="1s", repeat_interval="1h")
    (out / "alertmanager.yml").write_text(rules.dump_yaml(config))
    alerts_doc = _load(out / "alerts.rules.yml")
    for group in alerts_doc["groups"]:
        for rule in group["rules"]:
            if rule["alert"] in ("SlurmControllerDown", "SlurmNodesUnavailable"):
                rule["for"] = "0s"
    (out / "alerts.rules.yml").write_text(rules.dump_yaml(alerts_doc))
    prometheus_yml = short_tmp / "prometheus.yml"
    prometheus_yml.write_text(
        rules.dump_yaml(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(out / "recording.rules.yml"), str(out / "alerts.rules.yml")],
                "alerting": {
                    "alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]
                },
                "scrape_configs": [
                    {
                        "job_name": "gotthard",
                        "static_configs": [
                            {
                                "targets": [f"127.0.0.1:{exporter.port}"],
                                "labels": {"site": "zurich", "cluster": "alps"},
                            }
                        ],
                    }
                ],
            }
        )
    )
    check = _run([promtool, "check", "config", str(prometheus_yml)])
    assert check.returncode == 0, check.stdout + check.stderr

    logs = {name: (short_tmp / f"{name}.log").open("w") for name in ("am", "prom")}
    procs = [
        subprocess.Popen(
            [
                am_bin,
                f"--config.file={out / 'alertmanager.yml'}",
                f"--storage.path={short_tmp / 'am'}",
                f"--web.listen-address=127.0.0.1:{am_port}",
                "--cluster.listen-address=",
            ],
            stdout=logs["am"],
            stderr=subprocess.STDOUT,
        ),
        subprocess.Popen(
            [
                prometheus_bin,
                f"--config.file={prometheus_yml}",
                f"--storage.tsdb.path={short_tmp / 'prom'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
                "--web.enable-lifecycle",
                "--rules.alert.resend-delay=1s",
            ],
            stdout=logs["prom"],
            stderr=subprocess.STDOUT,
        ),
    ]
    try:
        _wait(lambda: _ready(f"http://127.0.0.1:{am_port}/-/ready"), 15, "Alertmanager ready")
        _wait(lambda: _ready(f"http://127.0.0.1:{prom_port}/-/ready"), 15, "Prometheus ready")

        # Critical at zurich: the runbook webhook (with the bearer token) and zurich's pager.
        fired = _wait(
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
        _wait(
            lambda: hooks.alerts("/pager/zurich", "SlurmControllerDown", "firing"),
            5,
            "SlurmControllerDown at zurich's pager",
        )

        # SlurmNodesUnavailable (50% down) fires too, but the controller outage inhibits it.
        def inhibited() -> bool:
            active = _get_json(f"http://127.0.0.1:{am_port}/api/v2/alerts")
            return any(
                a["labels"]["alertname"] == "SlurmNodesUnavailable" and a["status"]["inhibitedBy"]
                for a in active
            )

        _wait(inhibited, 10, "SlurmNodesUnavailable inhibited in Alertmanager")
        time.sleep(1.5)  # a group_wait + group_interval: nothing may have been sent for it
        for path in ("/alerts", "/ticket"):
            assert not hooks.alerts(path, "SlurmNodesUnavailable", "firing"), path
        assert not hooks.alerts("/pager/lugano", "SlurmControllerDown", "firing")

        # The controller answers again: resolved at the webhook; the inhibition lifts.
        exporter.text = _exposition(slurm_up=1)
        resolved = _wait(
            lambda: hooks.alerts("/alerts", "SlurmControllerDown", "resolved"),
            15,
            "SlurmControllerDown resolved at the runbook webhook",
        )
        assert resolved[0][1]["endsAt"] != "0001-01-01T00:00:00Z"
        _wait(
            lambda: hooks.alerts("/ticket", "SlurmNodesUnavailable", "firing"),
            10,
            "SlurmNodesUnavailable at the ticket receiver once no longer inhibited",
        )
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for log in logs.values():
            log.close()
        exporter.server.shutdown()
        hooks.server.shutdown()
    assert time.monotonic() - started < 60
