"""The webhook HTTP server: ``POST /alerts``, ``GET /healthz``, ``GET /metrics``.

Order of checks on ``POST /alerts``: bearer token (constant time, else 401), body size
from Content-Length (else 411/413, the body is never read), JSON and schema (else 400
with the reason), then the engine. Every refusal and every decision is audited before
the reply is sent. Error replies close the connection.

Serving (TLS, timeouts, connection limits) is :mod:`gotthard.serve`. With a web config
that sets ``basic_auth_users``, ``/healthz`` and ``/metrics`` need basic auth;
``POST /alerts`` keeps its bearer token as its authentication (a request carries one
``Authorization`` header, and Alertmanager sends either basic auth or a bearer token).
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import threading
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gotthard.base import parse_listen
from gotthard.runbooks.engine import Engine
from gotthard.runbooks.validate import PayloadError, parse_payload
from gotthard.serve import Request, Response, Server, WebConfig, json_response

log = logging.getLogger("gotthard.runbooks")


class TokenError(Exception):
    """The bearer token file is missing, unreadable or empty."""


def read_token(path: str | Path) -> bytes:
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as err:
        raise TokenError(f"cannot read the bearer token file {path}: {err}") from None
    if len(token) < 16:
        raise TokenError(f"the bearer token in {path} is shorter than 16 characters")
    return token.encode()


ALERTS = "POST /alerts"


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
        routes = {
            "GET /healthz": self._healthz,
            "GET /metrics": self._metrics,
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

    def _count(self, status: int) -> None:
        self.engine.metrics.requests.labels(str(status)).inc()

    def _healthz(self, request: Request) -> Response:
        engine = self.engine
        state = {
            "status": "ok",
            "mode": engine.settings.mode,
            "kill_switch": engine.kill_switch_on(),
        }
        return _reply(200, state)

    def _metrics(self, request: Request) -> Response:
        body = generate_latest(self.engine.metrics.registry)
        return 200, [("Content-Type", CONTENT_TYPE_LATEST)], body

    def _refuse(self, request: Request, code: int, message: str, request_id: str) -> Response:
        self.engine.audit.write(
            {
                "request": request_id,
                "result": "rejected",
                "http_status": code,
                "why": message,
                "peer": request.peer,
            }
        )
        return _reply(code, {"error": message})

    def _alerts(self, request: Request) -> Response:
        request_id = secrets.token_hex(8)
        engine = self.engine
        if not self.authorised(request.header("Authorization")):
            return self._refuse(request, 401, "missing or wrong bearer token", request_id)
        if request.header("Transfer-Encoding"):
            why = "chunked bodies are not accepted: send Content-Length"
            return self._refuse(request, 411, why, request_id)
        raw_length = request.header("Content-Length")
        if raw_length is None or not raw_length.strip().isdigit():
            return self._refuse(request, 411, "Content-Length is required", request_id)
        length = int(raw_length)
        limit = engine.settings.max_body_bytes
        if length > limit:
            why = f"body of {length} bytes exceeds the limit of {limit}"
            return self._refuse(request, 413, why, request_id)
        body = request.read_body(length)
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as err:
            return self._refuse(request, 400, f"body is not valid JSON: {err}", request_id)
        try:
            payload = parse_payload(data, engine.settings.max_alerts_per_request)
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
