"""The game day: on its own two-site sandbox, the plumbing fails as it does on a real
site, then one real fault per area; the alerts and the runbook webhooks must tell them
apart.

The script (``pytest -s`` prints each step and the timeline):

1. steady state;
2. plumbing, overlapped to save time:
   * Zurich's exporters (Slurm, and nid001's node exporter) stay down for longer than
     every 60-second ``for`` (a slow restart);
   * Lugano's nid001 is drained for maintenance with an operator's reason, its slurmd
     stopped and its node exporter down (the node reboots);
   * Lugano's Prometheus restarts;
   * the global view cannot reach Lugano's ``/federate`` for 90 s;
   * Lugano's primary slurmctld stops: the backup takes over after SlurmctldTimeout; the
     primary comes back and takes control again; Lugano's Slurm exporter restarts;
   * then a quiet window as long as the longest ``for`` plus a margin;
3. one real fault per area: a GPU of Zurich's nid001 lost (the fake NVML answers
   GPU_IS_LOST), the health_check of Lugano's Lustre OSS NOT HEALTHY, and Zurich's backups
   PartiallyFailed (the schedule's pre hook cannot run in a database pod that is not
   running); each is repaired once it has paged (and, for the GPU, once the node is
   drained), and the run waits until each alert resolves.

Asserted on every Prometheus' ``ALERTS`` (the whole run, ``query_range``) and on the
webhooks' audit logs: nothing critical fires and nothing acts but for the real faults
(Watchdog and info alerts aside; warnings that name the plumbing are allowed and
printed); each fault pages once, with site and cluster, gets its action (GPULost: nid001
drained, and resumed once repaired), stays firing until it is repaired and resolves
after. The timeline (fault -> page -> action -> repair -> resolve, seconds) is printed
and written to ``game-day-timeline.json`` in the test's temporary directory.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from gotthard.kube import client_for
from gotthard.sandbox import SandboxError, free_ports
from gotthard.sandbox.sites import MultiSiteSandbox
from gotthard.sandbox.sites_config import APP_NAMESPACES, NODE_NAME
from gotthard.site import KubeAccess
from tests.exporters import lustre_tree
from tests.fakenvml import fakenvml
from tests.monitoring.live_sources import LUSTRE_VERSION, LiveTrees
from tests.monitoring.test_dashboards import exporter_argv
from tests.sandbox.gameday import (
    STEP,
    Fault,
    GpuNode,
    Interval,
    audit,
    federation_cut,
    firing_history,
    firing_now,
    global_alerts,
    rule_for,
    say,
)
from tests.support.monitoring import Processes, instant
from tests.support.wait import wait_until

pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group("game_day")]

SITES = ("zurich", "lugano")
#: How long the steady state is watched before anything happens.
STEADY = 30.0
#: An exporter restart or a node reboot: longer than every 60-second ``for``.
DOWN = 70.0
#: How long the global view cannot reach Lugano's Prometheus.
FEDERATION_CUT = 90.0
#: After the last plumbing step: the longest ``for`` of the sandbox (60 s) and a margin.
QUIET = 65.0
#: After a repair: a few evaluations, Alertmanager's resolve and the webhook's answer.
RESOLVE_WITHIN = 60.0
#: The results of a runbook action that ran (the webhook also audits the ones it did not).
RAN = ("ok", "failed")
#: The database pods the backups' pre hook quiesces.
DB = {"app": "db"}
#: What Lustre's health_check reads when a target of the server is unhealthy.
SICK = "device lustre-OST0000 reported unhealthy\nNOT HEALTHY\n"
BACKUP_HOOK = {
    "name": "quiesce-db",
    "label_selector": DB,
    "pre": [{"container": "db", "command": ["/bin/sh", "-c", "sync"]}],
}


@dataclass
class GameDay:
    sandbox: MultiSiteSandbox
    gpus: dict[str, GpuNode]
    #: Lugano's Lustre OSS: its exporter's address and its health_check file
    oss: str
    health_check: Path

    def set_health(self, text: str) -> None:
        staged = self.health_check.with_name(".health_check")
        staged.write_text(text)
        os.replace(staged, self.health_check)

    def set_db_pod(self, site: str, phase: str) -> None:
        """*site*'s database pod reported in *phase*, as its kubelet would."""
        api = client.CoreV1Api(kube(self.sandbox, site))
        body = {"status": {"phase": phase}}
        api.patch_namespaced_pod_status("db-0", APP_NAMESPACES["failover"], body)


def kube(sandbox: MultiSiteSandbox, site: str) -> client.ApiClient:
    return client_for(KubeAccess(kubeconfig=str(sandbox.kubeconfig(site))), site)


