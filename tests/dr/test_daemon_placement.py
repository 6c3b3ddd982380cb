"""Daemon (job store, restart, lease, orphans, /metrics) and placement decisions."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gotthard.config import Config
from gotthard.dr import ops
from gotthard.dr.daemon import DrDaemon, JobStoreLocked
from gotthard.dr.metrics import MetricsServer
from gotthard.dr.placement import ServiceState, SiteHealth, decide, propagation_policy
from gotthard.dr.settings import PlacementConfig

from .conftest import GOOD, make_config
from .test_velero_drill import samples

BAD = dict(GOOD, api_up=False)


def test_restart_keeps_jobs_and_does_not_duplicate_slot(k8s, velero, cfg) -> None:
    apis = {"zurich": k8s.api(), "lugano": k8s.api()}
    first = DrDaemon(cfg, api_clients=apis, identity="a")
    sched = first.start_scheduler()
    ids = sorted(j.id for j in sched.get_jobs())
    assert ids == [
        "backup:zurich:daily",
        "bsl:lugano",
        "bsl:zurich",
        "drill:zurich:prod",
        "follow:zurich",
    ]
    job = sched.get_job("backup:zurich:daily")
    assert (job.coalesce, job.max_instances, job.misfire_grace_time) == (True, 1, 600)
    next_run = job.next_run_time
    sched.pause()
    from gotthard.dr.daemon import backup_job

    name = backup_job("zurich", "daily")
    first.stop_scheduler()

    second = DrDaemon(cfg, api_clients=apis, identity="a")
    sched = second.start_scheduler()
    assert sorted(j.id for j in sched.get_jobs()) == ids
    assert sched.get_job("backup:zurich:daily").next_run_time == next_run
    assert backup_job("zurich", "daily") == name  # same slot: 409, a no-op
    second.stop_scheduler()
    assert len(ops.Context(cfg, api_clients=apis).velero("zurich").list("backups")) == 1


def test_two_processes_never_share_a_sqlite_jobstore(cfg) -> None:
    one = DrDaemon(cfg, identity="a")
    one._lock_jobstore()
    with pytest.raises(JobStoreLocked):
        DrDaemon(cfg, identity="b")._lock_jobstore()
    one._unlock_jobstore()


def test_two_daemons_one_lease_only_one_acts(k8s, tmp_path) -> None:
    clock = [1000.0]
    a_set, b_set = make_config(tmp_path / "a"), make_config(tmp_path / "b")
    apis = {"zurich": k8s.api(), "lugano": k8s.api()}
    a = DrDaemon(a_set, api_clients=apis, identity="a", clock=lambda: clock[0])
    b = DrDaemon(b_set, api_clients=apis, identity="b", clock=lambda: clock[0])
    ea, eb = a.elector(), b.elector()
    assert a.step(ea) and not b.step(eb)
    assert a.scheduler is not None and b.scheduler is None
    clock[0] += 10
    assert a.step(ea) and not b.step(eb)  # renewed
    clock[0] += 100  # a stops renewing; the lease expires
    assert b.step(eb) and b.scheduler is not None
    assert not a.step(ea) and a.scheduler is None  # lost: scheduler stopped
    b.stop_scheduler()


def test_a_replica_that_loses_the_lease_stops_exporting_its_placement_judgement(
    k8s, tmp_path
) -> None:
    """The leader judges the sites (gotthard_dr_site_healthy); once it loses the Lease its
    judgement is removed, not frozen: DRSiteUnhealthy follows the new leader only."""
    clock = [1000.0]
    cfg = make_config(tmp_path / "a")
    apis = {"zurich": k8s.api(), "lugano": k8s.api()}
    a = DrDaemon(
        cfg,
        api_clients=apis,
        identity="a",
        clock=lambda: clock[0],
        health_source=lambda site: SiteHealth(site, **(BAD if site == "zurich" else GOOD)),
    )
    b = DrDaemon(
        make_config(tmp_path / "b"), api_clients=apis, identity="b", clock=lambda: clock[0]
    )
    ea, eb = a.elector(), b.elector()
    assert a.step(ea) and not b.step(eb)
    a.evaluate_placement(apply=False)
    assert 'gotthard_dr_site_healthy{site="zurich"} 0.0' in a.metrics.render()
    assert "gotthard_dr_leader 1.0" in a.metrics.render()
    clock[0] += 100  # a stops renewing; b takes over; a learns it lost the Lease
    assert b.step(eb)
    assert not a.step(ea)
    text = a.metrics.render()
    assert "gotthard_dr_leader 0.0" in text
    assert "gotthard_dr_site_healthy{" not in text
    b.stop_scheduler()


RENEWED = "gotthard_dr_lease_renew_timestamp_seconds"
DURATION = "gotthard_dr_lease_duration_seconds"
HOLDER = "gotthard_dr_lease_holder_info"
READ = "gotthard_dr_lease_read_timestamp_seconds"


def lease_samples(daemon: DrDaemon) -> dict[tuple[str, ...], float]:
    """The ``gotthard_dr_lease_*`` samples of *daemon*: (name, site[, holder]) -> value."""
    return {
        (s.name, s.labels["site"], *[s.labels[k] for k in ("holder",) if k in s.labels]): s.value
        for family in text_string_to_metric_families(daemon.metrics.render())
        for s in family.samples
        if s.name.startswith("gotthard_dr_lease_")
    }


def lease_seen(
    site: str, renewed: float, holder: str, read: float | None = None
) -> dict[tuple[str, ...], float]:
    """What a replica at *site* exports having read a 30 s Lease of *holder* at *read*
    (default: when it was renewed)."""
    return {
        (RENEWED, site): renewed,
        (DURATION, site): 30.0,
        (HOLDER, site, holder): 1.0,
        (READ, site): renewed if read is None else read,
    }


def test_every_replica_exports_the_lease_each_round(k8s, tmp_path) -> None:
    """Leader and follower export the Lease's renew time, duration and holder every round,
    labelled with their own site, and when they read it; a new holder replaces the old
    holder's series; a round that cannot read the Lease keeps the last values, read time
    included (DRNoLeader judges only a fresh read)."""
    clock = [1000.0]
    lease = {"site": "zurich", "duration_seconds": 30}
    a_cfg = make_config(tmp_path / "a", lease=lease)
    b_cfg = make_config(tmp_path / "b", lease=lease).model_copy(update={"site": "lugano"})
    apis = {"zurich": k8s.api(), "lugano": k8s.api()}
    a = DrDaemon(a_cfg, api_clients=apis, identity="a", clock=lambda: clock[0])
    b = DrDaemon(b_cfg, api_clients=apis, identity="b", clock=lambda: clock[0])
    ea, eb = a.elector(), b.elector()
    assert lease_samples(b) == {}  # nothing read yet: nothing exported
    assert a.step(ea) and not b.step(eb)
    assert lease_samples(a) == lease_seen("zurich", 1000.0, "a")  # written
    assert lease_samples(b) == lease_seen("lugano", 1000.0, "a")  # read
    clock[0] += 10
    assert a.step(ea) and not b.step(eb)
    assert lease_samples(a) == lease_seen("zurich", 1010.0, "a")
    assert lease_samples(b) == lease_seen("lugano", 1010.0, "a")

    # renewed again, but the follower's round cannot read it: it keeps what it read last
    clock[0] += 10
    assert a.step(ea)
    k8s.fault("GET", "/apis/coordination.k8s.io/v1/namespaces/gotthard/leases", 500)
    assert not b.step(eb)
    assert lease_samples(b) == lease_seen("lugano", 1010.0, "a")

    clock[0] += 100  # a stops renewing; b takes the Lease over, a reads it
    assert b.step(eb)
    clock[0] += 1
    assert not a.step(ea)
    assert lease_samples(a) == lease_seen("zurich", 1120.0, "b", read=1121.0)  # no "a"
    assert lease_samples(b) == lease_seen("lugano", 1120.0, "b")
    # both name the one Lease they read, on Zurich's cluster (the DRNoLeader runbook's
    # kubectl get lease)
    where = 'lease_name="gotthard-dr-daemon",lease_namespace="gotthard",lease_site="zurich"'
    assert f'{HOLDER}{{holder="b",{where},site="lugano"}} 1.0' in b.metrics.render()
    b.stop_scheduler()


def test_crash_leaves_orphan_that_restart_cleans_and_marks_failed(k8s, velero, cfg) -> None:
    apis = {"zurich": k8s.api(), "lugano": k8s.api()}
    ctx = ops.Context(cfg, api_clients=apis)
    # what a killed drill leaves behind: the labelled scratch namespace and a Restore
    ops.create_scratch_namespace(ctx, "zurich", "drill-prod-20260301040000", "prod", "zurich")
    daemon = DrDaemon(cfg, api_clients=apis, identity="a")
    assert daemon.cleanup_orphans() == ["drill-prod-20260301040000"]
    assert not k8s.emulator.namespaces
    text = daemon.metrics.render()
    assert 'gotthard_dr_drill_last_success{namespace="prod",site="zurich"} 0.0' in text


def test_metrics_endpoint_parses(cfg) -> None:
    daemon = DrDaemon(cfg, identity="a")
    daemon.metrics.drill_rto.labels("zurich", "prod").set(12.5)
    daemon.metrics.backups.labels("zurich", "daily", "Completed").inc()
    server = MetricsServer(daemon.metrics, "127.0.0.1", 0, daemon.health).start()
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics").read().decode()
        health = json.load(urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz"))
    finally:
        server.stop()
    names = {f.name for f in text_string_to_metric_families(body)}
    assert {"gotthard_dr_drill_rto_seconds", "gotthard_dr_backups", "gotthard_dr_leader"} <= names
    assert "gotthard_dr_placement" not in names  # nothing placed yet: no HELP/TYPE either
    assert "gotthard_dr_drill_rto_seconds" in body and health == {
        "ok": True,
        "leader": False,
        "identity": "a",
    }


def api_placement(
    tmp_path: Path,
    *,
    deployment: str | None = None,
    namespace: str | None = None,
    **placement: object,
) -> Config:
    """Settings whose placement moves one service, ``api`` (Deployments, or the one named
    *deployment*) with zurich as its primary site; *placement* adds placement keys."""
    resource = {"apiVersion": "apps/v1", "kind": "Deployment"}
    if deployment is not None:
        resource["name"] = deployment
    service: dict[str, object] = {"name": "api", "primary_site": "zurich", "resources": [resource]}
    if namespace is not None:
        service["namespace"] = namespace
    return make_config(tmp_path, placement={"services": [service], **placement})


def health(zurich: dict, lugano: dict) -> dict[str, SiteHealth]:
    return {"zurich": SiteHealth("zurich", **zurich), "lugano": SiteHealth("lugano", **lugano)}


@pytest.mark.parametrize(
    ("rounds", "expected"),
    [
        ([(GOOD, GOOD)], ["zurich"]),
        ([(BAD, GOOD), (GOOD, GOOD), (BAD, GOOD), (BAD, GOOD)], ["zurich"] * 4),  # blips
        ([(BAD, GOOD)] * 3, ["zurich", "zurich", "lugano"]),  # sustained: failover on 3rd
        ([(BAD, BAD)] * 4, ["zurich"] * 4),  # no healthy fallback: stay
    ],
)
def test_failover_table(tmp_path, rounds, expected) -> None:
    cfg = api_placement(tmp_path, deployment="api", failover_after=3, failback_cooldown_seconds=600)
    p = cfg.dr.placement
    state: dict[str, ServiceState] = {}
    got = []
    for i, (z, lu) in enumerate(rounds):
        state, decisions = decide(p.services, health(z, lu), state, 60.0 * i, p)
        got.append(decisions[0].site)
    assert got == expected


def test_failback_only_after_cooldown(tmp_path) -> None:
    cfg = api_placement(tmp_path, failback_cooldown_seconds=600)
    p = cfg.dr.placement
    state = {"api": ServiceState("lugano", 0, moved_at=1000.0)}
    state, d = decide(p.services, health(GOOD, GOOD), state, 1300.0, p)
    assert d[0].site == "lugano" and "cool-down" in d[0].reason
    state, d = decide(p.services, health(GOOD, GOOD), state, 1600.0, p)
    assert d[0].site == "zurich" and d[0].changed


def test_override_wins(tmp_path) -> None:
    cfg = api_placement(tmp_path, overrides={"api": "lugano"})
    p: PlacementConfig = cfg.dr.placement
    _, d = decide(p.services, health(GOOD, BAD), {}, 0.0, p)
    assert d[0].site == "lugano" and d[0].reason == "manual override"
    policy = propagation_policy(cfg.site_model, p.services[0], "lugano")
    assert policy["spec"]["placement"]["clusterAffinity"] == {"clusterNames": ["lug-a"]}
    assert policy["spec"]["placement"]["spreadConstraints"] == [
        {"spreadByField": "cluster", "minGroups": 1, "maxGroups": 1}
    ]


def test_apply_placement_to_emulated_karmada(k8s, tmp_path) -> None:
    from gotthard.dr import api

    cfg = api_placement(tmp_path, deployment="api", namespace="prod")
    assert (
        api.request_failover(cfg, "api", "lugano", reason="test", api_client=k8s.api())
        == "prod/gotthard-dr-api"
    )
    api.request_failover(cfg, "api", "zurich", reason="back", api_client=k8s.api())
    from kubernetes import client

    obj = client.CustomObjectsApi(k8s.api()).get_namespaced_custom_object(
        "policy.karmada.io", "v1alpha1", "prod", "propagationpolicies", "gotthard-dr-api"
    )
    assert obj["spec"]["placement"]["clusterAffinity"]["clusterNames"] == ["zrh-a"]


POLICY_PATH = "/apis/policy.karmada.io/v1alpha1/namespaces/prod/propagationpolicies/gotthard-dr-api"


def _policy(k8s) -> dict:
    from kubernetes import client

    return client.CustomObjectsApi(k8s.api()).get_namespaced_custom_object(
        "policy.karmada.io", "v1alpha1", "prod", "propagationpolicies", "gotthard-dr-api"
    )


def test_apply_replaces_the_spec_with_the_resource_version_it_read(k8s, tmp_path) -> None:
    """Get, then PUT with the resourceVersion: fields a placement no longer sets go (a
    merge patch would keep a spread's replicaScheduling after a switch to failover),
    others' labels stay, an unchanged policy is not written, and a conflict is retried."""
    from kubernetes import client

    from gotthard.dr.placement import Karmada

    cfg = api_placement(tmp_path, deployment="api", namespace="prod")
    svc = cfg.dr.placement.services[0]
    spread = svc.model_copy(update={"mode": "spread"})
    karmada = Karmada(k8s.api())
    both = propagation_policy(cfg.site_model, spread, "lugano", "zurich")
    assert karmada.apply(both) == "created"
    first = _policy(k8s)
    assert first["spec"]["placement"]["replicaScheduling"]["replicaSchedulingType"] == "Divided"
    first["metadata"]["labels"]["team"] = "inference"  # someone else's label
    client.CustomObjectsApi(k8s.api()).replace_namespaced_custom_object(
        "policy.karmada.io", "v1alpha1", "prod", "propagationpolicies", "gotthard-dr-api", first
    )
    version = _policy(k8s)["metadata"]["resourceVersion"]
    assert karmada.apply(both) == "unchanged"
    assert _policy(k8s)["metadata"]["resourceVersion"] == version

    # another writer wins the first PUT: the policy is read again and replaced
    k8s.fault("PUT", POLICY_PATH, status=409, times=1)
    assert karmada.apply(propagation_policy(cfg.site_model, svc, "lugano")) == "updated"
    now = _policy(k8s)
    assert "replicaScheduling" not in now["spec"]["placement"]
    assert now["spec"]["placement"]["clusterAffinity"] == {"clusterNames": ["lug-a"]}
    assert now["metadata"]["labels"] == {
        "team": "inference",
        "gotthard.io/managed-by": "gotthard",
        "gotthard.io/placement-mode": "failover",
        "gotthard.io/site": "lugano",
    }
    assert int(now["metadata"]["resourceVersion"]) > int(version)

    k8s.fault("PUT", POLICY_PATH, status=409, times=None)
    try:
        from gotthard.kube import KubeError

        with pytest.raises(KubeError, match="409 Conflict"):
            karmada.apply(propagation_policy(cfg.site_model, svc, "zurich"))
    finally:
        k8s.clear_faults()


def _failed_over(daemon: DrDaemon) -> dict[tuple[str, str, str], float]:
    """``gotthard_dr_service_failed_over``: (service, primary_site, site) -> value."""
    return {
        (labels["service"], labels["primary_site"], labels["site"]): value
        for (name, items), value in samples(daemon.ctx).items()
        if name == "gotthard_dr_service_failed_over"
        for labels in [dict(items)]
    }


def test_daemon_places_both_modes_and_exposes_failed_over(k8s, tmp_path) -> None:
    """A failover and a spread service through one outage of zurich: the policies on
    Karmada and ``gotthard_dr_service_failed_over`` (stale series removed)."""
    resource = {"apiVersion": "apps/v1", "kind": "Deployment"}
    cfg = make_config(
        tmp_path,
        placement={
            "failover_after": 2,
            "failback_cooldown_seconds": 120,
            "state_file": str(tmp_path / "placement.json"),
            "services": [
                {
                    "name": "api",
                    "namespace": "prod",
                    "primary_site": "zurich",
                    "resources": [resource],
                },
                {
                    "name": "web",
                    "namespace": "prod",
                    "primary_site": "zurich",
                    "mode": "spread",
                    "resources": [resource],
                },
            ],
        },
    )
    zurich_up = [True]
    clock = [0.0]

    def source(site: str) -> SiteHealth:
        return SiteHealth(site, **(GOOD if site != "zurich" or zurich_up[0] else BAD))

    daemon = DrDaemon(
        cfg,
        karmada_api=k8s.api(),
        identity="a",
        clock=lambda: clock[0],
        health_source=source,
    )

    def evaluate() -> dict[str, list[str]]:
        daemon.evaluate_placement(apply=True)
        clock[0] += 60
        from kubernetes import client

        api = client.CustomObjectsApi(k8s.api())
        return {
            name: api.get_namespaced_custom_object(
                "policy.karmada.io",
                "v1alpha1",
                "prod",
                "propagationpolicies",
                f"gotthard-dr-{name}",
            )["spec"]["placement"]["clusterAffinity"]["clusterNames"]
            for name in ("api", "web")
        }

    home = {"api": ["zrh-a"], "web": ["lug-a", "zrh-a"]}
    assert evaluate() == home
    assert _failed_over(daemon) == {("api", "zurich", "zurich"): 0, ("web", "zurich", "zurich"): 0}
    zurich_up[0] = False
    assert evaluate() == home
    assert evaluate() == {"api": ["lug-a"], "web": ["lug-a"]}
    assert _failed_over(daemon) == {("api", "zurich", "lugano"): 1, ("web", "zurich", "lugano"): 1}
    saved = json.loads(Path(cfg.dr.placement.state_file).read_text())
    assert (saved["api"]["site"], saved["web"]["sites"]) == ("lugano", ["lugano"])
    zurich_up[0] = True
    assert evaluate() == {"api": ["lug-a"], "web": ["lug-a"]}  # cool-down: 0 of 120 s
    evaluate()
    assert evaluate() == home
    assert _failed_over(daemon) == {("api", "zurich", "zurich"): 0, ("web", "zurich", "zurich"): 0}


def test_site_without_data_exports_unknown_not_unhealthy(k8s, tmp_path) -> None:
    """Zurich's Prometheus has no answer: ``gotthard_dr_site_healthy`` has no Zurich
    series (DRSiteUnhealthy reads 0 as evidence) and ``_health_unknown`` says why; evidence
    of a failure brings the 0 back."""
    cfg = api_placement(tmp_path, deployment="api", namespace="prod")
    zurich = [dict(GOOD, slurm_up=None)]
    daemon = DrDaemon(
        cfg,
        karmada_api=k8s.api(),
        identity="a",
        health_source=lambda site: SiteHealth(site, **(zurich[0] if site == "zurich" else GOOD)),
    )

    def sample(name: str, site: str) -> float | None:
        return daemon.metrics.registry.get_sample_value(name, {"site": site})

    daemon.evaluate_placement(apply=False)
    assert sample("gotthard_dr_site_healthy", "zurich") is None
    assert sample("gotthard_dr_site_health_unknown", "zurich") == 1
    assert sample("gotthard_dr_site_healthy", "lugano") == 1
    assert sample("gotthard_dr_site_health_unknown", "lugano") == 0
    zurich[0] = dict(GOOD, slurm_up=False)
    daemon.evaluate_placement(apply=False)
    assert sample("gotthard_dr_site_healthy", "zurich") == 0
    assert sample("gotthard_dr_site_health_unknown", "zurich") == 0
