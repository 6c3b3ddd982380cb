"""argparse plumbing the areas' command-line interfaces share (``gotthard.cli`` registers
them; they must not import it, which imports them)."""

from __future__ import annotations

import argparse
from typing import Any


def command_group(
    subparsers: Any,
    name: str,
    *,
    help: str,
    description: str | None = None,
    metavar: str = "ACTION",
) -> argparse._SubParsersAction:
    """Add command *name* (to an area's or a group's ``add_subparsers()`` object) whose
    own subcommands are required; return their subparsers.

    ``dest`` is ``<name>_command``, so that one parser can hold several such groups.
    """
    parser = subparsers.add_parser(name, help=help, description=description)
    commands = parser.add_subparsers(dest=f"{name}_command", metavar=metavar)
    commands.required = True
    return commands
