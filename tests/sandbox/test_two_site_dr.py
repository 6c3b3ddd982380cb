"""Cross-site DR on the two-site sandbox, end to end, as a user sees it.

* a drill backs up in Zurich and restores into a scratch namespace in Lugano through the
  shared object store, then cleans up; its report times every phase;
* Zurich made unhealthy for real (slurmctld stopped, its API server's health down, both
  seen through Zurich's Prometheus) fails the placed services over to Lugano on the
  emulated Karmada API; the failover alert fires and the runbook webhook audits it;
* Zurich back: no failback before the cool-down, failback after it;
* a health signal alternating every evaluation never moves a service.

The measured times are printed (``pytest -s`` shows them).
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from gotthard import config
from gotthard.config import Config
from gotthard.dr.placement import KARMADA_GROUP, KARMADA_VERSION, policy_name
from gotthard.dr.settings import PlacedService
from gotthard.kube import client_for
from gotthard.sandbox.sites import MultiSiteSandbox
from gotthard.site import KubeAccess
from tests.sandbox.conftest import TWO_SITES
from tests.support.cli import gotthard
from tests.support.kube import deployment_manifest
from tests.support.monitoring import get_json, instant
from tests.support.wait import wait_until

pytestmark = [pytest.mark.slurm, TWO_SITES]

ALERT = "DRServiceFailedOver"


# --------------------------------------------------------------------------- helpers


def say(what: str) -> None:
    """One measured figure in the test output (``pytest -s``)."""
    print(f"[two-site dr] {what}", flush=True)


def site_config(sites: MultiSiteSandbox, site: str) -> Config:
    return config.load(sites.config_file(site))


def kube(kubeconfig: Path | str, what: str) -> client.ApiClient:
    return client_for(KubeAccess(kubeconfig=str(kubeconfig)), what)


def set_api_health(sites: MultiSiteSandbox, site: str, healthy: bool) -> None:
    """``PUT /_emulator/health``: the site's emulated API server looks up or down to
    Prometheus (``/livez``, ``/readyz``, ``/metrics``)."""
    request = urllib.request.Request(
        f"{sites.kubeapi_url(site)}/_emulator/health",
        data=json.dumps({"healthy": healthy}).encode(),
        headers={"Content-Type": "application/json"},
        method="PUT",
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200


def scalar(prometheus: str, expr: str) -> float | None:
    result = instant(prometheus, expr)
    return float(result[0]["value"][1]) if result else None


class Placement:
    """The placed services of the sandbox and their PropagationPolicies on Karmada."""

    def __init__(self, sites: MultiSiteSandbox) -> None:
        self.cfg = site_config(sites, "zurich")
        self.settings = self.cfg.dr
        self.karmada = client.CustomObjectsApi(kube(sites.karmada_kubeconfig, "karmada"))
        p = self.settings.placement
        assert p.enabled, "the sandbox's DR daemons run without placement"
        self.interval = p.interval_seconds
        self.failover_after = p.failover_after
        self.cooldown = p.failback_cooldown_seconds
        self.failover = self._service("failover")
        self.spread = self._service("spread")

    def _service(self, mode: str) -> PlacedService:
        """The first *mode* service whose primary site is Zurich."""
        found = [
            s
            for s in self.settings.placement.services
            if s.mode == mode and s.primary_site == "zurich"
        ]
        assert found, f"the sandbox places no {mode}-mode service with Zurich as primary"
        return found[0]

    def members(self, *sites: str) -> set[str]:
        model = self.cfg.site_model
        return {m for site in sites for m in model[site].karmada_members or [site]}

    def clusters(self, svc: PlacedService) -> set[str]:
        """clusterNames of the service's PropagationPolicy (empty: no policy yet)."""
        try:
            obj = self.karmada.get_namespaced_custom_object(
                KARMADA_GROUP,
                KARMADA_VERSION,
                svc.namespace,
                "propagationpolicies",
                policy_name(svc.name),
            )
        except client.ApiException as err:
            if err.status == 404:
                return set()
            raise
        placement = obj["spec"]["placement"]
        return set(placement["clusterAffinity"]["clusterNames"])

    def now(self) -> dict[str, set[str]]:
        return {svc.name: self.clusters(svc) for svc in (self.failover, self.spread)}

    def wait(self, failover: tuple[str, ...], spread: tuple[str, ...], timeout: float) -> float:
        """Wait until the failover service runs on *failover* and the spread service on
        *spread*; the seconds it took."""
        started = time.monotonic()
        want = {
            self.failover.name: self.members(*failover),
            self.spread.name: self.members(*spread),
        }
        wait_until(
            lambda: self.now() == want,
            timeout,
            lambda: f"placement {want}, have {self.now()}",
            interval=0.2,
        )
        return time.monotonic() - started


