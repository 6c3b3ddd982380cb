#!/usr/bin/env python3
"""A whole site on a real Prometheus: rule groups, TSDB head and every dashboard panel.

The site (``--scale 1``) is Alps-sized: 2,700 GPU nodes with 4 GH200 each, 4 Slingshot
NICs and a Lustre client (each node's series made by the GPU render function, the
Slingshot and the Lustre collectors, as in benchmarks/cardinality.py;
``--lustre-client``), 400 OSTs on OSSs of 10 OSTs with 10,000 job IDs in each OST's
job_stats (job stats on, the default limit of 1,000 per target), one MDS, a Slurm
controller with 100,000 jobs on 10,000 nodes (gotthard_slurm_job_info on), the DR daemon
and the runbook webhook. ``--scale F`` takes the fraction F of every count (at least one).

How the data gets in, and why both ways:

* **live scrapes** of a few synthetic endpoints (one per shard of nodes, the text made
  once and served gzip-compressed), each line carrying its node's ``instance`` label
  (``honor_labels``): the recording and alerting rules only evaluate on live data, and
  the TSDB head is what a running site holds;
* **backfill** (``--history-hours``, default 24) of the same series with
  ``promtool tsdb create-blocks-from openmetrics`` at ``--history-step`` seconds: a 24 h
  panel range only costs what it costs with 24 h of data behind it. Backfilled values
  follow a simple pattern (counters grow, gauges cycle); the live values are constant;
  the GPU and NIC fault gauges read healthy in both (``HEALTHY``), and each GPU job
  holds the GPUs of ``NODES_PER_JOB`` nodes.

With Gotthard's rules (``gotthard rules build``) loaded and the dashboards' queries
(``gotthard dashboards build``; template variables filled as Grafana fills them when a
dashboard opens, from the live label values: "All" where a variable has it, else its
first value, as for the GPU fleet's node choice), it prints JSON lines: ``{"rule_group",
"mean_seconds", "interval_seconds", "ratio"}`` per group, ``{"head_series", "rss_bytes",
"bytes_per_series", ...}`` and ``{"panel", "range", "step", "p95_seconds", ...}`` per
panel query, range (1 h, 24 h) and step (30 s, 5 m; a panel's "Min interval" raises it,
as in Grafana: ``"step_seconds"``): a range query for a time series, the
instant query at the range's end for an instant target (stat, table, bar gauge), as
Grafana sends them (``"query"`` says which; ``$__range`` and ``$__interval`` filled
either way). Targets: every group under 10 % of its interval, every panel p95 under 2 s
at 24 h, a few KiB per series.

Needs /usr/bin/prometheus and promtool (Debian's ``prometheus``); no Slurm.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import math
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import cardinality  # noqa: E402

from gotthard.monitoring.dashboards import check, lint  # noqa: E402
from gotthard.prometheus import Prometheus, PrometheusError  # noqa: E402

#: (site, cluster) of the Alps-sized site and of the second one (``--second-site``).
SITE, CLUSTER = "lugano", "alps"
SECOND_SITE, SECOND_CLUSTER = "zurich", "zurich"
#: The full-size site.
FULL = {
    "gpu_nodes": 2700,
    "osts": 400,
    "slurm_job_count": 100_000,
    "slurm_node_count": 10_000,
}
SCRAPE_SECONDS = 30
#: Series per shard endpoint (one scrape target each).
SHARD_SERIES = 250_000
TARGET_RULE_RATIO = 0.10
TARGET_PANEL_SECONDS = 2.0
RANGES = {"1h": 3600, "24h": 86400}
STEPS = {"30s": 30, "5m": 300}

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$")


def parse(text: str) -> list[tuple[str, str]]:
    """(name, inner labels) of every sample line of an exposition text."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match:
            labels = (match.group(2) or "{}")[1:-1]
            out.append((match.group(1), labels))
    return out


@contextlib.contextmanager
def sized(**overrides: int) -> Iterator[None]:
    saved = dict(cardinality.SIZES)
    cardinality.SIZES.update(overrides)
    try:
        yield
    finally:
        cardinality.SIZES.clear()
        cardinality.SIZES.update(saved)


