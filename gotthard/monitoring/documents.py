"""Generated documents: deterministic YAML, and writing a set of files.

Every product of the monitoring package (rules, dashboards, the Alertmanager
configuration, runbook pages) is a mapping of relative path -> text, written with
:func:`write_files`; the YAML among them comes from :func:`dump_yaml`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    """Block style, indented sequences, multi-line strings as literal blocks."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> Any:
        return super().increase_indent(flow, False)


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _represent_str)


def dump_yaml(document: Any) -> str:
    """Deterministic YAML: insertion order, block style, no line folding."""
    return yaml.dump(
        document,
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=1_000_000,
    )


def write_files(out: Path, documents: Mapping[str, str]) -> list[Path]:
    """Write *documents* (relative path -> text) under *out*; return the paths."""
    written = []
    for name, text in documents.items():
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
