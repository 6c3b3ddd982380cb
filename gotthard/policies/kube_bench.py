"""kube-bench results against the baseline (``gotthard.kube_bench`` Rego) with waivers:
the audit, the baseline's resolution, waiver files and running kube-bench.

Reading a report (:func:`parse_report`) and its input document (:func:`to_input`) are
part of the engine's input dispatch (:mod:`gotthard.policies.engine`), which this module
builds on.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gotthard import command
from gotthard.policies.engine import (
    SCORED,
    STATUSES,
    Check,
    Engine,
    PolicyError,
    Report,
    as_json_value,
    baseline,
    check_input,
    deep_merge,
    get_key,
    list_items,
    load_file,
    parse_report,
    policy_for,
    prepare,
    to_input,
    unwrap,
    violations_of,
)

#: The report model and its input document are the engine's (it prepares kube-bench
#: input for any policy evaluation); they are used through this module too.
__all__ = [
    "SCORED",
    "STATUSES",
    "WAIVER_KEYS",
    "Check",
    "Report",
    "audit",
    "baseline",
    "check_input",
    "format_text",
    "inputs_of",
    "load_waivers",
    "node_types",
    "parse_report",
    "resolve_baseline",
    "run_kube_bench",
    "to_input",
]

WAIVER_KEYS = ("id", "owner", "reason", "expires")


def resolve_baseline(
    data: Mapping[str, Any], reports: Sequence[Sequence[Mapping[str, Any]]]
) -> dict[str, Any]:
    """*data* with ``site.kube_bench.required`` as the list of ids the Rego baseline reads.

    ``"scored"`` becomes the scored checks of the report(s) (*reports*: each a list of
    normalised checks, see :func:`to_input`); with no report it is empty (not evaluated).
    A report without any scored check cannot pass a ``scored`` baseline: input error.
    """
    required = baseline(data)
    if required != SCORED:
        return dict(data)
    ids: set[str] = set()
    for checks in reports:
        scored = {str(c.get("id")) for c in checks if c.get("scored") is True}
        if not scored:
            raise PolicyError(
                "kube-bench report has no scored checks: the 'scored' baseline cannot be met"
            )
        ids |= scored
    return deep_merge(data, {"site": {"kube_bench": {"required": sorted(ids)}}})


def load_waivers(path: str | Path) -> list[dict[str, str]]:
    doc = load_file(path, what="waivers")
    if isinstance(doc, Mapping):
        doc = get_key(doc, "waivers", default=None)
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


def inputs_of(doc: Any, policy: str | None = None, today: str | None = None) -> list[Any]:
    """The normalised kube-bench inputs ``policy eval`` will evaluate in *doc*."""
    obj = unwrap(doc)
    items = [obj]
    if policy is None and isinstance(obj, Mapping) and obj.get("kind") == "List":
        items = [unwrap(i) for i in list_items(obj)]
    return [
        prepare("kube-bench", item, today=today)
        for item in items
        if (policy or policy_for(item)) == "kube-bench"
    ]


def audit(
    engine: Engine, report: Report, today: str | None = None, only: Sequence[str] | None = None
) -> dict[str, Any]:
    """The audit result; ``violations`` are the baseline's rule ids and messages."""
    doc = to_input(report, today=today, only=only)
    summary = engine.query("gotthard.kube_bench", "summary", doc)
    if not isinstance(summary, Mapping) or not all(
        isinstance(summary.get(k), list) for k in ("failed", "waived", "expired_waivers")
    ):
        raise PolicyError("kube-bench baseline: the policy returned no summary")
    violations = violations_of(engine.query("gotthard.kube_bench", "deny", doc))
    failed = list(summary["failed"])
    return {
        "totals": {s: report.totals.get(s, 0) for s in STATUSES},
        "failed": failed,
        "waived": list(summary["waived"]),
        "expired_waivers": list(summary["expired_waivers"]),
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
        proc = command.run(cmd, timeout=timeout, check=False)
    except command.CommandError as err:
        raise PolicyError(f"kube-bench failed: {err}") from err
    if proc.returncode != 0 and not proc.stdout.strip():
        raise PolicyError(f"kube-bench exited {proc.returncode}: {proc.stderr.strip()[:500]}")
    try:
        doc = json.loads(proc.stdout)
    except (ValueError, RecursionError) as err:
        raise PolicyError(f"kube-bench output is not JSON: {str(err)[:200]}") from err
    return as_json_value(doc, "kube-bench output")


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
