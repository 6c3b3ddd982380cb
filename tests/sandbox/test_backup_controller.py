"""A sandbox site with a backup slurmctld (``backup_controller=True``): ``scontrol ping``
lists both, the backup takes over within SlurmctldTimeout when the primary stops, the
exporter's ``gotthard_slurm_controller_up`` shows it, the primary takes control back, and ``down``
removes the namespace. Without the namespaces, ``up`` fails naming what is missing."""

from __future__ import annotations

import os
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gotthard.sandbox import SandboxError, netns
from gotthard.sandbox.core import Sandbox
from tests.support.lifecycle import running
from tests.support.wait import wait_until

pytestmark = pytest.mark.slurm

#: slurm.conf's SlurmctldTimeout in the sandbox.
SLURMCTLD_TIMEOUT = 30.0


def controller_up(sandbox: Sandbox) -> dict[str, float]:
    """``gotthard_slurm_controller_up`` by role, and ``gotthard_slurm_up``, as the exporter
    serves them."""
    try:
        with urllib.request.urlopen(f"{sandbox.exporter_url}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return {}
    series = re.compile(
        r'gotthard_slurm_controller_up\{[^}]*role="(?P<role>\w+)"[^}]*\} (?P<value>\S+)'
    )
    found = {m["role"]: float(m["value"]) for m in series.finditer(text)}
    up = re.search(r"^gotthard_slurm_up(?:\{[^}]*\})? (\S+)", text, re.MULTILINE)
    return {**found, "gotthard_slurm_up": float(up.group(1))} if up else found


@pytest.fixture(scope="module")
def two_controllers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    sandbox = Sandbox.with_free_ports(
        tmp_path_factory.mktemp("backup-ctld"),
        node_name="nid001",
        exporter_poll_interval=1.0,
        backup_controller=True,
    )
    with running(sandbox, "the sandbox with a backup controller", with_prometheus=False):
        yield sandbox
    assert not netns.exists(sandbox.directory), "down left the backup's namespace"


def test_the_backup_takes_over_within_slurmctld_timeout_and_hands_back(
    two_controllers: Sandbox,
) -> None:
    sandbox = two_controllers
    ping = sandbox.run_command(["scontrol", "ping"]).stdout
    assert re.search(r"Slurmctld\(primary\) at \S+ is UP", ping), ping
    assert re.search(r"Slurmctld\(backup\) at \S+-backup is UP", ping), ping
    wait_until(lambda: controller_up(sandbox).get("backup") == 1.0, 30, "the exporter's ping")

    stopped = time.monotonic()
    sandbox.stop_controller()
    on_backup = {"primary": 0.0, "backup": 1.0, "gotthard_slurm_up": 1.0}
    wait_until(
        lambda: controller_up(sandbox) == on_backup,
        SLURMCTLD_TIMEOUT + 30,
        lambda: f"the exporter to see the backup in control: {controller_up(sandbox)}",
    )
    took = time.monotonic() - stopped
    print(f"[backup controller] in control {took:.1f}s after the primary stopped")
    nodes = sandbox.run_command(["sinfo", "-h", "-o", "%N %T"]).stdout
    assert "nid001" in nodes, nodes  # the backup serves the clients

    sandbox.start_controller(timeout=60, wait_node=False)
    both = {"primary": 1.0, "backup": 1.0, "gotthard_slurm_up": 1.0}
    wait_until(lambda: controller_up(sandbox) == both, 60, "the primary back in control")
    log = (sandbox.log_dir / "slurmctld-backup.log").read_text()
    assert "taking over" in log and "REQUEST_CONTROL" in log, log[-2000:]


def test_without_namespaces_up_fails_and_names_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ``ip`` that is refused (no CAP_NET_ADMIN): ``up`` stops what it started and
    says which step failed and what it needs; it never runs without the backup."""
    fake = tmp_path / "bin"
    fake.mkdir()
    refused = "echo 'mkdir /run/netns failed: Operation not permitted' >&2"
    (fake / "ip").write_text(f"#!/bin/sh\n{refused}\nexit 1\n")
    (fake / "ip").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    sandbox = Sandbox.with_free_ports(
        tmp_path / "sandbox", node_name="nid001", backup_controller=True
    )
    with pytest.raises(SandboxError) as raised:
        sandbox.up(with_exporter=False, with_prometheus=False, verbose=False)
    message = str(raised.value)
    assert "ip netns add" in message and "Operation not permitted" in message, message
    assert "CAP_NET_ADMIN" in message, message
    assert sandbox.status() == {}, "up left processes behind"