def counts(scale: float) -> dict[str, int]:
    return {key: max(1, round(value * scale)) for key, value in FULL.items()}


#: What each GPU node's Lustre client exports (``--lustre-client``): ``lean`` is
#: ``--lustre.client-target-space=false --lustre.client-target-imports=false`` (the node's
#: own operations, its imports counted by state; the servers export each target's space,
#: and a healthy client no per-target import), ``no-space`` only the first of the two
#: (each target's import state too), ``full`` the default collector (every target's space
#: and inodes too), ``none`` no client.
LUSTRE_CLIENT = ("lean", "no-space", "full", "none")


def site_roles(
    scale: float, lustre_client: str = "lean"
) -> list[tuple[str, str, list[str], list[tuple[str, str]]]]:
    """(job, role, instances, template samples) of every role of the site at *scale*.
    A GPU node's client imports all 400 OSTs at any scale, as a client of the full-size
    file system does: its series are what a node costs at full size."""
    n = counts(scale)
    per_oss = cardinality.SIZES["osts_per_oss"]
    oss = math.ceil(n["osts"] / per_oss)
    gpu = parse(cardinality.gpu(False)) + parse(cardinality.slingshot(1))
    if lustre_client != "none":
        full = lustre_client == "full"
        imports = lustre_client != "lean"
        gpu += parse(
            cardinality.lustre("client", client_target_space=full, client_target_imports=imports)
        )
    with sized(osts_per_oss=min(per_oss, n["osts"])):
        lustre_oss = parse(cardinality.lustre("oss", job_stats=True))
    lustre_mds = parse(cardinality.lustre("mds", job_stats=True))
    with sized(slurm_job_count=n["slurm_job_count"], slurm_node_count=n["slurm_node_count"]):
        slurm = parse(cardinality.slurm(job_info=True))
    return [
        ("gotthard-exporter", "gpu", [f"nid{i:06d}" for i in range(n["gpu_nodes"])], gpu),
        ("gotthard-exporter", "oss", [f"oss{i:03d}" for i in range(oss)], lustre_oss),
        ("gotthard-exporter", "mds", ["mds000"], lustre_mds),
        ("gotthard-exporter", "slurm", ["slurmctld"], slurm),
        ("gotthard-dr", "dr", ["dr0"], parse(cardinality.dr_daemon())),
        ("gotthard-runbooks", "webhook", ["runbooks0"], parse(cardinality.webhook())),
    ]


#: The fault gauges of GPUs and NICs, at their healthy value, live and in the history:
#: served as 1 (or cycling) like the other gauges, every GPU would read lost and have a
#: failed and a pending row remapping, and every NIC link would go down every few minutes,
#: so that each of their alerts fired for every device and their sparse records
#: (rule_model.LastReading) had a series for each. A real site has a few broken devices.
HEALTHY = {"gotthard_gpu_lost": 0, "gotthard_gpu_remapped_rows": 0, "gotthard_slingshot_link_up": 1}


#: GPU nodes per synthetic job: the GPU template's ``gotthard_gpu_job_info`` gives every
#: node the same job ids (each job would span every node of the site); the GPU nodes'
#: ``job_id`` is rewritten so that each job holds every GPU of this many nodes, as a site
#: runs many jobs of a few nodes.
NODES_PER_JOB = 2
_GPU_NODE = re.compile(r"nid(\d+)$")
_JOB_ID = re.compile(r'job_id="\d+"')


def _with_instance(labels: str, instance: str) -> str:
    node = _GPU_NODE.match(instance)
    if node and "job_id=" in labels:
        job = 4_000_000 + int(node.group(1)) // NODES_PER_JOB
        labels = _JOB_ID.sub(f'job_id="{job}"', labels)
    return f'instance="{instance}",{labels}' if labels else f'instance="{instance}"'


