"""Send every panel query of the dashboards to a real Prometheus.

For each dashboard the query variables are filled in order from the Prometheus API
(``label_values(selector, label)`` -> ``/api/v1/label/<label>/values?match[]=selector``),
every value selected, as Grafana's "All" does: a multi-value variable becomes the regex
alternation ``(a|b)``, or the variable's ``allValue`` where it has one (the node
variables' ``.*``), written as it is. ``$__rate_interval`` and ``$__interval`` become a
concrete duration (``--rate-interval``, default 1m), ``$__range`` becomes ``1h``. Each
query goes to ``/api/v1/query`` (instant, now). A query fails when Prometheus rejects it
(HTTP 400 ``bad_data`` is a parse error, 422 ``execution`` an evaluation error such as
many-to-many matching) or when it returns no series, unless it is on
:data:`ALLOWED_EMPTY` with a reason. For an empty result the check names the selectors
that match nothing, which is where a typo'd metric or label shows.

The API client is :class:`gotthard.prometheus.Prometheus` (standard library only).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from gotthard.monitoring.dashboards import lint
from gotthard.prometheus import Prometheus, PrometheusError

#: (dashboard uid, panel title, refId) -> why an empty result is fine there. Keep short.
ALLOWED_EMPTY: dict[tuple[str, str, str], str] = {
    ("gotthard-site-overview", "Firing alerts", "A"): (
        "ALERTS has series only while an alert is pending or firing; a healthy site has none"
    ),
    ("gotthard-gpu-fleet", "XID errors", "A"): (
        "gotthard_gpu_xid_errors_total gets a series only after a GPU reported an XID"
    ),
    ("gotthard-security-compliance", "Failed kube-bench checks", "A"): (
        "a compliant cluster has no failed, unwaived CIS check"
    ),
    ("gotthard-lustre-storage", "LNet dropped messages", "A"): (
        "the panel draws only nodes that drop LNet messages; a healthy site has none"
    ),
}

OK = "ok"
ALLOWED = "empty (allowed)"
FAIL = "FAIL"
_REGEX_SPECIAL = re.compile(r"([\\^$.|?*+()\[\]{}])")
_LABEL_VALUES = re.compile(r"^\s*label_values\((?:(?P<selector>.*),)?\s*(?P<label>\w+)\s*\)\s*$")
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")


class CheckError(Exception):
    """The check cannot run at all (Prometheus unreachable)."""


@dataclass(frozen=True)
class Result:
    dashboard: str
    panel: str
    ref: str
    status: str
    series: int
    detail: str = ""
    query: str = ""


def regex_escape(value: str) -> str:
    """Escape *value* for a regex inside a double-quoted PromQL string (as Grafana does).

    Regex metacharacters get a backslash; the backslash itself is doubled for the PromQL
    string literal, so ``a.b`` becomes ``a\\\\.b`` in the query text.
    """
    return _REGEX_SPECIAL.sub(r"\\\\\1", value).replace('"', '\\"')


def substitute(text: str, values: dict[str, str]) -> str:
    """Replace ``$name``, ``${name}``, ``${name:fmt}`` and ``[[name]]`` from *values*;
    unknown names are left as they are."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(3)
        return values.get(name, match.group(0))

    return _VARIABLE.sub(replace, text)


def builtin_values(rate_interval: str) -> dict[str, str]:
    return {
        "__rate_interval": rate_interval,
        "__interval": rate_interval,
        "__range": "1h",
        "__range_s": "3600",
        "__range_ms": "3600000",
        "__interval_ms": str(_seconds(rate_interval) * 1000),
    }


def _seconds(duration: str) -> int:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    total = 0.0
    for number, unit in re.findall(r"(\d+)(ms|s|m|h|d|w|y)", duration):
        total += int(number) * units[unit]
    return int(total)


