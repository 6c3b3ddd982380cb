"""The audit CronJob's findings are metrics Prometheus scrapes, not a failed Job: the
CronJob runs ``audit cluster --report-only --textfile-configmap``, a textfile
exporter serves that ConfigMap, and a ServiceMonitor scrapes it.
(tests/policies/test_audit_cluster.py runs the audit's side against the emulator.)"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from gotthard.policies import metrics
from tests.support.cli import gotthard

Find = Callable[[str, str], dict[str, Any]]


def _container(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj["spec"]
    if obj["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    (main,) = spec["template"]["spec"]["containers"]
    return main


def test_the_cronjob_writes_the_configmap_the_exporter_serves(
    find: Find, objects: list[dict[str, Any]]
) -> None:
    args = _container(find("CronJob", "gotthard-audit"))["args"]
    assert "--report-only" in args
    assert "--textfile-configmap=gotthard/gotthard-audit-metrics" in args
    configmap = find("ConfigMap", "gotthard-audit-metrics")
    assert "data" not in configmap  # applying again keeps the last audit's metrics
    deployment = find("Deployment", "gotthard-audit-metrics")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    main = _container(deployment)
    (mount,) = [m for m in main["volumeMounts"] if m["name"] == "audit-metrics"]
    assert f"--textfile.directory={mount['mountPath']}" in main["args"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "audit-metrics"]
    assert volume["configMap"]["name"] == "gotthard-audit-metrics"
    monitor = find("ServiceMonitor", "gotthard-audit-metrics")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    # the audit may patch that one ConfigMap, nothing else in the namespace
    (role,) = [
        o for o in objects if o["kind"] == "Role" and o["metadata"]["name"] == "gotthard-audit"
    ]
    assert role["metadata"]["namespace"] == "gotthard"
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["gotthard-audit-metrics"],
            "verbs": ["patch"],
        }
    ]


def _configmap_volume(directory: Path, files: dict[str, str]) -> None:
    """A directory laid out as the kubelet mounts a ConfigMap (``..data`` symlinks)."""
    stamp = directory / "..2026_12_05_08_00_00.000000001"
    stamp.mkdir(parents=True)
    for name, text in files.items():
        (stamp / name).write_text(text)
        os.symlink(f"..data/{name}", directory / name)
    os.symlink(stamp.name, directory / "..data")


def test_the_rendered_exporter_serves_a_finding_as_a_metric(find: Find, tmp_path: Path) -> None:
    families = metrics.violations_families({("pod", "POD-PRIV-001"): 3})
    text = metrics.textfile_text("audit-cluster.prom", families)
    _configmap_volume(tmp_path / "mounted", {"audit-cluster.prom": text})
    args = [
        a
        for a in _container(find("Deployment", "gotthard-audit-metrics"))["args"]
        if not a.startswith(("--listen", "--textfile.directory"))
    ]
    result = gotthard(*args, "--once", f"--textfile.directory={tmp_path / 'mounted'}")
    assert result.returncode == 0, result.stderr
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(result.stdout)
        for s in family.samples
    }
    key = ("gotthard_policy_violations", (("policy", "pod"), ("rule", "POD-PRIV-001")))
    assert samples[key] == 3.0