def add_db_pods(sandbox: MultiSiteSandbox) -> None:
    namespace = APP_NAMESPACES["failover"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "db-0", "namespace": namespace, "labels": DB},
        "spec": {"containers": [{"name": "db", "image": "postgres:16"}]},
    }
    for site in SITES:
        client.CoreV1Api(kube(sandbox, site)).create_namespaced_pod(namespace, pod)


@pytest.fixture(scope="module")
def game_day(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GameDay]:
    """Its own two-site sandbox: enforcing webhooks, a backup slurmctld per site, backups
    every minute with a pre hook, a fake GPU node per site, a Lustre OSS at Lugano."""
    root = tmp_path_factory.mktemp("game-day")
    library = fakenvml.build(root / "fakenvml")
    file_sd = root / "file_sd"
    gpus = {site: GpuNode(root / f"gpu-{site}", site, file_sd, library) for site in SITES}
    trees = LiveTrees(root / "nodes")
    # a healthy OSS: every target's recovery complete (the fixture's has one recovering)
    osts = [replace(target, recovery=None) for target in trees.servers["oss"].osts]
    trees.servers["oss"] = replace(trees.servers["oss"], osts=osts)
    trees.build()
    oss_port = free_ports(1)[0]
    oss = f"127.0.0.1:{oss_port}"
    health_path, _ = lustre_tree.health_text(lustre_tree.NODES["oss"], LUSTRE_VERSION)
    server = trees.root / "oss"
    paths = (f"--path.sysfs={server / 'sys'}", f"--path.procfs={server / 'proc'}")
    plain = {k: v for k, v in os.environ.items() if k != "GOTTHARD_CONFIG"}
    settings: dict[str, Any] = {
        "deploy": {
            "prometheus": {
                "file_sd_dir": str(file_sd),
                "extra_targets": {"lugano": {"lustre-oss": [oss]}},
            }
        }
    }
    sandbox = MultiSiteSandbox.with_free_ports(
        root / "sandbox",
        SITES,
        settings=settings,
        backup_cron="* * * * *",
        backup_controllers=True,
        backup_hooks=[BACKUP_HOOK],
    )
    with Processes(root / "source-logs") as procs:
        procs.start("lustre-oss", exporter_argv(oss_port, "--collectors=lustre", *paths), plain)
        try:
            for gpu in gpus.values():
                gpu.start()
            try:
                sandbox.up(verbose=False, runbooks_mode="enforce")
            except SandboxError as exc:
                pytest.fail(f"cannot start the game day's sandbox: {exc}", pytrace=False)
            add_db_pods(sandbox)
            day = GameDay(sandbox, gpus, oss, server / health_path)
            for site in SITES:
                day.set_db_pod(site, "Running")
            yield day
        finally:
            sandbox.down(verbose=False)
            for gpu in gpus.values():
                gpu.stop()


