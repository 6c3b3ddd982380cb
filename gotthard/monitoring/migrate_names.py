"""``gotthard rules migrate-names``: move text files from the old metric names to the new.

The renames are the table of :mod:`gotthard.exporters.names`. An old name is replaced
where it stands as a whole Prometheus name: not inside a longer name (letters, digits,
``_``, and ``:`` joined to more name characters, as in a recording rule
``level:metric:operations``), so a name already moved (``gotthard_slurm_up``) and a
name that merely starts like an old one (``slurm_up_total``) stay as they are; running
the tool twice changes nothing the second time.

What is left alone:

* in Python files (``.py``), everything but string literals and comments: identifiers
  (``def gpu_health(...)``, ``snapshot.gpu_lost``, ``slurm_up: bool``) are code, not
  metric names; inside an f-string's ``{...}`` fields, all but their string literals;
* in other files, a name followed by ``(`` with no space (a call), by ``=`` that is no ``==``/``=~``
  (an assignment or keyword), or by ``: Type`` (an annotation), or preceded by an
  attribute dot (``x.gpu_lost``): code in a document;
* a line with ``migrate-names: keep``; the lines between ``migrate-names: off`` and
  ``migrate-names: on``; a file with ``migrate-names: skip-file`` (recorded outputs of
  other projects, lists of other exporters' names);
* files that are not UTF-8 text, and the folders ``.git``, ``.venv``, ``__pycache__``,
  ``node_modules`` and the tool caches.

``--check`` changes nothing: it lists each old name left (``FILE:LINE: old -> new``)
and exits 1, or exits 0 when none is left.
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import tokenize
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gotthard.exporters import names

KEEP = "migrate-names: keep"
SKIP_FILE = "migrate-names: skip-file"
OFF = "migrate-names: off"
ON = "migrate-names: on"
SKIPPED_DIRS = frozenset(
    {
        ".git",
        ".venv",
        "venv",
        "__pycache__",
        "node_modules",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        ".hypothesis",
    }
)
#: Characters of a Prometheus name.
_NAME = "A-Za-z0-9_"
#: Anything after a name that makes it code in a document: a call, an assignment or
#: keyword argument, a type annotation.
_CODE_AFTER = re.compile(
    r"(?:\(|\s*=(?![=~])|:\s*(?:int|float|str|bool|bytes|list|dict|tuple|set|Any|None|"
    r"[A-Z][A-Za-z0-9_]*)\b)"
)
#: A string literal inside an f-string field.
_LITERAL = re.compile(r"(['\"])(.*?)\1")
_ATTRIBUTE_BEFORE = re.compile(rf"[{_NAME})\]]\.$")


@dataclass(frozen=True, slots=True)
class Finding:
    path: Path
    line: int
    old: str
    new: str


def _pattern(table: Mapping[str, str]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(old) for old in sorted(table, key=len, reverse=True))
    # after an escape (``\n`` in a string literal or JSON) a name starts, though ``n`` is
    # a name character
    before = rf"(?:(?<=\\[nrt])|(?<![{_NAME}:]))"
    return re.compile(rf"{before}(?:{alternatives})(?![{_NAME}]|:[{_NAME}])")


class Migrator:
    """Rewrites text with the table *table* (old -> new; default: the names table)."""

    def __init__(self, table: Mapping[str, str] | None = None) -> None:
        self.table = dict(names.mapping() if table is None else table)
        self.pattern = _pattern(self.table)

    # -- plain text ----------------------------------------------------------------------

    def _replace(self, text: str, *, code_rules: bool) -> tuple[str, list[tuple[int, str]]]:
        """*text* with the old names replaced; (offset, old name) of each replacement."""
        found: list[tuple[int, str]] = []
        out: list[str] = []
        last = 0
        for match in self.pattern.finditer(text):
            start, end = match.span()
            if code_rules and (
                _CODE_AFTER.match(text, end)
                or _ATTRIBUTE_BEFORE.search(text[max(0, start - 2) : start])
            ):
                continue
            found.append((start, match.group()))
            out.append(text[last:start])
            out.append(self.table[match.group()])
            last = end
        out.append(text[last:])
        return "".join(out), found

    def _text(self, text: str) -> tuple[str, list[tuple[int, str]]]:
        """Rewrite a non-Python file, line by line for the markers."""
        lines = text.splitlines(keepends=True)
        out: list[str] = []
        found: list[tuple[int, str]] = []
        skipped = _skipped_lines(lines)
        for number, line in enumerate(lines, 1):
            if number in skipped:
                out.append(line)
                continue
            new, hits = self._replace(line, code_rules=True)
            out.append(new)
            found.extend((number, old) for _, old in hits)
        return "".join(out), found

    # -- Python ----------------------------------------------------------------------------

    def _segments(self, token: str) -> Iterator[tuple[str, bool]]:
        """(part, rewritable) of a string token: an f-string's ``{...}`` fields are not."""
        prefix = re.match(r"[A-Za-z]*", token)
        assert prefix is not None
        if "f" not in prefix.group().lower():
            yield token, True
            return
        depth = 0
        start = 0
        index = 0
        while index < len(token):
            char = token[index]
            if depth == 0 and token.startswith("{{", index):
                index += 2
                continue
            if char == "{":
                if depth == 0:
                    yield token[start:index], True
                    start = index
                depth += 1
            elif char == "}" and depth > 0:
                depth -= 1
                if depth == 0:
                    yield token[start : index + 1], False
                    start = index + 1
            index += 1
        yield token[start:], depth == 0

    def _field(self, field: str) -> tuple[str, list[tuple[int, str]]]:
        """An f-string's ``{...}`` field: code, whose string literals are rewritten
        (``{sel('slurm_up')}``), not its names (``{slurm_up}``)."""
        found: list[tuple[int, str]] = []

        def literal(match: re.Match[str]) -> str:
            new, hits = self._replace(match.group(2), code_rules=False)
            found.extend((match.start(2) + offset, old) for offset, old in hits)
            return match.group(1) + new + match.group(1)

        return _LITERAL.sub(literal, field), found

    def _python(self, text: str) -> tuple[str, list[tuple[int, str]]] | None:
        """Rewrite the strings and comments of Python source; None if it does not
        tokenize (then it is rewritten as text)."""
        try:
            tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
        except (tokenize.TokenError, SyntaxError, IndentationError):
            return None
        lines = text.splitlines(keepends=True)
        offsets = [0]
        for line in lines:
            offsets.append(offsets[-1] + len(line))
        skipped = _skipped_lines(lines)
        edits: list[tuple[int, int, str]] = []
        found: list[tuple[int, str]] = []
        for token in tokens:
            if token.type not in (tokenize.STRING, tokenize.COMMENT):
                continue
            (row, col), (end_row, end_col) = token.start, token.end
            if any(number in skipped for number in range(row, end_row + 1)):
                continue
            pieces: list[str] = []
            hits_here: list[tuple[int, str]] = []
            position = 0
            for part, rewritable in self._segments(token.string):
                new, hits = (
                    self._replace(part, code_rules=False) if rewritable else self._field(part)
                )
                pieces.append(new)
                for offset, old in hits:
                    line = row + token.string[: position + offset].count("\n")
                    hits_here.append((line, old))
                position += len(part)
            if hits_here:
                begin = offsets[row - 1] + col
                edits.append((begin, offsets[end_row - 1] + end_col, "".join(pieces)))
                found.extend(hits_here)
        for begin, end, replacement in reversed(edits):
            text = text[:begin] + replacement + text[end:]
        return text, found

    # -- files -------------------------------------------------------------------------------

    def migrate_text(self, text: str, *, python: bool = False) -> tuple[str, list[tuple[int, str]]]:
        """(*text* migrated, (line, old name) of each replacement)."""
        if SKIP_FILE in text:
            return text, []
        if python:
            result = self._python(text)
            if result is not None:
                return result
        return self._text(text)

    def migrate_file(self, path: Path, *, check: bool) -> list[Finding]:
        """Migrate *path* (unless *check*); the old names found in it."""
        try:
            raw = path.read_bytes()
        except OSError:
            return []
        if b"\0" in raw:
            return []
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return []
        new, hits = self.migrate_text(text, python=path.suffix == ".py")
        if not check and new != text:
            try:
                path.write_text(new, encoding="utf-8")
            except OSError as err:
                raise OSError(f"cannot write {path}: {err.strerror or err}") from None
        return [Finding(path, line, old, self.table[old]) for line, old in hits]


