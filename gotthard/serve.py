"""One HTTP(S) serving layer for the exporter, the runbook webhook and the DR daemon.

Each server declares its routes (``"GET /metrics"``, ``"POST /alerts"``) as handlers that
take a :class:`Request` and return ``(status, headers, body)``; :class:`Server` does the
rest the same way for all of them:

* the optional web configuration file in Prometheus' exporter-toolkit format::

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

  Relative paths are relative to the web config file. The certificate, key and client
  CA are reloaded when their files change (checked at most every
  ``Limits.tls_reload_seconds``, at the next handshake); a new set that does not load
  is logged and the previous certificate stays in use.
* The TLS handshake runs in the connection's own thread under a deadline, never in the
  accept loop, so a client that connects and sends nothing delays nobody else.
* Every connection has deadlines: a keep-alive connection idle for ``idle_timeout`` is
  closed, and once a request's first byte arrives its request line, headers and body
  must all arrive within ``read_timeout`` (a client trickling bytes is cut off).
* At most ``max_connections`` connections are served at once, one thread each. A
  connection beyond that waits up to ``busy_wait`` seconds for a slot in the accept loop
  (the kernel's listen backlog holds the ones behind it), then gets a plain
  ``503 Service Unavailable`` (plain HTTP) or is closed (TLS, which cannot answer without
  a handshake).
* Status line, headers and body leave in one write with ``TCP_NODELAY`` set, so a
  keep-alive client does not wait for a delayed ACK between headers and body.
* Basic auth costs the same for unknown users as for wrong passwords: unknown users are
  checked against a dummy hash made at start-up with the configured hashes' cost.
  bcrypt only uses a password's first 72 bytes; longer passwords are truncated to 72
  bytes, as the tools that made the hashes (htpasswd, Go's bcrypt) do, instead of being
  refused with an error.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import hashlib
import hmac
import io
import json
import logging
import re
import selectors
import socket
import socketserver
import ssl
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, BinaryIO, Self

import bcrypt
import yaml

from gotthard.config import ConfigError
from gotthard.exposition import CONTENT_TYPE, gauge, render_text

log = logging.getLogger("gotthard.serve")

Headers = Sequence[tuple[str, str]]
#: What a route handler returns: status code, extra headers, body.
Response = tuple[int, Headers, bytes]
TEXT = "text/plain; charset=utf-8"
#: bcrypt ignores everything after a password's 72nd byte.
BCRYPT_MAX_PASSWORD_BYTES = 72


# --- web configuration -----------------------------------------------------------------------


class WebConfigError(ConfigError):
    """The web configuration file, or a TLS file it names, is unreadable or invalid."""


@dataclass(frozen=True)
class WebConfig:
    cert_file: Path | None = None
    key_file: Path | None = None
    client_auth_type: str = "NoClientCert"
    client_ca_file: Path | None = None
    min_version: str = "TLS12"
    basic_auth_users: dict[str, bytes] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    #: The file this was read from, for messages; None when built in code.
    source: Path | None = None

    @property
    def tls(self) -> bool:
        return self.cert_file is not None

    @property
    def tls_files(self) -> tuple[Path, ...]:
        files = (self.cert_file, self.key_file, self.client_ca_file)
        return tuple(path for path in files if path is not None)

    def ssl_context(self) -> ssl.SSLContext | None:
        """A server context with the certificate, key and client CA loaded now; an error
        names the file and its key in the web config."""
        if not self.tls:
            return None
        where = f"{self.source}: " if self.source else ""
        for key, path in (
            ("cert_file", self.cert_file),
            ("key_file", self.key_file),
            ("client_ca_file", self.client_ca_file),
        ):
            try:
                if path is not None:
                    path.read_bytes()
            except OSError as err:
                raise WebConfigError(
                    f"{where}tls_server_config.{key}: cannot read {path}: {err.strerror or err}"
                ) from None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = (
            ssl.TLSVersion.TLSv1_3 if self.min_version == "TLS13" else ssl.TLSVersion.TLSv1_2
        )
        try:
            context.load_cert_chain(str(self.cert_file), str(self.key_file))
        except (OSError, ssl.SSLError) as err:
            raise WebConfigError(
                f"{where}tls_server_config: cert_file {self.cert_file} with key_file"
                f" {self.key_file}: not a PEM certificate and its private key{_reason(err)}"
            ) from None
        if self.client_ca_file is not None:
            try:
                context.load_verify_locations(str(self.client_ca_file))
            except (OSError, ssl.SSLError) as err:
                raise WebConfigError(
                    f"{where}tls_server_config.client_ca_file: {self.client_ca_file}:"
                    f" no PEM CA certificate{_reason(err)}"
                ) from None
        if self.client_auth_type == "RequireAndVerifyClientCert":
            context.verify_mode = ssl.CERT_REQUIRED
        elif self.client_auth_type == "VerifyClientCertIfGiven":
            context.verify_mode = ssl.CERT_OPTIONAL
        return context


def _reason(err: OSError | ssl.SSLError) -> str:
    """`` (what OpenSSL says)`` when it names a reason (``key values mismatch``), else ""."""
    reason = getattr(err, "reason", None)
    return f" ({reason.lower().replace('_', ' ')})" if reason else ""


_CLIENT_AUTH = ("NoClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert")
_TOP_KEYS = {"tls_server_config", "basic_auth_users", "http_server_config"}
_TLS_KEYS = {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version"}
_BCRYPT_HASH = re.compile(r"\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}")


def _section(file: Path, value: object, allowed: Collection[str], name: str = "") -> dict[Any, Any]:
    """*value* as a mapping with only *allowed* keys; *name* is its key, empty for the
    file's top level."""
    where = f"{name}: " if name else ""
    if not isinstance(value, dict):
        at = "" if name else " at the top level"
        raise WebConfigError(f"{file}: {where}expected a mapping{at}")
    unknown = set(value) - set(allowed)
    if unknown:
        raise WebConfigError(f"{file}: {where}unknown key(s): {', '.join(sorted(unknown))}")
    return value


