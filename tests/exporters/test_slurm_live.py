"""The Slurm exporter against the real single-node Slurm of the session sandbox."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gotthard.exporters.families import MetricFamily, gauge
from gotthard.exporters.runtime import CollectorRunner, Exporter
from gotthard.exporters.settings import SlurmExporterConfig
from gotthard.exporters.slurm.collector import SlurmCollector
from gotthard.exporters.web import make_server
from gotthard.sandbox import Sandbox
from gotthard.slurm.text import parse_sdiag
from tests.support.threads import in_threads

pytestmark = pytest.mark.slurm


def metrics(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def total(found: dict, name: str, **labels: str) -> float:
    return sum(
        value
        for sample_labels, value in found.get(name, [])
        if all(sample_labels.get(k) == v for k, v in labels.items())
    )


@pytest.fixture
def sandbox(slurm_sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sandbox]:
    """The session Slurm, empty of jobs before and after, its env in os.environ."""
    slurm_sandbox.start_controller()
    slurm_sandbox.cancel_all()
    for key in ("SLURM_CONF", "PATH"):
        monkeypatch.setenv(key, slurm_sandbox.env[key])
    yield slurm_sandbox
    slurm_sandbox.start_controller()
    slurm_sandbox.cancel_all()


def squeue(sandbox: Sandbox, *args: str) -> list[str]:
    result = sandbox.run_command(["squeue", "-h", "--states=all", *args])
    return [line for line in result.stdout.splitlines() if line.strip()]


def wait_for(predicate, timeout: float = 30.0, what: str = "condition") -> None:
    stop = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > stop:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def once(sandbox: Sandbox, *args: str, config: str = "") -> str:
    env = sandbox.env
    if config:
        env["GOTTHARD_CONFIG"] = config
    result = subprocess.run(
        [sys.executable, "-m", "gotthard", "exporter", "--once", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_exported_jobs_nodes_and_partitions_match_squeue_and_sinfo(sandbox: Sandbox) -> None:
    cpus = int(sandbox.run_command(["sinfo", "-h", "-o", "%c"]).stdout.split()[0])
    running = sandbox.submit("-p", "debug", "-c", "1", "--wrap", "sleep 300")
    gpu_job = sandbox.submit("-p", "gpu", "-c", "1", "--gres=gpu:1", "--wrap", "sleep 300")
    wait_for(lambda: len(squeue(sandbox, "-t", "RUNNING")) == 2, what="two running jobs")
    # needs every CPU of the node: pending for resources while the others run
    big = sandbox.submit("-p", "debug", "-c", str(cpus), "--wrap", "sleep 300")
    held = sandbox.submit("-p", "debug", "--hold", "-A", "physics", "--wrap", "true")
    wait_for(
        lambda: any(line.endswith("Resources") for line in squeue(sandbox, "-o", "%i %r")),
        what="the big job to pend on Resources",
    )

    found = metrics(once(sandbox))

    assert total(found, "gotthard_slurm_up") == 1
    # every (state, partition) count equals squeue's
    expected = Counter(tuple(line.split()) for line in squeue(sandbox, "-o", "%T %P"))
    for (state, partition), count in expected.items():
        assert (
            total(found, "gotthard_slurm_jobs", state=state.lower(), partition=partition) == count
        )
    assert total(found, "gotthard_slurm_jobs") == sum(expected.values())
    assert total(found, "gotthard_slurm_jobs", account="physics", state="pending") == 1
    assert total(found, "gotthard_slurm_jobs_pending", partition="debug", reason="Resources") == 1
    assert total(found, "gotthard_slurm_jobs_pending", partition="debug", reason="JobHeldUser") == 1
    assert total(found, "gotthard_slurm_job_gpus", state="running", partition="gpu") == 1
    assert total(found, "gotthard_slurm_job_cpus", state="pending", partition="debug") == cpus + 1
    info_ids = {labels["job_id"] for labels, _ in found["gotthard_slurm_job_info"]}
    assert info_ids == {running, gpu_job}
    assert big not in info_ids and held not in info_ids

    # nodes and partitions against sinfo
    cpu_states = sandbox.run_command(["sinfo", "-h", "-N", "-o", "%C"]).stdout.split()[0]
    alloc, idle, _other, node_total = (int(x) for x in cpu_states.split("/"))
    node = sandbox.node_name
    assert total(found, "gotthard_slurm_node_cpus", node=node, state="alloc") == alloc == 2
    assert total(found, "gotthard_slurm_node_cpus", node=node, state="idle") == idle
    assert total(found, "gotthard_slurm_node_cpus", node=node, state="total") == node_total == cpus
    assert total(found, "gotthard_slurm_node_gpus", node=node, state="total") == 2
    assert total(found, "gotthard_slurm_node_gpus", node=node, state="alloc") == 1
    ((labels, load),) = found["gotthard_slurm_node_cpu_load"]
    assert labels["node"] == node and load >= 0  # the OS load slurmd reported
    assert total(found, "gotthard_slurm_partition_gpus", partition="gpu", state="idle") == 1
    assert total(found, "gotthard_slurm_partition_cpus", partition="debug", state="alloc") == 2
    sinfo_state = sandbox.run_command(["sinfo", "-h", "-N", "-p", "debug", "-o", "%T"]).stdout
    assert total(found, "gotthard_slurm_nodes", partition="debug", state=sinfo_state.strip()) == 1
    assert total(found, "gotthard_slurm_probe_success", op="ping") == 1
    assert total(found, "gotthard_slurm_probe_success", op="submit") == 1
    assert total(found, "gotthard_slurm_scheduler_threads") >= 1
    assert total(found, "gotthard_slurm_rpc_calls_total", type="REQUEST_JOB_INFO") >= 1


def test_a_drained_node_is_reported_with_its_reason(sandbox: Sandbox) -> None:
    node = sandbox.node_name
    sandbox.run_command(
        ["scontrol", "update", f"nodename={node}", "state=drain", "reason=gpu lost"]
    )
    try:
        found = metrics(once(sandbox))
        assert total(found, "gotthard_slurm_nodes", partition="gpu", state="drained") == 1
        assert total(found, "gotthard_slurm_node_flags", partition="gpu", flag="drain") == 1
        ((labels, _),) = found["gotthard_slurm_node_info"]
        assert labels["state"] == "idle+drain" and labels["reason"] == "gpu lost"
    finally:
        sandbox.run_command(["scontrol", "update", f"nodename={node}", "state=resume"])


class Heartbeat:
    """A second collector that always works, to show isolation from Slurm's trouble."""

    name = "heartbeat"
    poll_interval = 0.0

    def poll(self) -> float:
        return time.time()

    def render(self, snapshot: float) -> list[MetricFamily]:
        family = gauge("heartbeat_seconds", "Time of the poll.")
        family.add((), snapshot)
        return [family]

    def snapshot_errors(self, snapshot: float) -> int:
        return 0


