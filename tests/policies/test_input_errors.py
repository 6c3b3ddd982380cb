"""Malformed input is exit 2 with a message naming the problem, never a verdict or a
traceback; the kube-bench ``scored`` baseline."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gotthard.policies import engine as eng
from tests.policies.conftest import FIXTURES
from tests.policies.conftest import GOOD_POD as POD
from tests.support.cli import run_in_process

KB = FIXTURES / "kube-bench"
RKE2 = KB / "rke2-1.1.7-1.1.9-mixedcase.json"


def _write(tmp_path: Path, content: Any, name: str = "input.json") -> str:
    f = tmp_path / name
    f.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(f)


def _nested(depth: int) -> Any:
    doc: Any = "leaf"
    for _ in range(depth):
        doc = {"a": [doc]}
    return doc


def _deployment(template: Any) -> dict[str, Any]:
    return {"kind": "Deployment", "metadata": {"name": "d"}, "spec": {"template": template}}


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({**POD, "metadata": "ok"}, "'metadata' must be an object, got str"),
        ({**POD, "spec": ["x"]}, "'spec' must be an object, got list"),
        (_deployment(None), "no pod spec with containers"),
        (_deployment({"spec": "x"}), "'spec' must be an object, got str"),
        (
            {"kind": "CronJob", "spec": {"jobTemplate": 3}},
            "'jobTemplate' must be an object, got int",
        ),
        ({"kind": "AdmissionReview", "request": "x"}, "'request' must be an object"),
        (
            {"kind": "AdmissionReview", "request": {"namespace": "a", "object": {"metadata": 1}}},
            "'metadata' must be an object, got int",
        ),
        ({"kind": "List", "items": "x"}, "'items' must be a list"),
        ({"kind": ["Pod"]}, "unknown kind ['Pod']"),
        ({"kind": "KubeBenchResults", "today": "2026-01-01", "checks": "x"}, "'checks'"),
        (
            {"kind": "KubeBenchResults", "today": "2026-01-01", "checks": [{}], "only": "1.1.7"},
            "checks[0]",
        ),
    ],
)
def test_eval_malformed_input_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], doc: Any, message: str
) -> None:
    assert run_in_process("policy", "eval", "--input", _write(tmp_path, doc)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message in captured.err
    assert "Traceback" not in captured.err


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_deep_nesting_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    pod = copy.deepcopy(POD)
    pod["metadata"]["annotations"] = {"deep": _nested(eng.MAX_DEPTH)}
    text = json.dumps(pod) if fmt == "json" else yaml.safe_dump(pod)
    assert run_in_process("policy", "eval", "--input", _write(tmp_path, text, f"p.{fmt}")) == 2
    assert f"nested deeper than {eng.MAX_DEPTH} levels" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000 + "]" * 100_000,  # deeper than Python's recursion limit
        "a: " + "[" * 100_000,
        "- " * 5000 + "x",
    ],
)
def test_nesting_past_the_parser_limit_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    assert run_in_process("policy", "eval", "--input", _write(tmp_path, text)) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "gotthard policy:" in err


def test_nesting_within_the_limit_is_evaluated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod = copy.deepcopy(POD)
    # deep, but in a part of the object no rule reads (annotation values are strings)
    pod["status"] = {"deep": _nested(20)}
    assert run_in_process("policy", "eval", "--input", _write(tmp_path, pod)) == 0


def test_yaml_alias_bomb_and_self_reference_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # nine levels of ten aliases each: 10**9 values once expanded
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        bomb += f"{name}: &{name} [{', '.join([f'*{prev}'] * 10)}]\n"
    assert run_in_process("policy", "eval", "--input", _write(tmp_path, bomb, "b.yaml")) == 2
    assert "more than" in capsys.readouterr().err
    loop = "kind: Pod\nmetadata: &m {name: x, self: *m}\n"
    assert run_in_process("policy", "eval", "--input", _write(tmp_path, loop, "l.yaml")) == 2


@pytest.mark.parametrize(
    "text",
    [
        "kind: Pod\nmetadata: {creationTimestamp: 2026-13-45}\n",  # not a date
        "kind: Pod\nreplicas: " + "9" * 5000 + "\n",  # int over Python's digit limit
        '{"kind": "Pod", "x": NaN, "spec": {"containers": []}}',
    ],
)
def test_unrepresentable_values_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    assert run_in_process("policy", "eval", "--input", _write(tmp_path, text, "x.yaml")) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_yaml_dates_are_strings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = yaml.safe_dump(POD) + "status: {startTime: 2026-01-01}\n"
    assert run_in_process("policy", "eval", "--input", _write(tmp_path, pod, "p.yaml")) == 0


# --- kube-bench reports --------------------------------------------------------------


def _rke2() -> dict[str, Any]:
    return json.loads(RKE2.read_text())


def _result(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["controls"][0]["tests"][0]["results"][0]


def _mutated(change: str) -> Any:
    doc = _rke2()
    if change == "string":
        return "kube-bench"
    if change == "no-controls":
        return {"Totals": {}}
    if change == "controls-dict":
        return {"Controls": {"id": "1"}}
    if change == "control-string":
        doc["controls"][0] = "x"
    elif change == "test-string":
        doc["controls"][0]["tests"][0] = "x"
    elif change == "results-dict":
        doc["controls"][0]["tests"][0]["results"] = {}
    elif change == "status-unknown":
        _result(doc)["status"] = "OK"
    elif change == "status-int":
        _result(doc)["status"] = 1
    elif change == "no-test-number":
        del _result(doc)["test_number"]
    elif change == "scored-string":
        _result(doc)["scored"] = "yes"
    elif change == "total-string":
        doc["controls"][0]["total_pass"] = "many"
    elif change == "totals-list":
        doc["Totals"] = [1]
    elif change == "both-casings":
        doc["Controls"] = doc["controls"]
    elif change == "no-results":
        doc["controls"][0]["tests"] = []
    return doc


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("string", "expected an object or a list, got str"),
        ("no-controls", "no Controls list"),
        ("controls-dict", "Controls must be list, got dict"),
        ("control-string", "Controls[0] is str, not an object"),
        ("test-string", "Controls[0]: tests[0] is str, not an object"),
        ("results-dict", "Controls[0].tests[0]: results must be list, got dict"),
        ("status-unknown", "status 'OK' is not PASS/FAIL/WARN/INFO"),
        ("status-int", "(1.1.7): status must be str, got int"),
        ("no-test-number", "test_number missing"),
        ("scored-string", "scored must be bool, got str"),
        ("total-string", "total_pass must be int, got str"),
        ("totals-list", "Totals must be Mapping, got list"),
        ("both-casings", "has 'controls', 'Controls'"),
        ("no-results", "no check results"),
    ],
)
@pytest.mark.parametrize("command", [("audit", "kube-bench"), ("policy", "kube-bench")])
def test_kube_bench_bad_report_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    change: str,
    message: str,
    command: tuple[str, str],
) -> None:
    report = _write(tmp_path, _mutated(change))
    assert run_in_process(*command, "--report", report) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "kube-bench report" in captured.err and message in captured.err


def test_eval_refuses_a_bad_kube_bench_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _write(tmp_path, _mutated("status-int"))
    assert run_in_process("policy", "eval", "--input", report) == 2
    assert "status must be str" in capsys.readouterr().err


def test_newer_kube_bench_shape(capsys: pytest.CaptureFixture[str]) -> None:
    report = str(KB / "rke2-newer-lowercase-totals.json")
    assert run_in_process("audit", "kube-bench", "--report", report, "--format", "json") == 1
    out = json.loads(capsys.readouterr().out)
    assert out["totals"] == {"pass": 1, "fail": 1, "warn": 1, "info": 0}
    assert out["failed"] == ["1.1.8", "1.1.9"]


# --- the ``scored`` baseline ---------------------------------------------------------


def _data(tmp_path: Path, required: Any) -> str:
    return _write(tmp_path, {"site": {"kube_bench": {"required": required}}}, "data.json")


def _kube_bench(tmp_path: Path, report: Path, required: Any, *extra: str) -> int:
    data = _data(tmp_path, required)
    return run_in_process(
        "audit", "kube-bench", "--report", str(report), "--data", data, "--format", "json", *extra
    )


def test_scored_baseline_requires_every_scored_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 1.1.7 PASS (scored), 1.1.8 FAIL (scored), 1.1.9 WARN (not scored)
    assert _kube_bench(tmp_path, RKE2, "scored") == 1
    assert json.loads(capsys.readouterr().out)["failed"] == ["1.1.8"]


def test_scored_baseline_passes_when_scored_checks_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # result.json: 1.1.1 and 2.1 scored and PASS, 3.1.1 WARN but not scored
    assert _kube_bench(tmp_path, KB / "result.json", "scored") == 0
    assert json.loads(capsys.readouterr().out)["compliant"] is True
    # the id-list baseline on the same report still wants 1.1.7-1.1.9 (missing)
    assert _kube_bench(tmp_path, KB / "result.json", ["1.1.7", "1.1.8", "1.1.9"]) == 1


def test_scored_baseline_with_waiver(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    waivers = _write(
        tmp_path,
        [{"id": "1.1.8", "owner": "sre", "reason": "r", "expires": "2099-01-01"}],
        "w.json",
    )
    assert _kube_bench(tmp_path, RKE2, "scored", "--waivers", waivers) == 0
    assert json.loads(capsys.readouterr().out)["waived"] == ["1.1.8"]
    expired = _write(
        tmp_path,
        [{"id": "1.1.8", "owner": "sre", "reason": "r", "expires": "2020-01-01"}],
        "w.json",
    )
    assert _kube_bench(tmp_path, RKE2, "scored", "--waivers", expired) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["failed"] == ["1.1.8"] and out["expired_waivers"] == ["1.1.8"]


def test_scored_baseline_through_policy_eval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _data(tmp_path, "scored")
    assert run_in_process("policy", "eval", "--input", str(RKE2), "--data", data) == 1
    out = json.loads(capsys.readouterr().out)
    assert [v["rule"] for v in out["violations"]] == ["KB-001"]
    assert "1.1.8" in out["violations"][0]["message"]
    # a Pod does not involve the baseline: the same data evaluates it
    pod = _write(tmp_path, POD, "pod.json")
    assert run_in_process("policy", "eval", "--input", pod, "--data", data) == 0


def test_scored_baseline_without_scored_checks_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _rke2()
    for r in doc["controls"][0]["tests"][0]["results"]:
        r["scored"] = False
    assert _kube_bench(tmp_path, Path(_write(tmp_path, doc, "r.json")), "scored") == 2
    assert "no scored checks" in capsys.readouterr().err


@pytest.mark.parametrize("required", ["all", 7, [1, 2], None, {"scored": True}])
def test_bad_baseline_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], required: Any
) -> None:
    assert _kube_bench(tmp_path, RKE2, required) == 2
    assert "site.kube_bench.required must be a list of check ids or 'scored'" in (
        capsys.readouterr().err
    )


def test_unwritable_textfile_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "missing-dir" / "out.prom")
    pod = _write(tmp_path, POD)
    assert run_in_process("policy", "eval", "--input", pod, "--textfile", out) == 2
    assert "--textfile" in capsys.readouterr().err
    assert run_in_process("audit", "kube-bench", "--report", str(RKE2), "--textfile", out) == 2
    assert "cannot write" in capsys.readouterr().err


def test_run_with_too_deep_output_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _write(tmp_path, json.dumps(_nested(eng.MAX_DEPTH + 1)), "deep.json")
    fake = tmp_path / "kube-bench"
    fake.write_text(f"#!/bin/sh\ncat {report}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert run_in_process("audit", "kube-bench", "--run") == 2
    assert "kube-bench output: nested deeper than" in capsys.readouterr().err
