"""Shipped policy tables, rule catalogue, ``policy eval`` and the OPA-server engine."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gotthard.policies import engine as eng
from gotthard.policies import testing
from tests.policies.conftest import GOOD_POD
from tests.support.cli import run_in_process

TABLES = testing.load_tables()
CASES = [
    pytest.param(name, i, id=f"{name}:{case['name']}")
    for name, table in TABLES.items()
    for i, case in enumerate(table["cases"])
]
DOCS = Path(__file__).resolve().parents[2] / "docs" / "policies.md"
_engines: dict[str, eng.EmbeddedEngine] = {}


def _engine(table: str) -> eng.EmbeddedEngine:
    if table not in _engines:
        _engines[table] = eng.EmbeddedEngine(eng.build_data(TABLES[table].get("data")))
    return _engines[table]


@pytest.mark.parametrize(("table", "index"), CASES)
def test_table_case_embedded(table: str, index: int) -> None:
    case = TABLES[table]["cases"][index]
    got = eng.evaluate(_engine(table), case["input"], policy=TABLES[table]["policy"])
    assert sorted({v.rule for v in got}) == sorted(set(case["expect"]))


def test_every_rule_has_allow_and_deny_case() -> None:
    assert testing.coverage_problems() == []


def test_rule_catalogue_matches_rego_and_docs() -> None:
    emitted = set()
    for src in eng.rego_modules().values():
        emitted |= set(re.findall(r'"rule": "([A-Z0-9-]+)"', src))
    catalogue = {r["id"] for r in testing.load_rules()}
    assert emitted == catalogue
    assert all(r["rationale"] and r["policy"] in eng.POLICIES for r in testing.load_rules())
    docs = DOCS.read_text(encoding="utf-8")
    assert [rid for rid in sorted(catalogue) if rid not in docs] == []


def test_policy_test_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_in_process("policy", "test") == 0
    out = capsys.readouterr().out
    assert f"{len(CASES)} cases: {len(CASES)} passed, 0 failed; 0 coverage problems" in out


def test_policy_test_command_fails_on_a_wrong_expectation(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tables = testing.load_tables()
    tables["mesh.yml"]["cases"][0]["expect"] = ["MESH-MTLS-001"]
    monkeypatch.setattr(testing, "load_tables", lambda: tables)
    assert run_in_process("policy", "test") == 1
    assert "FAIL mesh.yml" in capsys.readouterr().out


# --- eval ---------------------------------------------------------------------------


def _eval(tmp_path: Path, doc: object | str, *extra: str, suffix: str = ".json") -> int:
    f = tmp_path / f"input{suffix}"
    f.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return run_in_process("policy", "eval", "--input", str(f), *extra)


def test_eval_allowed_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _eval(tmp_path, GOOD_POD) == 0
    assert json.loads(capsys.readouterr().out) == {"allowed": True, "violations": []}


def test_eval_denied_yaml_admission_review(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod = json.loads(json.dumps(GOOD_POD))
    pod["spec"]["containers"][0]["image"] = "nginx"
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    del pod["metadata"]["namespace"]
    review = {"kind": "AdmissionReview", "request": {"namespace": "web", "object": pod}}
    import yaml

    assert _eval(tmp_path, yaml.safe_dump(review), suffix=".yaml") == 1
    out = json.loads(capsys.readouterr().out)
    assert out["allowed"] is False
    assert {v["rule"] for v in out["violations"]} == {"POD-PRIV-001", "POD-IMG-001", "POD-IMG-002"}
    assert all(set(v) == {"rule", "message"} for v in out["violations"])


def test_eval_multi_document_yaml_is_a_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = """
kind: Namespace
metadata: {name: ml}
---
kind: StorageClass
metadata: {name: lustre}
provisioner: lustre.csi.hpe.com
parameters: {rootSquash: "true"}
reclaimPolicy: Retain
"""
    assert _eval(tmp_path, docs, suffix=".yaml") == 1
    out = json.loads(capsys.readouterr().out)
    assert [v["rule"] for v in out["violations"]] == ["MESH-MTLS-001"]


def test_eval_data_override(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = json.loads(json.dumps(GOOD_POD))
    pod["spec"]["hostNetwork"] = True
    data = tmp_path / "data.yaml"
    data.write_text("inventory:\n  namespaces:\n    web: {labels: {gotthard.io/network: nccl}}\n")
    assert _eval(tmp_path, pod) == 1
    assert _eval(tmp_path, pod, "--data", str(data)) == 0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json: [", "neither JSON nor YAML"),
        ('{"kind": "ConfigMap", "metadata": {"name": "x"}}', "unknown kind 'ConfigMap'"),
        ('"just a string"', "input must be an object"),
        ('{"kind": "Deployment", "spec": {}}', "no pod spec"),
    ],
)
def test_eval_bad_input_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    assert _eval(tmp_path, content) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message in captured.err


def test_eval_missing_file_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_in_process("policy", "eval", "--input", "/nonexistent/x.json") == 2
    assert "cannot read" in capsys.readouterr().err


def test_eval_policy_flag_overrides_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = {"user": "bob", "account": "climate", "nodes": 100}
    assert _eval(tmp_path, job, "--policy", "slurm-quota") == 1
    out = json.loads(capsys.readouterr().out)
    assert [v["rule"] for v in out["violations"]] == ["SLURM-QUOTA-001", "SLURM-QUOTA-003"]


def test_eval_textfile_exports_every_rule(tmp_path: Path) -> None:
    pod = json.loads(json.dumps(GOOD_POD))
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    prom = tmp_path / "policy.prom"
    assert _eval(tmp_path, pod, "--textfile", str(prom)) == 1
    text = prom.read_text()
    assert 'gotthard_policy_violations{policy="pod",rule="POD-PRIV-001"} 1.0' in text
    assert 'gotthard_policy_violations{policy="mesh",rule="MESH-MTLS-001"} 0.0' in text


# --- OPA server engine ----------------------------------------------------------------


@pytest.mark.parametrize("table", sorted(TABLES))
def test_opa_engine_agrees_with_embedded(opa_server, table: str) -> None:  # type: ignore[no-untyped-def]
    data = eng.build_data(TABLES[table].get("data"))
    opa = eng.OpaServerEngine(opa_server.url, data)
    policy = TABLES[table]["policy"]
    for case in TABLES[table]["cases"]:
        got = eng.evaluate(opa, case["input"], policy=policy)
        assert sorted({v.rule for v in got}) == sorted(set(case["expect"])), case["name"]
        assert got == eng.evaluate(_engine(table), case["input"], policy=policy)
    assert ("PUT", "/v1/policies/gotthard/pod.rego") in opa_server.requests
    assert ("POST", f"/v1/data/{eng.POLICIES[policy].package.replace('.', '/')}/deny") in (
        opa_server.requests
    )


def test_eval_cli_with_opa_engine(opa_server, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert _eval(tmp_path, GOOD_POD, "--engine", "opa", "--opa-url", opa_server.url) == 0
    pod = json.loads(json.dumps(GOOD_POD))
    pod["spec"]["containers"][0]["image"] = "registry.gotthard.example.org/web/app:latest"
    capsys.readouterr()
    assert _eval(tmp_path, pod, "--engine", "opa", "--opa-url", opa_server.url) == 1
    out = json.loads(capsys.readouterr().out)
    assert [v["rule"] for v in out["violations"]] == ["POD-IMG-002"]


def test_opa_engine_unreachable_is_exit_2(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    rc = _eval(tmp_path, GOOD_POD, "--engine", "opa", "--opa-url", "http://127.0.0.1:9")
    assert rc == 2
    assert "upload failed" in capsys.readouterr().err