class Shard:
    """One scrape target: the samples of some instances of one role."""

    def __init__(
        self,
        job: str,
        instances: list[str],
        template: list[tuple[str, str]],
        site: str = SITE,
        cluster: str = CLUSTER,
    ) -> None:
        self.job = f"{job}-{site}-{cluster}"  # as deploy render names the jobs
        self.site, self.cluster = site, cluster
        self.instances = instances
        self.template = template
        lines = [
            f"{name}{{{_with_instance(labels, instance)}}} {HEALTHY.get(name, 1)}\n"
            for instance in instances
            for name, labels in template
        ]
        self.series = len(lines)
        self.body = gzip.compress("".join(lines).encode(), 1)


def shards(scale: float, second: float = 0.0, lustre_client: str = "lean") -> list[Shard]:
    """The shards of the site at *scale*, and of a second site at *second* of it."""
    out = []
    sites = [(scale, SITE, CLUSTER)]
    if second > 0:
        sites.append((scale * second, SECOND_SITE, SECOND_CLUSTER))
    for fraction, site, cluster in sites:
        for job, _role, instances, template in site_roles(fraction, lustre_client):
            per = max(1, SHARD_SERIES // max(1, len(template)))
            for start in range(0, len(instances), per):
                chunk = instances[start : start + per]
                out.append(Shard(job, chunk, template, site, cluster))
    return out


def serve(shard_list: list[Shard]) -> tuple[list[ThreadingHTTPServer], list[str]]:
    servers, addresses = [], []
    for shard in shard_list:
        body = shard.body

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self, body: bytes = body) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        addresses.append(f"127.0.0.1:{server.server_address[1]}")
    return servers, addresses


#: promtool cuts its blocks at multiples of 2 h, and reads its whole input for each block:
#: one input file per 2 h window makes one pass over each sample.
BLOCK_SECONDS = 7200


def history_series(shard_list: list[Shard]) -> dict[str, list[str]]:
    """Metric name -> the label sets (inner text) of its series, target labels added as
    Prometheus adds them (``honor_labels``: the exposed labels win)."""
    by_name: dict[str, list[str]] = {}
    for shard in shard_list:
        target = {"job": shard.job, "site": shard.site, "cluster": shard.cluster}
        for instance in shard.instances:
            for name, labels in shard.template:
                own = {pair.partition("=")[0] for pair in labels.split('",')}
                extra = "".join(f',{k}="{v}"' for k, v in target.items() if k not in own)
                by_name.setdefault(name, []).append(_with_instance(labels, instance) + extra)
    return by_name


def write_history(by_name: dict[str, list[str]], path: Path, stamps: range, first: int) -> int:
    """The OpenMetrics text of every series at *stamps* (the *first* of them the history's
    sample number ``first``): counters (``_total``) grow, gauges cycle. Returns the
    samples written. The fault gauges (:data:`HEALTHY`) keep their healthy value."""
    step = stamps.step
    written = 0
    with path.open("w") as out:
        for name, series in by_name.items():
            grow = name.endswith("_total")
            healthy = HEALTHY.get(name)
            for offset, labels in enumerate(series):
                prefix = f"{name}{{{labels}}} "
                rate = 1 + offset % 13
                out.writelines(
                    f"{prefix}{(i * rate * step) if grow else (offset + i) % 17} {ts}\n"
                    if healthy is None
                    else f"{prefix}{healthy} {ts}\n"
                    for i, ts in enumerate(stamps, start=first)
                )
                written += len(stamps)
        out.write("# EOF\n")
    return written


