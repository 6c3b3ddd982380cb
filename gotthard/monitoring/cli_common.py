"""argparse plumbing the ``dashboards`` and ``rules`` commands share."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path


def build_command(
    commands: argparse._SubParsersAction,
    *,
    help: str,
    description: str,
    choice: tuple[str, Sequence[str]],
) -> argparse.ArgumentParser:
    """The ``build`` subcommand of *commands*: ``--out DIR`` and the option *choice*
    (flag, values; the first value is the default) that picks what it writes."""
    parser = commands.add_parser("build", help=help, description=description)
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory")
    flag, values = choice
    parser.add_argument(flag, choices=values, default=values[0], help="(default: %(default)s)")
    return parser


#: ``(flag, default, metavar, help)`` of an option that takes one value.
Option = tuple[str, str | None, str, str]


def add_options(parser: argparse.ArgumentParser, *options: Option) -> None:
    """Add each of *options*; ``%(default)s`` in a help text names the default."""
    for flag, default, metavar, help_text in options:
        parser.add_argument(flag, default=default, metavar=metavar, help=help_text)


def add_repeatable(parser: argparse.ArgumentParser, flag: str, metavar: str, help: str) -> None:
    """An option given any number of times; its values as a list (None when never)."""
    parser.add_argument(flag, action="append", metavar=metavar, help=help)


def write_and_list(command: str, write: Callable[[], list[Path]], *, error_status: int) -> int:
    """Run *write*, print the paths it wrote one a line, and return 0.

    An ``OSError`` is reported as ``gotthard <command>: <error>`` on stderr and gives
    *error_status*.
    """
    try:
        paths = write()
    except OSError as err:
        print(f"gotthard {command}: {err}", file=sys.stderr)
        return error_status
    for path in paths:
        print(path)
    return 0
