"""End to end: a real Alertmanager notifies the webhook, which drains and resumes the node
of the real session Slurm sandbox (``slurm_sandbox``)."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gotthard.dashboards.rules import dump_yaml
from gotthard.runbooks.actions import Outcome
from gotthard.sandbox import Sandbox
from tests.runbooks.conftest import TOKEN, alert_payload, settings_for
from tests.support.monitoring import Processes, binary, start_alertmanager
from tests.support.wait import wait_until


class RecordingKubernetes:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def cordon(self, name: str, alertname: str) -> Outcome:
        self.calls.append(("cordon", name))
        return Outcome("ok", "recorded")

    def uncordon(self, name: str, alertname: str) -> Outcome:
        self.calls.append(("uncordon", name))
        return Outcome("ok", "recorded")


def _node(sandbox: Sandbox) -> tuple[str, str]:
    out = sandbox.run_command(
        [binary("sinfo"), "-h", "-N", "-n", sandbox.node_name, "-o", "%T|%E"]
    ).stdout
    state, reason = out.splitlines()[0].split("|", 1)
    return state.rstrip("*~"), reason


@pytest.fixture
def node_restored(slurm_sandbox: Sandbox) -> Iterator[Sandbox]:
    """The sandbox node, idle before the test and put back to idle after it."""
    wait_until(lambda: _node(slurm_sandbox)[0] == "idle", 30, "the sandbox node idle")
    try:
        yield slurm_sandbox
    finally:
        if _node(slurm_sandbox)[0] != "idle":
            slurm_sandbox.run_command(
                [
                    binary("scontrol"),
                    "update",
                    f"NodeName={slurm_sandbox.node_name}",
                    "State=RESUME",
                ],
                check=False,
            )
        wait_until(lambda: _node(slurm_sandbox)[0] == "idle", 30, "the sandbox node idle again")


def _slurm_settings(tmp_path: Path, sandbox: Sandbox, **overrides: Any) -> Any:
    return settings_for(
        tmp_path,
        scontrol_path=binary("scontrol"),
        sinfo_path=binary("sinfo"),
        limits={"max_partition_fraction": 1.0},  # the sandbox has a single node
        **overrides,
    )


@pytest.fixture
def alertmanager(short_tmp: Path) -> Iterator[Callable[[str], str]]:
    """Start a real Alertmanager notifying a webhook URL (bearer TOKEN); its URL."""
    with Processes(short_tmp / "logs") as procs:

        def start(webhook_url: str) -> str:
            token = short_tmp / "token"
            token.write_text(TOKEN + "\n")
            config = {
                "route": {
                    "receiver": "runbook-webhook",
                    "group_by": ["alertname", "cluster"],
                    "group_wait": "1s",
                    "group_interval": "1s",
                    "repeat_interval": "2s",  # repeated notifications: must not repeat actions
                },
                "receivers": [
                    {
                        "name": "runbook-webhook",
                        "webhook_configs": [
                            {
                                "url": webhook_url,
                                "send_resolved": True,
                                "http_config": {
                                    "authorization": {
                                        "type": "Bearer",
                                        "credentials_file": str(token),
                                    }
                                },
                            }
                        ],
                    }
                ],
            }
            (short_tmp / "am.yml").write_text(dump_yaml(config))
            return start_alertmanager(procs, short_tmp / "am.yml", short_tmp)

        yield start


def _push(am_url: str, labels: dict[str, str], starts: datetime, ends: datetime) -> None:
    body = [
        {
            "labels": labels,
            "annotations": {"summary": "A GPU has fallen off the bus or been lost by the driver."},
            "startsAt": starts.isoformat(),
            "endsAt": ends.isoformat(),
        }
    ]
    request = urllib.request.Request(
        f"{am_url}/api/v2/alerts",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200


def test_gpu_lost_drains_and_resolve_resumes_the_real_node(
    tmp_path: Path, node_restored: Sandbox, start_server: Any, alertmanager: Any
) -> None:
    sandbox = node_restored
    started = time.monotonic()
    kubernetes = RecordingKubernetes()
    running = start_server(
        _slurm_settings(tmp_path, sandbox, mode="enforce"),
        kubernetes=kubernetes,
        slurm_conf=str(sandbox.slurm_conf),
    )
    am_url = alertmanager(f"{running.url}/alerts")
    labels = {
        "alertname": "GPULost",
        "severity": "critical",
        "site": "zurich",
        "cluster": "sandbox",
        "instance": f"{sandbox.node_name}:9877",
        "node": sandbox.node_name,
        "gpu": "0",
    }
    starts = datetime.now(UTC)
    _push(am_url, labels, starts, starts + timedelta(hours=1))

    def drains() -> list[dict[str, Any]]:
        return [r for r in running.audit() if r.get("action") == "slurm.drain_node"]

    wait_until(lambda: drains(), 15, "the drain decision")
    state, reason = _node(sandbox)
    assert state in ("drained", "draining"), state
    assert reason == "gotthard: GPULost"
    # Alertmanager repeats the notification (repeat_interval 2s): no second action.
    wait_until(lambda: len(drains()) >= 2, 15, "a repeated notification")
    assert [r["result"] for r in drains()] == ["ok"] + ["duplicate"] * (len(drains()) - 1)
    assert kubernetes.calls == [("cordon", sandbox.node_name)]

    # Resolve: Alertmanager sends "resolved"; the node is resumed and uncordoned.
    _push(am_url, labels, starts, datetime.now(UTC))
    wait_until(lambda: _node(sandbox)[0] == "idle", 20, "the node resumed")
    resumes = [r for r in running.audit() if r.get("action") == "slurm.resume_node"]
    assert resumes[0]["result"] == "ok" and resumes[0]["status"] == "resolved"
    wait_until(lambda: ("uncordon", sandbox.node_name) in kubernetes.calls, 5, "uncordon")
    assert time.monotonic() - started < 40


def test_dry_run_changes_nothing_on_the_real_node(
    tmp_path: Path, node_restored: Sandbox, start_server: Any
) -> None:
    sandbox = node_restored
    running = start_server(
        _slurm_settings(tmp_path, sandbox),
        kubernetes=RecordingKubernetes(),
        slurm_conf=str(sandbox.slurm_conf),
    )
    code, answer = running.post(alert_payload(node=sandbox.node_name))
    assert code == 200 and answer["results"] == {"planned": 3}
    assert _node(sandbox) == ("idle", "none")
    resolved = alert_payload(status="resolved", node=sandbox.node_name)
    assert running.post(resolved)[1]["results"] == {"planned": 2}
    assert _node(sandbox) == ("idle", "none")


def test_resume_leaves_an_operator_drain_alone(
    tmp_path: Path, node_restored: Sandbox, start_server: Any
) -> None:
    sandbox = node_restored
    sandbox.run_command(
        [
            binary("scontrol"),
            "update",
            f"NodeName={sandbox.node_name}",
            "State=DRAIN",
            "Reason=operator maintenance",
        ]
    )
    running = start_server(
        _slurm_settings(tmp_path, sandbox, mode="enforce"), slurm_conf=str(sandbox.slurm_conf)
    )
    resolved = alert_payload("SlingshotLinkDown", status="resolved", node=sandbox.node_name)
    assert running.post(resolved)[1]["results"] == {"skipped": 1}
    assert _node(sandbox)[1] == "operator maintenance"
