"""The site configuration: one TOML file, typed and validated.

The file is found through ``--config FILE`` or the ``GOTTHARD_CONFIG`` environment
variable; with neither, the defaults below apply, so every command runs without a file.
Sites (``zurich``, ``lugano``, ...) are entries under ``[sites.NAME]``, never code.

An invalid file raises :class:`ConfigError`, whose message names the bad key
(``exporter.slurm.poll_interval_seconds``) and the reason.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from gotthard.dr.settings import DrConfig
from gotthard.runbooks.settings import RunbooksConfig

ENV_VAR = "GOTTHARD_CONFIG"

#: Collectors the exporter knows by name; the runtime refuses any other.
KNOWN_COLLECTORS = ("slurm", "gpu", "slingshot", "lustre")

PositiveSeconds = Annotated[float, Field(gt=0, le=86400)]


class ConfigError(Exception):
    """The configuration file cannot be read or does not validate."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SiteConfig(_Strict):
    """One physical site, e.g. Zurich or Lugano."""

    display_name: str = ""
    clusters: list[str] = Field(default_factory=list)
    prometheus_url: str = ""


class SlurmExporterConfig(_Strict):
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


class GpuExporterConfig(_Strict):
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


class SlingshotExporterConfig(_Strict):
    #: 0 reads sysfs on every scrape (single-flight); reads are cheap local files.
    poll_interval_seconds: PollSeconds = 0.0
    #: Regex of further telemetry file names exported as slingshot_counter{counter}.
    extra_counters: str = ""
    #: cxi_healthcheck thresholds: healthy needs fewer restarts than these.
    max_restarts_1h: Annotated[int, Field(ge=1)] = 5
    max_restarts_10h: Annotated[int, Field(ge=1)] = 10

    @field_validator("extra_counters")
    @classmethod
    def _regex(cls, value: str) -> str:
        if value:
            try:
                re.compile(value)
            except re.error as err:
                raise ValueError(f"not a valid regular expression: {err}") from None
        return value


class LustreExporterConfig(_Strict):
    poll_interval_seconds: PollSeconds = 0.0
    #: procfs: read /proc/fs/lustre and /sys/fs/lustre; lctl: parse `lctl get_param`.
    source: Literal["procfs", "lctl"] = "procfs"
    lctl_path: str = "lctl"
    #: Per-job IO from job_stats (opt-in: one series set per job).
    job_stats: bool = False
    #: At most this many jobs per target, highest IO first.
    job_stats_limit: Annotated[int, Field(ge=1, le=1_000_000)] = 1000
    command_timeout_seconds: PositiveSeconds = 10.0


class ExporterConfig(_Strict):
    listen: str = "127.0.0.1:9877"
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

    @field_validator("collectors")
    @classmethod
    def _known_collectors(cls, value: list[str]) -> list[str]:
        unknown = [name for name in value if name not in KNOWN_COLLECTORS]
        if unknown:
            raise ValueError(
                f"unknown collector(s) {', '.join(unknown)}; known: {', '.join(KNOWN_COLLECTORS)}"
            )
        return value

    @field_validator("listen")
    @classmethod
    def _listen_address(cls, value: str) -> str:
        parse_listen(value)
        return value


class Config(_Strict):
    #: The site this installation runs at; must name an entry of ``sites`` when sites exist.
    site: str = "local"
    cluster: str = "sandbox"
    sites: dict[str, SiteConfig] = Field(default_factory=dict)
    exporter: ExporterConfig = ExporterConfig()
    dr: DrConfig = DrConfig()
    runbooks: RunbooksConfig = RunbooksConfig()

    @field_validator("site", "cluster")
    @classmethod
    def _label_value(cls, value: str) -> str:
        if not value or not value.replace("-", "").replace("_", "").isalnum():
            raise ValueError("must be a non-empty name of letters, digits, '-' or '_'")
        return value

    @model_validator(mode="after")
    def _site_is_configured(self) -> Config:
        if self.sites and self.site not in self.sites:
            raise ValueError(
                f"site {self.site!r} is not one of the configured sites: {', '.join(self.sites)}"
            )
        return self


def parse_listen(value: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[::1]:PORT`` for IPv6); raise ValueError when unusable."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{value!r} is not HOST:PORT")
    host = host.strip("[]")
    return host, int(port)


def _format_validation_error(source: str, err: ValidationError) -> str:
    lines = [f"{source}: invalid configuration"]
    for item in err.errors():
        key = ".".join(str(part) for part in item["loc"]) or "(top level)"
        reason = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            reason = "unknown key"
        lines.append(f"  {key}: {reason}")
    return "\n".join(lines)


def from_mapping(data: dict, source: str = "<config>") -> Config:
    try:
        return Config.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_validation_error(source, err)) from None


def load(path: str | os.PathLike[str] | None = None) -> Config:
    """Load the configuration from *path*, ``$GOTTHARD_CONFIG`` or the defaults."""
    if path is None:
        path = os.environ.get(ENV_VAR) or None
    if path is None:
        return Config()
    file = Path(path)
    try:
        raw = file.read_bytes()
    except OSError as err:
        raise ConfigError(f"{file}: cannot read configuration: {err.strerror or err}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise ConfigError(f"{file}: not UTF-8 text: {err}") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{file}: not valid TOML: {err}") from None
    return from_mapping(data, str(file))
