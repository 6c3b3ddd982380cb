"""``gotthard rules build`` and ``gotthard alertmanager build``.

``rules build`` writes the Prometheus rules (``--format files``: rule files;
``--format prometheus-operator``: PrometheusRule objects) and, as before, the complete
``alertmanager.yml``. ``alertmanager build`` writes the Alertmanager configuration alone:
``--mode full`` the same complete file, ``--mode subtree`` Gotthard's route, receivers
and inhibitions to merge into a site's own configuration (``--merge-into FILE`` merges
them and writes the result).

Each leaf parser sets ``handler``: ``args.handler(args, cfg)`` returns the exit status.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from gotthard.cli_common import command_group
from gotthard.config import Config
from gotthard.monitoring import alertmanager, deliver, rules, runbook_pages
from gotthard.monitoring.cli_common import (
    add_options,
    add_repeatable,
    build_command,
    write_and_list,
)
from gotthard.monitoring.documents import write_files
from gotthard.monitoring.settings import MonitoringConfig

RECORDING_FILE = deliver.RECORDING_FILE
ALERTS_FILE = deliver.ALERTS_FILE
ALERTMANAGER_FILE = "alertmanager.yml"
SUBTREE_FILE = "alertmanager-subtree.yml"
RUNBOOKS_DIR = "runbooks"


def build(
    out: Path,
    *,
    runbook_base_url: str = rules.DEFAULT_RUNBOOK_BASE_URL,
    dashboard_base_url: str = rules.DEFAULT_DASHBOARD_BASE_URL,
    settings: alertmanager.AlertmanagerSettings | None = None,
    fmt: deliver.RuleFormat = "files",
    monitoring: MonitoringConfig | None = None,
    namespace: str = deliver.DEFAULT_NAMESPACE,
    labels: Mapping[str, str] | None = None,
) -> list[Path]:
    """Write the rules in format *fmt* and ``alertmanager.yml`` into *out* (created if
    needed); return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    documents = deliver.rule_documents(
        fmt,
        runbook_base_url=runbook_base_url,
        dashboard_base_url=dashboard_base_url,
        monitoring=monitoring,
        namespace=namespace,
        labels=labels,
    )
    documents[ALERTMANAGER_FILE] = alertmanager.render(settings)
    written = write_files(out, documents)
    # the runbook pages the alerts link to, with this site's threshold values
    return [*written, *runbook_pages.write_runbooks(out / RUNBOOKS_DIR, monitoring)]


def _pairs(values: Sequence[str], option: str, what: str) -> dict[str, str]:
    """``KEY=VALUE`` arguments of *option* as a dict; ValueError names a malformed one."""
    pairs: dict[str, str] = {}
    for value in values:
        key, sep, text = value.partition("=")
        if not sep or not key or not text:
            raise ValueError(f"{option} wants {what}, got {value!r}")
        pairs[key] = text
    return pairs


def _configured_sites(cfg: Config) -> list[str]:
    """Site names from the site configuration, or the reference deployment's two sites."""
    return list(cfg.sites) or list(alertmanager.DEFAULT_SITES)


def _settings(args: argparse.Namespace, sites: Sequence[str]) -> alertmanager.AlertmanagerSettings:
    overrides = _pairs(args.pager_url or [], "--pager-url", "SITE=URL")
    pager_urls: Mapping[str, str] = {
        **{site: alertmanager.default_pager_url(site) for site in sites},
        **overrides,
    }
    kwargs: dict[str, Any] = {
        "pager_urls": dict(pager_urls),
        "site_webhook_urls": _pairs(args.site_webhook_url or [], "--site-webhook-url", "SITE=URL"),
    }
    if args.webhook_url:
        kwargs["webhook_url"] = args.webhook_url
    if args.webhook_token_file:
        kwargs["webhook_token_file"] = args.webhook_token_file
    if args.ticket_url:
        kwargs["ticket_url"] = args.ticket_url
    if args.pager_fallback_url:
        kwargs["pager_fallback_url"] = args.pager_fallback_url
    if args.deadman_url:
        kwargs["deadman_url"] = args.deadman_url
    return alertmanager.AlertmanagerSettings(**kwargs)


