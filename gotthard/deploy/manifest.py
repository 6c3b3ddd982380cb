"""Writing what ``gotthard deploy render`` produces: YAML with comments, one file each.

PyYAML cannot write comments, so a document is dumped first and each comment is put
above the first line that sets its key (``hostPID:``), indented like that line.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml


class RenderError(Exception):
    """The output cannot be written or the input cannot be rendered (exit status 2)."""


class _Dumper(yaml.SafeDumper):
    """Block style; multi-line strings as ``|`` literals; no anchors: a reader of a
    manifest sees every value where it applies."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(document: Any, comments: Mapping[str, str] | None = None) -> str:
    """*document* as YAML; *comments* maps a key to the comment written above it."""
    text = yaml.dump(document, Dumper=_Dumper, sort_keys=False, default_flow_style=False)
    if not comments:
        return text
    lines = text.splitlines()
    for key, comment in comments.items():
        for i, line in enumerate(lines):
            stripped = line.lstrip(" -")
            if stripped.startswith(f"{key}:"):
                indent = " " * (len(line) - len(line.lstrip(" ")))
                lines[i:i] = [f"{indent}# {part}" for part in comment.splitlines()]
                break
        else:
            raise AssertionError(f"no key {key!r} to comment in the document")
    return "\n".join(lines) + "\n"


def dump_all(documents: Sequence[Any], comments: Mapping[str, str] | None = None) -> str:
    """Several documents, separated by ``---``; each comment goes to the first match."""
    parts = []
    left = dict(comments or {})
    for document in documents:
        text = yaml.dump(document, Dumper=_Dumper, sort_keys=False)
        mine = {key: note for key, note in left.items() if f"{key}:" in text}
        for key in mine:
            left.pop(key)
        parts.append(dump(document, mine))
    if left:
        raise AssertionError(f"no keys {sorted(left)} to comment")
    return "---\n".join(parts)


def write(out: Path, files: Mapping[str, str]) -> list[Path]:
    """Write *files* (relative path -> text) below *out*; the paths written.

    A directory that cannot be created or written is a :class:`RenderError`."""
    written = []
    try:
        out.mkdir(parents=True, exist_ok=True)
        if not os.access(out, os.W_OK | os.X_OK):
            raise RenderError(f"{out}: directory is not writable")
        for name, text in files.items():
            path = out / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            written.append(path)
    except OSError as err:
        raise RenderError(f"{out}: cannot write: {err.strerror or err}") from None
    return written
