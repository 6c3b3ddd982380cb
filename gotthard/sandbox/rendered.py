"""What a sandbox starts of what ships: ``gotthard deploy render --target local`` of its
site file (the same code as the command), then the processes it lists.

The sandbox adds only what is not shipped (munge, Slurm, the emulated API servers, the
simulated Velero); every Prometheus, Alertmanager, exporter, webhook and DR daemon runs
the rendered files with the rendered command line.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from gotthard import config
from gotthard.deploy import cli as deploy
from gotthard.deploy import local
from gotthard.deploy.local import Process
from gotthard.deploy.manifest import RenderError, write
from gotthard.deploy.roles import NODE_EXPORTER, SLURM_EXPORTER
from gotthard.sandbox.processes import (
    ProcessRecord,
    ProcessTable,
    SandboxError,
    find_binary,
    is_running,
    wait_for,
)

#: The kinds that read a site's Slurm: they start once its node takes jobs.
EXPORTERS = (SLURM_EXPORTER.name, NODE_EXPORTER.name)
#: How long a process may take to answer its readiness URL.
READY_TIMEOUT = 60.0


def render(site_file: Path, out: Path) -> list[Process]:
    """Render *site_file* for this machine into *out*; the processes to start, each with
    its program found (:class:`SandboxError` if one is not installed)."""
    try:
        cfg = config.load(site_file)
        files = deploy.render_files("local", cfg, str(site_file), out)
        write(out, files)
    except (config.ConfigError, RenderError) as exc:
        raise SandboxError(f"cannot render {site_file}: {exc}") from exc
    return load(out)


def load(out: Path) -> list[Process]:
    """The processes the render into *out* lists, each with its program found."""
    try:
        return [_found(process) for process in local.load_processes(out)]
    except (OSError, ValueError) as exc:
        raise SandboxError(f"cannot read the processes rendered into {out}: {exc}") from exc


def _found(process: Process) -> Process:
    program = process.argv[0]
    if os.path.isabs(program):
        return process
    return replace(process, argv=[find_binary(program), *process.argv[1:]])


def of_kind(processes: Iterable[Process], kinds: Sequence[str], site: str = "") -> list[Process]:
    """The *processes* of *kinds* (of *site*, if given)."""
    return [p for p in processes if p.kind in kinds and (not site or p.site == site)]


def start(
    table: ProcessTable, processes: Sequence[Process], env: Mapping[str, str] | None = None
) -> None:
    """Spawn *processes* (rendered ones, and the sandbox's own: a process without a
    readiness URL serves nothing) at once, then wait until each is ready."""
    spawned: list[tuple[ProcessRecord, Process]] = []
    for process in processes:
        extra = {"site": process.site, "kind": process.kind, "url": process.url}
        spawned.append((table.spawn(process.name, process.argv, env=env, extra=extra), process))
    for record, process in spawned:
        if process.ready_url:
            table.wait_http(record, process.ready_url, timeout=READY_TIMEOUT)
        elif wait_for(lambda r=record: not is_running(r), 1.0):
            raise SandboxError(f"{record.name} exited during start-up (log {record.log})")