def test_game_day(game_day: GameDay, tmp_path: Path) -> None:
    day, sandbox = game_day, game_day.sandbox
    lugano = sandbox.site("lugano")
    began = time.time()
    steps: list[dict[str, Any]] = []

    def step(what: str) -> None:
        steps.append({"t": round(time.time() - began, 1), "step": what})
        say(f"{steps[-1]['t']:6.1f}s {what}")

    def until(moment: float) -> None:
        """A window of time, by nature: the alerts have it to (not) fire in."""
        time.sleep(max(0.0, moment - time.time()))

    # ---------------------------------------------------------------- 1. steady state
    step("steady state")
    until(began + STEADY)

    # ---------------------------------------------------------------- 2. plumbing
    plumbing = time.time()
    with federation_cut(sandbox, "lugano"):
        step("the global view cannot reach Lugano's /federate")
        sandbox.stop_process("zurich-slurm-exporter")
        day.gpus["zurich"].stop()
        step("Zurich's Slurm exporter and nid001's node exporter down")
        reason = "reason=maintenance: game day (operator)"
        lugano.run_command(["scontrol", "update", f"nodename={NODE_NAME}", "state=drain", reason])
        lugano.stop_process("slurmd")
        day.gpus["lugano"].stop()
        step("Lugano's nid001 drained for maintenance, slurmd stopped, rebooting")
        sandbox.restart_process("lugano-prometheus")
        step("Lugano's Prometheus restarted")
        lugano.stop_controller()
        step("Lugano's primary slurmctld stopped")
        prometheus = sandbox.prometheus_url("lugano")
        on_backup = (
            'gotthard_slurm_controller_up{role="backup",site="lugano"} == 1 and on (instance) '
            'gotthard_slurm_controller_up{role="primary",site="lugano"} == 0 and on (instance) '
            'gotthard_slurm_up{site="lugano"} == 1'
        )
        wait_until(lambda: instant(prometheus, on_backup), 120, "Lugano's backup in control")
        step("Lugano runs on its backup slurmctld (the exporter sees it)")
        lugano.start_controller(timeout=60, wait_node=False)
        step("Lugano's primary slurmctld back in control")
        sandbox.restart_process("lugano-slurm-exporter")
        step("Lugano's Slurm exporter restarted")
        until(plumbing + DOWN)
        sandbox.start_process("zurich-slurm-exporter")
        for gpu in day.gpus.values():
            gpu.start()
        step("Zurich's exporters and Lugano's node exporter back")
        until(plumbing + FEDERATION_CUT)
    step("federation of Lugano restored")
    lugano.start_slurmd()
    lugano.run_command(["scontrol", "update", f"nodename={NODE_NAME}", "state=resume"])
    step("maintenance over: Lugano's nid001 slurmd started, node resumed")
    until(time.time() + QUIET)

    # ---------------------------------------------------------------- 3. real faults
    def drained() -> bool:
        """Zurich's webhook drained nid001 for the GPU fault."""
        return any(
            r.get("alertname") == "GPULost"
            and r.get("action") == "slurm.drain_node"
            and r.get("result") == "ok"
            and r["ts"] >= faults[0].times["fault"]
            for r in audit(sandbox, "zurich")
        )

    def within(alertname: str, extra: float = 0.0) -> float:
        return (rule_for(sandbox, alertname) or 60.0) + extra + 60.0

    faults = [
        Fault(
            "GPU",
            "zurich",
            "GPULost",
            {"site": "zurich", "node": NODE_NAME, "gpu": "2"},
            inject=lambda: day.gpus["zurich"].lose(2),
            repair=lambda: day.gpus["zurich"].repair(2),
            page_within=within("GPULost"),
            acted=drained,
        ),
        Fault(
            "Lustre",
            "lugano",
            "LustreHealthCheckFailed",
            {"site": "lugano", "instance": day.oss},
            inject=lambda: day.set_health(SICK),
            repair=lambda: day.set_health("healthy\n"),
            page_within=within("LustreHealthCheckFailed"),
        ),
        Fault(
            "Velero",
            "zurich",
            "DRBackupFailed",
            {"site": "zurich", "schedule": "nightly"},
            inject=lambda: day.set_db_pod("zurich", "Pending"),
            repair=lambda: day.set_db_pod("zurich", "Running"),
            # the next backup of the every-minute schedule, and its run
            page_within=within("DRBackupFailed", 75.0),
            resolve_within=RESOLVE_WITHIN + 75.0,
        ),
    ]
    for fault in faults:
        fault.inject()
        fault.times["fault"] = time.time()
        step(f"{fault.area} fault injected at {fault.site}: expect {fault.alertname}")
    urls = [sandbox.prometheus_url(site) for site in SITES]
    while not all("resolve" in f.times for f in faults):
        now = time.time()
        for f in faults:
            firing = any(firing_now(url, f.alertname, f.labels) for url in urls)
            late = now - f.times["fault"] > f.page_within
            if "page" not in f.times and firing:
                f.times["page"] = time.time()
                step(f"{f.alertname} pages")
            due = f.acted is None or f.acted()
            if "page" in f.times and "action" not in f.times and due:
                f.times["action"] = time.time()
                step(f"{f.alertname} acted on" if f.acted else f"{f.alertname}: no action due")
            if "repair" not in f.times and ("action" in f.times or late):
                f.repair()
                f.times["repair"] = time.time()
                step(f"{f.area} fault repaired" + ("" if "page" in f.times else " (never paged)"))
            resolved = not firing and "page" in f.times
            # never resolving is asserted below
            gave_up = now - f.times.get("repair", now) > f.resolve_within + 30
            if "repair" in f.times and "resolve" not in f.times and (resolved or gave_up):
                f.times["resolve"] = time.time()
                step(f"{f.alertname} resolved" if resolved else f"{f.alertname}: gave up")
        time.sleep(1.0)
    # the webhook's answer to the resolved GPULost (resume once the repair is confirmed)
    time.sleep(10)
    ended = time.time()

    # ---------------------------------------------------------------- the record
    history: list[Interval] = []
    for site in SITES:
        history += firing_history(sandbox.prometheus_url(site), site, began, ended)
    # the global view's own alerts (it also federates the sites' ALERTS)
    evaluated = global_alerts(sandbox)
    history += [
        i for i in firing_history(sandbox.global_url, "global", began, ended) if i.name in evaluated
    ]
    records = [{**r, "webhook": s} for s in SITES for r in audit(sandbox, s)]
    first_fault = min(f.times["fault"] for f in faults)

    def caused(i: Interval, f: Fault) -> bool:
        return i.matches(f.alertname, f.labels) and i.start >= f.times["fault"]

    def explained(i: Interval) -> bool:
        return any(caused(i, f) for f in faults)

    for f in faults:  # the precise record: ALERTS samples and the webhooks' audit
        seen = [i for i in history if caused(i, f)]
        mine = [
            r for r in records if r.get("alertname") == f.alertname and r["ts"] >= f.times["fault"]
        ]
        if seen:
            f.times["page"] = min(i.start for i in seen)
            f.times["resolve"] = max(i.end for i in seen) + STEP
        notified = [r["ts"] for r in mine if r.get("status") == "firing"]
        acted = [r["ts"] for r in mine if r.get("result") == "ok" and r.get("action") != "notify"]
        f.times.update(notified=min(notified, default=0.0), action=min(acted, default=0.0))
        f.times = {k: v for k, v in f.times.items() if v}

    timeline = {
        "plumbing": steps,
        "faults": [f.timeline() for f in faults],
        "warnings": sorted({str(i) for i in history if i.labels.get("severity") == "warning"}),
        "seconds": round(ended - began, 1),
    }
    say("timeline:\n" + json.dumps(timeline, indent=2))
    (tmp_path / "game-day-timeline.json").write_text(json.dumps(timeline, indent=2) + "\n")

    # ---------------------------------------------------------------- the assertions
    # every broken promise at once (the run is long): what fired or acted, and when
    wrong: list[str] = []

    def expect(holds: bool, what: str) -> None:
        if not holds:
            wrong.append(what)

    for i in history:
        critical = i.labels.get("severity") == "critical" and "Watchdog" not in i.name
        expect(not critical or explained(i), f"a page that no real fault explains: {i}")
    for r in records:
        acted = r.get("action") != "notify" and r.get("result") in RAN
        expect(not acted or r["ts"] >= first_fault, f"an action before any real fault: {r}")
    for f in faults:
        mine = [i for i in history if i.matches(f.alertname, f.labels)]
        expect(bool(mine), f"{f.alertname} never fired for the {f.area} fault ({f.labels})")
        for i in mine:
            expect(bool(i.labels.get("site") and i.labels.get("cluster")), f"{i}: no site")
            expect(i.start >= f.times["fault"], f"{i} fired before the {f.area} fault")
            expect(i.start <= f.times["fault"] + f.page_within, f"{i} paged too late")
            expect(i.end >= f.times["repair"] - STEP, f"{i} resolved before the repair")
            expect(i.end <= f.times["repair"] + f.resolve_within, f"{i} did not resolve")
        wheres = [i.where for i in mine]
        expect(len(wheres) == len(set(wheres)), f"{f.alertname} fired more than once: {wheres}")
        notified = {
            r["startsAt"]
            for r in records
            if r.get("alertname") == f.alertname
            and r.get("status") == "firing"
            and r["ts"] >= f.times["fault"]
        }
        expect(len(notified) == 1, f"{f.alertname} reached the webhooks {len(notified)} times")
        node_actions = [
            r
            for r in records
            if r.get("alertname") == f.alertname
            and r.get("action") in ("slurm.drain_node", "k8s.cordon_node")
            and r.get("result") in RAN
        ]
        expect(f.area == "GPU" or not node_actions, f"{f.alertname} took a node out")
    gpu = faults[0]
    ours = [
        (r.get("action"), r["webhook"], r.get("targets"))
        for r in records
        if r.get("alertname") == "GPULost"
        and r.get("result") == "ok"
        and r["ts"] >= gpu.times["fault"]
    ]
    nid001 = {"node": NODE_NAME}
    expect(("slurm.drain_node", "zurich", nid001) in ours, f"GPULost: nid001 not drained: {ours}")
    expect(("slurm.resume_node", "zurich", nid001) in ours, f"GPULost: not resumed: {ours}")
    resumed = [
        r["ts"]
        for r in records
        if r.get("action") == "slurm.resume_node"
        and r.get("result") == "ok"
        and r["ts"] >= gpu.times["fault"]
    ]
    expect(all(t > gpu.times["repair"] for t in resumed), "resumed before the GPU was repaired")
    assert not wrong, f"{len(wrong)} broken promise(s):\n" + "\n".join(wrong)
