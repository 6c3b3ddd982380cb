"""What reaches the webhook from a hostile or careless client: deeply nested JSON, odd
Content-Length values, floods of unauthenticated requests; and the modes of its files."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gotthard.sandbox import free_ports
from tests.runbooks.conftest import TOKEN, Running, alert_payload, settings_for
from tests.support.cli import ROOT, gotthard, gotthard_argv
from tests.support.monitoring import get_json, http_ok
from tests.support.wait import wait_until


def _raw_post(running: Running, head: bytes, body: bytes = b"") -> tuple[int, dict[str, Any]]:
    """POST /alerts with the header lines *head* as given (bytes on the wire)."""
    host, port = running.server.server_address
    with socket.create_connection((host, port), timeout=10) as conn:
        conn.sendall(b"POST /alerts HTTP/1.1\r\nHost: test\r\n" + head + b"\r\n" + body)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    _, _, payload = rest.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), json.loads(payload)


def _bearer() -> bytes:
    return f"Authorization: Bearer {TOKEN}\r\n".encode()


def _requests_by_code(running: Running) -> dict[str, float]:
    _, text = running.get("/metrics")
    return {
        sample.labels["code"]: sample.value
        for family in text_string_to_metric_families(text.decode())
        if family.name == "gotthard_runbook_webhook_requests"
        for sample in family.samples
        if sample.name.endswith("_total")
    }


def _mode(path: str | Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


# --- bodies and headers ---------------------------------------------------------------------


def test_deeply_nested_json_is_400_and_audited(tmp_path, fake_slurm, start_server) -> None:
    running = start_server(settings_for(tmp_path, fake_slurm))
    for body in (b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 65 + b"1" + b"}" * 65):
        code, answer = running.post(body)
        assert code == 400
        assert "levels deep; the limit is 64" in answer["error"], answer
    assert [r["http_status"] for r in running.audit()] == [400, 400]
    # brackets inside strings are text, not nesting
    payload = alert_payload(node="nid001")
    payload["alerts"][0]["annotations"]["description"] = "[{" * 500 + '\\"' + "]}" * 500
    code, answer = running.post(payload)
    assert code == 200, answer
    assert running.get("/healthz")[0] == 200  # the server is still serving


@pytest.mark.parametrize(
    "value", [b"\xb2", b"\xb9\xb3", b"+12", b"-1", b"0x10", b"1 2", b"12abc", b"1e3", b""]
)
def test_content_length_must_be_ascii_digits(
    tmp_path, fake_slurm, start_server, value: bytes
) -> None:
    running = start_server(settings_for(tmp_path, fake_slurm))
    code, answer = _raw_post(running, _bearer() + b"Content-Length: " + value + b"\r\n")
    assert code == 400
    assert "Content-Length must be a number of bytes in ASCII digits" in answer["error"]
    [record] = running.audit()
    assert (record["http_status"], record["result"]) == (400, "rejected")


def test_content_length_missing_twice_or_huge(tmp_path, fake_slurm, start_server) -> None:
    running = start_server(settings_for(tmp_path, fake_slurm))
    code, answer = _raw_post(running, _bearer())
    assert (code, answer["error"]) == (411, "Content-Length is required")
    two = b"Content-Length: 2\r\nContent-Length: 3\r\n"
    code, answer = _raw_post(running, _bearer() + two, b"{}")
    assert (code, answer["error"]) == (400, "more than one Content-Length header")
    code, answer = _raw_post(running, _bearer() + b"Content-Length: " + b"9" * 5000 + b"\r\n")
    assert code == 413
    assert "exceeds the limit of 1048576" in answer["error"]
    code, _ = _raw_post(running, _bearer() + b"Content-Length: 0002\r\n", b"{}")
    assert code == 400  # leading zeros are digits; "{}" is no payload
    assert [r["http_status"] for r in running.audit()] == [411, 400, 413, 400]


# --- unauthenticated floods -------------------------------------------------------------------


def test_unauthenticated_flood_is_audited_as_counted_samples(
    tmp_path, fake_slurm, start_server
) -> None:
    running = start_server(settings_for(tmp_path, fake_slurm))
    sent = 150
    started = time.monotonic()
    for _ in range(sent):
        code, _ = _raw_post(running, b"Authorization: Bearer wrong\r\nContent-Length: 0\r\n")
        assert code == 401
    seconds = time.monotonic() - started
    lines = running.audit()
    assert len(lines) <= 5 * (int(seconds) + 2), (len(lines), seconds)
    assert all(r["http_status"] == 401 and r["peer"] == "127.0.0.1" for r in lines)
    assert _requests_by_code(running)["401"] == sent  # the metric counts every one
    # at shutdown, what was only counted is written: every refusal is accounted for
    running.server.server_close()
    lines = running.audit()
    assert sum(("request" in r) + r["suppressed"] for r in lines) == sent
    assert any(r["suppressed"] > 0 for r in lines)


def test_authenticated_requests_are_always_audited(tmp_path, fake_slurm, start_server) -> None:
    running = start_server(settings_for(tmp_path, fake_slurm))
    for _ in range(20):
        assert running.post(b"{not json")[0] == 400
    assert len(running.audit()) == 20


# --- files ------------------------------------------------------------------------------------


def test_audit_log_is_created_0600_and_a_loose_one_tightened(
    tmp_path, fake_slurm, start_server
) -> None:
    old = os.umask(0o022)
    try:
        running = start_server(settings_for(tmp_path, fake_slurm))
        assert running.post(alert_payload(node="nid001"))[0] == 200
        assert _mode(running.settings.audit_log) == 0o600
        loose = tmp_path / "old-audit.jsonl"
        loose.write_text('{"result": "planned"}\n')
        loose.chmod(0o644)
        again = start_server(settings_for(tmp_path, fake_slurm, audit_log=str(loose)))
        assert again.post(b"{not json")[0] == 400
    finally:
        os.umask(old)
    assert _mode(loose) == 0o600
    assert len(loose.read_text().splitlines()) == 2  # appended to, not replaced


def _serve_argv(tmp_path: Path, token_mode: int, *extra: str) -> list[str]:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(token_mode)
    audit = str(tmp_path / "audit.jsonl")
    return ["runbooks", "serve", "--token-file", str(token), "--audit-log", audit, *extra]


@pytest.mark.parametrize("token_mode", [0o644, 0o640, 0o604, 0o620, 0o602])
def test_serve_refuses_a_token_file_open_to_others(tmp_path: Path, token_mode: int) -> None:
    (port,) = free_ports(1)
    result = gotthard(*_serve_argv(tmp_path, token_mode, "--listen", f"127.0.0.1:{port}"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "readable or writable by group or others" in lines[0]
    assert f"(mode {token_mode:04o})" in lines[0]
    assert "--insecure-token-file" in lines[0]


@pytest.mark.parametrize(("token_mode", "warned"), [(0o644, True), (0o400, False)])
def test_serve_with_insecure_token_file_warns(
    tmp_path: Path, token_mode: int, warned: bool
) -> None:
    (port,) = free_ports(1)
    extra = ("--listen", f"127.0.0.1:{port}", "--insecure-token-file")
    argv = gotthard_argv(*_serve_argv(tmp_path, token_mode, *extra))
    proc = subprocess.Popen(argv, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        healthz = f"http://127.0.0.1:{port}/healthz"
        wait_until(lambda: http_ok(healthz), 20, "the server to start")
        assert get_json(healthz)["status"] == "ok"
        request = urllib.request.Request(f"http://127.0.0.1:{port}/alerts", b"{}", method="POST")
        request.add_header("Authorization", f"Bearer {TOKEN}")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(request, timeout=10)
        assert err.value.code == 400  # the token was read and accepted
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
    assert proc.stderr is not None
    stderr = proc.stderr.read()
    assert ("readable or writable by group or others" in stderr) is warned
    assert _mode(tmp_path / "audit.jsonl") == 0o600
