"""Constraints as data: profiles, ``[policies]`` and ``--data`` rule settings, warn mode,
parameters, exemptions, operation-aware reviews and ``policy rules``."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import regopy

from gotthard.policies import constraints, testing
from gotthard.policies import engine as eng
from gotthard.policies.settings import PoliciesConfig
from tests.policies.admission_cases import admission_review
from tests.policies.conftest import GOOD_POD
from tests.support.cli import run_in_process

TABLES = testing.load_tables()
REGISTRY = "registry.gotthard.example.org"


def pod(change: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    doc = copy.deepcopy(GOOD_POD)
    if change:
        change(doc)
    return doc


def _privileged(doc: dict[str, Any]) -> None:
    doc["spec"]["containers"][0]["securityContext"] = {"privileged": True}


def _untagged(doc: dict[str, Any]) -> None:
    doc["spec"]["containers"][0]["image"] = "registry.gotthard.example.org/web/app"


def _hostpath(path: str) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        doc["spec"]["volumes"] = [{"name": "h", "hostPath": {"path": path}}]

    return change


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def evaluate(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    doc: Any,
    config: str = "",
    *extra: str,
) -> tuple[int, dict[str, Any]]:
    """``gotthard [--config] policy eval`` on *doc*: exit code and the JSON printed (on
    exit 2: ``{"error": stderr}``)."""
    argv = []
    if config:
        argv = ["--config", str(write(tmp_path, "site.toml", config))]
    capsys.readouterr()
    rc = run_in_process(
        *argv, "policy", "eval", "--input", str(write(tmp_path, "in.json", json.dumps(doc))), *extra
    )
    out = capsys.readouterr()
    return rc, (json.loads(out.out) if rc in (0, 1) else {"error": out.err})


def rule_ids(items: list[dict[str, str]]) -> list[str]:
    return sorted({v["rule"] for v in items})


@pytest.fixture
def declared(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Give rules of the catalogue ``params``/``pss``/``level`` for one test."""

    def declare(rule_id: str, **fields: Any) -> None:
        real = constraints.catalogue

        def patched() -> dict[str, constraints.Rule]:
            rules = real()
            rules[rule_id] = dataclasses.replace(rules[rule_id], **fields)
            return rules

        monkeypatch.setattr(constraints, "catalogue", patched)

    return declare


# --- the default profile keeps today's verdicts ---------------------------------------


@pytest.mark.parametrize("table", sorted(TABLES))
def test_default_profile_keeps_the_table_verdicts(table: str) -> None:
    """hybrid-hpc enforces every rule it enables: its deny set is the policy's own deny set
    restricted to those rules, and nothing is a warning."""
    data, states = constraints.resolve(PoliciesConfig(), eng.build_data(TABLES[table].get("data")))
    enabled = {s.rule.id for s in states if s.enabled}
    engine = eng.EmbeddedEngine(data)
    for case in TABLES[table]["cases"]:
        policy = TABLES[table]["policy"]
        raw = {v.rule for v in eng.evaluate(engine, case["input"], policy=policy)}
        verdict = eng.judge(engine, case["input"], policy=policy)
        assert {v.rule for v in verdict.deny} == raw & enabled, case["name"]
        assert verdict.warn == [], case["name"]


def test_hybrid_hpc_enables_the_site_rules() -> None:
    _, states = constraints.resolve(PoliciesConfig(), eng.build_data())
    on = {s.rule.id for s in states if s.enabled}
    for rid in ("POD-GPU-002", "POD-HOSTNET-001", "SC-LUSTRE-001", "MESH-MTLS-001"):
        assert rid in on
    assert all(s.mode == "enforce" for s in states)


@pytest.mark.parametrize(
    ("profile", "levels"),
    [("baseline", {"baseline"}), ("restricted", {"baseline", "restricted"})],
)
def test_pss_profiles_enable_their_levels(profile: str, levels: set[str]) -> None:
    _, states = constraints.resolve(PoliciesConfig(profile=profile), eng.build_data())
    for state in states:
        assert state.enabled == (state.rule.level in levels), state.rule.id