def _cmd_build(args: argparse.Namespace, cfg: Config) -> int:
    try:
        settings = _settings(args, _configured_sites(cfg))
        labels = _pairs(args.label or [], "--label", "KEY=VALUE")
    except ValueError as err:
        print(f"gotthard rules build: {err}", file=sys.stderr)
        return 2
    return write_and_list(
        "rules build",
        lambda: build(
            Path(args.out),
            # unset: the site's own ([deploy.kubernetes], the links every target renders)
            runbook_base_url=args.runbook_base_url or cfg.deploy.kubernetes.runbook_base_url,
            dashboard_base_url=args.dashboard_base_url or cfg.deploy.kubernetes.dashboard_base_url,
            settings=settings,
            fmt=args.format,
            monitoring=cfg.monitoring,
            namespace=args.namespace,
            labels=labels,
        ),
        error_status=2,
    )


def _read_existing(path: str) -> Any:
    """The site's ``alertmanager.yml``; OSError says why it cannot be used."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise OSError(f"--merge-into {path}: cannot read: {err}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise OSError(f"--merge-into {path}: not valid YAML: {err}") from None


def alertmanager_document(
    mode: alertmanager.Mode,
    settings: alertmanager.AlertmanagerSettings,
    merge_into: str | None = None,
) -> tuple[str, str]:
    """(file name, text) of ``alertmanager build``. OSError: the file to merge into is
    unusable."""
    if mode == "full":
        return ALERTMANAGER_FILE, alertmanager.render(settings)
    tree = alertmanager.subtree(rules.alert_names(), settings)
    if merge_into is None:
        command = "gotthard alertmanager build --mode subtree"
        return SUBTREE_FILE, alertmanager.render_document(tree, command)
    try:
        merged = alertmanager.merge(_read_existing(merge_into), tree)
    except alertmanager.MergeError as err:
        raise OSError(f"--merge-into {merge_into}: {err}") from None
    command = f"gotthard alertmanager build --mode subtree --merge-into {Path(merge_into).name}"
    return ALERTMANAGER_FILE, alertmanager.render_document(merged, command)


def _cmd_alertmanager(args: argparse.Namespace, cfg: Config) -> int:
    try:
        settings = _settings(args, _configured_sites(cfg))
    except ValueError as err:
        print(f"gotthard alertmanager build: {err}", file=sys.stderr)
        return 2
    if args.merge_into and args.mode != "subtree":
        print("gotthard alertmanager build: --merge-into needs --mode subtree", file=sys.stderr)
        return 2

    def write() -> list[Path]:
        name, text = alertmanager_document(args.mode, settings, args.merge_into)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        return write_files(out, {name: text})

    return write_and_list("alertmanager build", write, error_status=2)


def _add_alertmanager_arguments(parser: argparse.ArgumentParser) -> None:
    """The receiver options ``rules build`` and ``alertmanager build`` share."""
    add_repeatable(
        parser,
        "--pager-url",
        "SITE=URL",
        "webhook URL of the pager bridge for SITE (repeatable; default "
        "http://pager.invalid/SITE, a placeholder)",
    )
    add_repeatable(
        parser,
        "--site-webhook-url",
        "SITE=URL",
        "runbook webhook of SITE: its alerts go there instead of --webhook-url, so each "
        "site's webhook acts on its own clusters (repeatable; default: one webhook for all)",
    )
    add_options(
        parser,
        (
            "--webhook-url",
            None,
            "URL",
            f"runbook webhook receiver (default: {alertmanager.DEFAULT_WEBHOOK_URL})",
        ),
        (
            "--webhook-token-file",
            None,
            "FILE",
            "file with the webhook's bearer token, read by Alertmanager "
            f"(default: {alertmanager.DEFAULT_WEBHOOK_TOKEN_FILE})",
        ),
        (
            "--pager-fallback-url",
            None,
            "URL",
            "pager webhook for critical alerts of an unknown site "
            f"(default: {alertmanager.DEFAULT_PAGER_FALLBACK_URL}, a placeholder)",
        ),
        (
            "--ticket-url",
            None,
            "URL",
            f"ticket bridge webhook (default: {alertmanager.DEFAULT_TICKET_URL}, a placeholder)",
        ),
        (
            "--deadman-url",
            None,
            "URL",
            "dead man's switch that expects GotthardWatchdog every minute (default: none, "
            "the Watchdog goes nowhere)",
        ),
    )


def add_cli(subparsers: Any) -> None:
    """Register ``rules build``, ``rules thresholds`` and ``rules migrate-names`` on an argparse
    ``add_subparsers()`` object."""
    commands = command_group(
        subparsers,
        "rules",
        help="Prometheus recording/alerting rules and the Alertmanager configuration",
        description="Prometheus recording and alerting rules, their runbook pages and the "
        "Alertmanager configuration, generated from the components in "
        "gotthard/monitoring/components/.",
        metavar="{build,thresholds,migrate-names}",
    )
    build_parser = build_command(
        commands,
        help="write the rules, their runbook pages and alertmanager.yml",
        description="Write the rules into DIR: --format files (default) writes "
        "recording.rules.yml and alerts.rules.yml for each site Prometheus and "
        "global-alerts.rules.yml for the global evaluator, --format prometheus-operator one "
        "<name>.prometheusrule.yaml PrometheusRule object per component (site groups); and "
        "DIR/alertmanager.yml and DIR/runbooks/<alert>.md with the site's threshold values "
        "(deterministic bytes). Pager routes are made for the sites "
        "of the site configuration (--config), or zurich and lugano when it names none. "
        'With [monitoring] gpu_source = "dcgm" the recording rules also map '
        "dcgm-exporter's metrics to Gotthard's GPU metrics; with [monitoring] legacy_names "
        "= true they also record the metric names of before 1.0 from the new ones "
        "(group gotthard-legacy.recording, for one release).",
        choice=("--format", deliver.RULE_FORMATS),
    )
    add_repeatable(
        build_parser,
        "--label",
        "KEY=VALUE",
        "label for the PrometheusRule objects, e.g. release=kube-prometheus-stack for "
        "the operator's ruleSelector (repeatable)",
    )
    add_options(
        build_parser,
        (
            "--namespace",
            deliver.DEFAULT_NAMESPACE,
            "NS",
            "namespace of the PrometheusRule objects (default: %(default)s)",
        ),
        (
            "--runbook-base-url",
            None,
            "URL",
            "runbook_url is URL/<AlertName>.md (default: [deploy.kubernetes] "
            f"runbook_base_url, else {rules.DEFAULT_RUNBOOK_BASE_URL})",
        ),
        (
            "--dashboard-base-url",
            None,
            "URL",
            "Grafana base URL; dashboard_url is URL/d/<uid>?var-site=..&var-cluster=.. "
            f"(default: [deploy.kubernetes] dashboard_base_url, else "
            f"{rules.DEFAULT_DASHBOARD_BASE_URL})",
        ),
    )
    _add_alertmanager_arguments(build_parser)
    build_parser.set_defaults(handler=_cmd_build)
    from gotthard.monitoring import migrate_names, thresholds_cli

    thresholds_cli.add_parser(commands)
    migrate_names.add_parser(commands)


def add_alertmanager_cli(subparsers: Any) -> None:
    """Register ``alertmanager build`` on an argparse ``add_subparsers()`` object."""
    commands = command_group(
        subparsers,
        "alertmanager",
        help="the Alertmanager configuration: complete, or a subtree to merge",
        description="Gotthard's Alertmanager routes, receivers and inhibitions.",
        metavar="{build}",
    )
    parser = build_command(
        commands,
        help="write alertmanager.yml (--mode full) or alertmanager-subtree.yml",
        description="--mode full writes DIR/alertmanager.yml, the complete file "
        "`rules build` also writes. --mode subtree writes DIR/alertmanager-subtree.yml: "
        "one route matching Gotthard's alerts by name, receivers and inhibitions named "
        "gotthard-..., to merge into an existing configuration; with --merge-into FILE "
        "it writes DIR/alertmanager.yml, FILE with the subtree merged in (Gotthard's "
        "route first under the root; merging again replaces the earlier merge).",
        choice=("--mode", alertmanager.MODES),
    )
    add_options(
        parser,
        (
            "--merge-into",
            None,
            "FILE",
            "the site's alertmanager.yml to merge the subtree into (read only)",
        ),
    )
    _add_alertmanager_arguments(parser)
    parser.set_defaults(handler=_cmd_alertmanager)
