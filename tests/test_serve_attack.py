"""No client without credentials can starve a server: connections held open without a
request or a TLS handshake delay a legitimate scrape by well under a second, at the
exporter, the runbook webhook and the DR daemon (which requires client certificates).
Sized for a few seconds on two cores; ``benchmarks/serve_attack.py`` holds 1,000 and
300 connections and prints the figures.

Also: the unauthenticated budget closes the oldest connection, per address and in
total; their deadlines are short; an authenticated body that never arrives is a 408 with
an audit line and no traceback; ``HTTP/9.9`` gets a ``505`` status line."""

from __future__ import annotations

import http.client
import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest

from gotthard.dr.metrics import DrMetrics, MetricsServer
from gotthard.exporters.web import make_server as make_exporter_server
from gotthard.runbooks.engine import AuditLog, Engine
from gotthard.runbooks.server import make_server as make_runbook_server
from gotthard.serve import Limits, Server, load_web_config, text
from tests.runbooks.conftest import TOKEN, settings_for
from tests.support.svid import SpiffeCA, make_ca
from tests.support.tls import basic, write_web_config

PROMETHEUS = "spiffe://zurich.example/ns/monitoring/sa/prometheus"
LOGIN = basic("prometheus", "s3cret")


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> SpiffeCA:
    return make_ca(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def pki(ca: SpiffeCA, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("pki")
    cert, key = ca.issue(
        directory, "server", "spiffe://zurich.example/ns/gotthard/sa/dr", server=True
    )
    client_cert, client_key = ca.issue(directory, "prometheus", PROMETHEUS)
    return {"cert": cert, "key": key, "client_cert": client_cert, "client_key": client_key}


def make(kind: str, tmp_path: Path, ca: SpiffeCA, pki: dict[str, Path]) -> tuple[Any, Any]:
    """The server *kind* behind the web config it runs with in production, and what to
    close it with."""
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    if kind == "dr":
        path = write_web_config(
            tmp_path / "web.yml",
            pki["cert"],
            pki["key"],
            client_ca=ca.bundle,
            allowed_spiffe_ids=[PROMETHEUS],
        )
        web = load_web_config(path)
        server = MetricsServer(DrMetrics(), "127.0.0.1", 0, lambda: {"ok": True}, web=web)
        return server.start(), server.close
    web = load_web_config(
        write_web_config(tmp_path / "web.yml", pki["cert"], pki["key"], {"prometheus": hashed})
    )
    if kind == "exporter":
        server = make_exporter_server(
            "127.0.0.1", 0, lambda timeout: "up 1\n", default_timeout=5.0, web=web
        )
        return server.start(), server.close
    settings = settings_for(tmp_path)
    engine = Engine(settings, audit=AuditLog(settings.audit_log))
    server = make_runbook_server(settings.listen, engine, TOKEN.encode(), web=web)

    def close() -> None:
        server.close()
        engine.close()

    return server.start(), close


def scrape(kind: str, port: int, ca: SpiffeCA, pki: dict[str, Path]) -> tuple[int, float]:
    """A scrape on a new connection, as Prometheus makes it: status and seconds."""
    context = ssl.create_default_context(cafile=str(ca.bundle))
    headers = {}
    if kind == "dr":
        context.load_cert_chain(str(pki["client_cert"]), str(pki["client_key"]))
    else:
        headers = LOGIN
    began = time.monotonic()
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
    try:
        connection.request("GET", "/metrics", headers=headers)
        reply = connection.getresponse()
        reply.read()
    finally:
        connection.close()
    return reply.status, time.monotonic() - began


def hold(port: int, count: int, source: str) -> list[socket.socket]:
    """*count* TCP connections from *source* that send nothing."""
    socks = []
    for _ in range(count):
        sock = socket.socket()
        sock.bind((source, 0))
        sock.settimeout(5)
        sock.connect(("127.0.0.1", port))
        socks.append(sock)
    return socks


def closed(sock: socket.socket) -> bool:
    """Whether the server has closed *sock* (without waiting)."""
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


@pytest.mark.parametrize("source", ["127.0.0.1", "127.0.0.2"], ids=["same-address", "other"])
@pytest.mark.parametrize("kind", ["exporter", "webhook", "dr"])
def test_held_connections_do_not_delay_a_scrape(kind, source, tmp_path, ca, pki) -> None:
    """200 half-open and 100 idle connections (TLS never started) are held, from the
    scraper's own address or another; every scrape still answers within a second, and
    the connections make no threads."""
    server, close = make(kind, tmp_path, ca, pki)
    attack: list[socket.socket] = []
    try:
        assert scrape(kind, server.port, ca, pki)[0] == 200
        threads = threading.active_count()
        attack = hold(server.port, 200, source)
        time.sleep(0.2)
        attack += hold(server.port, 100, source)
        time.sleep(0.3)
        seconds = []
        for _ in range(3):
            status, took = scrape(kind, server.port, ca, pki)
            assert status == 200
            seconds.append(took)
        assert max(seconds) < 1.0, seconds
        assert threading.active_count() - threads <= Limits().workers
        # the server holds no more of them than its unauthenticated budget
        held = sum(not closed(sock) for sock in attack)
        assert held <= Limits().max_unauthenticated_per_address
    finally:
        for sock in attack:
            sock.close()
        close()


ROUTES = {"GET /metrics": lambda _: text(200, "up 1\n")}


@pytest.fixture
def plain() -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def start(**limits: Any) -> Server:
        server = Server(("127.0.0.1", 0), ROUTES, limits=Limits(**limits)).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def test_the_budget_closes_the_oldest_per_address_then_of_the_biggest_holder(plain) -> None:
    server = plain(max_unauthenticated=6, max_unauthenticated_per_address=4)
    first = hold(server.port, 6, "127.0.0.2")
    time.sleep(0.3)
    # per address: the two oldest went
    assert [closed(s) for s in first] == [True, True, False, False, False, False]
    others = hold(server.port, 3, "127.0.0.3")
    time.sleep(0.3)
    # in total (6): the third newcomer makes room at the address holding the most
    assert [closed(s) for s in first[2:]] == [True, False, False, False]
    assert not any(closed(s) for s in others)
    for sock in first + others:
        sock.close()


def test_unauthenticated_connections_have_short_deadlines(tmp_path, ca, pki) -> None:
    path = write_web_config(
        tmp_path / "web.yml",
        pki["cert"],
        pki["key"],
        limits={"handshake_timeout": 0.5, "header_timeout": 0.5},
    )
    server = Server(("127.0.0.1", 0), ROUTES, web=load_web_config(path)).start()
    try:
        assert server.limits.handshake_timeout == 0.5  # connection_limits from the file
        began = time.monotonic()
        idle = hold(server.port, 1, "127.0.0.1")[0]
        idle.settimeout(5)
        assert idle.recv(1) == b""  # closed without a handshake
        assert time.monotonic() - began < 2
        idle.close()
        # after the handshake, the first request's head has header_timeout
        context = ssl.create_default_context(cafile=str(ca.bundle))
        with (
            socket.create_connection(("127.0.0.1", server.port)) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            began = time.monotonic()
            tls.settimeout(5)
            assert tls.recv(1) == b""
            assert time.monotonic() - began < 2
    finally:
        server.close()


def test_connection_limits_are_checked_like_every_key(tmp_path) -> None:
    from gotthard.serve import WebConfigError

    path = tmp_path / "web.yml"
    path.write_text("connection_limits:\n  max_unauthenticated: many\n")
    with pytest.raises(WebConfigError, match=r"connection_limits\.max_unauthenticated: must be"):
        load_web_config(path)
    path.write_text("connection_limits:\n  max_slots: 3\n")
    with pytest.raises(WebConfigError, match=r"connection_limits: unknown key\(s\): max_slots"):
        load_web_config(path)


# --- bodies that never arrive, unsupported versions --------------------------------------------


def test_a_body_that_never_arrives_is_408_audited_without_traceback(tmp_path, caplog) -> None:
    web = load_web_config(write_web_config(tmp_path / "web.yml", limits={"read_timeout": 0.5}))
    settings = settings_for(tmp_path)
    engine = Engine(settings, audit=AuditLog(settings.audit_log))
    server = make_runbook_server(settings.listen, engine, TOKEN.encode(), web=web).start()
    caplog.set_level(logging.DEBUG)
    try:
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(
                b"POST /alerts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Authorization: Bearer " + TOKEN.encode() + b"\r\nContent-Length: 300\r\n\r\n{"
            )
            began = time.monotonic()
            sock.settimeout(5)
            reply = sock.recv(4096)
            assert time.monotonic() - began < 2
        assert reply.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), reply
        assert b"Connection: close" in reply
    finally:
        server.close()
        engine.close()
    records = [json.loads(line) for line in Path(settings.audit_log).read_text().splitlines()]
    [refusal] = [r for r in records if r.get("http_status") == 408]
    assert refusal["result"] == "rejected" and "1 of 300 body bytes" in refusal["why"]
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


def test_a_body_that_ends_early_is_400_and_elsewhere_408(plain) -> None:
    def echo(request: Any) -> Any:
        return text(200, request.read_body(int(request.header("Content-Length"))).decode())

    server = plain(read_timeout=0.5)
    server.routes["POST /echo"] = echo
    server.methods.add("POST")
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(5)
        assert sock.recv(4096).startswith(b"HTTP/1.1 400 Bad Request\r\n")
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
        sock.settimeout(5)
        assert sock.recv(4096).startswith(b"HTTP/1.1 408 Request Timeout\r\n")


@pytest.mark.parametrize(
    ("line", "status"),
    [
        (b"GET /metrics HTTP/9.9", b"505 HTTP Version Not Supported"),
        (b"GET /metrics HTTP/2.0", b"505 HTTP Version Not Supported"),
        (b"GET /metrics HTTP/x", b"400 Bad Request"),
        (b"GET /metrics", b"400 Bad Request"),
    ],
)
def test_bad_versions_get_a_status_line(plain, line, status) -> None:
    server = plain()
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(line + b"\r\nHost: x\r\n\r\n")
        sock.settimeout(5)
        reply = sock.recv(4096)
    assert reply.startswith(b"HTTP/1.1 " + status + b"\r\n"), reply


def test_http_1_0_and_pipelined_requests(plain) -> None:
    server = plain()
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(
            b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        sock.settimeout(5)
        data = b""
        while data.count(b"up 1\n") < 2:
            chunk = sock.recv(4096)
            assert chunk, data
            data += chunk
    assert data.count(b"HTTP/1.1 200 OK\r\n") == 2
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        sock.settimeout(5)
        reply = b""
        while chunk := sock.recv(4096):  # HTTP/1.0 without keep-alive: closed after it
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 200 OK\r\n") and reply.endswith(b"up 1\n")