def test_baseline_profile_allows_what_only_site_rules_deny(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = pod(_untagged)  # POD-IMG-002, a site rule
    assert evaluate(tmp_path, capsys, doc)[0] == 1
    rc, out = evaluate(tmp_path, capsys, doc, '[policies]\nprofile = "baseline"\n')
    assert (rc, out) == (0, {"allowed": True, "violations": []})


# --- enable, disable, warn --------------------------------------------------------------


def test_disabled_rule_no_longer_denies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = pod(_privileged)
    rc, out = evaluate(tmp_path, capsys, doc)
    assert rc == 1 and rule_ids(out["violations"]) == ["POD-PRIV-001"]
    config = "[policies.rules.POD-PRIV-001]\nenabled = false\n"
    assert evaluate(tmp_path, capsys, doc, config) == (0, {"allowed": True, "violations": []})


def test_warn_mode_reports_without_denying(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = pod(lambda d: (_privileged(d), _untagged(d)))
    config = '[policies.rules.POD-IMG-002]\nmode = "warn"\n'
    rc, out = evaluate(tmp_path, capsys, doc, config)
    assert rc == 1
    assert rule_ids(out["violations"]) == ["POD-PRIV-001"]
    assert rule_ids(out["warnings"]) == ["POD-IMG-002"]
    rc, out = evaluate(tmp_path, capsys, pod(_untagged), config)
    assert rc == 0
    assert out["allowed"] is True and out["violations"] == []
    assert rule_ids(out["warnings"]) == ["POD-IMG-002"]


def test_data_file_sets_rules_over_the_site_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = write(tmp_path, "data.yml", "policies:\n  rules:\n    POD-PRIV-001: {mode: enforce}\n")
    config = '[policies.rules.POD-PRIV-001]\nmode = "warn"\n'
    rc, out = evaluate(tmp_path, capsys, pod(_privileged), config, "--data", str(data))
    assert rc == 1 and rule_ids(out["violations"]) == ["POD-PRIV-001"]
    data.write_text("policies:\n  profile: baseline\n", encoding="utf-8")
    rc, out = evaluate(tmp_path, capsys, pod(_untagged), "", "--data", str(data))
    assert rc == 0


# --- errors name the key ----------------------------------------------------------------


def test_bad_policies_in_a_data_file_name_the_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = write(tmp_path, "data.yml", "policies:\n  rules:\n    POD-PRIV-001: {mode: block}\n")
    rc, out = evaluate(tmp_path, capsys, GOOD_POD, "", "--data", str(data))
    assert rc == 2, out
    assert f"data {data}" in out["error"] and "policies.rules.POD-PRIV-001.mode" in out["error"]
    assert "Traceback" not in out["error"]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("[policies.rules.POD-NOPE-001]\nenabled = false\n", "policies.rules.POD-NOPE-001"),
        (
            "[policies.rules.POD-PRIV-001]\nparams = { allowed_registries = [] }\n",
            "policies.rules.POD-PRIV-001.params.allowed_registries",
        ),
    ],
)
def test_unknown_rules_and_parameters_are_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: str, message: str
) -> None:
    rc, out = evaluate(tmp_path, capsys, GOOD_POD, config)
    assert rc == 2 and message in out["error"]
    assert run_in_process("--config", str(tmp_path / "site.toml"), "policy", "rules") == 2


def test_bad_mode_and_label_are_config_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for body in ('mode = "audit"', 'exempt_namespace_labels = ["nolabel"]'):
        config = f"[policies.rules.POD-PRIV-001]\n{body}\n"
        rc, out = evaluate(tmp_path, capsys, GOOD_POD, config)
        assert rc == 2 and "policies.rules.POD-PRIV-001" in out["error"]


# --- parameters -------------------------------------------------------------------------


