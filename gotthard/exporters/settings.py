"""Settings of ``gotthard exporter``: the ``[exporter]`` table of the site file."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator

from gotthard.base import ListenAddress, Strict
from gotthard.exporters.slingshot.limits import MAX_RESTARTS_1H, MAX_RESTARTS_10H

#: Collectors the exporter knows by name; the runtime refuses any other.
KNOWN_COLLECTORS = ("slurm", "gpu", "slingshot", "lustre", "textfile")

PositiveSeconds = Annotated[float, Field(gt=0, le=86400)]


class SlurmExporterConfig(Strict):
    backend: Literal["auto", "cli", "rest", "pyslurm"] = "cli"
    #: ``http://host:6820`` (JWT) or ``unix:/path/to/slurmrestd.sock``.
    rest_url: str = ""
    #: File holding a JWT for slurmrestd (``scontrol token``); ``SLURM_JWT`` also works.
    rest_token_file: str = ""
    rest_user: str = ""
    poll_interval_seconds: PositiveSeconds = 30.0
    command_timeout_seconds: PositiveSeconds = 10.0
    per_user: bool = False
    job_info: bool = True
    probe: bool = True
    #: Directory holding squeue/sinfo/sdiag/scontrol/sbatch; empty means PATH.
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


PollSeconds = Annotated[float, Field(ge=0, le=86400)]


class SlingshotExporterConfig(Strict):
    #: 0 reads sysfs on every scrape (single-flight); reads are cheap local files.
    poll_interval_seconds: PollSeconds = 0.0
    #: Regex of further telemetry file names exported as slingshot_counter{counter}.
    extra_counters: str = ""
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
    source: Literal["procfs", "lctl"] = "procfs"
    lctl_path: str = "lctl"
    #: Per-job IO from job_stats (opt-in: one series set per job).
    job_stats: bool = False
    #: At most this many jobs per target, highest IO first.
    job_stats_limit: Annotated[int, Field(ge=1, le=1_000_000)] = 1000
    #: Per-client IO from exports.<nid>.stats of OSTs and MDTs (opt-in: one set per client).
    export_stats: bool = False
    #: At most this many clients per target, highest IO first.
    export_stats_limit: Annotated[int, Field(ge=1, le=1_000_000)] = 1000
    #: Health of the LNet interfaces from `lnetctl net show -v 4` (opt-in: a second command).
    lnet_health: bool = False
    lnetctl_path: str = "lnetctl"
    #: Space and inodes per user, group and project of each target (opt-in).
    quota: bool = False
    #: At most this many ids per target and quota type, most space first.
    quota_limit: Annotated[int, Field(ge=1, le=1_000_000)] = 1000
    #: Bulk RPC and disk I/O size distributions from brw_stats (opt-in).
    brw_stats: bool = False
    command_timeout_seconds: PositiveSeconds = 10.0


class TextfileExporterConfig(Strict):
    #: Directory of ``*.prom`` files (node_exporter's textfile format), read every scrape.
    directory: str = ""


class ExporterConfig(Strict):
    listen: ListenAddress = "127.0.0.1:9877"
    collectors: list[str] = Field(default_factory=lambda: ["slurm"])
    web_config: str = ""
    path_sysfs: str = "/sys"
    path_procfs: str = "/proc"
    #: Upper bound for one scrape when Prometheus sends no timeout header.
    scrape_timeout_seconds: PositiveSeconds = 10.0
    #: A snapshot older than this many poll intervals is dropped, not served stale.
    max_stale_intervals: Annotated[int, Field(ge=1, le=1000)] = 10
    slurm: SlurmExporterConfig = SlurmExporterConfig()
    gpu: GpuExporterConfig = GpuExporterConfig()
    slingshot: SlingshotExporterConfig = SlingshotExporterConfig()
    lustre: LustreExporterConfig = LustreExporterConfig()
    textfile: TextfileExporterConfig = TextfileExporterConfig()

    @field_validator("collectors")
    @classmethod
    def _known_collectors(cls, value: list[str]) -> list[str]:
        unknown = [name for name in value if name not in KNOWN_COLLECTORS]
        if unknown:
            raise ValueError(
                f"unknown collector(s) {', '.join(unknown)}; known: {', '.join(KNOWN_COLLECTORS)}"
            )
        return value
