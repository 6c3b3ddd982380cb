"""Helpers of the deploy tests: rendering as a user does, reading manifests, and the
bookkeeping of the suites whose Kubernetes API calls the RBAC proof reads."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli import ROOT, gotthard, run
from tests.support.monitoring import binary

FIXTURES = ROOT / "tests" / "fixtures" / "deploy"
SITE = FIXTURES / "site.toml"

#: Test paths whose emulator calls are a role's, by role (the component those tests run).
RECORDED_SUITES: dict[str, str] = {
    "tests/dr/": "dr",
    "tests/runbooks/": "runbooks",
    "tests/policies/test_audit_cluster.py": "audit",
}
#: Marks the tests that read the recorded calls (they are moved to the end of the session).
RBAC_MARK = "reads_recorded_calls"
#: Node ids of the recorded suites collected in this session, and those that finished.
SUITE_ITEMS = pytest.StashKey[set[str]]()
SUITE_FINISHED = pytest.StashKey[set[str]]()


def attempt_render(target: str, out: Path, site: Path = SITE) -> subprocess.CompletedProcess[str]:
    """``gotthard --config SITE deploy render --target TARGET --out OUT`` in a child,
    whatever its exit status."""
    return gotthard(
        "--config", str(site), "deploy", "render", "--target", target, "--out", str(out)
    )


def render(target: str, out: Path, site: Path = SITE) -> Path:
    """:func:`attempt_render`, which must succeed."""
    result = attempt_render(target, out, site)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("wrote "), result.stdout
    return out


def manifests(directory: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """(file, object) of every manifest ``kubectl apply -f DIR`` would read."""
    for path in sorted(directory.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                yield path, doc


def promtool_check_config(config: dict[str, Any], path: Path) -> tuple[int, str]:
    """``promtool check config`` of *config*, written to *path*: (exit status, output)."""
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    result = run([binary("promtool"), "check", "config", str(path)])
    return result.returncode, result.stdout + result.stderr


def suites_run_here(config: pytest.Config) -> tuple[set[str], set[str]]:
    """(collected, finished) node ids of the recorded suites in this session."""
    return config.stash.get(SUITE_ITEMS, set()), config.stash.get(SUITE_FINISHED, set())
