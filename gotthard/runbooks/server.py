"""The webhook HTTP server: ``POST /alerts``, ``GET /healthz``, ``GET /metrics``.

Order of checks on ``POST /alerts``: bearer token (constant time, else 401), body size
from Content-Length (only ASCII digits, one header; else 400/411/413, the body is never
read), the body within the read timeout (else 408, or 400 when it ends early), JSON
nesting depth, JSON and schema (else 400 with the reason), then the engine.
Every refusal and every decision is audited before the reply is sent, except that
refusals of unauthenticated requests are sampled (:class:`RejectSampler`) so that a flood
cannot fill the disk or keep it busy with fsyncs; the request metric counts them all.
Error replies close the connection.

Serving (TLS, timeouts, connection limits) is :mod:`gotthard.serve`. With a web config
that sets ``basic_auth_users``, ``/healthz`` and ``/metrics`` need basic auth;
``POST /alerts`` keeps its bearer token as its authentication (a request carries one
``Authorization`` header, and Alertmanager sends either basic auth or a bearer token).
"""

from __future__ import annotations

import hmac
import logging
import os
import re
import secrets
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gotthard.base import parse_listen
from gotthard.exposition import render_registry
from gotthard.runbooks.engine import Engine
from gotthard.runbooks.validate import PayloadError, load_json, parse_payload
from gotthard.serve import (
    HEALTH_ROUTE,
    METRICS_ROUTE,
    BodyError,
    Request,
    Response,
    Server,
    WebConfig,
    exposition,
    json_response,
)

log = logging.getLogger("gotthard.runbooks")


class TokenError(Exception):
    """The bearer token file is missing, unreadable or empty."""


def read_token(path: str | Path, *, allow_insecure: bool = False) -> bytes:
    """The token in *path*; a file that group or others may read or write is refused
    (a warning with *allow_insecure*)."""
    try:
        with open(path, "rb") as handle:
            mode = stat.S_IMODE(os.fstat(handle.fileno()).st_mode)
            if mode & 0o066:
                why = (
                    f"the bearer token file {path} is readable or writable by group or others"
                    f" (mode {mode:04o})"
                )
                if not allow_insecure:
                    raise TokenError(f"{why}: chmod 600 it, or pass --insecure-token-file")
                log.warning("%s; serving anyway (--insecure-token-file)", why)
            token = handle.read().decode("utf-8").strip()
    except (OSError, UnicodeDecodeError) as err:
        raise TokenError(f"cannot read the bearer token file {path}: {err}") from None
    if len(token) < 16:
        raise TokenError(f"the bearer token in {path} is shorter than 16 characters")
    return token.encode()


ALERTS = "POST /alerts"
UNAUTHENTICATED = "missing or wrong bearer token"
_ASCII_DIGITS = re.compile(r"[0-9]+")