def test_controller_down_shows_slurm_up_0_within_the_scrape_timeout(sandbox: Sandbox) -> None:
    config = SlurmExporterConfig(poll_interval_seconds=0.5, command_timeout_seconds=3.0)
    exporter = Exporter([CollectorRunner(SlurmCollector(config)), CollectorRunner(Heartbeat())])
    assert total(metrics(exporter.scrape(timeout=5)), "gotthard_slurm_up") == 1
    sandbox.stop_controller()
    scrape_timeout = 2.0
    deadline = time.monotonic() + 30
    while True:
        started = time.monotonic()
        found = metrics(exporter.scrape(timeout=scrape_timeout))
        assert time.monotonic() - started < scrape_timeout + 0.5
        assert total(found, "gotthard_collector_up", collector="heartbeat") == 1
        assert total(found, "heartbeat_seconds") > 0
        if total(found, "gotthard_slurm_up") == 0:
            break
        assert time.monotonic() < deadline, "gotthard_slurm_up never went to 0"
        time.sleep(0.3)
    # with the controller down, no stale job data is passed off as current
    assert "gotthard_slurm_jobs" not in found
    assert total(found, "gotthard_collector_errors_total", collector="slurm") >= 1
    sandbox.start_controller()
    wait_for(
        lambda: total(metrics(exporter.scrape(timeout=5)), "gotthard_slurm_up") == 1,
        what="gotthard_slurm_up back to 1",
    )


