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
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from gotthard.policies.engine import PolicyError, Violation
from gotthard.policies.kube_bench import STATUSES, Report
from gotthard.policies.testing import load_rules

#: Metric name -> (help, labels) of every family these textfiles carry.
FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "gotthard_kube_bench_checks": (
        "kube-bench checks by status and node type",
        ("status", "node_type"),
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
}


def _gauges(
    registry: CollectorRegistry | None, *names: str
) -> tuple[CollectorRegistry, list[Gauge]]:
    """*registry* (a new one if None) and the :data:`FAMILIES` gauges *names* on it."""
    registry = registry or CollectorRegistry()
    gauges = [Gauge(name, *FAMILIES[name], registry=registry) for name in names]
    return registry, gauges


def kube_bench_registry(
    report: Report,
    failed: Iterable[str],
    registry: CollectorRegistry | None = None,
    waivers: Iterable[Mapping[str, str]] = (),
) -> CollectorRegistry:
    """*waivers* (``load_waivers``: id, owner, ``expires`` as an ISO date) add their
    expiry, so that an alert can warn before a waived check starts failing."""
    registry, (checks, failed_g, expiry) = _gauges(
        registry,
        "gotthard_kube_bench_checks",
        "gotthard_kube_bench_check_failed",
        "gotthard_kube_bench_waiver_expiry_timestamp_seconds",
    )
    for waiver in waivers:
        ends = dt.datetime.combine(
            dt.date.fromisoformat(waiver["expires"]), dt.time.max, tzinfo=dt.UTC
        )
        expiry.labels(id=waiver["id"], owner=waiver["owner"]).set(round(ends.timestamp()))
    counts = Counter((c.status.lower(), c.node_type) for c in report.checks)
    for node_type in sorted({c.node_type for c in report.checks}) or ["unknown"]:
        for status in STATUSES:
            checks.labels(status=status, node_type=node_type).set(counts[(status, node_type)])
    types = {c.id: c.node_type for c in report.checks}
    for check_id in failed:
        failed_g.labels(id=check_id, node_type=types.get(check_id, "unknown")).set(1)
    return registry


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


def violations_registry(
    counts: Mapping[tuple[str, str], int], registry: CollectorRegistry | None = None
) -> CollectorRegistry:
    """``counts``: (policy, rule) -> violations; pass every known rule to export zeros."""
    registry, (gauge,) = _gauges(registry, "gotthard_policy_violations")
    for (policy, rule), n in sorted(counts.items()):
        gauge.labels(policy=policy, rule=rule).set(n)
    return registry


def write_textfile(path: str | Path, registry: CollectorRegistry) -> None:
    """Write atomically (temp file + rename), as the textfile collector requires; a path
    that cannot be written is a :class:`PolicyError` (exit 2)."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError as err:
        raise PolicyError(f"--textfile {path}: cannot write: {err}") from err
    # when this textfile was written: the alerts tell a stale audit from a clean one
    written = CollectorRegistry()
    Gauge(
        "gotthard_audit_last_run_timestamp_seconds",
        "Unix time the audit wrote this textfile.",
        ("textfile",),
        registry=written,
    ).labels(textfile=path.name).set_to_current_time()
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(generate_latest(registry) + generate_latest(written))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise PolicyError(f"--textfile {path}: cannot write: {err}") from err
        raise
