"""The webhook HTTP server: ``POST /alerts``, ``GET /healthz``, ``GET /metrics``.

Order of checks on ``POST /alerts``: bearer token (constant time, else 401), body size
from Content-Length (else 411/413, the body is never read), JSON and schema (else 400
with the reason), then the engine. Every refusal and every decision is audited before
the reply is sent.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gotthard.runbooks.engine import Engine
from gotthard.runbooks.settings import parse_listen
from gotthard.runbooks.validate import PayloadError, parse_payload

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


class RunbookServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], engine: Engine, token: bytes) -> None:
        self.engine = engine
        self.token = token
        super().__init__(address, _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def start_background(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="runbook-server", daemon=True)
        thread.start()
        return thread

    def authorised(self, header: str | None) -> bool:
        expected = b"Bearer " + self.token
        given = (header or "").encode("utf-8", "replace")
        return hmac.compare_digest(given, expected)


def make_server(listen: str, engine: Engine, token: bytes) -> RunbookServer:
    host, port = parse_listen(listen)
    return RunbookServer((host, port), engine, token)


class _Handler(BaseHTTPRequestHandler):
    server: RunbookServer
    protocol_version = "HTTP/1.1"
    server_version = "gotthard-runbooks"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def _reply(self, code: int, body: Any, content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else (json.dumps(body) + "\n").encode()
        self.server.engine.metrics.requests.labels(str(code)).inc()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        if code == 401:
            self.send_header("WWW-Authenticate", 'Bearer realm="gotthard-runbooks"')
        if code >= 400:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _refuse(self, code: int, message: str, request_id: str) -> None:
        self.server.engine.audit.write(
            {
                "request": request_id,
                "result": "rejected",
                "http_status": code,
                "why": message,
                "peer": self.client_address[0],
            }
        )
        self._reply(code, {"error": message})

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            engine = self.server.engine
            self._reply(
                200,
                {
                    "status": "ok",
                    "mode": engine.settings.mode,
                    "kill_switch": engine.kill_switch_on(),
                },
            )
        elif path == "/metrics":
            self._reply(
                200, generate_latest(self.server.engine.metrics.registry), CONTENT_TYPE_LATEST
            )
        else:
            self._reply(404, {"error": "not found"})

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_POST(self) -> None:
        request_id = secrets.token_hex(8)
        engine = self.server.engine
        if self.path.split("?", 1)[0] != "/alerts":
            self._reply(404, {"error": "not found"})
            return
        if not self.server.authorised(self.headers.get("Authorization")):
            self._refuse(401, "missing or wrong bearer token", request_id)
            return
        if self.headers.get("Transfer-Encoding"):
            self._refuse(411, "chunked bodies are not accepted: send Content-Length", request_id)
            return
        raw_length = self.headers.get("Content-Length")
        if raw_length is None or not raw_length.strip().isdigit():
            self._refuse(411, "Content-Length is required", request_id)
            return
        length = int(raw_length)
        limit = engine.settings.max_body_bytes
        if length > limit:
            self._refuse(413, f"body of {length} bytes exceeds the limit of {limit}", request_id)
            return
        body = self.rfile.read(length)
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as err:
            self._refuse(400, f"body is not valid JSON: {err}", request_id)
            return
        try:
            payload = parse_payload(data, engine.settings.max_alerts_per_request)
        except PayloadError as err:
            self._refuse(400, str(err), request_id)
            return
        try:
            decisions = engine.process(payload, request_id)
        except Exception as err:  # never crash the server; audit and answer 500
            log.exception("processing request %s failed", request_id)
            self._refuse(500, f"internal error: {type(err).__name__}", request_id)
            return
        summary: dict[str, int] = {}
        for decision in decisions:
            summary[decision["result"]] = summary.get(decision["result"], 0) + 1
        self._reply(
            200,
            {"request": request_id, "mode": engine.settings.mode, "results": summary},
        )