def test_once_with_the_controller_stopped_reports_slurm_up_0_and_the_error(
    sandbox: Sandbox, tmp_path
) -> None:
    # A scrape timeout shorter than the commands need to give up: --once still waits for
    # its poll (up to the command timeout) and prints what the served mode would.
    config = tmp_path / "site.toml"
    config.write_text(
        "[exporter]\nscrape_timeout_seconds = 0.5\n"
        "[exporter.slurm]\ncommand_timeout_seconds = 20\nprobe = false\n"
    )
    sandbox.stop_controller()
    found = metrics(once(sandbox, config=str(config)))
    assert total(found, "gotthard_slurm_up") == 0
    assert "gotthard_slurm_jobs" not in found
    assert total(found, "gotthard_collector_up", collector="slurm") == 1
    assert total(found, "gotthard_collector_errors_total", collector="slurm") >= 1
    assert total(found, "gotthard_collector_duration_seconds", collector="slurm") > 0


def test_reservations_are_exported_as_scontrol_shows_them(sandbox: Sandbox) -> None:
    node = sandbox.node_name
    sandbox.run_command(
        [
            "scontrol",
            "create",
            "reservation",
            "reservationname=gotthard_maint",
            "starttime=now+3600",
            "duration=60",
            f"nodes={node}",
            "users=root",
            "flags=maint",
        ]
    )
    try:
        found = metrics(once(sandbox))
    finally:
        sandbox.run_command(["scontrol", "delete", "reservation=gotthard_maint"])
    (labels,) = [labels for labels, _ in found["gotthard_slurm_reservation_info"]]
    assert labels["reservation"] == "gotthard_maint"
    assert labels["state"] == "inactive"
    assert "maint" in labels["flags"].split(",")
    assert total(found, "gotthard_slurm_reservation_nodes", reservation="gotthard_maint") == 1
    assert total(found, "gotthard_slurm_scheduler_jobs_total", event="submitted") >= 0
    # an idle cluster still has gotthard_slurm_jobs series, at 0, for every partition
    assert total(found, "gotthard_slurm_jobs", state="running", partition="debug") == 0
    assert {labels["partition"] for labels, _ in found["gotthard_slurm_jobs"]} == {"debug", "gpu"}


def _job_info_rpcs(sandbox: Sandbox) -> int:
    stats, _ = parse_sdiag(sandbox.run_command(["sdiag"]).stdout)
    return stats.rpc_by_type["REQUEST_JOB_INFO"].count


def test_twenty_scrapers_for_ten_seconds_poll_slurm_once_per_interval(sandbox: Sandbox) -> None:
    interval, duration = 2.0, 10.0
    config = SlurmExporterConfig(poll_interval_seconds=interval)
    runner = CollectorRunner(SlurmCollector(config))
    exporter = Exporter([runner])
    server = make_server("127.0.0.1", 0, exporter.scrape, default_timeout=5)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    before = _job_info_rpcs(sandbox)
    stop = time.monotonic() + duration

    def scraper() -> int:
        count = 0
        while time.monotonic() < stop:
            with urllib.request.urlopen(url, timeout=10) as response:
                assert b"gotthard_slurm_up 1" in response.read()
            count += 1
        return count

    try:
        scrapes = in_threads([scraper] * 20)  # raises what any scraper raised
    finally:
        server.shutdown()
        server.server_close()
    allowed = math.ceil(duration / interval) + 1
    # slurmctld's own count of squeue's REQUEST_JOB_INFO (sdiag itself sends none)
    assert _job_info_rpcs(sandbox) - before <= allowed
    assert runner.polls <= allowed
    assert sum(scrapes) > 100  # the scrapers really hammered the exporter


def test_sandbox_env_is_what_the_exporter_needs(sandbox: Sandbox) -> None:
    assert os.environ["SLURM_CONF"] == str(sandbox.slurm_conf)
