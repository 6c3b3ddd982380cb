"""Compliance metrics as a node-exporter textfile (names used by the security dashboard).

* ``gotthard_kube_bench_checks{status,node_type}``: checks per status (pass/fail/warn/info)
  and node type, zeros included;
* ``gotthard_kube_bench_check_failed{id,node_type}``: 1 per failed, unwaived baseline check;
* ``gotthard_policy_violations{policy,rule}``: current violations per rule, zeros included;
* ``gotthard_kube_bench_waiver_expiry_timestamp_seconds{id,owner}``: when a waiver ends;
* ``gotthard_audit_last_run_timestamp_seconds{textfile}``: when the textfile was written.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

from gotthard.exposition import MetricFamily, gauge, render_text
from gotthard.policies.engine import PolicyError, Violation
from gotthard.policies.kube_bench import STATUSES, Report
from gotthard.policies.testing import load_rules

#: Metric name -> (help, labels) of every family these textfiles carry; labels in name
#: order, as the textfiles have always written them.
FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "gotthard_kube_bench_checks": (
        "kube-bench checks by status and node type",
        ("node_type", "status"),
    ),
    "gotthard_kube_bench_check_failed": (
        "1 for a baseline CIS check that failed and no valid waiver covers",
        ("id", "node_type"),
    ),
    "gotthard_policy_violations": (
        "current policy violations by policy and rule",
        ("policy", "rule"),
    ),
    "gotthard_kube_bench_waiver_expiry_timestamp_seconds": (
        "end of the day a kube-bench waiver expires (Unix seconds, UTC)",
        ("id", "owner"),
    ),
    "gotthard_audit_last_run_timestamp_seconds": (
        "Unix time the audit wrote this textfile.",
        ("textfile",),
    ),
}


def _family(name: str) -> MetricFamily:
    """The empty :data:`FAMILIES` gauge *name*."""
    help_text, labels = FAMILIES[name]
    return gauge(name, help_text, *labels)


def kube_bench_families(
    report: Report, failed: Iterable[str], waivers: Iterable[Mapping[str, str]] = ()
) -> list[MetricFamily]:
    """*waivers* (``load_waivers``: id, owner, ``expires`` as an ISO date) add their
    expiry, so that an alert can warn before a waived check starts failing."""
    checks = _family("gotthard_kube_bench_checks")
    failed_g = _family("gotthard_kube_bench_check_failed")
    expiry = _family("gotthard_kube_bench_waiver_expiry_timestamp_seconds")
    ends: dict[tuple[str, str], float] = {}
    for waiver in waivers:
        day = dt.date.fromisoformat(waiver["expires"])
        end = dt.datetime.combine(day, dt.time.max, tzinfo=dt.UTC)
        ends[(waiver["id"], waiver["owner"])] = float(round(end.timestamp()))
    expiry.samples.extend(ends.items())
    counts = Counter((c.status.lower(), c.node_type) for c in report.checks)
    for node_type in sorted({c.node_type for c in report.checks}) or ["unknown"]:
        for status in STATUSES:
            checks.add((node_type, status), float(counts[(status, node_type)]))
    types = {c.id: c.node_type for c in report.checks}
    for check_id in dict.fromkeys(failed):
        failed_g.add((check_id, types.get(check_id, "unknown")), 1.0)
    return [checks, failed_g, expiry]


def violation_counts(violations: Iterable[Violation]) -> dict[tuple[str, str], int]:
    """(policy, rule) -> how many of *violations* it has, every rule of rules.yml present
    (zeros included); a rule rules.yml does not know counts under policy ``unknown``."""
    rules = load_rules()
    counts = {(r["policy"], r["id"]): 0 for r in rules}
    policy_of = {r["id"]: r["policy"] for r in rules}
    for v in violations:
        key = (policy_of.get(v.rule, "unknown"), v.rule)
        counts[key] = counts.get(key, 0) + 1
    return counts


def violations_families(counts: Mapping[tuple[str, str], int]) -> list[MetricFamily]:
    """``counts``: (policy, rule) -> violations; pass every known rule to export zeros."""
    family = _family("gotthard_policy_violations")
    for key, n in sorted(counts.items()):
        family.add(key, float(n))
    return [family]


def textfile_text(name: str, families: Iterable[MetricFamily]) -> str:
    """The textfile *name* holding *families* and the time it is written."""
    # when this textfile was written: the alerts tell a stale audit from a clean one
    written = _family("gotthard_audit_last_run_timestamp_seconds")
    written.add((name,), time.time())
    return render_text([*families, written])


def write_textfile(path: str | Path, families: Iterable[MetricFamily]) -> None:
    """Write *families* and the time of writing atomically (temp file + rename), as the
    textfile collector requires; a path that cannot be written is a
    :class:`PolicyError` (exit 2)."""
    path = Path(path)
    text = textfile_text(path.name, families)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError as err:
        raise PolicyError(f"--textfile {path}: cannot write: {err}") from err
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise PolicyError(f"--textfile {path}: cannot write: {err}") from err
        raise
