"""``gotthard runbooks serve``: the alert-driven runbook webhook."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from gotthard.cli_common import command_group
from gotthard.config import Config, ConfigError, add_config_option
from gotthard.daemon import Daemon, add_log_level, configure_logging
from gotthard.runbooks.settings import RunbooksConfig

log = logging.getLogger("gotthard.runbooks")


class RunbooksConfigError(Exception):
    pass


def add_cli(subparsers: Any) -> None:
    sub = command_group(subparsers, "runbooks", help="alert-driven runbooks (Alertmanager webhook)")
    serve = sub.add_parser(
        "serve",
        help="serve the runbook webhook (POST /alerts, /healthz, /metrics)",
        description="Take Alertmanager webhook payloads and run the runbooks' safe, audited "
        'steps. Dry-run unless [runbooks] mode = "enforce" in the configuration.',
    )
    serve.add_argument("--listen", metavar="HOST:PORT", help="default [runbooks] listen")
    serve.add_argument("--token-file", metavar="FILE", help="bearer token Alertmanager sends")
    serve.add_argument(
        "--mode",
        choices=("dry-run", "enforce"),
        help='dry-run plans only; enforce needs [runbooks] mode = "enforce" in the config',
    )
    serve.add_argument(
        "--insecure-token-file",
        action="store_true",
        help="serve even if group or others may read or write the token file (warns)",
    )
    serve.add_argument("--audit-log", metavar="FILE", help="JSONL audit log (appended, 0600)")
    add_config_option(
        serve,
        "--config",
        help="site configuration (TOML); default: gotthard --config, then $GOTTHARD_CONFIG",
    )
    add_log_level(serve)
    serve.set_defaults(handler=cmd_serve)


def effective_settings(args: argparse.Namespace, cfg: Config) -> RunbooksConfig:
    """``[runbooks]`` with the command-line overrides applied."""
    settings = cfg.runbooks
    updates: dict[str, Any] = {}
    if args.listen:
        from gotthard.base import parse_listen

        parse_listen(args.listen)
        updates["listen"] = args.listen
    if args.token_file:
        updates["token_file"] = args.token_file
    if args.audit_log:
        updates["audit_log"] = args.audit_log
    if args.mode == "enforce" and settings.mode != "enforce":
        raise RunbooksConfigError(
            "--mode enforce needs enforce mode switched on in the configuration:"
            ' [runbooks] mode = "enforce"'
        )
    if args.mode:
        updates["mode"] = args.mode
    return settings.model_copy(update=updates)


def cmd_serve(args: argparse.Namespace, cfg: Config) -> int:
    from gotthard.runbooks.clusters import from_config
    from gotthard.runbooks.engine import AuditLog, Engine
    from gotthard.runbooks.server import TokenError, make_server, read_token
    from gotthard.serve import optional_web_config

    configure_logging(args.log_level)
    try:
        settings = effective_settings(args, cfg)
        token = read_token(settings.token_file, allow_insecure=args.insecure_token_file)
        web = optional_web_config(settings.web_config)
        # the clusters the webhook owns, each with its Slurm, Kubernetes and Prometheus
        clusters = from_config(cfg, settings)
        audit = AuditLog(settings.audit_log)
    except (RunbooksConfigError, ConfigError, TokenError, ValueError, OSError) as err:
        # ValueError includes OwnershipError: [runbooks] clusters that the site lacks
        print(f"gotthard runbooks: {err}", file=sys.stderr)
        return 2
    engine = Engine(settings, audit=audit, clusters=clusters)
    try:
        server = make_server(settings.listen, engine, token, web=web)
    except OSError as err:
        engine.close()
        print(f"gotthard runbooks: cannot listen on {settings.listen}: {err}", file=sys.stderr)
        return 2
    log.info(
        "serving %s/alerts in %s mode for cluster(s) %s, audit log %s",
        server.url,
        settings.mode,
        ", ".join(clusters.names),
        settings.audit_log,
    )
    Daemon("runbooks", server, close=[engine.close]).run()
    return 0