@pytest.fixture(scope="module")
def placed(two_sites: MultiSiteSandbox) -> Placement:
    return Placement(two_sites)


@contextmanager
def zurich_down(sites: MultiSiteSandbox) -> Iterator[None]:
    """Zurich unhealthy: its slurmctld stopped and its API server's health down. Leaving
    the block always brings both back, so the session's sandbox stays usable."""
    zurich = sites.site("zurich")
    zurich.stop_controller()
    try:
        set_api_health(sites, "zurich", False)
        yield
    finally:
        try:
            set_api_health(sites, "zurich", True)
        finally:
            zurich.start_controller()


def zurich_health(sites: MultiSiteSandbox) -> tuple[float | None, float | None]:
    """(gotthard_slurm_up, up of the apiserver job) as Zurich's Prometheus has them now."""
    prometheus = sites.prometheus_url("zurich")
    return scalar(prometheus, "min(gotthard_slurm_up)"), scalar(
        prometheus, 'min(up{job="apiserver"})'
    )


def firing(sites: MultiSiteSandbox, service: str) -> list[dict[str, Any]]:
    """Firing DRServiceFailedOver alerts of *service* on either site's Prometheus."""
    found = []
    for site in ("zurich", "lugano"):
        alerts = get_json(f"{sites.prometheus_url(site)}/api/v1/alerts")["data"]["alerts"]
        found += [
            a
            for a in alerts
            if a["labels"].get("alertname") == ALERT
            and a["labels"].get("service") == service
            and a["state"] == "firing"
        ]
    return found


def assert_one_leader_and_no_leaderless_site(sites: MultiSiteSandbox) -> None:
    """One replica leads; the follower's site Prometheus has its replica's reading of the
    Lease, held by the leader; DRNoLeader is neither pending nor firing at either site nor
    on the global view (it used to fire at the follower's site, whose replica's
    ``gotthard_dr_leader`` is 0, and on the global view, which federates none), and the
    global view, which sees both replicas' ``gotthard_dr_leader``, has no
    DRLeaderAtBothSites."""
    health = {site: get_json(f"{sites.dr_url(site)}/healthz") for site in ("zurich", "lugano")}
    leaders = [site for site, state in health.items() if state["leader"]]
    assert len(leaders) == 1, health
    follower = next(site for site in health if site not in leaders)
    holders = instant(sites.prometheus_url(follower), "gotthard_dr_lease_holder_info")
    assert holders, f"no gotthard_dr_lease_holder_info at {follower}"
    assert {h["metric"]["holder"] for h in holders} == {health[leaders[0]]["identity"]}, holders
    for prometheus in [*map(sites.prometheus_url, health), sites.global_url]:
        alerts = get_json(f"{prometheus}/api/v1/alerts")["data"]["alerts"]
        names = ("DRNoLeader", "DRLeaderAtBothSites")
        assert not [a for a in alerts if a["labels"].get("alertname") in names], alerts


def audited_placements(sites: MultiSiteSandbox) -> list[dict[str, Any]]:
    """Every ``dr.record_placement`` record of both sites' runbook audit logs, with the
    service, primary_site and site it carries merged in from its targets."""
    records = []
    for site in ("zurich", "lugano"):
        path = Path(sites.audit_log(site))
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        for line in lines:
            record = json.loads(line)
            if record.get("action") == "dr.record_placement":
                records.append({**record, **(record.get("targets") or {}), "webhook": site})
    return records


# --------------------------------------------------------------------------- the drill


def deployments(api: client.ApiClient, namespace: str) -> list[str]:
    found = client.CustomObjectsApi(api).list_namespaced_custom_object(
        "apps", "v1", namespace, "deployments"
    )["items"]
    return sorted(d["metadata"]["name"] for d in found if d["metadata"]["namespace"] == namespace)


def add_zurich_only_deployment(api: client.ApiClient, namespace: str) -> None:
    """A Deployment that exists in Zurich only (the simulated Deployment controller makes
    it ready): found in Lugano's scratch namespace, it can only have come through the
    object store."""
    body = deployment_manifest("worker", namespace, 2)
    try:
        client.AppsV1Api(api).create_namespaced_deployment(namespace, body)
    except client.ApiException as err:
        assert err.status == 409, err


