"""The ``slurm`` collector: one backend of :mod:`gotthard.slurm` (cli, rest or pyslurm)
-> snapshot -> metrics."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from gotthard.exporters.families import MetricFamily
from gotthard.exporters.runtime import SetupError
from gotthard.exporters.settings import SlurmExporterConfig
from gotthard.exporters.slurm.render import render
from gotthard.slurm.cli import CliBackend
from gotthard.slurm.snapshot import (
    PollOptions,
    SlurmBackend,
    SlurmSnapshot,
    SlurmUnavailable,
    partition_total_mismatches,
)

if TYPE_CHECKING:
    from gotthard.config import Config

log = logging.getLogger("gotthard.exporter.slurm")


def _rest_token(config: SlurmExporterConfig) -> str | None:
    if config.rest_token_file:
        try:
            return Path(config.rest_token_file).read_text().strip().removeprefix("SLURM_JWT=")
        except OSError as err:
            raise SetupError(
                f"cannot read slurmrestd token file {config.rest_token_file}: {err.strerror}"
            ) from None
    return os.environ.get("SLURM_JWT") or None


def make_backend(config: SlurmExporterConfig) -> SlurmBackend:
    """Build the configured backend; ``auto`` picks pyslurm, then rest, then cli."""
    backend = config.backend
    if backend in ("pyslurm", "auto"):
        from gotthard.slurm.pyslurm_backend import PyslurmBackend

        try:
            return PyslurmBackend()
        except SlurmUnavailable as err:
            if backend == "pyslurm":
                raise SetupError(str(err)) from None
            log.info("pyslurm backend not usable (%s); falling back", err)
    if backend == "rest" or (backend == "auto" and config.rest_url):
        if not config.rest_url:
            raise SetupError("the rest backend needs --slurm.rest-url (exporter.slurm.rest_url)")
        from gotthard.slurm.rest import RestBackend

        try:
            return RestBackend(
                config.rest_url,
                token=_rest_token(config),
                user=config.rest_user or None,
                timeout=config.command_timeout_seconds,
            )
        except ValueError as err:
            raise SetupError(str(err)) from None
    cli = CliBackend(bin_dir=config.bin_dir, timeout=config.command_timeout_seconds)
    missing = cli.missing()
    if missing:
        log.warning(
            "Slurm commands not found in %s: %s; gotthard_slurm_up will be 0 until they are "
            "installed",
            config.bin_dir or "PATH",
            ", ".join(missing),
        )
    return cli


class SlurmCollector:
    name = "slurm"

    def __init__(self, config: SlurmExporterConfig, backend: SlurmBackend | None = None) -> None:
        self.poll_interval = config.poll_interval_seconds
        # A poll's commands (or requests) end by the command timeout; the margin covers
        # parsing and the rest backend's few sequential requests.
        self.poll_timeout = config.command_timeout_seconds + 5.0
        self.options = PollOptions(
            per_user=config.per_user,
            job_info=config.job_info,
            probe=config.probe,
            fairshare=config.fairshare,
        )
        self.backend = backend if backend is not None else make_backend(config)

    def poll(self) -> SlurmSnapshot:
        try:
            snapshot = self.backend.poll(self.options)
        except SlurmUnavailable as err:
            # A down controller is data (gotthard_slurm_up 0), not a collector failure.
            log.warning("Slurm controller unavailable via %s: %s", self.backend.name, err)
            return SlurmSnapshot(up=False, errors=1, backend=self.backend.name)
        for mismatch in partition_total_mismatches(snapshot):
            log.info("%s; exporting the partition record's", mismatch)
        return snapshot

    def render(self, snapshot: SlurmSnapshot) -> list[MetricFamily]:
        return render(snapshot, self.options)

    def snapshot_errors(self, snapshot: SlurmSnapshot) -> int:
        return snapshot.errors


def from_config(cfg: Config) -> SlurmCollector:
    """The collector of *cfg*'s ``[exporter.slurm]``, reaching the Slurm of the site model's
    cluster (``--slurm.rest-url`` overrides its ``slurmrestd_url``)."""
    cluster = cfg.cluster_config()
    settings = cfg.exporter.slurm
    if not settings.rest_url and cluster.slurmrestd_url:
        settings = settings.model_copy(update={"rest_url": cluster.slurmrestd_url})
    if cluster.slurm_conf:
        os.environ["SLURM_CONF"] = cluster.slurm_conf  # squeue/sinfo and pyslurm read it
    return SlurmCollector(settings)
