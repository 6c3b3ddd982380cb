"""Offline lint of dashboard JSON, after grafana/dashboard-linter's default rules.

Rules (each :class:`Problem` names one):

``schema``              current Grafana JSON: panels with ``gridPos``, no legacy keys
                        (``rows``, ``span``, ``style``...), only keys Grafana's strict
                        dashboard schema allows, ``schemaVersion`` >= 36
``title``               dashboard and panel titles are not empty
``uid``                 ``gotthard-<slug>``, at most 40 characters, unique across dashboards
``panel-id``            integer panel ids, unique within a dashboard
``template-datasource`` a ``datasource`` variable of type ``datasource`` (query prometheus)
``template-site-cluster`` ``site`` and ``cluster`` query variables on ``${datasource}``;
                        other query variables filter on both
``panel-datasource``    every panel and every target uses ``${datasource}``
``panel-type``          timeseries, stat, table or bargauge
``panel-unit``          ``fieldConfig.defaults.unit`` is set
``panel-targets``       every panel has at least one non-empty PromQL expression
``target-site-cluster`` every selector filters on ``site=~"$site"`` and ``cluster=~"$cluster"``
``target-rate-interval`` ``rate``/``irate``/``increase`` take ``[$__rate_interval]``
``target-promql``       the expression tokenizes (balanced brackets, closed strings)
``panel-repeat``        a repeated panel repeats over a multi-value variable

The PromQL reading here is a tokenizer, not a parser: enough to find every vector
selector, its label matchers and the function a range belongs to. Parse errors proper
are the live check's job (:mod:`gotthard.monitoring.dashboards.check`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

MODERN_PANEL_TYPES = frozenset({"timeseries", "stat", "table", "bargauge"})
UID_RE = re.compile(r"^gotthard-[a-z0-9]+(?:-[a-z0-9]+)*$")
UID_MAX = 40
MIN_SCHEMA_VERSION = 36
RATE_FUNCTIONS = frozenset({"rate", "irate", "increase"})
RATE_INTERVAL = "$__rate_interval"
LEGACY_DASHBOARD_KEYS = ("rows", "style", "hideControls", "sharedCrosshair", "__inputs")
LEGACY_PANEL_KEYS = ("span", "minSpan", "height", "error", "cacheTimeout", "styles", "columns")
#: Keys Grafana's dashboard JSON schema allows (grafana-foundation-sdk
#: jsonschema/dashboard.jsonschema.json: additionalProperties false).
SCHEMA_DASHBOARD_KEYS = frozenset(
    {"id", "uid", "title", "description", "revision", "gnetId", "tags", "timezone"}
    | {"editable", "graphTooltip", "time", "timepicker", "fiscalYearStartMonth", "liveNow"}
    | {"weekStart", "refresh", "schemaVersion", "version", "panels", "templating"}
    | {"annotations", "links", "snapshot"}
)
SCHEMA_PANEL_KEYS = frozenset(
    {"type", "id", "pluginVersion", "tags", "targets", "title", "description", "transparent"}
    | {"datasource", "gridPos", "links", "repeat", "repeatDirection", "maxPerRow"}
    | {"maxDataPoints", "transformations", "interval", "timeFrom", "timeShift"}
    | {"hideTimeOverride", "libraryPanel", "options", "fieldConfig"}
)
SCHEMA_FIELD_DEFAULT_KEYS = frozenset(
    {"displayName", "displayNameFromDS", "description", "path", "writeable", "filterable"}
    | {"unit", "decimals", "min", "max", "mappings", "thresholds", "color", "links"}
    | {"noValue", "custom"}
)
SCHEMA_VARIABLE_KEYS = frozenset(
    {"type", "name", "label", "hide", "skipUrlSync", "description", "query", "datasource"}
    | {"current", "multi", "options", "refresh", "sort", "includeAll", "allValue", "regex"}
)
SITE_VALUES = frozenset({"$site", "${site}"})
CLUSTER_VALUES = frozenset({"$cluster", "${cluster}"})
DATASOURCE_VALUES = frozenset({"${datasource}", "$datasource"})

# PromQL words that are not metric names.
_KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring"}
    | {"group_left", "group_right", "inf", "nan", "atan2", "start", "end"}
)
_LABEL_LIST_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
_AGGREGATIONS = frozenset(
    {"sum", "avg", "min", "max", "count", "group", "stddev", "stdvar", "topk", "bottomk"}
    | {"quantile", "count_values", "limitk", "limit_ratio"}
)
_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<range>\[[^\]]*\])
  | (?P<number>(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+)(?:[a-zA-Z]+\d*)*)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<variable>\$\{?\w+\}?)
  | (?P<lbrace>\{)
  | (?P<rbrace>\})
  | (?P<lparen>\()
  | (?P<rparen>\))
  | (?P<op>==|!=|>=|<=|=~|!~|[-+*/%^<>=,@])
    """,
    re.VERBOSE,
)
_MATCHER = re.compile(
    r"""\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)\s*"""
)


