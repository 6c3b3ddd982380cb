"""The ``gotthard`` command: one subcommand per area."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gotthard import __version__
from gotthard import config as configuration


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gotthard",
        description="Observability and SRE control plane for hybrid Slurm/Kubernetes sites.",
    )
    parser.add_argument("--version", action="version", version=f"gotthard {__version__}")
    parser.add_argument(
        "--config",
        metavar="FILE",
        help=f"site configuration (TOML); default ${configuration.ENV_VAR}, else built-in defaults",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True

    from gotthard import sandbox
    from gotthard.dashboards import cli as dashboards_cli
    from gotthard.dashboards import rules_cli
    from gotthard.dr import cli as dr_cli
    from gotthard.exporters import main as exporter_main
    from gotthard.policies import cli as policies_cli
    from gotthard.runbooks import cli as runbooks_cli

    exporter_main.add_cli(subparsers)
    dashboards_cli.add_cli(subparsers)
    rules_cli.add_cli(subparsers)
    policies_cli.add_cli(subparsers)
    policies_cli.add_audit_cli(subparsers)
    dr_cli.add_cli(subparsers)
    runbooks_cli.add_cli(subparsers)
    sandbox.add_cli(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        cfg = configuration.load(args.config)
    except configuration.ConfigError as err:
        print(f"gotthard: {err}", file=sys.stderr)
        return 2
    handler = getattr(args, "handler", None)
    if handler is None:  # subcommands that need no configuration
        return int(args.func(args) or 0)
    return int(handler(args, cfg) or 0)
