"""A local single-node site: munge, Slurm, the Gotthard exporter and Prometheus.

``gotthard sandbox up`` builds everything under one directory (``.sandbox`` by default):

* ``munge/``: a private munge key, socket, pid, log and seed file (mode 0700);
* ``slurm.conf`` / ``gres.conf``: one node with the machine's real CPUs and memory and
  ``gpus`` fake GPUs (character devices with the major/minor numbers of ``/dev/null``);
* ``spool/``, ``run/``, ``logs/``: Slurm state, pid files and every daemon's log;
* ``site.toml``: the site model of this machine; ``gotthard deploy render --target local``
  renders from it what the sandbox starts (``processes.json``, ``local/prometheus.yml``,
  ``alertmanager.yml``, ``rules/``, ``dashboards/``, ``local/sandbox/gotthard.toml``);
* ``env.sh``: ``source`` it to point ``sinfo``/``squeue``/``gotthard`` at the sandbox;
* ``state.json``: every process started, with its pid and kernel start time, so that
  ``down`` stops exactly those processes and never a recycled pid.

All ports are parameters, so a test session can run its own sandbox next to a developer's.

``gotthard sandbox up --sites zurich,lugano`` starts several such sites instead, each with
its own Slurm cluster, Prometheus, clustered Alertmanager, runbook webhook, emulated
Kubernetes API and DR daemon replica, plus an emulated Karmada API, a simulated Velero and
a global view (:mod:`.sites`; docs/sandbox.md).

Modules: :mod:`.processes` (generic process bookkeeping), :mod:`.layout` (paths, ports,
URLs), :mod:`.slurm` (munge and Slurm), :mod:`.sites_config` (the site file a sandbox
writes), :mod:`.rendered` (render it, start what was rendered), :mod:`.core`
(:class:`Sandbox`), :mod:`.sites` (:class:`~.sites.MultiSiteSandbox`), :mod:`.doubles`
(which test doubles it runs: the emulated API servers and the simulated Velero of the
``gotthard-testing`` distribution, not of this one) and :mod:`.cli`.
"""

from __future__ import annotations

from gotthard.sandbox.cli import add_cli
from gotthard.sandbox.core import Sandbox
from gotthard.sandbox.processes import (
    ProcessRecord,
    SandboxError,
    find_binary,
    free_ports,
    process_start_time,
)

__all__ = [
    "ProcessRecord",
    "Sandbox",
    "SandboxError",
    "add_cli",
    "find_binary",
    "free_ports",
    "process_start_time",
]
