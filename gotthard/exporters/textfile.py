"""The ``textfile`` collector: ``*.prom`` files of a directory, as node_exporter's.

Batch jobs that cannot be scraped (``gotthard policy eval --textfile``, ``gotthard audit
kube-bench --textfile``, cron jobs) write their metrics into files in one directory; the
collector reads every ``*.prom`` file there on each poll and serves its samples. Files
must be written atomically (write elsewhere, then rename); names starting with ``.`` are
skipped, so a temporary file next to the target is never read half-written.

Like node_exporter's collector it adds ``gotthard_textfile_mtime_seconds{file}`` per file
read and ``gotthard_textfile_scrape_error`` (1 when any file could not be read or parsed,
or repeats a series another file has). A file in error contributes nothing. Gauges,
counters and untyped metrics keep their type; histogram and summary samples are served
as untyped series (``_bucket``, ``_sum``, ``_count``). A file may not define the
exporter's own ``gotthard_collector_*``, ``gotthard_textfile_*``, ``gotthard_build_info`` or
``gotthard_time_seconds``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client.parser import text_string_to_metric_families

from gotthard.exporters.families import Kind, MetricFamily, desc
from gotthard.exporters.runtime import SetupError
from gotthard.exporters.settings import TextfileExporterConfig

if TYPE_CHECKING:
    from gotthard.config import Config

#: Names a file may not define: the exporter's own families.
RESERVED_PREFIXES = (
    "gotthard_collector_",
    "gotthard_textfile_",
    "gotthard_build_info",
    "gotthard_time_seconds",
)
#: At most this many bytes are read from one file.
MAX_FILE_BYTES = 16 << 20


class TextfileError(ValueError):
    """One file cannot be served (unreadable, not the text format, reserved names)."""


@dataclass
class TextfileSnapshot:
    #: file name -> modification time (Unix seconds), for every file served
    mtimes: dict[str, float] = field(default_factory=dict)
    #: sample name -> family, merged over the files
    families: dict[str, MetricFamily] = field(default_factory=dict)
    #: file name -> why it was not served
    errors: dict[str, str] = field(default_factory=dict)


#: One sample name's type, help and samples (labels, value), as read from the files.
Entry = tuple[Kind, str, list[tuple[dict[str, str], float]]]


def _kind(kind: str) -> Kind:
    return kind if kind in ("gauge", "counter") else "untyped"  # type: ignore[return-value]


def parse(text: str) -> dict[str, Entry]:
    """Sample name -> (type, help, samples) of one file; TextfileError says what is wrong."""
    found: dict[str, Entry] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.endswith("_created") and family.type == "counter":
                    continue
                if sample.name.startswith(RESERVED_PREFIXES):
                    raise TextfileError(f"{sample.name}: reserved for the exporter itself")
                kind = _kind(family.type)
                if kind == "counter" and not sample.name.endswith("_total"):
                    kind = "untyped"
                entry = found.setdefault(sample.name, (kind, family.documentation, []))
                entry[2].append((dict(sample.labels), float(sample.value)))
    except ValueError as err:
        raise TextfileError(f"not the Prometheus text format: {err}") from None
    return found


def read(directory: Path) -> TextfileSnapshot:
    """Every ``*.prom`` file of *directory* (sorted by name), merged."""
    snapshot = TextfileSnapshot()
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    merged: dict[str, Entry] = {}
    try:
        names = sorted(
            p.name for p in directory.iterdir() if p.name.endswith(".prom") and p.name[0] != "."
        )
    except OSError as err:
        snapshot.errors[str(directory)] = f"cannot list: {err.strerror or err}"
        return snapshot
    for name in names:
        path = directory / name
        try:
            with path.open("rb") as handle:
                mtime = os.fstat(handle.fileno()).st_mtime
                data = handle.read(MAX_FILE_BYTES + 1)
            if len(data) > MAX_FILE_BYTES:
                raise TextfileError(f"larger than {MAX_FILE_BYTES} bytes")
            parsed = parse(data.decode("utf-8"))
            keys = [
                (sample, tuple(sorted(labels.items())))
                for sample, (_, _, samples) in parsed.items()
                for labels, _ in samples
            ]
            repeated = [key for key in keys if key in seen]
            if repeated or len(set(keys)) != len(keys):
                what = repeated[0][0] if repeated else "a series"
                raise TextfileError(f"{what}: repeats a series already served")
        except (OSError, UnicodeDecodeError, TextfileError) as err:
            snapshot.errors[name] = str(err)
            continue
        seen.update(keys)
        snapshot.mtimes[name] = mtime
        for sample, (kind, help_text, rows) in parsed.items():
            # the first file to define a name sets its type and help
            merged.setdefault(sample, (kind, help_text, []))[2].extend(rows)
    snapshot.families = {name: _family(name, *entry) for name, entry in merged.items()}
    return snapshot


def _family(
    name: str, kind: Kind, help_text: str, rows: list[tuple[dict[str, str], float]]
) -> MetricFamily:
    """One family of every file's samples of *name*. Its label names are the union over
    the samples; a sample without one of them gets the empty value, which Prometheus reads
    as absent."""
    labels = tuple(sorted({label for values, _ in rows for label in values}))
    family = MetricFamily(name, kind, help_text or f"textfile {name}", labels)
    family.samples = [(tuple(values.get(label, "") for label in labels), v) for values, v in rows]
    return family


#: The collector's own families, served after the files' samples.
MTIME = desc(
    "gotthard_textfile_mtime_seconds",
    "Modification time of each textfile served (Unix seconds).",
    "file",
)
SCRAPE_ERROR = desc(
    "gotthard_textfile_scrape_error", "1 if a textfile could not be read, parsed or merged, else 0."
)


def render(snapshot: TextfileSnapshot) -> list[MetricFamily]:
    mtime = MTIME.new()
    for name, seconds in snapshot.mtimes.items():
        mtime.add((name,), seconds)
    error = SCRAPE_ERROR.new()
    error.add((), 1 if snapshot.errors else 0)
    return [*snapshot.families.values(), mtime, error]


class TextfileCollector:
    """``*.prom`` files of ``[exporter.textfile] directory``, read on every scrape."""

    name = "textfile"

    def __init__(self, config: TextfileExporterConfig) -> None:
        if not config.directory:
            raise SetupError("no directory: set --textfile.directory or [exporter.textfile]")
        self.directory = Path(config.directory)
        self.poll_interval = 0.0

    def poll(self) -> TextfileSnapshot:
        return read(self.directory)

    def render(self, snapshot: TextfileSnapshot) -> list[MetricFamily]:
        return render(snapshot)

    def snapshot_errors(self, snapshot: TextfileSnapshot) -> int:
        return len(snapshot.errors)


def from_config(cfg: Config) -> TextfileCollector:
    return TextfileCollector(cfg.exporter.textfile)
