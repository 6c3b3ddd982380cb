"""The ``gotthard`` command: one subcommand per area."""

from __future__ import annotations

import argparse
import functools
import importlib
import sys
from collections.abc import Sequence

from gotthard import __version__, extras
from gotthard import config as configuration

#: Subcommand -> (module, function registering it). Modules are imported only for the
#: subcommand being run, so ``gotthard exporter`` never loads the control plane's
#: libraries (kubernetes, APScheduler, SQLAlchemy, regopy, grafanalib).
COMMANDS: dict[str, tuple[str, str]] = {
    "exporter": ("gotthard.exporters.main", "add_cli"),
    "dashboards": ("gotthard.monitoring.cli", "add_cli"),
    "rules": ("gotthard.monitoring.rules_cli", "add_cli"),
    "alertmanager": ("gotthard.monitoring.rules_cli", "add_alertmanager_cli"),
    "policy": ("gotthard.policies.cli", "add_cli"),
    "audit": ("gotthard.policies.cli", "add_audit_cli"),
    "dr": ("gotthard.dr.cli", "add_cli"),
    "runbooks": ("gotthard.runbooks.cli", "add_cli"),
    "sandbox": ("gotthard.sandbox", "add_cli"),
    "deploy": ("gotthard.deploy.cli", "add_cli"),
}


def _command_in(argv: Sequence[str]) -> str | None:
    """The subcommand named on the command line (after ``--config FILE``), if known."""
    args = iter(argv)
    for arg in args:
        if arg == "--config":
            next(args, None)
        elif not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with *argv* naming a subcommand, only that one is registered."""
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
    only = _command_in(argv) if argv is not None else None
    for name, (module, function) in COMMANDS.items():
        if only is None or name == only:
            _register(subparsers, name, module, function, listing=only is None)
    return parser


def _register(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    module: str,
    function: str,
    *,
    listing: bool,
) -> None:
    """Register subcommand *name* from *module*.

    A subcommand whose optional dependencies are not installed raises
    :class:`ModuleNotFoundError` when it is the one being run; when every subcommand is
    listed (``gotthard --help``) it stays listed, with the extra that installs it."""
    try:
        add_cli = getattr(importlib.import_module(module), function)
    except ModuleNotFoundError as err:
        missing = extras.missing_extra(err, name)
        if missing is None or not listing:
            raise
        hint = extras.install_hint(missing.extra)
        stub = subparsers.add_parser(name, help=f"(not installed: {hint})")
        stub.set_defaults(handler=functools.partial(_not_installed, missing))
        return
    add_cli(subparsers)


def _not_installed(missing: extras.MissingExtra, *_: object) -> int:
    raise missing


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, load the one configuration, run the subcommand.

    Exit status: 0 success, 1 a finding, 2 usage, input or environment error. A
    configuration or cluster-access problem, or an optional dependency this install
    lacks, is one line on stderr, never a traceback."""
    from gotthard.kube import KubeError

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser(argv)
        args = parser.parse_args(argv)
        cfg = configuration.load(configuration.path_of(args))
        return int(args.handler(args, cfg) or 0)
    except (configuration.ConfigError, KubeError, extras.MissingExtra) as err:
        print(f"gotthard: {err}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as err:
        # an optional library the subcommand imports (at registration or when it runs)
        # that this install lacks: name the extra, never a traceback
        missing = extras.missing_extra(err, _command_in(argv))
        if missing is None:
            raise
        print(f"gotthard: {missing}", file=sys.stderr)
        return 2
