"""Alerts carry the labels their annotations and automated steps use.

For every alert, the labels of the series its expression returns are inferred from the
rule's PromQL (as written to alerts.rules.yml): aggregations keep their ``by`` labels or
drop their ``without`` labels, ``label_replace`` adds one, one-to-one matching with
``on`` keeps only those labels, ``group_left``/``group_right`` copy the listed ones, ``or``
keeps the labels both sides have, ``absent`` has only its equality matchers. The labels
of a raw metric are those every input series of the rule unit tests (rules_tests/, the
exporters' labels plus the target labels) gives it; a recorded series' labels come from
its recording rule. Then:

* every ``$labels.X`` in an annotation (description, dashboard_url, repair_query) is a
  label of the result;
* every target label an automated step of the alert's runbook reads (gotthard/runbooks/
  registry.py) is a label of the result, for every runbook the alert's labels can match.

The promtool unit tests check the same on real firing alerts: their ``exp_labels`` list
every label of the alert exactly.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path

import pytest

from gotthard.monitoring import rules
from gotthard.monitoring.dashboards import lint
from gotthard.runbooks.registry import ACTIONS, RUNBOOKS
from tests.support.monitoring import load_yaml

UNIT_TESTS = Path(__file__).resolve().parent / "rules_tests"

#: None stands for a scalar (a number, ``time()``); a frozenset for the labels every
#: series of an instant vector carries.
Labels = frozenset[str] | None

_AGGREGATIONS = frozenset(
    {"sum", "avg", "min", "max", "count", "group", "stddev", "stdvar", "quantile"}
    | {"topk", "bottomk", "count_values", "limitk", "limit_ratio"}
)
#: Aggregations that return their input series (labels kept), with a parameter first.
_SELECTING = frozenset({"topk", "bottomk", "limitk", "limit_ratio"})
_PARAMETER_FIRST = _SELECTING | {"quantile", "count_values"}
_SCALAR_FUNCTIONS = frozenset({"time", "scalar", "pi"})
#: Binary operators by precedence, loosest first (``^`` binds tightest).
_PRECEDENCE: tuple[frozenset[str], ...] = (
    frozenset({"or"}),
    frozenset({"and", "unless"}),
    frozenset({"==", "!=", ">", "<", ">=", "<="}),
    frozenset({"+", "-"}),
    frozenset({"*", "/", "%", "atan2"}),
    frozenset({"^"}),
)
_COMPARISON_PARTS = {"=": "=", "!": "!=", ">": ">", "<": "<"}


class LabelInference:
    """The labels of a PromQL expression's result, by recursive descent over
    :mod:`gotthard.monitoring.dashboards.lint`'s tokens. *model* gives a metric's labels."""

    def __init__(self, expr: str, model: Mapping[str, frozenset[str]]) -> None:
        self.tokens = list(lint._tokens(expr))
        self.pos = 0
        self.model = model
        self.expr = expr

    def result(self) -> Labels:
        labels = self._binary(0)
        assert self.pos == len(self.tokens), f"unparsed rest at {self.tokens[self.pos :]}"
        return labels

    # -- tokens ------------------------------------------------------------------------
    def _peek(self, ahead: int = 0) -> tuple[str, str]:
        index = self.pos + ahead
        if index >= len(self.tokens):
            return "", ""
        kind, text, _, _ = self.tokens[index]
        return kind, text

    def _take(self) -> tuple[str, str]:
        token = self._peek()
        self.pos += 1
        return token

    def _accept(self, kind: str, text: str | None = None) -> bool:
        found_kind, found_text = self._peek()
        if found_kind == kind and (text is None or found_text == text):
            self.pos += 1
            return True
        return False

    def _expect(self, kind: str) -> str:
        found_kind, text = self._take()
        assert found_kind == kind, f"expected {kind}, got {found_kind} {text!r} in {self.expr}"
        return text

    def _label_list(self) -> frozenset[str]:
        self._expect("lparen")
        names = set()
        while not self._accept("rparen"):
            if not self._accept("op", ","):
                names.add(self._expect("ident"))
        return frozenset(names)

    def _operator(self, level: int) -> str | None:
        kind, text = self._peek()
        if kind not in ("op", "ident"):
            return None
        # the tokenizer splits ">=", "==", "!=" and "<=" only when written together
        if text in _PRECEDENCE[level]:
            return text
        return None

    # -- grammar -------------------------------------------------------------------------
    def _binary(self, level: int) -> Labels:
        if level == len(_PRECEDENCE):
            return self._unary()
        left = self._binary(level + 1)
        while (op := self._operator(level)) is not None:
            self._take()
            self._accept("ident", "bool")
            matching = self._matching()
            right = self._binary(level + 1)
            left = _combine(op, left, right, matching)
        return left

    def _matching(self) -> tuple[str, frozenset[str], str, frozenset[str]]:
        """(``on``/``ignoring``/"", its labels, ``left``/``right``/"", included labels)."""
        mode, labels, group, include = "", frozenset[str](), "", frozenset[str]()
        kind, text = self._peek()
        if kind == "ident" and text in ("on", "ignoring"):
            self._take()
            mode, labels = text, self._label_list()
        kind, text = self._peek()
        if kind == "ident" and text in ("group_left", "group_right"):
            self._take()
            group = text.removeprefix("group_")
            if self._peek()[0] == "lparen":
                include = self._label_list()
        return mode, labels, group, include

    def _unary(self) -> Labels:
        if self._accept("op", "-") or self._accept("op", "+"):
            return self._unary()
        labels = self._primary()
        while True:
            if self._accept("range"):
                continue
            if self._accept("ident", "offset"):
                self._accept("op", "-")
                self._expect("number")
                continue
            if self._accept("op", "@"):
                self._take()
                if self._peek()[0] == "lparen":
                    self._take()
                    self._expect("rparen")
                continue
            return labels

    def _primary(self) -> Labels:
        kind, text = self._take()
        if kind == "lparen":
            inner = self._binary(0)
            self._expect("rparen")
            return inner
        if kind in ("number", "string"):
            return None
        if kind == "braces":
            return _selector_labels("", text, self.model)
        assert kind == "ident", f"unexpected {kind} {text!r} in {self.expr}"
        following = self._peek()
        if text in _AGGREGATIONS and (
            following[0] == "lparen" or following[1] in ("by", "without")
        ):
            return self._aggregation(text)
        if following[0] == "lparen":
            return self._function(text)
        body = self._take()[1] if following[0] == "braces" else ""
        return _selector_labels(text, body, self.model)

    def _arguments(self) -> list[tuple[Labels, int]]:
        """Each argument's labels and its first token's position."""
        self._expect("lparen")
        arguments: list[tuple[Labels, int]] = []
        while not self._accept("rparen"):
            self._accept("op", ",")
            start = self.pos
            arguments.append((self._binary(0), start))
        return arguments

    def _aggregation(self, name: str) -> Labels:
        clause, labels = "", frozenset[str]()
        if self._peek()[1] in ("by", "without"):
            clause, labels = self._take()[1], self._label_list()
        arguments = self._arguments()
        if self._peek()[1] in ("by", "without"):
            clause, labels = self._take()[1], self._label_list()
        vector = arguments[-1][0] if name in _PARAMETER_FIRST else arguments[0][0]
        assert vector is not None, f"{name} of a scalar in {self.expr}"
        if name in _SELECTING:
            return vector
        if clause == "by":
            return vector & labels
        if clause == "without":
            return vector - labels
        return frozenset()

    def _function(self, name: str) -> Labels:
        arguments = self._arguments()
        if name in _SCALAR_FUNCTIONS:
            return None
        if name == "vector":
            return frozenset()
        if name in ("absent", "absent_over_time"):
            start = arguments[0][1]
            kind, text, _, _ = self.tokens[start]
            body = self.tokens[start + 1][1] if self.tokens[start + 1][0] == "braces" else ""
            if kind == "braces":
                body = text
            return frozenset(m.label for m in lint._matchers(body) if m.op == "=" and m.value != "")
        vectors = [labels for labels, _ in arguments if labels is not None]
        assert vectors, f"{name} without a vector argument in {self.expr}"
        if name in ("label_replace", "label_join"):
            destination = self.tokens[arguments[1][1]][1][1:-1]
            return vectors[0] | {destination}
        if name == "histogram_quantile":
            return vectors[0] - {"le"}
        return vectors[0]


def _selector_labels(name: str, body: str, model: Mapping[str, frozenset[str]]) -> frozenset[str]:
    matchers = lint._matchers(body) if body.strip() else ()
    if not name:
        name = next(m.value for m in matchers if m.label == "__name__")
    assert name in model, f"no label model for {name}: add an input series for it to rules_tests"
    # label="value" and label!="" both say the label is there
    present = {
        m.label
        for m in matchers
        if (m.op == "=" and m.value != "") or (m.op == "!=" and m.value == "")
    }
    missing = {m.label for m in matchers if m.op == "=" and m.value == ""}
    return (model[name] | present) - missing - {"__name__"}


def _combine(
    op: str, left: Labels, right: Labels, matching: tuple[str, frozenset[str], str, frozenset[str]]
) -> Labels:
    if left is None or right is None:
        return right if left is None else left
    if op in ("and", "unless"):
        return left
    if op == "or":
        return left & right
    mode, labels, group, include = matching
    if group == "left":
        return left | (include & right)
    if group == "right":
        return right | (include & left)
    if mode == "on":
        return left & labels
    if mode == "ignoring":
        return left - labels
    return left


# --- the label model ------------------------------------------------------------------


def _series_labels(series: str) -> tuple[str, frozenset[str]]:
    name, _, body = series.partition("{")
    matchers = lint._matchers(body.rstrip().removesuffix("}")) if body else ()
    return name.strip(), frozenset(m.label for m in matchers if m.value != "")


@cache
def label_model() -> dict[str, frozenset[str]]:
    """Raw metrics: the labels all their unit-test input series carry; recorded series:
    the labels their recording rule returns."""
    seen: dict[str, frozenset[str]] = {}
    for path in sorted(UNIT_TESTS.glob("*.test.yml")):
        for case in load_yaml(path)["tests"]:
            for entry in case.get("input_series", []):
                name, labels = _series_labels(entry["series"])
                if ":" not in name:
                    seen[name] = seen[name] & labels if name in seen else labels
    for rule in rules.RECORDING_RULES:
        inferred = LabelInference(rule.expr, seen).result()
        assert inferred is not None, rule.record
        seen[rule.record] = inferred
    return seen


def output_labels(expr: str) -> frozenset[str]:
    labels = LabelInference(expr, label_model()).result()
    assert labels is not None, f"a scalar alert expression: {expr}"
    return labels


_TEMPLATE_LABEL = re.compile(r"\$labels\.([A-Za-z_][A-Za-z0-9_]*)")


# --- the inference itself ---------------------------------------------------------------

_MODEL = {
    "m": frozenset({"site", "cluster", "instance", "job", "gpu"}),
    "n": frozenset({"site", "cluster", "partition"}),
}


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("m", {"site", "cluster", "instance", "job", "gpu"}),
        ('m{extra="x", gpu=""}', {"site", "cluster", "instance", "job", "extra"}),
        ('m{extra!=""}', _MODEL["m"] | {"extra"}),
        ("sum by (site, cluster, partition) (m)", {"site", "cluster"}),
        ("max without (job, gpu) (rate(m[5m]))", {"site", "cluster", "instance"}),
        ("sum(m) == 0 or absent(m)", set()),
        ('absent(m{site="x", job=~"g.*"})', {"site"}),
        ('label_replace(m, "node", "$1", "instance", "(.*)")', _MODEL["m"] | {"node"}),
        ("m > on (site, gpu) m", {"site", "gpu"}),
        ("m * 0 + on (site) group_left (partition) n", _MODEL["m"] | {"partition"}),
        ("n * on (site) group_right (gpu) m", _MODEL["m"]),
        ("m / ignoring (gpu) m", {"site", "cluster", "instance", "job"}),
        ("m unless on (site) n", _MODEL["m"]),
        ("m or n", {"site", "cluster"}),
        ("time() - m > 3600", _MODEL["m"]),
        ("topk by (site) (3, m)", _MODEL["m"]),
        ("predict_linear(m[6h], 86400) > 1 and m > 0.5", _MODEL["m"]),
        ("count by (site) (m == 0)", {"site"}),
        ("increase(m[10m]) > 0 or (m unless m offset 10m)", _MODEL["m"]),
    ],
)
def test_label_inference(expr: str, expected: set[str]) -> None:
    assert LabelInference(expr, _MODEL).result() == frozenset(expected)


# --- every alert ------------------------------------------------------------------------


def _runbook_labels(alertname: str, labels: frozenset[str]) -> dict[str, set[str]]:
    """Target labels needed by each automated step the alert can reach, by action."""
    needed: dict[str, set[str]] = {}
    for book in RUNBOOKS:
        if book.alertname != alertname:
            continue
        if not set(book.matchers) <= labels:
            continue  # needs labels this alert never has: not its runbook
        for step in book.steps:
            for action in filter(None, (step.action, step.on_resolve)):
                needed[action] = {label for label, _ in ACTIONS[action].targets}
        break  # the first runbook the alert's labels can match is the one that runs
    return needed


@pytest.mark.parametrize("name", rules.alert_names())
def test_every_label_an_alert_uses_is_on_its_series(name: str) -> None:
    rule = rules.alert(name)
    labels = output_labels(rule.promql)
    for key, text in rule.annotations().items():
        used = set(_TEMPLATE_LABEL.findall(text))
        assert used <= labels, f"{name} {key} uses {sorted(used - labels)}: not on {labels}"
    for action, targets in _runbook_labels(name, labels).items():
        assert targets <= labels, f"{name}: {action} needs {sorted(targets - labels)}"


@cache
def firing_labels() -> dict[str, list[dict[str, str]]]:
    """Alert name -> the ``exp_labels`` of every firing alert the unit tests expect."""
    seen: dict[str, list[dict[str, str]]] = {}
    for path in sorted(UNIT_TESTS.glob("*.test.yml")):
        for case in load_yaml(path)["tests"]:
            for check in case.get("alert_rule_test", []):
                for alert in check.get("exp_alerts") or []:
                    labels = {k: str(v) for k, v in (alert.get("exp_labels") or {}).items()}
                    seen.setdefault(check["alertname"], []).append(labels)
    return seen


@pytest.mark.parametrize("name", rules.alert_names())
def test_every_alert_carries_site_and_cluster(name: str) -> None:
    """Alertmanager routes by ``site`` and groups by ``cluster``, and the runbook webhook of
    a site acts only on its own clusters: every alert, at a site Prometheus or at the
    global evaluator, has both. Judged on what fires: a promtool case expects the alert
    to fire, and every firing alert it expects names a site and a cluster; and on the
    expression, whose every series keeps both."""
    expected = firing_labels().get(name, [])
    assert expected, f"{name}: no case in rules_tests/ expects it to fire"
    for labels in expected:
        assert labels.get("site") and labels.get("cluster"), f"{name} fires with {labels}"
    kept = output_labels(rules.alert(name).promql)
    assert {"site", "cluster"} <= kept, f"{name}: its series keep only {sorted(kept)}"


def test_the_backup_runbook_can_back_up_the_late_namespace() -> None:
    labels = output_labels(rules.alert("DRBackupTooOld").promql)
    assert "namespace" in labels
    assert "dr.backup_now" in _runbook_labels("DRBackupTooOld", labels)


def test_paired_actions_have_a_repair_query_on_the_alert_labels() -> None:
    """An alert whose runbook undoes its action on resolve says what "repaired" means."""
    paired = {
        book.alertname for book in RUNBOOKS for step in book.steps if step.on_resolve is not None
    }
    assert paired, "the registry has paired actions"
    for name in paired:
        rule = rules.alert(name)
        assert rule.repair_query, f"{name}: resolves a paired action without a repair_query"
        assert "$labels." in rule.repair_query, name


#: PromQL that makes a series out of missing data: ``absent``, and newness by ``offset``
#: (``x unless x offset 10m`` is "new" after any gap longer than 10 minutes).
_FROM_ABSENCE = re.compile(r"\babsent(?:_over_time)?\s*\(|\boffset\b")


def test_alerts_that_take_nodes_out_of_service_fire_only_on_what_their_series_say() -> None:
    """A drain or a cordon follows positive evidence, never missing data."""
    removing = {
        book.alertname
        for book in RUNBOOKS
        for step in book.steps
        if ACTIONS[step.action].removes_node
    }
    assert {"GPULost", "GPUFatalXid", "GPURowRemapFailure"} <= removing
    for name in removing:
        found = _FROM_ABSENCE.search(rules.alert(name).promql)
        assert found is None, f"{name} drains or cordons on missing data: {found.group(0)!r}"
