"""The metric families collectors render their snapshots into.

A collector declares its families once, at module level, as :class:`Desc` objects
(node_exporter's descriptors) and makes each poll's family from its declaration; the
metric tables of docs/exporter.md list a module's declarations (:func:`declared`).
The model and the text format live in :mod:`gotthard.exposition`, shared with every
other writer of metrics (policy textfiles, the DR daemon, the runbook webhook); the
collectors import them from here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from gotthard.exposition import Kind, MetricFamily, counter, gauge, render_text

__all__ = [
    "Desc",
    "Kind",
    "MetricFamily",
    "counter",
    "declared",
    "desc",
    "gauge",
    "render_text",
]


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
