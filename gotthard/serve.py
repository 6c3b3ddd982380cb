"""One HTTP(S) serving layer for the exporter, the runbook webhook and the DR daemon.

Each server declares its routes (``"GET /metrics"``, ``"POST /alerts"``) as handlers that
take a :class:`Request` and return ``(status, headers, body)``; :class:`Server` does the
rest the same way for all of them:

* The optional web configuration file in Prometheus' exporter-toolkit format (TLS, client
  certificates and their SPIFFE IDs, basic auth, headers, connection limits) is
  :mod:`gotthard.webconfig`; it and its TLS files are followed at run time.
* Connections wait in one event loop per server (:mod:`gotthard.serveloop`), never in a
  thread: the accept, the TLS handshake and the request's line and headers. Connections
  that have not authenticated yet have their own small budget, per client address and in
  total, with short deadlines (:class:`~gotthard.webconfig.Limits`); an authenticated
  scrape always finds a slot however many connections others hold open.
* A worker thread (``Limits.workers`` of them) takes a request whose head is complete:
  it checks the version (``505`` for anything but HTTP/1.0 and 1.1), authenticates
  (basic auth; a route in ``auth_exempt`` does its own), reads the body under the
  request's ``read_timeout`` (a body that does not arrive in time is ``408``, one that
  ends early ``400``, logged without a traceback) and answers.
* Status line, headers and body leave in one write with ``TCP_NODELAY`` set, so a
  keep-alive client does not wait for a delayed ACK between headers and body.
* Basic auth costs the same for unknown users as for wrong passwords
  (:class:`~gotthard.webconfig.BasicAuth`).
"""

from __future__ import annotations

import email.utils
import gzip
import http.client
import io
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from email.message import Message
from http import HTTPStatus
from typing import Any, Self

from gotthard.exposition import CONTENT_TYPE, gauge, render_text
from gotthard.serveloop import Conn, Loop, head_end
from gotthard.webconfig import (
    BCRYPT_MAX_PASSWORD_BYTES,
    BasicAuth,
    Limits,
    WebConfig,
    WebConfigError,
    WebReloader,
    certificate_not_after,
    load_web_config,
    optional_web_config,
)

__all__ = [
    "BCRYPT_MAX_PASSWORD_BYTES",
    "BasicAuth",
    "Limits",
    "WebConfig",
    "WebConfigError",
    "certificate_not_after",
    "load_web_config",
    "optional_web_config",
]

log = logging.getLogger("gotthard.serve")

Headers = Sequence[tuple[str, str]]
#: What a route handler returns: status code, extra headers, body.
Response = tuple[int, Headers, bytes]
TEXT = "text/plain; charset=utf-8"


# --- requests, responses, routes ---------------------------------------------------------------


class BodyError(Exception):
    """The request body did not arrive: ``status`` is 408 (not in time) or 400 (the client
    closed or sent less than Content-Length)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Body:
    """Reads a request's body from what the event loop buffered, then from the socket,
    within the request's deadline; sends ``100 Continue`` first when the client expects it."""

    def __init__(self, conn: Conn, deadline: float, expect_continue: bool) -> None:
        self.conn, self.deadline, self.expect_continue = conn, deadline, expect_continue
        self.timeout = 0.0

    def read(self, length: int) -> bytes:
        conn = self.conn
        if self.expect_continue:
            self.expect_continue = False
            conn.sock.settimeout(max(self.deadline - time.monotonic(), 0.001))
            try:
                conn.sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            except OSError:
                raise BodyError(400, "the client went away before sending the body") from None
        out = bytearray(conn.buffer[:length])
        del conn.buffer[:length]
        while len(out) < length:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise BodyError(408, f"{len(out)} of {length} body bytes arrived in time")
            conn.sock.settimeout(remaining)
            try:
                chunk = conn.sock.recv(min(65536, length - len(out)))
            except TimeoutError:
                raise BodyError(408, f"{len(out)} of {length} body bytes arrived in time") from None
            except OSError:
                chunk = b""
            if not chunk:
                raise BodyError(400, f"the body ended after {len(out)} of {length} bytes")
            out += chunk
        return bytes(out)


