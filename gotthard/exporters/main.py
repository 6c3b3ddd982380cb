"""``gotthard exporter``: build the collectors from flags and config, then serve or print."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from gotthard import config as configuration
from gotthard.base import format_validation_error
from gotthard.daemon import LOG_LEVEL_OPTIONS, Daemon, configure_logging
from gotthard.exporters.runtime import Collector, CollectorRunner, Exporter, SetupError
from gotthard.exporters.settings import ExporterConfig

log = logging.getLogger("gotthard.exporter")


def _slurm(cfg: configuration.Config) -> Collector:
    from gotthard.exporters.slurm.collector import SlurmCollector

    # The cluster's Slurm access comes from the site model; --slurm.rest-url overrides.
    cluster = cfg.cluster_config()
    settings = cfg.exporter.slurm
    if not settings.rest_url and cluster.slurmrestd_url:
        settings = settings.model_copy(update={"rest_url": cluster.slurmrestd_url})
    if cluster.slurm_conf:
        os.environ["SLURM_CONF"] = cluster.slurm_conf  # squeue/sinfo and pyslurm read it
    return SlurmCollector(settings)


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


def _textfile(cfg: configuration.Config) -> Collector:
    from gotthard.exporters.textfile import TextfileCollector

    return TextfileCollector(cfg.exporter.textfile)


#: Collector name -> factory. Later collectors register here, one module each.
FACTORIES: dict[str, Callable[[configuration.Config], Collector]] = {
    "slurm": _slurm,
    "gpu": _gpu,
    "slingshot": _slingshot,
    "lustre": _lustre,
    "textfile": _textfile,
}


class UsageError(Exception):
    """A flag or setting the exporter cannot use; exit status 2."""


def _names(value: str) -> list[str]:
    """``--collectors a, b`` -> ``["a", "b"]``."""
    return [name.strip() for name in value.split(",") if name.strip()]


def _true(value: str) -> bool:
    """``--slurm.job-info true|false`` -> bool."""
    return value == "true"


@dataclass(frozen=True)
class _Flag:
    """One ``gotthard exporter`` flag and where its value lands in the exporter settings.

    *key* is a dotted path into ``[exporter]`` (``"slurm.rest_url"``); empty for a flag
    that is not a setting. An unset flag (``None``) leaves the configuration file's value."""

    name: str
    key: str = ""
    convert: Callable[[Any], Any] | None = None
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def dest(self) -> str:
        """``--slurm.rest-url`` -> ``slurm_rest_url``."""
        return self.name.lstrip("-").replace(".", "_").replace("-", "_")


def _flag(
    name: str, key: str = "", convert: Callable[[Any], Any] | None = None, **options: Any
) -> _Flag:
    return _Flag(name, key, convert, options)