def test_parameters_replace_the_site_values_the_rule_declares(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], declared: Callable[..., None]
) -> None:
    declared("POD-HOSTPATH-001", params=("hostpath_allowlist",))
    doc = pod(_hostpath("/scratch/project"))
    assert evaluate(tmp_path, capsys, doc)[0] == 1
    config = '[policies.rules.POD-HOSTPATH-001]\nparams = { hostpath_allowlist = ["/scratch"] }\n'
    assert evaluate(tmp_path, capsys, doc, config)[0] == 0
    # the shipped allow-list is replaced, not extended
    assert evaluate(tmp_path, capsys, pod(_hostpath("/capstor/x")), config)[0] == 1
    capsys.readouterr()
    assert run_in_process("--config", str(tmp_path / "site.toml"), "policy", "rules") == 0
    assert 'param hostpath_allowlist = ["/scratch"]' in capsys.readouterr().out


def test_conflicting_parameters_are_an_error(declared: Callable[..., None]) -> None:
    declared("POD-HOSTPATH-001", params=("hostpath_allowlist",))
    declared("POD-PRIV-001", params=("hostpath_allowlist",))
    settings = PoliciesConfig.model_validate(
        {
            "rules": {
                "POD-HOSTPATH-001": {"params": {"hostpath_allowlist": ["/a"]}},
                "POD-PRIV-001": {"params": {"hostpath_allowlist": ["/b"]}},
            }
        }
    )
    with pytest.raises(eng.PolicyError, match="hostpath_allowlist: conflicts with"):
        constraints.resolve(settings, eng.build_data())


# --- exemptions -------------------------------------------------------------------------


def test_namespace_exemption(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = '[policies.rules.POD-PRIV-001]\nexempt_namespaces = ["web"]\n'
    assert evaluate(tmp_path, capsys, pod(_privileged), config)[0] == 0

    def elsewhere(doc: dict[str, Any]) -> None:
        _privileged(doc)
        doc["metadata"]["namespace"] = "ml"

    assert evaluate(tmp_path, capsys, pod(elsewhere), config)[0] == 1


def test_namespace_label_exemption_reads_the_inventory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = '[policies.rules.POD-PRIV-001]\nexempt_namespace_labels = ["tier=system"]\n'
    assert evaluate(tmp_path, capsys, pod(_privileged), config)[0] == 1
    data = write(
        tmp_path,
        "data.yml",
        "inventory:\n  namespaces:\n    web: {labels: {tier: system}}\n",
    )
    assert evaluate(tmp_path, capsys, pod(_privileged), config, "--data", str(data))[0] == 0
    data.write_text("inventory:\n  namespaces:\n    web: {labels: {tier: app}}\n")
    assert evaluate(tmp_path, capsys, pod(_privileged), config, "--data", str(data))[0] == 1


CHECK = """package check

import rego.v1

kept contains v.rule if {
	some v in input.violations
	ctx := data.gotthard.constrain.context(input.doc.metadata, {}, false)
	data.gotthard.constrain.applies(v, ctx, input.mode)
}
"""


def kept(constraint: dict[str, Any], violation: dict[str, Any], doc: Any, mode: str) -> bool:
    """Whether constrain.rego keeps *violation* of *doc* under *constraint*."""
    interp = regopy.Interpreter()
    interp.add_module("constrain.rego", eng.rego_modules()["constrain.rego"])
    interp.add_module("check.rego", CHECK)
    data = {"constraints": {violation["rule"]: constraint}, "inventory": {"namespaces": {}}}
    interp.add_data_json(json.dumps({"gotthard": data}))
    interp.set_input_term(json.dumps({"violations": [violation], "doc": doc, "mode": mode}))
    out = interp.query("data.check.kept")
    assert out.ok()
    return violation["rule"] in json.loads(out.expressions().json())[0]


@pytest.mark.parametrize(
    ("globs", "image", "exempt"),
    [
        (
            ["registry.gotthard.example.org/legacy/*"],
            "registry.gotthard.example.org/legacy/a/b:1.0",
            True,
        ),
        (
            ["registry.gotthard.example.org/legacy/*"],
            "registry.gotthard.example.org/web/a:1.0",
            False,
        ),
        (["*/debug:*"], "nvcr.io/nvidia/debug:24.01", True),
        (["nvcr.io/nvidia/cuda:1?.0"], "nvcr.io/nvidia/cuda:12.0", True),
        ([], "nvcr.io/nvidia/cuda:12.0", False),
    ],
)
def test_image_globs(globs: list[str], image: str, exempt: bool) -> None:
    constraint = {"enabled": True, "mode": "enforce", "exempt": {"images": globs}}
    violation = {"rule": "POD-X-001", "message": "m", "image": image, "container": "c"}
    assert kept(constraint, violation, pod(), "enforce") is not exempt


def test_image_exemption_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = eng.EmbeddedEngine().query(
        "gotthard.admission.pod", "deny", eng.prepare("pod", pod(_privileged))
    )
    # container-level violations name their image: that is what the exemption matches
    assert any(v.get("image") == pod(_privileged)["spec"]["containers"][0]["image"] for v in raw)
    config = (
        '[policies.rules.POD-PRIV-001]\nexempt_images = ["registry.gotthard.example.org/web/*"]\n'
    )
    assert evaluate(tmp_path, capsys, pod(_privileged), config)[0] == 0


# --- operations -------------------------------------------------------------------------


def deployment(change: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    template = pod(change)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "web"},
        "spec": {"template": {"metadata": {}, "spec": template["spec"]}},
    }


