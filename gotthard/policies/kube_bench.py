"""kube-bench results against the baseline (``gotthard.kube_bench`` Rego) with waivers.

Parsing tolerates the report variants seen in the wild: a top-level list of controls
(``--json`` per target) or ``{"Controls": [...], "Totals": {...}}``, a missing Totals
section, and mixed key casing (``Controls``/``controls``, ``Totals``/``totals``).
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gotthard import command
from gotthard.policies.engine import (
    Engine,
    PolicyError,
    as_json_value,
    deep_merge,
    list_items,
    load_file,
    policy_for,
    prepare,
    unwrap,
    violations_of,
)

STATUSES = ("pass", "fail", "warn", "info")
WAIVER_KEYS = ("id", "owner", "reason", "expires")


@dataclass
class Check:
    id: str
    status: str  # upper case: PASS, FAIL, WARN, INFO
    node_type: str
    desc: str = ""
    scored: bool = False


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)
    totals: dict[str, int] = field(default_factory=dict)


#: ``site.kube_bench.required`` value meaning "every scored check in the report".
SCORED = "scored"


def _get(obj: Mapping[str, Any], *keys: str, default: Any = None, where: str = "") -> Any:
    """The first key present, compared case-insensitively; two spellings of one wanted key
    in the same object (``Controls`` and ``controls``) are ambiguous and refused."""
    for key in keys:
        found = [k for k in obj if str(k).lower() == key.lower()]
        if len(found) > 1:
            spellings = ", ".join(map(repr, found))
            raise PolicyError(f"kube-bench report: {where or 'object'} has {spellings}")
        if found:
            return obj[found[0]]
    return default


def _typed(obj: Mapping[str, Any], key: str, types: Any, where: str, default: Any) -> Any:
    """``obj[key]`` (any casing) if of *types*; absent or null is *default*."""
    value = _get(obj, key, where=where)
    if value is None:
        return default
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in _tuple(types)):
        names = "/".join(t.__name__ for t in _tuple(types))
        got = type(value).__name__
        raise PolicyError(f"kube-bench report: {where}: {key} must be {names}, got {got}")
    return value


def _tuple(types: Any) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


def _count(obj: Mapping[str, Any], key: str, where: str) -> int:
    value = _typed(obj, key, int, where, 0)
    if value < 0:
        raise PolicyError(f"kube-bench report: {where}: {key} is negative")
    return int(value)


def _list_of_objects(obj: Mapping[str, Any], key: str, where: str) -> list[Mapping[str, Any]]:
    items = _typed(obj, key, list, where, [])
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            got = type(item).__name__
            raise PolicyError(f"kube-bench report: {where}: {key}[{i}] is {got}, not an object")
    return items


def _check(result: Mapping[str, Any], node_type: str, where: str) -> Check:
    check_id = _typed(result, "test_number", str, where, "")
    if not check_id.strip():
        raise PolicyError(f"kube-bench report: {where}: test_number missing or empty")
    where = f"{where} ({check_id})"
    status = _typed(result, "status", str, where, "").upper()
    if status.lower() not in STATUSES:
        known = "/".join(s.upper() for s in STATUSES)
        raise PolicyError(f"kube-bench report: {where}: status {status!r} is not {known}")
    return Check(
        id=check_id,
        status=status,
        node_type=node_type,
        desc=_typed(result, "test_desc", str, where, ""),
        scored=_typed(result, "scored", bool, where, False),
    )


def parse_report(doc: Any) -> Report:
    """The checks and totals of a ``kube-bench --json`` report (0.6-0.10 shapes).

    Anything else (wrong types, unknown statuses, no results) is a :class:`PolicyError`
    naming the offending part: a report that cannot be read must not look compliant.
    """
    if isinstance(doc, Mapping):
        controls = _get(doc, "Controls", where="report")
        totals_doc = _get(doc, "Totals", where="report")
        if controls is None:
            raise PolicyError("kube-bench report: no Controls list")
        doc = {"Controls": controls, "Totals": totals_doc}
    elif isinstance(doc, list):
        doc = {"Controls": doc, "Totals": None}
    else:
        got = type(doc).__name__
        raise PolicyError(f"kube-bench report: expected an object or a list, got {got}")
    report = Report()
    sums = dict.fromkeys(STATUSES, 0)
    for c, control in enumerate(_list_of_objects(doc, "Controls", "report")):
        where = f"Controls[{c}]"
        node_type = _typed(control, "node_type", str, where, "") or "unknown"
        for status in STATUSES:
            sums[status] += _count(control, f"total_{status}", where)
        for t, test in enumerate(_list_of_objects(control, "tests", where)):
            test_where = f"{where}.tests[{t}]"
            for r, result in enumerate(_list_of_objects(test, "results", test_where)):
                report.checks.append(_check(result, node_type, f"{test_where}.results[{r}]"))
    if not report.checks:
        raise PolicyError("kube-bench report: no check results (did kube-bench run?)")
    totals_doc = _typed(doc, "Totals", Mapping, "report", None)
    if totals_doc is not None:
        report.totals = {s: _count(totals_doc, f"total_{s}", "Totals") for s in STATUSES}
    elif any(sums.values()):
        report.totals = sums
    else:  # neither Totals nor per-control totals: count the results
        report.totals = {s: sum(c.status == s.upper() for c in report.checks) for s in STATUSES}
    return report


def baseline(data: Mapping[str, Any]) -> list[str] | str:
    """``site.kube_bench.required``: a list of check ids, or ``"scored"``."""
    site = data.get("site")
    kb = site.get("kube_bench") if isinstance(site, Mapping) else None
    required = kb.get("required") if isinstance(kb, Mapping) else None
    if required == SCORED:
        return SCORED
    if isinstance(required, list) and all(isinstance(i, str) for i in required):
        return list(required)
    raise PolicyError(
        f"site.kube_bench.required must be a list of check ids or {SCORED!r}, got {required!r}"
    )


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
            {"id": c.id, "status": c.status, "node_type": c.node_type, "scored": c.scored}
            for c in report.checks
        ],
    }
    if only:
        doc["only"] = list(only)
    return doc


def check_input(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    """A ``KubeBenchResults`` input given directly (the shape :func:`to_input` writes)."""
    where = "KubeBenchResults"
    if not isinstance(doc.get("today"), str):
        raise PolicyError(f"{where}: 'today' must be a YYYY-MM-DD string")
    checks = doc.get("checks")
    if not isinstance(checks, list) or not checks:
        raise PolicyError(f"{where}: 'checks' must be a non-empty list")
    for i, c in enumerate(checks):
        if not (
            isinstance(c, Mapping)
            and isinstance(c.get("id"), str)
            and isinstance(c.get("status"), str)
            and isinstance(c.get("scored", False), bool)
        ):
            raise PolicyError(f"{where}: checks[{i}] needs a string id and status")
    only = doc.get("only")
    if only is not None and not (isinstance(only, list) and all(isinstance(i, str) for i in only)):
        raise PolicyError(f"{where}: 'only' must be a list of check ids")
    return doc


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
