"""``gotthard sandbox up|down|status``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gotthard.config import Config
from gotthard.sandbox.core import Sandbox
from gotthard.sandbox.processes import SandboxError

#: A subcommand's work on the sandbox of ``--dir``; returns the exit code.
Action = Callable[[Sandbox, argparse.Namespace], int]


def add_cli(subparsers: Any) -> None:
    """Register ``sandbox up|down|status`` on an argparse ``add_subparsers()`` object.

    Each leaf parser sets ``handler``: ``args.handler(args, cfg)`` returns the exit code.
    """
    parser = subparsers.add_parser(
        "sandbox",
        help="local single-node Slurm site with exporter and Prometheus",
        description="A local single-node Slurm site (munge, slurmctld, slurmd, exporter, "
        "Prometheus) for development and tests.",
    )
    commands = parser.add_subparsers(
        dest="sandbox_command", metavar="{up,down,status}", required=True
    )

    def command(name: str, help_text: str, action: Action) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text)
        sub.add_argument(
            "--dir",
            type=Path,
            default=Path(".sandbox"),
            help="sandbox directory (default: .sandbox)",
        )
        sub.set_defaults(handler=_guarded(action))
        return sub

    up = command("up", "start the sandbox", _up)
    up.add_argument("--no-prometheus", action="store_true", help="do not start Prometheus")
    up.add_argument("--no-exporter", action="store_true", help="do not start the Gotthard exporter")
    command("down", "stop what `up` started", _down)
    command("status", "show which processes run", _status)


def _guarded(action: Action) -> Callable[[argparse.Namespace, Config], int]:
    """``action`` on ``Sandbox(args.dir)``, with sandbox errors and Ctrl-C as one line."""

    def run(args: argparse.Namespace, cfg: Config) -> int:
        # the sandbox writes and uses its own configuration, whatever --config says
        sandbox = Sandbox(args.dir)
        try:
            return action(sandbox, args)
        except SandboxError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130

    return run


def _up(sandbox: Sandbox, args: argparse.Namespace) -> int:
    sandbox.up(with_exporter=not args.no_exporter, with_prometheus=not args.no_prometheus)
    return 0


def _down(sandbox: Sandbox, args: argparse.Namespace) -> int:
    sandbox.down()
    return 0


def format_status(states: Mapping[str, bool]) -> str:
    rows = [f"{'PROCESS':<16} STATE"]
    rows.extend(f"{name:<16} {'running' if ok else 'stopped'}" for name, ok in states.items())
    return "\n".join(rows)


def _status(sandbox: Sandbox, args: argparse.Namespace) -> int:
    states = sandbox.status()
    if not states:
        print(f"sandbox in {sandbox.directory} is not running")
        return 3
    print(format_status(states))
    return 0 if all(states.values()) else 3
