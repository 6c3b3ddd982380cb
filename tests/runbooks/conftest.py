"""Helpers for the runbook tests: a fake Slurm (argv recorder), a server, payloads."""

from __future__ import annotations

import copy
import json
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gotthard.runbooks.actions import SlurmActions
from gotthard.runbooks.engine import AuditLog, Engine
from gotthard.runbooks.server import RunbookServer, make_server
from gotthard.runbooks.settings import RunbooksConfig

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runbooks"
TOKEN = "test-token-0123456789abcdef"

#: A stand-in for scontrol and sinfo: records every argv (JSON) and keeps node states in
#: a JSON file, so that tests can count exactly which commands ran, with which arguments.
FAKE_SLURM = r"""
import json, os, sys, time
state_file = os.environ["FAKE_SLURM_STATE"]
with open(os.environ["FAKE_SLURM_CALLS"], "a") as calls:
    calls.write(json.dumps([os.path.basename(sys.argv[0])] + sys.argv[1:]) + "\n")
with open(state_file) as f:
    state = json.load(f)
name = os.path.basename(sys.argv[0])
if state.get("sleep") and name == "scontrol":
    time.sleep(state["sleep"])
if state.get("fail") and name == "scontrol":
    print("slurm_update error: Invalid node name specified", file=sys.stderr)
    sys.exit(1)
args = sys.argv[1:]
if name == "sinfo":
    only = args[args.index("-n") + 1] if "-n" in args else None
    for node, info in state["nodes"].items():
        if only is not None and node != only:
            continue
        for part in info["partitions"]:
            print(f"{node}|{part}|{info['state']}|{info.get('reason') or 'none'}")
elif name == "scontrol" and args[0] == "update":
    fields = dict(a.split("=", 1) for a in args[1:])
    info = state["nodes"][fields["NodeName"]]
    if fields["State"] == "DRAIN":
        info["state"], info["reason"] = "drained", fields["Reason"]
    elif fields["State"] == "RESUME":
        info["state"], info["reason"] = "idle", ""
    with open(state_file + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(state_file + ".tmp", state_file)
"""


@dataclass
class FakeSlurm:
    directory: Path

    @property
    def state_file(self) -> Path:
        return self.directory / "state.json"

    @property
    def calls_file(self) -> Path:
        return self.directory / "calls.jsonl"

    def set_nodes(self, partitions: dict[str, list[str]]) -> None:
        nodes: dict[str, dict[str, Any]] = {}
        for part, names in partitions.items():
            for name in names:
                nodes.setdefault(name, {"partitions": [], "state": "idle", "reason": ""})
                nodes[name]["partitions"].append(part)
        self.write({"nodes": nodes})

    def write(self, state: dict[str, Any]) -> None:
        self.state_file.write_text(json.dumps(state))

    def state(self) -> dict[str, Any]:
        return json.loads(self.state_file.read_text())

    def calls(self) -> list[list[str]]:
        if not self.calls_file.exists():
            return []
        return [json.loads(line) for line in self.calls_file.read_text().splitlines()]

    def updates(self) -> list[list[str]]:
        return [c for c in self.calls() if c[0] == "scontrol"]


@pytest.fixture
def fake_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeSlurm:
    directory = tmp_path / "fake-slurm"
    directory.mkdir()
    for name in ("scontrol", "sinfo"):
        script = directory / name
        script.write_text(f"#!{sys.executable}\n{FAKE_SLURM}")
        script.chmod(0o755)
    fake = FakeSlurm(directory)
    fake.set_nodes({"gpu": [f"nid{i:03d}" for i in range(20)]})
    monkeypatch.setenv("FAKE_SLURM_STATE", str(fake.state_file))
    monkeypatch.setenv("FAKE_SLURM_CALLS", str(fake.calls_file))
    return fake


def settings_for(tmp_path: Path, fake: FakeSlurm | None = None, **overrides: Any) -> RunbooksConfig:
    base: dict[str, Any] = {
        "listen": "127.0.0.1:0",
        "audit_log": str(tmp_path / "audit.jsonl"),
        "kill_switch_file": str(tmp_path / "kill-switch"),
        "action_timeout_seconds": 5.0,
    }
    if fake is not None:
        base["scontrol_path"] = str(fake.directory / "scontrol")
        base["sinfo_path"] = str(fake.directory / "sinfo")
    base.update(overrides)
    return RunbooksConfig.model_validate(base)


@dataclass
class Running:
    server: RunbookServer
    engine: Engine
    settings: RunbooksConfig

    @property
    def url(self) -> str:
        return self.server.url

    def post(
        self,
        body: Any,
        token: str | None = TOKEN,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, Any]]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}/alerts", data=data, method="POST")
        request.add_header("Content-Type", "application/json")
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        for key, value in (headers or {}).items():
            request.add_header(key, value)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")

    def get(self, path: str) -> tuple[int, bytes]:
        with urllib.request.urlopen(f"{self.url}{path}", timeout=10) as response:
            return response.status, response.read()

    def audit(self) -> list[dict[str, Any]]:
        path = Path(self.settings.audit_log)
        return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def start_server() -> Iterator[Callable[..., Running]]:
    started: list[Running] = []

    def start(settings: RunbooksConfig, slurm_conf: str = "", **engine_kwargs: Any) -> Running:
        """The webhook on *settings*; *slurm_conf* is the cluster's (the site model's)."""
        if slurm_conf:
            engine_kwargs["slurm"] = SlurmActions(settings, slurm_conf=slurm_conf)
        engine = Engine(settings, audit=AuditLog(settings.audit_log), **engine_kwargs)
        server = make_server(settings.listen, engine, TOKEN.encode())
        server.start_background()
        running = Running(server, engine, settings)
        started.append(running)
        return running

    yield start
    for running in started:
        running.server.shutdown()
        running.server.server_close()
        running.engine.close()


def sample_payload(index: int = 0) -> dict[str, Any]:
    lines = (FIXTURES / "webhook-v4-samples.jsonl").read_text().splitlines()
    return copy.deepcopy(json.loads(lines[index])["payload"])


def alert_payload(
    alertname: str = "GPULost",
    status: str = "firing",
    fingerprint: str = "a1b2c3d4e5f60718",
    starts_at: str = "2026-12-02T17:16:43.441Z",
    **labels: str,
) -> dict[str, Any]:
    """A webhook payload for one alert, derived from the recorded sample."""
    payload = sample_payload(0 if status == "firing" else 1)
    alert = payload["alerts"][0]
    alert["labels"] = {
        "alertname": alertname,
        "cluster": "hpc1",
        "severity": "critical",
        "site": "test",
        **labels,
    }
    alert.update(fingerprint=fingerprint, startsAt=starts_at, status=status)
    payload.update(status=status, commonLabels=dict(alert["labels"]))
    return payload


def many_alerts(alerts: list[dict[str, Any]]) -> dict[str, Any]:
    payload = sample_payload(0)
    template = payload["alerts"][0]
    payload["alerts"] = [{**template, **alert} for alert in alerts]
    return payload


def run_threads(funcs: list[Callable[[], Any]]) -> list[Any]:
    results: list[Any] = [None] * len(funcs)

    def call(i: int) -> None:
        results[i] = funcs[i]()

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(funcs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results
