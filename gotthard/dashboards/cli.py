"""``gotthard dashboards build|lint|check``."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from gotthard.config import Config
from gotthard.dashboards import check as live
from gotthard.dashboards import grafana, lint
from gotthard.dashboards.cli_common import command_group, write_and_list


def add_cli(subparsers: argparse._SubParsersAction) -> None:
    commands = command_group(
        subparsers,
        "dashboards",
        help="build, lint and check the Grafana dashboards",
        description="Grafana dashboards as code: build the JSON, lint it offline, and "
        "check every panel query against a real Prometheus.",
        metavar="COMMAND",
    )

    build = commands.add_parser("build", help="write one <uid>.json per dashboard")
    build.add_argument("--out", required=True, metavar="DIR", help="output directory")
    build.set_defaults(handler=run_build)

    lint_parser = commands.add_parser("lint", help="offline lint rules (no Prometheus needed)")
    lint_parser.add_argument(
        "--dashboards",
        metavar="DIR",
        help="lint the *.json files in DIR instead of the built-in dashboards",
    )
    lint_parser.set_defaults(handler=run_lint)

    check = commands.add_parser(
        "check", help="lint, then send every panel query to Prometheus; print a table"
    )
    check.add_argument("--prometheus", required=True, metavar="URL", help="Prometheus base URL")
    check.add_argument(
        "--dashboards",
        metavar="DIR",
        help="check the *.json files in DIR instead of the built-in dashboards",
    )
    check.add_argument(
        "--timeout",
        type=_positive,
        default=10.0,
        metavar="S",
        help="seconds per HTTP request (default 10)",
    )
    check.add_argument(
        "--rate-interval",
        type=_duration,
        default="1m",
        metavar="DURATION",
        help="value for $__rate_interval and $__interval (default 1m; use at least 4 "
        "scrape intervals)",
    )
    check.set_defaults(handler=run_check)


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
    return value


def _duration(text: str) -> str:
    if not re.fullmatch(r"(?:\d+(?:ms|s|m|h|d|w|y))+", text):
        raise argparse.ArgumentTypeError(f"not a Prometheus duration: {text!r}")
    return text


def load_dashboards(directory: str | None) -> list[dict[str, Any]]:
    """The built-in dashboards, or every ``*.json`` in *directory* (sorted by name)."""
    if directory is None:
        return grafana.build_dashboards()
    root = Path(directory)
    if not root.is_dir():
        raise OSError(f"{root}: not a directory")
    paths = sorted(root.glob("*.json"))
    if not paths:
        raise OSError(f"{root}: no *.json dashboards")
    dashboards = []
    for path in paths:
        try:
            dash = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as err:
            raise OSError(f"{path}: not valid JSON: {err}") from None
        if not isinstance(dash, dict):
            raise OSError(f"{path}: not a dashboard object")
        dashboards.append(dash)
    return dashboards


def run_build(args: argparse.Namespace, cfg: Config) -> int:
    return write_and_list(
        "dashboards build", lambda: grafana.write_dashboards(args.out), error_status=2
    )


def _lint(dashboards: list[dict[str, Any]]) -> int:
    problems = lint.lint_dashboards(dashboards)
    for problem in problems:
        print(f"lint: {problem}")
    return len(problems)


def _load_or_report(args: argparse.Namespace, command: str) -> list[dict[str, Any]] | None:
    """:func:`load_dashboards` for *command*; None (after saying why) when that fails."""
    try:
        return load_dashboards(args.dashboards)
    except OSError as err:
        print(f"gotthard dashboards {command}: {err}", file=sys.stderr)
        return None


def run_lint(args: argparse.Namespace, cfg: Config) -> int:
    dashboards = _load_or_report(args, "lint")
    if dashboards is None:
        return 2
    count = _lint(dashboards)
    panels = sum(1 for dash in dashboards for _ in lint.iter_panels(dash))
    print(f"{len(dashboards)} dashboards, {panels} panels: {count} lint problem(s)")
    return 1 if count else 0


def run_check(args: argparse.Namespace, cfg: Config) -> int:
    dashboards = _load_or_report(args, "check")
    if dashboards is None:
        return 2
    problems = _lint(dashboards)
    prometheus = live.Prometheus(args.prometheus, timeout=args.timeout)
    try:
        results = live.check(prometheus, dashboards, rate_interval=args.rate_interval)
    except live.CheckError as err:
        print(f"gotthard dashboards check: {err}", file=sys.stderr)
        return 2
    live.report(results, sys.stdout)
    if problems:
        print(f"{problems} lint problem(s)")
    failed = problems or any(r.status == live.FAIL for r in results)
    return 1 if failed else 0