#: The exporter's flags, in --help order; the settings ones override ``[exporter]``.
FLAGS: tuple[_Flag, ...] = (
    _flag(
        "--collectors",
        "collectors",
        _names,
        help=f"comma-separated collectors to enable ({', '.join(FACTORIES)}; "
        "default from config: slurm)",
    ),
    _flag("--listen", "listen", help="HOST:PORT to serve on (default 127.0.0.1:9877)"),
    _flag("--once", action="store_true", help="collect once, print, exit"),
    _flag("--path.sysfs", "path_sysfs", help="sysfs mount point (default /sys)"),
    _flag("--path.procfs", "path_procfs", help="procfs mount point (default /proc)"),
    _flag(
        "--web.config",
        "web_config",
        help="exporter-toolkit style YAML file for TLS and basic auth",
    ),
    _flag(
        "--slurm.backend",
        "slurm.backend",
        choices=("auto", "cli", "rest", "pyslurm"),
        help="how to read Slurm (default cli; auto = pyslurm if importable, else rest "
        "if a URL is set, else cli)",
    ),
    _flag(
        "--slurm.rest-url",
        "slurm.rest_url",
        help="slurmrestd URL: http(s)://HOST:PORT (JWT) or unix:/path/to/socket",
    ),
    _flag(
        "--slurm.poll-interval",
        "slurm.poll_interval_seconds",
        type=float,
        metavar="SECONDS",
        help="poll Slurm at most once per this many seconds (default 30)",
    ),
    _flag(
        "--slurm.per-user",
        "slurm.per_user",
        action="store_true",
        default=None,
        help="add a user label to job metrics (unbounded on big sites)",
    ),
    _flag(
        "--slurm.job-info",
        "slurm.job_info",
        _true,
        choices=("true", "false"),
        help="export slurm_job_info, one series per running job (default true)",
    ),
    _flag(
        "--slingshot.extra-counters",
        "slingshot.extra_counters",
        metavar="REGEX",
        help="also export telemetry files matching REGEX as slingshot_counter{counter}",
    ),
    _flag(
        "--lustre.source",
        "lustre.source",
        choices=("procfs", "lctl"),
        help="read Lustre from /proc and /sys (default) or from `lctl get_param` output",
    ),
    _flag(
        "--lustre.job-stats",
        "lustre.job_stats",
        action="store_true",
        default=None,
        help="export per-job IO from job_stats (one series set per job)",
    ),
    _flag(
        "--lustre.job-stats-limit",
        "lustre.job_stats_limit",
        type=int,
        metavar="N",
        help="at most N jobs per target, highest IO first (default 1000)",
    ),
    _flag(
        "--lustre.export-stats",
        "lustre.export_stats",
        action="store_true",
        default=None,
        help="export per-client IO from exports.<nid>.stats of OSTs and MDTs "
        "(one series set per client NID)",
    ),
    _flag(
        "--lustre.export-stats-limit",
        "lustre.export_stats_limit",
        type=int,
        metavar="N",
        help="at most N client NIDs per target, highest IO first (default 1000)",
    ),
    _flag(
        "--lustre.lnet-health",
        "lustre.lnet_health",
        action="store_true",
        default=None,
        help="export LNet interface health and status from `lnetctl net show -v 4` "
        "(runs lnetctl each poll)",
    ),
    _flag(
        "--lustre.quota",
        "lustre.quota",
        action="store_true",
        default=None,
        help="export space and inodes per user, group and project of each target "
        "(quota_slave.acct_*)",
    ),
    _flag(
        "--lustre.quota-limit",
        "lustre.quota_limit",
        type=int,
        metavar="N",
        help="at most N ids per target and quota type, most space first (default 1000)",
    ),
    _flag(
        "--lustre.brw-stats",
        "lustre.brw_stats",
        action="store_true",
        default=None,
        help="export bulk RPC and disk I/O size distributions from brw_stats",
    ),
    _flag(
        "--textfile.directory",
        "textfile.directory",
        metavar="DIR",
        help="directory of *.prom files the textfile collector serves",
    ),
    _flag("--log.level", **LOG_LEVEL_OPTIONS),
)


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
    for flag in FLAGS:
        parser.add_argument(flag.name, dest=flag.dest, **flag.options)
    parser.set_defaults(handler=run)


def effective_config(args: argparse.Namespace, base: configuration.Config) -> configuration.Config:
    """Apply command-line flags over the configuration file; validate the result."""
    exporter = base.exporter.model_dump()
    for flag in FLAGS:
        value = getattr(args, flag.dest)
        if not flag.key or value is None:
            continue
        *sections, key = flag.key.split(".")
        section = exporter
        for name in sections:
            section = section[name]
        section[key] = flag.convert(value) if flag.convert else value
    try:
        settings = ExporterConfig.model_validate(exporter)
    except ValidationError as err:
        raise UsageError(format_validation_error("command line", err, "exporter")) from None
    return base.model_copy(update={"exporter": settings})


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
    configure_logging(args.log_level)
    try:
        cfg = effective_config(args, cfg)
        # the web config is read and checked first, with --once too: a bad one is exit 2
        # before anything is collected (the serving layer loads only when one is set)
        web = None
        if cfg.exporter.web_config:
            from gotthard.serve import WebConfigError, load_web_config

            try:
                web = load_web_config(cfg.exporter.web_config)
            except WebConfigError as err:
                raise UsageError(str(err)) from None
        exporter = build_exporter(cfg)
    except UsageError as err:
        print(f"gotthard exporter: {err}", file=sys.stderr)
        return 2
    timeout = cfg.exporter.scrape_timeout_seconds
    if args.once:
        # One collection: wait for every poll as long as its own timeout allows.
        try:
            sys.stdout.write(exporter.scrape(timeout, wait_for_polls=True))
        finally:
            exporter.close()
        return 0
    from gotthard.exporters.web import make_server

    host, port = configuration.parse_listen(cfg.exporter.listen)
    try:
        server = make_server(host, port, exporter.scrape, default_timeout=timeout, web=web)
    except OSError as err:
        exporter.close()
        print(f"gotthard exporter: cannot listen on {cfg.exporter.listen}: {err}", file=sys.stderr)
        return 2
    log.info("collectors: %s", ", ".join(r.name for r in exporter.runners))

    def warm() -> None:
        for runner in exporter.runners:
            runner.kick()  # the first scrape finds its poll under way, or done

    Daemon("exporter", server, start=warm, close=[exporter.close]).run()
    return 0
