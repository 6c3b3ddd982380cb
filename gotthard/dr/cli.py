"""``gotthard dr ...``: daemon, backups, drills, placement, status."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from typing import Any

from gotthard.dr import api, ops, placement
from gotthard.dr.settings import DrConfig, DrillSpec, from_site_file


def _settings(args: argparse.Namespace) -> DrConfig:
    """``Config.dr`` of the site file.

    The file is ``gotthard dr daemon --config FILE`` when given (the issue's form), else
    the top-level ``gotthard --config FILE`` (else ``$GOTTHARD_CONFIG``, else defaults).
    The two options have different ``dest`` s, so neither overrides the other. An invalid
    file exits with status 2 and the loader's message, as the top-level command does."""
    from gotthard import config as configuration

    path = getattr(args, "dr_config", None) or getattr(args, "config", None)
    try:
        mounted = getattr(configuration.load(path), "dr", None)
    except configuration.ConfigError as err:
        print(f"gotthard: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    if isinstance(mounted, DrConfig):
        return mounted
    return from_site_file(path)  # a Config without a ``dr`` field: read the raw table


def _daemon(args: argparse.Namespace) -> int:
    from gotthard.config import parse_listen
    from gotthard.dr.daemon import DrDaemon
    from gotthard.dr.metrics import MetricsServer

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = _settings(args)
    daemon = DrDaemon(settings)
    host, port = parse_listen(args.listen or settings.listen)
    server = MetricsServer(daemon.metrics, host, port, daemon.health).start()
    signal.signal(signal.SIGTERM, lambda *_: daemon.stop())
    try:
        daemon.run()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def _backup_now(args: argparse.Namespace) -> int:
    settings = _settings(args)
    site = args.site or settings.site
    namespaces = (
        [args.namespace]
        if args.namespace
        else sorted(
            {
                ns
                for s in settings.schedules
                if site in settings.schedule_sites(s)
                for ns in s.namespaces
            }
        )
    )
    if not namespaces:
        print("gotthard dr: no --namespace and no schedule covers this site", file=sys.stderr)
        return 2
    for ns in namespaces:
        print(api.backup_now(settings, ns, reason=args.reason, site=site))
    return 0


def _drill(args: argparse.Namespace) -> int:
    settings = _settings(args)
    spec = next(
        (d for d in settings.drills if d.site == args.site and d.namespace == args.namespace),
        None,
    ) or DrillSpec(site=args.site, namespace=args.namespace)
    if args.target_site:
        spec = spec.model_copy(update={"target_site": args.target_site})
    ctx = ops.Context(settings)
    report = ops.run_drill(ctx, spec, fresh_backup=True if args.fresh else None)
    if args.report:
        with open(args.report, "w", encoding="utf-8") as f:
            f.write(report.to_markdown() if args.report.endswith(".md") else report.to_json())
    print(report.to_json())
    return 0 if report.verified else 1


def _status(args: argparse.Namespace) -> int:
    settings = _settings(args)
    ctx = ops.Context(settings)
    out: dict[str, Any] = {}
    for site in settings.sites:
        vel = ctx.velero(site)
        try:
            out[site] = {
                "storage_locations": vel.storage_locations(),
                "latest_completed": {
                    ns: ((vel.latest_completed_backup(ns) or {}).get("metadata") or {}).get("name")
                    for s in settings.schedules
                    for ns in s.namespaces
                },
            }
        except Exception as err:
            out[site] = {"error": str(err)}
    print(json.dumps(out, indent=2, sort_keys=True))
    return 0 if all("error" not in v for v in out.values()) else 1


def _placement(args: argparse.Namespace) -> int:
    from gotthard.dr.daemon import DrDaemon, _karmada_client

    settings = _settings(args)
    daemon = DrDaemon(settings)
    decisions = daemon.evaluate_placement(apply=args.action == "apply")
    karmada = placement.Karmada(daemon.karmada_api or _karmada_client(settings), daemon.ctx.retry)
    by_name = {s.name: s for s in settings.placement.services}
    for d in decisions:
        print(f"# {d.service}: {d.previous} -> {d.site} ({d.reason})")
        if args.action == "plan":
            print(karmada.plan(placement.propagation_policy(settings, by_name[d.service], d.site)))
    return 0


def add_cli(subparsers: Any) -> None:
    dr = subparsers.add_parser("dr", help="DR control plane: Velero backups, drills, placement")
    # default=SUPPRESS: a sub-command's unset option must not wipe one given earlier.
    dr.add_argument(
        "--dr-config",
        dest="dr_config",
        metavar="FILE",
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
    )
    sub = dr.add_subparsers(dest="dr_command", metavar="ACTION")
    sub.required = True

    p = sub.add_parser("daemon", help="run the scheduler (leader-elected), /metrics and /healthz")
    p.add_argument(
        "--config",
        dest="dr_config",
        metavar="FILE",
        default=argparse.SUPPRESS,
        help="site file (default: the top-level --config, then $GOTTHARD_CONFIG)",
    )
    p.add_argument("--listen", default="", help="HOST:PORT (default dr.listen)")
    p.set_defaults(func=_daemon)

    backup = sub.add_parser("backup", help="Velero backups").add_subparsers(
        dest="dr_backup", metavar="ACTION"
    )
    backup.required = True
    p = backup.add_parser("now", help="create an ad-hoc Velero Backup")
    p.add_argument("--site", default="")
    p.add_argument("--namespace", default="")
    p.add_argument("--reason", default="manual")
    p.set_defaults(func=_backup_now)

    p = sub.add_parser("drill", help="restore drill into a scratch namespace, with RTO/RPO")
    p.add_argument("--site", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--target-site", default="")
    p.add_argument("--fresh", action="store_true", help="take a fresh backup first")
    p.add_argument(
        "--wait", action="store_true", help="accepted for compatibility; drills always wait"
    )
    p.add_argument("--once", action="store_true", help="run one drill now (the default)")
    p.add_argument("--report", metavar="FILE", help="write the report (.md: Markdown, else JSON)")
    p.set_defaults(func=_drill)

    p = sub.add_parser("status", help="storage locations and latest Completed backups per site")
    p.set_defaults(func=_status)

    p = sub.add_parser("placement", help="Zurich/Lugano placement (Karmada PropagationPolicy)")
    p.add_argument("action", choices=("plan", "apply"))
    p.set_defaults(func=_placement)
