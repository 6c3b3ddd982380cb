"""The textfile metrics the security alerts read: when an audit last ran, when a waiver
expires."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from gotthard.policies import kube_bench, metrics
from tests.policies.conftest import FIXTURES
from tests.support.cli import run_in_process

RKE2 = FIXTURES / "kube-bench" / "rke2-1.1.7-1.1.9-mixedcase.json"


def _samples(path: Path, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(path.read_text())
        for sample in family.samples
        if sample.name == name
    }


def test_every_textfile_says_when_it_was_written(tmp_path: Path) -> None:
    before = time.time()
    path = tmp_path / "policies.prom"
    metrics.write_textfile(path, metrics.violations_families({("admission", "no-root"): 2}))
    written = _samples(path, "gotthard_audit_last_run_timestamp_seconds")
    assert list(written) == [(("textfile", "policies.prom"),)]
    assert before - 1 <= written[(("textfile", "policies.prom"),)] <= time.time() + 1
    assert _samples(path, "gotthard_policy_violations") == {
        (("policy", "admission"), ("rule", "no-root")): 2.0
    }


def test_waivers_export_the_end_of_their_last_day(tmp_path: Path) -> None:
    report = kube_bench.parse_report(json.loads(RKE2.read_text()))
    waivers = [{"id": "1.1.7", "owner": "platform", "reason": "vendor", "expires": "2031-05-04"}]
    path = tmp_path / "kube-bench.prom"
    metrics.write_textfile(path, metrics.kube_bench_families(report, [], waivers=waivers))
    end = dt.datetime(2031, 5, 5, tzinfo=dt.UTC).timestamp()
    assert _samples(path, "gotthard_kube_bench_waiver_expiry_timestamp_seconds") == {
        (("id", "1.1.7"), ("owner", "platform")): end
    }


def test_audit_kube_bench_textfile_carries_the_waivers_it_was_given(tmp_path: Path) -> None:
    waivers = tmp_path / "waivers.yaml"
    entry = {"id": "1.1.8", "owner": "sre", "reason": "vendor fix", "expires": "2099-01-01"}
    waivers.write_text(yaml.safe_dump([entry]))
    textfile = tmp_path / "kube-bench.prom"
    argv = ["audit", "kube-bench", "--report", str(RKE2), "--waivers", str(waivers)]
    run_in_process(*argv, "--textfile", str(textfile))
    end = dt.datetime(2099, 1, 2, tzinfo=dt.UTC).timestamp()
    assert _samples(textfile, "gotthard_kube_bench_waiver_expiry_timestamp_seconds") == {
        (("id", "1.1.8"), ("owner", "sre")): end
    }
