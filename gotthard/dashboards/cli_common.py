"""argparse plumbing the ``dashboards`` and ``rules`` commands share."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def command_group(
    subparsers: Any, name: str, *, help: str, description: str, metavar: str
) -> argparse._SubParsersAction:
    """Add command *name* whose own subcommands are required; return their subparsers.

    ``dest`` is ``<name>_command``, so that one parser can hold several such groups.
    """
    parser = subparsers.add_parser(name, help=help, description=description)
    commands = parser.add_subparsers(dest=f"{name}_command", metavar=metavar)
    commands.required = True
    return commands


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
