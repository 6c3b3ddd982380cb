"""The real sources of the dashboards' live check besides the exporter processes.

* :class:`LiveTrees`: the sysfs/procfs trees the real Slingshot and Lustre exporters read,
  with counters that move;
* :class:`LiveDr`: the real DR daemon on the Kubernetes emulator with the simulated
  Velero, as the DR tests run it;
* :func:`write_security_textfiles`: the textfiles the real policy commands write.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from gotthard.config import Config
from gotthard.dr.daemon import DrDaemon
from gotthard.dr.metrics import MetricsServer
from gotthard.dr.placement import SiteHealth
from tests.dr.conftest import make_config
from tests.dr.emulator import SimulatedVeleroController, dr_resources
from tests.dr.test_velero_drill import seed_prod
from tests.exporters import lustre_tree, slingshot_tree
from tests.support.cli import run_in_process
from tests.support.kube import EmulatorThread
from tests.support.wait import wait_until

#: Lustre version of the live trees (tests/exporters/lustre_tree.py lays out each one).
LUSTRE_VERSION = "2.15"
#: Lustre job ids (``jobid_var=SLURM_JOB_ID``) of the live OSS and MDS -> size: Slurm
#: jobs 1 and 2 of the recorded output, and ``rsync.1000`` (``procname_uid``), IO
#: outside any job that the join to ``gotthard_slurm_job_info`` drops. Odd sizes also read.
OST_JOBS = {"lustre-OST0000": {"1": 9, "2": 2, "rsync.1000": 1}, "lustre-OST0001": {"1": 4}}
MDT_JOBS = {"lustre-MDT0000": {"1": 7, "2": 30}, "lustre-MDT0001": {"1": 2}}


def grown(samples: int, total: int, elapsed: int) -> tuple[int, int]:
    """A (samples, sum) pair *elapsed* seconds later: 1 % of the count (at least 1) more
    per second, of the same mean size. Untouched counters stay 0."""
    if samples == 0:
        return 0, 0
    step = max(samples // 100, 1) * elapsed
    return samples + step, total + step * (total // samples)


class LiveTrees:
    """The sysfs/procfs trees the real Slingshot and Lustre exporters read, and a thread
    that moves their counters forward once a second, as on busy nodes.

    * ``compute``: a GPU node with two Slingshot NICs (Cassini-1 ``cxi0``, Cassini-2
      ``cxi1``; ``tests/exporters/slingshot_tree.py``) whose ``link_restarts`` are recent
      relative to now (cxi0: one in the last hour, two in 10 h; cxi1: one in 10 h), and a
      Lustre client (``lustre_tree.NODES["client"]``: file systems ``lustre``, with one
      OST deactivated, and ``scratch``; unevenly filled OSTs);
    * ``oss`` and ``mds``: the fixture OSS and MDS serving ``lustre``, with job_stats of
      :data:`OST_JOBS` and :data:`MDT_JOBS` (``--lustre.job-stats``).

    Static counters would give rate() = 0 and the ratio panels (codeword error ratio,
    mean metadata latency) 0/0; so Slingshot telemetry moves as the builder's
    ``elapsed`` says, and the OSS/MDS stats, md_stats and job_stats as :func:`grown`
    says (client counters no panel reads stay put). Files are replaced atomically
    (written beside the tree, renamed over), so a scrape reads the old or the new value
    and the collectors count no errors.
    """

    def __init__(self, root: Path) -> None:
        self.slingshot = slingshot_tree
        self.lustre = lustre_tree
        self.root = root
        self.now = int(time.time())
        nic = self.slingshot.Nic
        self.nics = (
            nic(0, generation=1, restarts=(self.now - 600, self.now - 7_200)),
            nic(1, generation=2, restarts=(self.now - 30_000,)),
        )
        nodes = self.lustre.NODES
        self.servers = {
            "oss": self._with_jobs(nodes["oss"], "ost", OST_JOBS),
            "mds": self._with_jobs(nodes["mds"], "mdt", MDT_JOBS),
        }
        self._scratch = root / "scratch"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def compute(self) -> Path:
        return self.root / "compute"

    def _with_jobs(self, node: Any, kind: str, sizes: dict[str, dict[str, int]]) -> Any:
        def jobs(target: Any) -> Any:
            found = sizes.get(target.name, {})
            return replace(target, jobs=tuple(self._job(i, kind, n) for i, n in found.items()))

        return replace(node, osts=[jobs(t) for t in node.osts], mdts=[jobs(t) for t in node.mdts])

    def _job(self, job_id: str, kind: str, size: int) -> Any:
        if kind == "ost":
            ops = {"write_bytes": (1_000 * size, 1_000 * size * (4 << 20))}
            ops["write"] = (1_000 * size, 1_000 * size * 1_700)
            if size % 2:
                ops["read_bytes"] = (500 * size, 500 * size * (1 << 20))
                ops["read"] = (500 * size, 500 * size * 600)
        else:
            ops = {name: (300 * size, 300 * size * 40) for name in ("open", "close")}
            ops["getattr"] = (1_200 * size, 1_200 * size * 5)
        return self.lustre.Job(job_id, ops)

    def build(self) -> None:
        self.slingshot.build(self.compute / "sys", self.nics, now=self.now)
        self.lustre.write_tree(self.compute, self.lustre.NODES["client"], LUSTRE_VERSION)
        for name, node in self.servers.items():
            self.lustre.write_tree(self.root / name, node, LUSTRE_VERSION)
        self._scratch.mkdir()

    def advance(self, elapsed: int) -> None:
        """Rewrite every moving counter file as it reads *elapsed* seconds after build."""
        sysfs = self.compute / "sys"
        for nic in self.nics:
            device = self.slingshot.device_path(sysfs, nic)
            files = self.slingshot.nic_files(nic, now=self.now, elapsed=elapsed)
            for rel, text in files.items():
                if rel.startswith("telemetry/"):
                    self._replace(device / rel, text)
        for name, node in self.servers.items():
            for param in self.lustre.params(self._moved(node, elapsed), LUSTRE_VERSION):
                if param.name in ("stats", "md_stats", "job_stats"):
                    self._replace(self.root / name / param.path, param.text)

    def _moved(self, node: Any, elapsed: int) -> Any:
        def ops(items: tuple[Any, ...]) -> tuple[Any, ...]:
            moved = []
            for op in items:
                samples, total = grown(op.samples, op.total, elapsed)
                moved.append(replace(op, samples=samples, total=total))
            return tuple(moved)

        def target(item: Any) -> Any:
            jobs = tuple(
                self.lustre.Job(
                    job.job_id, {k: grown(*value, elapsed) for k, value in job.ops.items()}
                )
                for job in item.jobs
            )
            return replace(item, ops=ops(item.ops), jobs=jobs)

        return replace(
            node, osts=[target(t) for t in node.osts], mdts=[target(t) for t in node.mdts]
        )

    def _replace(self, path: Path, text: str) -> None:
        staged = self._scratch / "next"
        staged.write_text(text)
        os.replace(staged, path)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        started = time.monotonic()
        done = 0
        while not self._stop.wait(0.2):
            elapsed = int(time.monotonic() - started)
            if elapsed != done:
                self.advance(elapsed)
                done = elapsed


#: Scheduler jobs made due at once, in two rounds: a backup and placement, then a drill
#: and the storage-location check (RPO) that need the backup.
ROUNDS = (("backup:zurich:daily", "placement"), ("drill:zurich:prod", "bsl:zurich"))
# migrate-names: off (the keys of [dr.placement.queries], health signals, not metrics)
HEALTHY = {"api_up": True, "ingress_up": True, "gpu_capacity": 8.0, "slurm_up": True}
# migrate-names: on


def dr_config(root: Path) -> Config:
    """The DR tests' configuration (Zurich and Lugano on one emulator; a daily backup and a
    drill of ``prod`` in Zurich) with one service, ``inference``, placed on its primary
    site Zurich."""
    service = {
        "name": "inference",
        "primary_site": "zurich",
        "namespace": "prod",
        "resources": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
    }
    placement = {"enabled": True, "state_file": f"{root}/placement.json", "services": [service]}
    return make_config(root, placement=placement)


#: A pod the pod policy denies (privileged): ``policy eval`` writes one violation.
PRIVILEGED_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "trainer", "namespace": "ml"},
    "spec": {
        "containers": [{"name": "c", "image": "x:1", "securityContext": {"privileged": True}}]
    },
}
KUBE_BENCH_REPORT = Path(__file__).resolve().parents[1] / "fixtures/policies/kube-bench/result.json"


def write_security_textfiles(directory: Path) -> None:
    """The textfiles of ``gotthard policy eval`` and ``gotthard audit kube-bench``, written
    by the real commands into *directory* (created): a denied pod, and the kube-bench
    result of tests/fixtures."""
    directory.mkdir()
    pod = directory.parent / "pod.json"
    pod.write_text(json.dumps(PRIVILEGED_POD))
    policy = ("policy", "eval", "--input", str(pod), "--textfile", str(directory / "policy.prom"))
    assert run_in_process(*policy) == 1
    audit = ("audit", "kube-bench", "--report", str(KUBE_BENCH_REPORT), "--format", "json")
    assert run_in_process(*audit, "--textfile", str(directory / "kube-bench.prom")) in (0, 1)


class LiveDr:
    """The real DR daemon (:class:`~gotthard.dr.daemon.DrDaemon`, its scheduler and its
    ``/metrics`` server) on the Kubernetes emulator with the simulated Velero
    (tests/dr/emulator.py), as the DR tests run it. Its backup, drill and placement jobs
    are made due at once, so every DR family has series within seconds."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.k8s = EmulatorThread(*dr_resources())
        self.velero: SimulatedVeleroController | None = None
        self.daemon: DrDaemon | None = None
        self.server: MetricsServer | None = None

    def start(self) -> int:
        """Start everything; the port of ``/metrics``."""
        self.k8s.start()
        api = self.k8s.api()
        self.velero = SimulatedVeleroController(api).start()
        seed_prod(self.k8s)  # the Deployments the drill restores and verifies
        self.daemon = DrDaemon(
            dr_config(self.root),
            api_clients={"zurich": api, "lugano": api},
            karmada_api=api,
            identity="dashboards",
            health_source=lambda site: SiteHealth(site, drill_ok=True, **HEALTHY),
        )
        self.daemon.startup_chores()
        scheduler = self.daemon.start_scheduler()
        for jobs in ROUNDS:
            for job in jobs:
                scheduler.modify_job(job, next_run_time=dt.datetime.now(dt.UTC))
            wait_until(
                lambda jobs=jobs: all(self._executed(job) for job in jobs),
                30,
                what=lambda jobs=jobs: f"DR jobs {', '.join(jobs)} to run",
            )
            if "backup:zurich:daily" in jobs:
                # the job only creates its Backup; the drill needs it Completed, as its
                # follow job records
                wait_until(self._backed_up, 30, what="the follow job to record the backup")
        self.server = MetricsServer(self.daemon.metrics, "127.0.0.1", 0, self.daemon.health)
        self.server.start()
        return self.server.port

    def _backed_up(self) -> bool:
        assert self.daemon is not None
        value = self.daemon.metrics.registry.get_sample_value(
            "gotthard_dr_backup_last_success_timestamp_seconds",
            {"site": "zurich", "schedule": "daily"},
        )
        return value is not None

    def _executed(self, job: str) -> bool:
        assert self.daemon is not None
        value = self.daemon.metrics.registry.get_sample_value(
            "gotthard_dr_scheduler_job_events_total", {"job": job, "event": "executed"}
        )
        return bool(value)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
        if self.daemon is not None:
            self.daemon.stop_scheduler()
        if self.velero is not None:
            self.velero.stop()
        self.k8s.stop()
