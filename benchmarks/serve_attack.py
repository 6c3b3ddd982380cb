#!/usr/bin/env python3
"""Legitimate scrape latency while an unauthenticated client holds connections open.

Against each of the three servers, each in a process of its own, behind the web configs
they run with in production:

* ``exporter``: TLS and basic auth (``gotthard exporter --web.config``);
* ``webhook``: TLS and basic auth for ``/metrics`` (``gotthard runbooks serve``);
* ``dr``: TLS requiring a client certificate from the SPIFFE test CA (``gotthard dr daemon``).

Scenarios, each for every server:

* ``baseline``: no attack;
* ``half_open``: ``--half-open`` (1,000) TCP connections that send nothing, held;
* ``idle``: ``--idle`` (300) TCP connections that never start TLS, held while the
  scrapes go on for longer than the old 10 s handshake deadline (``--idle-seconds``);
* ``churn``: ``--idle`` connections that reconnect as soon as the server closes one.

The attacking connections come from ``--attacker-address`` (127.0.0.2: another client
than the scraper, as on a real network; pass 127.0.0.1 to attack from the scraper's own
address). A scrape is what Prometheus does after losing its keep-alive connection: a new
connection, TLS handshake (with the client SVID for ``dr``), ``GET /metrics`` with basic
auth where configured; it fails after ``--timeout`` seconds. Printed: one JSON line per
server and scenario (scrapes answered within 1 s and 2 s, latency min/median/max in ms,
how many attacking connections were connected and how many the server still held at the
end), then a JSON summary. ``--source DIR`` imports ``gotthard`` from another tree (a
checkout of an older commit) to measure before and after.

The soft RLIMIT_NOFILE is raised to the hard limit (the attack needs ~2,700 descriptors
across the two processes).
"""

from __future__ import annotations

import argparse
import base64
import http.client
import importlib.util
import json
import multiprocessing
import resource
import selectors
import socket
import ssl
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ROLES = ("exporter", "webhook", "dr")
TOKEN = "benchmark-token-0123456789"
PASSWORD = "s3cret"
CLIENT_ID = "spiffe://zurich.example/ns/monitoring/sa/prometheus"


def _svid_helper() -> Any:
    spec = importlib.util.spec_from_file_location("svid_helper", ROOT / "tests/support/svid.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["svid_helper"] = module
    spec.loader.exec_module(module)
    return module


def prepare(directory: Path) -> dict[str, Path]:
    """CA, server certificate, client SVID and the three web configs."""
    import bcrypt

    helper = _svid_helper()
    ca = helper.make_ca(directory / "ca", "zurich.example")
    cert, key = ca.issue(
        directory, "server", "spiffe://zurich.example/ns/gotthard/sa/server", server=True
    )
    client_cert, client_key = ca.issue(directory, "client", CLIENT_ID)
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=10)).decode()
    tls = f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
    users = f"basic_auth_users:\n  prometheus: '{hashed}'\n"
    mtls = f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {ca.bundle}\n"
    files = {
        "bundle": ca.bundle,
        "client_cert": client_cert,
        "client_key": client_key,
        "exporter": directory / "exporter.yml",
        "webhook": directory / "webhook.yml",
        "dr": directory / "dr.yml",
    }
    files["exporter"].write_text(tls + users)
    files["webhook"].write_text(tls + users)
    files["dr"].write_text(tls + mtls)
    (directory / "token").write_text(TOKEN)
    (directory / "token").chmod(0o600)
    return files


def serve(role: str, directory: str, source: str, port: Any) -> None:
    """In the child: build the role's server and serve until killed."""
    sys.path.insert(0, source)
    from gotthard.serve import load_web_config

    web = load_web_config(Path(directory) / f"{role}.yml")
    server: Any
    if role == "exporter":
        from gotthard.exporters.web import make_server

        server = make_server("127.0.0.1", 0, lambda timeout: "up 1\n", default_timeout=5.0, web=web)
    elif role == "webhook":
        from gotthard.runbooks.engine import AuditLog, Engine
        from gotthard.runbooks.server import make_server as make_webhook
        from gotthard.runbooks.settings import RunbooksConfig

        settings = RunbooksConfig.model_validate(
            {
                "listen": "127.0.0.1:0",
                "audit_log": f"{directory}/audit.jsonl",
                "kill_switch_file": f"{directory}/kill-switch",
            }
        )
        engine = Engine(settings, audit=AuditLog(settings.audit_log))
        server = make_webhook("127.0.0.1:0", engine, TOKEN.encode(), web=web)
    else:
        from gotthard.dr.metrics import DrMetrics, MetricsServer

        server = MetricsServer(DrMetrics(), "127.0.0.1", 0, lambda: {"ok": True}, web=web)
    port.value = server.port
    server.serve_forever()


def scrape(role: str, port: int, files: dict[str, Path], timeout: float) -> float | None:
    """Seconds for one scrape on a new connection, or None when it failed."""
    context = ssl.create_default_context(cafile=str(files["bundle"]))
    headers = {}
    if role == "dr":
        context.load_cert_chain(str(files["client_cert"]), str(files["client_key"]))
    else:
        token = base64.b64encode(f"prometheus:{PASSWORD}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    began = time.monotonic()
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=timeout)
    try:
        connection.request("GET", "/metrics", headers=headers)
        reply = connection.getresponse()
        reply.read()
        ok = reply.status == 200
    except (OSError, http.client.HTTPException):
        ok = False
    finally:
        connection.close()
    elapsed = time.monotonic() - began
    return elapsed if ok and elapsed <= timeout else None


