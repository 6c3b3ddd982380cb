"""The simulated pager/ticket endpoint the sandbox's Alertmanagers deliver to."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from gotthard.sandbox import free_ports
from tests.support.wait import wait_until


def post(url: str, body: bytes) -> int:
    request = urllib.request.Request(url, data=body, method="POST")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code


def test_records_each_notification_by_receiver_path(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    log = tmp_path / "notifications.jsonl"
    argv = [sys.executable, "-m", "gotthard_testing.notifications"]
    proc = subprocess.Popen([*argv, "--listen", f"127.0.0.1:{port}", "--log", str(log)])
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _answers(f"{base}/received"), timeout=10)
        payload = {
            "status": "firing",
            "alerts": [{"status": "firing", "labels": {"alertname": "GPULost", "site": "zurich"}}],
        }
        assert post(f"{base}/pager/zurich", json.dumps(payload).encode()) == 200
        assert post(f"{base}/ticket", b"not json") == 400
        with urllib.request.urlopen(f"{base}/received", timeout=5) as answer:
            received = json.load(answer)
    finally:
        proc.terminate()
        proc.wait(10)
    assert [(r["path"], r["status"]) for r in received] == [("/pager/zurich", "firing")]
    assert received[0]["alerts"][0]["labels"]["alertname"] == "GPULost"
    assert [json.loads(line)["path"] for line in log.read_text().splitlines()] == ["/pager/zurich"]
    assert log.stat().st_mode & 0o077 == 0


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False
