"""An OPA-REST-compatible test server backed by the embedded engine (regopy).

No OPA binary can be installed on the development machines, so the ``--engine opa`` path
(opa-python-client) is tested against this server. It implements the subset of the OPA
REST API that the client uses: ``GET /health``, ``PUT/GET/DELETE /v1/policies/{id}``,
``PUT/GET /v1/data/{path}`` and ``POST /v1/data/{path}`` with ``{"input": ...}``
(answering ``{"result": ...}``, no ``result`` key when undefined). It is not OPA: policies
are evaluated by rego-cpp, and only what these tests need is implemented.

Like OPA, it compiles the policies and data once, when they change, not per query: the
rules queried so far are compiled into one bundle (a rule queried for the first time
rebuilds it) and each query evaluates its entry point in that bundle.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import regopy


class EmbeddedBackedOpaServer:
    def __init__(self) -> None:
        self.policies: dict[str, str] = {}
        self.data: dict[str, Any] = {}
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._interp: regopy.Interpreter | None = None
        self._entrypoints: set[str] = set()
        self._bundle: regopy.Bundle | None = None
        self._evaluator = regopy.Interpreter()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> EmbeddedBackedOpaServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    # evaluation ------------------------------------------------------------------------

    def _loaded(self) -> regopy.Interpreter:
        interp = regopy.Interpreter()
        for pid, src in self.policies.items():
            interp.add_module(pid, src)
        interp.add_data_json(json.dumps(self.data))
        return interp

    def _interpreter(self) -> regopy.Interpreter:
        if self._interp is None:
            self._interp = self._loaded()
            self._bundle = None
        return self._interp

    def _compiled(self, entrypoint: str) -> regopy.Bundle | None:
        """The bundle of every entry point queried so far (rebuilt for a new one), or None
        when *entrypoint* names no rule (a package, or nothing): then a plain query.
        (Each build on a fresh interpreter: regopy keeps the entry points of earlier builds
        of an interpreter, and a second build of one answers with the wrong plans.)"""
        self._interpreter()
        if self._bundle is None or entrypoint not in self._entrypoints:
            try:
                bundle = self._loaded().build(None, sorted({*self._entrypoints, entrypoint}))
            except regopy.RegoError:
                return None
            self._entrypoints.add(entrypoint)
            self._bundle = bundle
        return self._bundle

    def evaluate(self, path: list[str], input_doc: Any) -> tuple[bool, Any]:
        with self._lock:
            bundle = self._compiled("/".join(path)) if path else None
            if bundle is None:
                interp = self._interpreter()
                interp.set_input_term(json.dumps(input_doc))
                out = interp.query("data." + ".".join(path) if path else "data")
            else:
                self._evaluator.set_input_term(json.dumps(input_doc))
                out = self._evaluator.query_bundle_entrypoint(bundle, "/".join(path))
            if not out.ok():
                raise RuntimeError("evaluation failed")
            if len(out) == 0:
                return False, None
            return True, json.loads(out.expressions().json())[0]

    def put_policy(self, pid: str, src: str) -> str | None:
        try:  # compile check, like OPA's 400 on a parse error
            regopy.Interpreter().add_module(pid, src)
        except regopy.RegoError:
            return "rego_parse_error"
        with self._lock:
            self.policies[pid] = src
            self._interp = None
        return None

    def put_data(self, path: list[str], value: Any) -> None:
        with self._lock:
            node = self.data
            for key in path[:-1]:
                node = node.setdefault(key, {})
            if path:
                node[path[-1]] = value
            else:
                self.data = value
            self._interp = None

    def get_data(self, path: list[str]) -> tuple[bool, Any]:
        node: Any = self.data
        for key in path:
            if not isinstance(node, dict) or key not in node:
                return False, None
            node = node[key]
        return True, node

    # HTTP ------------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, body: Any = None) -> None:
                raw = b"" if body is None else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _route(self) -> tuple[str, list[str]]:
                path = self.path.split("?", 1)[0].strip("/")
                parts = [p for p in path.split("/") if p]
                server.requests.append((self.command, "/" + path))
                if parts[:2] == ["v1", "policies"]:
                    return "policies", ["/".join(parts[2:])] if parts[2:] else []
                if parts[:2] == ["v1", "data"]:
                    return "data", parts[2:]
                return "/".join(parts), []

            def do_GET(self) -> None:
                kind, rest = self._route()
                if kind == "health":
                    self._send(200, {})
                elif kind == "policies":
                    if not rest:
                        pols = [{"id": k, "raw": v} for k, v in server.policies.items()]
                        self._send(200, {"result": pols})
                    elif rest[0] in server.policies:
                        self._send(
                            200, {"result": {"id": rest[0], "raw": server.policies[rest[0]]}}
                        )
                    else:
                        self._send(404, {"code": "resource_not_found", "message": rest[0]})
                elif kind == "data":
                    found, value = server.get_data(rest)
                    self._send(200, {"result": value} if found else {})
                else:
                    self._send(404, {"code": "resource_not_found", "message": self.path})

            def do_PUT(self) -> None:
                kind, rest = self._route()
                body = self._body()
                if kind == "policies" and rest:
                    err = server.put_policy(rest[0], body.decode())
                    if err:
                        self._send(400, {"code": "invalid_parameter", "message": err, "errors": []})
                    else:
                        self._send(200, {})
                elif kind == "data":
                    server.put_data(rest, json.loads(body or b"null"))
                    self._send(204)
                else:
                    self._send(404, {"code": "resource_not_found", "message": self.path})

            def do_DELETE(self) -> None:
                kind, rest = self._route()
                if kind == "policies" and rest and rest[0] in server.policies:
                    with server._lock:
                        del server.policies[rest[0]]
                        server._interp = None
                    self._send(200, {})
                else:
                    self._send(404, {"code": "resource_not_found", "message": self.path})

            def do_POST(self) -> None:
                kind, rest = self._route()
                if kind != "data":
                    self._send(404, {"code": "resource_not_found", "message": self.path})
                    return
                try:
                    payload = json.loads(self._body() or b"{}")
                    found, value = server.evaluate(rest, payload.get("input"))
                except (ValueError, RuntimeError) as err:
                    self._send(500, {"code": "internal_error", "message": str(err)})
                    return
                self._send(200, {"result": value} if found else {})

        return Handler
