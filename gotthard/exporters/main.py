"""``gotthard exporter``: build the collectors from flags and config, then serve or print."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable

from gotthard import config as configuration
from gotthard.exporters.runtime import Collector, CollectorRunner, Exporter
from gotthard.exporters.web import WebConfigError, load_web_config, make_server

log = logging.getLogger("gotthard.exporter")


def _slurm(cfg: configuration.Config) -> Collector:
    from gotthard.exporters.slurm.collector import SlurmCollector

    return SlurmCollector(cfg.exporter.slurm)


def _gpu(cfg: configuration.Config) -> Collector:
    from gotthard.exporters.gpu.collector import GpuCollector

    return GpuCollector(cfg.exporter.gpu, procfs=cfg.exporter.path_procfs)


def _slingshot(cfg: configuration.Config) -> Collector:
    from gotthard.exporters.slingshot.collector import SlingshotCollector

    return SlingshotCollector(cfg.exporter.slingshot, sysfs=cfg.exporter.path_sysfs)


def _lustre(cfg: configuration.Config) -> Collector:
    from gotthard.exporters.lustre.collector import LustreCollector

    return LustreCollector(
        cfg.exporter.lustre, procfs=cfg.exporter.path_procfs, sysfs=cfg.exporter.path_sysfs
    )


#: Collector name -> factory. Later collectors register here, one module each.
FACTORIES: dict[str, Callable[[configuration.Config], Collector]] = {
    "slurm": _slurm,
    "gpu": _gpu,
    "slingshot": _slingshot,
    "lustre": _lustre,
}


class UsageError(Exception):
    """A flag or setting the exporter cannot use; exit status 2."""


def add_cli(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "exporter",
        help="run the Prometheus exporter",
        description=(
            "Serve Prometheus metrics from the enabled collectors on /metrics "
            "(and /healthz), or print them once with --once. Flags override the "
            "[exporter] section of the site configuration."
        ),
    )
    parser.add_argument(
        "--collectors",
        help=f"comma-separated collectors to enable ({', '.join(FACTORIES)}; "
        "default from config: slurm)",
    )
    parser.add_argument("--listen", help="HOST:PORT to serve on (default 127.0.0.1:9877)")
    parser.add_argument("--once", action="store_true", help="collect once, print, exit")
    parser.add_argument("--path.sysfs", dest="path_sysfs", help="sysfs mount point (default /sys)")
    parser.add_argument(
        "--path.procfs", dest="path_procfs", help="procfs mount point (default /proc)"
    )
    parser.add_argument(
        "--web.config",
        dest="web_config",
        help="exporter-toolkit style YAML file for TLS and basic auth",
    )
    parser.add_argument(
        "--slurm.backend",
        dest="slurm_backend",
        choices=("auto", "cli", "rest", "pyslurm"),
        help="how to read Slurm (default cli; auto = pyslurm if importable, else rest "
        "if a URL is set, else cli)",
    )
    parser.add_argument(
        "--slurm.rest-url",
        dest="slurm_rest_url",
        help="slurmrestd URL: http(s)://HOST:PORT (JWT) or unix:/path/to/socket",
    )
    parser.add_argument(
        "--slurm.poll-interval",
        dest="slurm_poll_interval",
        type=float,
        metavar="SECONDS",
        help="poll Slurm at most once per this many seconds (default 30)",
    )
    parser.add_argument(
        "--slurm.per-user",
        dest="slurm_per_user",
        action="store_true",
        default=None,
        help="add a user label to job metrics (unbounded on big sites)",
    )
    parser.add_argument(
        "--slurm.job-info",
        dest="slurm_job_info",
        choices=("true", "false"),
        help="export slurm_job_info, one series per running job (default true)",
    )
    parser.add_argument(
        "--slingshot.extra-counters",
        dest="slingshot_extra_counters",
        metavar="REGEX",
        help="also export telemetry files matching REGEX as slingshot_counter{counter}",
    )
    parser.add_argument(
        "--lustre.source",
        dest="lustre_source",
        choices=("procfs", "lctl"),
        help="read Lustre from /proc and /sys (default) or from `lctl get_param` output",
    )
    parser.add_argument(
        "--lustre.job-stats",
        dest="lustre_job_stats",
        action="store_true",
        default=None,
        help="export per-job IO from job_stats (one series set per job)",
    )
    parser.add_argument(
        "--lustre.job-stats-limit",
        dest="lustre_job_stats_limit",
        type=int,
        metavar="N",
        help="at most N jobs per target, highest IO first (default 1000)",
    )
    parser.add_argument(
        "--log.level",
        dest="log_level",
        default="info",
        choices=("debug", "info", "warning", "error"),
    )
    parser.set_defaults(handler=run)


def effective_config(args: argparse.Namespace, base: configuration.Config) -> configuration.Config:
    """Apply command-line flags over the configuration file; validate the result."""
    data = base.model_dump()
    exporter = data["exporter"]
    slurm = exporter["slurm"]
    if args.collectors is not None:
        exporter["collectors"] = [c.strip() for c in args.collectors.split(",") if c.strip()]
    for flag, key in (
        ("listen", "listen"),
        ("path_sysfs", "path_sysfs"),
        ("path_procfs", "path_procfs"),
        ("web_config", "web_config"),
    ):
        value = getattr(args, flag)
        if value is not None:
            exporter[key] = value
    for flag, key in (
        ("slurm_backend", "backend"),
        ("slurm_rest_url", "rest_url"),
        ("slurm_poll_interval", "poll_interval_seconds"),
        ("slurm_per_user", "per_user"),
    ):
        value = getattr(args, flag)
        if value is not None:
            slurm[key] = value
    if args.slurm_job_info is not None:
        slurm["job_info"] = args.slurm_job_info == "true"
    if args.slingshot_extra_counters is not None:
        exporter["slingshot"]["extra_counters"] = args.slingshot_extra_counters
    for flag, key in (
        ("lustre_source", "source"),
        ("lustre_job_stats", "job_stats"),
        ("lustre_job_stats_limit", "job_stats_limit"),
    ):
        value = getattr(args, flag)
        if value is not None:
            exporter["lustre"][key] = value
    try:
        return configuration.from_mapping(data, "command line")
    except configuration.ConfigError as err:
        raise UsageError(str(err)) from None


def build_exporter(cfg: configuration.Config) -> Exporter:
    names = cfg.exporter.collectors
    unavailable = [name for name in names if name not in FACTORIES]
    if unavailable:
        raise UsageError(
            f"collector(s) not available in this build: {', '.join(unavailable)} "
            f"(available: {', '.join(FACTORIES)})"
        )
    if not names:
        raise UsageError("no collectors enabled")
    from gotthard.exporters.slurm.collector import SetupError

    runners = []
    for name in dict.fromkeys(names):
        try:
            collector = FACTORIES[name](cfg)
        except SetupError as err:
            raise UsageError(f"collector {name}: {err}") from None
        max_stale = max(collector.poll_interval, 1.0) * cfg.exporter.max_stale_intervals
        runners.append(CollectorRunner(collector, max_stale_seconds=max_stale))
    return Exporter(runners)


def run(args: argparse.Namespace, cfg: configuration.Config) -> int:
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        cfg = effective_config(args, cfg)
        exporter = build_exporter(cfg)
        web = load_web_config(cfg.exporter.web_config) if cfg.exporter.web_config else None
    except (UsageError, WebConfigError) as err:
        print(f"gotthard exporter: {err}", file=sys.stderr)
        return 2
    timeout = cfg.exporter.scrape_timeout_seconds
    if args.once:
        # One collection: wait for every poll as long as its own timeout allows.
        try:
            sys.stdout.write(exporter.scrape(timeout))
            sys.stdout.flush()
        finally:
            exporter.close()
        return 0
    host, port = configuration.parse_listen(cfg.exporter.listen)
    try:
        server = make_server(host, port, exporter.scrape, default_timeout=timeout, web=web)
    except OSError as err:
        print(f"gotthard exporter: cannot listen on {cfg.exporter.listen}: {err}", file=sys.stderr)
        return 2
    except WebConfigError as err:
        print(f"gotthard exporter: {err}", file=sys.stderr)
        return 2
    scheme = "https" if web is not None and web.tls else "http"
    log.info(
        "serving %s on %s://%s/metrics",
        ", ".join(r.name for r in exporter.runners),
        scheme,
        cfg.exporter.listen,
    )
    for runner in exporter.runners:
        runner.kick()  # warm the cache so the first scrape has data

    def stop(signum: int, _frame: object) -> None:
        log.info("signal %d: shutting down", signum)
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        server.serve_forever()
    finally:
        server.server_close()
        exporter.close()
    return 0