def connect_many(port: int, count: int, source: str, wait: float = 5.0) -> list[socket.socket]:
    """*count* TCP connections from *source*, connected in parallel (non-blocking)."""
    pending: dict[socket.socket, None] = {}
    with selectors.DefaultSelector() as selector:
        for _ in range(count):
            sock = socket.socket()
            sock.setblocking(False)
            sock.bind((source, 0))
            sock.connect_ex(("127.0.0.1", port))
            selector.register(sock, selectors.EVENT_WRITE)
            pending[sock] = None
        connected: list[socket.socket] = []
        deadline = time.monotonic() + wait
        while pending and time.monotonic() < deadline:
            for key, _ in selector.select(max(deadline - time.monotonic(), 0)):
                sock = key.fileobj  # type: ignore[assignment]
                selector.unregister(sock)
                del pending[sock]  # type: ignore[arg-type]
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:  # type: ignore[union-attr]
                    connected.append(sock)  # type: ignore[arg-type]
                else:
                    sock.close()  # type: ignore[union-attr]
    for sock in pending:
        sock.close()
    return connected


def still_open(socks: list[socket.socket]) -> int:
    """How many of *socks* the server has not closed."""
    alive = 0
    for sock in socks:
        try:
            if sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT):
                alive += 1
        except BlockingIOError:
            alive += 1
        except OSError:
            pass
    return alive


class Churn:
    """*count* connections that reconnect as soon as the server closes one."""

    def __init__(self, port: int, count: int, source: str) -> None:
        self.port, self.source = port, source
        self.socks = connect_many(port, count, source)
        self.reconnects = 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with selectors.DefaultSelector() as selector:
            for sock in self.socks:
                selector.register(sock, selectors.EVENT_READ)
            while not self._stop.is_set():
                for key, _ in selector.select(0.1):
                    sock = key.fileobj
                    selector.unregister(sock)
                    sock.close()  # type: ignore[union-attr]
                    self.socks.remove(sock)  # type: ignore[arg-type]
                    for new in connect_many(self.port, 1, self.source, wait=1.0):
                        selector.register(new, selectors.EVENT_READ)
                        self.socks.append(new)
                        self.reconnects += 1

    def stop(self) -> list[socket.socket]:
        self._stop.set()
        self.thread.join()
        return self.socks


def scenario(
    role: str, name: str, port: int, files: dict[str, Path], args: argparse.Namespace
) -> dict[str, Any]:
    count = {"baseline": 0, "half_open": args.half_open}.get(name, args.idle)
    churn = None
    socks: list[socket.socket] = []
    if name == "churn":
        churn = Churn(port, count, args.attacker_address)
        socks = churn.socks
    elif count:
        socks = connect_many(port, count, args.attacker_address)
    connected = len(socks)
    time.sleep(0.5)  # the server has seen them all
    spread = args.idle_seconds if name in ("idle", "churn") else 0.0
    latencies: list[float | None] = []
    began = time.monotonic()
    for index in range(args.scrapes):
        if spread:
            time.sleep(max(began + index * spread / args.scrapes - time.monotonic(), 0))
        latencies.append(scrape(role, port, files, args.timeout))
    if churn is not None:
        socks = churn.stop()
    held = still_open(socks)
    for sock in socks:
        sock.close()
    time.sleep(0.5)
    done = [t for t in latencies if t is not None]
    row: dict[str, Any] = {
        "server": role,
        "scenario": name,
        "attack_connections": count,
        "connected": connected,
        "still_held_by_server": held,
        "scrapes": len(latencies),
        "ok_within_1s": sum(t <= 1.0 for t in done),
        "ok_within_2s": sum(t <= 2.0 for t in done),
        "failed": len(latencies) - len(done),
        "latency_ms": {
            "min": round(min(done) * 1000, 1) if done else None,
            "median": round(statistics.median(done) * 1000, 1) if done else None,
            "max": round(max(done) * 1000, 1) if done else None,
        },
    }
    if churn is not None:
        row["reconnects"] = churn.reconnects
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", default=str(ROOT), help="tree to import gotthard from")
    parser.add_argument("--servers", default=",".join(ROLES))
    parser.add_argument("--scenarios", default="baseline,half_open,idle,churn")
    parser.add_argument("--half-open", type=int, default=1000)
    parser.add_argument("--idle", type=int, default=300)
    parser.add_argument("--idle-seconds", type=float, default=12.0)
    parser.add_argument("--scrapes", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("--attacker-address", default="127.0.0.2")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 8192 if hard == resource.RLIM_INFINITY else min(hard, 65536)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    rows = []
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="gotthard-attack-") as tmp:
        files = prepare(Path(tmp))
        for role in args.servers.split(","):
            port = context.Value("i", 0)
            child = context.Process(target=serve, args=(role, tmp, args.source, port), daemon=True)
            child.start()
            deadline = time.monotonic() + 60
            while not port.value and time.monotonic() < deadline:
                time.sleep(0.05)
            try:
                for name in args.scenarios.split(","):
                    row = scenario(role, name, port.value, files, args)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
            finally:
                child.kill()
                child.join()
    answered = "{ok_within_1s}/{scrapes} within 1 s, {ok_within_2s}/{scrapes} within 2 s"
    summary = {
        "summary": {f"{row['server']}/{row['scenario']}": answered.format(**row) for row in rows},
        "source": args.source,
        "rlimit_nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
    }
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
