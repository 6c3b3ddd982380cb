"""HTTP serving for the exporter: ``/metrics``, ``/healthz``, TLS and basic auth.

The optional web configuration file follows Prometheus' exporter-toolkit format::

    tls_server_config:
      cert_file: server.crt
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert   # optional
      client_ca_file: ca.crt                          # with client auth
      min_version: TLS12                              # optional, TLS12 or TLS13
    basic_auth_users:
      prometheus: $2b$12$...                          # bcrypt hash
    http_server_config:
      headers:
        X-Frame-Options: deny

Relative paths are relative to the web config file.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import hashlib
import hmac
import logging
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import bcrypt
import yaml

log = logging.getLogger("gotthard.exporter.web")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: Subtracted from Prometheus' scrape timeout header so the reply arrives in time.
TIMEOUT_OFFSET_SECONDS = 0.5


class WebConfigError(Exception):
    """The web configuration file is unreadable or invalid."""


@dataclass(frozen=True)
class WebConfig:
    cert_file: Path | None = None
    key_file: Path | None = None
    client_auth_type: str = "NoClientCert"
    client_ca_file: Path | None = None
    min_version: str = "TLS12"
    basic_auth_users: dict[str, bytes] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def tls(self) -> bool:
        return self.cert_file is not None

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = (
            ssl.TLSVersion.TLSv1_3 if self.min_version == "TLS13" else ssl.TLSVersion.TLSv1_2
        )
        try:
            context.load_cert_chain(str(self.cert_file), str(self.key_file))
            if self.client_ca_file is not None:
                context.load_verify_locations(str(self.client_ca_file))
        except (OSError, ssl.SSLError) as err:
            raise WebConfigError(f"cannot load TLS files: {err}") from None
        if self.client_auth_type == "RequireAndVerifyClientCert":
            context.verify_mode = ssl.CERT_REQUIRED
        elif self.client_auth_type == "VerifyClientCertIfGiven":
            context.verify_mode = ssl.CERT_OPTIONAL
        return context


_CLIENT_AUTH = ("NoClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert")
_TOP_KEYS = {"tls_server_config", "basic_auth_users", "http_server_config"}
_TLS_KEYS = {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version"}


def load_web_config(path: str | Path) -> WebConfig:
    file = Path(path)
    try:
        data = yaml.safe_load(file.read_text()) or {}
    except OSError as err:
        raise WebConfigError(f"{file}: cannot read web config: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        raise WebConfigError(f"{file}: not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise WebConfigError(f"{file}: expected a mapping at the top level")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise WebConfigError(f"{file}: unknown key(s): {', '.join(sorted(unknown))}")

    def rel(value: object, key: str) -> Path:
        if not isinstance(value, str) or not value:
            raise WebConfigError(f"{file}: {key}: must be a file path")
        candidate = Path(value)
        return candidate if candidate.is_absolute() else file.parent / candidate

    tls = data.get("tls_server_config") or {}
    if not isinstance(tls, dict):
        raise WebConfigError(f"{file}: tls_server_config: expected a mapping")
    unknown = set(tls) - _TLS_KEYS
    if unknown:
        raise WebConfigError(
            f"{file}: tls_server_config: unknown key(s): {', '.join(sorted(unknown))}"
        )
    cert = key = ca = None
    if tls:
        cert = rel(tls.get("cert_file"), "tls_server_config.cert_file")
        key = rel(tls.get("key_file"), "tls_server_config.key_file")
        if tls.get("client_ca_file"):
            ca = rel(tls["client_ca_file"], "tls_server_config.client_ca_file")
    client_auth = tls.get("client_auth_type", "NoClientCert")
    if client_auth not in _CLIENT_AUTH:
        raise WebConfigError(
            f"{file}: tls_server_config.client_auth_type: must be one of {', '.join(_CLIENT_AUTH)}"
        )
    if client_auth != "NoClientCert" and ca is None:
        raise WebConfigError(
            f"{file}: tls_server_config.client_ca_file: required with {client_auth}"
        )
    min_version = tls.get("min_version", "TLS12")
    if min_version not in ("TLS12", "TLS13"):
        raise WebConfigError(f"{file}: tls_server_config.min_version: must be TLS12 or TLS13")
    users_raw = data.get("basic_auth_users") or {}
    if not isinstance(users_raw, dict):
        raise WebConfigError(f"{file}: basic_auth_users: expected a mapping of user to bcrypt hash")
    users: dict[str, bytes] = {}
    for user, hashed in users_raw.items():
        if not isinstance(hashed, str) or not hashed.startswith(("$2a$", "$2b$", "$2y$")):
            raise WebConfigError(f"{file}: basic_auth_users.{user}: must be a bcrypt hash")
        users[str(user)] = hashed.encode()
    http = data.get("http_server_config") or {}
    headers = http.get("headers") or {} if isinstance(http, dict) else {}
    if not isinstance(headers, dict):
        raise WebConfigError(f"{file}: http_server_config.headers: expected a mapping")
    return WebConfig(
        cert_file=cert,
        key_file=key,
        client_auth_type=client_auth,
        client_ca_file=ca,
        min_version=min_version,
        basic_auth_users=users,
        headers={str(k): str(v) for k, v in headers.items()},
    )


class _BasicAuth:
    """bcrypt is slow on purpose; remember verified (user, password) digests."""

    def __init__(self, users: dict[str, bytes]) -> None:
        self.users = users
        self._verified: set[bytes] = set()
        self._lock = threading.Lock()

    def check(self, header: str | None) -> bool:
        if not self.users:
            return True
        if not header or not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        hashed = self.users.get(user)
        if hashed is None:
            # spend the same time as a real check so user names cannot be probed
            bcrypt.checkpw(b"x", b"$2b$10$" + b"." * 53)
            return False
        digest = hashlib.sha256(hashed + b"\0" + password.encode()).digest()
        with self._lock:
            if any(hmac.compare_digest(digest, seen) for seen in self._verified):
                return True
        if bcrypt.checkpw(password.encode(), hashed):
            with self._lock:
                self._verified.add(digest)
            return True
        return False


LANDING = """<html><head><title>Gotthard exporter</title></head><body>
<h1>Gotthard exporter</h1>
<p><a href="/metrics">Metrics</a> &middot; <a href="/healthz">Health</a></p>
</body></html>
"""


def make_server(
    host: str,
    port: int,
    scrape: Callable[[float], str],
    *,
    default_timeout: float,
    web: WebConfig | None = None,
) -> ThreadingHTTPServer:
    """An HTTP(S) server calling ``scrape(timeout)`` for every ``/metrics`` request."""
    web = web or WebConfig()
    auth = _BasicAuth(web.basic_auth_users)

    class Handler(BaseHTTPRequestHandler):
        server_version = "gotthard-exporter"
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            log.debug("%s " + format, self.address_string(), *args)

        def _reply(self, status: int, body: bytes, content_type: str, extra=()) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            for name, value in web.headers.items():
                self.send_header(name, value)
            for name, value in extra:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            if not auth.check(self.headers.get("Authorization")):
                self._reply(
                    401,
                    b"Unauthorized\n",
                    "text/plain; charset=utf-8",
                    [("WWW-Authenticate", 'Basic realm="gotthard"')],
                )
                return
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._metrics()
            elif path == "/healthz":
                self._reply(200, b"ok\n", "text/plain; charset=utf-8")
            elif path == "/":
                self._reply(200, LANDING.encode(), "text/html; charset=utf-8")
            else:
                self._reply(404, b"Not found\n", "text/plain; charset=utf-8")

        def _metrics(self) -> None:
            timeout = default_timeout
            header = self.headers.get("X-Prometheus-Scrape-Timeout-Seconds")
            if header:
                with contextlib.suppress(ValueError):
                    timeout = min(timeout, max(float(header) - TIMEOUT_OFFSET_SECONDS, 0.1))
            body = scrape(timeout).encode()
            extra: list[tuple[str, str]] = []
            if "gzip" in (self.headers.get("Accept-Encoding") or ""):
                body = gzip.compress(body, compresslevel=1)
                extra.append(("Content-Encoding", "gzip"))
            self._reply(200, body, CONTENT_TYPE, extra)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    context = web.ssl_context()
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    return server
