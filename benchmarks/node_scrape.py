#!/usr/bin/env python3
"""Per-scrape cost of the node collectors (Slingshot and Lustre) on generated trees.

Prints one JSON line with two cases:

* ``slingshot``: 4 NICs (Cassini-1 and Cassini-2 runs) with the full allow-list,
  collector poll + render to exposition text, against a bare loop that opens and reads
  exactly the same files (``SlingshotCollector.source.files()``) with os.open/os.read.
  Targets: <= 10 ms per scrape and <= 2x the bare loop.
* ``lustre_job_stats``: an OSS whose OST holds 10,000 jobs in job_stats (Lustre 2.15
  format), job stats on with the default limit of 1,000, poll + render. Target: <= 0.5 s.

Trees are written to a temporary directory (tmpfs when /dev/shm exists), so file
reads cost what page-cache reads cost; on real sysfs each telemetry read also reads a
NIC register, which adds the same time to both the collector and the bare loop.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gotthard.exporters.families import render_text  # noqa: E402
from gotthard.exporters.lustre.collector import LustreCollector  # noqa: E402
from gotthard.exporters.settings import LustreExporterConfig, SlingshotExporterConfig  # noqa: E402
from gotthard.exporters.slingshot.collector import SlingshotCollector  # noqa: E402
from tests.exporters import lustre_tree, slingshot_tree  # noqa: E402

RUNS = 300


def _tmpdir() -> str:
    return tempfile.mkdtemp(
        prefix="gotthard-node-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None
    )


def bare_read(paths: list[str]) -> None:
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.read(fd, 256)
        finally:
            os.close(fd)


def slingshot_case(generation: int) -> dict[str, float]:
    root = Path(_tmpdir())
    try:
        slingshot_tree.build(root, slingshot_tree.four_nics(generation))
        collector = SlingshotCollector(SlingshotExporterConfig(), sysfs=str(root))
        files = collector.source.files()
        render_text(collector.render(collector.poll()))  # discovery
        scrape, bare = [], []
        for _ in range(RUNS):  # interleaved, so drift affects both alike
            started = time.perf_counter()
            render_text(collector.render(collector.poll()))
            scrape.append(time.perf_counter() - started)
            started = time.perf_counter()
            bare_read(files)
            bare.append(time.perf_counter() - started)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    scrape_ms = statistics.median(scrape) * 1000
    bare_ms = statistics.median(bare) * 1000
    return {
        "generation": generation,
        "nics": 4,
        "files": len(files),
        "scrape_ms": round(scrape_ms, 3),
        "bare_loop_ms": round(bare_ms, 3),
        "ratio": round(scrape_ms / bare_ms, 2),
    }


def lustre_case(jobs: int = 10_000) -> dict[str, float]:
    root = Path(_tmpdir())
    try:
        node = lustre_tree._nodes()["oss"]
        lustre_tree.write_tree(root, node, "2.15")
        stats = next(root.rglob("obdfilter/*/job_stats"))
        text = lustre_tree.build_job_stats(jobs, version="2.15", kind="ost")
        stats.write_text(text)
        collector = LustreCollector(
            LustreExporterConfig(job_stats=True),
            procfs=str(root / "proc"),
            sysfs=str(root / "sys"),
        )
        times = []
        for _ in range(5):
            started = time.perf_counter()
            output = render_text(collector.render(collector.poll()))
            times.append(time.perf_counter() - started)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {
        "jobs": jobs,
        "job_stats_bytes": len(text),
        "limit": 1000,
        "scrape_s": round(statistics.median(times), 4),
        "exposition_bytes": len(output),
    }


def main() -> int:
    result = {
        "slingshot": [slingshot_case(1), slingshot_case(2)],
        "lustre_job_stats": lustre_case(),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
