"""Fixtures of the deploy tests (the test site's outputs, each rendered once by
``gotthard deploy render`` in a child process, as a user runs it), and the hooks that
run the RBAC proof after the suites whose API calls it reads."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.rendering import (
    RBAC_MARK,
    RECORDED_SUITES,
    SUITE_FINISHED,
    SUITE_ITEMS,
    manifests,
    render,
)

#: Name of the plugin that follows the recorded suites' outcomes.
TRACKER = "gotthard-deploy-suite-tracker"


@pytest.fixture(scope="session")
def kubernetes_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return render("kubernetes", tmp_path_factory.mktemp("kubernetes"))


@pytest.fixture(scope="session")
def objects(kubernetes_dir: Path) -> list[dict[str, Any]]:
    return [doc for _, doc in manifests(kubernetes_dir)]


@pytest.fixture
def find(objects: list[dict[str, Any]]) -> Callable[[str, str], dict[str, Any]]:
    """The rendered object of *kind* named *name*."""

    def lookup(kind: str, name: str) -> dict[str, Any]:
        (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
        return found

    return lookup


class _SuiteTracker:
    """Notes the recorded suites' tests that ran to the end (passed, or skipped for a
    reason). A plugin, not a conftest hook: pytest hands a test's reports only to the
    conftests of that test's own directory."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        suite = report.nodeid.startswith(tuple(RECORDED_SUITES))
        finished = report.skipped or (report.when == "call" and report.passed)
        if suite and finished:
            self.config.stash[SUITE_FINISHED].add(report.nodeid)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{RBAC_MARK}: runs last; reads the API calls the DR/runbook/audit tests made"
    )
    config.stash[SUITE_ITEMS] = set()
    config.stash[SUITE_FINISHED] = set()
    if not config.pluginmanager.has_plugin(TRACKER):
        config.pluginmanager.register(_SuiteTracker(config), TRACKER)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the RBAC proof last, so that the suites collected with it have recorded their
    calls in this process by then."""
    last = [item for item in items if item.get_closest_marker(RBAC_MARK)]
    items[:] = [item for item in items if item not in last] + last
    config.stash[SUITE_ITEMS] = {
        item.nodeid for item in items if item.nodeid.startswith(tuple(RECORDED_SUITES))
    }
