"""The shared HTTP(S) serving layer over real sockets: TLS handshakes off the accept loop,
keep-alive speed, timeouts, certificate reload, basic auth, and the
runbook webhook and DR daemon behind a web config."""

from __future__ import annotations

import gzip
import http.client
import json
import os
import shutil
import socket
import ssl
import statistics
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gotthard import exposition
from gotthard.dr.metrics import DrMetrics, MetricsServer
from gotthard.exporters.web import make_server as make_exporter_server
from gotthard.runbooks.engine import AuditLog, Engine
from gotthard.runbooks.server import make_server as make_runbook_server
from gotthard.serve import (
    BasicAuth,
    Limits,
    Request,
    Response,
    Server,
    WebConfig,
    load_web_config,
    text,
)
from tests.runbooks.conftest import TOKEN, sample_payload, settings_for
from tests.support.tls import basic, make_certificate, write_web_config

ROUTES: dict[str, Callable[[Request], Response]] = {"GET /metrics": lambda _: text(200, "up 1\n")}


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_certificate(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def start() -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def start(
        routes: dict[str, Callable[[Request], Response]] = ROUTES,
        web: WebConfig | None = None,
        **limits: Any,
    ) -> Server:
        server = Server(("127.0.0.1", 0), routes, web=web, limits=Limits(**limits)).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def tls_web(tmp_path: Path, cert: Path, key: Path, **users: str) -> WebConfig:
    return load_web_config(write_web_config(tmp_path / "web.yml", cert, key, users))


def client_context(cafile: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cafile))


def get(
    url: str, headers: dict[str, str] | None = None, context: ssl.SSLContext | None = None
) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def closed_within(sock: socket.socket, seconds: float) -> float:
    """Seconds until the server closes ``sock`` (reads and drops what it sends)."""
    began = time.monotonic()
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass  # closed with our unread bytes in its buffer
    return time.monotonic() - began


# --- TLS off the accept loop, keep-alive speed --------------------------------------------------


def test_idle_tls_connections_do_not_delay_a_scrape(tmp_path, certificate, start) -> None:
    server = start(web=tls_web(tmp_path, *certificate))
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(50)]
    try:
        time.sleep(0.2)  # all accepted, none has sent a ClientHello
        began = time.monotonic()
        status, body = get(server.url + "/metrics", context=client_context(certificate[0]))
        assert (status, body) == (200, b"up 1\n")
        assert time.monotonic() - began < 1.0
    finally:
        for sock in idle:
            sock.close()


def test_keep_alive_serves_100_scrapes_in_under_a_second(start) -> None:
    server = start()
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    began = time.monotonic()
    sockets = set()
    for _ in range(100):
        connection.request("GET", "/metrics")
        reply = connection.getresponse()
        assert reply.status == 200 and reply.read() == b"up 1\n"
        sockets.add(connection.sock)
    assert len(sockets) == 1  # one connection for all of them
    assert time.monotonic() - began < 1.0
    connection.close()


# --- timeouts (the connection budgets: tests/test_serve_attack.py) ----------------------------


def test_an_idle_keep_alive_connection_is_closed(start) -> None:
    server = start(idle_timeout=0.5)
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.settimeout(5)
        assert sock.recv(4096).startswith(b"HTTP/1.1 200 OK\r\n")
        assert 0.3 < closed_within(sock, 5) < 2.0


def test_a_client_trickling_its_headers_is_cut_off(start) -> None:
    server = start(read_timeout=0.5, idle_timeout=30)
    began = time.monotonic()
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        data = b"GET /metrics HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 1000
        try:
            for byte in data:
                sock.sendall(bytes([byte]))
                time.sleep(0.02)  # each byte well inside any per-read timeout
                assert time.monotonic() - began < 5, "never cut off"
        except OSError:
            pass  # the server closed while we were still sending
        closed_within(sock, 5)
    assert time.monotonic() - began < 3


# --- certificate reload -------------------------------------------------------------------------