class RejectSampler:
    """Which refusals of unauthenticated requests are written to the audit log.

    At most ``per_peer`` lines a second for one peer and ``total`` a second in all. A
    written line carries ``suppressed``: how many refusals of its peer were left out since
    that peer's previous line. Counts still pending are written by :meth:`drain` (at
    shutdown); beyond ``max_peers`` peers with pending counts, the rest are counted under
    the peer ``"other"``.
    """

    OTHER = "other"

    def __init__(
        self,
        per_peer: int = 5,
        total: int = 50,
        max_peers: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_peer, self.total, self.max_peers = per_peer, total, max_peers
        self.clock = clock
        self._lock = threading.Lock()
        self._second = -1
        self._written: dict[str, int] = {}  # this second's lines per peer (<= total peers)
        self._suppressed: dict[str, int] = {}

    def admit(self, peer: str) -> int | None:
        """The ``suppressed`` count for a line about *peer*, or None: write no line."""
        with self._lock:
            second = int(self.clock())
            if second != self._second:
                self._second, self._written = second, {}
            written = self._written.get(peer, 0)
            if written >= self.per_peer or sum(self._written.values()) >= self.total:
                key = peer
                if peer not in self._suppressed and len(self._suppressed) >= self.max_peers:
                    key = self.OTHER
                self._suppressed[key] = self._suppressed.get(key, 0) + 1
                return None
            self._written[peer] = written + 1
            return self._suppressed.pop(peer, 0)

    def drain(self) -> dict[str, int]:
        """The pending counts per peer, forgotten here."""
        with self._lock:
            pending, self._suppressed = self._suppressed, {}
        return pending


class RunbookServer(Server):
    def __init__(
        self,
        address: tuple[str, int],
        engine: Engine,
        token: bytes,
        *,
        web: WebConfig | None = None,
    ) -> None:
        self.engine = engine
        self.token = token
        self.sampler = RejectSampler()
        routes = {
            HEALTH_ROUTE: self._healthz,
            METRICS_ROUTE: self._metrics,
            ALERTS: self._alerts,
        }
        super().__init__(
            address,
            routes,
            web=web,
            name="gotthard-runbooks",
            not_found=lambda _: _reply(404, {"error": "not found"}),
            auth_exempt={ALERTS},
            on_reply=self._count,
        )

    def start_background(self) -> threading.Thread:
        thread = self.start().thread
        assert thread is not None
        return thread

    def authorised(self, header: str | None) -> bool:
        expected = b"Bearer " + self.token
        given = (header or "").encode("utf-8", "replace")
        return hmac.compare_digest(given, expected)

    def server_close(self) -> None:
        """Close, then audit the unauthenticated refusals still only counted."""
        super().server_close()
        for peer, count in self.sampler.drain().items():
            record = {
                "result": "rejected",
                "http_status": 401,
                "why": f"{UNAUTHENTICATED} (not written one by one)",
                "peer": peer,
                "suppressed": count,
            }
            try:
                self.engine.audit.write(record)
            except (OSError, ValueError) as err:  # ValueError: the log is already closed
                log.error("cannot audit %d refusals of %s: %s", count, peer, err)

    def _count(self, status: int) -> None:
        self.engine.metrics.requests.labels(str(status)).inc()

    def _healthz(self, request: Request) -> Response:
        engine = self.engine
        state = {
            "status": "ok",
            "mode": engine.settings.mode,
            "kill_switch": engine.kill_switch_on(),
            "clusters": engine.clusters.names,
        }
        return _reply(200, state)

    def _metrics(self, request: Request) -> Response:
        return exposition(render_registry(self.engine.metrics.registry))

    def _refuse(
        self, request: Request, code: int, message: str, request_id: str, **extra: Any
    ) -> Response:
        self.engine.audit.write(
            {
                "request": request_id,
                "result": "rejected",
                "http_status": code,
                "why": message,
                "peer": request.peer,
                **extra,
            }
        )
        return _reply(code, {"error": message})

    def _unauthenticated(self, request: Request, request_id: str) -> Response:
        suppressed = self.sampler.admit(request.peer)
        if suppressed is None:
            return _reply(401, {"error": UNAUTHENTICATED})
        return self._refuse(request, 401, UNAUTHENTICATED, request_id, suppressed=suppressed)

    def _content_length(self, request: Request, request_id: str) -> int | Response:
        """The body's length, or the refusal: one Content-Length of ASCII digits, within
        ``max_body_bytes``."""
        values = request.headers.get_all("Content-Length") or []
        if not values:
            return self._refuse(request, 411, "Content-Length is required", request_id)
        if len(values) > 1:
            why = "more than one Content-Length header"
            return self._refuse(request, 400, why, request_id)
        raw = values[0].strip(" \t")
        if not _ASCII_DIGITS.fullmatch(raw):
            why = f"Content-Length must be a number of bytes in ASCII digits, not {raw[:40]!r}"
            return self._refuse(request, 400, why, request_id)
        digits = raw.lstrip("0") or "0"
        limit = self.engine.settings.max_body_bytes
        if len(digits) > len(str(limit)) or int(digits) > limit:
            shown = digits if len(digits) <= 20 else digits[:20] + "..."
            why = f"body of {shown} bytes exceeds the limit of {limit}"
            return self._refuse(request, 413, why, request_id)
        return int(digits)

    def _alerts(self, request: Request) -> Response:
        request_id = secrets.token_hex(8)
        engine = self.engine
        if not self.authorised(request.header("Authorization")):
            return self._unauthenticated(request, request_id)
        if request.header("Transfer-Encoding"):
            why = "chunked bodies are not accepted: send Content-Length"
            return self._refuse(request, 411, why, request_id)
        length = self._content_length(request, request_id)
        if not isinstance(length, int):
            return length
        try:
            body = request.read_body(length)
        except BodyError as err:  # 408: not in time; 400: the client closed early
            return self._refuse(request, err.status, f"request body: {err}", request_id)
        try:
            payload = parse_payload(load_json(body), engine.settings.max_alerts_per_request)
        except PayloadError as err:
            return self._refuse(request, 400, str(err), request_id)
        try:
            decisions = engine.process(payload, request_id)
        except Exception as err:  # never crash the server; audit and answer 500
            log.exception("processing request %s failed", request_id)
            why = f"internal error: {type(err).__name__}"
            return self._refuse(request, 500, why, request_id)
        summary: dict[str, int] = {}
        for decision in decisions:
            summary[decision["result"]] = summary.get(decision["result"], 0) + 1
        return _reply(
            200, {"request": request_id, "mode": engine.settings.mode, "results": summary}
        )


def _reply(code: int, value: Any) -> Response:
    """JSON, with ``WWW-Authenticate`` on 401 and the connection closed on errors."""
    headers: list[tuple[str, str]] = []
    if code == 401:
        headers.append(("WWW-Authenticate", 'Bearer realm="gotthard-runbooks"'))
    if code >= 400:
        headers.append(("Connection", "close"))
    return json_response(code, value, headers)


def make_server(
    listen: str, engine: Engine, token: bytes, *, web: WebConfig | None = None
) -> RunbookServer:
    host, port = parse_listen(listen)
    return RunbookServer((host, port), engine, token, web=web)