def backfill(
    promtool: str, shard_list: list[Shard], work: Path, data: Path, begin: int, end: int, step: int
) -> int:
    """The history from *begin* to *end* into *data*, one 2 h window at a time."""
    by_name = history_series(shard_list)
    samples = 0
    window = begin - begin % BLOCK_SECONDS
    while window < end:
        start = max(begin, window)
        stop = min(end, window + BLOCK_SECONDS)
        stamps = range(begin + ((start - begin + step - 1) // step) * step, stop, step)
        if len(stamps):
            path = work / "history.om"
            samples += write_history(by_name, path, stamps, (stamps.start - begin) // step)
            subprocess.run(
                [promtool, "tsdb", "create-blocks-from", "openmetrics", str(path), str(data)],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=(work / "promtool-history.log").open("a"),
            )
            path.unlink()
        window += BLOCK_SECONDS
    return samples


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def prometheus_config(addresses: list[str], shard_list: list[Shard], self_address: str) -> str:
    jobs: dict[tuple[str, str, str], list[str]] = {}
    for shard, address in zip(shard_list, addresses, strict=True):
        jobs.setdefault((shard.job, shard.site, shard.cluster), []).append(address)
    scrape = [
        {
            "job_name": job,
            "honor_labels": True,
            "static_configs": [{"targets": targets, "labels": {"site": site, "cluster": cluster}}],
        }
        for (job, site, cluster), targets in jobs.items()
    ]
    scrape.append(
        {
            "job_name": "prometheus",
            "static_configs": [{"targets": [self_address], "labels": {"site": SITE}}],
        }
    )
    document = {
        "global": {
            "scrape_interval": f"{SCRAPE_SECONDS}s",
            "scrape_timeout": f"{SCRAPE_SECONDS - 5}s",
            "evaluation_interval": f"{SCRAPE_SECONDS}s",
        },
        "rule_files": ["rules/recording.rules.yml", "rules/alerts.rules.yml"],
        "scrape_configs": scrape,
    }
    return json.dumps(document, indent=1)  # YAML is a superset of JSON


def gotthard(*argv: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "gotthard", *argv],
        check=True,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
    )


def wait_ready(url: str, proc: subprocess.Popen[bytes], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"prometheus exited with {proc.returncode}")
        with contextlib.suppress(OSError):
            urllib.request.urlopen(f"{url}/-/ready", timeout=5).read()
            return
        time.sleep(1)
    raise SystemExit("prometheus did not become ready")


def query_range(
    url: str, expr: str, start: float, end: float, step: int, *, instant: bool = False
) -> tuple[float, str]:
    """(seconds, error or "") of one range query, or with *instant* of the instant query
    at *end* that Grafana sends for an instant target (a stat, a table, a bar gauge)."""
    if instant:
        data = urllib.parse.urlencode({"query": expr, "time": f"{end:.3f}"}).encode()
        request = urllib.request.Request(f"{url}/api/v1/query", data=data)
    else:
        data = urllib.parse.urlencode(
            {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": str(step)}
        ).encode()
        request = urllib.request.Request(f"{url}/api/v1/query_range", data=data)
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            body = json.loads(response.read())
    except urllib.error.HTTPError as err:
        body = json.loads(err.read() or b"{}")
    except OSError as err:
        return time.perf_counter() - started, str(err)
    elapsed = time.perf_counter() - started
    if body.get("status") != "success":
        return elapsed, str(body.get("error", "failed"))[:200]
    return elapsed, ""


_RECORD_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*:[a-zA-Z0-9_:]*[a-zA-Z0-9_]")


def rule_levels(rules_file: Path) -> list[dict[str, Any]]:
    """The recording rules of *rules_file* split by what they read, as rule files' texts'
    documents: level 0 reads no record of the file, level n a record of level n - 1 (and
    none higher). ``promtool tsdb create-blocks-from rules`` evaluates every rule against
    the Prometheus as it is, so a rule over another record has history only once that
    record's blocks are loaded: one run per level, in order."""
    groups = yaml.safe_load(rules_file.read_text())["groups"]
    rules = [(group, rule) for group in groups for rule in group["rules"] if "record" in rule]
    names = {rule["record"] for _, rule in rules}
    reads = {
        id(rule): set(_RECORD_NAME.findall(rule["expr"])) & names - {rule["record"]}
        for _, rule in rules
    }
    level: dict[str, int] = {}
    for _ in range(len(rules) + 1):  # longest chain is at most every rule
        changed = False
        for _, rule in rules:
            value = 1 + max((level.get(name, 0) for name in reads[id(rule)]), default=-1)
            if level.get(rule["record"]) != value:
                level[rule["record"]], changed = value, True
        if not changed:
            break
    out = []
    for n in range(max(level.values(), default=-1) + 1):
        kept = []
        for group in groups:
            mine = [r for r in group["rules"] if "record" in r and level[r["record"]] == n]
            if mine:
                kept.append({**{k: v for k, v in group.items() if k != "rules"}, "rules": mine})
        out.append({"groups": kept})
    return out


def _reloads(url: str) -> float:
    """``prometheus_tsdb_reloads_total`` of the Prometheus at *url*, from its /metrics
    directly (its scraped copy, which :func:`head` reads, lags by a scrape interval)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("prometheus_tsdb_reloads_total "):
                return float(line.split()[1])
    return 0.0


def backfill_rules(
    promtool: str, url: str, work: Path, data: Path, begin: int, end: int
) -> dict[str, Any]:
    """The recording rules' series over the history (``promtool tsdb create-blocks-from
    rules``, evaluated by this Prometheus), one run per level of :func:`rule_levels`, each
    level's blocks moved into the data directory and loaded (Prometheus looks for new
    blocks once a minute) before the next level is evaluated."""
    started = time.monotonic()
    evaluated = 0.0
    levels = rule_levels(work / "rules" / "recording.rules.yml")
    blocks_total = 0
    for n, document in enumerate(levels):
        rules_file = work / f"rules-level-{n}.yml"
        rules_file.write_text(yaml.safe_dump(document, sort_keys=False))
        out = work / f"rule-blocks-{n}"
        t = time.monotonic()
        subprocess.run(
            [
                promtool,
                "tsdb",
                "create-blocks-from",
                "rules",
                f"--start={begin}",
                f"--end={end}",
                f"--url={url}",
                f"--output-dir={out}",
                f"--eval-interval={SCRAPE_SECONDS * 2}s",
                "--quiet",
                str(rules_file),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=(work / f"promtool-rules-{n}.log").open("w"),
        )
        evaluated += time.monotonic() - t
        blocks = [path for path in out.iterdir() if path.is_dir()] if out.exists() else []
        blocks_total += len(blocks)
        before = _reloads(url)
        for block in blocks:
            shutil.move(str(block), str(data / block.name))
        deadline = time.monotonic() + 180
        while blocks and time.monotonic() < deadline and _reloads(url) < before + 1:
            time.sleep(2)
    prometheus = Prometheus(url, timeout=60)
    # recorded series an hour into the history
    probe = f'count(last_over_time({{__name__=~".+:.+"}}[5m] @ {begin + 3600}))'
    return {
        "rule_levels": len(levels),
        "rule_blocks": blocks_total,
        "rule_backfill_seconds": round(evaluated, 1),
        "recorded_series_in_history": prometheus.scalar(probe),
        "load_seconds": round(time.monotonic() - started - evaluated, 1),
    }


def rule_groups(prometheus: Prometheus, window: int) -> list[dict[str, Any]]:
    """Every group's evaluation time against its interval: the mean (and the largest) of
    ``prometheus_rule_group_last_duration_seconds`` over the last *window* seconds (one
    evaluation alone can catch a garbage collection)."""

    def by_group(expr: str) -> dict[str, float]:
        _, samples = prometheus.query(expr)
        return {s["metric"]["rule_group"]: float(s["value"][1]) for s in samples}

    metric = "prometheus_rule_group_last_duration_seconds"
    mean = by_group(f"avg_over_time({metric}[{window}s])")
    most = by_group(f"max_over_time({metric}[{window}s])")
    interval = by_group("prometheus_rule_group_interval_seconds")
    rows = []
    for key, seconds in mean.items():
        every = interval.get(key, float(SCRAPE_SECONDS))
        rows.append(
            {
                "rule_group": key.rpartition(";")[2],
                "mean_seconds": round(seconds, 4),
                "max_seconds": round(most.get(key, seconds), 4),
                "interval_seconds": every,
                "ratio": round(seconds / every, 4),
                "meets_target": seconds / every < TARGET_RULE_RATIO,
            }
        )
    return sorted(rows, key=lambda row: -row["ratio"])


def rule_times(url: str) -> dict[tuple[str, str], float]:
    """(group, rule) -> its last evaluation time (``/api/v1/rules``)."""
    with urllib.request.urlopen(f"{url}/api/v1/rules", timeout=60) as response:
        groups = json.loads(response.read())["data"]["groups"]
    return {
        (group["name"], rule.get("name", "")): float(rule.get("evaluationTime", 0.0))
        for group in groups
        for rule in group["rules"]
    }


def slowest_rules(
    samples: list[dict[tuple[str, str], float]], top: int = 10, groups: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """The *top* rules by their mean evaluation time over *samples* (taken once per
    evaluation interval): where a group's time goes; every rule of *groups* when given."""
    keys = {key for sample in samples for key in sample}
    if groups:
        keys = {key for key in keys if key[0] in groups}
    rows = []
    for group, rule in keys:
        times = [sample[(group, rule)] for sample in samples if (group, rule) in sample]
        rows.append(
            {
                "rule": rule,
                "in_group": group,
                "mean_seconds": round(statistics.mean(times), 4),
                "max_seconds": round(max(times), 4),
                "samples": len(times),
            }
        )
    rows.sort(key=lambda row: -row["mean_seconds"])
    return rows if groups else rows[:top]


def head(prometheus: Prometheus) -> dict[str, Any]:
    def value(expr: str) -> float:
        return prometheus.scalar(expr) or 0.0

    series = value("prometheus_tsdb_head_series")
    rss = value('process_resident_memory_bytes{job="prometheus"}')
    heap = value('go_memstats_heap_inuse_bytes{job="prometheus"}')
    return {
        "head_series": int(series),
        "rss_bytes": int(rss),
        "heap_inuse_bytes": int(heap),
        "bytes_per_series": round(rss / series) if series else None,
        "heap_bytes_per_series": round(heap / series) if series else None,
        "blocks": int(value("prometheus_tsdb_blocks_loaded")),
    }


def global_view(url: str, prometheus: Prometheus) -> dict[str, Any]:
    """What the global view would hold: the series ``/federate`` answers, per site, for
    the selection ``gotthard deploy render`` gives the global view
    (:func:`gotthard.deploy.prometheus.federation_match`), against every series of the
    site (full federation, ``{__name__=~".+"}``)."""
    from gotthard.config import Config
    from gotthard.deploy.prometheus import federation_match

    match = federation_match(Config())
    query = urllib.parse.urlencode([("match[]", m) for m in match])
    with urllib.request.urlopen(f"{url}/federate?{query}", timeout=600) as response:
        text = response.read().decode()
    selected: dict[str, int] = {}
    names: set[str] = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            site = re.search(r'[{,]site="([^"]*)"', line)
            key = site.group(1) if site else ""
            selected[key] = selected.get(key, 0) + 1
            names.add(line.partition("{")[0])
    _, full = prometheus.query('count by (site) ({__name__=~".+", site!=""})')
    every = {s["metric"].get("site", ""): int(float(s["value"][1])) for s in full}
    return {
        "global_view": {site: selected.get(site, 0) for site in every},
        "full_federation": every,
        "global_view_total": sum(selected.get(site, 0) for site in every),
        "full_federation_total": sum(every.values()),
        "federated_names": len(names),
        "match": len(match),
    }


def panel_queries(
    prometheus: Prometheus, dash_dir: Path, only: list[str] | None = None
) -> list[tuple[str, str, str, bool, int]]:
    """(panel "dashboard/title/ref", expression with variables, variables, instant, min
    step) of every panel (of the dashboards *only* names, by uid, when given); *instant*:
    Grafana asks for the target's value at the end of the range only (``"instant":
    true``); *min step*: the panel's "Min interval" in seconds (0 without one), under
    which Grafana does not step."""
    out = []
    for path in sorted(dash_dir.glob("*.json")):
        dash = json.loads(path.read_text())
        if only and dash.get("uid") not in only:
            continue
        values, _problems = check.resolve_variables(prometheus, dash, "1m", opening=True)
        for panel in lint.iter_panels(dash):
            if panel.get("type") == "row":
                continue
            for target in panel.get("targets") or []:
                expr = str(target.get("expr") or "")
                if expr.strip():
                    name = f"{dash['uid']}/{panel.get('title')}/{target.get('refId')}"
                    instant = bool(target.get("instant")) and not target.get("range")
                    least = check._seconds(str(panel.get("interval") or ""))
                    out.append((name, expr, json.dumps(values), instant, least))
    return out


def measure_panels(
    url: str, prometheus: Prometheus, dash_dir: Path, repeat: int, only: list[str] | None = None
) -> list[dict]:
    rows = []
    now = time.time()
    for name, expr, values_text, instant, least in panel_queries(prometheus, dash_dir, only):
        values = json.loads(values_text)
        for range_name, seconds in RANGES.items():
            for step_name, asked in STEPS.items():
                step = max(asked, least)  # Grafana: the panel's min interval wins
                # Grafana: $__interval is the step, $__rate_interval max(4 scrapes, step + scrape)
                rate = max(4 * SCRAPE_SECONDS, step + SCRAPE_SECONDS)
                filled = dict(
                    values,
                    __interval=f"{step}s",
                    __rate_interval=f"{rate}s",
                    __range=range_name,
                    __range_s=str(seconds),
                )
                query = check.substitute(expr, filled)
                times, error = [], ""
                for _ in range(repeat):
                    elapsed, error = query_range(
                        url, query, now - seconds, now, step, instant=instant
                    )
                    times.append(elapsed)
                    if error:
                        break
                times.sort()
                p95 = times[min(len(times) - 1, math.ceil(0.95 * len(times)) - 1)]
                rows.append(
                    {
                        "panel": name,
                        "range": range_name,
                        "step": step_name,
                        "query": "instant" if instant else "range",
                        "step_seconds": step,
                        "p95_seconds": round(p95, 4),
                        "median_seconds": round(statistics.median(times), 4),
                        "error": error,
                        "meets_target": not error
                        and (range_name != "24h" or p95 < TARGET_PANEL_SECONDS),
                    }
                )
    return rows


def summary(panels: list[dict[str, Any]]) -> dict[str, Any]:
    """The slowest p95 per range and step, and the panel queries off target."""
    out: dict[str, Any] = {"panel_queries": len({row["panel"] for row in panels})}
    for range_name in RANGES:
        for step_name in STEPS:
            rows = [r for r in panels if r["range"] == range_name and r["step"] == step_name]
            worst = max(rows, key=lambda r: r["p95_seconds"], default=None)
            if worst:
                out[f"max_p95_{range_name}_{step_name}"] = worst["p95_seconds"]
                out[f"slowest_{range_name}_{step_name}"] = worst["panel"]
    out["off_target"] = [
        f"{r['panel']} {r['range']}/{r['step']}: {r['error'] or r['p95_seconds']}"
        for r in panels
        if not r["meets_target"]
    ]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the Alps size")
    parser.add_argument("--history-hours", type=float, default=24.0)
    parser.add_argument("--history-step", type=int, default=60, help="seconds between samples")
    parser.add_argument(
        "--evaluations", type=int, default=6, help="rule rounds measured (after two)"
    )
    parser.add_argument("--repeat", type=int, default=5, help="runs of each panel query")
    parser.add_argument("--keep", type=Path, help="keep the data directory here")
    parser.add_argument("--no-panels", action="store_true", help="skip the panel queries")
    parser.add_argument(
        "--dashboard", action="append", metavar="UID", help="only this dashboard's panels"
    )
    parser.add_argument(
        "--rules-of",
        action="append",
        default=[],
        metavar="GROUP",
        help="print every rule of this group by its mean time (besides the slowest rules)",
    )
    parser.add_argument(
        "--lustre-client",
        choices=LUSTRE_CLIENT,
        default="lean",
        help="what each GPU node's Lustre client exports (default lean: "
        "--lustre.client-target-space=false --lustre.client-target-imports=false; "
        "no-space: the first only; full: the default collector; none)",
    )
    parser.add_argument(
        "--second-site",
        type=float,
        default=0.0,
        help="add a second site of this fraction of the first (0.25: a quarter)",
    )
    args = parser.parse_args(argv)
    prometheus_bin, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if not prometheus_bin or not promtool:
        print("site_scale: needs prometheus and promtool on PATH", file=sys.stderr)
        return 2

    work = Path(tempfile.mkdtemp(prefix="gotthard-site-"))
    servers: list[ThreadingHTTPServer] = []
    proc = None
    try:
        started = time.monotonic()
        shard_list = shards(args.scale, args.second_site, args.lustre_client)
        servers, addresses = serve(shard_list)
        series = sum(s.series for s in shard_list)
        print(
            json.dumps(
                {
                    "scale": args.scale,
                    "lustre_client": args.lustre_client,
                    "site": counts(args.scale),
                    "second_site": counts(args.scale * args.second_site)
                    if args.second_site
                    else None,
                    "targets": len(shard_list),
                    "exposed_series": series,
                    "build_seconds": round(time.monotonic() - started, 1),
                }
            ),
            flush=True,
        )
        gotthard("rules", "build", "--out", str(work / "rules"))
        gotthard("dashboards", "build", "--out", str(work / "dashboards"))
        data = work / "data"
        data.mkdir()
        if args.history_hours > 0:
            started = time.monotonic()
            end = int(time.time()) - 2 * SCRAPE_SECONDS
            begin = end - int(args.history_hours * 3600)
            samples = backfill(promtool, shard_list, work, data, begin, end, args.history_step)
            print(
                json.dumps(
                    {
                        "history_hours": args.history_hours,
                        "history_step_seconds": args.history_step,
                        "history_samples": samples,
                        "backfill_seconds": round(time.monotonic() - started, 1),
                    }
                ),
                flush=True,
            )
        port = free_port()
        self_address = f"127.0.0.1:{port}"
        (work / "prometheus.yml").write_text(prometheus_config(addresses, shard_list, self_address))
        proc = subprocess.Popen(
            [
                prometheus_bin,
                f"--config.file={work / 'prometheus.yml'}",
                f"--storage.tsdb.path={data}",
                f"--web.listen-address={self_address}",
                "--storage.tsdb.retention.time=3d",
                "--log.level=warn",
            ],
            cwd=work,
            stderr=(work / "prometheus.log").open("w"),
        )
        url = f"http://{self_address}"
        wait_ready(url, proc, 600)
        prometheus = Prometheus(url, timeout=300)
        if args.history_hours > 0:
            print(json.dumps(backfill_rules(promtool, url, work, data, begin, end)), flush=True)
        # every target scraped, then the rules evaluated a few rounds over the live data
        # (two rounds for the first scrapes, then one sample of every rule per round)
        time.sleep(SCRAPE_SECONDS * 2)
        samples = []
        for _ in range(args.evaluations):
            time.sleep(SCRAPE_SECONDS)
            samples.append(rule_times(url))
        window = SCRAPE_SECONDS * args.evaluations
        for row in rule_groups(prometheus, window):
            print(json.dumps(row), flush=True)
        for row in slowest_rules(samples):
            print(json.dumps(row), flush=True)
        if args.rules_of:
            for row in slowest_rules(samples, groups=tuple(args.rules_of)):
                print(json.dumps({**row, "every_rule_of_group": True}), flush=True)
        print(json.dumps(head(prometheus)), flush=True)
        print(json.dumps(global_view(url, prometheus)), flush=True)
        if not args.no_panels:
            panels = measure_panels(
                url, prometheus, work / "dashboards", args.repeat, args.dashboard
            )
            for row in panels:
                print(json.dumps(row), flush=True)
            print(json.dumps(summary(panels)), flush=True)
            for row in rule_groups(prometheus, window):  # again, under the panel load
                print(json.dumps({**row, "after_panels": True}), flush=True)
            print(json.dumps({**head(prometheus), "after_panels": True}), flush=True)
    except (PrometheusError, subprocess.CalledProcessError, OSError) as err:
        print(f"site_scale: {err}", file=sys.stderr)
        return 2
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        for server in servers:
            server.shutdown()
        if args.keep:
            shutil.copytree(work, args.keep, dirs_exist_ok=True)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
