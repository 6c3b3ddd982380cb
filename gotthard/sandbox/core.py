"""The :class:`Sandbox`: bring a whole local site up and down, and use its Slurm."""

from __future__ import annotations

import functools
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from gotthard.deploy.local import Process
from gotthard.sandbox import accounting, netns, rendered, sites_config, slurm
from gotthard.sandbox import processes as procs
from gotthard.sandbox.layout import DEFAULT_CLUSTER_NAME, DEFAULT_PORTS, SandboxLayout
from gotthard.sandbox.processes import ProcessRecord, SandboxError
from gotthard.slurm.snapshot import Controller


def printer(verbose: bool) -> Callable[[str], None]:
    return print if verbose else (lambda _msg: None)


def check_ports(ports: Mapping[str, int]) -> None:
    """:class:`SandboxError` unless *ports* (by process name) are distinct and free."""
    if len(set(ports.values())) != len(ports):
        raise SandboxError(f"sandbox ports must be distinct: {dict(ports)}")
    busy = [f"{name} port {port}" for name, port in ports.items() if procs.port_in_use(port)]
    if busy:
        raise SandboxError(f"{', '.join(busy)} already in use (another sandbox or daemon running?)")


def free_sandbox_ports() -> dict[str, int]:
    """Process name -> a port that is free right now, for every sandbox process."""
    return dict(zip(DEFAULT_PORTS, procs.free_ports(len(DEFAULT_PORTS)), strict=True))


