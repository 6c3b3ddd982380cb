"""One daemon lifecycle (:mod:`gotthard.daemon`): the exporter, the runbook webhook and
the DR daemon run as real processes, log in one format, answer ``/healthz`` once ready,
and stop cleanly (exit 0, the port closed) on SIGTERM and on SIGINT."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gotthard import config
from gotthard.daemon import Daemon
from gotthard.exporters.web import make_server
from gotthard.sandbox import free_ports
from tests.dr.emulator import dr_resources
from tests.dr.sitefiles import site_file
from tests.support.cli import ROOT, gotthard_argv
from tests.support.kube import EmulatorThread
from tests.support.monitoring import http_ok
from tests.support.wait import wait_until

FIXTURES = ROOT / "tests" / "fixtures"
#: One log line of every daemon: time, level, logger, message.
LOG_LINE = re.compile(
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: \S.*"
)


def exporter_argv(tmp_path: Path, listen: str) -> list[str]:
    site = tmp_path / "site.toml"
    site.write_text(f'[exporter.slurm]\nbin_dir = "{FIXTURES / "recorded-slurm-bin"}"\n')
    return ["--config", str(site), "exporter", "--listen", listen]


def runbooks_argv(tmp_path: Path, listen: str) -> list[str]:
    token = tmp_path / "token"
    token.write_text("a-token-of-32-characters-or-so!!\n")
    token.chmod(0o600)
    audit = tmp_path / "audit.jsonl"
    files = ("--token-file", str(token), "--audit-log", str(audit))
    return ["runbooks", "serve", "--listen", listen, *files]


@pytest.fixture
def dr_argv(kube_emulator: Callable[..., EmulatorThread]) -> Callable[[Path, str], list[str]]:
    k8s = kube_emulator(*dr_resources())

    def argv(tmp_path: Path, listen: str) -> list[str]:
        site = site_file(tmp_path, k8s, listen=listen)
        return ["--config", str(site), "dr", "daemon"]

    return argv


@pytest.fixture(params=["exporter", "runbooks", "dr"])
def daemon(request: pytest.FixtureRequest) -> tuple[str, Callable[[Path, str], list[str]]]:
    if request.param == "dr":
        return "dr", request.getfixturevalue("dr_argv")
    return request.param, {"exporter": exporter_argv, "runbooks": runbooks_argv}[request.param]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_daemon_stops_cleanly_on_a_signal_and_logs_in_one_format(
    tmp_path: Path,
    daemon: tuple[str, Callable[[Path, str], list[str]]],
    signum: signal.Signals,
) -> None:
    name, make_argv = daemon
    (port,) = free_ports(1)
    argv = gotthard_argv(*make_argv(tmp_path, f"127.0.0.1:{port}"))
    env = {k: v for k, v in os.environ.items() if k != config.ENV_VAR}
    log = tmp_path / "stderr.log"
    with open(log, "wb") as stderr:
        process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=stderr, stderr=stderr)
    try:
        healthz = f"http://127.0.0.1:{port}/healthz"
        wait_until(lambda: http_ok(healthz), 30, lambda: f"{name} to be ready:\n{log.read_text()}")
        process.send_signal(signum)
        assert process.wait(timeout=30) == 0, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    lines = log.read_text().splitlines()
    assert [line for line in lines if not LOG_LINE.fullmatch(line)] == []
    messages = [line.split(": ", 1)[1] for line in lines if "gotthard.daemon:" in line]
    assert messages[-3:] == [
        f"{name}: ready",
        f"{name}: {signum.name}: stopping",
        f"{name}: stopped",
    ]
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def _healthz(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=2) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@pytest.fixture
def gated() -> Iterator[tuple[Daemon, threading.Event, threading.Event, threading.Thread]]:
    """A daemon (the exporter's routes) whose start-up and whose work's shutdown each
    wait for an event of the test; run on a thread (no signal handlers there)."""
    started, finish = threading.Event(), threading.Event()
    interrupted = threading.Event()
    server = make_server("127.0.0.1", 0, lambda timeout: "up 1\n", default_timeout=5.0)

    def work() -> None:
        interrupted.wait()
        finish.wait()  # a slow shutdown of the work (the DR scheduler's, say)

    lifecycle = Daemon("test", server, start=started.wait, work=work, interrupt=interrupted.set)
    thread = threading.Thread(target=lifecycle.run)
    thread.start()
    yield lifecycle, started, finish, thread
    started.set()
    finish.set()
    lifecycle.stop()
    thread.join(10)


def test_healthz_says_starting_then_the_server_answers_then_stopping(
    gated: tuple[Daemon, threading.Event, threading.Event, threading.Thread],
) -> None:
    lifecycle, started, finish, thread = gated
    url = lifecycle.server.url
    wait_until(lambda: _healthz(url) == (503, "starting\n"), 10, "/healthz to say starting")
    started.set()
    wait_until(lambda: _healthz(url) == (200, "ok\n"), 10, "/healthz to say ok")
    lifecycle.stop()
    assert _healthz(url) == (503, "stopping\n")  # the work is still shutting down
    finish.set()
    thread.join(10)
    assert not thread.is_alive()
    with pytest.raises(OSError):
        _healthz(url)
