"""``gotthard policy gatekeeper``: Gatekeeper ConstraintTemplates and Constraints.

One ConstraintTemplate (``templates.gatekeeper.sh/v1``) and one Constraint per enabled
admission rule. The template's Rego reads ``input.review`` and ``input.parameters`` as
Gatekeeper provides them; the rules come from the shipped policies as libraries
(``lib.gotthard.*``, see :mod:`gotthard.policies.adapt`), so the templates judge exactly as
``policy eval`` does. Settings map onto Gatekeeper as follows:

* ``mode`` -> the Constraint's ``enforcementAction`` (deny | warn);
* ``params`` -> ``spec.parameters`` (schema from the rule's declared parameters, values
  as resolved: site values, ``--data`` and ``[policies]``);
* ``include_namespaces`` -> ``match.namespaces``; ``exempt_namespaces`` ->
  ``match.excludedNamespaces``; ``exempt_namespace_labels`` ->
  ``match.namespaceSelector`` (``NotIn``); ``exempt_images`` -> parameter ``exemptImages``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from gotthard.policies import adapt
from gotthard.policies.bundle import REVIEW_MODULE, adapter_source
from gotthard.policies.constraints import RuleState, label_pairs
from gotthard.policies.engine import POLICIES, PolicyError, rego_modules

TARGET = "admission.k8s.gatekeeper.sh"
TEMPLATE_API = "templates.gatekeeper.sh/v1"
CONSTRAINT_API = "constraints.gatekeeper.sh/v1beta1"
GATEKEEPER_MODULE = "gatekeeper.rego"
#: The policies whose rules judge one object under admission (the others need several).
ADMISSION_POLICIES = ("pod",)
#: Kubernetes API group of each kind the pod policy judges.
KIND_GROUPS = {
    "Pod": "",
    "Deployment": "apps",
    "StatefulSet": "apps",
    "DaemonSet": "apps",
    "ReplicaSet": "apps",
    "Job": "batch",
    "CronJob": "batch",
}
#: Parameters every template takes besides the rule's own.
EXTRA_PARAMETERS: dict[str, Any] = {
    "exemptImages": {
        "type": "array",
        "items": {"type": "string"},
        "description": "image globs the rule does not apply to (* also matches / and .)",
    },
    "namespaces": {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "description": "namespace name -> {labels, gpu_quota, gpus_used} (inventory)",
    },
}


def _literal(value: Any) -> str:
    """A JSON value as a Rego term (JSON is Rego term syntax)."""
    return json.dumps(value, sort_keys=True)


def libs(data: Mapping[str, Any]) -> list[str]:
    """The library modules every template carries: the pod policy, the constraint
    semantics, the review dispatch, and the Gatekeeper adapter with *data*'s values."""
    site = data.get("site", {}).get("admission", {})
    modules = rego_modules()
    gatekeeper = adapt.rewrite(
        adapter_source(GATEKEEPER_MODULE),
        "lib.gotthard.gatekeeper",
        {
            "data.gotthard.site.admission": _literal(site),
            "data.gotthard.inventory": _literal(data.get("inventory", {})),
            "data.gotthard.constraints": _literal(data.get("constraints", {})),
        },
    )
    review = adapt.rewrite(
        adapter_source(REVIEW_MODULE),
        "lib.gotthard.review",
        {
            "input.request": "data.lib.gotthard.gatekeeper.request",
            "data.gotthard.constrain": "data.lib.gotthard.constrain",
        },
    )
    pods = [
        adapt.rewrite(
            modules[name],
            "lib.gotthard.pod",
            {
                "input": "data.lib.gotthard.review.pod",
                "data.gotthard.site.admission": "data.lib.gotthard.gatekeeper.site",
                "data.gotthard.inventory": "data.lib.gotthard.gatekeeper.inventory",
            },
        )
        for name in POLICIES["pod"].modules
    ]
    constrain = adapt.rewrite(
        modules["constrain.rego"],
        "lib.gotthard.constrain",
        {
            "data.gotthard.constraints": "data.lib.gotthard.gatekeeper.constraints",
            "data.gotthard.inventory": "data.lib.gotthard.gatekeeper.inventory",
        },
    )
    out = [gatekeeper, review, *pods, constrain]
    for source in out:
        bad = [
            r for r in adapt.data_refs(source) if not r.startswith(("data.lib.", "data.inventory"))
        ]
        if bad:
            raise PolicyError(f"Gatekeeper library reads data Gatekeeper forbids: {sorted(bad)}")
    return out


def kind_name(rule_id: str) -> str:
    """``POD-PRIV-001`` -> ``GotthardPodPriv001`` (the Constraint kind)."""
    return "Gotthard" + "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", rule_id))


