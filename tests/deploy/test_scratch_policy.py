"""Narrow RBAC for drills: RBAC cannot select namespaces by label, so the
render adds a ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA in 1.30) and
its binding beside the DR role: the DR ServiceAccount may create and delete only
namespaces labelled as drill scratch namespaces.

The Kubernetes emulator (testing/) does not run admission, so the rendered policy's CEL
is evaluated here with cel-python on admission requests shaped as the API server builds
them; the schema test of test_kubernetes.py validates the objects (Kubernetes 1.30)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import celpy
import kubernetes_validate
import pytest

from gotthard.dr.settings import LABEL_SCRATCH

Find = Callable[[str, str], dict[str, Any]]
DR_ACCOUNT = "system:serviceaccount:gotthard:gotthard-dr"


def _evaluate(expression: str, activation: dict[str, Any]) -> Any:
    env = celpy.Environment()
    program = env.program(env.compile(expression))
    return program.evaluate({k: celpy.json_to_cel(v) for k, v in activation.items()})


def _namespace(name: str, labels: dict[str, str] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels is not None:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def _request(operation: str, ns: dict[str, Any], user: str = DR_ACCOUNT) -> dict[str, Any]:
    """The CEL variables of an admission request for *ns* (object on CREATE, oldObject on
    DELETE, as the API server sets them)."""
    return {
        "request": {
            "operation": operation,
            "name": ns["metadata"]["name"],
            "userInfo": {"username": user},
        },
        "object": ns if operation == "CREATE" else None,
        "oldObject": ns if operation == "DELETE" else None,
    }


def _admits(policy: dict[str, Any], request: dict[str, Any]) -> bool:
    """What the policy decides: not matched, or every validation true."""
    spec = policy["spec"]
    rule = spec["matchConstraints"]["resourceRules"][0]
    if request["request"]["operation"] not in rule["operations"]:
        return True
    if not all(_evaluate(c["expression"], request) for c in spec["matchConditions"]):
        return True
    return all(bool(_evaluate(v["expression"], request)) for v in spec["validations"])


@pytest.fixture
def policy(find: Find) -> dict[str, Any]:
    return find("ValidatingAdmissionPolicy", "gotthard-dr-scratch-namespaces")


def test_the_policy_is_bound_and_denies(policy: dict[str, Any], find: Find) -> None:
    assert policy["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert policy["spec"]["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "DELETE"],
            "resources": ["namespaces"],
        }
    ]
    binding = find("ValidatingAdmissionPolicyBinding", "gotthard-dr-scratch-namespaces")
    assert binding["spec"] == {
        "policyName": "gotthard-dr-scratch-namespaces",
        "validationActions": ["Deny"],
    }
    for obj in (policy, binding):  # GA in 1.30: the oldest version the render supports
        kubernetes_validate.validate(obj, "1.30", strict=True)


def test_dr_may_create_and_delete_only_scratch_namespaces(policy: dict[str, Any]) -> None:
    scratch = _namespace("drill-prod-20261205080000", {LABEL_SCRATCH: "true"})
    for operation in ("CREATE", "DELETE"):
        assert _admits(policy, _request(operation, scratch)), operation
        for other in (
            _namespace("prod", None),
            _namespace("prod", {}),
            _namespace("prod", {"team": "a"}),
            _namespace("prod", {LABEL_SCRATCH: "false"}),
        ):
            assert not _admits(policy, _request(operation, other)), (operation, other)


def test_other_users_are_not_affected(policy: dict[str, Any]) -> None:
    prod = _namespace("prod", None)
    for user in ("kubernetes-admin", "system:serviceaccount:gotthard:gotthard-runbooks"):
        assert _admits(policy, _request("DELETE", prod, user))


def test_the_denial_names_the_namespace(policy: dict[str, Any]) -> None:
    (validation,) = policy["spec"]["validations"]
    message = _evaluate(
        validation["messageExpression"], _request("DELETE", _namespace("prod", None))
    )
    assert str(message).endswith("not prod") and LABEL_SCRATCH in str(message)
