"""The webhook server against a fake scontrol/sinfo that records argv: HTTP errors,
hostile labels, idempotency, limits under an alert storm, kill switch, failures."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from gotthard.runbooks import registry, validate
from gotthard.sandbox import free_ports
from tests.runbooks.conftest import (
    TOKEN,
    FakeSlurm,
    RecordingKubernetes,
    RepairFeed,
    Running,
    alert_payload,
    many_alerts,
    sample_payload,
    settings_for,
    with_repair_query,
)
from tests.support.cli import ROOT, gotthard, gotthard_argv
from tests.support.monitoring import get_json, http_ok
from tests.support.threads import in_threads
from tests.support.wait import wait_until

REPO = Path(__file__).resolve().parents[2]


def _results(running: Any, action: str) -> list[str]:
    return [r["result"] for r in running.audit() if r.get("action") == action]


# --- HTTP errors ------------------------------------------------------------------------


def test_wrong_or_missing_token_is_401_and_audited(tmp_path, fake_slurm, start_server) -> None:
    running = start_server(settings_for(tmp_path, fake_slurm, mode="enforce"))
    payload = alert_payload(node="nid001")
    for token in (None, "", "wrong", TOKEN + "x", TOKEN[:-1], TOKEN.upper()):
        code, body = running.post(payload, token=token)
        assert code == 401, token
        assert body == {"error": "missing or wrong bearer token"}
    code, _ = running.post(payload, headers={"Authorization": f"Basic {TOKEN}"}, token=None)
    assert code == 401
    assert fake_slurm.calls() == []
    running.server.server_close()  # writes what a flood limit only counted
    lines = running.audit()
    assert {r["http_status"] for r in lines} == {401}
    assert sum(("request" in r) + r["suppressed"] for r in lines) == 7


def test_oversized_body_is_413_without_reading_it(tmp_path, fake_slurm, start_server) -> None:
    running = start_server(settings_for(tmp_path, fake_slurm, max_body_bytes=4096))
    payload = alert_payload(node="nid001")
    payload["alerts"][0]["annotations"]["description"] = "x" * 5000
    code, body = running.post(payload)
    assert code == 413
    assert "exceeds the limit of 4096" in body["error"]
    assert running.audit()[-1]["http_status"] == 413


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "body is not valid JSON"),
        (b"[1, 2]", "body must be a JSON object"),
        ({"status": "firing", "alerts": []}, "version: Field required"),
        ({**sample_payload(), "version": "3"}, "version: Input should be '4'"),
        ({**sample_payload(), "alerts": "nope"}, "alerts: Input should be a valid list"),
    ],
)
def test_schema_errors_are_400_with_a_clear_message(
    tmp_path, fake_slurm, start_server, body: Any, message: str
) -> None:
    running = start_server(settings_for(tmp_path, fake_slurm))
    code, answer = running.post(body)
    assert code == 400
    assert message in answer["error"], answer


def test_alert_level_schema_errors_name_the_field(tmp_path, fake_slurm, start_server) -> None:
    running = start_server(settings_for(tmp_path, fake_slurm))
    payload = alert_payload(node="nid001")
    del payload["alerts"][0]["labels"]["alertname"]
    code, answer = running.post(payload)
    assert code == 400 and "alerts.0.labels: has no alertname label" in answer["error"]
    payload = alert_payload(node="nid001", fingerprint="zz;rm -rf")
    code, answer = running.post(payload)
    assert code == 400 and "alerts.0.fingerprint" in answer["error"]
    payload = alert_payload(node="nid001")
    payload["alerts"][0]["startsAt"] = "yesterday"
    code, answer = running.post(payload)
    assert code == 400 and "alerts.0.startsAt" in answer["error"]


def test_healthz_metrics_and_recorded_sample(tmp_path, fake_slurm, start_server) -> None:
    running = start_server(settings_for(tmp_path, fake_slurm))
    code, body = running.get("/healthz")
    assert code == 200
    assert json.loads(body) == {
        "status": "ok",
        "mode": "dry-run",
        "kill_switch": False,
        "clusters": ["hpc1", "hpc2", "sandbox"],
    }
    # The recorded Alertmanager notification (SlurmNodesDown has no runbook) is accepted.
    code, answer = running.post(sample_payload(0))
    assert code == 200 and answer["results"] == {"no-runbook": 1}
    running.post(alert_payload(node="nid001"))
    _, metrics = running.get("/metrics")
    text = metrics.decode()
    assert (
        'gotthard_runbook_actions_total{action="slurm.drain_node",result="planned",'
        'runbook="GPULost"} 1.0'
    ) in text
    assert 'gotthard_runbook_webhook_requests_total{code="200"} 3.0' in text
    assert "gotthard_runbook_enforce 0.0" in text
    assert "gotthard_runbook_kill_switch 0.0" in text


# --- dry-run, enforce, duplicates ----------------------------------------------------------


def test_dry_run_plans_and_changes_nothing(tmp_path, fake_slurm, start_server) -> None:
    before = fake_slurm.state()
    running = start_server(settings_for(tmp_path, fake_slurm))  # mode defaults to dry-run
    code, answer = running.post(alert_payload(node="nid003"))
    assert code == 200 and answer["mode"] == "dry-run"
    assert answer["results"] == {"planned": 3}
    assert fake_slurm.updates() == []  # sinfo may be read for the blast radius; no update
    assert fake_slurm.state() == before
    record = next(r for r in running.audit() if r.get("action") == "slurm.drain_node")
    assert record["targets"] == {"node": "nid003"} and record["mode"] == "dry-run"
    assert record["why"] == "dry-run: nothing changed"


def test_enforce_drains_once_for_duplicates_and_resumes_on_resolve(
    tmp_path, fake_slurm, start_server, repair_feed: RepairFeed
) -> None:
    settings = settings_for(tmp_path, fake_slurm, mode="enforce", prometheus_url=repair_feed.url)
    running = start_server(settings, kubernetes=_NoKubernetes())
    firing = alert_payload("SlingshotLinkDown", node="nid004.example.org")
    for _ in range(3):
        assert running.post(firing)[0] == 200
    # Concurrent repeats too.
    in_threads([lambda: running.post(firing) for _ in range(5)])
    drains = [c for c in fake_slurm.updates() if "State=DRAIN" in c]
    assert drains == [
        [
            "scontrol",
            "update",
            "NodeName=nid004",
            "State=DRAIN",
            "Reason=gotthard: SlingshotLinkDown",
        ]
    ]
    assert _results(running, "slurm.drain_node") == ["ok"] + ["duplicate"] * 7
    assert fake_slurm.state()["nodes"]["nid004"]["reason"] == "gotthard: SlingshotLinkDown"
    repair_feed.health("nid004.example.org", 1)  # the link is back
    resolved = alert_payload("SlingshotLinkDown", status="resolved", node="nid004.example.org")
    assert running.post(with_repair_query(resolved))[1]["results"] == {"ok": 1}
    assert running.post(with_repair_query(resolved))[1]["results"] == {"duplicate": 1}
    assert fake_slurm.state()["nodes"]["nid004"]["state"] == "idle"


def test_resume_leaves_a_node_drained_by_someone_else(
    tmp_path, fake_slurm, start_server, repair_feed: RepairFeed
) -> None:
    state = fake_slurm.state()
    state["nodes"]["nid005"].update(state="drained", reason="hardware ticket 1234")
    fake_slurm.write(state)
    settings = settings_for(tmp_path, fake_slurm, mode="enforce", prometheus_url=repair_feed.url)
    running = start_server(settings)
    repair_feed.health("nid005", 1)  # repaired, but the drain is an operator's
    resolved = alert_payload("SlingshotLinkDown", status="resolved", node="nid005")
    assert running.post(with_repair_query(resolved))[1]["results"] == {"skipped": 1}
    assert fake_slurm.state()["nodes"]["nid005"]["reason"] == "hardware ticket 1234"
    assert fake_slurm.updates() == []


def test_idempotency_survives_a_restart(tmp_path, fake_slurm, start_server) -> None:
    settings = settings_for(tmp_path, fake_slurm, mode="enforce")
    first = start_server(settings)
    payload = alert_payload("SlingshotLinkDown", node="nid006")
    assert first.post(payload)[1]["results"] == {"ok": 2}
    first.server.shutdown()
    second = start_server(settings)  # same audit log
    assert second.post(payload)[1]["results"] == {"duplicate": 2}
    assert len(fake_slurm.updates()) == 1


# --- hostile labels -------------------------------------------------------------------------

HOSTILE = [
    "$(touch {marker})",
    "`touch {marker}`",
    "nid001; touch {marker}",
    "nid001 && touch {marker}",
    "nid001|touch {marker}",
    "../../../etc/passwd",
    "/etc/passwd",
    "nid001\nState=RESUME",
    "nid001 State=RESUME",
    "nid[001-100]",
    "nid001,nid002",
    "-rf",
    "'nid001'",
    "n" * 10_000,
    "127.0.0.1",
    "",
]


def test_hostile_labels_never_reach_a_command(tmp_path, fake_slurm, start_server) -> None:
    marker = tmp_path / "pwned"
    running = start_server(
        settings_for(tmp_path, fake_slurm, mode="enforce", max_body_bytes=1024 * 1024)
    )
    alerts = []
    for i, value in enumerate(HOSTILE):
        labels = {"alertname": "GPULost", "cluster": "hpc1", "node": value.format(marker=marker)}
        alerts.append({"labels": labels, "fingerprint": f"{i + 1:016x}", "status": "firing"})
    code, answer = running.post(many_alerts(alerts))
    assert code == 200, answer
    # notify runs; every node step is refused before any command runs
    assert answer["results"] == {"ok": len(HOSTILE), "invalid": 2 * len(HOSTILE)}
    assert fake_slurm.calls() == []
    assert not marker.exists()
    for record in running.audit():
        if record.get("result") == "invalid":
            assert record["targets"] == {}
            assert len(record["why"]) < 300  # huge values are truncated in the log
    # Also namespaces and failover targets.
    dr = many_alerts(
        [
            {
                "labels": {
                    "alertname": "DRBackupTooOld",
                    "cluster": "hpc1",
                    "namespace": "../kube-system",
                },
                "fingerprint": "d1",
            },
            {
                "labels": {
                    "alertname": "DRBackupTooOld",
                    "cluster": "hpc1",
                    "namespace": "Prod_DB",
                },
                "fingerprint": "d2",
            },
        ]
    )
    assert running.post(dr)[1]["results"] == {"ok": 2, "invalid": 2}
    # A label beyond 64 KiB is refused as a whole by the schema.
    code, answer = running.post(alert_payload(node="n" * 70_000))
    assert code == 400 and "alerts.0.labels.node: String should have at most" in answer["error"]
    assert fake_slurm.calls() == []


def test_odd_but_valid_names_reach_scontrol_as_one_argument(
    tmp_path, fake_slurm, start_server
) -> None:
    fake_slurm.set_nodes({"gpu": ["gpu-node_07"]})
    running = start_server(
        settings_for(tmp_path, fake_slurm, mode="enforce", limits={"max_partition_fraction": 1.0})
    )
    assert running.post(alert_payload("GPUFatalXid", node="gpu-node_07"))[0] == 200
    assert [
        "scontrol",
        "update",
        "NodeName=gpu-node_07",
        "State=DRAIN",
        "Reason=gotthard: GPUFatalXid",
    ] in fake_slurm.calls()


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("nid001", True),
        ("nid001.cluster.example", True),
        ("x" * 63, True),
        ("x" * 64, False),
        ("-nid", False),
        ("nid-", False),
        ("ni d", False),
        ("::1", False),
    ],
)
def test_slurm_node_syntax(value: str, ok: bool) -> None:
    if ok:
        assert validate.slurm_node(value, strip_domain=False) == value
    else:
        with pytest.raises(validate.TargetError):
            validate.slurm_node(value)


@pytest.mark.parametrize(
    ("state", "reason"),
    [("drained", "replace GPU 3 (ops ticket 4711)"), ("idle+maint", "")],
    ids=["operator-drain", "maint-reservation"],
)
def test_a_node_in_maintenance_is_never_drained_or_cordoned(
    tmp_path, fake_slurm, start_server, state: str, reason: str
) -> None:
    fake_slurm.set_nodes({"gpu": ["nid001", "nid002"]})
    nodes = fake_slurm.state()
    nodes["nodes"]["nid001"].update(state=state, reason=reason)
    fake_slurm.write(nodes)
    kubernetes = RecordingKubernetes()
    settings = settings_for(
        tmp_path, fake_slurm, mode="enforce", limits={"max_partition_fraction": 1.0}
    )
    running = start_server(settings, kubernetes=kubernetes)
    assert running.post(alert_payload("GPULost", node="nid001"))[0] == 200
    assert fake_slurm.updates() == [] and kubernetes.calls == []
    skipped = [
        r for r in running.audit() if r.get("action") in ("slurm.drain_node", "k8s.cordon_node")
    ]
    assert [r["result"] for r in skipped] == ["skipped", "skipped"]
    assert "nid001 is in maintenance" in skipped[0]["why"]
    # a node Gotthard itself drained for another fault is no maintenance: acted on
    nodes = fake_slurm.state()
    nodes["nodes"]["nid002"].update(state="drained", reason="gotthard: GPUFatalXid")
    fake_slurm.write(nodes)
    other = alert_payload("GPULost", fingerprint="0000000000000002", node="nid002")
    assert running.post(other)[0] == 200
    assert kubernetes.calls == [("cordon", "nid002")]


# --- limits under a storm ------------------------------------------------------------------


def _storm(count: int = 100) -> list[dict[str, Any]]:
    return [
        {
            "labels": {"alertname": "GPULost", "cluster": "hpc1", "node": f"nid{i % 40:03d}"},
            "fingerprint": f"{i + 1:016x}",
        }
        for i in range(count)
    ]


def _post_storm(
    tmp_path: Path, fake_slurm: Any, start_server: Any, **limits: float
) -> tuple[Running, float]:
    """The storm, posted by 10 threads at once to a webhook in enforce mode with *limits*;
    (the server, the seconds the posts took)."""
    settings = settings_for(tmp_path, fake_slurm, mode="enforce", limits=limits)
    running = start_server(settings, kubernetes=_NoKubernetes())
    storm = _storm()
    started = time.monotonic()
    in_threads([lambda part=storm[i::10]: running.post(many_alerts(part)) for i in range(10)])
    return running, time.monotonic() - started


def test_storm_of_100_alerts_respects_the_blast_radius(tmp_path, fake_slurm, start_server) -> None:
    fake_slurm.set_nodes(
        {"gpu": [f"nid{i:03d}" for i in range(20)], "cpu": [f"nid{i:03d}" for i in range(20, 40)]}
    )
    state = fake_slurm.state()
    state["nodes"]["nid000"].update(state="down", reason="not responding")  # already out
    fake_slurm.write(state)
    running, elapsed = _post_storm(
        tmp_path, fake_slurm, start_server, max_nodes_per_window=1000, max_partition_fraction=0.15
    )
    nodes = fake_slurm.state()["nodes"]
    drained = sorted(n for n, info in nodes.items() if info["state"] == "drained")
    gpu_out = [n for n in nodes if "gpu" in nodes[n]["partitions"] and nodes[n]["state"] != "idle"]
    cpu_out = [n for n in nodes if "cpu" in nodes[n]["partitions"] and nodes[n]["state"] != "idle"]
    # 15% of 20 = 3 nodes per partition, the down node included; draining the down node
    # itself takes no capacity away, so it is allowed.
    assert len(gpu_out) == 3 and len(cpu_out) == 3, drained
    drains = [c[2] for c in fake_slurm.updates() if "State=DRAIN" in c]
    assert len(drains) == len(set(drains)) == 6 and "NodeName=nid000" in drains
    results = _results(running, "slurm.drain_node")
    assert len(results) == 100 and results.count("ok") == 6
    assert set(results) <= {"ok", "noop", "limited"}
    assert results.count("limited") >= 100 - 6 - 2 * 6  # each node appears in up to 3 alerts
    assert elapsed < 30


def test_storm_respects_the_rate_limit_per_cluster(tmp_path, fake_slurm, start_server) -> None:
    fake_slurm.set_nodes({"gpu": [f"nid{i:03d}" for i in range(40)]})
    running, _ = _post_storm(
        tmp_path, fake_slurm, start_server, max_nodes_per_window=3, max_partition_fraction=1.0
    )
    drained = [n for n, i in fake_slurm.state()["nodes"].items() if i["state"] == "drained"]
    assert len(drained) == 3
    limited = [r for r in running.audit() if r.get("result") == "limited"]
    assert limited and "rate limit" in limited[0]["why"]
    # Another cluster has its own budget.
    other = many_alerts([{"labels": {"alertname": "GPULost", "cluster": "hpc2", "node": "nid039"}}])
    assert running.post(other)[1]["results"]["ok"] >= 2


def test_dry_run_storm_plans_within_the_limits(tmp_path, fake_slurm, start_server) -> None:
    running = start_server(settings_for(tmp_path, fake_slurm), kubernetes=_NoKubernetes())
    storm = _storm()
    in_threads([lambda part=storm[i::4]: running.post(many_alerts(part)) for i in range(4)])
    planned = [
        r["targets"]["node"]
        for r in running.audit()
        if r.get("action") == "slurm.drain_node" and r["result"] == "planned"
    ]
    assert len(set(planned)) == 2  # 10% of the 20-node partition
    assert fake_slurm.updates() == []


# --- kill switch, failures, timeouts -------------------------------------------------------


def test_kill_switch_stops_all_actions(tmp_path, fake_slurm, start_server) -> None:
    settings = settings_for(tmp_path, fake_slurm, mode="enforce")
    Path(settings.kill_switch_file).touch()
    running = start_server(settings)
    payload = alert_payload("SlingshotLinkDown", node="nid007")
    assert running.post(payload)[1]["results"] == {"killed": 2}
    assert json.loads(running.get("/healthz")[1])["kill_switch"] is True
    assert fake_slurm.calls() == []
    # Removing it lets a repeated notification act.
    os.unlink(settings.kill_switch_file)
    assert running.post(payload)[1]["results"] == {"ok": 2}


def test_a_failing_command_is_reported_and_the_server_lives_on(
    tmp_path, fake_slurm, start_server
) -> None:
    state = fake_slurm.state()
    state["fail"] = True
    fake_slurm.write(state)
    running = start_server(settings_for(tmp_path, fake_slurm, mode="enforce"))
    payload = alert_payload("SlingshotLinkDown", node="nid008")
    code, answer = running.post(payload)
    assert code == 200 and answer["results"] == {"ok": 1, "failed": 1}
    record = next(r for r in running.audit() if r.get("result") == "failed")
    assert "Invalid node name specified" in record["why"]
    _, metrics = running.get("/metrics")
    assert 'action="slurm.drain_node",result="failed"' in metrics.decode()
    # A failure is not final: the next notification tries again.
    state["fail"] = False
    fake_slurm.write(state)
    assert running.post(payload)[1]["results"] == {"duplicate": 1, "ok": 1}


def test_a_hanging_command_times_out(tmp_path, fake_slurm, start_server) -> None:
    state = fake_slurm.state()
    state["sleep"] = 5
    fake_slurm.write(state)
    running = start_server(
        settings_for(tmp_path, fake_slurm, mode="enforce", action_timeout_seconds=0.5)
    )
    started = time.monotonic()
    code, answer = running.post(alert_payload("SlingshotLinkDown", node="nid009"))
    assert code == 200 and answer["results"] == {"ok": 1, "failed": 1}
    assert time.monotonic() - started < 3
    assert "timed out after 0.5s" in running.audit()[-1]["why"]


def test_failover_is_off_unless_allowed(tmp_path, fake_slurm, start_server) -> None:
    running = start_server(settings_for(tmp_path, fake_slurm, mode="enforce"))
    payload = alert_payload("DRSiteUnhealthy", service="billing", target_site="lugano")
    assert running.post(payload)[1]["results"] == {"ok": 1, "disabled": 1}


# --- registry and docs ----------------------------------------------------------------------


def test_every_runbook_names_a_known_alert_and_each_page_states_its_automation() -> None:
    from gotthard.monitoring import rules

    names = set(rules.alert_names())
    for book in registry.RUNBOOKS:
        assert book.alertname in names, book.alertname
        for step in book.steps:
            assert step.action in registry.ACTIONS
            assert step.on_resolve is None or step.on_resolve in registry.ACTIONS
    for name in names:
        page = (REPO / "docs" / "runbooks" / f"{name}.md").read_text()
        assert registry.automated_steps_line(name) in page.splitlines(), name


def test_every_action_is_documented_and_unknown_actions_fail_early() -> None:
    table = (REPO / "docs" / "runbooks.md").read_text()
    for name, spec in registry.ACTIONS.items():
        assert spec.name == name
        assert f"| `{name}` |" in table, name
    with pytest.raises(ValueError, match="unknown runbook action 'slurm\\.reboot_node'"):
        registry.Step("notify", on_resolve="slurm.reboot_node")


# --- CLI --------------------------------------------------------------------------------------


def _serve_args(tmp_path: Path, *extra: str) -> list[str]:
    """``gotthard`` arguments of ``runbooks serve`` with a token file and an audit log."""
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    return [
        *("runbooks", "serve", "--token-file", str(token)),
        *("--audit-log", str(tmp_path / "audit.jsonl")),
        *extra,
    ]


def test_cli_refuses_enforce_unless_the_config_switches_it_on(tmp_path: Path) -> None:
    args = _serve_args(tmp_path, "--mode", "enforce", "--listen", "127.0.0.1:0")
    result = gotthard(*args, timeout=30)
    assert result.returncode == 2
    assert '[runbooks] mode = "enforce"' in result.stderr
    config = tmp_path / "site.toml"
    config.write_text('[runbooks]\nmode = "enforce"\nlimits = { max_nodes_per_windw = 2 }\n')
    result = gotthard(*_serve_args(tmp_path, "--config", str(config)), timeout=30)
    assert result.returncode == 2
    assert "runbooks.limits.max_nodes_per_windw: unknown key" in result.stderr


def test_cli_serves_until_sigterm(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    proc = subprocess.Popen(
        gotthard_argv(*_serve_args(tmp_path, "--listen", f"127.0.0.1:{port}")),
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        healthz = f"http://127.0.0.1:{port}/healthz"
        wait_until(lambda: http_ok(healthz), 20, "the server to start")
        assert get_json(healthz)["mode"] == "dry-run"
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
        assert proc.stderr is not None
        assert "in dry-run mode" in proc.stderr.read()


class _NoKubernetes:
    """k8s steps with no cluster: they fail (reported), which must not stop Slurm steps."""

    def cordon(self, name: str, alertname: str) -> Any:
        from gotthard.runbooks.actions import Outcome

        return Outcome("noop", "no Kubernetes in this test")

    uncordon = cordon


_ = FakeSlurm
