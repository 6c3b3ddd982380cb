"""A simulated pager, ticket system and dead man's switch: NOT PagerDuty, NOT a ticket
system. An HTTP endpoint that takes Alertmanager's webhook notifications on any path
(``/pager/<site>``, ``/ticket``, ``/deadman``) and records each one, so that a sandbox's
Alertmanagers deliver somewhere real (a ``*.invalid`` placeholder fails every delivery)
and tests can ask what paged, when, and how often.

Each notification is one JSON line in the log file: the path, when it arrived, and per
alert its status and labels. ``GET /received`` answers the same records as a JSON list.

Standalone::

    python -m gotthard_testing.notifications --listen 127.0.0.1:9095 --log FILE
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

#: Alertmanager batches at most a few hundred alerts; more than this is not a notification.
MAX_BODY = 4 * 1024 * 1024


def record(path: str, payload: Any, now: float) -> dict[str, Any]:
    """What is kept of one notification: its receiver path and its alerts."""
    alerts = payload.get("alerts") if isinstance(payload, dict) else None
    return {
        "path": path,
        "received": now,
        "status": payload.get("status") if isinstance(payload, dict) else None,
        "alerts": [
            {"status": a.get("status"), "labels": a.get("labels") or {}}
            for a in alerts or []
            if isinstance(a, dict)
        ],
    }


class Recorder:
    """The notifications received, in memory and appended to *log*."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self._lock = threading.Lock()
        self._records: list[dict[str, Any]] = []
        log.parent.mkdir(parents=True, exist_ok=True)
        log.touch(mode=0o600)

    def add(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._records.append(entry)
            with self.log.open("a", encoding="utf-8") as out:
                out.write(json.dumps(entry, sort_keys=True) + "\n")

    def all(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._records)


def handler(recorder: Recorder) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = 10

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self, code: int, body: bytes = b"") -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/received":
                self._answer(404)
                return
            self._answer(200, json.dumps(recorder.all()).encode())

        def do_POST(self) -> None:
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if not 0 <= length <= MAX_BODY:
                self._answer(400)
                return
            try:
                payload = json.loads(self.rfile.read(length) or b"null")
            except ValueError:
                self._answer(400)
                return
            recorder.add(record(self.path, payload, time.time()))
            self._answer(200, b"{}")

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gotthard_testing.notifications")
    parser.add_argument("--listen", default="127.0.0.1:9095", help="host:port")
    parser.add_argument("--log", type=Path, required=True, help="JSON lines of notifications")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    try:
        server = ThreadingHTTPServer((host, int(port)), handler(Recorder(args.log)))
    except (OSError, ValueError) as exc:
        print(f"notifications: cannot listen on {args.listen}: {exc}", file=sys.stderr)
        return 2
    server.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
