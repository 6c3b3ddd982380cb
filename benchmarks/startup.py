#!/usr/bin/env python3
"""Start-up cost of ``gotthard exporter --once`` per collector, against ``python -c pass``.

For each case the whole command runs as a fresh process, as a node's systemd unit or a
``--once`` cron job would run it. Printed, one JSON line per case:

* ``wall_seconds``: median wall time of the process (start to exit), and
  ``best_wall_seconds`` the fastest run;
* ``cpu_seconds``: median user + system CPU time of the process (less sensitive to other
  load on the machine than the wall time);
* ``max_rss_mb``: peak resident memory of the process (``ru_maxrss`` of the child);
* ``import_seconds``: the cumulative import time of ``gotthard`` and everything it pulls
  in, from ``python -X importtime`` (one extra run);
* ``heavy_modules``: which of the control plane's libraries the process loaded (must be
  none: kubernetes, apscheduler, sqlalchemy, regopy, grafanalib, grpc).

Cases: ``bare`` (``python -c pass``), ``slurm`` on recorded slurmctld output (the
recorded ``squeue``/``sinfo``/``sdiag``/``scontrol`` of tests/fixtures), ``slingshot``
and ``lustre`` on fixture trees, ``gpu`` on the fake libnvidia-ml.so.1 with an 8-GPU
H200 fixture (skipped when gcc or the NVML header is missing). Target: ``slurm`` within
0.25 s wall and 45 MB RSS.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FIXTURES = ROOT / "tests" / "fixtures"
HEAVY = ("kubernetes", "apscheduler", "sqlalchemy", "regopy", "grafanalib", "grpc")
RUNS = 7
TARGETS = {"slurm": {"wall_seconds": 0.25, "max_rss_mb": 45.0}}


def run_once(argv: Sequence[str], env: Mapping[str, str]) -> tuple[float, float, float]:
    """Wall seconds, peak RSS (MB) and CPU seconds (user + system) of one run of *argv*."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, env=dict(env), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.read()!r}")
    return wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def import_profile(argv: Sequence[str], env: Mapping[str, str]) -> tuple[float, list[str]]:
    """Cumulative import seconds of top-level imports, and the heavy modules loaded."""
    result = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:]],
        env=dict(env),
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    total = 0
    loaded: set[str] = set()
    for line in result.stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+(\d+) \|( *)(\S+)", line)
        if not match:
            continue
        cumulative, indent, module = int(match[1]), match[2], match[3]
        if len(indent) == 1:  # a top-level import: its cumulative time counts once
            total += cumulative
        root = module.split(".")[0]
        if root in HEAVY:
            loaded.add(root)
    return total / 1e6, sorted(loaded)


def measure(name: str, argv: Sequence[str], env: Mapping[str, str]) -> dict[str, object]:
    run_once(argv, env)  # warm: page cache and byte-code caches
    runs = [run_once(argv, env) for _ in range(RUNS)]
    import_seconds, heavy = import_profile(argv, env)
    row: dict[str, object] = {
        "case": name,
        "wall_seconds": round(statistics.median(w for w, _, _ in runs), 4),
        "best_wall_seconds": round(min(w for w, _, _ in runs), 4),
        # CPU time is what a loaded machine inflates least: read it beside the wall time
        "cpu_seconds": round(statistics.median(c for _, _, c in runs), 4),
        "max_rss_mb": round(max(r for _, r, _ in runs), 1),
        "import_seconds": round(import_seconds, 4),
        "heavy_modules": heavy,
    }
    target = TARGETS.get(name)
    if target:
        row["target"] = target
        row["meets_target"] = all(float(row[k]) <= v for k, v in target.items())  # type: ignore[arg-type]
    return row


def gpu_env(tmp: Path, base: Mapping[str, str]) -> dict[str, str] | None:
    try:
        from tests.fakenvml import fakenvml

        so_path = fakenvml.build(tmp)
    except Exception as err:  # no gcc or no nvml.h: say so, measure the rest
        print(json.dumps({"case": "gpu", "skipped": f"fake NVML not built: {err}"}))
        return None
    fixture = fakenvml.Fixture(tmp / "fixture.txt", fakenvml.h200_node(8))
    return fakenvml.subprocess_env(so_path, fixture.path, base)


def main() -> None:
    python = sys.executable
    # as installed: byte-code caches are used (a first run writes them, then it is warm)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("GOTTHARD_CONFIG", "PYTHONDONTWRITEBYTECODE")
    }
    once = [python, "-m", "gotthard"]
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        site = tmp / "site.toml"
        site.write_text(f'[exporter.slurm]\nbin_dir = "{FIXTURES / "recorded-slurm-bin"}"\n')
        lustre = FIXTURES / "lustre" / "oss-2.15"
        cases: list[tuple[str, list[str], Mapping[str, str]]] = [
            ("bare", [python, "-c", "pass"], env),
            ("slurm", [*once, "--config", str(site), "exporter", "--once"], env),
            (
                "slingshot",
                [
                    *once,
                    "exporter",
                    "--once",
                    "--collectors",
                    "slingshot",
                    "--path.sysfs",
                    str(FIXTURES / "slingshot" / "node"),
                ],
                env,
            ),
            (
                "lustre",
                [
                    *once,
                    "exporter",
                    "--once",
                    "--collectors",
                    "lustre",
                    "--path.procfs",
                    str(lustre / "proc"),
                    "--path.sysfs",
                    str(lustre / "sys"),
                ],
                env,
            ),
        ]
        gpu = gpu_env(tmp, env)
        if gpu is not None:
            gpu_argv = [*once, "exporter", "--once", "--collectors", "gpu"]
            cases.append(("gpu", gpu_argv, gpu))
        for name, argv, case_env in cases:
            print(json.dumps(measure(name, argv, case_env)), flush=True)


if __name__ == "__main__":
    main()
