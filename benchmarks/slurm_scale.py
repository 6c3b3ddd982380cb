#!/usr/bin/env python3
"""Scale benchmark of the Slurm cli backend: parse + render on a synthetic cluster.

Builds the text that ``squeue``/``sinfo``/``sdiag`` would print for a cluster of
100,000 jobs and 10,000 nodes (in exactly the formats the cli backend asks for), then
measures, in a fresh process pinned to one core:

* ``baseline_seconds``: reading the files and splitting every line into fields
  (``baseline_discard_seconds``: the same, dropping each row at once);
* ``parse_seconds``: the real parsers building the snapshot;
* ``render_seconds``: the real rendering to metric families and exposition text.

Prints one JSON line per size (a 10x smaller run first, so growth is visible)::

    {"jobs":…, "nodes":…, "parse_seconds":…, "render_seconds":…, "total_seconds":…,
     "baseline_seconds":…, "peak_rss_mb":…, "samples":…, "bytes":…}

Then, for the 10x smaller cluster (10,000 jobs), the exporter as it runs: a fresh process
with the exporter runtime and the real cli backend, running commands that print those
files, polled 10 times; it prints ``{"steady_rss_mb":…, "polls": 10, …}``: resident memory
after the 10th poll, what a long-running exporter holds.

Last, ``gotthard exporter`` as a node runs it: a fresh ``python -m gotthard exporter``
process serving HTTP, on commands that print a 5,000-job cluster, scraped 10 times (one
poll per scrape); it prints ``{"serving_rss_mb":…, "serving_peak_rss_mb":…}`` (VmRSS and
VmHWM of that process). That is the size of the comparison with vpenso's Go exporter on a
5,000-job Slurm (about 42 MB).

Targets on one core: total <= 1.0 s, total <= 3x baseline, peak RSS <= 300 MB; steady
RSS at 10,000 jobs <= 45 MB; serving RSS at 5,000 jobs <= 42 MB. No Slurm is needed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gotthard.slurm.cli import CommandOutput

STATES = (
    ["PENDING"] * 55
    + ["RUNNING"] * 30
    + ["COMPLETED"] * 8
    + ["FAILED"] * 3
    + ["CANCELLED"] * 2
    + ["COMPLETING"]
    + ["TIMEOUT"]
)
REASONS = (
    ["Priority"] * 6
    + ["Resources"] * 3
    + [
        "Dependency",
        "JobHeldUser",
        "QOSMaxJobsPerUserLimit",
        "AssocGrpGRES",
        "ReqNodeNotAvail, UnavailableNodes:nid[00012-00020]",
        "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority "
        "partitions",
    ]
)
GPU_FORMS = [("N/A", "N/A", "N/A")] * 6 + [
    ("N/A", "gres:gpu:4", "N/A"),
    ("gres:gpu:8", "N/A", "N/A"),
    ("N/A", "gres:gpu:a100:2", "N/A"),
    ("N/A", "N/A", "gres:gpu:1"),
]
PARTITIONS = ["normal", "debug", "gpu", "large", "long", "interactive", "a100", "cpu-hm"]
NODE_STATES = (
    ["mixed"] * 5
    + ["allocated"] * 8
    + ["idle"] * 3
    + [
        "idle+drain",
        "mixed+drain",
        "down+not_responding",
        "idle+maint+reserved",
    ]
)


def generate(directory: Path, jobs: int, nodes: int, seed: int = 7, distinct: bool = False) -> None:
    """Write squeue/sinfo/sdiag outputs of a synthetic cluster to *directory*.

    The default workload is shaped like a real queue: each user works in one account
    and submits a few kinds of job (arrays and sweeps), a few heavy users own most
    jobs. ``distinct=True`` instead gives every job its own shape (the worst case
    for the parser's grouping).
    """
    rng = random.Random(seed)
    users = [f"user{i:04d}" for i in range(max(jobs // 50, 10))]
    accounts = [f"proj{i:03d}" for i in range(max(jobs // 500, 5))]
    kinds = {
        user: [
            (
                rng.choice(accounts),
                rng.choice(PARTITIONS),
                rng.choice((1, 1, 1, 2, 4, 16)),
                rng.choice((1, 2, 4, 8, 16, 32, 64, 128)),
                rng.choice(GPU_FORMS),
            )
            for _ in range(rng.randint(1, 4))
        ]
        for user in users
    }
    weights = [1 / (rank + 1) for rank in range(len(users))]  # a few heavy users
    chosen = rng.choices(users, weights=weights, k=jobs)
    lines = []
    for job_id, user in enumerate(chosen, start=1):
        account, partition, n_nodes, cpus, gres = rng.choice(kinds[user])
        if distinct:
            account, partition = rng.choice(accounts), rng.choice(PARTITIONS)
            n_nodes = rng.randint(1, 64)
            cpus = rng.randint(1, 256) * n_nodes
            gres = rng.choice(GPU_FORMS)
        state = rng.choice(STATES)
        reason = rng.choice(REASONS) if state == "PENDING" else "None"
        per_job, per_node, per_task = gres
        lines.append(
            f"{state}|{partition}|{account}|{cpus * n_nodes}|{n_nodes}|{n_nodes}|"
            f"{per_job}|{per_node}|{per_task}|N/A|{reason}|{user}|{job_id}|"
        )
    (directory / "squeue.txt").write_text("\n".join(lines) + "\n")
    node_lines = []
    # per partition: nodes, then CPUs allocated, idle, other, total (sinfo's partition view)
    sums = {partition: [0, 0, 0, 0, 0] for partition in PARTITIONS}
    for index in range(1, nodes + 1):
        name = f"nid{index:05d}"
        state = rng.choice(NODE_STATES)
        gpus = 4 if index % 4 == 0 else 0
        total = 128
        alloc = 0 if state.startswith(("idle", "down")) else rng.choice((32, 64, 128))
        other = total if state.startswith("down") else 0
        idle = total - alloc - other
        gres = f"gpu:a100:{gpus}(S:0-1)" if gpus else "(null)"
        used = f"gpu:a100:{min(gpus, alloc // 32)}(IDX:0-1)" if gpus else "(null)"
        reason = "gpu lost: XID 79" if "drain" in state else "none"
        for partition in (
            (PARTITIONS[index % 3], "large") if index % 2 else (PARTITIONS[index % 8],)
        ):
            star = "*" if partition == "normal" else ""
            row = sums[partition]
            for column, value in enumerate((1, alloc, idle, other, total)):
                row[column] += value
            node_lines.append(
                f"{name}|{partition}{star}|{state}|{alloc}/{idle}/{other}/{total}|515000|"
                f"{alloc * 4000}|{gres}|{used}|{alloc / 32:.2f}|{reason}|"
            )
    (directory / "sinfo-nodes.txt").write_text("\n".join(node_lines) + "\n")
    (directory / "sinfo-partitions.txt").write_text(
        "".join(
            f"{p}{'*' if p == 'normal' else ''}|up|{n}|{a}/{i}/{o}/{t}|\n"
            for p, (n, a, i, o, t) in sums.items()
        )
    )
    rpc = "\n".join(
        f"\tREQUEST_{name:<34}( {2000 + i}) count:{1000 * (i + 1)} ave_time:{100 + i} "
        f"total_time:{(100 + i) * 1000 * (i + 1)}"
        for i, name in enumerate(("JOB_INFO", "NODE_INFO", "PARTITION_INFO", "SUBMIT_BATCH_JOB"))
    )
    (directory / "sdiag.txt").write_text(
        "Server thread count:  3\nAgent queue size:     0\nDBD Agent queue size: 0\n\n"
        "Main schedule statistics (microseconds):\n\tLast cycle:   1758\n\tMax cycle:    9000\n"
        "\tTotal cycles: 200\n\tMean cycle:   891\n\tLast queue length: 4000\n\n"
        "Backfilling stats\n\tTotal backfilled jobs (since last slurm start): 120\n"
        "\tTotal cycles: 10\n\tLast cycle: 5100\n\tMean cycle: 5300\n\tDepth Mean: 200\n"
        "\tLast queue length: 2000\n\n"
        f"Remote Procedure Call statistics by message type\n{rpc}\n\n"
        "Remote Procedure Call statistics by user\n"
        "\troot            (       0) count:36     ave_time:320    total_time:11553\n"
    )


#: ``assemble``'s output key -> the file :func:`generate` writes it to.
FILES = {
    "squeue": "squeue.txt",
    "nodes": "sinfo-nodes.txt",
    "partitions": "sinfo-partitions.txt",
    "sdiag": "sdiag.txt",
}


def read_outputs(directory: Path) -> dict[str, CommandOutput]:
    """The command outputs :func:`generate` wrote to *directory*, as ``assemble`` takes them."""
    from gotthard.slurm.cli import CommandOutput

    return {key: CommandOutput((directory / name).read_text()) for key, name in FILES.items()}


def measure(directory: Path) -> dict[str, float | int]:
    """Time baseline, parse and render on the files in *directory* (this process)."""
    from gotthard.exporters.families import render_text
    from gotthard.exporters.slurm.render import render
    from gotthard.slurm.cli import assemble
    from gotthard.slurm.snapshot import PollOptions

    options = PollOptions(per_user=False, job_info=True, probe=False)

    started = time.perf_counter()
    snapshot = assemble(read_outputs(directory), options)
    parse = time.perf_counter() - started

    started = time.perf_counter()
    families = render(snapshot, options)
    text = render_text(families)
    rendered = time.perf_counter() - started

    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    # Baseline: read every file and split it into rows of fields, kept in memory, which
    # is the least any parser of this text does. The "discard" variant drops each row
    # right away (cheaper, since nothing stays allocated); both are reported.
    started = time.perf_counter()
    rows = [
        [line.split("|") for line in (directory / name).read_text().splitlines()]
        for name in FILES.values()
    ]
    baseline = time.perf_counter() - started
    del rows
    started = time.perf_counter()
    for name in FILES.values():
        for line in (directory / name).read_text().splitlines():
            line.split("|")
    baseline_discard = time.perf_counter() - started

    jobs = sum(group.count for group in snapshot.job_groups)
    return {
        "jobs": jobs,
        "nodes": len(snapshot.nodes),
        "parse_seconds": round(parse, 4),
        "render_seconds": round(rendered, 4),
        "total_seconds": round(parse + rendered, 4),
        "baseline_seconds": round(baseline, 4),
        "baseline_discard_seconds": round(baseline_discard, 4),
        "ratio_to_baseline": round((parse + rendered) / baseline, 2),
        "ratio_to_baseline_discard": round((parse + rendered) / baseline_discard, 2),
        "peak_rss_mb": round(peak_rss_mb, 1),
        "samples": sum(len(f.samples) for f in families),
        "bytes": len(text),
        "errors": snapshot.errors,
    }


_FAKE_COMMAND = """#!/bin/sh
# prints the benchmark's recorded output for the argv the cli backend uses
case "$(basename "$0") $*" in
  *--version*) echo "slurm-wlm 22.05.8" ;;
  "squeue "*) cat "{dir}/squeue.txt" ;;
  "sinfo "*-N*) cat "{dir}/sinfo-nodes.txt" ;;
  "sinfo "*) cat "{dir}/sinfo-partitions.txt" ;;
  "sdiag"*) cat "{dir}/sdiag.txt" ;;
  *) echo "No reservations in the system" ;;
