"""The sandbox is a real, usable single-node Slurm, and `down` stops exactly what `up` started."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path

import pytest

from gotthard.cli import main
from gotthard.sandbox import Sandbox, process_start_time, processes
from gotthard.sandbox.processes import pids_with_environ
from gotthard.sandbox.slurm import stepd_marker
from tests.support.wait import wait_until

pytestmark = pytest.mark.slurm

TERMINAL_JOB_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


def run(env: Mapping[str, str], *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv), capture_output=True, text=True, env=dict(env), timeout=30, check=check
    )


def show(env: Mapping[str, str], kind: str, name: str) -> dict[str, str]:
    """``scontrol -o show KIND NAME`` as a dict (values with spaces are cut, good enough)."""
    out = run(env, "scontrol", "-o", "show", kind, name).stdout
    return dict(
        item.split("=", 1) for item in out.split() if "=" in item and not item.startswith("=")
    )


def wait_job_finished(env: Mapping[str, str], job_id: str, timeout: float = 60.0) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    job: dict[str, str] = {}
    while time.monotonic() < deadline:
        job = show(env, "job", job_id)
        if job.get("JobState") in TERMINAL_JOB_STATES:
            return job
        time.sleep(0.25)
    raise AssertionError(f"job {job_id} not finished after {timeout}s: {job.get('JobState')}")


def stepds_of(sandbox: Sandbox) -> list[int]:
    """Live slurmstepd processes started by ``sandbox``'s slurmd."""
    found = pids_with_environ("slurmstepd", stepd_marker(sandbox))
    return [pid for pid in found if process_start_time(pid) is not None]


def cli(*argv: str) -> int:
    """``gotthard ARGV`` in this process, as the command runs it."""
    return main(list(argv))


