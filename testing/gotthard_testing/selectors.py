"""Kubernetes label selectors, as the API server and Velero read them: the string form of
a LIST's ``labelSelector`` and the ``metav1.LabelSelector`` of a spec (turned into that
string form)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["LabelPredicate", "label_selector", "labels_of", "selector_string"]

_SELECTOR_TERM = re.compile(
    r"\s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9][A-Za-z0-9_./-]*)\s*"
    r"(?:(?P<op>==|=|!=)\s*(?P<value>[A-Za-z0-9_.-]*)"
    r"|\s+(?P<setop>in|notin)\s*\((?P<values>[^)]*)\))?\s*$"
)
LabelPredicate = Callable[[Mapping[str, str]], bool]


def _selector_terms(selector: str) -> list[str]:
    """*selector* split at the commas outside ``( )``."""
    terms, depth, start = [], 0, 0
    for i, char in enumerate(selector):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(selector[start:i])
            start = i + 1
    terms.append(selector[start:])
    return [term for term in terms if term.strip()]


def _term_predicate(term: str) -> LabelPredicate:
    match = _SELECTOR_TERM.match(term)
    if match is None or (match["neg"] and (match["op"] or match["setop"])):
        raise ValueError(f"unable to parse requirement: {term.strip()!r}")
    key, value = match["key"], match["value"]
    if match["op"] in ("=", "=="):
        return lambda labels: labels.get(key) == value
    if match["op"] == "!=":
        return lambda labels: labels.get(key) != value
    if match["setop"]:
        values = {v.strip() for v in match["values"].split(",") if v.strip()}
        if match["setop"] == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if match["neg"]:
        return lambda labels: key not in labels
    return lambda labels: key in labels


def label_selector(selector: str) -> LabelPredicate:
    """The predicate of a Kubernetes equality- and set-based label *selector* (all its
    terms, ANDed). ``!=`` and ``notin`` match objects without the key, as the API does.
    Raises ValueError for a malformed selector."""
    predicates = [_term_predicate(term) for term in _selector_terms(selector)]
    return lambda labels: all(predicate(labels) for predicate in predicates)


def selector_string(selector: Mapping[str, Any] | None) -> str:
    """A ``metav1.LabelSelector`` (``matchLabels``, ``matchExpressions``) as the string
    form the API's ``labelSelector`` takes (``""``: everything)."""
    if not selector:
        return ""
    terms = [f"{key}={value}" for key, value in (selector.get("matchLabels") or {}).items()]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], ",".join(expr.get("values") or [])
        terms.append(
            {"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})"}.get(
                op, key if op == "Exists" else f"!{key}"
            )
        )
    return ",".join(terms)


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    """The labels of an object (``{}`` when it has none)."""
    return (obj.get("metadata") or {}).get("labels") or {}
