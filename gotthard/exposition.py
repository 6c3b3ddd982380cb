"""The Prometheus text exposition format (version 0.0.4), written here and nowhere else.

Every metrics text Gotthard produces goes through this module: the exporter's collectors
(:class:`MetricFamily` objects built from their snapshots), the policy textfiles, the
TLS certificate gauge of :mod:`gotthard.serve`, and the ``/metrics`` of the DR daemon
and the runbook webhook, whose ``prometheus_client`` registries are written by
:func:`render_registry`. The rules, the same for all of them:

* ``# HELP`` escapes backslash and newline; a label value escapes backslash, double
  quote and newline (:func:`escape_label`);
* a value is written as Python's ``str`` writes it (``2``, ``0.5``, ``1e+20``, ``inf``,
  ``nan``), which Prometheus' parser reads;
* a family without samples writes nothing, as client_golang's registry does.

The writer is deliberately small and fast: a 10,000-node Slurm cluster yields well over
100,000 samples per poll, and the generic ``prometheus_client`` object model costs
several times the parse itself for that. Output is checked against ``promtool check
metrics`` and ``prometheus_client``'s parser in the tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from prometheus_client.registry import Collector

Kind = Literal["gauge", "counter", "histogram", "untyped"]

#: The ``Content-Type`` of a ``/metrics`` answer in this format.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

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


def escape_label(value: object) -> str:
    """A label value as it goes between the double quotes."""
    text = str(value)
    if "\\" in text or '"' in text or "\n" in text:
        return text.translate(_ESCAPES)
    return text


def _header(name: str, kind: str, help: str, out: list[str]) -> None:
    """The ``# HELP`` and ``# TYPE`` lines of one family."""
    escaped = help.replace("\\", r"\\").replace("\n", r"\n")
    out.append(f"# HELP {name} {escaped}")
    out.append(f"# TYPE {name} {kind}")


def render_family(family: MetricFamily, out: list[str]) -> None:
    """Append the text lines of *family* to *out*; a family without samples writes nothing."""
    if not family.samples:
        return
    name = family.name
    _header(name, family.kind, family.help, out)
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
    """The exposition text of *families*, in order; empty when none has samples."""
    out: list[str] = []
    for family in families:
        render_family(family, out)
    if not out:
        return ""
    out.append("")
    return "\n".join(out)


#: prometheus_client's family types -> the TYPE written (OpenMetrics' ``unknown`` is
#: the text format's ``untyped``).
_CLIENT_KINDS: Mapping[str, str] = {
    "counter": "counter",
    "gauge": "gauge",
    "histogram": "histogram",
}


def _sample_line(name: str, labels: Mapping[str, str], value: float) -> str:
    if not labels:
        return f"{name} {value}"
    pairs = ",".join(f'{key}="{escape_label(labels[key])}"' for key in sorted(labels))
    return f"{name}{{{pairs}}} {value}"


def render_registry(registry: Collector) -> str:
    """The exposition text of a ``prometheus_client`` registry (the DR daemon's and the
    webhook's instruments): labels in name order, as prometheus_client writes them;
    OpenMetrics' ``_created`` samples are left out."""
    out: list[str] = []
    for metric in registry.collect():
        kind = _CLIENT_KINDS.get(metric.type, "untyped")
        name = f"{metric.name}_total" if kind == "counter" else metric.name
        created = f"{metric.name}_created"
        lines = [
            _sample_line(sample.name, sample.labels, sample.value)
            for sample in metric.samples
            if sample.name != created
        ]
        if lines:
            _header(name, kind, metric.documentation, out)
            out.extend(lines)
    if not out:
        return ""
    out.append("")
    return "\n".join(out)
