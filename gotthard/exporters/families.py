"""The metric families collectors render their snapshots into.

The model and the text format live in :mod:`gotthard.exposition`, shared with every
other writer of metrics (policy textfiles, the DR daemon, the runbook webhook); the
collectors import them from here.
"""

from __future__ import annotations

from gotthard.exposition import (
    Kind,
    MetricFamily,
    counter,
    gauge,
    render_text,
)

__all__ = [
    "Kind",
    "MetricFamily",
    "counter",
    "gauge",
    "render_text",
]
