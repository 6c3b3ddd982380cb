"""End to end: a real Alertmanager notifies the webhook, which drains and resumes the node
of the real session Slurm sandbox (``slurm_sandbox``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gotthard.dashboards.rules import dump_yaml
from gotthard.runbooks.actions import Outcome
from gotthard.sandbox import Sandbox, SandboxError, find_binary, free_ports
from tests.runbooks.conftest import TOKEN, alert_payload, settings_for


class RecordingKubernetes:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def cordon(self, name: str, alertname: str) -> Outcome:
        self.calls.append(("cordon", name))
        return Outcome("ok", "recorded")

    def uncordon(self, name: str, alertname: str) -> Outcome:
        self.calls.append(("uncordon", name))
        return Outcome("ok", "recorded")


def _binary(name: str) -> str:
    try:
        return find_binary(name)
    except SandboxError as err:
        pytest.fail(str(err), pytrace=False)


def _node(sandbox: Sandbox) -> tuple[str, str]:
    out = sandbox.run_command(
        [_binary("sinfo"), "-h", "-N", "-n", sandbox.node_name, "-o", "%T|%E"]
    ).stdout
    state, reason = out.splitlines()[0].split("|", 1)
    return state.rstrip("*~"), reason


def _wait(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}", pytrace=False)


@pytest.fixture
def node_restored(slurm_sandbox: Sandbox) -> Iterator[Sandbox]:
    """The sandbox node, idle before the test and put back to idle after it."""
    _wait(lambda: _node(slurm_sandbox)[0] == "idle", 30, "the sandbox node idle")
    try:
        yield slurm_sandbox
    finally:
        if _node(slurm_sandbox)[0] != "idle":
            slurm_sandbox.run_command(
                [
                    _binary("scontrol"),
                    "update",
                    f"NodeName={slurm_sandbox.node_name}",
                    "State=RESUME",
                ],
                check=False,
            )
        _wait(lambda: _node(slurm_sandbox)[0] == "idle", 30, "the sandbox node idle again")


def _slurm_settings(tmp_path: Path, sandbox: Sandbox, **overrides: Any) -> Any:
    return settings_for(
        tmp_path,
        scontrol_path=_binary("scontrol"),
        sinfo_path=_binary("sinfo"),
        slurm_conf=str(sandbox.slurm_conf),
        limits={"max_partition_fraction": 1.0},  # the sandbox has a single node
        **overrides,
    )


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[Any]:
    short = Path(tempfile.mkdtemp(prefix="gtrb-", dir="/tmp"))
    procs: list[subprocess.Popen[bytes]] = []

    def start(webhook_url: str) -> str:
        (port,) = free_ports(1)
        token = short / "token"
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
                                "authorization": {"type": "Bearer", "credentials_file": str(token)}
                            },
                        }
                    ],
                }
            ],
        }
        (short / "am.yml").write_text(dump_yaml(config))
        log = (short / "am.log").open("w")
        procs.append(
            subprocess.Popen(
                [
                    _binary("prometheus-alertmanager"),
                    f"--config.file={short / 'am.yml'}",
                    f"--storage.path={short / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--cluster.listen-address=",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as response:
                    return response.status == 200
            except OSError:
                return False

        _wait(ready, 15, "Alertmanager ready")
        return url

    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    shutil.rmtree(short, ignore_errors=True)


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
        _slurm_settings(tmp_path, sandbox, mode="enforce"), kubernetes=kubernetes
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

    _wait(lambda: drains(), 15, "the drain decision")
    state, reason = _node(sandbox)
    assert state in ("drained", "draining"), state
    assert reason == "gotthard: GPULost"
    # Alertmanager repeats the notification (repeat_interval 2s): no second action.
    _wait(lambda: len(drains()) >= 2, 15, "a repeated notification")
    assert [r["result"] for r in drains()] == ["ok"] + ["duplicate"] * (len(drains()) - 1)
    assert kubernetes.calls == [("cordon", sandbox.node_name)]

    # Resolve: Alertmanager sends "resolved"; the node is resumed and uncordoned.
    _push(am_url, labels, starts, datetime.now(UTC))
    _wait(lambda: _node(sandbox)[0] == "idle", 20, "the node resumed")
    resumes = [r for r in running.audit() if r.get("action") == "slurm.resume_node"]
    assert resumes[0]["result"] == "ok" and resumes[0]["status"] == "resolved"
    _wait(lambda: ("uncordon", sandbox.node_name) in kubernetes.calls, 5, "uncordon")
    assert time.monotonic() - started < 40


def test_dry_run_changes_nothing_on_the_real_node(
    tmp_path: Path, node_restored: Sandbox, start_server: Any
) -> None:
    sandbox = node_restored
    running = start_server(_slurm_settings(tmp_path, sandbox), kubernetes=RecordingKubernetes())
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
            _binary("scontrol"),
            "update",
            f"NodeName={sandbox.node_name}",
            "State=DRAIN",
            "Reason=operator maintenance",
        ]
    )
    running = start_server(_slurm_settings(tmp_path, sandbox, mode="enforce"))
    resolved = alert_payload("SlingshotLinkDown", status="resolved", node=sandbox.node_name)
    assert running.post(resolved)[1]["results"] == {"skipped": 1}
    assert _node(sandbox)[1] == "operator maintenance"
