"""The webhook acts only on the clusters it owns, each through that cluster's own Slurm
controller and Kubernetes API, as the site model describes them.

Two clusters of one site share node names (``nid001`` on every Cray system). The Slurm
test runs the real session sandbox as one cluster and, as the other, the recording fake
``scontrol``/``sinfo`` of ``conftest.py``, which answers only for its own ``SLURM_CONF``
(a second real slurmctld per test would cost more than it shows). The Kubernetes test
runs two emulated API servers, one per cluster, each reached through its own kubeconfig.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from gotthard.config import Config, from_mapping
from gotthard.runbooks.actions import CORDON_ANNOTATION
from gotthard.runbooks.cli import effective_settings
from gotthard.runbooks.clusters import FOREIGN, OwnershipError, from_config
from gotthard.runbooks.settings import RunbooksConfig
from gotthard.sandbox import Sandbox
from tests.runbooks.conftest import (
    TOKEN,
    FakeSlurm,
    alert_payload,
    many_alerts,
    sandbox_node,
    settings_for,
)
from tests.support.cli import gotthard
from tests.support.kube import NODES, EmulatorThread


def site_config(clusters: dict[str, dict[str, Any]], **site: Any) -> Config:
    """Site zurich (with *site*'s keys) and *clusters*; the installation runs on the first."""
    first = next(iter(clusters))
    sites = {"zurich": {"clusters": clusters, **site}}
    return from_mapping({"site": "zurich", "cluster": first, "sites": sites})


def _foreign_records(audit: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in audit if r.get("result") == FOREIGN]


def test_a_drain_goes_to_the_controller_of_the_alerts_cluster_only(
    tmp_path: Path,
    node_restored: Sandbox,
    fake_slurm: FakeSlurm,
    monkeypatch: pytest.MonkeyPatch,
    start_server: Any,
) -> None:
    sandbox = node_restored
    node = sandbox.node_name  # the same name in both clusters
    fake_slurm.set_nodes({"gpu": [node, "nid001", "nid002"]})
    fake_conf = fake_slurm.only_for_conf(monkeypatch)
    cfg = site_config(
        {"alps": {"slurm_conf": str(sandbox.slurm_conf)}, "daint": {"slurm_conf": str(fake_conf)}}
    )
    # the fake stands in for daint's scontrol/sinfo and runs the real ones for alps
    settings = settings_for(tmp_path, fake_slurm, mode="enforce")
    running = start_server(settings, clusters=from_config(cfg, settings))

    # GPULost of daint's node: drained in daint's controller; alps' node of the same name
    # stays idle. Neither cluster has Kubernetes, so the cordon step fails, saying so.
    code, answer = running.post(alert_payload("GPULost", cluster="daint", node=node))
    assert code == 200 and answer["results"] == {"ok": 2, "failed": 1}, running.audit()
    assert fake_slurm.updates() == [
        ["scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=gotthard: GPULost"]
    ]
    assert fake_slurm.state()["nodes"][node]["state"] == "drained"
    assert sandbox_node(sandbox) == ("idle", "none")
    cordon = next(r for r in running.audit() if r.get("action") == "k8s.cordon_node")
    assert cordon["cluster"] == "daint"
    assert "site zurich cluster daint: no Kubernetes access configured" in cordon["why"]

    # The same node name in alps: drained in the real controller; the fake sees nothing.
    calls = fake_slurm.calls()
    alps = alert_payload("GPULost", cluster="alps", node=node, fingerprint="a1")
    assert running.post(alps)[1]["results"] == {"ok": 2, "failed": 1}, running.audit()
    state, reason = sandbox_node(sandbox)
    assert state in ("drained", "draining") and reason == "gotthard: GPULost"
    assert fake_slurm.calls() == calls
    drains = [r for r in running.audit() if r.get("action") == "slurm.drain_node"]
    assert [(r["cluster"], r["result"]) for r in drains] == [("daint", "ok"), ("alps", "ok")]


def test_a_foreign_clusters_alert_is_audited_and_never_acts(
    tmp_path: Path, fake_slurm: FakeSlurm, start_server: Any
) -> None:
    cfg = site_config({"daint": {}, "eiger": {}})
    settings = settings_for(tmp_path, fake_slurm, mode="enforce", clusters=["daint"])
    running = start_server(settings, clusters=from_config(cfg, settings))
    alerts = [
        # another site's cluster, a cluster of this site it does not own, and a hostile value
        {"labels": {"alertname": "GPULost", "cluster": "todi", "node": "nid001"}},
        {"labels": {"alertname": "SlingshotLinkDown", "cluster": "eiger", "node": "nid001"}},
        {"labels": {"alertname": "GPULost", "cluster": "daint;rm -rf /", "node": "nid001"}},
    ]
    for i, alert in enumerate(alerts):
        alert["fingerprint"] = f"f{i}"
    code, answer = running.post(many_alerts(alerts))
    # answered 200 (Alertmanager must not retry); nothing ran, not even sinfo
    assert code == 200 and answer["results"] == {FOREIGN: 3}
    assert fake_slurm.calls() == []
    records = _foreign_records(running.audit())
    assert [(r["runbook"], r["cluster"]) for r in records] == [
        ("GPULost", "todi"),
        ("SlingshotLinkDown", "eiger"),
        ("GPULost", "(invalid)"),
    ]
    assert "cluster 'todi' is not one of this webhook's clusters (daint)" in records[0]["why"]
    assert all("step" not in r and "action" not in r for r in records)
    metrics = running.get("/metrics")[1].decode()
    line = (
        'gotthard_runbook_actions_total{action="none",result="foreign-cluster",runbook="GPULost"}'
    )
    assert f"{line} 2.0" in metrics
    # its own cluster's alert still acts
    own = alert_payload("GPULost", cluster="daint", node="nid001", fingerprint="f9")
    assert running.post(own)[1]["results"] == {"ok": 2, "failed": 1}  # daint has no k8s
    assert [c[2] for c in fake_slurm.updates()] == ["NodeName=nid001"]


def test_limits_are_kept_per_cluster(
    tmp_path: Path, fake_slurm: FakeSlurm, start_server: Any
) -> None:
    """A node planned out of service in one cluster takes nothing from another's budget,
    even under the same name and partition name."""
    fake_slurm.set_nodes({"gpu": ["nid001", "nid002", "nid003", "nid004"]})
    cfg = site_config({"daint": {}, "eiger": {}})
    settings = settings_for(tmp_path, fake_slurm)  # one node of 4 per partition may go
    running = start_server(settings, clusters=from_config(cfg, settings))
    daint = alert_payload("SlingshotLinkDown", cluster="daint", node="nid001")
    assert running.post(daint)[1]["results"] == {"planned": 2}
    eiger = alert_payload("SlingshotLinkDown", cluster="eiger", node="nid002", fingerprint="e1")
    assert running.post(eiger)[1]["results"] == {"planned": 2}
    # within one cluster the partition blast radius still holds
    again = alert_payload("SlingshotLinkDown", cluster="daint", node="nid003", fingerprint="d2")
    assert running.post(again)[1]["results"] == {"planned": 1, "limited": 1}


@pytest.mark.parametrize(
    ("clusters", "default", "result"),
    [
        (["daint"], "", "ok"),  # its only cluster
        (["daint", "eiger"], "", FOREIGN),  # several: it cannot tell which
        (["daint", "eiger"], "daint", "ok"),  # unless default_cluster says so
    ],
)
def test_an_alert_without_a_cluster_label(
    tmp_path: Path,
    fake_slurm: FakeSlurm,
    start_server: Any,
    clusters: list[str],
    default: str,
    result: str,
) -> None:
    cfg = site_config({"daint": {}, "eiger": {}})
    settings = settings_for(
        tmp_path, fake_slurm, mode="enforce", clusters=clusters, default_cluster=default
    )
    running = start_server(settings, clusters=from_config(cfg, settings))
    payload = alert_payload("SlingshotLinkDown", node="nid003")
    del payload["alerts"][0]["labels"]["cluster"]
    assert running.post(payload)[1]["results"] == {result: 2 if result == "ok" else 1}
    assert bool(fake_slurm.updates()) == (result == "ok")
    if result == FOREIGN:
        why = _foreign_records(running.audit())[0]["why"]
        assert "no cluster label and this webhook owns several clusters" in why


@pytest.fixture
def two_clusters() -> Iterator[dict[str, EmulatorThread]]:
    """An emulated Kubernetes API per cluster, each with nodes nid001 and nid002.

    Stopped in the reverse order of their start: kmock hooks name resolution per server,
    and unhooks cleanly only that way."""
    with contextlib.ExitStack() as stack:
        emulators = {}
        for name in ("alps", "daint"):
            emulator = stack.enter_context(EmulatorThread(NODES))
            core = client.CoreV1Api(emulator.api())
            for node in ("nid001", "nid002"):
                core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
            emulators[name] = emulator
        yield emulators


def _cordoned(emulator: EmulatorThread, name: str) -> tuple[bool, str | None]:
    api = client.CoreV1Api(emulator.api())
    node = api.api_client.sanitize_for_serialization(api.read_node(name))
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return bool((node.get("spec") or {}).get("unschedulable")), annotations.get(CORDON_ANNOTATION)


def test_a_cordon_goes_to_the_kubernetes_api_of_the_alerts_cluster_only(
    tmp_path: Path,
    fake_slurm: FakeSlurm,
    start_server: Any,
    two_clusters: dict[str, EmulatorThread],
) -> None:
    clusters = {
        name: {"kubernetes": {"kubeconfig": str(emulator.kubeconfig(tmp_path / f"{name}.yaml"))}}
        for name, emulator in two_clusters.items()
    }
    cfg = site_config(clusters, kubernetes_cluster="alps")  # the one DR uses
    settings = settings_for(tmp_path, fake_slurm, mode="enforce")
    running = start_server(settings, clusters=from_config(cfg, settings))
    code, answer = running.post(alert_payload("GPULost", cluster="daint", node="nid001"))
    assert code == 200 and answer["results"] == {"ok": 3}, running.audit()
    assert _cordoned(two_clusters["daint"], "nid001") == (True, "GPULost")
    # alps' node of the same name (and daint's other node) are untouched
    assert _cordoned(two_clusters["alps"], "nid001") == (False, None)
    assert _cordoned(two_clusters["daint"], "nid002") == (False, None)


def test_an_unknown_cluster_in_the_settings_is_a_config_error(tmp_path: Path) -> None:
    cfg = site_config({"daint": {}, "eiger": {}})
    settings = RunbooksConfig(clusters=["daint", "todi"])
    with pytest.raises(OwnershipError, match=r"runbooks\.clusters: 'todi' is not a cluster of"):
        from_config(cfg, settings)
    with pytest.raises(OwnershipError, match=r"runbooks\.default_cluster: 'eiger' is not one of"):
        from_config(cfg, RunbooksConfig(clusters=["daint"], default_cluster="eiger"))
    args = argparse.Namespace(listen=None, token_file=None, audit_log=None, mode=None)
    owned = from_config(cfg, effective_settings(args, cfg))
    assert owned.names == ["daint", "eiger"]  # by default, every cluster of its site

    # what a user sees: exit 2, one line naming the key, no traceback
    token = tmp_path / "token"
    token.write_text(TOKEN)
    token.chmod(0o600)
    config = tmp_path / "gotthard.toml"
    config.write_text(
        'site = "zurich"\ncluster = "daint"\n'
        "[sites.zurich.clusters.daint]\n[sites.zurich.clusters.eiger]\n"
        '[runbooks]\nclusters = ["todi"]\n'
    )
    args = ("--config", str(config), "--token-file", str(token), "--listen", "127.0.0.1:0")
    done = gotthard("runbooks", "serve", *args, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "runbooks.clusters: 'todi' is not a cluster of site 'zurich'" in done.stderr
    assert "Traceback" not in done.stderr
    # every command reading the site file reports it, not only the webhook
    done = gotthard("--config", str(config), "rules", "thresholds", timeout=60)
    assert done.returncode == 2, done.stderr
    assert "runbooks.clusters: 'todi' is not a cluster of site 'zurich'" in done.stderr
    assert "Traceback" not in done.stderr