class Sandbox(SandboxLayout):
    """A single-node Slurm site under ``directory``, plus what ``gotthard deploy render
    --target local`` renders from its site file (``site.toml``): the exporter, Prometheus,
    Alertmanager and the runbook webhook."""

    @classmethod
    def with_free_ports(
        cls,
        directory: Path,
        *,
        node_name: str = "gotthard-node",
        gpus: int = 2,
        exporter_poll_interval: float = 5.0,
        cluster_name: str = DEFAULT_CLUSTER_NAME,
        backup_controller: bool = False,
        accounting: bool = False,
    ) -> Sandbox:
        """A sandbox whose ports are all free right now (for tests next to a developer's)."""
        return cls(
            directory,
            ports=free_sandbox_ports(),
            node_name=node_name,
            gpus=gpus,
            exporter_poll_interval=exporter_poll_interval,
            cluster_name=cluster_name,
            backup_controller=backup_controller,
            accounting=accounting,
        )

    @functools.cached_property
    def _procs(self) -> procs.ProcessTable:
        """The processes of ``state.json``; one table per object, so children get reaped."""
        return procs.ProcessTable(
            self.state_file,
            cwd=self.directory,
            log_dir=self.log_dir,
            env=lambda: self.env,
            header={"directory": str(self.directory), "ports": self.ports()},
        )

    # ----------------------------------------------------------------- whole site

    def status(self) -> dict[str, bool]:
        """Process name -> running, for every process in ``state.json``."""
        return self._procs.status()

    def records(self) -> list[ProcessRecord]:
        """The processes of ``state.json``, in start order."""
        return self._procs.load()

    def slurm_ready(self) -> None:
        """Called by ``up`` once the node takes jobs, before the exporter starts (whose
        submission probe uses up job ids); nothing here."""

    def exporter_env(self) -> dict[str, str]:
        """The environment of the exporter process."""
        return self.env

    def env_sh_text(self) -> str:
        """``env.sh``: what a shell needs to use this sandbox's Slurm and configuration."""
        return (
            "# source this file to use the gotthard sandbox\n"
            f"export SLURM_CONF={self.slurm_conf}\n"
            f"export GOTTHARD_CONFIG={self.gotthard_config}\n"
        )

    def is_up(self) -> bool:
        states = self.status()
        return bool(states) and all(states.values())

    def up(
        self,
        *,
        with_exporter: bool = True,
        with_prometheus: bool = True,
        verbose: bool = True,
    ) -> None:
        """Start munge, slurmctld, slurmd and optionally the exporter and Prometheus.

        If ``state.json`` says everything is already running, says so and returns. If some
        processes from an earlier run are dead, the survivors are stopped first. On any
        failure, whatever was started is stopped again and :class:`SandboxError` is raised.
        """
        say = printer(verbose)
        states = self.status()
        if states and all(states.values()):
            say(f"sandbox already running in {self.directory} ({', '.join(states)})")
            return
        if states:
            say(f"sandbox in {self.directory} is partly down; restarting it")
            self.down(verbose=False)

        binaries = {name: procs.find_binary(name) for name in slurm.SLURM_BINARIES}
        if self.accounting:
            for name in accounting.BINARIES:
                procs.find_binary(name)
        self._check_ports(with_exporter=with_exporter, with_prometheus=with_prometheus)

        started = time.monotonic()
        try:
            slurm.prepare_directories(self)
            if with_prometheus:
                sites_config.ensure_token(self.webhook_token)
            document = sites_config.single_site(
                self, exporter=with_exporter, monitoring=with_prometheus
            )
            sites_config.write_site_file(self.gotthard_config, document)
            processes: list[Process] = []
            if with_exporter or with_prometheus:
                processes = rendered.render(self.gotthard_config, self.directory)
            self.start_slurm(binaries, rendered.of_kind(processes, rendered.EXPORTERS))
            others = [p for p in processes if p.kind not in rendered.EXPORTERS]
            rendered.start(self._procs, others)
            self._write_env_sh()
        except BaseException:
            self.down(verbose=False)
            raise

        elapsed = time.monotonic() - started
        say(f"sandbox up in {elapsed:.1f}s ({self.directory})")
        say(f"  slurm:       SLURM_CONF={self.slurm_conf}")
        if with_exporter:
            say(f"  exporter:    {self.exporter_url}/metrics")
        if with_prometheus:
            say(f"  prometheus:  {self.prometheus_url}")
            say(f"  alertmanager: {self.alertmanager_url}")
            say(f"  runbooks:    {self.runbooks_url}/alerts (dry-run; audit in local/sandbox/)")
            say(f"  dashboards:  {self.directory / 'dashboards'} (import into Grafana)")
        say(f"  source {self.directory / 'env.sh'}")

    def start_slurm(self, binaries: Mapping[str, str], exporters: Sequence[Process]) -> None:
        """munged, slurmctld and slurmd; once the node takes jobs, :meth:`slurm_ready`,
        then *exporters* (rendered: they read this Slurm)."""
        slurm.start_munge(self, self._procs, binaries["mungekey"], binaries["munged"])
        if self.backup_controller:
            self.controller_net = netns.create(self.directory)
        slurm.write_slurm_configs(self)
        if self.accounting:
            accounting.start_mariadb(self, self._procs)
            accounting.start_slurmdbd(self, self._procs)
        slurm.start_slurm_daemon(self, self._procs, "slurmctld", [binaries["slurmctld"], "-c"])
        slurmd = [binaries["slurmd"], "-c", "-N", self.node_name]
        slurm.start_slurm_daemon(self, self._procs, "slurmd", slurmd)
        slurm.wait_node_usable(self, self._procs, timeout=30.0)
        if self.backup_controller:
            slurm.start_backup_controller(self, self._procs)
        self.slurm_ready()
        rendered.start(self._procs, exporters, env=self.exporter_env())

    def down(self, *, verbose: bool = True, timeout: float = 10.0) -> None:
        """Stop exactly the processes in ``state.json`` (reverse order) and remove it."""
        say = printer(verbose)
        records = self._procs.load()
        strays = slurm.unrecorded_daemons(self, {r.pid for r in records})
        if not records and not strays:
            say(f"sandbox in {self.directory} is not running")
            self._procs.remove_file()
            return
        ctld = next((r for r in records if r.name == "slurmctld"), None)
        if ctld is not None and procs.is_running(ctld):
            # Let slurmd finish the jobs' steps; otherwise slurmstepd lingers after slurmd.
            slurm.cancel_jobs_quietly(self)
        for record in reversed(records):
            stopped = self._procs.stop(record, timeout=timeout)
            say(f"  {record.name:<16} {'stopped' if stopped else 'was not running'}")
            self._procs.drop(record.name)
        for record in strays:
            self._procs.stop(record, timeout=timeout)
            say(f"  {record.name:<16} stopped (started, but not recorded)")
        stray = slurm.kill_stray_stepds(self)
        if stray:
            say(f"  {'slurmstepd':<16} killed {stray} left over")
        if netns.remove(self.directory):
            say(f"  {'namespace':<16} {netns.netns_name(self.directory)} removed")
        if self.socket_dir != self.directory:
            shutil.rmtree(self.socket_dir, ignore_errors=True)
        self._procs.remove_file()

    def process(self, name: str) -> ProcessRecord | None:
        """The recorded process *name* (``slurmctld``, ``zurich-slurm-exporter``, ...)."""
        return self._procs.get(name)

    def stop_process(self, name: str, timeout: float = 10.0) -> bool:
        """Stop the recorded process *name*; its entry stays, so :meth:`status` shows it
        stopped. True if it was running."""
        record = self._procs.get(name)
        return record is not None and self._procs.stop(record, timeout=timeout)

    def start_rendered(self, process: Process) -> None:
        """Start a rendered *process* (again) and wait until it is ready."""
        env = self.exporter_env() if process.kind in rendered.EXPORTERS else None
        rendered.start(self._procs, [process], env=env)

    # ----------------------------------------------------------------- controller, REST

    def stop_controller(self, timeout: float = 10.0) -> None:
        """Stop only slurmctld (slurmd, munge and the rest keep running).

        Its entry stays in ``state.json``, so :meth:`status` reports it as not running
        until :meth:`start_controller`.
        """
        record = self._procs.get("slurmctld")
        if record is None:
            raise SandboxError("slurmctld is not part of this sandbox's state")
        self._procs.stop(record, timeout=timeout)

    def start_controller(self, timeout: float = 30.0, *, wait_node: bool = True) -> None:
        """Restart slurmctld, recovering saved state, and wait until the node answers
        (without *wait_node*: until slurmctld answers, leaving a node an operator took
        out of service as it is). With a backup in control, the primary takes control
        back from it."""
        record = self._procs.get("slurmctld")
        if record is not None and procs.is_running(record):
            return
        slurm.start_slurm_daemon(self, self._procs, "slurmctld", [procs.find_binary("slurmctld")])
        if wait_node:
            slurm.wait_node_usable(self, self._procs, timeout=timeout)
            return

        def primary_up() -> bool:
            found = self.controllers()
            return bool(found) and found[0].up

        if not procs.wait_for(primary_up, timeout, interval=0.5):
            raise SandboxError(f"slurmctld does not answer `scontrol ping` after {timeout:.0f}s")

    def start_slurmd(self) -> None:
        """Start the node's slurmd again (after ``stop_process("slurmd")``), as after a
        maintenance; the node stays as slurmctld has it (an operator's drain: resume it)."""
        slurmd = [procs.find_binary("slurmd"), "-N", self.node_name]
        slurm.start_slurm_daemon(self, self._procs, "slurmd", slurmd)

    def controllers(self) -> tuple[Controller, ...]:
        """Every slurmctld as ``scontrol ping`` sees it: primary first, then the backup."""
        return slurm.controllers(self)

    def stop_backup_controller(self, timeout: float = 10.0) -> None:
        """Stop only the backup slurmctld (its entry stays in ``state.json``)."""
        record = self._procs.get(slurm.BACKUP_CONTROLLER)
        if record is None:
            raise SandboxError("this sandbox runs no backup slurmctld")
        self._procs.stop(record, timeout=timeout)

    def start_backup_controller(self) -> None:
        """Start the backup slurmctld again (standby, or in control if the primary is down
        for ``SlurmctldTimeout``)."""
        record = self._procs.get(slurm.BACKUP_CONTROLLER)
        if record is None or self.controller_net is None:
            raise SandboxError("this sandbox runs no backup slurmctld")
        if not procs.is_running(record):
            slurm.start_backup_controller(self, self._procs)

    def start_slurmrestd(
        self,
        mode: Literal["unix", "jwt"],
        port: int | None = None,
        timeout: float = 30.0,
    ) -> tuple[str, str | None]:
        """Start slurmrestd on a unix socket or, with ``jwt``, on a TCP port; return
        ``(url, token)``. See :func:`gotthard.sandbox.slurm.start_slurmrestd`."""
        return slurm.start_slurmrestd(self, self._procs, mode, port=port, timeout=timeout)

    def stop_slurmrestd(self, mode: Literal["unix", "jwt"], timeout: float = 10.0) -> bool:
        """Stop the slurmrestd started by :meth:`start_slurmrestd`; True if it was running."""
        return self._procs.stop_named(f"slurmrestd-{mode}", timeout=timeout)

    def token(self, username: str = "root", lifespan: int = 3600) -> str:
        """A JWT from ``scontrol token`` for ``username``."""
        return slurm.token(self, username, lifespan)

    # ----------------------------------------------------------------- jobs, commands

    def submit(self, *args: str) -> str:
        """``sbatch --parsable ARGS`` in the sandbox; returns the job id."""
        self.job_dir.mkdir(parents=True, exist_ok=True)
        argv = [procs.find_binary("sbatch"), "--parsable", *args]
        out = procs.run_checked(argv, env=self.env, cwd=self.job_dir)
        job_id = out.strip().split(";", 1)[0]
        if not job_id.isdigit():
            raise SandboxError(f"sbatch printed no job id: {out.strip()!r}")
        return job_id

    def cancel_all(self, timeout: float = 30.0) -> None:
        """Cancel every job and wait until none is pending, running or completing."""
        procs.run_checked([procs.find_binary("scancel"), "--user", "root"], env=self.env)
        squeue = procs.find_binary("squeue")
        active = "PENDING,RUNNING,COMPLETING,CONFIGURING,SUSPENDED"

        def no_jobs() -> bool:
            argv = [squeue, "-h", "-o", "%A", "-t", active]
            return not procs.run_checked(argv, env=self.env).strip()

        if not procs.wait_for(no_jobs, timeout, interval=0.25):
            raise SandboxError(f"jobs still active {timeout:.0f}s after scancel")

    def run_command(
        self, argv: Sequence[str], timeout: float = 30.0, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` with the sandbox environment and capture its output."""
        result = procs.run_capture(argv, env=self.env, timeout=timeout)
        if check and result.returncode != 0:
            raise SandboxError(
                f"{' '.join(argv)} exited {result.returncode}: {result.stderr.strip()}"
            )
        return result

    # ----------------------------------------------------------------- internals

    def _check_ports(self, *, with_exporter: bool, with_prometheus: bool) -> None:
        wanted = {"slurmctld", "slurmd"}
        if self.accounting:
            wanted.update(("slurmdbd", "mariadb"))
        if with_exporter:
            wanted.add("exporter")
        if with_prometheus:
            wanted.update(("prometheus", "alertmanager", "runbooks"))
        check_ports({name: port for name, port in self.ports().items() if name in wanted})

    def _write_env_sh(self) -> None:
        (self.directory / "env.sh").write_text(self.env_sh_text())