def resolve_variables(
    prometheus: Prometheus, dash: dict[str, Any], rate_interval: str, *, opening: bool = False
) -> tuple[dict[str, str], dict[str, str]]:
    """(values, problems): the text each variable stands for, and why some have none.
    Every value is chosen (a check reads every series a panel can show); with *opening*,
    what Grafana chooses when the dashboard opens instead: "All" where the variable has
    it, else its first value (the values come sorted)."""
    values = builtin_values(rate_interval)
    problems: dict[str, str] = {}
    for variable in (dash.get("templating") or {}).get("list") or []:
        name = variable.get("name", "")
        kind = variable.get("type")
        if kind == "datasource":
            continue
        if kind in ("custom", "constant", "interval", "textbox"):
            options = [str(o.get("value")) for o in variable.get("options") or []]
            current = (variable.get("current") or {}).get("value")
            chosen = options or ([str(current)] if current else [])
            if not chosen:
                chosen = [s.strip() for s in str(variable.get("query", "")).split(",") if s]
            values[name] = _alternation(chosen, regex=bool(variable.get("multi")))
            continue
        if kind != "query":
            problems[name] = f"variable type {kind!r} is not supported by the check"
            continue
        query = variable.get("query")
        query_text = str(query.get("query", "")) if isinstance(query, dict) else str(query or "")
        match = _LABEL_VALUES.match(substitute(query_text, values))
        if not match:
            problems[name] = f"only label_values(...) variables are supported: {query_text!r}"
            continue
        try:
            found = prometheus.label_values(match["label"], (match["selector"] or "").strip())
        except PrometheusError as err:
            problems[name] = f"label_values failed: {err}"
            continue
        pattern = variable.get("regex")
        if pattern:
            try:
                found = variable_regex(str(pattern), found)
            except re.error as err:
                problems[name] = f"${name}: regex {pattern!r} is not valid: {err}"
                continue
        if not found:
            problems[name] = f"${name} has no values ({query_text})"
            continue
        all_value = variable.get("allValue")
        if variable.get("includeAll") and all_value:
            values[name] = str(all_value)
            continue
        every = bool(variable.get("includeAll") or (variable.get("multi") and not opening))
        values[name] = _alternation(found if every else found[:1], regex=True)
    return values, problems


def variable_regex(pattern: str, values: Sequence[str]) -> list[str]:
    """The values a variable's regex keeps, as Grafana applies it: ``/re/flags`` is searched
    in each value (a plain string must match the whole value); a value it matches becomes
    the text of the first group (the whole match without one); duplicates go."""
    if len(pattern) > 1 and pattern.startswith("/") and pattern.rfind("/") > 0:
        end = pattern.rfind("/")
        flags = re.IGNORECASE if "i" in pattern[end + 1 :] else 0
        compiled, search = re.compile(pattern[1:end], flags), True
    else:
        compiled, search = re.compile(pattern), False
    kept: list[str] = []
    for value in values:
        match = compiled.search(value) if search else compiled.fullmatch(value)
        if match is None:
            continue
        text = next((g for g in match.groups() if g is not None), match.group(0))
        if text not in kept:
            kept.append(text)
    return kept


def _alternation(options: Sequence[str], *, regex: bool) -> str:
    if not regex:
        return options[0] if options else ""
    escaped = [regex_escape(option) for option in options]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def _explain_empty(prometheus: Prometheus, expr: str, values: dict[str, str]) -> str:
    """Name the selectors of *expr* that match no series (typo'd metric or label)."""
    try:
        analysis = lint.analyse(expr)
    except lint.PromQLSyntaxError:
        return "no series"
    empty = []
    for selector in analysis.selectors:
        text = substitute(selector.written, values)
        try:
            _, found = prometheus.query(f"count({text})")
        except PrometheusError:
            continue
        if not found:
            empty.append(selector.written)
    if empty:
        unique = list(dict.fromkeys(empty))
        return "no series; nothing matches " + ", ".join(unique)
    return "no series, although every selector matches series: the join or filter drops all"


