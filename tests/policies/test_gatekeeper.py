"""``gotthard policy gatekeeper``: the ConstraintTemplates' shape, and their verdicts on the
Gatekeeper input shape equal ``policy eval`` on the same cases."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import regopy
import yaml

from gotthard.policies import adapt, constraints, gatekeeper
from gotthard.policies import engine as eng
from gotthard.policies.settings import PoliciesConfig
from tests.policies.admission_cases import (
    SETTINGS,
    compared_cases,
    constrained,
    eval_verdict,
    reviews,
)
from tests.policies.conftest import GOOD_POD
from tests.support.cli import run_in_process

REVIEWS = list(reviews())
CASES = compared_cases(REVIEWS)


class Templates:
    """Every ConstraintTemplate's Rego and libs in one engine, evaluated as Gatekeeper
    does: input ``{"review": <AdmissionRequest>, "parameters": <Constraint parameters>}``,
    query ``data.<package>.violation``.

    :meth:`all_violations` asks every template at once: one query per distinct parameters
    object, whose input is then exactly what Gatekeeper gives each template having those
    parameters, reading every template's ``violation`` (``data.test.templates.violations``):
    the libraries' rules are evaluated once per query, not once per template."""

    def __init__(self, pairs: dict[str, tuple[dict[str, Any], dict[str, Any]]]) -> None:
        self.pairs = pairs
        interp = regopy.Interpreter()
        self.packages: dict[str, str] = {}
        libs: list[str] = []
        for rule, (template, _) in pairs.items():
            target = template["spec"]["targets"][0]
            libs = libs or target["libs"]
            assert target["libs"] == libs  # every template carries the same libraries
            package = target["rego"].split("\n", 1)[0].split()[1]
            self.packages[rule] = package
            interp.add_module(f"{package}.rego", target["rego"])
        for n, lib in enumerate(libs):
            interp.add_module(f"lib{n}.rego", lib)
        every = ", ".join(f"{json.dumps(r)}: data.{p}.violation" for r, p in self.packages.items())
        interp.add_module("all.rego", f"package test.templates\n\nviolations := {{{every}}}\n")
        self.entrypoints = {rule: f"{pkg}/violation" for rule, pkg in self.packages.items()}
        self.compiled = interp.build(
            None, sorted([*self.entrypoints.values(), "test/templates/violations"])
        )
        self.runner = regopy.Interpreter()

    def _query(self, entrypoint: str, request: dict[str, Any], parameters: Any) -> Any:
        self.runner.set_input_term(json.dumps({"review": request, "parameters": parameters}))
        out = self.runner.query_bundle_entrypoint(self.compiled, entrypoint)
        assert out.ok(), entrypoint
        return json.loads(out.expressions().json())[0] if len(out) else None

    def all_violations(self, request: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
        """Rule id -> the violations its template reports for *request*."""
        by_parameters: dict[str, list[str]] = {}
        for rule, (_, constraint) in self.pairs.items():
            parameters = constraint["spec"].get("parameters", {})
            by_parameters.setdefault(json.dumps(parameters, sort_keys=True), []).append(rule)
        found: dict[str, list[dict[str, Any]]] = {}
        for parameters, rules in by_parameters.items():
            every = self._query("test/templates/violations", request, json.loads(parameters))
            found.update({rule: every[rule] or [] for rule in rules})
        return found

    def violations(self, rule: str, request: dict[str, Any]) -> list[dict[str, Any]]:
        _, constraint = self.pairs[rule]
        parameters = constraint["spec"].get("parameters", {})
        return self._query(self.entrypoints[rule], request, parameters) or []


def matches(constraint: dict[str, Any], request: dict[str, Any]) -> bool:
    """Whether Gatekeeper invokes the Constraint's template for *request*: its
    ``match.namespaces`` and ``match.excludedNamespaces`` against the object's namespace."""
    match = constraint["spec"]["match"]
    obj = request.get("object") or {}
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    namespace = (meta or {}).get("namespace") or request.get("namespace") or "default"
    if "namespaces" in match and namespace not in match["namespaces"]:
        return False
    return namespace not in match.get("excludedNamespaces", [])


@pytest.fixture(scope="module", params=sorted(SETTINGS))
def setup(request: pytest.FixtureRequest) -> tuple[Templates, eng.EmbeddedEngine, dict[str, Any]]:
    data, states = constrained(SETTINGS[request.param])
    pairs = gatekeeper.manifests(data, states)
    return Templates(pairs), eng.EmbeddedEngine(data), {s.rule.id: s for s in states}


def gatekeeper_cli(tmp_path: Path, site: str) -> Path:
    """``gotthard --config SITE policy gatekeeper --out DIR`` in-process, SITE holding
    *site*; returns DIR (``templates/`` and ``constraints/``)."""
    config = tmp_path / "site.toml"
    config.write_text(site, encoding="utf-8")
    out = tmp_path / "gk"
    assert run_in_process("--config", str(config), "policy", "gatekeeper", "--out", str(out)) == 0
    return out


def test_cli_writes_templates_and_constraints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = gatekeeper_cli(
        tmp_path,
        '[policies.rules.POD-IMG-002]\nmode = "warn"\nexempt_images = ["nvcr.io/*"]\n'
        '[policies.rules.POD-PRIV-001]\nexempt_namespaces = ["kube-system"]\n'
        'exempt_namespace_labels = ["tier=system", "tier=infra"]\n'
        "[policies.rules.POD-RES-001]\nenabled = false\n",
    )
    templates = {p.stem: yaml.safe_load(p.read_text()) for p in (out / "templates").iterdir()}
    constraints = {p.stem: yaml.safe_load(p.read_text()) for p in (out / "constraints").iterdir()}
    assert set(templates) == set(constraints)
    assert "gotthardpodres001" not in templates  # disabled: no template
    assert "gotthardpodpriv001" in templates
    for name, template in templates.items():
        assert template["apiVersion"] == "templates.gatekeeper.sh/v1"
        assert template["kind"] == "ConstraintTemplate"
        kind = template["spec"]["crd"]["spec"]["names"]["kind"]
        assert template["metadata"]["name"] == kind.lower() == name
        schema = template["spec"]["crd"]["spec"]["validation"]["openAPIV3Schema"]
        assert schema["type"] == "object" and "exemptImages" in schema["properties"]
        target = template["spec"]["targets"][0]
        assert target["target"] == "admission.k8s.gatekeeper.sh"
        assert "violation contains" in target["rego"]
        for source in [target["rego"], *target["libs"]]:
            # Gatekeeper: no data but data.inventory and the libraries, libraries under lib.
            assert all(
                r.startswith(("data.lib.", "data.inventory")) for r in adapt.data_refs(source)
            )
        for lib in target["libs"]:
            assert any(line.startswith("package lib.") for line in lib.splitlines())
        constraint = constraints[name]
        assert constraint["apiVersion"] == "constraints.gatekeeper.sh/v1beta1"
        assert constraint["kind"] == kind
        assert {"Pod", "Deployment", "CronJob"} <= {
            k for group in constraint["spec"]["match"]["kinds"] for k in group["kinds"]
        }
    assert constraints["gotthardpodimg002"]["spec"]["enforcementAction"] == "warn"
    assert constraints["gotthardpodimg002"]["spec"]["parameters"]["exemptImages"] == ["nvcr.io/*"]
    priv = constraints["gotthardpodpriv001"]["spec"]
    assert priv["enforcementAction"] == "deny"
    assert priv["match"]["excludedNamespaces"] == ["kube-system"]
    assert priv["match"]["namespaceSelector"] == {
        "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["system", "infra"]}]
    }


def test_parameters_reach_the_template(
    setup: tuple[Templates, eng.EmbeddedEngine, dict[str, Any]],
) -> None:
    """A Constraint's parameter replaces the site value of the same name."""
    templates, _, _ = setup
    pod = copy.deepcopy(GOOD_POD)
    pod["spec"]["containers"][0]["image"] = "quay.io/x/y:1.0"
    request = {"operation": "CREATE", "namespace": "web", "object": pod}
    assert templates.violations("POD-IMG-001", request)
    templates.pairs["POD-IMG-001"][1]["spec"]["parameters"] = {"allowed_registries": ["quay.io"]}
    try:
        assert templates.violations("POD-IMG-001", request) == []
    finally:
        templates.pairs["POD-IMG-001"][1]["spec"]["parameters"] = {}


@pytest.mark.parametrize(
    ("setup", "name", "review"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
    indirect=["setup"],
    scope="module",
)
def test_template_verdicts_equal_policy_eval(
    setup: tuple[Templates, eng.EmbeddedEngine, dict[str, Any]],
    name: str,
    review: dict[str, Any],
) -> None:
    templates, engine, states = setup
    denied, warned = eval_verdict(engine, review)
    found = templates.all_violations(review["request"])
    for rule, state in states.items():
        if rule not in templates.pairs:
            assert not state.enabled or state.rule.policy != "pod"
            continue
        fired = bool(found[rule]) and matches(templates.pairs[rule][1], review["request"])
        expected = rule in (denied if state.mode == "enforce" else warned)
        assert fired is expected, rule


def test_all_violations_equal_each_template_asked_alone(
    setup: tuple[Templates, eng.EmbeddedEngine, dict[str, Any]],
) -> None:
    """The one query per parameters object answers as each template queried alone, on the
    first reviews that fire a template no earlier one fired (three of them)."""
    templates, _, _ = setup
    fired: set[str] = set()
    compared = 0
    for _, review in REVIEWS:
        together = templates.all_violations(review["request"])
        if {rule for rule, found in together.items() if found} <= fired:
            continue
        alone = {rule: templates.violations(rule, review["request"]) for rule in templates.pairs}
        assert together == alone
        fired |= {rule for rule, found in alone.items() if found}
        compared += 1
        if compared == 3:
            break
    assert compared == 3 and len(fired) >= 3


def test_site_parameters_render_into_constraints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = gatekeeper_cli(
        tmp_path,
        "[policies.rules.POD-IDS-001]\n"
        'params = { run_as_user = { rule = "MustRunAsNonRoot" } }\n'
        'include_namespaces = ["batch"]\n'
        "[policies.rules.POD-PSS-B-SYSCTLS-001.params]\n"
        'allowed_sysctls = ["*"]\nforbidden_sysctls = ["kernel.*"]\n',
    )
    ids = yaml.safe_load((out / "constraints" / "gotthardpodids001.yaml").read_text())
    assert ids["spec"]["parameters"]["run_as_user"] == {"rule": "MustRunAsNonRoot"}
    assert ids["spec"]["match"]["namespaces"] == ["batch"]
    template = yaml.safe_load((out / "templates" / "gotthardpodids001.yaml").read_text())
    schema = template["spec"]["crd"]["spec"]["validation"]["openAPIV3Schema"]["properties"]
    assert {"run_as_user", "run_as_group", "supplemental_groups", "fs_group"} <= set(schema)
    sysctls = yaml.safe_load((out / "constraints" / "gotthardpodpssbsysctls001.yaml").read_text())
    assert sysctls["spec"]["parameters"]["forbidden_sysctls"] == ["kernel.*"]
    # the templates judge with those parameters
    settings = PoliciesConfig.model_validate(
        {
            "rules": {
                "POD-IDS-001": {"params": {"run_as_user": {"rule": "MustRunAsNonRoot"}}},
                "POD-PSS-B-SYSCTLS-001": {
                    "params": {"allowed_sysctls": ["*"], "forbidden_sysctls": ["kernel.*"]}
                },
            }
        }
    )
    data, states = constraints.resolve(settings, eng.build_data())
    templates = Templates(gatekeeper.manifests(data, states))
    pod = copy.deepcopy(GOOD_POD)
    pod["spec"]["securityContext"] = {
        "sysctls": [{"name": "kernel.msgmax", "value": "1"}, {"name": "net.core.x", "value": "1"}]
    }
    request = {"operation": "CREATE", "namespace": "web", "object": pod}
    assert [v["details"]["rule"] for v in templates.violations("POD-IDS-001", request)] == [
        "POD-IDS-001"
    ]
    found = templates.violations("POD-PSS-B-SYSCTLS-001", request)
    assert len(found) == 1 and "kernel.msgmax" in found[0]["msg"]
    pod["spec"]["securityContext"] = {"runAsNonRoot": True}
    assert templates.violations("POD-IDS-001", request) == []
