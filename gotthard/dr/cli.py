"""``gotthard dr ...``: daemon, backups, drills, placement, status."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from gotthard.cli_common import command_group
from gotthard.config import Config, add_config_option
from gotthard.daemon import add_log_level
from gotthard.dr.settings import DrillSpec
from gotthard.kube import KubeError, reaching, where
from gotthard.site import SiteConfig

# The handlers import the DR modules (kubernetes, APScheduler) when they run, so that
# building the command line costs every other subcommand nothing.


def _known(cfg: Config, site: str, error: str) -> SiteConfig:
    """The site *site* of the site model; else a KubeError (exit 2): *error* and the
    sites there are."""
    model = cfg.site_model
    if site not in model:
        raise KubeError(f"{error} (known: {', '.join(sorted(model))})")
    return model[site]


def _reach(cfg: Config, site: str) -> str:
    """``site S cluster C`` of the cluster DR uses on *site*, for one-line errors."""
    return where(site, _known(cfg, site, f"site {site}: not configured").kube_cluster)


def _daemon(args: argparse.Namespace, cfg: Config) -> int:
    from gotthard.base import parse_listen
    from gotthard.daemon import Daemon, configure_logging
    from gotthard.dr.daemon import DrDaemon, JobStoreLocked
    from gotthard.dr.metrics import MetricsServer
    from gotthard.serve import optional_web_config

    configure_logging(args.log_level)
    settings = cfg.dr
    listen = args.listen or settings.listen
    web = optional_web_config(settings.web_config)
    daemon = DrDaemon(cfg)
    try:
        server = MetricsServer(daemon.metrics, *parse_listen(listen), daemon.health, web=web)
    except (ValueError, OSError) as err:
        print(f"gotthard dr: cannot listen on {listen}: {err}", file=sys.stderr)
        return 2
    try:
        Daemon("dr", server, work=daemon.run, interrupt=daemon.stop).run()
    except (JobStoreLocked, OSError) as err:
        # a job store another daemon holds, or one that cannot be opened or made private
        print(f"gotthard dr: {err}", file=sys.stderr)
        return 2
    return 0


def _backup_now(args: argparse.Namespace, cfg: Config) -> int:
    from gotthard.dr import api

    site = args.site or cfg.site
    covering = [s for s in cfg.dr.schedules if s.covers(site)]
    namespaces = (
        [args.namespace]
        if args.namespace
        else sorted({ns for s in covering for ns in s.namespaces})
    )
    if not namespaces:
        print("gotthard dr: no --namespace and no schedule covers this site", file=sys.stderr)
        return 2
    with reaching(_reach(cfg, site)):
        for ns in namespaces:
            print(api.backup_now(cfg, ns, reason=args.reason, site=site))
    return 0


def _drill_spec(cfg: Config, args: argparse.Namespace) -> DrillSpec:
    """The configured drill of ``--site``/``--namespace`` (``--target-site`` overriding its
    target), else an ad-hoc drill of that namespace with the default checks. An unknown
    site is a usage error naming the flag."""
    for flag, site in (("--site", args.site), ("--target-site", args.target_site)):
        if site:
            _known(cfg, site, f"{flag}: unknown site {site!r}")
    spec = next(
        (d for d in cfg.dr.drills if d.site == args.site and d.namespace == args.namespace),
        None,
    ) or DrillSpec(site=args.site, namespace=args.namespace)
    if args.target_site:
        spec = spec.model_copy(update={"target_site": args.target_site})
    return spec


def _drill(args: argparse.Namespace, cfg: Config) -> int:
    from gotthard.dr import ops

    spec = _drill_spec(cfg, args)
    ctx = ops.Context(cfg)
    for site in dict.fromkeys((spec.site, spec.target_site or spec.site)):
        # a cluster that cannot be reached is an environment error (exit 2), not a failed drill
        with reaching(_reach(cfg, site)):
            ctx.velero(site).storage_locations()
    report = ops.run_drill(ctx, spec, fresh_backup=True if args.fresh else None)
    if args.report:
        with open(args.report, "w", encoding="utf-8") as f:
            f.write(report.to_markdown() if args.report.endswith(".md") else report.to_json())
    print(report.to_json())
    return 0 if report.verified else 1


def _status(args: argparse.Namespace, cfg: Config) -> int:
    from gotthard.dr import ops

    settings = cfg.dr
    ctx = ops.Context(cfg)
    out: dict[str, Any] = {}
    unreachable = []
    for site in ctx.sites:
        try:
            with reaching(_reach(cfg, site)):
                vel = ctx.velero(site)
                out[site] = {
                    "storage_locations": vel.storage_locations(),
                    "latest_completed": {
                        ns: ((vel.latest_completed_backup(ns) or {}).get("metadata") or {}).get(
                            "name"
                        )
                        for s in settings.schedules
                        for ns in s.namespaces
                    },
                }
                if settings.tiers:
                    out[site]["tiers"] = ops.tier_compliance(ctx, site)
        except KubeError as err:
            out[site] = {"error": str(err)}
            unreachable.append(str(err))
    if args.format == "json":
        print(json.dumps(out, indent=2, sort_keys=True))
    else:
        print(_tier_table(out))
    for line in unreachable:
        print(f"gotthard: {line}", file=sys.stderr)
    breached = any(row["met"] is False for state in out.values() for row in state.get("tiers", []))
    return 2 if unreachable else 1 if breached else 0


def _tier_table(status: dict[str, Any]) -> str:
    """Per-tier compliance of ``dr status`` as an aligned text table."""
    from gotthard.dr.ops import verdict

    head = ("SITE", "NAMESPACE", "TIER", "OBJECTIVE", "TARGET_S", "MEASURED_S", "RESULT")
    rows = [
        (
            site,
            r["namespace"],
            r["tier"],
            r["objective"],
            f"{r['target_seconds']:.0f}",
            "-" if r["measured_seconds"] is None else f"{r['measured_seconds']:.0f}",
            verdict(r["met"]),
        )
        for site, state in sorted(status.items())
        for r in state.get("tiers", [])
    ]
    if not rows:
        return "no recovery tiers configured ([dr.tiers.NAME])"
    widths = [max(len(row[i]) for row in (head, *rows)) for i in range(len(head))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in (head, *rows)
    )


def _placement(args: argparse.Namespace, cfg: Config) -> int:
    from gotthard.dr import placement
    from gotthard.dr.daemon import DrDaemon, karmada_client

    settings = cfg.dr
    daemon = DrDaemon(cfg)
    decisions = daemon.evaluate_placement(apply=args.action == "apply")
    karmada = placement.Karmada(daemon.karmada_api or karmada_client(settings), daemon.ctx.retry)
    by_name = {s.name: s for s in settings.placement.services}
    for d in decisions:
        before = ",".join(d.previous_sites or (d.previous,))
        print(f"# {d.service} [{d.mode}]: {before} -> {','.join(d.placed)} ({d.reason})")
        if args.action == "plan":
            policy = placement.propagation_policy(daemon.ctx.sites, by_name[d.service], *d.placed)
            print(karmada.plan(policy))
    return 0


#: ``dr placement`` action -> its help and description (one handler, :func:`_placement`).
_PLACEMENT_ACTIONS = {
    "plan": (
        "print each service's placement decision and its PropagationPolicy; change nothing",
        "Evaluate [dr.placement]: for each service, print the decision "
        "(# SERVICE [MODE]: BEFORE -> AFTER (REASON)) and the PropagationPolicy it would "
        "write to Karmada, without writing it.",
    ),
    "apply": (
        "evaluate the placement and write the PropagationPolicies to Karmada",
        "Evaluate [dr.placement] as the DR daemon does and write each service's "
        "PropagationPolicy to Karmada (replaced with the resourceVersion read); print each "
        "decision.",
    ),
}


def add_cli(subparsers: Any) -> None:
    dr = subparsers.add_parser("dr", help="DR control plane: Velero backups, drills, placement")
    add_config_option(dr, "--dr-config", help=argparse.SUPPRESS)
    sub = dr.add_subparsers(dest="dr_command", metavar="ACTION")
    sub.required = True

    p = sub.add_parser("daemon", help="run the scheduler (leader-elected), /metrics and /healthz")
    add_config_option(
        p, "--config", help="site file (default: the top-level --config, then $GOTTHARD_CONFIG)"
    )
    p.add_argument("--listen", default="", help="HOST:PORT (default dr.listen)")
    add_log_level(p)
    p.set_defaults(handler=_daemon)

    backup = command_group(sub, "backup", help="Velero backups")
    p = backup.add_parser("now", help="create an ad-hoc Velero Backup")
    p.add_argument("--site", default="")
    p.add_argument("--namespace", default="")
    p.add_argument("--reason", default="manual")
    p.set_defaults(handler=_backup_now)

    p = sub.add_parser(
        "drill",
        help="restore drill into a scratch namespace, with RTO/RPO and timed phases",
        description="Take the newest Completed backup of NAMESPACE at --site (or a fresh "
        "one: --fresh or the drill's fresh_backup), restore it into a scratch namespace at "
        "the target site, verify the drill's checks, "
        "measure RTO and RPO, and delete the scratch namespace. Uses the [[dr.drills]] entry "
        "of --site and --namespace if there is one, else the default checks (Deployments "
        "present and ready). The report (JSON on stdout) lists the phases backup, restore, "
        "verify and cleanup with their start and duration. Exit 0 verified, 1 not verified, "
        "2 unknown site or unreachable cluster.",
    )
    p.add_argument("--site", required=True, help="site whose backup is drilled")
    p.add_argument("--namespace", required=True, help="namespace to restore")
    p.add_argument(
        "--target-site",
        default="",
        metavar="SITE",
        help="restore at this site (a cross-site drill); overrides the drill's target_site "
        "(default: the drill's, else --site)",
    )
    p.add_argument("--fresh", action="store_true", help="take a fresh backup first")
    p.add_argument(
        "--wait", action="store_true", help="accepted for compatibility; drills always wait"
    )
    p.add_argument("--once", action="store_true", help="run one drill now (the default)")
    p.add_argument("--report", metavar="FILE", help="write the report (.md: Markdown, else JSON)")
    p.set_defaults(handler=_drill)

    p = sub.add_parser(
        "status",
        help="storage locations, latest Completed backups and recovery-tier compliance per site",
    )
    p.add_argument(
        "--format",
        choices=("json", "table"),
        default="json",
        help="json (default): everything; table: recovery-tier compliance",
    )
    p.set_defaults(handler=_status)

    placement = command_group(
        sub, "placement", help="Zurich/Lugano placement (Karmada PropagationPolicy)"
    )
    for action, (help_text, description) in _PLACEMENT_ACTIONS.items():
        p = placement.add_parser(action, help=help_text, description=description)
        p.set_defaults(handler=_placement, action=action)
