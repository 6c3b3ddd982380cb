"""``gotthard rules build``: write the Prometheus rules and the Alertmanager configuration.

Wiring (gotthard/cli.py)::

    from gotthard.dashboards import rules_cli
    rules_cli.add_cli(subparsers)

Each leaf parser sets ``func``: ``args.func(args)`` returns the exit status.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gotthard.config import Config
from gotthard.dashboards import alertmanager, rules
from gotthard.dashboards.cli_common import command_group, write_and_list

RECORDING_FILE = "recording.rules.yml"
ALERTS_FILE = "alerts.rules.yml"
ALERTMANAGER_FILE = "alertmanager.yml"


def build(
    out: Path,
    *,
    runbook_base_url: str = rules.DEFAULT_RUNBOOK_BASE_URL,
    dashboard_base_url: str = rules.DEFAULT_DASHBOARD_BASE_URL,
    settings: alertmanager.AlertmanagerSettings | None = None,
) -> list[Path]:
    """Write the three files into ``out`` (created if needed); return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    documents = {
        RECORDING_FILE: rules.render_recording_rules(),
        ALERTS_FILE: rules.render_alerting_rules(runbook_base_url, dashboard_base_url),
        ALERTMANAGER_FILE: alertmanager.render(settings),
    }
    written = []
    for name, text in documents.items():
        path = out / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def _site_pairs(values: Sequence[str]) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for value in values:
        site, sep, url = value.partition("=")
        if not sep or not site or not url:
            raise ValueError(f"--pager-url wants SITE=URL, got {value!r}")
        pairs[site] = url
    return pairs


def _configured_sites(cfg: Config) -> list[str]:
    """Site names from the site configuration, or the reference deployment's two sites."""
    return list(cfg.sites) or list(alertmanager.DEFAULT_SITES)


def _settings(args: argparse.Namespace, sites: Sequence[str]) -> alertmanager.AlertmanagerSettings:
    overrides = _site_pairs(args.pager_url or [])
    pager_urls: Mapping[str, str] = {
        **{site: alertmanager.default_pager_url(site) for site in sites},
        **overrides,
    }
    kwargs: dict[str, Any] = {"pager_urls": dict(pager_urls)}
    if args.webhook_url:
        kwargs["webhook_url"] = args.webhook_url
    if args.webhook_token_file:
        kwargs["webhook_token_file"] = args.webhook_token_file
    if args.ticket_url:
        kwargs["ticket_url"] = args.ticket_url
    if args.pager_fallback_url:
        kwargs["pager_fallback_url"] = args.pager_fallback_url
    return alertmanager.AlertmanagerSettings(**kwargs)


def _cmd_build(args: argparse.Namespace, cfg: Config) -> int:
    try:
        settings = _settings(args, _configured_sites(cfg))
    except ValueError as err:
        print(f"gotthard rules build: {err}", file=sys.stderr)
        return 2
    return write_and_list(
        "rules build",
        lambda: build(
            Path(args.out),
            runbook_base_url=args.runbook_base_url,
            dashboard_base_url=args.dashboard_base_url,
            settings=settings,
        ),
        error_status=1,
    )


def add_cli(subparsers: Any) -> None:
    """Register ``rules build`` on an argparse ``add_subparsers()`` object."""
    commands = command_group(
        subparsers,
        "rules",
        help="Prometheus recording/alerting rules and the Alertmanager configuration",
        description="Prometheus recording and alerting rules and the Alertmanager "
        "configuration, generated from gotthard/dashboards/rules.py.",
        metavar="{build}",
    )
    build_parser = commands.add_parser(
        "build",
        help="write recording.rules.yml, alerts.rules.yml and alertmanager.yml",
        description="Write DIR/recording.rules.yml, DIR/alerts.rules.yml and "
        "DIR/alertmanager.yml (deterministic bytes). Pager routes are made for the sites "
        "of the site configuration (--config), or zurich and lugano when it names none.",
    )
    build_parser.add_argument("--out", required=True, metavar="DIR", help="output directory")
    build_parser.add_argument(
        "--runbook-base-url",
        default=rules.DEFAULT_RUNBOOK_BASE_URL,
        metavar="URL",
        help="runbook_url is URL/<AlertName>.md (default: %(default)s)",
    )
    build_parser.add_argument(
        "--dashboard-base-url",
        default=rules.DEFAULT_DASHBOARD_BASE_URL,
        metavar="URL",
        help="Grafana base URL; dashboard_url is URL/d/<uid>?var-site=..&var-cluster=.. "
        "(default: %(default)s)",
    )
    build_parser.add_argument(
        "--webhook-url",
        metavar="URL",
        help=f"runbook webhook receiver (default: {alertmanager.DEFAULT_WEBHOOK_URL})",
    )
    build_parser.add_argument(
        "--webhook-token-file",
        metavar="FILE",
        help="file with the webhook's bearer token, read by Alertmanager "
        f"(default: {alertmanager.DEFAULT_WEBHOOK_TOKEN_FILE})",
    )
    build_parser.add_argument(
        "--pager-url",
        action="append",
        metavar="SITE=URL",
        help="webhook URL of the pager bridge for SITE (repeatable; default "
        "http://pager.invalid/SITE, a placeholder)",
    )
    build_parser.add_argument(
        "--pager-fallback-url",
        metavar="URL",
        help="pager webhook for critical alerts of an unknown site "
        f"(default: {alertmanager.DEFAULT_PAGER_FALLBACK_URL}, a placeholder)",
    )
    build_parser.add_argument(
        "--ticket-url",
        metavar="URL",
        help=f"ticket bridge webhook (default: {alertmanager.DEFAULT_TICKET_URL}, a placeholder)",
    )
    build_parser.set_defaults(handler=_cmd_build)