def _tls_settings(file: Path, tls: dict[str, Any]) -> dict[str, Any]:
    """The TLS fields of :class:`WebConfig` from ``tls_server_config``; relative paths are
    relative to the file."""

    def rel(key: str) -> Path:
        value = tls.get(key)
        if not isinstance(value, str) or not value:
            raise WebConfigError(f"{file}: tls_server_config.{key}: must be a file path")
        candidate = Path(value)
        return candidate if candidate.is_absolute() else file.parent / candidate

    cert = key = ca = None
    if tls:
        cert, key = rel("cert_file"), rel("key_file")
        if tls.get("client_ca_file"):
            ca = rel("client_ca_file")
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
    return {
        "cert_file": cert,
        "key_file": key,
        "client_auth_type": client_auth,
        "client_ca_file": ca,
        "min_version": min_version,
    }


def _users(file: Path, users_raw: object) -> dict[str, bytes]:
    """``basic_auth_users``: user -> bcrypt hash."""
    if not isinstance(users_raw, dict):
        raise WebConfigError(f"{file}: basic_auth_users: expected a mapping of user to bcrypt hash")
    users: dict[str, bytes] = {}
    for user, hashed in users_raw.items():
        if not isinstance(hashed, str) or not _BCRYPT_HASH.fullmatch(hashed):
            raise WebConfigError(f"{file}: basic_auth_users.{user}: must be a bcrypt hash")
        users[str(user)] = hashed.encode()
    return users


