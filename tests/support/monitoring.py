"""Real Prometheus and Alertmanager processes for end-to-end tests, and their helpers.

:class:`Processes` owns child processes (each with a log file) and stops them on exit;
:func:`start_alertmanager` and :func:`start_prometheus` start one on a free port and
wait until it answers ``/-/ready``. :class:`WebhookReceiver` records what Alertmanager
sends; :func:`build_fast_rules` writes the generated rules and Alertmanager
configuration with test-speed timings.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

import pytest
import yaml

from gotthard.monitoring import rules
from gotthard.sandbox import SandboxError, find_binary, free_ports

from .cli import run, run_in_process
from .lifecycle import StopOnExit
from .wait import wait_until


def binary(name: str) -> str:
    """Absolute path of an installed program; the test fails (no traceback) without it."""
    try:
        return find_binary(name)
    except SandboxError as err:
        pytest.fail(str(err), pytrace=False)


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def http_ok(url: str) -> bool:
    """Whether GET *url* answers 200 (any connection error: not yet)."""
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def instant(prometheus: str, expr: str) -> list[Any]:
    """The result vector of the instant query *expr* on the Prometheus at *prometheus*."""
    query = urllib.parse.urlencode({"query": expr})
    return list(get_json(f"{prometheus}/api/v1/query?{query}")["data"]["result"])


def promtool_check_metrics(text: str, allowed: Iterable[str] = ()) -> None:
    """*text* is valid exposition text by Prometheus' own linter: no problem, or only lint
    problems (exit 3) listed in *allowed*."""
    lint = run([binary("promtool"), "check", "metrics"], input=text)
    output = lint.stdout + lint.stderr
    problems = {line.strip() for line in output.splitlines() if line.strip()}
    allowed = set(allowed)
    assert lint.returncode == 0 or (allowed and lint.returncode == 3 and problems <= allowed), (
        output
    )


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short /tmp directory (socket paths and TSDB locks stay short)."""
    path = Path(tempfile.mkdtemp(prefix="gtt-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class Processes(StopOnExit):
    """Child processes whose output goes to ``LOGS/NAME.log``; a context manager that
    terminates them on exit (killing any that do not stop within 10 s)."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.started: list[subprocess.Popen[bytes]] = []
        self._files: list[IO[str]] = []

    def start(
        self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        self.logs.mkdir(parents=True, exist_ok=True)
        self._files.append((self.logs / f"{name}.log").open("w"))
        proc = subprocess.Popen(
            list(argv),
            env=None if env is None else dict(env),
            stdout=self._files[-1],
            stderr=subprocess.STDOUT,
        )
        self.started.append(proc)
        return proc

    def exited(self) -> list[subprocess.Popen[bytes]]:
        return [proc for proc in self.started if proc.poll() is not None]

    def read_logs(self, tail: int = 3000) -> str:
        """The last *tail* characters of every log, for a failure message."""
        return "\n".join(
            f"--- {path.name}\n{path.read_text()[-tail:]}" for path in sorted(self.logs.iterdir())
        )

    def stop(self) -> None:
        for proc in self.started:
            proc.terminate()
        for proc in self.started:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for file in self._files:
            file.close()


def _start_ready(procs: Processes, name: str, program: str, config: Path, *flags: str) -> str:
    """*program* on *config* and a free port, started as *name*; its URL once
    ``/-/ready`` answers."""
    (port,) = free_ports(1)
    argv = [
        binary(program),
        f"--config.file={config}",
        f"--web.listen-address=127.0.0.1:{port}",
        *flags,
    ]
    procs.start(name, argv)
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: http_ok(f"{url}/-/ready"), 15, f"{name} ready")
    return url


def start_alertmanager(procs: Processes, config: Path, workdir: Path) -> str:
    """A real Alertmanager (no clustering) on *config*, data under *workdir*; its URL once
    ready."""
    flags = (f"--storage.path={workdir / 'am'}", "--cluster.listen-address=")
    return _start_ready(procs, "Alertmanager", "prometheus-alertmanager", config, *flags)


def start_prometheus(procs: Processes, config: Path, workdir: Path, *flags: str) -> str:
    """A real Prometheus on *config*, its TSDB under *workdir*, alerts resent every second;
    its URL once ready."""
    fixed = (f"--storage.tsdb.path={workdir / 'prom'}", "--rules.alert.resend-delay=1s")
    return _start_ready(procs, "Prometheus", "prometheus", config, *fixed, *flags)


def serve_http(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """*handler* served on a free port from a daemon thread (``server.shutdown()`` stops)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


#: Content type of Prometheus' text exposition format.
EXPOSITION = "text/plain; version=0.0.4"


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler for test servers: no access log on stderr, one-call answers."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def send_body(self, body: bytes, content_type: str = EXPOSITION, status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class WebhookReceiver:
    """Records every Alertmanager notification: (path, Authorization header, payload)."""

    def __init__(self) -> None:
        self.received: list[tuple[str, str, dict[str, Any]]] = []
        self.lock = threading.Lock()
        owner = self

        class Handler(QuietHandler):
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

        self.server = serve_http(Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

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

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def build_fast_rules(
    out: Path,
    hook: str,
    token_file: Path,
    pager_sites: Iterable[str],
    fast_alerts: Iterable[str],
) -> None:
    """``gotthard rules build`` into *out*, every receiver at the webhook *hook*
    (``/alerts``, ``/pager/SITE``, ``/pager/default``, ``/ticket``), then patched for test
    speed: 1 s Alertmanager grouping and ``for: 0s`` on *fast_alerts*."""
    pagers = [arg for site in pager_sites for arg in ("--pager-url", f"{site}={hook}/pager/{site}")]
    code = run_in_process(
        "rules", "build", "--out", str(out),
        "--webhook-url", f"{hook}/alerts", "--webhook-token-file", str(token_file),
        *pagers, "--pager-fallback-url", f"{hook}/pager/default", "--ticket-url", f"{hook}/ticket",
    )  # fmt: skip
    assert code == 0
    config = load_yaml(out / "alertmanager.yml")
    config["route"].update(group_wait="1s", group_interval="1s", repeat_interval="1h")
    (out / "alertmanager.yml").write_text(rules.dump_yaml(config))
    alerts_doc = load_yaml(out / "alerts.rules.yml")
    fast = set(fast_alerts)
    for group in alerts_doc["groups"]:
        for rule in group["rules"]:
            if rule["alert"] in fast:
                rule["for"] = "0s"
    (out / "alerts.rules.yml").write_text(rules.dump_yaml(alerts_doc))


def write_prometheus_config(
    path: Path,
    *,
    rules_dir: Path,
    alertmanager: str,
    target: str,
    labels: Mapping[str, str],
    **scrape: str,
) -> Path:
    """A 1 s scrape/evaluation ``prometheus.yml``: the built rules of *rules_dir*, alerts
    to the Alertmanager URL *alertmanager*, one ``gotthard`` job scraping *target*
    (``HOST:PORT``) with *labels* (*scrape*: more job settings, e.g. ``scrape_timeout``)."""
    job = {
        "job_name": "gotthard",
        **scrape,
        "static_configs": [{"targets": [target], "labels": dict(labels)}],
    }
    am = urllib.parse.urlparse(alertmanager).netloc
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules_dir / "recording.rules.yml"), str(rules_dir / "alerts.rules.yml")],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [am]}]}]},
        "scrape_configs": [job],
    }
    path.write_text(rules.dump_yaml(config))
    return path


def start_alerting(
    procs: Processes,
    rules_dir: Path,
    workdir: Path,
    *,
    target: str,
    labels: Mapping[str, str],
    prometheus_flags: Sequence[str] = (),
    **scrape: str,
) -> tuple[str, str]:
    """Alertmanager on the built ``alertmanager.yml`` of *rules_dir*, then Prometheus with
    the built rules, scraping *target* (see :func:`write_prometheus_config`; ``promtool
    check config`` must pass first); (Alertmanager URL, Prometheus URL)."""
    am_url = start_alertmanager(procs, rules_dir / "alertmanager.yml", workdir)
    config = write_prometheus_config(
        workdir / "prometheus.yml",
        rules_dir=rules_dir,
        alertmanager=am_url,
        target=target,
        labels=labels,
        **scrape,
    )
    check = run([binary("promtool"), "check", "config", str(config)])
    assert check.returncode == 0, check.stdout + check.stderr
    return am_url, start_prometheus(procs, config, workdir, *prometheus_flags)
