"""``gotthard sandbox up|down|status``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gotthard.config import Config
from gotthard.sandbox import doubles
from gotthard.sandbox.core import Sandbox
from gotthard.sandbox.external import read_site_file
from gotthard.sandbox.processes import SandboxError
from gotthard.sandbox.sites import RUNBOOKS_MODES, MultiSiteSandbox, all_running, parse_sites

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
    up.add_argument(
        "--accounting",
        action="store_true",
        help="also run MariaDB and slurmdbd (accounting, fair-share tree; the exporter "
        "exports it); not with --sites",
    )
    up.add_argument(
        "--sites",
        metavar="A,B",
        help="start a multi-site sandbox (e.g. zurich,lugano) with a global view "
        "instead of the single local site",
    )
    up.add_argument(
        "--runbooks-mode",
        choices=RUNBOOKS_MODES,
        default="dry-run",
        help="mode of the runbook webhooks of --sites (default: dry-run)",
    )
    up.add_argument(
        "--backup-controllers",
        action="store_true",
        help="with --sites: run a backup slurmctld per site too, in its own network and "
        "UTS namespaces (needs root with CAP_NET_ADMIN and CAP_SYS_ADMIN)",
    )
    up.add_argument(
        "--site-file",
        type=Path,
        metavar="FILE",
        help="with --sites: a gotthard.toml whose [sites.SITE.clusters.C.kubernetes] "
        "kubeconfig/context and [dr.placement.karmada] name real clusters to use instead "
        "of emulated ones",
    )
    command("down", "stop what `up` started", _down)
    status = command("status", "show which processes run", _status)
    status.add_argument("--format", choices=("table", "json"), default="table")


def _guarded(action: Action) -> Callable[[argparse.Namespace, Config], int]:
    """``action`` on ``Sandbox(args.dir)``, with sandbox errors and Ctrl-C as one line."""

    def run(args: argparse.Namespace, cfg: Config) -> int:
        # the sandbox writes and uses its own configuration, whatever --config says
        sandbox = Sandbox(args.dir, accounting=getattr(args, "accounting", False))
        try:
            if getattr(args, "accounting", False) and args.sites is not None:
                print("error: --accounting is for the single-site sandbox", file=sys.stderr)
                return 2
            for option in ("site_file", "backup_controllers"):
                if getattr(args, option, None) and args.sites is None:
                    print(f"error: --{option.replace('_', '-')} needs --sites", file=sys.stderr)
                    return 2
            if getattr(args, "sites", None) is not None:
                try:
                    sites = parse_sites(args.sites)
                    external = read_site_file(args.site_file, sites) if args.site_file else None
                except ValueError as exc:  # a bad list, or an unusable site file
                    print(f"error: {exc}", file=sys.stderr)
                    return 2
                multi = MultiSiteSandbox(
                    args.dir,
                    sites,
                    external=external,
                    backup_controllers=args.backup_controllers,
                )
                emulated = set(sites) - set(multi.external.sites) or not multi.external.karmada
                missing = doubles.missing() if emulated else ""
                if missing:  # the emulated APIs and the simulated Velero are not installed
                    print(f"error: {missing}", file=sys.stderr)
                    return 2
                return _up_sites(multi, args)
            multi = MultiSiteSandbox.load(args.dir)
            if multi is not None:
                return _MULTI[action](multi, args)
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


def _up_sites(sandbox: MultiSiteSandbox, args: argparse.Namespace) -> int:
    if args.no_exporter or args.no_prometheus:
        print("error: --sites always starts the exporters and Prometheus", file=sys.stderr)
        return 2
    other = MultiSiteSandbox.load(args.dir)
    if other is not None and other.sites != sandbox.sites:
        print(
            f"error: {args.dir} holds a sandbox of sites {','.join(other.sites)}; "
            "run `gotthard sandbox down` first",
            file=sys.stderr,
        )
        return 2
    sandbox.up(runbooks_mode=args.runbooks_mode)
    return 0


def _up_multi(sandbox: MultiSiteSandbox, args: argparse.Namespace) -> int:
    """``up`` without ``--sites`` in a directory that holds a multi-site sandbox."""
    print(
        f"error: {sandbox.directory} holds a sandbox of sites {','.join(sandbox.sites)}; "
        f"use --sites {','.join(sandbox.sites)} or `gotthard sandbox down` first",
        file=sys.stderr,
    )
    return 2


def _down_multi(sandbox: MultiSiteSandbox, args: argparse.Namespace) -> int:
    sandbox.down()
    return 0


def _status_multi(sandbox: MultiSiteSandbox, args: argparse.Namespace) -> int:
    rows = sandbox.status()
    running = all_running(rows)
    if args.format == "json":
        document = {
            "directory": str(sandbox.directory),
            "sites": list(sandbox.sites),
            "global_url": sandbox.global_url,
            "running": running,
            "processes": rows,
        }
        print(json.dumps(document, indent=2))
        return 0 if running else 1
    header = f"{'SITE':<8} {'KIND':<26} {'STATE':<8} {'PID':>7} URL"
    lines = [header]
    for row in rows:
        site, pid = row["site"] or "-", "-" if row["pid"] is None else row["pid"]
        lines.append(f"{site:<8} {row['kind']:<26} {row['state']:<8} {pid:>7} {row['url']}")
    lines.append(f"global view: {sandbox.global_url}")
    print("\n".join(lines))
    return 0 if running else 1


def _down(sandbox: Sandbox, args: argparse.Namespace) -> int:
    sandbox.down()
    return 0


def format_status(states: Mapping[str, bool]) -> str:
    rows = [f"{'PROCESS':<16} STATE"]
    rows.extend(f"{name:<16} {'running' if ok else 'stopped'}" for name, ok in states.items())
    return "\n".join(rows)


def _status(sandbox: Sandbox, args: argparse.Namespace) -> int:
    states = sandbox.status()
    if args.format == "json":
        rows = [
            {"name": r.name, "site": "local", "kind": r.name, "state": state, "pid": r.pid}
            for r in sandbox.records()
            for state in ["running" if states.get(r.name) else "stopped"]
        ]
        running = bool(states) and all(states.values())
        print(
            json.dumps(
                {"directory": str(sandbox.directory), "running": running, "processes": rows},
                indent=2,
            )
        )
        return 0 if running else 1
    if not states:
        print(f"sandbox in {sandbox.directory} is not running")
        return 1
    print(format_status(states))
    return 0 if all(states.values()) else 1


#: The multi-site variant of each action, for a directory holding a multi-site sandbox.
_MULTI: dict[Action, Callable[[MultiSiteSandbox, argparse.Namespace], int]] = {
    _up: _up_multi,
    _down: _down_multi,
    _status: _status_multi,
}