def load_web_config(path: str | Path) -> WebConfig:
    """The web config *path*, its TLS files loaded once to check them; a
    :class:`WebConfigError` names the file and the key that is wrong."""
    file = Path(path)
    try:
        data = yaml.safe_load(file.read_text()) or {}
    except OSError as err:
        raise WebConfigError(f"{file}: cannot read web config: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        raise WebConfigError(f"{file}: not valid YAML: {err}") from None
    data = _section(file, data, _TOP_KEYS)
    tls = _section(file, data.get("tls_server_config") or {}, _TLS_KEYS, "tls_server_config")
    settings = _tls_settings(file, tls)
    users = _users(file, data.get("basic_auth_users") or {})
    http = data.get("http_server_config") or {}
    headers = http.get("headers") or {} if isinstance(http, dict) else {}
    if not isinstance(headers, dict):
        raise WebConfigError(f"{file}: http_server_config.headers: expected a mapping")
    headers = {str(k): str(v) for k, v in headers.items()}
    web = WebConfig(**settings, basic_auth_users=users, headers=headers, source=file)
    web.ssl_context()  # the TLS files load now, or the error names them
    return web


def optional_web_config(path: str | Path | None) -> WebConfig | None:
    """``load_web_config(path)``, or None when no file is configured (plain HTTP)."""
    return load_web_config(path) if path else None


# --- basic auth ------------------------------------------------------------------------------


class BasicAuth:
    """Check ``Authorization: Basic`` against bcrypt hashes.

    bcrypt is slow on purpose, so a verified (user, password) pair is remembered as a
    SHA-256 digest and later requests with it skip bcrypt. Unknown users and wrong
    passwords both pay one bcrypt check at the configured cost.
    """

    def __init__(self, users: Mapping[str, bytes]) -> None:
        self.users = dict(users)
        self._verified: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._dummy = b""
        if self.users:
            cost = max(int(hashed.split(b"$")[2]) for hashed in self.users.values())
            self._dummy = bcrypt.hashpw(b"no such user", bcrypt.gensalt(rounds=cost))

    @property
    def enabled(self) -> bool:
        return bool(self.users)

    def check(self, header: str | None) -> bool:
        if not self.users:
            return True
        if not header or not header.startswith("Basic "):
            return False
        try:
            decoded = base64.b64decode(header[6:], validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            return False
        user, _, secret = decoded.partition(":")
        password = secret.encode()[:BCRYPT_MAX_PASSWORD_BYTES]
        hashed = self.users.get(user)
        if hashed is None:
            bcrypt.checkpw(password, self._dummy)  # the same cost as a real check
            return False
        digest = hashlib.sha256(hashed + b"\0" + password).digest()
        with self._lock:
            seen = self._verified.get(user)
        if seen is not None and hmac.compare_digest(digest, seen):
            return True
        if bcrypt.checkpw(password, hashed):
            with self._lock:
                self._verified[user] = digest
            return True
        return False


# --- TLS contexts that follow their files ------------------------------------------------------


class TLSReloader:
    """The current SSLContext, rebuilt when the certificate, key or CA files change."""

    def __init__(self, web: WebConfig, check_seconds: float) -> None:
        context = web.ssl_context()
        if context is None:
            raise ValueError("TLSReloader needs a web config with TLS")
        self.web = web
        self.check_seconds = check_seconds
        self._context = context
        self._signature = self._stat()
        #: notAfter of the certificate being served: read once per load, not per scrape
        self.not_after = self._not_after()
        self._failed: object = None
        self._checked = time.monotonic()
        self._lock = threading.Lock()

    def _not_after(self) -> float | None:
        cert = self.web.cert_file
        return certificate_not_after(cert) if cert is not None else None

    def _stat(self) -> tuple[tuple[int, int, int] | None, ...]:
        signature: list[tuple[int, int, int] | None] = []
        for path in self.web.tls_files:
            try:
                st = path.stat()
            except OSError:
                signature.append(None)
            else:
                signature.append((st.st_mtime_ns, st.st_size, st.st_ino))
        return tuple(signature)

    def context(self) -> ssl.SSLContext:
        now = time.monotonic()
        with self._lock:
            if now - self._checked < self.check_seconds:
                return self._context
            self._checked = now
            signature = self._stat()
            if signature in (self._signature, self._failed):
                return self._context
            try:
                context = self.web.ssl_context()
            except WebConfigError as err:
                # Often a half-written replacement; the next change is tried again.
                log.error("keeping the previous TLS certificate: %s", err)
                self._failed = signature
                return self._context
            assert context is not None
            log.info("reloaded the TLS certificate from %s", self.web.cert_file)
            self._context, self._signature = context, signature
            self.not_after = self._not_after()
            return context


def handshake(sock: ssl.SSLSocket, timeout: float) -> None:
    """Complete a server-side TLS handshake within ``timeout`` seconds in total.

    A per-operation socket timeout would let a client trickling its ClientHello byte by
    byte hold the connection forever; this waits on the socket with one deadline.
    """
    deadline = time.monotonic() + timeout
    sock.setblocking(False)
    with selectors.DefaultSelector() as selector:
        while True:
            try:
                sock.do_handshake()
                break
            except ssl.SSLWantReadError:
                events = selectors.EVENT_READ
            except ssl.SSLWantWriteError:
                events = selectors.EVENT_WRITE
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("TLS handshake timed out")
            selector.register(sock, events)
            ready = selector.select(remaining)
            selector.unregister(sock)
            if not ready:
                raise TimeoutError("TLS handshake timed out")
    sock.setblocking(True)


# --- requests, responses, routes ---------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """Timeouts and bounds of one server; see the module docstring."""

    max_connections: int = 256
    busy_wait: float = 1.0
    handshake_timeout: float = 10.0
    read_timeout: float = 10.0
    idle_timeout: float = 120.0
    write_timeout: float = 30.0
    tls_reload_seconds: float = 5.0
    backlog: int = 512


@dataclass
class Request:
    method: str
    path: str
    query: str
    headers: Message
    peer: str
    _rfile: BinaryIO
    body_read: bool = False

    def header(self, name: str) -> str | None:
        return self.headers.get(name)

    def read_body(self, length: int) -> bytes:
        """Read ``length`` bytes of body (the caller checked Content-Length first)."""
        self.body_read = True
        return self._rfile.read(length)

    @property
    def has_body(self) -> bool:
        length = self.headers.get("Content-Length", "0").strip()
        return bool(self.headers.get("Transfer-Encoding")) or length not in ("", "0")


Handler = Callable[[Request], Response]


def text(status: int, body: str, content_type: str = TEXT, headers: Headers = ()) -> Response:
    return status, [("Content-Type", content_type), *headers], body.encode()


def json_response(status: int, value: Any, headers: Headers = ()) -> Response:
    body = (json.dumps(value) + "\n").encode()
    return status, [("Content-Type", "application/json"), *headers], body


def exposition(body: str) -> Response:
    """A ``200`` answer carrying Prometheus exposition text (:mod:`gotthard.exposition`)."""
    return 200, [("Content-Type", CONTENT_TYPE)], body.encode()


def not_found(request: Request) -> Response:
    return text(404, "Not found\n")


UNAUTHORIZED = text(401, "Unauthorized\n", headers=[("WWW-Authenticate", 'Basic realm="gotthard"')])


# --- the connection: deadlines, one write per response -------------------------------------------


class _DeadlineReader(io.RawIOBase):
    """Socket reads that fail once ``deadline`` (monotonic) has passed, however they trickle."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.deadline: float | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.deadline is not None:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("request not received in time")
            self.sock.settimeout(remaining)
        return self.sock.recv_into(buffer)


class _Connection(BaseHTTPRequestHandler):
    """One client connection: runs the route handlers, buffers each response."""

    server: _Listener
    protocol_version = "HTTP/1.1"
    sys_version = ""

    def setup(self) -> None:
        self.connection = self.request
        self.app = self.server.app
        self.server_version = self.app.name
        self._reader = _DeadlineReader(self.connection)
        self.rfile = io.BufferedReader(self._reader, 65536)  # type: ignore[assignment]
        self.wfile = io.BytesIO()  # type: ignore[assignment]

    def finish(self) -> None:
        self.rfile.close()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s: %s", self.app.name, self.address_string(), format % args)

    def handle_one_request(self) -> None:
        limits = self.app.limits
        try:
            # Between requests only the idle timeout applies; then one deadline for all.
            self._reader.deadline = None
            self.connection.settimeout(limits.idle_timeout)
            if not self.rfile.peek(1):
                self.close_connection = True
                return
        except OSError:  # idle too long (TimeoutError), reset, TLS alert
            self.close_connection = True
            return
        self._reader.deadline = time.monotonic() + limits.read_timeout
        try:
            super().handle_one_request()
        finally:
            self._flush()

    def handle_expect_100(self) -> bool:
        ok = super().handle_expect_100()
        self._flush()
        return ok

    def _flush(self) -> None:
        buffer: io.BytesIO = self.wfile  # type: ignore[assignment]
        data = buffer.getvalue()
        if not data:
            return
        buffer.seek(0)
        buffer.truncate()
        self.connection.settimeout(self.app.limits.write_timeout)
        try:
            self.connection.sendall(data)
        except OSError:
            self.close_connection = True

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        if method not in self.app.methods:
            self.send_error(501, f"Unsupported method ({self.command!r})")
            return
        path, _, query = self.path.partition("?")
        request = Request(
            self.command, path, query, self.headers, self.client_address[0], self.rfile
        )
        key = f"{method} {path}"
        route = self.app.routes.get(key)
        if key not in self.app.auth_exempt and not self.app.auth.check(
            self.headers.get("Authorization")
        ):
            response = UNAUTHORIZED
        else:
            try:
                response = (route or self.app.not_found)(request)
            except Exception:
                log.exception("%s: %s %s failed", self.app.name, self.command, path)
                response = text(500, "Internal server error\n")
        if request.has_body and not request.body_read:
            self.close_connection = True  # the unread body would be taken for a request
        self._respond(*response)

    def _respond(self, status: int, headers: Headers, body: bytes) -> None:
        lines = [f"{self.protocol_version} {status} {self.responses.get(status, ('',))[0]}"]
        lines += [f"Server: {self.app.name}", f"Date: {self.date_time_string()}"]
        for name, value in [*headers, *self.app.web.headers.items()]:
            lines.append(f"{name}: {value}")
            if name.lower() == "connection" and value.lower() == "close":
                self.close_connection = True
        if self.close_connection and not any(n.lower() == "connection" for n, _ in headers):
            lines.append("Connection: close")
        lines.append(f"Content-Length: {len(body)}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")
        self.wfile.write(head if self.command == "HEAD" else head + body)
        self.log_request(status, len(body))
        if self.app.on_reply is not None:
            self.app.on_reply(status)


# --- the listener: threads, slots, handshakes ---------------------------------------------------

_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Retry-After: 1\r\nConnection: close\r\nContent-Length: 12\r\n\r\nserver busy\n"
)


class _Listener(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], app: Server) -> None:
        self.app = app
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.request_queue_size = app.limits.backlog
        self._slots = threading.BoundedSemaphore(app.limits.max_connections)
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        self._busy_logged = 0.0
        super().__init__(address, _Connection)

    def process_request(self, request: Any, client_address: Any) -> None:
        # In the accept loop: wait briefly for a free slot, else turn the client away.
        if not self._slots.acquire(timeout=self.app.limits.busy_wait):
            self._turn_away(request, client_address)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def _turn_away(self, request: socket.socket, client_address: Any) -> None:
        now = time.monotonic()
        if now - self._busy_logged > 10:
            self._busy_logged = now
            log.warning(
                "%s: %d connections open, turning %s away",
                self.app.name,
                self.app.limits.max_connections,
                client_address[0],
            )
        if self.app.tls is None:
            with contextlib.suppress(OSError):
                request.settimeout(0.1)
                request.sendall(_BUSY)
        self.shutdown_request(request)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def finish_request(self, request: Any, client_address: Any) -> None:
        """Handshake (with TLS) and serve one connection, in its own thread."""
        sock: socket.socket = request
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.app.tls is not None:
            tls = self.app.tls.context().wrap_socket(
                sock, server_side=True, do_handshake_on_connect=False
            )
            sock = tls
            try:
                handshake(tls, self.app.limits.handshake_timeout)
            except OSError as err:
                log.debug(
                    "%s: TLS handshake with %s failed: %s", self.app.name, client_address, err
                )
                tls.close()
                return
        with self._open_lock:
            self._open.add(sock)
        try:
            self.RequestHandlerClass(sock, client_address, self)
        finally:
            with self._open_lock:
                self._open.discard(sock)
            if sock is not request:
                self.shutdown_request(sock)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("%s: connection from %s failed", self.app.name, client_address, exc_info=True)

    def close_connections(self) -> None:
        with self._open_lock:
            open_sockets = list(self._open)
        for sock in open_sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


#: The route every Gotthard server exposes its metrics on.
METRICS_ROUTE = "GET /metrics"
#: The route every Gotthard server answers health (and readiness, see gotthard.daemon) on.
HEALTH_ROUTE = "GET /healthz"
#: Gauge appended to ``/metrics`` of every server that serves TLS.
CERTIFICATE_NOT_AFTER = "gotthard_tls_certificate_not_after_timestamp_seconds"


def certificate_not_after(path: Path) -> float | None:
    """The notAfter of the (first) certificate in the PEM file *path*, in Unix seconds;
    None when it cannot be read."""
    try:
        # the stdlib's PEM decoder (no third-party X.509 library is needed for one field)
        decoded = ssl._ssl._test_decode_cert(str(path))  # type: ignore[attr-defined]
        return float(ssl.cert_time_to_seconds(decoded["notAfter"]))
    except (OSError, ssl.SSLError, KeyError, ValueError):
        return None


def certificate_exposition(server: Server) -> bytes:
    """The certificate gauge of *server*: the notAfter of the certificate it serves, by
    listen address, server name and certificate file (empty when it could not be read)."""
    not_after = server.tls.not_after if server.tls is not None else None
    if not_after is None:
        return b""
    host, port = server.server_address
    family = gauge(
        CERTIFICATE_NOT_AFTER,
        "notAfter of the TLS certificate served (Unix seconds).",
        "listen",
        "server",
        "cert_file",
    )
    family.add((f"{host}:{port}", server.name, str(server.web.cert_file)), round(not_after))
    return render_text([family]).encode()


def _with_certificate(route: Handler, server: Server) -> Handler:
    """*route* (a ``/metrics`` handler) with the certificate gauge appended to its body
    when it answers 200 in the Prometheus text format (plain or gzip)."""

    def handler(request: Request) -> Response:
        status, headers, body = route(request)
        fields = {k.lower(): v for k, v in headers}
        exposition = fields.get("content-type") == CONTENT_TYPE
        encoding = fields.get("content-encoding", "")
        if status != 200 or not exposition or encoding not in ("", "gzip"):
            return status, headers, body
        extra = certificate_exposition(server)
        # a gzip body takes a second gzip member: readers decode concatenated members
        return status, headers, body + (gzip.compress(extra) if encoding and extra else extra)

    return handler


class Server:
    """An HTTP(S) server for ``routes``: ``{"GET /metrics": handler, "POST /alerts": ...}``.

    ``GET`` routes also answer ``HEAD`` (without the body). Paths in ``auth_exempt`` do
    their own authentication and skip the web config's basic auth; everything else needs
    it when ``basic_auth_users`` is set, before the route (or ``not_found``) is looked at.
    ``on_reply(status)`` is called for every response a route, ``not_found`` or the auth
    check produced.
    """

    def __init__(
        self,
        listen: tuple[str, int],
        routes: Mapping[str, Handler],
        *,
        web: WebConfig | None = None,
        name: str = "gotthard",
        not_found: Handler = not_found,
        auth_exempt: Collection[str] = (),
        on_reply: Callable[[int], None] | None = None,
        limits: Limits = Limits(),
    ) -> None:
        self.routes = dict(routes)
        self.methods = {key.split(" ", 1)[0] for key in self.routes}
        self.web = web or WebConfig()
        self.name = name
        self.not_found = not_found
        self.auth_exempt = frozenset(auth_exempt)
        self.on_reply = on_reply
        self.limits = limits
        self.auth = BasicAuth(self.web.basic_auth_users)
        self.tls = TLSReloader(self.web, limits.tls_reload_seconds) if self.web.tls else None
        if self.tls is not None and METRICS_ROUTE in self.routes:
            self.routes[METRICS_ROUTE] = _with_certificate(self.routes[METRICS_ROUTE], self)
        self.thread: threading.Thread | None = None
        self._serving = False
        self.listener = _Listener(listen, self)

    @property
    def server_address(self) -> tuple[str, int]:
        return self.listener.server_address[:2]  # type: ignore[return-value]

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        host = self.server_address[0]
        host = f"[{host}]" if ":" in host else host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    def serve_forever(self) -> None:
        self._serving = True
        self.listener.serve_forever()

    def start(self) -> Self:
        """Serve on a daemon thread."""
        self._serving = True
        self.thread = threading.Thread(target=self.listener.serve_forever, name=self.name)
        self.thread.daemon = True
        self.thread.start()
        return self

    def shutdown(self) -> None:
        """Stop the accept loop (from another thread than the one serving)."""
        if self._serving:
            self.listener.shutdown()

    def server_close(self) -> None:
        """Close the listening socket and every open connection."""
        self.listener.server_close()
        self.listener.close_connections()

    def close(self) -> None:
        self.shutdown()
        self.server_close()