def peer_certificate(port: int) -> bytes:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port)) as raw, context.wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def der(cert: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(cert.read_text())


def test_a_replaced_certificate_is_served_at_the_next_handshake(tmp_path, start) -> None:
    live = tmp_path / "live"
    first = make_certificate(tmp_path / "first", "first")
    second = make_certificate(tmp_path / "second", "second")
    live.mkdir()
    for source, name in zip(first, ("server.crt", "server.key"), strict=True):
        shutil.copy(source, live / name)
    web = tls_web(tmp_path, live / "server.crt", live / "server.key")
    server = start(web=web, tls_reload_seconds=0)
    assert peer_certificate(server.port) == der(first[0])
    for source, name in zip(second, ("server.crt", "server.key"), strict=True):
        shutil.copy(source, tmp_path / "new")
        os.replace(tmp_path / "new", live / name)
    assert peer_certificate(server.port) == der(second[0])
    # a broken replacement is logged and the last good certificate stays
    (live / "server.crt").write_text("not a certificate\n")
    assert peer_certificate(server.port) == der(second[0])


# --- basic auth ---------------------------------------------------------------------------------


def test_unknown_users_cost_as_much_as_wrong_passwords() -> None:
    auth = BasicAuth({"prometheus": bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=10))})

    def seconds(user: str) -> float:
        """CPU seconds of this thread for one check (bcrypt runs here): what the check
        costs, not how busy the machine was."""
        header = basic(user, "wrong")["Authorization"]
        began = time.thread_time()
        assert not auth.check(header)
        return time.thread_time() - began

    runs = [(seconds("prometheus"), seconds("nobody")) for _ in range(3)]
    known = statistics.median(k for k, _ in runs)
    unknown = statistics.median(u for _, u in runs)
    assert 1 / 3 < unknown / known < 3, (known, unknown)


def test_long_passwords_are_401_not_500_and_truncated_like_bcrypt(tmp_path, start) -> None:
    long = "p" * 100
    hashed = bcrypt.hashpw(long.encode()[:72], bcrypt.gensalt(rounds=4)).decode()
    web = load_web_config(write_web_config(tmp_path / "web.yml", users={"prometheus": hashed}))
    server = start(web=web)
    url = server.url + "/metrics"
    assert get(url, basic("prometheus", "q" * 100))[0] == 401
    assert get(url, basic("nobody", "q" * 100))[0] == 401
    assert get(url, basic("prometheus", long)) == (200, b"up 1\n")


# --- small API behaviours -----------------------------------------------------------------------


def test_head_errors_and_unknown_methods(start) -> None:
    def broken(request: Request) -> Response:
        raise RuntimeError("boom")

    server = start({**ROUTES, "GET /broken": broken})
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    connection.request("HEAD", "/metrics")
    reply = connection.getresponse()
    assert reply.status == 200 and reply.getheader("Content-Length") == "5"
    assert reply.read() == b""
    assert get(server.url + "/broken")[0] == 500
    assert get(server.url + "/nope") == (404, b"Not found\n")
    connection.request("POST", "/metrics", body=b"{}")
    assert connection.getresponse().status == 501
    connection.close()


# --- the runbook webhook and the DR daemon behind a web config -----------------------------------


@pytest.fixture
def auth_web(tmp_path: Path, certificate: tuple[Path, Path]) -> WebConfig:
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    return tls_web(tmp_path, *certificate, prometheus=hashed)


def test_runbook_webhook_with_tls_and_basic_auth(tmp_path, certificate, auth_web) -> None:
    settings = settings_for(tmp_path)
    engine = Engine(settings, audit=AuditLog(settings.audit_log))
    server = make_runbook_server(settings.listen, engine, TOKEN.encode(), web=auth_web)
    server.start()
    context = client_context(certificate[0])
    try:
        assert server.url.startswith("https://")
        assert get(server.url + "/healthz", context=context)[0] == 401
        status, body = get(server.url + "/healthz", basic("prometheus", "s3cret"), context)
        assert status == 200 and json.loads(body)["mode"] == "dry-run"
        # the webhook authenticates with its bearer token, as Alertmanager sends it
        request = urllib.request.Request(
            server.url + "/alerts",
            data=json.dumps(sample_payload(0)).encode(),
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10, context=context) as reply:
            assert json.loads(reply.read())["results"] == {"no-runbook": 1}
        request.headers["Authorization"] = basic("prometheus", "s3cret")["Authorization"]
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10, context=context)
        assert refused.value.code == 401
    finally:
        server.close()
        engine.close()


def test_dr_metrics_server_with_tls_and_basic_auth(certificate, auth_web) -> None:
    health = {"ok": False, "leader": False}
    server = MetricsServer(DrMetrics(), "127.0.0.1", 0, lambda: health, web=auth_web).start()
    context = client_context(certificate[0])
    login = basic("prometheus", "s3cret")
    try:
        assert get(server.url + "/metrics", context=context)[0] == 401
        status, body = get(server.url + "/metrics", login, context)
        assert status == 200 and b"gotthard_dr_leader" in body
        assert get(server.url + "/healthz", login, context) == (
            503,
            b'{"ok": false, "leader": false}\n',
        )
        health["ok"] = True
        assert get(server.url + "/healthz", login, context)[0] == 200
    finally:
        server.stop()


# --- certificate expiry ---------------------------------------------------------------------