@dataclass
class Request:
    method: str
    path: str
    query: str
    headers: Message
    peer: str
    _body: _Body | None = None
    body_read: bool = False
    #: the client's SPIFFE ID when it presented an allowed X.509-SVID, else ""
    spiffe_id: str = ""

    def header(self, name: str) -> str | None:
        return self.headers.get(name)

    def read_body(self, length: int) -> bytes:
        """Read ``length`` bytes of body (the caller checked Content-Length first);
        :class:`BodyError` when they do not all arrive within the request's deadline."""
        self.body_read = True
        if length <= 0 or self._body is None:
            return b""
        return self._body.read(length)

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
_VERSION = re.compile(r"HTTP/(\d)\.(\d)")


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


# --- serving one request (in a worker thread) ----------------------------------------------------


class _Exchange:
    """One request on *conn*: parse, authenticate, run the route, answer."""

    def __init__(self, server: Server, conn: Conn) -> None:
        self.server, self.conn = server, conn
        self.method = ""
        self.version = "HTTP/1.1"
        self.keep_alive = False

    def run(self) -> bool:
        """Serve one request; True when the connection stays open for the next."""
        conn, server = self.conn, self.server
        end, size = head_end(conn.buffer)
        if end < 0:
            return self.error(431, "Request header fields too large")
        head = bytes(conn.buffer[:end]).lstrip(b"\r\n")
        del conn.buffer[: end + size]
        line, _, rest = head.partition(b"\n")
        words = line.rstrip(b"\r").decode("latin-1").split()
        if len(words) != 3:
            return self.error(400, f"Bad request syntax ({line[:100]!r})")
        self.method, target, version = words
        match = _VERSION.fullmatch(version)
        if match is None:
            return self.error(400, f"Bad request version ({version[:20]!r})")
        number = (int(match[1]), int(match[2]))
        if number >= (2, 0) or number < (1, 0):
            return self.error(505, f"HTTP version {version[:20]} is not supported")
        self.version = version
        try:
            headers = http.client.parse_headers(io.BytesIO(rest + b"\r\n\r\n"))
        except http.client.HTTPException:
            return self.error(431, "Request header fields too large")
        connection = (headers.get("Connection") or "").lower()
        if number == (1, 0):
            self.keep_alive = "keep-alive" in connection
        else:
            self.keep_alive = "close" not in connection
        state = server.reloader.state
        limits = server.limits
        expect = (headers.get("Expect") or "").lower() == "100-continue" and number == (1, 1)
        body = _Body(conn, (conn.first_byte or time.monotonic()) + limits.read_timeout, expect)
        path, _, query = target.partition("?")
        request = Request(self.method, path, query, headers, conn.address, body)
        request.spiffe_id = conn.spiffe_id
        route_method = "GET" if self.method == "HEAD" else self.method
        key = f"{route_method} {path}"
        authenticated = conn.authenticated
        if conn.forbidden:
            response = text(403, f"Forbidden: {conn.forbidden}\n")
            self.keep_alive = False
        elif route_method not in server.methods:
            return self.error(501, f"Unsupported method ({self.method[:20]!r})")
        elif key not in server.auth_exempt and not state.auth.check(headers.get("Authorization")):
            response = UNAUTHORIZED
        else:
            response = self.route(server.routes.get(key) or server.not_found, request)
            exempt = key in server.auth_exempt
            authenticated = authenticated or not exempt or response[0] not in (401, 403)
        if request.has_body and not request.body_read:
            self.keep_alive = False  # the unread body would be taken for a request
        conn.authenticated = authenticated
        # counted before the answer goes out: a client that reads /metrics right after its
        # answer sees its own request counted
        if server.on_reply is not None:
            server.on_reply(response[0])
        self.respond(*response, extra=state.web.headers)
        return self.keep_alive

    def route(self, handler: Handler, request: Request) -> Response:
        try:
            return handler(request)
        except BodyError as err:
            log.warning(
                "%s: %s %s from %s: %s",
                self.server.name,
                self.method,
                request.path,
                request.peer,
                err,
            )
            self.keep_alive = False
            return text(err.status, f"{_phrase(err.status)}: {err}\n")
        except Exception:
            log.exception("%s: %s %s failed", self.server.name, self.method, request.path)
            return text(500, "Internal server error\n")

    def error(self, status: int, message: str) -> bool:
        """Answer a request that never reached a route, and close."""
        self.keep_alive = False
        log.debug("%s: %s: %d %s", self.server.name, self.conn.address, status, message)
        self.respond(*text(status, f"{_phrase(status)}: {message}\n"))
        return False

    def respond(
        self, status: int, headers: Headers, body: bytes, extra: Mapping[str, str] | None = None
    ) -> None:
        lines = [f"HTTP/1.1 {status} {_phrase(status)}"]
        lines += [f"Server: {self.server.name}", f"Date: {email.utils.formatdate(usegmt=True)}"]
        for name, value in [*headers, *(extra or {}).items()]:
            lines.append(f"{name}: {value}")
            if name.lower() == "connection" and value.lower() == "close":
                self.keep_alive = False
        if not self.keep_alive and not any(n.lower() == "connection" for n, _ in headers):
            lines.append("Connection: close")
        elif self.keep_alive and self.version == "HTTP/1.0":
            lines.append("Connection: keep-alive")
        lines.append(f"Content-Length: {len(body)}")
        data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")
        sock = self.conn.sock
        sock.settimeout(self.server.limits.write_timeout)
        try:
            sock.sendall(data if self.method == "HEAD" else data + body)
        except OSError:
            self.keep_alive = False
        log.debug("%s: %s %s %d", self.server.name, self.conn.address, self.method, status)


