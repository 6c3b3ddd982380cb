"""kube-bench results against the baseline (``gotthard.kube_bench`` Rego) with waivers.

Parsing tolerates the report variants seen in the wild: a top-level list of controls
(``--json`` per target) or ``{"Controls": [...], "Totals": {...}}``, a missing Totals
section, and mixed key casing (``Controls``/``controls``, ``Totals``/``totals``).
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gotthard.policies.engine import Engine, PolicyError, load_file, violations_of

STATUSES = ("pass", "fail", "warn", "info")
WAIVER_KEYS = ("id", "owner", "reason", "expires")


@dataclass
class Check:
    id: str
    status: str  # upper case: PASS, FAIL, WARN, INFO
    node_type: str
    desc: str = ""


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)
    totals: dict[str, int] = field(default_factory=dict)


def _get(obj: Mapping[str, Any], *keys: str, default: Any = None) -> Any:
    """The first key present, compared case-insensitively."""
    lowered = {str(k).lower(): v for k, v in obj.items()}
    for key in keys:
        if key.lower() in lowered:
            return lowered[key.lower()]
    return default


def parse_report(doc: Any) -> Report:
    if isinstance(doc, Mapping):
        controls = _get(doc, "Controls")
        totals_doc = _get(doc, "Totals")
    else:
        controls, totals_doc = doc, None
    if not isinstance(controls, list):
        raise PolicyError("kube-bench report: no Controls list")
    report = Report()
    sums = dict.fromkeys(STATUSES, 0)
    for control in controls:
        if not isinstance(control, Mapping):
            raise PolicyError("kube-bench report: a control is not an object")
        node_type = str(_get(control, "node_type", default="") or "unknown")
        for status in STATUSES:
            sums[status] += int(_get(control, f"total_{status}", default=0) or 0)
        for test in _get(control, "tests", default=[]) or []:
            for result in _get(test, "results", default=[]) or []:
                report.checks.append(
                    Check(
                        id=str(_get(result, "test_number", default="")),
                        status=str(_get(result, "status", default="")).upper(),
                        node_type=node_type,
                        desc=str(_get(result, "test_desc", default="")),
                    )
                )
    if isinstance(totals_doc, Mapping):
        report.totals = {s: int(_get(totals_doc, f"total_{s}", default=0) or 0) for s in STATUSES}
    elif any(sums.values()):
        report.totals = sums
    else:  # neither Totals nor per-control totals: count the results
        report.totals = {s: sum(c.status == s.upper() for c in report.checks) for s in STATUSES}
    return report


def load_waivers(path: str | Path) -> list[dict[str, str]]:
    doc = load_file(path, what="waivers")
    if isinstance(doc, Mapping):
        doc = _get(doc, "waivers", default=None)
    if not isinstance(doc, list):
        raise PolicyError(f"waivers {path}: expected a list of waivers")
    out = []
    for i, w in enumerate(doc):
        if not isinstance(w, Mapping):
            raise PolicyError(f"waivers {path}: entry {i} is not a mapping")
        missing = [k for k in WAIVER_KEYS if not w.get(k)]
        if missing:
            raise PolicyError(f"waivers {path}: entry {i} lacks {', '.join(missing)}")
        expires = w["expires"]
        try:
            expires = dt.date.fromisoformat(str(expires)).isoformat()
        except ValueError as err:
            raise PolicyError(f"waivers {path}: entry {i}: expires {expires!r}: {err}") from err
        out.append({k: str(w[k]) for k in WAIVER_KEYS} | {"expires": expires})
    return out


def to_input(
    report: Report, today: str | None = None, only: Sequence[str] | None = None
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "kind": "KubeBenchResults",
        "today": today or dt.date.today().isoformat(),
        "checks": [
            {"id": c.id, "status": c.status, "node_type": c.node_type} for c in report.checks
        ],
    }
    if only:
        doc["only"] = list(only)
    return doc


def audit(
    engine: Engine, report: Report, today: str | None = None, only: Sequence[str] | None = None
) -> dict[str, Any]:
    """The audit result; ``violations`` are the baseline's rule ids and messages."""
    doc = to_input(report, today=today, only=only)
    summary = engine.query("gotthard.kube_bench", "summary", doc) or {}
    violations = violations_of(engine.query("gotthard.kube_bench", "deny", doc))
    failed = list(summary.get("failed", []))
    return {
        "totals": {s: report.totals.get(s, 0) for s in STATUSES},
        "failed": failed,
        "waived": list(summary.get("waived", [])),
        "expired_waivers": list(summary.get("expired_waivers", [])),
        "compliant": not failed,
        "violations": [v.as_dict() for v in violations],
    }


def node_types(report: Report) -> dict[str, str]:
    out: dict[str, str] = {}
    for c in report.checks:
        out.setdefault(c.id, c.node_type)
    return out


def run_kube_bench(
    targets: str | None, checks: str | None, binary: str = "kube-bench", timeout: float = 600
) -> Any:
    """Run ``kube-bench run --json`` and return its parsed output."""
    exe = shutil.which(binary)
    if exe is None:
        raise PolicyError(f"{binary} is not installed (use --report FILE)")
    cmd = [exe, "run", "--json"]
    if targets:
        cmd += ["--targets", targets]
    if checks:
        cmd += ["--check", checks]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise PolicyError(f"kube-bench failed: {err}") from err
    if proc.returncode != 0 and not proc.stdout.strip():
        raise PolicyError(f"kube-bench exited {proc.returncode}: {proc.stderr.strip()[:500]}")
    try:
        return json.loads(proc.stdout)
    except ValueError as err:
        raise PolicyError(f"kube-bench output is not JSON: {err}") from err


def format_text(result: Mapping[str, Any]) -> str:
    t = result["totals"]
    lines = [
        f"kube-bench: {t['pass']} pass, {t['fail']} fail, {t['warn']} warn, {t['info']} info",
        f"failed (baseline, not waived): {', '.join(result['failed']) or '-'}",
        f"waived: {', '.join(result['waived']) or '-'}",
        f"expired waivers: {', '.join(result['expired_waivers']) or '-'}",
    ]
    lines += [f"  {v['rule']}: {v['message']}" for v in result["violations"]]
    lines.append("COMPLIANT" if result["compliant"] else "NOT COMPLIANT")
    return "\n".join(lines)
