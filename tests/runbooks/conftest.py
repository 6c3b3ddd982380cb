"""Helpers for the runbook tests: a fake Slurm (argv recorder), a server, payloads, and a
real Prometheus fed by a text endpoint that confirms (or not) repairs."""

from __future__ import annotations

import copy
import json
import shutil
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gotthard.monitoring.rules import dump_yaml
from gotthard.runbooks.actions import Outcome, SlurmActions
from gotthard.runbooks.clusters import Clusters, shared
from gotthard.runbooks.engine import AuditLog, Engine
from gotthard.runbooks.server import RunbookServer, make_server
from gotthard.runbooks.settings import RunbooksConfig
from gotthard.sandbox import Sandbox
from tests.support.monitoring import (
    Processes,
    QuietHandler,
    binary,
    instant,
    serve_http,
    start_prometheus,
)
from tests.support.wait import wait_until

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runbooks"
TOKEN = "test-token-0123456789abcdef"
#: The clusters a test webhook owns unless the test says otherwise: those its alerts name.
TEST_CLUSTERS = ("hpc1", "hpc2", "sandbox")

#: A stand-in for scontrol and sinfo (printing the columns sinfo -O asks for): records
#: every argv (JSON) and keeps node states in a JSON file, so that tests can count exactly
#: which commands ran, with which arguments.
#: With ``FAKE_SLURM_CONF`` set, it stands in only for the cluster of that ``SLURM_CONF``
#: and runs the real command (``FAKE_SLURM_REAL_SCONTROL``, ``FAKE_SLURM_REAL_SINFO``) for
#: any other: two clusters, one of them fake.
FAKE_SLURM = r"""
import json, os, sys, time
name = os.path.basename(sys.argv[0])
only_for = os.environ.get("FAKE_SLURM_CONF")
if only_for and os.environ.get("SLURM_CONF") != only_for:
    real = os.environ["FAKE_SLURM_REAL_" + name.upper()]
    os.execv(real, [real] + sys.argv[1:])
state_file = os.environ["FAKE_SLURM_STATE"]
with open(os.environ["FAKE_SLURM_CALLS"], "a") as calls:
    calls.write(json.dumps([name] + sys.argv[1:]) + "\n")
with open(state_file) as f:
    state = json.load(f)
if state.get("sleep") and name == "scontrol":
    time.sleep(state["sleep"])
if state.get("fail") and name == "scontrol":
    print("slurm_update error: Invalid node name specified", file=sys.stderr)
    sys.exit(1)
args = sys.argv[1:]
if name == "sinfo":
    # the columns the shared Slurm reader asks for: -O NAME:0|,NAME:0|,...
    only = args[args.index("-n") + 1].split(",") if "-n" in args else None
    columns = [item.split(":")[0] for item in args[args.index("-O") + 1].split(",")]
    for node, info in state["nodes"].items():
        if only is not None and node not in only:
            continue
        for part in info["partitions"]:
            cells = {
                "NodeList": node,
                "Partition": part,
                "StateComplete": info["state"],
                "CPUsState": "0/1/0/1",
                "Reason": info.get("reason") or "none",
            }
            print("".join(cells.get(column, "N/A") + "|" for column in columns))
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

    def only_for_conf(self, monkeypatch: pytest.MonkeyPatch) -> Path:
        """Stand in only for the cluster whose ``SLURM_CONF`` is the returned file; the real
        ``scontrol``/``sinfo`` answer (and nothing is recorded) for any other cluster."""
        conf = self.directory / "slurm.conf"
        conf.write_text("# a fake cluster: its scontrol/sinfo are tests/runbooks/conftest.py's\n")
        monkeypatch.setenv("FAKE_SLURM_CONF", str(conf))
        for name in ("scontrol", "sinfo"):
            monkeypatch.setenv(f"FAKE_SLURM_REAL_{name.upper()}", binary(name))
        return conf


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


def post_json(
    url: str, body: Any, headers: dict[str, str] | None = None, timeout: float = 30
) -> tuple[int, Any]:
    """POST *body* (JSON, or bytes as they are) to *url*: the status and the JSON answer,
    also of an error status."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="POST")
    request.add_header("Content-Type", "application/json")
    for key, value in (headers or {}).items():
        request.add_header(key, value)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


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
        auth = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return post_json(f"{self.url}/alerts", body, {**auth, **(headers or {})})

    def get(self, path: str) -> tuple[int, bytes]:
        with urllib.request.urlopen(f"{self.url}{path}", timeout=10) as response:
            return response.status, response.read()

    def audit(self) -> list[dict[str, Any]]:
        path = Path(self.settings.audit_log)
        return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def start_server() -> Iterator[Callable[..., Running]]:
    started: list[Running] = []

    def start(
        settings: RunbooksConfig,
        slurm_conf: str = "",
        *,
        clusters: Clusters | None = None,
        **backends: Any,
    ) -> Running:
        """The webhook on *settings*, owning *clusters* (default: :data:`TEST_CLUSTERS`,
        all acting through *backends*, with *slurm_conf* as their ``SLURM_CONF``)."""
        if clusters is None:
            if slurm_conf:
                backends["slurm"] = SlurmActions(settings, slurm_conf=slurm_conf)
            clusters = shared(settings, TEST_CLUSTERS, **backends)
        engine = Engine(settings, audit=AuditLog(settings.audit_log), clusters=clusters)
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


