"""Writing what ``gotthard deploy render`` produces: YAML with comments, TOML, one file each.

PyYAML cannot write comments, so a document is dumped first and each comment is put
above the first line that sets its key (``hostPID:``), indented like that line.
:func:`dump_toml` writes a site file (the local target's per-cluster copies).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
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


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else _toml_string(key)


def _toml_string(value: str) -> str:
    # JSON's escapes are TOML's, except that TOML wants DEL escaped too
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, Mapping):
        items = ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items())
        return f"{{ {items} }}" if items else "{}"
    if isinstance(value, list):
        return f"[{', '.join(_toml_value(item) for item in value)}]"
    raise RenderError(f"cannot write {type(value).__name__} {value!r} as TOML")


def _is_table_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, Mapping) for v in value)


def _toml_table(lines: list[str], path: list[str], table: Mapping[str, Any], header: str) -> None:
    if header:
        lines += ["", header]
    nested = {k: v for k, v in table.items() if isinstance(v, Mapping) or _is_table_list(v)}
    lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in table.items() if k not in nested]
    for key, value in nested.items():
        name = ".".join(_toml_key(part) for part in [*path, key])
        if isinstance(value, Mapping):
            _toml_table(lines, [*path, key], value, f"[{name}]")
        else:
            for item in value:
                _toml_table(lines, [*path, key], item, f"[[{name}]]")


def dump_toml(document: Mapping[str, Any]) -> str:
    """*document* (a site file as it was read) as TOML text: tables and arrays of tables as
    sections, lists of scalars and tables inside arrays inline."""
    lines: list[str] = []
    _toml_table(lines, [], document, "")
    return "\n".join(lines).lstrip("\n") + "\n"


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
            if text.startswith("#!"):  # a script: slurmctld runs EpilogSlurmctld itself
                path.chmod(0o755)
            written.append(path)
    except OSError as err:
        raise RenderError(f"{out}: cannot write: {err.strerror or err}") from None
    return written
