"""``gotthard exporter``: build the collectors from flags and config, then serve or print."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from gotthard import areas
from gotthard import config as configuration
from gotthard.base import format_validation_error
from gotthard.daemon import LOG_LEVEL_OPTIONS, Daemon, configure_logging
from gotthard.exporters.runtime import Collector, CollectorRunner, Exporter, SetupError
from gotthard.exporters.settings import ExporterConfig, Flag

log = logging.getLogger("gotthard.exporter")


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


def _setting_flag(key: str, info: FieldInfo, flag: Flag) -> _Flag:
    """The flag a settings field declares (:class:`~gotthard.exporters.settings.Flag`);
    how it takes its value follows from the field's type and default."""
    name = flag.name or "--" + key.replace("_", "-")
    options: dict[str, Any] = {"help": flag.help}
    if flag.metavar:
        options["metavar"] = flag.metavar
    kind, convert = info.annotation, None
    if get_origin(kind) is Literal:
        options["choices"] = get_args(kind)
    elif kind is bool and info.default:
        options["choices"], convert = ("true", "false"), _true
    elif kind is bool:
        options.update(action="store_true", default=None)
    elif get_origin(kind) is list:
        convert = _names
    elif kind in (int, float):
        options["type"] = kind
    return _Flag(name, key, convert, options)


def _setting_flags(model: type[BaseModel], prefix: str = "") -> list[_Flag]:
    """Every flag the fields of *model* (and of its tables, recursively) declare."""
    flags = []
    for name, info in model.model_fields.items():
        declared = [item for item in info.metadata if isinstance(item, Flag)]
        if declared:
            flags.append(_setting_flag(prefix + name, info, declared[0]))
        elif isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            flags += _setting_flags(info.annotation, f"{prefix}{name}.")
    return flags


#: The exporter's flags, in --help order: ``--once``, then those the settings declare
#: (they override ``[exporter]``), then ``--log.level``.
FLAGS: tuple[_Flag, ...] = (
    _Flag("--once", options={"action": "store_true", "help": "collect once, print, exit"}),
    *_setting_flags(ExporterConfig),
    _Flag("--log.level", options=LOG_LEVEL_OPTIONS),
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
    # the exporter reads only [exporter] and the site model: the other areas' tables are
    # neither imported nor checked, which keeps a node's --once start-up short
    parser.set_defaults(handler=run, config_sections=("exporter",))


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
    """The collectors *cfg* enables, each built by its factory of the registry of areas
    (:mod:`gotthard.areas`; a collector's modules are imported only when it is enabled)."""
    names = cfg.exporter.collectors
    if not names:
        raise UsageError("no collectors enabled")
    runners = []
    for name in dict.fromkeys(names):
        factory: Callable[[configuration.Config], Collector] = areas.load(
            areas.collector(name).factory
        )
        try:
            collector = factory(cfg)
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
