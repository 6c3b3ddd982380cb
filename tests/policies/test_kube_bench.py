"""kube-bench parsing (real report variants), baseline, waivers, exit codes, metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gotthard.policies import engine as eng
from gotthard.policies import kube_bench
from tests.policies.conftest import FIXTURES
from tests.support.cli import run_in_process

KB = FIXTURES / "kube-bench"
RKE2 = KB / "rke2-1.1.7-1.1.9-mixedcase.json"


@pytest.mark.parametrize(
    ("name", "totals", "ids"),
    [
        ("result.json", {"pass": 49, "fail": 12, "warn": 14, "info": 0}, ["1.1.1", "2.1", "3.1.1"]),
        ("result_no_totals.json", {"pass": 49, "fail": 12, "warn": 14, "info": 0}, None),
        ("controlsCollection.json", None, ["2.1", "3.1.1", "1.1.1"]),
        ("passedControlsCollection.json", None, ["2.1", "3.1.1"]),
        ("rke2-1.1.7-1.1.9-mixedcase.json", {"pass": 1, "fail": 1, "warn": 1, "info": 0}, None),
    ],
)
def test_parse_real_report_variants(name: str, totals: dict | None, ids: list | None) -> None:
    report = kube_bench.parse_report(json.loads((KB / name).read_text()))
    assert report.checks
    assert set(report.totals) == {"pass", "fail", "warn", "info"}
    if totals:
        assert report.totals == totals
    if ids:
        assert [c.id for c in report.checks] == ids
    assert {c.node_type for c in report.checks} <= {"master", "etcd", "controlplane", "node"}


def test_parse_rejects_garbage() -> None:
    with pytest.raises(eng.PolicyError):
        kube_bench.parse_report({"Totals": {}})


def _waivers(tmp_path: Path, entries: list[dict]) -> str:
    f = tmp_path / "waivers.yaml"
    import yaml

    f.write_text(yaml.safe_dump(entries))
    return str(f)


def test_audit_rke2_failed_waived_expired(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    waivers = _waivers(
        tmp_path,
        [
            {
                "id": "1.1.9",
                "owner": "sre-zurich",
                "reason": "canal rewrites CNI files",
                "expires": "2099-12-31",
            },
            {"id": "1.1.8", "owner": "sre-lugano", "reason": "etcd user", "expires": "2020-01-01"},
        ],
    )
    prom = tmp_path / "kb.prom"
    rc = run_in_process(
        "audit",
        "kube-bench",
        "--report",
        str(RKE2),
        "--waivers",
        waivers,
        "--format",
        "json",
        "--textfile",
        str(prom),
    )
    assert rc == 1
    assert json.loads(capsys.readouterr().out) == {
        "totals": {"pass": 1, "fail": 1, "warn": 1, "info": 0},
        "failed": ["1.1.8"],
        "waived": ["1.1.9"],
        "expired_waivers": ["1.1.8"],
        "compliant": False,
    }
    text = prom.read_text()
    assert 'gotthard_kube_bench_check_failed{id="1.1.8",node_type="master"} 1.0' in text
    assert 'gotthard_kube_bench_checks{node_type="master",status="fail"} 1.0' in text
    assert 'gotthard_kube_bench_checks{node_type="master",status="info"} 0.0' in text
    # a waived check is not a failed one; its waiver's expiry is exported for the alert
    assert 'gotthard_kube_bench_check_failed{id="1.1.9"' not in text
    expiry = 'gotthard_kube_bench_waiver_expiry_timestamp_seconds{id="1.1.9",owner="sre-zurich"}'
    assert expiry in text


def test_audit_compliant_when_all_waived(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    waivers = _waivers(
        tmp_path,
        [
            {"id": i, "owner": "sre", "reason": "r", "expires": "2099-01-01"}
            for i in ("1.1.8", "1.1.9")
        ],
    )
    rc = run_in_process("policy", "kube-bench", "--report", str(RKE2), "--waivers", waivers)
    assert rc == 0
    out = capsys.readouterr().out
    assert "COMPLIANT" in out and "NOT COMPLIANT" not in out


def test_audit_report_without_required_checks(capsys: pytest.CaptureFixture[str]) -> None:
    # The upstream samples do not contain 1.1.7-1.1.9: missing required checks fail (KB-002).
    assert run_in_process("audit", "kube-bench", "--report", str(KB / "result_no_totals.json")) == 1
    assert "KB-002" in capsys.readouterr().out


def test_check_restricts_baseline(capsys: pytest.CaptureFixture[str]) -> None:
    rc = run_in_process(
        "audit", "kube-bench", "--report", str(RKE2), "--check", "1.1.7", "--format", "json"
    )
    assert rc == 0
    assert json.loads(capsys.readouterr().out)["compliant"] is True


@pytest.mark.parametrize(
    "entry",
    [
        {"id": "1.1.9", "owner": "sre", "reason": "r"},
        {"id": "1.1.9", "owner": "sre", "reason": "r", "expires": "next year"},
        {"id": "1.1.9", "reason": "r", "expires": "2099-01-01"},
    ],
)
def test_bad_waivers_exit_2(
    tmp_path: Path, entry: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = run_in_process(
        "audit", "kube-bench", "--report", str(RKE2), "--waivers", _waivers(tmp_path, [entry])
    )
    assert rc == 2
    assert "waivers" in capsys.readouterr().err


def test_run_without_binary_exit_2(monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PATH", "/nonexistent")
    assert run_in_process("audit", "kube-bench", "--run", "--check", "1.1.7,1.1.8,1.1.9") == 2
    assert "not installed" in capsys.readouterr().err


def test_run_invokes_kube_bench_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    fake = tmp_path / "kube-bench"
    fake.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/argv\ncat {RKE2}\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    rc = run_in_process(
        "audit",
        "kube-bench",
        "--run",
        "--targets",
        "master,etcd",
        "--check",
        "1.1.7",
        "--format",
        "json",
    )
    assert rc == 0
    assert (tmp_path / "argv").read_text().split() == [
        "run",
        "--json",
        "--targets",
        "master,etcd",
        "--check",
        "1.1.7",
    ]


def test_eval_accepts_a_kube_bench_report(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_in_process("policy", "eval", "--input", str(RKE2)) == 1
    out = json.loads(capsys.readouterr().out)
    assert sorted(v["rule"] for v in out["violations"]) == ["KB-001", "KB-001"]


def test_kube_bench_with_opa_engine(opa_server, capsys) -> None:  # type: ignore[no-untyped-def]
    rc = run_in_process(
        "audit",
        "kube-bench",
        "--report",
        str(RKE2),
        "--format",
        "json",
        "--engine",
        "opa",
        "--opa-url",
        opa_server.url,
    )
    assert rc == 1
    assert json.loads(capsys.readouterr().out)["failed"] == ["1.1.8", "1.1.9"]