def unix_get(socket_path: str, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("localhost", timeout=10)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(socket_path)
    conn.sock = sock
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def http_get(url: str, headers: Mapping[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=dict(headers or {}))
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, response.read()


# --------------------------------------------------------------------------- the node


def test_node_is_idle_with_the_machines_cpus(slurm_sandbox: Sandbox, sandbox_env: dict[str, str]):
    slurm_sandbox.cancel_all()
    out = run(sandbox_env, "sinfo", "-h", "-N", "-o", "%N|%T|%c").stdout
    rows = {line.strip() for line in out.splitlines() if line.strip()}
    assert rows == {f"{slurm_sandbox.node_name}|idle|{os.cpu_count()}"}
    node = show(sandbox_env, "node", slurm_sandbox.node_name)
    assert node["CPUTot"] == str(os.cpu_count())
    meminfo_mb = int(Path("/proc/meminfo").read_text().split()[1]) // 1024
    assert 0 < int(node["RealMemory"]) <= meminfo_mb


def test_partitions_debug_is_default_and_gpu_exists(sandbox_env: dict[str, str]):
    out = run(sandbox_env, "sinfo", "-h", "-o", "%P|%a").stdout
    assert {line.strip() for line in out.splitlines() if line.strip()} == {"debug*|up", "gpu|up"}
    assert show(sandbox_env, "partition", "debug")["Default"] == "YES"
    assert show(sandbox_env, "partition", "gpu")["Default"] == "NO"


def test_node_has_two_gpus_and_is_not_drained(slurm_sandbox: Sandbox, sandbox_env: dict[str, str]):
    node = show(sandbox_env, "node", slurm_sandbox.node_name)
    assert node["Gres"] == "gpu:2"
    state = node["State"]
    assert not any(bad in state for bad in ("DRAIN", "INVAL", "DOWN", "FAIL")), state
    assert run(sandbox_env, "sinfo", "-h", "-N", "-o", "%G").stdout.split() == ["gpu:2", "gpu:2"]


def test_gpu_job_runs(slurm_sandbox: Sandbox, sandbox_env: dict[str, str], tmp_path: Path):
    output = tmp_path / "gpu-job.out"
    job_id = slurm_sandbox.submit(
        "-p",
        "gpu",
        "--gres=gpu:1",
        "-o",
        str(output),
        "--wrap",
        'echo "gpus=$CUDA_VISIBLE_DEVICES"',
    )
    job = wait_job_finished(sandbox_env, job_id)
    assert job["JobState"] == "COMPLETED", job
    assert job["Partition"] == "gpu"
    assert job["ExitCode"] == "0:0"
    assert output.read_text().strip() in ("gpus=0", "gpus=1")


def test_cancel_all_leaves_no_active_jobs(slurm_sandbox: Sandbox, sandbox_env: dict[str, str]):
    for _ in range(3):
        slurm_sandbox.submit("-o", "/dev/null", "--wrap", "sleep 300")
    slurm_sandbox.cancel_all()
    out = run(sandbox_env, "squeue", "-h", "-t", "PENDING,RUNNING,COMPLETING", "-o", "%A").stdout
    assert out.strip() == ""


# --------------------------------------------------------------------------- process bookkeeping


def test_status_reports_every_process_running(slurm_sandbox: Sandbox):
    states = slurm_sandbox.status()
    assert {"munged", "slurmctld", "slurmd"} <= set(states)
    assert all(states.values()), states
    assert slurm_sandbox.slurm_conf.is_file()
    assert slurm_sandbox.env["SLURM_CONF"] == str(slurm_sandbox.slurm_conf)
    assert "/usr/sbin" in slurm_sandbox.env["PATH"].split(os.pathsep)


def test_up_again_is_a_no_op(slurm_sandbox: Sandbox, capsys: pytest.CaptureFixture[str]):
    before = json.loads(slurm_sandbox.state_file.read_text())["processes"]
    slurm_sandbox.up(with_exporter=False, with_prometheus=False)
    assert "already running" in capsys.readouterr().out
    assert json.loads(slurm_sandbox.state_file.read_text())["processes"] == before


def test_down_stops_exactly_its_own_processes(slurm_sandbox: Sandbox, tmp_path: Path):
    bystander = subprocess.Popen(["sleep", "120"])
    # A directory too long for unix socket addresses: sockets move to a short /tmp dir.
    directory = tmp_path / ("long-" + "d" * 60) / "second"
    second = Sandbox.with_free_ports(directory, node_name="gotthard-second", gpus=1)
    assert second.socket_dir != second.directory
    try:
        second.up(with_exporter=False, with_prometheus=False, verbose=False)
        records = json.loads(second.state_file.read_text())["processes"]
        assert [r["name"] for r in records] == ["munged", "slurmctld", "slurmd"]
        assert all(process_start_time(r["pid"]) == r["start_time"] for r in records)
        session_pids = {
            r["pid"] for r in json.loads(slurm_sandbox.state_file.read_text())["processes"]
        }
        assert not session_pids & {r["pid"] for r in records}

        job_id = second.submit("-o", "/dev/null", "--wrap", "sleep 300")
        deadline = time.monotonic() + 30
        while (job := show(second.env, "job", job_id))["JobState"] != "RUNNING":
            assert time.monotonic() < deadline, f"job never started: {job}"
            time.sleep(0.2)
        # RUNNING is the controller's word; slurmd starts the job's slurmstepd just after
        wait_until(lambda: stepds_of(second), 30, "the job's slurmstepd to start")

        second.down(verbose=False)

        assert not second.state_file.exists()
        assert not stepds_of(second)
        assert not second.socket_dir.exists()
        for record in records:
            assert process_start_time(record["pid"]) != record["start_time"], record["name"]
        assert bystander.poll() is None
        assert all(slurm_sandbox.status().values())
        run(slurm_sandbox.env, "sinfo", "-h")
    finally:
        second.down(verbose=False)
        bystander.kill()
        bystander.wait()


def test_down_never_kills_a_recycled_pid(tmp_path: Path):
    impostor = subprocess.Popen(["sleep", "120"])
    try:
        start = process_start_time(impostor.pid)
        assert start is not None
        state = {
            "processes": [
                {"name": "slurmctld", "pid": impostor.pid, "argv": ["x"], "start_time": start + 1}
            ]
        }
        (tmp_path / "state.json").write_text(json.dumps(state))
        sandbox = Sandbox(tmp_path)
        assert sandbox.status() == {"slurmctld": False}
        sandbox.down(verbose=False)
        assert impostor.poll() is None
        assert not (tmp_path / "state.json").exists()
    finally:
        impostor.kill()
        impostor.wait()


def test_down_without_state_is_harmless(tmp_path: Path):
    Sandbox(tmp_path / "nothing").down(verbose=False)
    assert Sandbox(tmp_path / "nothing").status() == {}


# --------------------------------------------------------------------------- controller, REST


def test_controller_down_and_back(slurm_sandbox: Sandbox, sandbox_env: dict[str, str]):
    job_id = slurm_sandbox.submit("-o", "/dev/null", "--wrap", "sleep 300")
    slurm_sandbox.stop_controller()
    try:
        assert slurm_sandbox.status()["slurmctld"] is False
        result = run(sandbox_env, "sinfo", "-h", check=False)
        assert result.returncode != 0
    finally:
        slurm_sandbox.start_controller()
    assert all(slurm_sandbox.status().values())
    assert show(sandbox_env, "job", job_id)["JobId"] == job_id  # state survived the restart
    slurm_sandbox.cancel_all()


def test_slurmrestd_unix_socket(slurm_sandbox: Sandbox):
    url, token = slurm_sandbox.start_slurmrestd("unix")
    try:
        assert token is None
        assert url.startswith("unix:")
        status, body = unix_get(url[len("unix:") :], "/slurm/v0.0.38/nodes")
        assert status == 200
        names = [node["name"] for node in json.loads(body)["nodes"]]
        assert names == [slurm_sandbox.node_name]
    finally:
        assert slurm_sandbox.stop_slurmrestd("unix")
    assert "slurmrestd-unix" not in slurm_sandbox.status()


def test_slurmrestd_jwt(slurm_sandbox: Sandbox):
    url, token = slurm_sandbox.start_slurmrestd("jwt")
    try:
        assert url.startswith("http://127.0.0.1:")
        assert token
        headers = {"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": token}
        status, body = http_get(f"{url}/slurm/v0.0.38/partitions", headers)
        assert status == 200
        names = sorted(p["name"] for p in json.loads(body)["partitions"])
        assert names == ["debug", "gpu"]
        with pytest.raises(urllib.error.HTTPError) as denied:
            http_get(f"{url}/slurm/v0.0.38/ping")
        denied.value.close()
        assert denied.value.code in (401, 403)
    finally:
        assert slurm_sandbox.stop_slurmrestd("jwt")


# --------------------------------------------------------------------------- CLI


def test_cli_status_of_a_sandbox_that_is_not_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    assert cli("sandbox", "status", "--dir", str(tmp_path)) == 1
    assert "not running" in capsys.readouterr().out
    assert cli("sandbox", "down", "--dir", str(tmp_path)) == 0


def test_cli_status_of_the_session_sandbox(
    slurm_sandbox: Sandbox, capsys: pytest.CaptureFixture[str]
):
    assert cli("sandbox", "status", "--dir", str(slurm_sandbox.directory)) == 0
    out = capsys.readouterr().out
    assert "slurmctld" in out
    assert "running" in out


def test_cli_status_json_of_the_session_sandbox(
    slurm_sandbox: Sandbox, capsys: pytest.CaptureFixture[str]
):
    directory = str(slurm_sandbox.directory)
    assert cli("sandbox", "status", "--dir", directory, "--format", "json") == 0
    document = json.loads(capsys.readouterr().out)
    assert document["running"] is True
    rows = {row["kind"]: row for row in document["processes"]}
    assert {"munged", "slurmctld", "slurmd"} <= set(rows)
    assert all(row["state"] == "running" and row["site"] == "local" for row in rows.values())
    assert process_start_time(rows["slurmctld"]["pid"]) is not None


def test_cli_missing_binary_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(processes, "EXTRA_BIN_DIRS", ())
    assert cli("sandbox", "up", "--dir", str(tmp_path / "sb")) == 1
    captured = capsys.readouterr()
    assert captured.err == "error: mungekey not found: run scripts/install-system-deps\n"
    assert not (tmp_path / "sb" / "state.json").exists()


# --------------------------------------------------------------------------- the full site


def test_full_sandbox_serves_metrics_to_prometheus(tmp_path: Path):
    """munge + Slurm + what `deploy render --target local` renders from the sandbox's site
    file (exporter, Alertmanager, webhook, Prometheus), scraped with site/cluster labels."""
    full = Sandbox.with_free_ports(
        tmp_path / "full", node_name="gotthard-full", exporter_poll_interval=1.0
    )
    try:
        full.up(verbose=False)
        assert set(full.status()) == {
            "munged",
            "slurmctld",
            "slurmd",
            "sandbox-slurm-exporter",
            "local-alertmanager",
            "sandbox-runbooks",
            "local-prometheus",
        }
        assert all(full.status().values())
        env_sh = (full.directory / "env.sh").read_text()
        assert f"export SLURM_CONF={full.slurm_conf}" in env_sh
        assert f"export GOTTHARD_CONFIG={full.gotthard_config}" in env_sh

        status, _ = http_get(f"{full.exporter_url}/healthz")
        assert status == 200
        status, body = http_get(f"{full.exporter_url}/metrics")
        assert status == 200
        assert any(line.startswith("gotthard_slurm_") for line in body.decode().splitlines())

        job = "gotthard-slurm-exporter-local-sandbox"
        query = urllib.parse.quote(f'up{{job="{job}",site="local",cluster="sandbox"}}')
        deadline = time.monotonic() + 30
        result: list[dict[str, object]] = []
        while time.monotonic() < deadline:
            _, body = http_get(f"{full.prometheus_url}/api/v1/query?query={query}")
            result = json.loads(body)["data"]["result"]
            if result and result[0]["value"][1] == "1":  # type: ignore[index]
                break
            time.sleep(0.5)
        assert result, "Prometheus never scraped the exporter"
        assert result[0]["value"][1] == "1"  # type: ignore[index]

        # the rules are loaded, Alertmanager is wired, the dashboards are written
        _, body = http_get(f"{full.prometheus_url}/api/v1/rules")
        groups = json.loads(body)["data"]["groups"]
        names = {rule["name"] for group in groups for rule in group["rules"]}
        assert "SlurmControllerDown" in names and len(groups) >= 6
        _, body = http_get(f"{full.prometheus_url}/api/v1/alertmanagers")
        active = json.loads(body)["data"]["activeAlertmanagers"]
        assert [a["url"] for a in active] == [f"{full.alertmanager_url}/api/v2/alerts"]
        status, _ = http_get(f"{full.alertmanager_url}/-/ready")
        assert status == 200
        status, _ = http_get(f"{full.runbooks_url}/healthz")
        assert status == 200
        config = (full.directory / "alertmanager.yml").read_text()
        assert f"{full.runbooks_url}/alerts" in config
        dashboards = sorted(p.name for p in (full.directory / "dashboards").glob("*.json"))
        assert "gotthard-slurm-cluster.json" in dashboards and len(dashboards) >= 7
    finally:
        full.down(verbose=False)
    assert not full.state_file.exists()
