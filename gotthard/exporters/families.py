"""Metric families and the Prometheus text exposition format (version 0.0.4).

Collectors build :class:`MetricFamily` objects from their snapshots and the runtime
writes them with :func:`render_text`. A collector declares its families once, at module
level, as :class:`Desc` objects (node_exporter's descriptors) and makes each poll's
family from its declaration; the metric tables of docs/exporter.md list a module's
declarations (:func:`declared`). This is a deliberately small, fast writer: a
10,000-node Slurm cluster yields well over 100,000 samples per poll, and the generic
``prometheus_client`` object model costs several times the parse itself for that.
Output is checked against ``promtool check metrics`` and ``prometheus_client``'s
parser in the tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Literal

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


@dataclass(frozen=True, slots=True)
class Desc:
    """The declaration of a metric family: its name, help and label names. Its type
    follows from the name, as Prometheus names them: a counter ends in ``_total``, a
    gauge never does."""

    name: str
    help: str
    labels: tuple[str, ...] = ()
    #: Labels an option appends to :attr:`labels` (``user`` with ``--slurm.per-user``).
    optional: tuple[str, ...] = ()

    @property
    def kind(self) -> Kind:
        return "counter" if self.name.endswith("_total") else "gauge"

    def new(self, *, optional: bool = False) -> MetricFamily:
        """An empty family of this declaration (with the :attr:`optional` labels)."""
        labels = self.labels + self.optional if optional else self.labels
        return MetricFamily(self.name, self.kind, self.help, labels)


def desc(name: str, help: str, *labels: str, optional: tuple[str, ...] = ()) -> Desc:
    """Declare the family *name* with its *help* and *labels*."""
    return Desc(name, help, labels, optional)


def declared(module: ModuleType) -> list[Desc]:
    """The declarations of *module*, in definition order: its :class:`Desc` constants and
    those in its module-level tuples, lists and dicts."""

    def walk(value: Any) -> Iterator[Desc]:
        if isinstance(value, Desc):
            yield value
        elif isinstance(value, tuple | list):
            for item in value:
                yield from walk(item)
        elif isinstance(value, dict):
            for item in value.values():
                yield from walk(item)

    found = [desc for value in vars(module).values() for desc in walk(value)]
    return list(dict.fromkeys(found))


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
        out.extend(f"{name} {value}" for _, value in family.samples)
        return
    template = name + "{" + ",".join(f'{label}="%s"' for label in labels) + "} %s"
    # Fast path: format every sample without escaping, then check the whole block
    # at C speed. Only a family whose label values hold a quote, a backslash or a
    # newline (rare: free-text node reasons) is written again, escaped.
    block = "\n".join([template % (*values, value) for values, value in family.samples])
    quotes = 2 * len(labels) * len(family.samples)
    if block.count('"') != quotes or "\\" in block or block.count("\n") != len(family.samples) - 1:
        block = "\n".join(
            [template % (*map(escape_label, values), value) for values, value in family.samples]
        )
    out.append(block)


def render_text(families: Iterable[MetricFamily]) -> str:
    out: list[str] = []
    for family in families:
        render_family(family, out)
    if not out:
        return ""
    out.append("")
    return "\n".join(out)