def clear_of_minute_boundary() -> None:
    """Scratch namespaces are named to the second, and the sandbox's own drill runs at
    every minute's start: keep a drill started here out of that second."""
    second = time.time() % 60
    if second > 57 or second < 2:
        time.sleep((62 - second) % 60)


def test_cross_site_drill_backs_up_in_zurich_and_restores_in_lugano(
    two_sites: MultiSiteSandbox, tmp_path: Path
) -> None:
    cfg = site_config(two_sites, "zurich")
    settings = cfg.dr
    app = next(d.namespace for d in settings.drills if d.site == "zurich")  # the sandbox's
    velero_ns = {name: site.velero_namespace for name, site in cfg.site_model.items()}
    zurich = kube(two_sites.kubeconfig("zurich"), "zurich")
    lugano = kube(two_sites.kubeconfig("lugano"), "lugano")
    add_zurich_only_deployment(zurich, app)
    in_zurich = deployments(zurich, app)
    assert "worker" in in_zurich and "worker" not in deployments(lugano, app)
    markdown = tmp_path / "drill.md"

    clear_of_minute_boundary()
    started = time.monotonic()
    result = gotthard(
        "--config",
        str(two_sites.config_file("zurich")),
        "dr",
        "drill",
        "--site",
        "zurich",
        "--target-site",
        "lugano",
        "--namespace",
        app,
        "--fresh",
        "--report",
        str(markdown),
        without=("GOTTHARD_CONFIG",),
        timeout=120,
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["verified"] is True and report["error"] == "", report
    assert (report["site"], report["target_site"]) == ("zurich", "lugano")

    phases = {p["name"]: p for p in report["phases"]}
    assert [p["name"] for p in report["phases"]] == ["backup", "restore", "verify", "cleanup"]
    for name, phase in phases.items():
        assert phase["ok"] is True, (name, phase)
        assert 0 <= phase["duration_seconds"] <= elapsed, (name, phase)
        assert phase["started"], (name, phase)
    timings = ", ".join(f"{n} {p['duration_seconds']:.2f}s" for n, p in phases.items())
    say(f"cross-site drill zurich -> lugano: command {elapsed:.1f}s; phases {timings}")
    say(f"drill RTO {report['rto_seconds']:.2f}s, RPO {report['rpo_seconds']:.2f}s")
    assert 0 < report["rto_seconds"] <= elapsed
    assert report["rpo_seconds"] >= 0
    # judged against the recovery tier of the configured drill
    drill = next(d for d in settings.drills if d.site == "zurich" and d.namespace == app)
    assert report["tier"] == settings.drill_tier(drill)
    assert {o["objective"]: o["met"] for o in report["objectives"]} == (
        {"rpo": True, "rto": True} if report["tier"] else {}
    ), report["objectives"]

    # backed up in Zurich, into the shared object store
    backup = report["backup"]
    made = client.CustomObjectsApi(zurich).get_namespaced_custom_object(
        "velero.io", "v1", velero_ns["zurich"], "backups", backup
    )
    assert made["spec"]["includedNamespaces"] == [app]
    assert made["status"]["phase"] == "Completed"
    assert (Path(two_sites.object_store) / "backups" / backup / "velero-backup.json").is_file()

    # restored in Lugano from that backup into the scratch namespace, with Zurich's
    # Deployments (the Zurich-only one too), verified, and the scratch namespace gone
    scratch = report["scratch_namespace"]
    restore = client.CustomObjectsApi(lugano).get_namespaced_custom_object(
        "velero.io", "v1", velero_ns["lugano"], "restores", report["restore"]
    )
    assert restore["spec"]["backupName"] == backup
    assert restore["spec"]["namespaceMapping"] == {app: scratch}
    assert restore["status"]["phase"] == "Completed"
    checks = {c["name"]: c for c in report["checks"]}
    found = checks["deployments.apps/v1"]
    assert found["ok"] and found["detail"].startswith(f"{len(in_zurich)} found"), found
    assert report["cleaned"] is True
    lugano_namespaces = {ns.metadata.name for ns in client.CoreV1Api(lugano).list_namespace().items}
    assert scratch not in lugano_namespaces
    zurich_namespaces = {ns.metadata.name for ns in client.CoreV1Api(zurich).list_namespace().items}
    assert scratch not in zurich_namespaces and app in zurich_namespaces

    text = markdown.read_text(encoding="utf-8")
    assert "zurich → lugano" in text and "verified" in text
    for name, phase in phases.items():
        row = f"| {name} | {phase['started']} | {phase['duration_seconds']:.2f} s | yes |"
        assert row in text, f"phase {name} missing from the Markdown report:\n{text}"


# --------------------------------------------------------------------------- placement


def test_failover_to_lugano_and_failback_after_cooldown(
    two_sites: MultiSiteSandbox, placed: Placement
) -> None:
    steady = placed.wait(("zurich",), ("zurich", "lugano"), timeout=placed.cooldown + 60)
    say(
        f"placement: interval {placed.interval:g}s, failover_after {placed.failover_after},"
        f" cool-down {placed.cooldown:g}s (steady after {steady:.1f}s)"
    )
    fo, sp = placed.failover.name, placed.spread.name
    with zurich_down(two_sites):
        down_at = time.monotonic()
        placed.wait(("lugano",), ("lugano",), timeout=60 + 3 * placed.interval)
        failed_over_at = time.monotonic()
        took = failed_over_at - down_at
        say(f"failover: both services in Lugano {took:.1f}s after Zurich went down")
        # hysteresis: failover_after bad evaluations, the first of which may come at once
        assert failed_over_at - down_at >= (placed.failover_after - 1) * placed.interval - 0.5
        # ... judged on what Zurich's own Prometheus measures
        wait_until(
            lambda: zurich_health(two_sites) == (0.0, 0.0),
            60,
            lambda: (
                f"Zurich's Prometheus to see Slurm and the API down: {zurich_health(two_sites)}"
            ),
            interval=0.2,
        )
        say(
            "Zurich's Prometheus has gotthard_slurm_up=0 and up{job=apiserver}=0"
            f" {time.monotonic() - down_at:.1f}s after Zurich went down"
        )

        for svc in (fo, sp):
            alerts = wait_until(partial(firing, two_sites, svc), 150, f"{ALERT} for {svc} to fire")
            labels = alerts[0]["labels"]
            assert (labels["primary_site"], labels["site"]) == ("zurich", "lugano"), labels
        say(f"{ALERT} firing for both {time.monotonic() - failed_over_at:.1f}s after the failover")

        def audited() -> list[dict[str, Any]]:
            return [r for r in audited_placements(two_sites) if r.get("service") == fo]

        records = wait_until(audited, 60, f"a webhook to audit dr.record_placement of {fo}")
        say(
            f"dr.record_placement audited by the {records[0]['webhook']} webhook"
            f" {time.monotonic() - failed_over_at:.1f}s after the failover"
        )
        assert (records[0]["primary_site"], records[0]["site"]) == ("zurich", "lugano")
        assert (records[0]["alertname"], records[0]["result"]) == (ALERT, "ok"), records[0]
        # the Alertmanagers of both sites receive the alert, one webhook records it
        time.sleep(5)
        done = [r for r in audited() if r["result"] == "ok"]
        assert len(done) == 1, done
        assert placed.now() == {fo: placed.members("lugano"), sp: placed.members("lugano")}

        # Slurm first: Zurich stays unhealthy while its API is down, so the moment its
        # Prometheus sees the API up again is when Zurich is healthy again
        two_sites.site("zurich").start_controller()
        wait_until(
            lambda: zurich_health(two_sites)[0] == 1.0,
            60,
            lambda: f"Zurich's Prometheus to see Slurm up: {zurich_health(two_sites)}",
            interval=0.2,
        )
        back_at = time.monotonic()
        set_api_health(two_sites, "zurich", True)
        wait_until(
            lambda: zurich_health(two_sites) == (1.0, 1.0),
            60,
            lambda: f"Zurich's Prometheus to see Zurich up: {zurich_health(two_sites)}",
            interval=0.1,
        )
        seen_up_at = time.monotonic()
        say(f"Zurich's Prometheus has its API up {seen_up_at - back_at:.1f}s after it came back")
        # healthy for two evaluations and more, but not yet for the cool-down: no failback
        time.sleep(2 * placed.interval)
        healthy_for = time.monotonic() - seen_up_at
        assert healthy_for < placed.cooldown, f"cool-down {placed.cooldown:g}s: too short to test"
        assert placed.now() == {fo: placed.members("lugano"), sp: placed.members("lugano")}
        say(f"still in Lugano with Zurich healthy for {healthy_for:.1f}s")

        placed.wait(("zurich",), ("zurich", "lugano"), timeout=placed.cooldown + 60)
        failback = time.monotonic() - seen_up_at
        say(
            f"failback to Zurich, spread over both sites again, {failback:.1f}s after Zurich's"
            f" Prometheus saw it healthy (cool-down {placed.cooldown:g}s)"
        )
        assert failback >= placed.cooldown - 1
        wait_until(
            lambda: not firing(two_sites, fo) and not firing(two_sites, sp),
            30,
            f"{ALERT} to resolve",
        )
        say(f"{ALERT} resolved {time.monotonic() - seen_up_at - failback:.1f}s after the failback")
        # minutes after start-up: long past the 1m `for` of DRNoLeader
        assert_one_leader_and_no_leaderless_site(two_sites)


class Evaluations:
    """The leader's placement evaluations, as its state file (``[dr.placement] state_file``,
    rewritten after every evaluation) records them: when, and each site's bad streak."""

    def __init__(self, sites: MultiSiteSandbox, service: str) -> None:
        self.files = [
            Path(site_config(sites, site).dr.placement.state_file) for site in sites.sites
        ]
        self.service = service
        self._seen = {path: self._mtime(path) for path in self.files}
        #: (when written, bad streak per site) of every evaluation seen
        self.log: list[tuple[float, dict[str, int]]] = []

    @staticmethod
    def _mtime(path: Path) -> float | None:
        try:
            return path.stat().st_mtime
        except FileNotFoundError:
            return None

    def poll(self) -> None:
        for path in self.files:
            mtime = self._mtime(path)
            if mtime is None or mtime == self._seen[path]:
                continue
            self._seen[path] = mtime
            try:
                state = json.loads(path.read_text(encoding="utf-8"))[self.service]
            except (OSError, ValueError, KeyError):
                continue  # being replaced: the next poll reads it
            self.log.append((mtime, dict(state.get("bad_streaks") or {})))

    def watch(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.poll()
            time.sleep(0.02)


def alternate(
    sites: MultiSiteSandbox, site: str, placed: Placement, evaluations: Evaluations
) -> tuple[list[int], list[dict[str, set[str]]]]:
    """Switch *site*'s API health down and up again right after each placement evaluation
    (its API server is scraped every second, evaluations run every two), for
    ``2 * failover_after + 2`` evaluations. Returns the daemon's bad streak of *site* at
    each evaluation and the placement after each."""
    rounds = 2 * placed.failover_after + 2
    evaluations.poll()
    first = len(evaluations.log)
    seen: list[dict[str, set[str]]] = []
    try:
        for i in range(rounds):
            wait_until(
                lambda n=first + i: evaluations.poll() or len(evaluations.log) > n,
                3 * placed.interval,
                lambda: "no placement evaluation written",
                interval=0.02,
            )
            set_api_health(sites, site, i % 2 == 1)
            seen.append(placed.now())
        wait_until(
            lambda: evaluations.poll() or len(evaluations.log) > first + rounds,
            3 * placed.interval,
            lambda: "no placement evaluation written",
            interval=0.02,
        )
    finally:
        set_api_health(sites, site, True)
    seen.append(placed.now())
    streaks = [bad.get(site, 0) for _, bad in evaluations.log[first + 1 : first + rounds + 1]]
    return streaks, seen


def test_alternating_health_never_moves_a_service(
    two_sites: MultiSiteSandbox, placed: Placement
) -> None:
    """The daemon sees Zurich bad, good, bad, good...: its bad streak never reaches
    ``failover_after``, so neither service moves. An attempt in which a switch came too late
    for an evaluation (two bad in a row on a busy machine: a legitimate failover) is
    repeated after the services are home again."""
    site = "zurich"
    home = placed.members("zurich"), placed.members("zurich", "lugano")
    for attempt in range(1, 4):
        placed.wait(("zurich",), ("zurich", "lugano"), timeout=placed.cooldown + 60)
        evaluations = Evaluations(two_sites, placed.spread.name)
        streaks, seen = alternate(two_sites, site, placed, evaluations)
        if streaks.count(1) >= placed.failover_after and max(streaks) < placed.failover_after:
            break
        say(f"attempt {attempt}: the daemon's bad streaks of {site} were {streaks}")
    else:
        pytest.fail(f"{site}'s health as the daemon saw it did not alternate in 3 attempts")
    say(
        f"{site}'s API health alternated {len(streaks)} times, once per evaluation; the"
        f" daemon's bad streaks of {site}: {streaks}"
    )
    want = {placed.failover.name: home[0], placed.spread.name: home[1]}
    assert all(s == want for s in seen), seen
