"""Settings of ``gotthard exporter``: the ``[exporter]`` table of the site file.

A setting that is also a command-line flag says so where it is declared, with
:class:`Flag` metadata (its help text, and its name where it is not
``--<table>.<field-name>``); :mod:`gotthard.exporters.main` derives the flags from these
declarations. Each collector's ``[exporter.NAME]`` table is the model the registry of
areas (:mod:`gotthard.areas`) names for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, create_model, field_validator

from gotthard import areas
from gotthard.base import ListenAddress, Strict
from gotthard.exporters.slingshot.limits import MAX_RESTARTS_1H, MAX_RESTARTS_10H

#: Collectors the exporter knows by name; the runtime refuses any other.
KNOWN_COLLECTORS = areas.collector_names()

PositiveSeconds = Annotated[float, Field(gt=0, le=86400)]


@dataclass(frozen=True)
class Flag:
    """Field metadata: this setting is also a ``gotthard exporter`` flag, which overrides
    the site file. How the flag takes its value follows from the field's type: a choice
    for a ``Literal``, a switch for a bool that defaults to false, ``true|false`` for one
    that defaults to true, a comma-separated list for a list."""

    help: str
    #: The flag; empty: ``--<table>.<field-name>`` (``--slurm.rest-url``).
    name: str = ""
    metavar: str | None = None


class SlurmExporterConfig(Strict):
    backend: Annotated[
        Literal["auto", "cli", "rest", "pyslurm"],
        Flag(
            "how to read Slurm (default cli; auto = pyslurm if importable, else rest "
            "if a URL is set, else cli)"
        ),
    ] = "cli"
    #: ``http://host:6820`` (JWT) or ``unix:/path/to/slurmrestd.sock``.
    rest_url: Annotated[
        str, Flag("slurmrestd URL: http(s)://HOST:PORT (JWT) or unix:/path/to/socket")
    ] = ""
    #: File holding a JWT for slurmrestd (``scontrol token``); ``SLURM_JWT`` also works.
    rest_token_file: str = ""
    rest_user: str = ""
    poll_interval_seconds: Annotated[
        PositiveSeconds,
        Flag(
            "poll Slurm at most once per this many seconds (default 30)",
            name="--slurm.poll-interval",
            metavar="SECONDS",
        ),
    ] = 30.0
    command_timeout_seconds: PositiveSeconds = 10.0
    per_user: Annotated[bool, Flag("add a user label to job metrics (unbounded on big sites)")] = (
        False
    )
    job_info: Annotated[
        bool, Flag("export gotthard_slurm_job_info, one series per running job (default true)")
    ] = True
    probe: bool = True
    fairshare: Annotated[
        bool,
        Flag(
            "export the fair-share tree (sshare; slurmrestd /shares from v0.0.40); needs "
            "slurmdbd and priority/multifactor"
        ),
    ] = False
    #: Directory holding squeue/sinfo/sdiag/scontrol/sbatch/sshare; empty means PATH.
    bin_dir: str = ""


class GpuExporterConfig(Strict):
    poll_interval_seconds: PositiveSeconds = 15.0
    #: kubelet pod-resources socket; when absent, pods are exported by uid only.
    kubelet_socket: str = "/var/lib/kubelet/pod-resources/kubelet.sock"
    #: Hopper GPM metrics (SM/tensor/DRAM activity) from two samples per poll interval.
    gpm: bool = True
    #: Count XID errors with a background NVML event thread.
    xid_events: bool = True
    #: A fatal XID (79, 48, 94, ...) marks the GPU unhealthy for this long.
    xid_health_window_seconds: PositiveSeconds = 3600.0
    #: NVLink errors and bytes per link too (opt-in: 7 series per NVLink, 126 per GH200);
    #: by default they are exported per GPU, summed over its links.
    nvlink_per_link: Annotated[
        bool,
        Flag(
            "also export NVLink errors and bytes per link (gotthard_gpu_nvlink_link_*; "
            "7 series per NVLink)"
        ),
    ] = False


PollSeconds = Annotated[float, Field(ge=0, le=86400)]
#: How many series sets (jobs, clients, ids) one target may export.
Limit = Annotated[int, Field(ge=1, le=1_000_000)]


class SlingshotExporterConfig(Strict):
    #: 0 reads sysfs on every scrape (single-flight); reads are cheap local files.
    poll_interval_seconds: PollSeconds = 0.0
    #: Regex of further telemetry file names exported as gotthard_slingshot_counter{counter}.
    extra_counters: Annotated[
        str,
        Flag(
            "also export telemetry files matching REGEX as gotthard_slingshot_counter{counter}",
            metavar="REGEX",
        ),
    ] = ""
    #: cxi_healthcheck thresholds: healthy needs fewer restarts than these.
    max_restarts_1h: Annotated[int, Field(ge=1)] = MAX_RESTARTS_1H
    max_restarts_10h: Annotated[int, Field(ge=1)] = MAX_RESTARTS_10H

    @field_validator("extra_counters")
    @classmethod
    def _regex(cls, value: str) -> str:
        if value:
            try:
                re.compile(value)
            except re.error as err:
                raise ValueError(f"not a valid regular expression: {err}") from None
        return value


class LustreExporterConfig(Strict):
    poll_interval_seconds: PollSeconds = 0.0
    #: procfs: read /proc/fs/lustre and /sys/fs/lustre; lctl: parse `lctl get_param`.
    source: Annotated[
        Literal["procfs", "lctl"],
        Flag("read Lustre from /proc and /sys (default) or from `lctl get_param` output"),
    ] = "procfs"
    lctl_path: str = "lctl"
    #: Per-job IO from job_stats (opt-in: one series set per job).
    job_stats: Annotated[
        bool, Flag("export per-job IO from job_stats (one series set per job)")
    ] = False
    #: At most this many jobs per target, highest IO first.
    job_stats_limit: Annotated[
        Limit, Flag("at most N jobs per target, highest IO first (default 1000)", metavar="N")
    ] = 1000
    #: Space and inodes of every target as each client sees it (osc/mdc): 5 series per
    #: OST on every client, what the servers export once. Off where the OSSs and MDSs are
    #: scraped too (the rules take either view); the import state stays.
    client_target_space: Annotated[
        bool,
        Flag(
            "export the space and inodes of each OST and MDT as clients see them (osc/mdc; "
            "default true; the servers export the same)"
        ),
    ] = True
    #: Each target's import state as each client sees it (osc/mdc): 2 series per OST on
    #: every client. Off at a large site: a client then exports only the imports that are
    #: not connected or are deactivated; the per-file-system summary and the alerts stay.
    client_target_imports: Annotated[
        bool,
        Flag(
            "export every OST's and MDT's import state and activity as clients see them "
            "(default true; false: only the imports that are disconnected or deactivated, "
            "besides the per-file-system count of each state)"
        ),
    ] = True
    #: Per-client IO from exports.<nid>.stats of OSTs and MDTs (opt-in: one set per client).
    export_stats: Annotated[
        bool,
        Flag(
            "export per-client IO from exports.<nid>.stats of OSTs and MDTs "
            "(one series set per client NID)"
        ),
    ] = False
    #: At most this many clients per target, highest IO first.
    export_stats_limit: Annotated[
        Limit,
        Flag("at most N client NIDs per target, highest IO first (default 1000)", metavar="N"),
    ] = 1000
    #: Health of the LNet interfaces from `lnetctl net show -v 4` (opt-in: a second command).
    lnet_health: Annotated[
        bool,
        Flag(
            "export LNet interface health and status from `lnetctl net show -v 4` "
            "(runs lnetctl each poll)"
        ),
    ] = False
    lnetctl_path: str = "lnetctl"
    #: Space and inodes per user, group and project of each target (opt-in).
    quota: Annotated[
        bool,
        Flag(
            "export space and inodes per user, group and project of each target "
            "(quota_slave.acct_*)"
        ),
    ] = False
    #: At most this many ids per target and quota type, most space first.
    quota_limit: Annotated[
        Limit,
        Flag(
            "at most N ids per target and quota type, most space first (default 1000)",
            metavar="N",
        ),
    ] = 1000
    #: Bulk RPC and disk I/O size distributions from brw_stats (opt-in).
    brw_stats: Annotated[
        bool, Flag("export bulk RPC and disk I/O size distributions from brw_stats")
    ] = False
    command_timeout_seconds: PositiveSeconds = 10.0


class TextfileExporterConfig(Strict):
    #: Directory of ``*.prom`` files (node_exporter's textfile format), read every scrape.
    directory: Annotated[
        str, Flag("directory of *.prom files the textfile collector serves", metavar="DIR")
    ] = ""


class _ExporterSettings(Strict):
    """``[exporter]`` without the collectors' tables, which :data:`ExporterConfig` adds."""

    collectors: Annotated[
        list[str],
        Flag(
            f"comma-separated collectors to enable ({', '.join(KNOWN_COLLECTORS)}; "
            "default from config: slurm)",
            name="--collectors",
        ),
    ] = Field(default_factory=lambda: ["slurm"])
    listen: Annotated[
        ListenAddress, Flag("HOST:PORT to serve on (default 127.0.0.1:9877)", name="--listen")
    ] = "127.0.0.1:9877"
    path_sysfs: Annotated[str, Flag("sysfs mount point (default /sys)", name="--path.sysfs")] = (
        "/sys"
    )
    path_procfs: Annotated[
        str, Flag("procfs mount point (default /proc)", name="--path.procfs")
    ] = "/proc"
    web_config: Annotated[
        str,
        Flag("exporter-toolkit style YAML file for TLS and basic auth", name="--web.config"),
    ] = ""
    #: Upper bound for one scrape when Prometheus sends no timeout header.
    scrape_timeout_seconds: PositiveSeconds = 10.0
    #: A snapshot older than this many poll intervals is dropped, not served stale.
    max_stale_intervals: Annotated[int, Field(ge=1, le=1000)] = 10

    @field_validator("collectors")
    @classmethod
    def _known_collectors(cls, value: list[str]) -> list[str]:
        unknown = [name for name in value if name not in KNOWN_COLLECTORS]
        if unknown:
            raise ValueError(
                f"unknown collector(s) {', '.join(unknown)}; known: {', '.join(KNOWN_COLLECTORS)}"
            )
        return value


def _collector_tables() -> dict[str, Any]:
    """``[exporter.NAME]`` of every collector of the registry, at its defaults."""
    tables = {c.name: areas.load(c.settings) for c in areas.COLLECTORS}
    return {name: (model, model()) for name, model in tables.items()}


#: ``[exporter]``: the exporter's own settings and one table per collector.
ExporterConfig = create_model(
    "ExporterConfig", __base__=_ExporterSettings, __module__=__name__, **_collector_tables()
)
