"""The shipped pod test cases as admission reviews, and the verdicts ``policy eval`` gives
them: what the OPA bundle and the Gatekeeper templates must reproduce."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from gotthard.policies import constraints, testing
from gotthard.policies import engine as eng
from gotthard.policies.settings import PoliciesConfig


def site_params_table() -> dict[str, Any]:
    return testing.load_tables()["site_params.yml"]


def _site_params_settings() -> PoliciesConfig:
    """The parameters of site_params.yml set as ``[policies.rules.ID.params]`` (each by
    the first rule that declares it), and a rule limited to other namespaces."""
    declared = {}
    for rule in constraints.catalogue().values():
        for name in rule.params:
            declared.setdefault(name, rule.id)
    rules: dict[str, Any] = {}
    for name, value in site_params_table()["data"]["site"]["admission"].items():
        rules.setdefault(declared[name], {"params": {}})["params"][name] = value
    rules["POD-CAPS-001"]["include_namespaces"] = ["batch"]
    rules["POD-ROFS-001"]["include_namespaces"] = ["web", "batch"]
    return PoliciesConfig.model_validate({"rules": rules})


#: Constraints the equivalence is checked under, besides the default profile.
SETTINGS = {
    "hybrid-hpc": PoliciesConfig(),
    "tuned": PoliciesConfig.model_validate(
        {
            "rules": {
                "POD-IMG-002": {"mode": "warn"},
                "POD-RES-001": {"enabled": False},
                "POD-PRIV-001": {"exempt_images": ["registry.gotthard.example.org/legacy/*"]},
            }
        }
    ),
    "site-params": _site_params_settings(),
}


def pod_table() -> dict[str, Any]:
    return testing.load_tables()["pod.yml"]


def constrained(settings: PoliciesConfig) -> tuple[dict[str, Any], list[constraints.RuleState]]:
    """``data.gotthard`` of the pod table under *settings*."""
    return constraints.resolve(settings, eng.build_data(pod_table().get("data")))


def admission_review(obj: Any, operation: str = "CREATE", old: Any = None) -> dict[str, Any]:
    request: dict[str, Any] = {"uid": "test-uid", "operation": operation, "object": obj}
    if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict):
        request["namespace"] = obj["metadata"].get("namespace", "")
    if old is not None:
        request["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def reviews() -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, AdmissionReview) of every pod case ``policy eval`` can read (cases that are
    input errors, exit 2, have no verdict to compare), plus UPDATE and DELETE reviews."""
    engine = eng.EmbeddedEngine(eng.build_data(pod_table().get("data")))
    params = [
        {**case, "name": f"{PARAMS_PREFIX}{case['name']}"} for case in site_params_table()["cases"]
    ]
    for case in [*pod_table()["cases"], *params]:
        try:
            eng.evaluate(engine, case["input"], policy="pod")
        except eng.PolicyError:
            continue
        obj = case["input"]
        yield case["name"], admission_review(obj)
        yield f"{case['name']} (UPDATE, unchanged)", admission_review(obj, "UPDATE", obj)
        yield f"{case['name']} (UPDATE, no old object)", admission_review(obj, "UPDATE")
        unreadable = admission_review(obj, "UPDATE")
        unreadable["request"]["oldObject"] = {"kind": "Pod", "spec": {"containers": "x"}}
        yield f"{case['name']} (UPDATE, unreadable old object)", unreadable
        yield f"{case['name']} (DELETE)", admission_review(None, "DELETE", copy.deepcopy(obj))


#: Names of the reviews made from site_params.yml: compared under the "site-params"
#: settings only, and the pod table's under the others (each comparison costs a few
#: queries; the gatekeeper and bundle tests parametrize only those pairs).
PARAMS_PREFIX = "params: "


def compared(settings: str, review_name: str) -> bool:
    """Whether the review named *review_name* is compared under *settings*."""
    return (settings == "site-params") == review_name.startswith(PARAMS_PREFIX)


def compared_cases(
    reviews: list[tuple[str, dict[str, Any]]],
) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(test id, settings, review name, review): each review under the settings it is
    compared under (:func:`compared`), for ``parametrize`` with the settings indirect."""
    return [
        (f"{settings}-{name}", settings, name, review)
        for settings in sorted(SETTINGS)
        for name, review in reviews
        if compared(settings, name)
    ]


def eval_verdict(engine: eng.Engine, review: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(denied rule ids, warned rule ids) of ``policy eval`` on *review*."""
    verdict = eng.judge(engine, review)
    return sorted({v.rule for v in verdict.deny}), sorted({v.rule for v in verdict.warn})
