"""Site files for DR tests that run ``gotthard`` in child processes against the emulator.

A child process cannot be handed an ``ApiClient``: it reaches the emulator the way the
real daemon reaches a cluster, through a kubeconfig file (``sites.NAME.kubeconfig``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


def write_kubeconfig(path: Path, url: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "emu", "cluster": {"server": url}}],
                "users": [{"name": "emu", "user": {"token": "test"}}],
                "contexts": [{"name": "emu", "context": {"cluster": "emu", "user": "emu"}}],
                "current-context": "emu",
            }
        )
    )
    return path


def toml_value(value: Any) -> str:
    """A TOML (inline) value; enough for the site files of these tests."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(type(value))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def site_file(tmp_path: Path, url: str, **dr: Any) -> Path:
    """``site.toml`` whose ``[dr]`` points every site at the emulator at *url*."""
    kubeconfig = str(write_kubeconfig(tmp_path / "kubeconfig.yaml", url))
    data: dict[str, Any] = {
        "site": "zurich",
        "sites": {
            "zurich": {"kubeconfig": kubeconfig, "karmada_clusters": ["zrh-a"]},
            "lugano": {"kubeconfig": kubeconfig, "karmada_clusters": ["lug-a"]},
        },
        "jobstore_url": f"sqlite:///{tmp_path}/jobs.sqlite",
        "listen": f"127.0.0.1:{free_port()}",
        "poll_interval_seconds": 0.05,
        "api_backoff_seconds": 0.01,
        "api_backoff_max_seconds": 0.05,
        "api_timeout_seconds": 2,
        "backup_timeout_seconds": 10,
        "restore_timeout_seconds": 10,
        "lease": {"namespace": "gotthard", "duration_seconds": 2, "renew_seconds": 0.2},
        "schedules": [
            {"name": "daily", "namespaces": ["prod"], "cron": "0 2 * * *", "sites": ["zurich"]}
        ],
        "drills": [{"site": "zurich", "namespace": "prod"}],
        "placement": {"state_file": f"{tmp_path}/placement.json"},
    }
    data.update(dr)
    path = tmp_path / "site.toml"
    path.write_text(f"dr = {toml_value(data)}\n")
    return path


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "GOTTHARD_CONFIG"}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def gotthard(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """``python -m gotthard ARGS`` in a child process."""
    return subprocess.run(
        [sys.executable, "-m", "gotthard", *args],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@contextmanager
def background(*argv: str, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A child process (stdout+stderr to *log*), SIGKILLed if the test leaves it running."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, *argv], cwd=ROOT, env=child_env(), stdout=out, stderr=out
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(10)


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=2) as r:
        return json.load(r)


def wait_http(url: str, pred: Any, timeout: float = 15.0) -> Any:
    """Poll *url* (JSON) until ``pred(body)``; the body."""
    end = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < end:
        try:
            last = get_json(url)
            if pred(last):
                return last
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url}: condition not met in {timeout}s (last: {last})")