class PromQLSyntaxError(ValueError):
    """The expression does not tokenize (unbalanced brackets, an unclosed string...)."""


@dataclass(frozen=True)
class Matcher:
    label: str
    op: str
    value: str  # unquoted (escapes left as written)


@dataclass(frozen=True)
class Selector:
    """One vector selector: ``name{matchers}``, and *written*, as the expr writes it."""

    name: str
    matchers: tuple[Matcher, ...]
    written: str

    def matcher(self, label: str) -> Matcher | None:
        for matcher in self.matchers:
            if matcher.label == label:
                return matcher
        return None


@dataclass(frozen=True)
class RangeUse:
    """A ``[...]`` range or subquery and the innermost function it is an argument of."""

    function: str
    range: str


@dataclass
class Analysis:
    selectors: list[Selector] = field(default_factory=list)
    ranges: list[RangeUse] = field(default_factory=list)

    @property
    def metric_names(self) -> set[str]:
        return {selector.name for selector in self.selectors if selector.name}


def _tokens(expr: str) -> Iterator[tuple[str, str, int, int]]:
    pos = 0
    while pos < len(expr):
        if expr[pos] == "{":
            end = _close_brace(expr, pos)
            yield "braces", expr[pos + 1 : end], pos, end + 1
            pos = end + 1
            continue
        match = _TOKEN.match(expr, pos)
        if not match or match.lastgroup is None:
            raise PromQLSyntaxError(f"unexpected character {expr[pos]!r} at offset {pos}")
        if match.lastgroup != "space":
            yield match.lastgroup, match.group(), pos, match.end()
        pos = match.end()


def _close_brace(expr: str, start: int) -> int:
    pos = start + 1
    while pos < len(expr):
        char = expr[pos]
        if char in "\"'`":
            string = _TOKEN.match(expr, pos)
            if not string or string.lastgroup != "string":
                raise PromQLSyntaxError(f"unclosed string at offset {pos}")
            pos = string.end()
            continue
        if char == "}":
            return pos
        pos += 1
    raise PromQLSyntaxError(f"unclosed '{{' at offset {start}")


def _matchers(body: str) -> tuple[Matcher, ...]:
    found = []
    pos = 0
    body = body.rstrip()
    while pos < len(body):
        match = _MATCHER.match(body, pos)
        if not match:
            raise PromQLSyntaxError(f"cannot read label matchers {{{body}}}")
        label, op, quoted = match.groups()
        found.append(Matcher(label, op, quoted[1:-1]))
        pos = match.end()
        if pos < len(body):
            if body[pos] != ",":
                raise PromQLSyntaxError(f"expected ',' in label matchers {{{body}}}")
            pos += 1
    return tuple(found)


def analyse(expr: str) -> Analysis:
    """Vector selectors and ranges of a PromQL expression (Grafana variables allowed)."""
    tokens = list(_tokens(expr))
    analysis = Analysis()
    stack: list[str] = []  # function name (or "") per open parenthesis
    pending = ""  # aggregation whose "by (...)" clause comes before its "("
    index = 0
    while index < len(tokens):
        kind, text, start, end = tokens[index]
        following = tokens[index + 1] if index + 1 < len(tokens) else None
        if kind == "ident":
            word = text.lower()
            if word in _LABEL_LIST_KEYWORDS:
                if following and following[0] == "lparen":
                    index = _skip_parens(tokens, index + 1)
                index += 1
                continue
            if word in _KEYWORDS:
                index += 1
                continue
            if following and following[0] == "lparen":
                stack.append(text)
                index += 2
                continue
            if word in _AGGREGATIONS and following and following[1].lower() in ("by", "without"):
                pending = text
                index += 1
                continue
            matchers: tuple[Matcher, ...] = ()
            stop = end
            if following and following[0] == "braces":
                matchers = _matchers(following[1])
                stop = following[3]
                index += 1
            analysis.selectors.append(Selector(text, matchers, expr[start:stop]))
        elif kind == "braces":
            matchers = _matchers(text)
            names = [m.value for m in matchers if m.label == "__name__" and m.op == "="]
            name = names[0] if names else ""
            analysis.selectors.append(Selector(name, matchers, expr[start:end]))
        elif kind == "lparen":
            stack.append(pending)
            pending = ""
        elif kind == "rparen":
            if not stack:
                raise PromQLSyntaxError(f"unbalanced ')' at offset {start}")
            stack.pop()
        elif kind == "range":
            function = next((name for name in reversed(stack) if name), "")
            analysis.ranges.append(RangeUse(function, text[1:-1].strip()))
        index += 1
    if stack:
        raise PromQLSyntaxError("unbalanced '('")
    return analysis


