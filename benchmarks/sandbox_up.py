#!/usr/bin/env python3
"""How long the two-site sandbox takes to come up and go down.

``gotthard sandbox up --sites zurich,lugano`` must be up in 60 s on a 2-core machine.
This starts it ``--runs`` times in a fresh temporary directory on free ports (so it runs
next to a developer's sandbox), and measures:

* ``up_seconds``: from ``up()`` (writing the site file and rendering it with ``gotthard
  deploy render --target local`` included) to every process answering (two Slurm
  clusters, exporters, three Prometheus, two clustered Alertmanagers, two webhooks, two
  emulated API servers, the emulated Karmada API, the simulated Velero and two DR daemon
  replicas);
* ``down_seconds``: ``down()`` until every process it started has exited;
* ``processes``: how many processes ``status()`` listed.

Needs the Debian Slurm/munge/Prometheus/Alertmanager packages (``make system-deps``) and
the ``sandbox`` extra. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from gotthard.sandbox.sites import MultiSiteSandbox


def one_run(directory: Path) -> dict[str, float]:
    sandbox = MultiSiteSandbox.with_free_ports(directory)
    started = time.monotonic()
    try:
        sandbox.up(verbose=False)
        up = time.monotonic() - started
        processes = len(sandbox.status())
    finally:
        stopping = time.monotonic()
        sandbox.down(verbose=False)
    return {"up": up, "down": time.monotonic() - stopping, "processes": processes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="how many times (default 3)")
    args = parser.parse_args()
    runs = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="gotthard-bench-") as tmp:
            runs.append(one_run(Path(tmp)))
    ups = [r["up"] for r in runs]
    print(
        json.dumps(
            {
                "cpus": os.cpu_count(),
                "runs": len(runs),
                "up_seconds": {
                    "median": round(statistics.median(ups), 2),
                    "max": round(max(ups), 2),
                },
                "down_seconds_max": round(max(r["down"] for r in runs), 2),
                "processes": runs[-1]["processes"],
                "target_up_seconds": 60,
            }
        )
    )


if __name__ == "__main__":
    main()