@pytest.fixture
def pss_privileged(declared: Callable[..., None]) -> None:
    declared("POD-PRIV-001", pss="privileged", level="baseline")


@pytest.mark.usefixtures("pss_privileged")
def test_update_of_an_existing_pod_is_judged_as_pod_security_admission(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = pod(_privileged)
    assert evaluate(tmp_path, capsys, admission_review(bad))[0] == 1
    # metadata-only update: PSS rules are not applied
    relabelled = pod(_privileged)
    relabelled["metadata"]["labels"] = {"a": "b"}
    assert evaluate(tmp_path, capsys, admission_review(relabelled, "UPDATE", bad))[0] == 0
    # without the old object: judged in full (fail closed)
    rc, out = evaluate(tmp_path, capsys, admission_review(bad, "UPDATE"))
    assert rc == 1 and rule_ids(out["violations"]) == ["POD-PRIV-001"]
    # an image change is significant: judged in full
    changed = pod(_privileged)
    changed["spec"]["containers"][0]["image"] = "registry.gotthard.example.org/web/app:2.0"
    rc, out = evaluate(tmp_path, capsys, admission_review(changed, "UPDATE", bad))
    assert rc == 1 and rule_ids(out["violations"]) == ["POD-PRIV-001"]


#: Old objects an UPDATE may carry that do not say what the pod was.
UNREADABLE_OLD: dict[str, Any] = {
    "a string": "not an object",
    "a list": [GOOD_POD],
    "no spec": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ok"}},
    "spec not an object": {"kind": "Pod", "spec": "x"},
    "containers not a list": {"kind": "Pod", "spec": {"containers": {"name": "app"}}},
    "metadata not an object": {**GOOD_POD, "metadata": "ok"},
    "another kind's shape": {**GOOD_POD, "kind": "Deployment"},
}


@pytest.mark.parametrize("old", UNREADABLE_OLD.values(), ids=list(UNREADABLE_OLD))
def test_update_with_an_unreadable_old_object_is_judged_in_full(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: Any
) -> None:
    """Fail-closed probe: an UPDATE whose oldObject cannot be read must not skip the Pod
    Security rules (the default profile, no declared fixtures)."""
    review = admission_review(pod(_privileged), "UPDATE")
    review["request"]["oldObject"] = old
    rc, out = evaluate(tmp_path, capsys, review)
    assert rc == 1 and rule_ids(out["violations"]) == ["POD-PRIV-001"]
    # the same pod and old object that does read: a metadata-only update, PSS skipped
    review["request"]["oldObject"] = pod(_privileged)
    assert evaluate(tmp_path, capsys, review)[0] == 0


@pytest.mark.usefixtures("pss_privileged")
def test_update_keeps_site_rules_and_workload_templates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    both = pod(lambda d: (_privileged(d), _untagged(d)))
    rc, out = evaluate(tmp_path, capsys, admission_review(both, "UPDATE", both))
    assert rc == 1 and rule_ids(out["violations"]) == ["POD-IMG-002"]  # a site rule
    dep = deployment(_privileged)
    rc, out = evaluate(tmp_path, capsys, admission_review(dep, "UPDATE", dep))
    assert rc == 1 and rule_ids(out["violations"]) == ["POD-PRIV-001"]


def test_delete_is_allowed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    delete = admission_review(None, "DELETE", pod(_privileged))
    assert evaluate(tmp_path, capsys, delete) == (0, {"allowed": True, "violations": []})


# --- policy rules -----------------------------------------------------------------------


def test_policy_rules_json_lists_every_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(
        tmp_path,
        "site.toml",
        '[policies.rules.POD-IMG-002]\nmode = "warn"\nexempt_images = ["nvcr.io/*"]\n'
        '[policies.rules.POD-RES-001]\nenabled = false\nexempt_namespaces = ["kube-system"]\n',
    )
    assert run_in_process("--config", str(config), "policy", "rules", "--format", "json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["profile"] == "hybrid-hpc"
    by_id = {r["id"]: r for r in doc["rules"]}
    assert set(by_id) == {r["id"] for r in testing.load_rules()}
    for rule in doc["rules"]:
        assert set(rule) >= {"id", "level", "pss", "params", "enabled", "mode", "exempt"}
    assert by_id["POD-IMG-002"]["mode"] == "warn"
    assert by_id["POD-IMG-002"]["exempt"]["images"] == ["nvcr.io/*"]
    assert by_id["POD-RES-001"]["enabled"] is False
    assert by_id["POD-RES-001"]["exempt"]["namespaces"] == ["kube-system"]


def test_policy_rules_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_in_process("policy", "rules") == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "profile hybrid-hpc"
    for rule in testing.load_rules():
        assert rule["id"] in out


def test_opa_rest_path_applies_the_same_constraints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], opa_server: Any
) -> None:
    config = (
        '[policies.rules.POD-IMG-002]\nmode = "warn"\n'
        '[policies.rules.POD-PRIV-001]\nexempt_namespaces = ["ml"]\n'
    )
    doc = pod(lambda d: (_privileged(d), _untagged(d)))
    opa = ("--engine", "opa", "--opa-url", opa_server.url)
    assert evaluate(tmp_path, capsys, doc, config, *opa) == evaluate(tmp_path, capsys, doc, config)
    rc, out = evaluate(tmp_path, capsys, doc, config, *opa)
    assert rc == 1
    assert rule_ids(out["violations"]) == ["POD-PRIV-001"]
    assert rule_ids(out["warnings"]) == ["POD-IMG-002"]
    doc["metadata"]["namespace"] = "ml"
    rc, out = evaluate(tmp_path, capsys, doc, config, *opa)
    assert rc == 0 and rule_ids(out["warnings"]) == ["POD-IMG-002"]


