"""``gotthard audit cluster`` reports a malformed object and checks the rest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.policies.test_audit_cluster import (
    _privileged,
    audit_cluster,
    audit_json,
    by_object,
    load,
    namespace,
    peer_auth,
    pod,
)
from tests.support.cli import run_in_process
from tests.support.kube import PODS, EmulatorThread


def _no_containers(p: dict[str, Any]) -> None:
    p["spec"]["containers"] = None


def _string_containers(p: dict[str, Any]) -> None:
    p["spec"]["containers"] = "main"


def _null_security_context(p: dict[str, Any]) -> None:
    p["spec"]["containers"][0]["securityContext"] = None


def _string_labels(p: dict[str, Any]) -> None:
    p["metadata"]["labels"] = "app=x"


def post_pods(emu: EmulatorThread, pods: list[dict[str, Any]]) -> None:
    """Store pods past the API's checks: the emulated API server refuses malformed ones
    (as a real one does), and the audit must survive them all the same."""
    for obj in pods:
        emu.store_unchecked(PODS, obj)


OBJECTS = [
    namespace("team-c"),
    peer_auth("team-c", "STRICT"),
    pod("team-c", "a-no-containers", v=_no_containers),
    pod("team-c", "b-compliant"),
    pod("team-c", "c-string-containers", v=_string_containers),
    pod("team-c", "d-null-security-context", v=_null_security_context),
    pod("team-c", "e-privileged", v=_privileged),
    pod("team-c", "f-string-labels", v=_string_labels),
]


def test_malformed_objects_are_reported_and_the_rest_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with audit_cluster("v1") as emu:
        load(emu, OBJECTS[:2])
        post_pods(emu, OBJECTS[2:])
        kubeconfig = str(emu.kubeconfig(tmp_path / "config"))
        code, doc = audit_json(capsys, "--kubeconfig", kubeconfig)
        assert code == 1
        assert by_object(doc) == {
            ("Pod", "team-c/a-no-containers"): ["POD-INPUT-001"],
            ("Pod", "team-c/c-string-containers"): ["POD-INPUT-001"],
            ("Pod", "team-c/d-null-security-context"): ["POD-INPUT-001"],
            ("Pod", "team-c/e-privileged"): ["POD-PRIV-001"],
            ("Pod", "team-c/f-string-labels"): ["POD-INPUT-001"],
        }
        errors = {o["name"]: o.get("error") for o in doc["objects"]}
        assert "containers" in errors["a-no-containers"]
        assert "labels" in errors["f-string-labels"]
        assert errors["e-privileged"] is None  # a verdict, not an input error
        assert doc["malformed"] == 3
        assert doc["scanned"]["Pod"] == 6
        assert run_in_process("audit", "cluster", "--kubeconfig", kubeconfig) == 1
        out = capsys.readouterr().out
        assert "team-c/a-no-containers: POD-INPUT-001 (input error:" in out
        assert "b-compliant" not in out


def test_only_malformed_objects_still_fail(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with audit_cluster("v1") as emu:
        load(emu, [namespace("team-d"), peer_auth("team-d", "STRICT")])
        post_pods(emu, [pod("team-d", "broken", v=_no_containers)])
        code, doc = audit_json(capsys, "--kubeconfig", str(emu.kubeconfig(tmp_path / "c")))
        assert code == 1 and doc["compliant"] is False
        assert by_object(doc) == {("Pod", "team-d/broken"): ["POD-INPUT-001"]}