#: The route every Gotthard server exposes its metrics on.
METRICS_ROUTE = "GET /metrics"
#: The route every Gotthard server answers health (and readiness, see gotthard.daemon) on.
HEALTH_ROUTE = "GET /healthz"
#: Gauge appended to ``/metrics`` of every server that serves TLS.
CERTIFICATE_NOT_AFTER = "gotthard_tls_certificate_not_after_timestamp_seconds"


def certificate_exposition(server: Server) -> bytes:
    """The certificate gauge of *server*: the notAfter of the certificate it serves, by
    listen address, server name and certificate file (empty when it could not be read)."""
    state = server.reloader.state
    not_after = state.not_after
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
    family.add((f"{host}:{port}", server.name, str(state.web.cert_file)), round(not_after))
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
    check produced. ``limits`` default to the web config's ``connection_limits``.
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
        limits: Limits | None = None,
    ) -> None:
        web = web or WebConfig()
        self.routes = dict(routes)
        self.methods = {key.split(" ", 1)[0] for key in self.routes}
        self.name = name
        self.not_found = not_found
        self.auth_exempt = frozenset(auth_exempt)
        self.on_reply = on_reply
        self.limits = limits or web.limits
        self.reloader = WebReloader(web, self.limits.tls_reload_seconds)
        #: whether the server speaks TLS (fixed for its lifetime)
        self.tls = web.tls
        if self.tls and METRICS_ROUTE in self.routes:
            self.routes[METRICS_ROUTE] = _with_certificate(self.routes[METRICS_ROUTE], self)
        self.thread: threading.Thread | None = None
        self.loop = Loop(self, listen)

    @property
    def web(self) -> WebConfig:
        """The web config in use (it follows its file)."""
        return self.reloader.state.web

    @property
    def auth(self) -> BasicAuth:
        return self.reloader.state.auth

    def _serve_connection(self, conn: Conn) -> bool:
        """Serve the request whose head *conn* holds (in a worker thread)."""
        return _Exchange(self, conn).run()

    @property
    def server_address(self) -> tuple[str, int]:
        return self.loop.address

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        host = self.server_address[0]
        host = f"[{host}]" if ":" in host else host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    def serve_forever(self) -> None:
        self.loop.run()

    def start(self) -> Self:
        """Serve on a daemon thread."""
        self.thread = threading.Thread(target=self.loop.run, name=self.name)
        self.thread.daemon = True
        self.thread.start()
        return self

    def shutdown(self) -> None:
        """Stop the event loop (from another thread than the one serving)."""
        self.loop.stop()

    def server_close(self) -> None:
        """Stop serving if it still does, then close the listening socket and every open
        connection."""
        self.loop.close()

    def close(self) -> None:
        self.shutdown()
        self.server_close()