def _skip_parens(tokens: Sequence[tuple[str, str, int, int]], index: int) -> int:
    """Index of the ``)`` closing the ``(`` at *index* (label lists hold no parens)."""
    while index < len(tokens) and tokens[index][0] != "rparen":
        index += 1
    if index == len(tokens):
        raise PromQLSyntaxError("unclosed label list")
    return index


def metric_names(expr: str) -> set[str]:
    return analyse(expr).metric_names


# --------------------------------------------------------------------------------------
# Dashboard rules
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    dashboard: str
    rule: str
    message: str
    panel: str = ""

    def __str__(self) -> str:
        where = f"{self.dashboard}: {self.panel}: " if self.panel else f"{self.dashboard}: "
        return f"{where}[{self.rule}] {self.message}"


def iter_panels(dash: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, including those nested in row panels."""
    for panel in dash.get("panels") or []:
        yield panel
        yield from panel.get("panels") or []


def _is_datasource_ref(value: Any) -> bool:
    if isinstance(value, dict):
        return value.get("uid") in DATASOURCE_VALUES and value.get("type") in (None, "prometheus")
    return value in DATASOURCE_VALUES


def _variables(dash: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v.get("name", ""): v for v in (dash.get("templating") or {}).get("list") or []}


def _query_text(variable: dict[str, Any]) -> str:
    query = variable.get("query")
    if isinstance(query, dict):
        return str(query.get("query", ""))
    return str(query or "")


def _filter_problems(analysis: Analysis) -> Iterator[str]:
    for selector in analysis.selectors:
        shown = selector.name or "{...}"
        for label, accepted in (("site", SITE_VALUES), ("cluster", CLUSTER_VALUES)):
            matcher = selector.matcher(label)
            if matcher is None or matcher.op != "=~" or matcher.value not in accepted:
                yield f'selector {shown} does not filter on {label}=~"${label}"'


def lint_dashboard(dash: dict[str, Any]) -> list[Problem]:
    uid = str(dash.get("uid") or "<no uid>")
    problems: list[Problem] = []

    def add(rule: str, message: str, panel: str = "") -> None:
        problems.append(Problem(uid, rule, message, panel))

    # schema
    for key in LEGACY_DASHBOARD_KEYS:
        if key in dash:
            add("schema", f"legacy dashboard key {key!r}")
    for key in sorted(set(dash) - SCHEMA_DASHBOARD_KEYS - set(LEGACY_DASHBOARD_KEYS)):
        add("schema", f"dashboard key {key!r} is not in Grafana's dashboard schema")
    for variable in (dash.get("templating") or {}).get("list") or []:
        for key in sorted(set(variable) - SCHEMA_VARIABLE_KEYS):
            add("schema", f"variable {variable.get('name')!r}: key {key!r} is not in the schema")
    version = dash.get("schemaVersion")
    if not isinstance(version, int) or version < MIN_SCHEMA_VERSION:
        add("schema", f"schemaVersion {version!r} is older than {MIN_SCHEMA_VERSION}")
    # title, uid
    if not str(dash.get("title") or "").strip():
        add("title", "dashboard title is empty")
    if not UID_RE.match(uid) or len(uid) > UID_MAX:
        add("uid", f"uid {uid!r} is not gotthard-<slug> of at most {UID_MAX} characters")

    # variables
    variables = _variables(dash)
    datasource = variables.get("datasource")
    if (
        datasource is None
        or datasource.get("type") != "datasource"
        or datasource.get("query") != "prometheus"
    ):
        add("template-datasource", "no 'datasource' variable of type datasource (prometheus)")
    for name in ("site", "cluster"):
        variable = variables.get(name)
        if variable is None or variable.get("type") != "query":
            add("template-site-cluster", f"no {name!r} query variable")
        elif not _is_datasource_ref(variable.get("datasource")):
            add("template-site-cluster", f"variable {name!r} does not use ${{datasource}}")
    for name, variable in variables.items():
        if variable.get("type") != "query" or name in ("site", "cluster"):
            continue
        if not _is_datasource_ref(variable.get("datasource")):
            add("template-site-cluster", f"variable {name!r} does not use ${{datasource}}")
        query = _query_text(variable)
        inner = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", query)
        try:
            analysis = analyse(inner.group(1)) if inner else None
        except PromQLSyntaxError as err:
            add("template-site-cluster", f"variable {name!r}: {err}")
            continue
        if analysis is None:
            add("template-site-cluster", f"variable {name!r}: {query!r} is not label_values(...)")
            continue
        for message in _filter_problems(analysis):
            add("template-site-cluster", f"variable {name!r}: {message}")

    # panels
    ids: Counter[int] = Counter()
    for panel in iter_panels(dash):
        title = str(panel.get("title") or "")
        where = title or f"panel id {panel.get('id')}"
        kind = panel.get("type")
        if kind == "row":
            continue
        if not title.strip():
            add("title", "panel title is empty", where)
        panel_id = panel.get("id")
        if not isinstance(panel_id, int) or isinstance(panel_id, bool):
            add("panel-id", f"panel id {panel_id!r} is not an integer", where)
        else:
            ids[panel_id] += 1
        for key in LEGACY_PANEL_KEYS:
            if key in panel:
                add("schema", f"legacy panel key {key!r}", where)
        for key in sorted(set(panel) - SCHEMA_PANEL_KEYS - set(LEGACY_PANEL_KEYS) - {"panels"}):
            add("schema", f"panel key {key!r} is not in Grafana's dashboard schema", where)
        defaults = (panel.get("fieldConfig") or {}).get("defaults") or {}
        for key in sorted(set(defaults) - SCHEMA_FIELD_DEFAULT_KEYS):
            add("schema", f"fieldConfig.defaults key {key!r} is not in the schema", where)
        if not isinstance(panel.get("gridPos"), dict):
            add("schema", "panel has no gridPos", where)
        if kind not in MODERN_PANEL_TYPES:
            add("panel-type", f"type {kind!r} is not one of {sorted(MODERN_PANEL_TYPES)}", where)
        unit = ((panel.get("fieldConfig") or {}).get("defaults") or {}).get("unit")
        if not unit:
            add("panel-unit", "fieldConfig.defaults.unit is not set", where)
        if not _is_datasource_ref(panel.get("datasource")):
            add("panel-datasource", "panel datasource is not ${datasource}", where)
        repeat = panel.get("repeat")
        if repeat:
            variable = variables.get(repeat)
            if variable is None or not (variable.get("multi") or variable.get("includeAll")):
                add("panel-repeat", f"repeats over {repeat!r}, not a multi-value variable", where)
        targets = panel.get("targets") or []
        if not any(str(t.get("expr") or "").strip() for t in targets):
            add("panel-targets", "panel has no query", where)
        for target in targets:
            ref = target.get("refId", "?")
            if not _is_datasource_ref(target.get("datasource")):
                add("panel-datasource", f"target {ref}: datasource is not ${{datasource}}", where)
            expr = str(target.get("expr") or "")
            if not expr.strip():
                add("panel-targets", f"target {ref}: empty expression", where)
                continue
            try:
                analysis = analyse(expr)
            except PromQLSyntaxError as err:
                add("target-promql", f"target {ref}: {err}", where)
                continue
            if not analysis.selectors:
                add("target-site-cluster", f"target {ref}: no selector to filter", where)
            for message in _filter_problems(analysis):
                add("target-site-cluster", f"target {ref}: {message}", where)
            for use in analysis.ranges:
                if use.function in RATE_FUNCTIONS and use.range != RATE_INTERVAL:
                    add(
                        "target-rate-interval",
                        f"target {ref}: {use.function}(...[{use.range}]) must use "
                        f"[{RATE_INTERVAL}]",
                        where,
                    )
    for panel_id, count in sorted(ids.items()):
        if count > 1:
            add("panel-id", f"panel id {panel_id} is used {count} times")
    return problems


def lint_dashboards(dashboards: Iterable[dict[str, Any]]) -> list[Problem]:
    """Every rule on every dashboard, plus uid uniqueness across them."""
    problems: list[Problem] = []
    uids: Counter[str] = Counter()
    for dash in dashboards:
        problems += lint_dashboard(dash)
        uids[str(dash.get("uid") or "")] += 1
    for uid, count in sorted(uids.items()):
        if count > 1:
            problems.append(Problem(uid, "uid", f"uid is used by {count} dashboards"))
    return problems
