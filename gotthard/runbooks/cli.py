"""``gotthard runbooks serve``: the alert-driven runbook webhook."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gotthard.runbooks.settings import RunbooksConfig, parse_listen

CONFIG_ENV = "GOTTHARD_CONFIG"


class RunbooksConfigError(Exception):
    pass


def add_cli(subparsers: Any) -> None:
    parser = subparsers.add_parser("runbooks", help="alert-driven runbooks (Alertmanager webhook)")
    sub = parser.add_subparsers(dest="runbooks_command", metavar="ACTION")
    sub.required = True
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
    serve.add_argument("--audit-log", metavar="FILE", help="JSONL audit log (appended)")
    serve.add_argument(
        "--config",
        dest="runbooks_config",
        metavar="FILE",
        help="site configuration (TOML) with a [runbooks] table; default: gotthard --config",
    )
    serve.set_defaults(func=cmd_serve)


def _format(source: str, err: ValidationError) -> str:
    lines = [f"{source}: invalid configuration"]
    for item in err.errors():
        key = ".".join(["runbooks", *(str(p) for p in item["loc"])])
        reason = "unknown key" if item["type"] == "extra_forbidden" else item["msg"]
        lines.append(f"  {key}: {reason.removeprefix('Value error, ')}")
    return "\n".join(lines)


def load_sections(path: str | None) -> tuple[RunbooksConfig, dict[str, Any]]:
    """``[runbooks]`` as a model, and the ``[dr]`` table (raw) of the site configuration."""
    path = path or os.environ.get(CONFIG_ENV) or None
    if path is None:
        return RunbooksConfig(), {}
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise RunbooksConfigError(f"{path}: cannot read configuration: {err}") from None
    section = data.get("runbooks", {})
    if not isinstance(section, dict):
        raise RunbooksConfigError(f"{path}: runbooks must be a table")
    try:
        settings = RunbooksConfig.model_validate(section)
    except ValidationError as err:
        raise RunbooksConfigError(_format(path, err)) from None
    dr = data.get("dr", {})
    return settings, dr if isinstance(dr, dict) else {}


def effective_settings(args: argparse.Namespace) -> tuple[RunbooksConfig, dict[str, Any]]:
    settings, dr = load_sections(getattr(args, "runbooks_config", None) or args.config)
    updates: dict[str, Any] = {}
    if args.listen:
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
    return settings.model_copy(update=updates), dr


def _dr_settings(raw: dict[str, Any]) -> Any | None:
    if not raw:
        return None
    try:
        from gotthard.dr.settings import DrConfig
    except ImportError:
        return None
    return DrConfig.model_validate(raw)


def cmd_serve(args: argparse.Namespace) -> int:
    from gotthard.runbooks.actions import DrActions
    from gotthard.runbooks.engine import AuditLog, Engine
    from gotthard.runbooks.server import TokenError, make_server, read_token

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        settings, dr_raw = effective_settings(args)
        token = read_token(settings.token_file)
        dr = DrActions(_dr_settings(dr_raw))
        audit = AuditLog(settings.audit_log)
    except (RunbooksConfigError, TokenError, ValueError, OSError) as err:
        print(f"gotthard runbooks: {err}", file=sys.stderr)
        return 2
    engine = Engine(settings, audit=audit, dr=dr)
    try:
        server = make_server(settings.listen, engine, token)
    except OSError as err:
        print(f"gotthard runbooks: cannot listen on {settings.listen}: {err}", file=sys.stderr)
        engine.close()
        return 2

    def stop(signum: int, frame: Any) -> None:
        import threading

        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(
        f"gotthard runbooks: serving {server.url}/alerts in {settings.mode} mode,"
        f" audit log {settings.audit_log}",
        file=sys.stderr,
        flush=True,
    )
    try:
        server.serve_forever()
    finally:
        server.server_close()
        engine.close()
    return 0