def _skipped_lines(lines: list[str]) -> set[int]:
    """Line numbers (1-based) under a ``keep`` marker or between ``off`` and ``on``."""
    skipped: set[int] = set()
    off = False
    for number, line in enumerate(lines, 1):
        if OFF in line:
            off = True
        elif ON in line:
            off = False
        if off or KEEP in line:
            skipped.add(number)
    return skipped


def files(paths: Iterable[Path]) -> Iterator[Path]:
    """The files under *paths* (files as given, folders walked), skipped folders left out."""
    for path in paths:
        if path.is_dir():
            for child in sorted(path.iterdir()):
                if child.is_dir() and (child.name in SKIPPED_DIRS or child.is_symlink()):
                    continue
                yield from files([child])
        elif path.is_file():
            yield path


def run(
    paths: Iterable[Path], *, check: bool, table: Mapping[str, str] | None = None
) -> list[Finding]:
    """Migrate (or, with *check*, only look at) every file under *paths*."""
    migrator = Migrator(table)
    found: list[Finding] = []
    for path in files(paths):
        found.extend(migrator.migrate_file(path, check=check))
    return found


def _cmd(args: argparse.Namespace, _cfg: Any) -> int:
    paths = [Path(p) for p in args.paths]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        print(
            f"gotthard rules migrate-names: no such file or folder: {', '.join(missing)}",
            file=sys.stderr,
        )
        return 2
    try:
        found = run(paths, check=args.check)
    except OSError as err:
        print(f"gotthard rules migrate-names: {err}", file=sys.stderr)
        return 2
    if args.check:
        for finding in found:
            print(f"{finding.path}:{finding.line}: {finding.old} -> {finding.new}")
        if found:
            print(
                f"{len(found)} old metric name(s) left; run without --check to rename them",
                file=sys.stderr,
            )
            return 1
        return 0
    changed = sorted({str(finding.path) for finding in found})
    for path in changed:
        print(path)
    print(f"renamed {len(found)} occurrence(s) in {len(changed)} file(s)", file=sys.stderr)
    return 0


def add_parser(commands: Any) -> None:
    """Register ``rules migrate-names`` on the ``rules`` subcommands."""
    parser = commands.add_parser(
        "migrate-names",
        help="rename the old metric names in text files (dashboards, alerts, code, docs)",
        description="Replace each pre-1.0 metric name (the rename table of "
        "docs/exporter.md) with its new name in the files under PATH: a site's own "
        "dashboards, alerts and notes, or this repository. Whole names only; Python "
        "identifiers are left alone; a line with 'migrate-names: keep', the lines "
        "between 'migrate-names: off' and 'migrate-names: on', and files with "
        "'migrate-names: skip-file' are kept. Running it again changes nothing. "
        "Exit status: 0 done (with --check: no old name left), 1 with --check: old "
        "names left (listed FILE:LINE: old -> new), 2 a PATH does not exist or a file "
        "cannot be written.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="file or folder (walked)")
    parser.add_argument(
        "--check",
        action="store_true",
        help="change nothing; list the old names left and exit 1 if any",
    )
    parser.set_defaults(handler=_cmd)
