#!/usr/bin/env python3
"""Disk cost of each role's install: site-packages of a fresh virtual environment holding
the wheel with one extra (dependencies from the package index; pip's cache is used).

Printed, one JSON line per case: ``extra`` ("" is the base install, a node exporter),
``site_packages_mb``, ``distributions`` (how many are installed) and ``seconds`` (the
install's wall time). Needs network access to the package index.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.install import (  # noqa: E402 (after the path set-up above)
    build_wheel,
    installed,
    make_venv,
    site_packages,
    tree_mb,
)

CASES = ("", "kubelet", "dr", "policy", "dashboards", "runbooks", "all")


def main() -> None:
    only = sys.argv[1:] or CASES
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        wheel = build_wheel(tmp)
        for extra in only:
            start = time.perf_counter()
            python = make_venv(tmp / f"venv-{extra or 'base'}", wheel, extra)
            row = {
                "extra": extra,
                "site_packages_mb": tree_mb(site_packages(python)),
                "distributions": len(installed(python)),
                "seconds": round(time.perf_counter() - start, 1),
            }
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
