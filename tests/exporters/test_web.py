"""The exporter's HTTP side: web config (TLS, basic auth), gzip, scrape timeout header."""

from __future__ import annotations

import gzip
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest

from gotthard.exporters.web import make_server
from gotthard.serve import WebConfigError, load_web_config
from tests.support.tls import basic, make_certificate, write_web_config


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_certificate(tmp_path_factory.mktemp("tls"))


def serve(web_config: Path | None, seen_timeouts: list[float]) -> Iterator[str]:
    web = load_web_config(web_config) if web_config else None

    def scrape(timeout: float) -> str:
        seen_timeouts.append(timeout)
        return "up 1\n"

    server = make_server("127.0.0.1", 0, scrape, default_timeout=10, web=web)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    scheme = "https" if web and web.tls else "http"
    try:
        yield f"{scheme}://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def fetch(url: str, headers: dict[str, str] | None = None, context=None):
    request = urllib.request.Request(url, headers=headers or {})
    return urllib.request.urlopen(request, timeout=5, context=context)


def test_tls_and_basic_auth(tmp_path: Path, certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    config = tmp_path / "web.yml"
    config.write_text(
        f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
        f"basic_auth_users:\n  prometheus: '{hashed}'\n"
        "http_server_config:\n  headers:\n    X-Frame-Options: deny\n"
    )
    context = ssl.create_default_context(cafile=str(cert))
    timeouts: list[float] = []
    server = serve(config, timeouts)
    url = next(server)
    try:
        with pytest.raises(urllib.error.HTTPError) as denied:
            fetch(url + "/metrics", context=context)
        assert denied.value.code == 401
        with pytest.raises(urllib.error.HTTPError) as wrong:
            fetch(url + "/metrics", basic("prometheus", "nope"), context=context)
        assert wrong.value.code == 401
        with fetch(url + "/metrics", basic("prometheus", "s3cret"), context=context) as reply:
            body = reply.read()
            # the exporter's own metrics, then the served certificate's expiry
            assert body.startswith(b"up 1\n")
            assert b"gotthard_tls_certificate_not_after_timestamp_seconds{" in body
            assert reply.headers["X-Frame-Options"] == "deny"
        # plain HTTP to a TLS port does not get metrics
        with pytest.raises(OSError):
            fetch(url.replace("https", "http") + "/metrics", basic("prometheus", "s3cret"))
    finally:
        next(server, None)


def test_gzip_healthz_and_scrape_timeout_header() -> None:
    timeouts: list[float] = []
    server = serve(None, timeouts)
    url = next(server)
    try:
        with fetch(url + "/healthz") as reply:
            assert reply.read() == b"ok\n"
        headers = {"Accept-Encoding": "gzip", "X-Prometheus-Scrape-Timeout-Seconds": "4"}
        with fetch(url + "/metrics", headers) as reply:
            assert reply.headers["Content-Encoding"] == "gzip"
            assert gzip.decompress(reply.read()) == b"up 1\n"
        assert timeouts == [3.5]  # the header minus the safety offset
        with pytest.raises(urllib.error.HTTPError) as missing:
            fetch(url + "/nope")
        assert missing.value.code == 404
    finally:
        next(server, None)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("tls_server_config: [1, 2]\n", "expected a mapping"),
        ("basic_auth_users:\n  bob: plaintext\n", "bcrypt hash"),
        ("tls_server_config:\n  cert_file: a.crt\n", "key_file"),
        ("surprise: 1\n", "unknown key"),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: Maybe\n",
            "client_auth_type",
        ),
        ("a: [unclosed\n", "not valid YAML"),
    ],
)
def test_bad_web_config_is_a_clear_error(tmp_path: Path, body: str, message: str) -> None:
    config = tmp_path / "web.yml"
    config.write_text(body)
    with pytest.raises(WebConfigError, match=message):
        load_web_config(config)


def test_a_tls_file_that_does_not_load_is_named(
    tmp_path: Path, certificate: tuple[Path, Path]
) -> None:
    cert, key = certificate
    not_pem = tmp_path / "not-pem.crt"
    not_pem.write_text("hello\n")
    absent_cert, absent_key = tmp_path / "absent.crt", tmp_path / "absent.key"
    # (cert_file, key_file, the file the message names, why)
    cases = [
        (absent_cert, key, absent_cert, "tls_server_config.cert_file: cannot read"),
        (cert, absent_key, absent_key, "tls_server_config.key_file: cannot read"),
        (not_pem, key, not_pem, "not a PEM certificate and its private key"),
        (cert, cert, cert, "not a PEM certificate and its private key"),  # no key there
    ]
    for i, (cert_file, key_file, named, why) in enumerate(cases):
        config = write_web_config(tmp_path / f"web{i}.yml", cert_file, key_file)
        with pytest.raises(WebConfigError) as error:
            load_web_config(config)
        message = str(error.value)
        assert message.startswith(f"{config}: ") and why in message, message
        assert str(named) in message and "Errno" not in message


def test_the_exporter_over_tls_serves_keep_alive_scrapes_past_idle_connections(
    tmp_path: Path, certificate: tuple[Path, Path]
) -> None:
    """The exporter's own server: 50 TCP connections that never start TLS do not hold up a
    scraper, and that scraper's 100 keep-alive scrapes take under a second together."""
    import http.client
    import socket
    import time

    cert, key = certificate
    config = tmp_path / "web.yml"
    config.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n")
    server = serve(config, [])
    port = int(next(server).rsplit(":", 1)[1])
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(50)]
    try:
        context = ssl.create_default_context(cafile=str(cert))
        connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=context)
        began = time.monotonic()
        for _ in range(100):
            connection.request("GET", "/metrics")
            reply = connection.getresponse()
            assert reply.status == 200 and reply.read().startswith(b"up 1\n")
        elapsed = time.monotonic() - began
        connection.close()
    finally:
        for sock in idle:
            sock.close()
        server.close()
    assert elapsed < 1.0, f"100 keep-alive scrapes took {elapsed:.2f}s"