def test_a_tls_server_exports_its_certificate_not_after(tmp_path, certificate) -> None:
    """Every server that serves TLS adds its certificate's notAfter to ``/metrics``
    (here the DR daemon's; the exporter and the webhook use the same Server), so an
    alert can fire before it expires."""
    web = tls_web(tmp_path, *certificate)
    server = MetricsServer(DrMetrics(), "127.0.0.1", 0, lambda: {"ok": True}, web=web).start()
    try:
        status, body = get(server.url + "/metrics", context=client_context(certificate[0]))
    finally:
        server.stop()
    assert status == 200
    lines = [
        line
        for line in body.decode().splitlines()
        if line.startswith("gotthard_tls_certificate_not_after_timestamp_seconds{")
    ]
    assert len(lines) == 1, body
    labels, value = lines[0].rsplit(" ", 1)
    assert f'listen="127.0.0.1:{server.port}"' in labels and 'server="dr-metrics"' in labels
    # make_certificate's certificates are valid for one day
    assert 0 < float(value) - time.time() <= 86400 + 60
    # the body is still one valid exposition: one TYPE line per family
    types = [line for line in body.decode().splitlines() if line.startswith("# TYPE ")]
    assert len(types) == len(set(types))


def test_a_gzip_scrape_gets_the_certificate_in_a_second_member(tmp_path, certificate) -> None:
    web = tls_web(tmp_path, *certificate)
    server = make_exporter_server(
        "127.0.0.1", 0, lambda timeout: "up 1\n", default_timeout=5.0, web=web
    ).start()
    try:
        status, body = get(
            server.url + "/metrics",
            {"Accept-Encoding": "gzip"},
            context=client_context(certificate[0]),
        )
    finally:
        server.close()
    assert status == 200
    text_body = gzip.decompress(body).decode()
    assert text_body.startswith("up 1\n")
    assert "gotthard_tls_certificate_not_after_timestamp_seconds{" in text_body


def test_a_plain_http_server_exports_no_certificate(start) -> None:
    server = start()
    assert get(server.url + "/metrics") == (200, b"up 1\n")


# --- one exposition writer --------------------------------------------------------------------


def test_every_server_escapes_label_values_the_same_way() -> None:
    """The exporter's families and the DR daemon's registry go through one writer: a
    label value holding a quote, a backslash and a newline reads back unchanged, and
    both write the same sample line."""
    tricky = 'bucket "a"\\b\nc'
    metrics = DrMetrics()
    metrics.bsl_available.labels("zurich", tricky).set(1)
    dr = MetricsServer(metrics, "127.0.0.1", 0, lambda: {"ok": True}).start()
    family = exposition.gauge(
        "gotthard_dr_backup_storage_location_available", "x", "location", "site"
    )
    family.add((tricky, "zurich"), 1.0)
    text_body = exposition.render_text([family])
    exporter = make_exporter_server(
        "127.0.0.1", 0, lambda timeout: text_body, default_timeout=5.0
    ).start()
    try:
        bodies = [get(server.url + "/metrics")[1].decode() for server in (dr, exporter)]
    finally:
        dr.stop()
        exporter.close()
    lines = [
        [line for line in body.splitlines() if line.startswith(family.name + "{")]
        for body in bodies
    ]
    assert lines[0] == lines[1] and len(lines[0]) == 1
    [sample] = [
        s
        for f in text_string_to_metric_families(bodies[0])
        if f.name == family.name
        for s in f.samples
    ]
    assert sample.labels == {"site": "zurich", "location": tricky}


def test_a_server_closed_before_its_thread_runs_ends_it_cleanly(monkeypatch) -> None:
    """``close()`` that comes before the serving thread gets to run (a server stopped as
    it starts): the thread returns at once, without selecting on the closed sockets, and
    the port is free."""
    errors: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    for _ in range(20):
        server = Server(("127.0.0.1", 0), ROUTES)
        port = server.port
        server.close()  # the thread has not started: the loop never ran
        thread = threading.Thread(target=server.serve_forever)
        thread.start()
        thread.join(5)
        assert not thread.is_alive()
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", port)) != 0
        server = Server(("127.0.0.1", 0), ROUTES).start()
        server.close()
        assert server.thread is not None
        server.thread.join(5)
        assert not server.thread.is_alive()
    assert errors == []


def test_a_running_server_closed_without_shutdown_stops_first(monkeypatch) -> None:
    """``server_close()`` on a server still serving (no ``shutdown()`` first) stops its
    loop before closing its sockets: the thread ends without an error."""
    errors: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    server = Server(("127.0.0.1", 0), ROUTES).start()
    assert get(server.url + "/metrics")[0] == 200
    server.server_close()
    assert server.thread is not None
    server.thread.join(5)
    assert not server.thread.is_alive()
    assert errors == []