# --- site parameters ---------------------------------------------------------------------

SITE_PARAMS = """
[policies.rules.POD-IDS-001.params]
run_as_user = { rule = "MustRunAs", ranges = [{ min = 1000, max = 1999 }] }
[policies.rules.POD-RES-001.params]
required_limits = ["memory"]
max_limits = { memory = "4Gi" }
[policies.rules.POD-ROFS-001]
params = { require_read_only_root_filesystem = true }
include_namespaces = ["batch"]
"""


def test_policy_rules_lists_the_site_parameters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path, "site.toml", SITE_PARAMS)
    assert run_in_process("--config", str(config), "policy", "rules", "--format", "json") == 0
    by_id = {r["id"]: r for r in json.loads(capsys.readouterr().out)["rules"]}
    assert by_id["POD-IDS-001"]["params"]["run_as_user"]["rule"] == "MustRunAs"
    assert by_id["POD-IDS-001"]["params"]["fs_group"] == {"rule": "RunAsAny", "ranges": []}
    assert by_id["POD-RES-001"]["params"] == {
        "required_limits": ["memory"],
        "required_requests": [],
        "max_limits": {"memory": "4Gi"},
        "max_requests": {},
    }
    assert by_id["POD-ROFS-001"]["include"] == {"namespaces": ["batch"]}
    for rule, names in {
        "POD-IMG-001": ["allowed_repos", "denied_repos"],
        "POD-IMG-002": ["denied_tags"],
        "POD-PSS-B-SYSCTLS-001": ["allowed_sysctls", "forbidden_sysctls"],
        "POD-PSS-B-SECCOMP-001": ["allowed_seccomp_types", "allowed_seccomp_localhost_profiles"],
        "POD-PSS-B-APPARMOR-001": ["allowed_apparmor_localhost_profiles"],
        "POD-FLEXVOL-001": ["allowed_flexvolume_drivers"],
        "POD-CAPS-001": ["required_drop_capabilities"],
        "POD-HOSTPATH-001": ["hostpath_allowlist"],
    }.items():
        assert set(names) <= set(by_id[rule]["params"]), rule
    assert run_in_process("--config", str(config), "policy", "rules") == 0
    text = capsys.readouterr().out
    assert 'param max_limits = {"memory": "4Gi"}' in text
    assert "only in namespaces: batch" in text


