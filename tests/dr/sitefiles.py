"""Site files for DR tests that run ``gotthard`` in child processes against the emulator.

A child process cannot be handed an ``ApiClient``: it reaches the emulator the way the
real daemon reaches a cluster, through a kubeconfig file
(``[sites.NAME.clusters.CLUSTER.kubernetes] kubeconfig``).
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gotthard.deploy.manifest import dump_toml
from gotthard.sandbox import free_ports
from tests.support import cli
from tests.support.cli import ROOT, gotthard_argv
from tests.support.kube import EmulatorThread
from tests.support.monitoring import get_json
from tests.support.wait import wait_until

__all__ = ["ROOT", "background", "gotthard", "site_entry", "site_file", "wait_http"]


def site_entry(kubeconfig: str, member: str, **extra: Any) -> dict[str, Any]:
    """``[sites.NAME]`` with one Kubernetes cluster reached through *kubeconfig*."""
    cluster = {"kubernetes": {"kubeconfig": kubeconfig}, "karmada_members": [member]}
    return {"clusters": {f"{member}-k8s": cluster}, **extra}


def site_file(
    tmp_path: Path, k8s: EmulatorThread, *, sites: dict[str, Any] | None = None, **dr: Any
) -> Path:
    """``site.toml``: Zurich and Lugano, both on the emulator *k8s*, plus ``[dr]``."""
    kubeconfig = str(k8s.kubeconfig(tmp_path / "kubeconfig.yaml"))
    if sites is None:
        sites = {
            "zurich": site_entry(kubeconfig, "zrh-a"),
            "lugano": site_entry(kubeconfig, "lug-a"),
        }
    (port,) = free_ports(1)
    data: dict[str, Any] = {
        "jobstore_url": f"sqlite:///{tmp_path}/jobs.sqlite",
        "listen": f"127.0.0.1:{port}",
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
    path.write_text(
        dump_toml({"site": "zurich", "cluster": "zrh-a-k8s", "sites": sites, "dr": data})
    )
    return path


def gotthard(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """``python -m gotthard ARGS`` in a child process, on the site file it is given only."""
    return cli.gotthard(*args, without=("GOTTHARD_CONFIG",), timeout=timeout)


@contextmanager
def background(*argv: str, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A Python child process (stdout+stderr to *log*), SIGKILLed if the test leaves it
    running; ``background("-m", "gotthard", ...)`` runs the command."""
    env = {k: v for k, v in os.environ.items() if k != "GOTTHARD_CONFIG"}
    env["PYTHONUNBUFFERED"] = "1"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [gotthard_argv()[0], *argv], cwd=ROOT, env=env, stdout=out, stderr=out
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(10)


def wait_http(url: str, pred: Any, timeout: float = 15.0) -> Any:
    """Poll *url* (JSON) until ``pred(body)``; the body."""

    def answer() -> Any:
        try:
            body = get_json(url, timeout=2)
        except OSError:
            return None
        return body if pred(body) else None

    return wait_until(answer, timeout, what=f"{url} to answer as expected", interval=0.1)