#: The repair query the tests' alerts carry: the node's health series, while it reads 1.
REPAIR_QUERY = 'gotthard_test_node_healthy{node="$labels.node"} == 1'


class RepairFeed:
    """A real Prometheus scraping, every second, a text endpoint whose exposition a test
    sets: the health series that repair queries read."""

    def __init__(self, workdir: Path, procs: Processes) -> None:
        self._text = b""
        feed = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                self.send_body(feed._text)

        self.server = serve_http(Handler)
        config = workdir / "prometheus.yml"
        target = f"127.0.0.1:{self.server.server_address[1]}"
        scrape = {"job_name": "health", "static_configs": [{"targets": [target]}]}
        global_ = {"scrape_interval": "1s", "evaluation_interval": "1s"}
        config.write_text(dump_yaml({"global": global_, "scrape_configs": [scrape]}))
        self.url = start_prometheus(procs, config, workdir)

    def expose(self, text: str, expr: str, present: bool) -> None:
        """Expose *text* (exposition format) and wait until *expr* returns a series
        (*present*) or none (stale or gone)."""
        self._text = text.encode()
        what = f"{expr} to {'return a series' if present else 'return nothing'}"
        wait_until(lambda: bool(instant(self.url, expr)) == present, 15, what, interval=0.2)

    def health(self, node: str, value: int | None) -> None:
        """*node*'s health series at *value* (None: the series is gone, so it goes stale),
        once Prometheus has scraped it."""
        line = f'gotthard_test_node_healthy{{node="{node}"}} {value}\n'
        query = REPAIR_QUERY.replace("$labels.node", node)
        self.expose(line if value is not None else "", query, present=value == 1)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="session")
def repair_feed() -> Iterator[RepairFeed]:
    workdir = Path(tempfile.mkdtemp(prefix="gtt-repair-", dir="/tmp"))
    try:
        with Processes(workdir / "logs") as procs:
            feed = RepairFeed(workdir, procs)
            try:
                yield feed
            finally:
                feed.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def with_repair_query(payload: dict[str, Any], query: str = REPAIR_QUERY) -> dict[str, Any]:
    """*payload* with *query* as the ``repair_query`` annotation of each of its alerts."""
    for alert in payload["alerts"]:
        alert["annotations"] = {**alert.get("annotations", {}), "repair_query": query}
    return payload


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


class RecordingKubernetes:
    """Kubernetes actions that only record which node each was asked to act on."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def cordon(self, name: str, alertname: str) -> Outcome:
        self.calls.append(("cordon", name))
        return Outcome("ok", "recorded")

    def uncordon(self, name: str, alertname: str) -> Outcome:
        self.calls.append(("uncordon", name))
        return Outcome("ok", "recorded")


def sandbox_node(sandbox: Sandbox) -> tuple[str, str]:
    """The state and reason of the real Slurm sandbox's node, as sinfo shows them."""
    out = sandbox.run_command(
        [binary("sinfo"), "-h", "-N", "-n", sandbox.node_name, "-o", "%T|%E"]
    ).stdout
    state, reason = out.splitlines()[0].split("|", 1)
    return state.rstrip("*~"), reason


@pytest.fixture
def node_restored(slurm_sandbox: Sandbox) -> Iterator[Sandbox]:
    """The sandbox node, idle before the test and put back to idle after it."""
    wait_until(lambda: sandbox_node(slurm_sandbox)[0] == "idle", 30, "the sandbox node idle")
    try:
        yield slurm_sandbox
    finally:
        if sandbox_node(slurm_sandbox)[0] != "idle":
            slurm_sandbox.run_command(
                [
                    binary("scontrol"),
                    "update",
                    f"NodeName={slurm_sandbox.node_name}",
                    "State=RESUME",
                ],
                check=False,
            )
        wait_until(
            lambda: sandbox_node(slurm_sandbox)[0] == "idle", 30, "the sandbox node idle again"
        )


def sandbox_settings(tmp_path: Path, **overrides: Any) -> RunbooksConfig:
    """Settings for the real sandbox's ``scontrol``/``sinfo``."""
    return settings_for(
        tmp_path,
        scontrol_path=binary("scontrol"),
        sinfo_path=binary("sinfo"),
        limits={"max_partition_fraction": 1.0},  # the sandbox has a single node
        **overrides,
    )
