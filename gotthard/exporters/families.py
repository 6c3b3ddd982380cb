"""Metric families and the Prometheus text exposition format (version 0.0.4).

Collectors build :class:`MetricFamily` objects from their snapshots and the runtime
writes them with :func:`render_text`. This is a deliberately small, fast writer: a
10,000-node Slurm cluster yields well over 100,000 samples per poll, and the generic
``prometheus_client`` object model costs several times the parse itself for that.
Output is checked against ``promtool check metrics`` and ``prometheus_client``'s
parser in the tests.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["gauge", "counter", "untyped"]

_ESCAPES = str.maketrans({"\\": r"\\", '"': r"\"", "\n": r"\n"})


@dataclass(slots=True)
class MetricFamily:
    """One metric name with its HELP, TYPE, label names and samples."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    samples: list[tuple[tuple[str, ...], float]] = field(default_factory=list)

    def add(self, values: tuple[str, ...], value: float) -> None:
        self.samples.append((values, value))


def gauge(name: str, help: str, *labels: str) -> MetricFamily:
    return MetricFamily(name, "gauge", help, labels)


def counter(name: str, help: str, *labels: str) -> MetricFamily:
    if not name.endswith("_total"):
        raise ValueError(f"counter {name} must end in _total")
    return MetricFamily(name, "counter", help, labels)


def format_value(value: float) -> str:
    if type(value) is int:
        return str(value)
    if value != value:  # NaN
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def escape_label(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.translate(_ESCAPES)
    return value


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def render_family(family: MetricFamily, out: list[str]) -> None:
    """Append the text lines of *family* to *out*; a family without samples writes nothing."""
    if not family.samples:
        return
    name = family.name
    out.append(f"# HELP {name} {_escape_help(family.help)}")
    out.append(f"# TYPE {name} {family.kind}")
    labels = family.labels
    if not labels:
        for _, value in family.samples:
            out.append(f"{name} {format_value(value)}")
        return
    # Pre-build 'name{a="' ... '",b="' ... '"} ' so each sample is one join.
    prefix = name + "{" + labels[0] + '="'
    separators = ['",' + label + '="' for label in labels[1:]]
    append = out.append
    for values, value in family.samples:
        parts = [prefix]
        for index, raw in enumerate(values):
            if index:
                parts.append(separators[index - 1])
            parts.append(escape_label(raw))
        parts.append('"} ')
        parts.append(format_value(value))
        append("".join(parts))


def render_text(families: Iterable[MetricFamily]) -> str:
    out: list[str] = []
    for family in families:
        render_family(family, out)
    if not out:
        return ""
    out.append("")
    return "\n".join(out)