def check_dashboard(
    prometheus: Prometheus,
    dash: dict[str, Any],
    *,
    rate_interval: str = "1m",
    allowed_empty: dict[tuple[str, str, str], str] | None = None,
) -> list[Result]:
    allowed = ALLOWED_EMPTY if allowed_empty is None else allowed_empty
    uid = str(dash.get("uid") or "")
    values, variable_problems = resolve_variables(prometheus, dash, rate_interval)
    results: list[Result] = []
    for panel in lint.iter_panels(dash):
        if panel.get("type") == "row":
            continue
        title = str(panel.get("title") or "")
        for target in panel.get("targets") or []:
            ref = str(target.get("refId") or "")
            expr = str(target.get("expr") or "")
            if not expr.strip():
                continue
            used = {m.group(1) or m.group(2) or m.group(3) for m in _VARIABLE.finditer(expr)}
            missing = sorted(used & set(variable_problems))
            if missing:
                detail = "; ".join(variable_problems[name] for name in missing)
                results.append(Result(uid, title, ref, FAIL, 0, detail, expr))
                continue
            query = substitute(expr, values)
            try:
                _, series = prometheus.query(query)
            except PrometheusError as err:
                if err.status == 400 or err.error_type == "bad_data":
                    detail = f"parse error (HTTP 400 bad_data): {err}"
                elif err.error_type:
                    detail = f"HTTP {err.status} {err.error_type}: {err}"
                else:
                    detail = str(err)
                results.append(Result(uid, title, ref, FAIL, 0, detail, query))
                continue
            if series:
                results.append(Result(uid, title, ref, OK, len(series), "", query))
                continue
            reason = allowed.get((uid, title, ref))
            if reason:
                results.append(Result(uid, title, ref, ALLOWED, 0, reason, query))
            else:
                detail = _explain_empty(prometheus, expr, values)
                results.append(Result(uid, title, ref, FAIL, 0, detail, query))
    return results


def check(
    prometheus: Prometheus,
    dashboards: Iterable[dict[str, Any]],
    *,
    rate_interval: str = "1m",
    allowed_empty: dict[tuple[str, str, str], str] | None = None,
) -> list[Result]:
    """Every query of every dashboard. Raises :class:`CheckError` if Prometheus is down."""
    try:
        prometheus.buildinfo()
    except PrometheusError as err:
        raise CheckError(str(err)) from None
    results: list[Result] = []
    for dash in dashboards:
        results += check_dashboard(
            prometheus, dash, rate_interval=rate_interval, allowed_empty=allowed_empty
        )
    return results


def format_table(results: Sequence[Result]) -> str:
    """Fixed-width table: dashboard, panel, ref, status, series, detail."""
    header = ("DASHBOARD", "PANEL", "REF", "STATUS", "SERIES", "DETAIL")
    rows = [(r.dashboard, r.panel, r.ref, r.status, str(r.series), r.detail) for r in results]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(5)]
    lines = []
    for row in [header, *rows]:
        cells = [row[i].ljust(widths[i]) for i in range(5)]
        lines.append("  ".join([*cells, row[5]]).rstrip())
    return "\n".join(lines)


def counts(results: Sequence[Result]) -> dict[str, int]:
    """Status -> number of queries with it."""
    return {status: sum(r.status == status for r in results) for status in (OK, ALLOWED, FAIL)}


def summary(results: Sequence[Result]) -> str:
    found = counts(results)
    return (
        f"{len(results)} queries: {found[OK]} ok, {found[ALLOWED]} allowed empty, "
        f"{found[FAIL]} failed"
    )


#: ``--format json`` names of the statuses.
JSON_STATUS = {OK: "ok", ALLOWED: "allowed_empty", FAIL: "failed"}


def to_json(results: Sequence[Result], lint_problems: Sequence[str] = ()) -> dict[str, Any]:
    """The machine-readable report of ``dashboards check --format json``."""
    found = counts(results)
    return {
        "ok": not lint_problems and not found[FAIL],
        "summary": {
            "queries": len(results),
            **{JSON_STATUS[status]: number for status, number in found.items()},
            "lint_problems": len(lint_problems),
        },
        "lint": list(lint_problems),
        "queries": [
            {
                "dashboard": r.dashboard,
                "panel": r.panel,
                "ref": r.ref,
                "status": JSON_STATUS[r.status],
                "series": r.series,
                "detail": r.detail,
                "query": r.query,
            }
            for r in results
        ],
    }


def report(results: Sequence[Result], out: TextIO) -> None:
    print(format_table(results), file=out)
    failures = [r for r in results if r.status == FAIL]
    if failures:
        print("\nFailed queries:", file=out)
        for result in failures:
            print(
                f"- {result.dashboard} / {result.panel} / {result.ref}: {result.detail}", file=out
            )
            print(f"  {result.query}", file=out)
    print(summary(results), file=out)
