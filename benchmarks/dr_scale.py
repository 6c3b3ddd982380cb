#!/usr/bin/env python3
"""Scale benchmark of the DR daemon: 500 namespaces x 2 sites of backup schedules.

Configuration: 500 ``[[dr.schedules]]`` (one namespace each, crons spread over the day)
on 2 sites = 1,000 backup jobs + 2 follow and 2 storage-location jobs, in a SQLite job
store on disk, or (``--store postgresql``) in a private PostgreSQL cluster started with Debian's
``initdb``/``pg_ctl`` (``tests/support/postgres.py``; the ``postgres`` extra's psycopg);
``--store both`` measures both stores and prints ``{"sqlite": ..., "postgresql": ...}``.

The Kubernetes/Velero side is stubbed at the LOWEST layer of the official client:
``ApiClient.rest_client.request`` is replaced by an in-memory Velero API (create = 201,
a created Backup is Completed at once, get/list/patch as the API server answers). Every
call still goes through the real ``CustomObjectsApi`` serialisation, the retry wrapper
and the daemon code; no network, no emulator, no Velero controller latency.

Each measurement runs in a fresh process (``ru_maxrss`` is per process):

* ``startup_seconds``: ``DrDaemon(settings)`` + becoming leader (start-up chores, all
  jobs added to an EMPTY job store) - the first start;
* ``restart_seconds``: the same on the persisted store (1,004 unchanged jobs kept);
* ``scheduling_pass_seconds``: all 1,000 backup jobs due at once; from ``resume()`` to
  the last job executed (each creates its Backup; the daemon's ``follow:`` jobs record
  how they end), with APScheduler's default 10 worker threads;
  ``process_jobs_seconds``: the scheduler's own pass (the ``_process_jobs`` call
  that finds and submits the due jobs, store updates included);
  ``scheduling_pass_cpu_seconds``: the CPU time (all threads) the pass took, which other
  load on the machine inflates less than the wall time. Target: the pass within 0.5 s
  (``meets_target``);
* ``follow_pass_seconds``: one round of each site's ``follow:`` job right after the pass:
  one LIST per site, each of the 1,000 Backups (Completed at once here) recorded
  (``backups_followed``);
* ``bsl_pass_seconds``: one storage-location/RPO job of one site (500 namespaces);
* ``peak_rss_mib``: ``ru_maxrss`` of the start-up process (``pass_peak_rss_mib``: of the
  process that also ran the scheduling pass).

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

NAMESPACES = int(__import__("os").environ.get("DR_SCALE_NAMESPACES", "500"))
SITES = ("zurich", "lugano")
#: The whole pass of 1,000 due backups, on this 2-core machine.
PASS_TARGET_SECONDS = 0.5


ROOT = Path(__file__).resolve().parent.parent


def settings(workdir: Path, url: str) -> Any:
    """The Config of the benchmark: two sites, one schedule per namespace."""
    from gotthard.config import from_mapping

    dr = {
        "jobstore_url": url or f"sqlite:///{workdir}/jobs.sqlite",
        "lease": {"enabled": False},
        "poll_interval_seconds": 0.01,
        "backup_timeout_seconds": 30,  # a stub bug fails fast instead of polling 4 h
        "schedules": [
            {
                "name": f"ns-{i:03d}",
                "namespaces": [f"ns-{i:03d}"],
                "cron": f"{i % 60} {i % 24} * * *",
            }
            for i in range(NAMESPACES)
        ],
        "placement": {"state_file": f"{workdir}/placement.json"},
    }
    return from_mapping({"site": "zurich", "sites": {s: {} for s in SITES}, "dr": dr})


class _Headers(dict):
    pass


class _Raw:
    def __init__(self, status: int, body: Any) -> None:
        self.status, self.reason = status, "OK" if status < 300 else "Error"
        self.data = json.dumps(body).encode()
        self.headers = _Headers({"content-type": "application/json"})


class StubVeleroApi:
    """In-memory ``velero.io/v1`` (and namespaces) behind ``RESTClientObject.request``."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, dict[str, Any]]] = {}
        self.lock = threading.Lock()
        self.calls = 0

    def request(
        self,
        method: str,
        url: str,
        headers: Any = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> Any:
        from kubernetes.client.rest import RESTResponse

        with self.lock:
            self.calls += 1
            parsed = urlparse(url)
            parts = parsed.path.strip("/").split("/")
            # /apis/velero.io/v1/namespaces/velero/<plural>[/<name>] or /api/v1/namespaces
            plural = parts[5] if parts[0] == "apis" and len(parts) > 5 else "/".join(parts[:3])
            name = parts[6] if parts[0] == "apis" and len(parts) > 6 else None
            store = self.objects.setdefault(plural, {})
            if method == "POST":
                obj = body if isinstance(body, dict) else json.loads(body)
                key = obj["metadata"]["name"]
                if key in store:
                    return RESTResponse(_Raw(409, {"kind": "Status", "code": 409}))
                if plural == "backups":
                    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                    obj["status"] = {
                        "phase": "Completed",
                        "startTimestamp": now,
                        "completionTimestamp": now,
                    }
                store[key] = obj
                return RESTResponse(_Raw(201, obj))
            if method == "GET" and name is None:
                selector = parse_qs(parsed.query).get("labelSelector")
                del selector  # answered unfiltered, like an API server ignoring it
                return RESTResponse(_Raw(200, {"items": list(store.values())}))
            if method == "GET":
                if name not in store:
                    return RESTResponse(_Raw(404, {"kind": "Status", "code": 404}))
                return RESTResponse(_Raw(200, store[name]))
            return RESTResponse(_Raw(405, {"kind": "Status", "code": 405}))


def stub_clients() -> tuple[dict[str, Any], list[StubVeleroApi]]:
    from kubernetes import client

    clients, stubs = {}, []
    for site in SITES:
        cfg = client.Configuration()
        cfg.host = f"http://{site}.invalid"
        api = client.ApiClient(cfg)
        stub = StubVeleroApi()
        api.rest_client = stub
        clients[site], stubs = api, [*stubs, stub]
    return clients, stubs


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def phase_start(workdir: Path, url: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    from gotthard.dr.daemon import DrDaemon

    t_import = time.perf_counter() - t0
    s = settings(workdir, url)
    clients, _ = stub_clients()
    t1 = time.perf_counter()
    daemon = DrDaemon(s, api_clients=clients, identity="bench")
    assert daemon.step(None)
    elapsed = time.perf_counter() - t1
    assert daemon.scheduler is not None
    jobs = len(daemon.scheduler.get_jobs())
    daemon.stop_scheduler()
    return {"seconds": elapsed, "import_seconds": t_import, "jobs": jobs, "rss": rss_mib()}


def phase_pass(workdir: Path, url: str) -> dict[str, Any]:
    from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED

    from gotthard.dr.daemon import DrDaemon, bsl_job

    s = settings(workdir, url)
    clients, stubs = stub_clients()
    daemon = DrDaemon(s, api_clients=clients, identity="bench")
    t1 = time.perf_counter()
    assert daemon.step(None)
    restart = time.perf_counter() - t1
    sched = daemon.scheduler
    assert sched is not None
    sched.pause()
    now = dt.datetime.now(dt.UTC)
    backup_jobs = [j.id for j in sched.get_jobs() if j.id.startswith("backup:")]
    for job_id in backup_jobs:
        sched.modify_job(job_id, next_run_time=now)
    done = threading.Event()
    finished: list[str] = []
    errors: list[str] = []

    def listener(event: Any) -> None:
        (errors if event.exception else finished).append(event.job_id)
        if len(finished) + len(errors) >= len(backup_jobs):
            done.set()

    sched.add_listener(listener, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)
    passes: list[float] = []
    original = sched._process_jobs

    def timed() -> Any:
        t = time.perf_counter()
        try:
            return original()
        finally:
            passes.append(time.perf_counter() - t)

    sched._process_jobs = timed  # type: ignore[method-assign]
    t2 = time.perf_counter()
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    sched.resume()
    if not done.wait(600):
        raise SystemExit("scheduling pass did not finish in 600 s")
    fire = time.perf_counter() - t2
    after = resource.getrusage(resource.RUSAGE_SELF)
    fire_cpu = (after.ru_utime - cpu.ru_utime) + (after.ru_stime - cpu.ru_stime)
    t4 = time.perf_counter()
    followed = sum(len(daemon.follow(site)) for site in SITES)
    follow = time.perf_counter() - t4
    t3 = time.perf_counter()
    bsl_job("zurich")
    bsl = time.perf_counter() - t3
    daemon.stop_scheduler()
    return {
        "restart": restart,
        "fire": fire,
        "fire_cpu": fire_cpu,
        "process_jobs": max(passes) if passes else None,
        "process_jobs_calls": len(passes),
        "follow": follow,
        "followed": followed,
        "executed": len(finished),
        "errors": len(errors),
        "backups": sum(len(st.objects.get("backups", {})) for st in stubs),
        "api_calls": sum(st.calls for st in stubs),
        "bsl": bsl,
        "rss": rss_mib(),
    }


def child(phase: str, workdir: Path, url: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--phase", phase, "--workdir", str(workdir), "--url", url],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase", choices=("start", "pass"), help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--url", default="", help=argparse.SUPPRESS)
    parser.add_argument(
        "--store",
        choices=("sqlite", "postgresql", "both"),
        default="sqlite",
        help="the job store to measure (default: sqlite)",
    )
    args = parser.parse_args()
    if args.phase == "start":
        print(json.dumps(phase_start(args.workdir, args.url)))
        return
    if args.phase == "pass":
        print(json.dumps(phase_pass(args.workdir, args.url)))
        return
    if args.store == "both":
        print(json.dumps({store: measure(store) for store in ("sqlite", "postgresql")}))
    else:
        print(json.dumps(measure(args.store)))


def measure(store: str) -> dict[str, Any]:
    """Both phases on a fresh job store of kind *store*; the figures of one JSON line."""
    with tempfile.TemporaryDirectory(prefix="dr-scale-") as tmp:
        if store == "postgresql":
            sys.path.insert(0, str(ROOT))
            from tests.support.postgres import PostgresCluster

            with PostgresCluster() as cluster:
                start = child("start", Path(tmp), cluster.url)
                run = child("pass", Path(tmp), cluster.url)
        else:
            start = child("start", Path(tmp), "")
            run = child("pass", Path(tmp), "")
    return report(store, start, run)


def report(store: str, start: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    return {
        "store": store,
        "namespaces": NAMESPACES,
        "sites": len(SITES),
        "jobs": start["jobs"],
        "stub": "kubernetes.client ApiClient.rest_client.request (in-memory Velero API)",
        "startup_seconds": round(start["seconds"], 3),
        "import_seconds": round(start["import_seconds"], 3),
        "restart_seconds": round(run["restart"], 3),
        "peak_rss_mib": round(start["rss"], 1),
        "scheduling_pass_seconds": round(run["fire"], 3),
        "scheduling_pass_target_seconds": PASS_TARGET_SECONDS,
        "meets_target": run["fire"] <= PASS_TARGET_SECONDS,
        "scheduling_pass_cpu_seconds": round(run["fire_cpu"], 3),
        "process_jobs_seconds": round(run["process_jobs"], 3),
        "jobs_executed": run["executed"],
        "job_errors": run["errors"],
        "backups_created": run["backups"],
        "api_calls": run["api_calls"],
        "follow_pass_seconds": round(run["follow"], 3),
        "backups_followed": run["followed"],
        "bsl_pass_seconds": round(run["bsl"], 3),
        "pass_peak_rss_mib": round(run["rss"], 1),
    }


if __name__ == "__main__":
    main()