esac
"""


SERVING_JOBS = 5_000
SERVING_TARGET_MB = 42.0


def fake_slurm(directory: Path) -> Path:
    """A bin directory of Slurm commands printing the files of *directory*."""
    bin_dir = directory / "bin"
    bin_dir.mkdir(exist_ok=True)
    for command in ("squeue", "sinfo", "sdiag", "scontrol", "sacctmgr"):
        script = bin_dir / command
        script.write_text(_FAKE_COMMAND.format(dir=directory))
        script.chmod(0o755)
    return bin_dir


def serving(directory: Path, scrapes: int = 10) -> dict[str, object]:
    """VmRSS/VmHWM of a ``gotthard exporter`` process after *scrapes* scrapes."""
    import socket
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    site = directory / "site.toml"
    site.write_text(
        f'[exporter]\nlisten = "127.0.0.1:{port}"\n'
        f'[exporter.slurm]\nbin_dir = "{fake_slurm(directory)}"\npoll_interval_seconds = 1\n'
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "gotthard", "--config", str(site), "exporter"],
        stderr=subprocess.DEVNULL,
        cwd=Path(__file__).resolve().parent.parent,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/healthz", timeout=5).read()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("the exporter did not start") from None
                time.sleep(0.1)
        for _ in range(scrapes):
            urllib.request.urlopen(f"{url}/metrics", timeout=60).read()
            time.sleep(1.05)  # past the poll interval: every scrape polls
        status = dict(
            line.split(":", 1) for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines()
        )
    finally:
        proc.terminate()
        proc.wait(30)
    rss, peak = (int(status[key].split()[0]) / 1024 for key in ("VmRSS", "VmHWM"))
    return {
        "serving_rss_mb": round(rss, 1),
        "serving_peak_rss_mb": round(peak, 1),
        "scrapes": scrapes,
        "target_mb": SERVING_TARGET_MB,
        "meets_target": rss <= SERVING_TARGET_MB,
    }


def _rss_mb() -> float:
    """Resident set size of this process now (not its peak), in MB."""
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)


def steady(directory: Path, polls: int = 10) -> dict[str, float | int]:
    """RSS of an exporter process after *polls* polls of the cli backend on *directory*."""
    from gotthard.exporters.runtime import CollectorRunner, Exporter
    from gotthard.exporters.settings import SlurmExporterConfig
    from gotthard.exporters.slurm.collector import SlurmCollector

    bin_dir = fake_slurm(directory)
    config = SlurmExporterConfig(poll_interval_seconds=1e-3, bin_dir=str(bin_dir), probe=False)
    exporter = Exporter([CollectorRunner(SlurmCollector(config))])
    before = _rss_mb()
    size = 0
    for _ in range(polls):
        time.sleep(2e-3)  # past the poll interval: every scrape polls
        size = len(exporter.scrape(30.0))
    exporter.close()
    return {
        "steady_rss_mb": round(_rss_mb(), 1),
        "rss_before_first_poll_mb": round(before, 1),
        "polls": polls,
        "bytes": size,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--workload", default="realistic", help=argparse.SUPPRESS)
    parser.add_argument("--steady", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.steady:
        print(json.dumps({"jobs": args.jobs, **steady(args.steady)}))
        return 0
    if args.measure:
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
        print(json.dumps({**measure(args.measure), "workload": args.workload}))
        return 0
    sizes = [
        (args.jobs // 10, args.nodes // 10, "realistic"),
        (args.jobs, args.nodes, "realistic"),
        (args.jobs, args.nodes, "all-distinct"),
    ]
    for jobs, nodes, workload in sizes:
        with tempfile.TemporaryDirectory(prefix="gotthard-bench-") as tmp:
            generate(Path(tmp), jobs, nodes, distinct=workload == "all-distinct")
            # A fresh process per size, so peak RSS is that of parse + render alone.
            result = subprocess.run(
                [sys.executable, __file__, "--measure", tmp, "--workload", workload],
                check=True,
                capture_output=True,
                text=True,
            )
            sys.stdout.write(result.stdout)
    with tempfile.TemporaryDirectory(prefix="gotthard-bench-") as tmp:
        jobs, nodes = args.jobs // 10, args.nodes // 10
        generate(Path(tmp), jobs, nodes)
        result = subprocess.run(
            [sys.executable, __file__, "--steady", tmp, "--jobs", str(jobs)],
            check=True,
            capture_output=True,
            text=True,
        )
        sys.stdout.write(result.stdout)
    with tempfile.TemporaryDirectory(prefix="gotthard-bench-") as tmp:
        generate(Path(tmp), SERVING_JOBS, SERVING_JOBS // 10)
        print(json.dumps({"jobs": SERVING_JOBS, **serving(Path(tmp))}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
