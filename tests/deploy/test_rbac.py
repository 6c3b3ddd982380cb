"""The rendered RBAC is sufficient and minimal for the API calls the code really makes.

The DR, runbook and audit tests run their code against the shared Kubernetes emulator,
which records every call (verb, API group, resource, namespace, the calling module, the
test file; ``tests/support/kube.py``). A call belongs to the role whose tests made it
(``tests/dr`` -> dr, ``tests/runbooks`` -> runbooks, ``tests/policies/test_audit_cluster.py``
-> audit), unless the test harness made it (seeding objects, the simulated Velero): those
come from modules outside ``gotthard``. The proof then evaluates the rendered Roles,
ClusterRoles and bindings as the API server's RBAC authorizer would:

* sufficient: each role's ServiceAccount is allowed every call of that role;
* minimal: every verb on every resource of every rule bound to a role is used by at
  least one of its calls.

Where the calls come from, robust to how pytest is started:

* ``make test`` (``scripts/run-tests``) runs the suite on parallel workers that append
  their calls to one file, and only when that run passed, runs this proof on that file
  (``$GOTTHARD_KUBE_CALLS_RECORDED``);
* else this test is moved to the end of the session (``tests/deploy/conftest.py``). When
  the session itself ran every test of the three suites to the end, the calls its
  emulators recorded are used; else (``pytest tests/deploy``, a ``-k`` selection, a
  failure) the three suites run in a child pytest that appends its calls to a file
  (``$GOTTHARD_KUBE_CALLS``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from itertools import product
from pathlib import Path
from typing import Any

import pytest

from gotthard.deploy.rbac import RuleRef, all_rules, allowed_by
from tests.deploy.rendering import RBAC_MARK, RECORDED_SUITES, suites_run_here
from tests.support import kube
from tests.support.cli import ROOT, run

pytestmark = getattr(pytest.mark, RBAC_MARK)

NAMESPACE = "gotthard"


def _child_pytest(*args: str, env: dict[str, str] | None = None, timeout: float = 900) -> Any:
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args, *RECORDED_SUITES]
    return run(argv, env={**os.environ, **(env or {})}, timeout=timeout, cwd=ROOT)


def _from_child(tmp_path: Path) -> set[kube.ApiCall]:
    """The calls of the three suites run in a child pytest. A test of theirs that fails
    (exit 1) has still made its calls, and those are what RBAC must allow; a child that
    cannot run the suites at all (exit 2 and above) fails this test."""
    calls_file = tmp_path / "calls.jsonl"
    result = _child_pytest("-q", env={kube.CALLS_FILE_ENV: str(calls_file)})
    if result.returncode not in (0, 1) or not calls_file.exists():
        pytest.fail(f"the recorded suites did not run:\n{result.stdout[-3000:]}", pytrace=False)
    return _read_calls(calls_file)


def _read_calls(path: Path) -> set[kube.ApiCall]:
    return {kube.ApiCall(**json.loads(line)) for line in path.read_text().splitlines()}


def recorded_calls(config: pytest.Config, tmp_path: Path) -> set[kube.ApiCall]:
    given = os.environ.get(kube.RECORDED_FILE_ENV)
    if given:
        if not Path(given).is_file():
            pytest.fail(f"${kube.RECORDED_FILE_ENV}: no such file {given}", pytrace=False)
        return _read_calls(Path(given))
    collected, finished = suites_run_here(config)
    if collected and collected <= finished:
        listed = _child_pytest("--collect-only", "-q", timeout=300)
        every = {line for line in listed.stdout.splitlines() if "::" in line}
        if every and every <= collected:
            return set(kube.RECORDED)
    return _from_child(tmp_path)


def by_role(calls: Iterable[kube.ApiCall]) -> dict[str, set[kube.ApiCall]]:
    """The code's calls (not the harness's) per role, by the suite that made them."""
    roles: dict[str, set[kube.ApiCall]] = {role: set() for role in RECORDED_SUITES.values()}
    for call in calls:
        if call.caller and not call.caller.startswith("gotthard."):
            continue  # the test harness: fixtures, the simulated Velero
        for prefix, role in RECORDED_SUITES.items():
            if call.test.startswith(prefix):
                roles[role].add(call)
    return roles


def test_rendered_rbac_is_sufficient_and_minimal(
    request: pytest.FixtureRequest, objects: list[dict[str, Any]], tmp_path: Path
) -> None:
    calls = by_role(recorded_calls(request.config, tmp_path))
    for role, mine in calls.items():
        assert mine, f"no API call recorded for {role}"
    rules = {(ref.kind, ref.namespace, ref.name, ref.index): ref for ref in all_rules(objects)}
    used: set[tuple[RuleRef, str, str, str]] = set()
    for role, mine in calls.items():
        account = (NAMESPACE, f"gotthard-{role}")
        denied = []
        for call in mine:
            refs = allowed_by(
                objects, account, call.verb, call.group, call.resource, call.namespace
            )
            if not refs:
                denied.append(call)
            used.update((ref, call.verb, call.group, call.resource) for ref in refs)
        assert not denied, f"{role}: the rendered RBAC denies {sorted(denied, key=str)}"
    unused = []
    by_name = {
        (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objects
    }
    for ref in rules.values():
        rule = by_name[ref.kind, ref.namespace, ref.name]["rules"][ref.index]
        for verb, group, resource in product(rule["verbs"], rule["apiGroups"], rule["resources"]):
            if (ref, verb, group, resource) not in used:
                unused.append(f"{ref.kind} {ref.namespace}/{ref.name}: {verb} {group}/{resource}")
    assert not unused, "rules no recorded call needs:\n" + "\n".join(unused)
    # the proof can fail: without its Lease Role the DR daemon's Lease calls are denied
    without = [
        o for o in objects if not (o["kind"] == "Role" and o["metadata"]["namespace"] == "gotthard")
    ]
    lease = [c for c in calls["dr"] if c.resource == "leases"]
    assert lease
    for call in lease:
        account = (NAMESPACE, "gotthard-dr")
        assert not allowed_by(
            without, account, call.verb, call.group, call.resource, call.namespace
        )