def test_site_parameters_decide(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def user(uid: int) -> Callable[[dict[str, Any]], None]:
        def change(doc: dict[str, Any]) -> None:
            doc["spec"]["securityContext"]["runAsUser"] = uid
            doc["spec"]["containers"][0]["resources"]["limits"] = {"memory": "1Gi"}

        return change

    assert evaluate(tmp_path, capsys, pod(user(1500)), SITE_PARAMS)[0] == 0  # no cpu limit
    rc, out = evaluate(tmp_path, capsys, pod(user(500)), SITE_PARAMS)
    assert rc == 1 and rule_ids(out["violations"]) == ["POD-IDS-001"]
    big = pod(user(1500))
    big["spec"]["containers"][0]["resources"]["limits"]["memory"] = "8Gi"
    rc, out = evaluate(tmp_path, capsys, big, SITE_PARAMS)
    assert rc == 1 and rule_ids(out["violations"]) == ["POD-RES-001"]
    # POD-ROFS-001 applies only in namespace batch
    batch = pod(user(1500))
    batch["metadata"]["namespace"] = "batch"
    rc, out = evaluate(tmp_path, capsys, batch, SITE_PARAMS)
    assert rc == 1 and rule_ids(out["violations"]) == ["POD-ROFS-001"]


@pytest.mark.parametrize(
    ("setting", "key"),
    [
        ('run_as_user = "MustRunAs"', "policies.rules.POD-IDS-001.params.run_as_user"),
        (
            'run_as_group = { rule = "MustRunAs", ranges = [{ min = "1" , max = 2 }] }',
            "policies.rules.POD-IDS-001.params.run_as_group",
        ),
        ('fs_group = { rule = "MayRunAsRoot" }', "policies.rules.POD-IDS-001.params.fs_group"),
    ],
)
def test_malformed_site_parameters_are_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setting: str, key: str
) -> None:
    config = f"[policies.rules.POD-IDS-001.params]\n{setting}\n"
    rc, out = evaluate(tmp_path, capsys, pod(), config)
    assert rc == 2 and key in out["error"] and "Traceback" not in out["error"]


def test_malformed_data_parameter_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = write(tmp_path, "data.json", json.dumps({"site": {"admission": {"max_limits": [1]}}}))
    rc, out = evaluate(tmp_path, capsys, pod(), "", "--data", str(data))
    assert rc == 2 and "site.admission.max_limits" in out["error"]
