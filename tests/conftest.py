"""Shared fixtures. ``slurm_sandbox`` is one real single-node Slurm for the whole session;
the fixtures of ``tests/support`` (``kube_emulator``, ``short_tmp``) are registered here."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gotthard.sandbox import Sandbox
from tests.support.lifecycle import running

pytest_plugins = ["tests.support.kube", "tests.support.monitoring"]


@pytest.fixture(scope="session")
def slurm_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """munged + slurmctld + slurmd on free ports (no exporter, no Prometheus).

    Free ports keep it clear of a developer's ``gotthard sandbox up`` on the defaults.
    """
    sandbox = Sandbox.with_free_ports(tmp_path_factory.mktemp("slurm-sandbox"))
    with running(sandbox, "the Slurm sandbox", with_exporter=False, with_prometheus=False):
        yield sandbox


@pytest.fixture(scope="session")
def sandbox_env(slurm_sandbox: Sandbox) -> dict[str, str]:
    """Environment (full copy, with SLURM_CONF and PATH) for subprocesses using the sandbox."""
    return slurm_sandbox.env
