"""``gotthard dashboards build|lint|check``."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from gotthard.cli_common import command_group
from gotthard.config import Config
from gotthard.monitoring import deliver
from gotthard.monitoring.cli_common import (
    add_options,
    build_command,
    write_and_list,
)
from gotthard.monitoring.dashboards import build, lint
from gotthard.monitoring.dashboards import check as live
from gotthard.monitoring.documents import write_files
from gotthard.monitoring.settings import MonitoringConfig


def add_cli(subparsers: argparse._SubParsersAction) -> None:
    commands = command_group(
        subparsers,
        "dashboards",
        help="build, lint and check the Grafana dashboards",
        description="Grafana dashboards as code: build the JSON, lint it offline, and "
        "check every panel query against a real Prometheus.",
        metavar="COMMAND",
    )

    build = build_command(
        commands,
        help="write the dashboards as JSON, Grafana provisioning or sidecar ConfigMaps",
        description="--format json (default) writes DIR/<uid>.json per dashboard; "
        "--format provisioning writes a Grafana file provider, "
        "DIR/provisioning/dashboards/gotthard.yaml, and DIR/dashboards/FOLDER/<uid>.json; "
        "--format configmaps writes DIR/<uid>.configmap.yaml per dashboard, labelled "
        'grafana_dashboard: "1" for the Grafana sidecar, with a folder annotation.',
        choice=("--format", deliver.DASHBOARD_FORMATS),
    )
    add_options(
        build,
        ("--folder", deliver.DEFAULT_FOLDER, "NAME", "Grafana folder (default: %(default)s)"),
        (
            "--path",
            deliver.DEFAULT_DASHBOARDS_PATH,
            "DIR",
            "provisioning: where Grafana finds the dashboards/ tree (default: %(default)s)",
        ),
        (
            "--namespace",
            deliver.DEFAULT_NAMESPACE,
            "NS",
            "configmaps: namespace (default: %(default)s)",
        ),
        (
            "--folder-annotation",
            deliver.DEFAULT_FOLDER_ANNOTATION,
            "NAME",
            "configmaps: the annotation the sidecar reads the folder from (its "
            "folderAnnotation setting; default: %(default)s)",
        ),
    )
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
    check.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text: a table (default); json: one object with the lint problems, a "
        "summary and every query's status",
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


def load_dashboards(
    directory: str | None, monitoring: MonitoringConfig | None = None
) -> list[dict[str, Any]]:
    """The built-in dashboards (with the site's *monitoring* tuning), or every ``*.json``
    in *directory* (sorted by name)."""
    if directory is None:
        return build.build_dashboards(monitoring=monitoring)
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
    if not re.fullmatch(r"[^/\\.][^/\\]*", args.folder):
        print(
            f"gotthard dashboards build: --folder {args.folder!r}: not a folder name",
            file=sys.stderr,
        )
        return 2

    def write() -> list[Path]:
        documents = deliver.dashboard_documents(
            args.format,
            monitoring=cfg.monitoring,
            folder=args.folder,
            path=args.path,
            namespace=args.namespace,
            folder_annotation=args.folder_annotation,
        )
        return write_files(Path(args.out), documents)

    return write_and_list("dashboards build", write, error_status=2)


def _lint(dashboards: list[dict[str, Any]], *, quiet: bool = False) -> list[str]:
    """The lint problems, printed one a line unless *quiet*."""
    problems = [str(problem) for problem in lint.lint_dashboards(dashboards)]
    if not quiet:
        for problem in problems:
            print(f"lint: {problem}")
    return problems


def _load_or_report(
    args: argparse.Namespace, cfg: Config, command: str
) -> list[dict[str, Any]] | None:
    """:func:`load_dashboards` for *command*; None (after saying why) when that fails."""
    try:
        return load_dashboards(args.dashboards, cfg.monitoring)
    except OSError as err:
        print(f"gotthard dashboards {command}: {err}", file=sys.stderr)
        return None


def run_lint(args: argparse.Namespace, cfg: Config) -> int:
    dashboards = _load_or_report(args, cfg, "lint")
    if dashboards is None:
        return 2
    count = len(_lint(dashboards))
    panels = sum(1 for dash in dashboards for _ in lint.iter_panels(dash))
    print(f"{len(dashboards)} dashboards, {panels} panels: {count} lint problem(s)")
    return 1 if count else 0


def run_check(args: argparse.Namespace, cfg: Config) -> int:
    dashboards = _load_or_report(args, cfg, "check")
    if dashboards is None:
        return 2
    as_json = args.format == "json"
    problems = _lint(dashboards, quiet=as_json)
    prometheus = live.Prometheus(args.prometheus, timeout=args.timeout)
    try:
        results = live.check(prometheus, dashboards, rate_interval=args.rate_interval)
    except live.CheckError as err:
        print(f"gotthard dashboards check: {err}", file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps(live.to_json(results, problems), indent=2))
    else:
        live.report(results, sys.stdout)
        if problems:
            print(f"{len(problems)} lint problem(s)")
    failed = problems or any(r.status == live.FAIL for r in results)
    return 1 if failed else 0