def template_rego(rule_id: str) -> str:
    package = kind_name(rule_id).lower()
    return f"""package {package}

import rego.v1

# {rule_id}: the violations of the shipped pod policy with this id that the constraint
# semantics keep (image exemptions, PSS rules skipped on UPDATE of an existing pod).
violation contains {{"msg": msg, "details": {{"rule": v.rule}}}} if {{
	data.lib.gotthard.review.is_pod_object
	some v in data.lib.gotthard.pod.deny
	v.rule == {json.dumps(rule_id)}
	data.lib.gotthard.constrain.applies(v, data.lib.gotthard.review.ctx, "enforce")
	msg := concat("", [v.rule, ": ", v.message])
}}
"""


def _schema(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, float):
        return {"type": "number"}
    if isinstance(value, str):
        return {"type": "string"}
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return {"type": "array", "items": {"type": "string"}}
    if isinstance(value, list):
        return {"type": "array", "items": {"x-kubernetes-preserve-unknown-fields": True}}
    return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def template(state: RuleState, library: list[str]) -> dict[str, Any]:
    rule = state.rule
    kind = kind_name(rule.id)
    properties = {name: _schema(value) for name, value in state.params.items()}
    properties.update(EXTRA_PARAMETERS)
    return {
        "apiVersion": TEMPLATE_API,
        "kind": "ConstraintTemplate",
        "metadata": {
            "name": kind.lower(),
            "annotations": {
                "description": f"{rule.id}: {rule.title}",
                "gotthard.io/rule": rule.id,
                "gotthard.io/level": rule.level,
                **({"gotthard.io/pss": rule.pss} if rule.pss else {}),
            },
        },
        "spec": {
            "crd": {
                "spec": {
                    "names": {"kind": kind},
                    "validation": {"openAPIV3Schema": {"type": "object", "properties": properties}},
                }
            },
            "targets": [{"target": TARGET, "rego": template_rego(rule.id), "libs": library}],
        },
    }


def constraint(state: RuleState) -> dict[str, Any]:
    kinds = POLICIES["pod"].kinds
    groups: dict[str, list[str]] = {}
    for kind in kinds:
        groups.setdefault(KIND_GROUPS[kind], []).append(kind)
    match: dict[str, Any] = {
        "kinds": [{"apiGroups": [group], "kinds": names} for group, names in groups.items()]
    }
    if state.include_namespaces:
        match["namespaces"] = list(state.include_namespaces)
    if state.exempt_namespaces:
        match["excludedNamespaces"] = list(state.exempt_namespaces)
    if state.exempt_namespace_labels:
        by_key: dict[str, list[str]] = {}
        for pair in label_pairs(state.exempt_namespace_labels):
            by_key.setdefault(pair["key"], []).append(pair["value"])
        match["namespaceSelector"] = {
            "matchExpressions": [
                {"key": key, "operator": "NotIn", "values": values}
                for key, values in by_key.items()
            ]
        }
    parameters: dict[str, Any] = dict(state.params)
    if state.exempt_images:
        parameters["exemptImages"] = list(state.exempt_images)
    return {
        "apiVersion": CONSTRAINT_API,
        "kind": kind_name(state.rule.id),
        "metadata": {"name": state.rule.id.lower()},
        "spec": {
            "enforcementAction": "deny" if state.mode == "enforce" else "warn",
            "match": match,
            "parameters": parameters,
        },
    }


def manifests(
    data: Mapping[str, Any], states: list[RuleState]
) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Rule id -> (ConstraintTemplate, Constraint) of every enabled admission rule."""
    library = libs(data)
    return {
        state.rule.id: (template(state, library), constraint(state))
        for state in states
        if state.enabled and state.rule.policy in ADMISSION_POLICIES
    }


def write_gatekeeper(
    out: str | Path, data: Mapping[str, Any], states: list[RuleState]
) -> list[Path]:
    """``templates/<kind>.yaml`` and ``constraints/<kind>.yaml`` under *out*."""
    root = Path(out)
    written = []
    try:
        for kind_dir in ("templates", "constraints"):
            (root / kind_dir).mkdir(parents=True, exist_ok=True)
        for tmpl, cons in manifests(data, states).values():
            for kind_dir, doc in (("templates", tmpl), ("constraints", cons)):
                path = root / kind_dir / f"{tmpl['metadata']['name']}.yaml"
                path.write_text(yaml.safe_dump(doc, sort_keys=False, width=100), encoding="utf-8")
                written.append(path)
    except OSError as err:
        raise PolicyError(f"--out {out}: cannot write: {err}") from err
    return written
