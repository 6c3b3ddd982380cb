"""Shared fixtures. ``slurm_sandbox`` is one real single-node Slurm for the whole session;
the fixtures of ``tests/support`` (``kube_emulator``, ``short_tmp``) are registered here."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

# regopy before anything that loads libstdc++ (aiohttp's frozenlist, through the Kubernetes
# emulator below): loaded after it, rego-cpp keeps about 0.7 MB per policy decision and
# 1.5 MB per Gatekeeper template query, which took tests/policies/test_gatekeeper.py to
# 15.7 GB. Gotthard's own policy commands load no C++ library before regopy.
import regopy  # noqa: F401  (imported for its load order)

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
