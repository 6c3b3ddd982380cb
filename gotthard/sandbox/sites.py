"""The two-site sandbox: Zurich and Lugano on one machine, with a global view.

``gotthard sandbox up --sites zurich,lugano`` starts, under one directory:

* per site (``<dir>/<site>/``, a :class:`SiteSandbox`): its own munged, slurmctld and slurmd
  (ClusterName = the site, one node ``nid001`` at every site, own ports, spool and
  sockets) and the Gotthard exporter; the sites' Slurm clusters come up in parallel;
* per site (``<dir>/state.json``): an emulated Kubernetes API server, a Prometheus with
  ``external_labels`` site/cluster, an Alertmanager clustered with the other sites'
  (``--cluster.peer``; every Prometheus alerts every Alertmanager, and an alert seen at
  both notifies once), the runbook webhook (dry-run unless told otherwise) owning its
  site's cluster, and a DR daemon replica (leader-elected on the first site's Lease);
* shared: an emulated Karmada API, the simulated Velero over every site's cluster with
  one object store (``<dir>/object-store``), and the global view: a Prometheus that
  federates every site's (``/federate``, ``honor_labels``).

Everything but Slurm, munge, the emulated APIs and the simulated Velero is what ships:
the sandbox writes its site model (``<dir>/site.toml``, :mod:`.sites_config`), renders it
with ``gotthard deploy render --target local`` into ``<dir>`` and starts the processes it
lists (:mod:`.rendered`).

``<dir>/sites.json`` names the sites and ports before anything starts, so ``down`` stops
exactly what ``up`` started, also after ``up`` died halfway. Each site has its own
``env.sh`` (SLURM_CONF, PATH, GOTTHARD_CONFIG, KUBECONFIG).

The emulated API servers and the simulated Velero with the clusters' simulated Deployment
controller (:mod:`gotthard.sandbox.doubles`: the ``gotthard-testing`` distribution) are NOT
Kubernetes and NOT Velero; ``status`` says so.
With ``external`` (a site file's kubeconfigs, :mod:`gotthard.sandbox.external`) a site's
Kubernetes or the Karmada API is a real one: no emulated API server (nor simulated Velero)
runs for it, everything of the sandbox points at it, and ``down`` never touches it.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gotthard.deploy import local
from gotthard.deploy.local import Process
from gotthard.deploy.roles import DR, RUNBOOKS, SLURM_EXPORTER
from gotthard.sandbox import doubles, rendered, sites_config, slurm
from gotthard.sandbox import processes as procs
from gotthard.sandbox.core import Sandbox, check_ports, printer
from gotthard.sandbox.external import ExternalClusters
from gotthard.sandbox.layout import local_url
from gotthard.sandbox.processes import ProcessRecord, SandboxError
from gotthard.sandbox.sites_config import (
    MAINTENANCE_NODE,
    NODE_NAME,
    SITE_ROLES,
    Topology,
    site_port_key,
)

#: The sites ``--sites`` starts when none are named.
DEFAULT_SITES = ("zurich", "lugano")
#: Set to the sandbox directory in the environment of every process ``up`` starts, so that
#: ``down`` also finds one that ``up`` started but could not record before it was killed.
MARKER = "GOTTHARD_SANDBOX"
#: The manifest written before anything starts: sites, ports, mode.
MANIFEST = "sites.json"
RUNBOOKS_MODES = ("dry-run", "enforce")
#: The ``state`` in ``status`` of an API the sandbox does not run (a site file's).
EXTERNAL = "external"
#: The ``kind`` in ``status`` of the simulated Velero and Deployment controller process.
VELERO_KIND = "velero, deployments (simulated)"
NOTIFICATIONS_KIND = "pager, ticket, dead man's switch (simulated)"


def all_running(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Whether *rows* (of :meth:`MultiSiteSandbox.status`) are all running or external."""
    return bool(rows) and all(row["state"] in ("running", EXTERNAL) for row in rows)


def parse_sites(text: str) -> tuple[str, ...]:
    """``zurich,lugano`` -> the site names; ValueError (one line) for a bad list."""
    names = tuple(part.strip() for part in text.split(","))
    if len(names) < 2 or any(not n for n in names):
        raise ValueError(f"--sites needs two or more comma-separated site names, got {text!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"--sites names a site twice: {text!r}")
    bad = [n for n in names if not n.isascii() or not n.isidentifier() or not n.islower()]
    if bad:
        raise ValueError(f"--sites: {bad[0]!r} is not a site name (lowercase letters, _, digits)")
    return names


class SiteSandbox(Sandbox):
    """One site's Slurm and exporters: a :class:`Sandbox` whose site file is the rendered
    one of the site's cluster and whose environment names its Kubernetes API too."""

    def __init__(
        self,
        top: Topology,
        site: str,
        exporter_env: Mapping[str, str],
        on_slurm_up: Callable[[SiteSandbox], None] | None = None,
        *,
        backup_controller: bool = False,
    ) -> None:
        ports = {
            name: top.port(site, name)
            for name in ("slurmctld", "slurmd", "prometheus", "alertmanager", RUNBOOKS.name)
        }
        ports["exporter"] = top.port(site, SLURM_EXPORTER.name)
        super().__init__(
            top.site_dir(site),
            ports=ports,
            node_name=NODE_NAME,
            cluster_name=site,
            maintenance_node=MAINTENANCE_NODE,
            exporter_poll_interval=2.0,
            backup_controller=backup_controller,
        )
        self.site = site
        self.top = top
        self._exporter_env = dict(exporter_env)
        self._on_slurm_up = on_slurm_up
        self.kubeconfig = top.kubeconfig(site)
        self.gotthard_config = top.config_file(site)

    def up_slurm(self, exporters: Sequence[Process]) -> None:
        """munged, slurmctld, slurmd, then the site's rendered *exporters*; ``env.sh``."""
        binaries = {name: procs.find_binary(name) for name in slurm.SLURM_BINARIES}
        slurm.prepare_directories(self)
        self.start_slurm(binaries, exporters)
        self._write_env_sh()

    def slurm_ready(self) -> None:
        if self._on_slurm_up is not None:
            self._on_slurm_up(self)

    @property
    def env(self) -> dict[str, str]:
        env = super().env
        env["KUBECONFIG"] = str(self.kubeconfig)
        env[MARKER] = str(self.top.directory)
        return env

    def exporter_env(self) -> dict[str, str]:
        return {**self.env, **self._exporter_env}

    def env_sh_text(self) -> str:
        venv_bin = Path(sys.executable).parent
        return (
            f"# source this file to use site {self.site} of the gotthard sandbox\n"
            f"export SLURM_CONF={self.slurm_conf}\n"
            f'export PATH="{venv_bin}:$PATH:/usr/local/sbin:/usr/sbin:/sbin"\n'
            f"export GOTTHARD_CONFIG={self.gotthard_config}\n"
            f"export KUBECONFIG={self.kubeconfig}\n" + self._external_note()
        )

    def _external_note(self) -> str:
        real = self.top.external.sites.get(self.site)
        if real is None:
            return ""
        return (
            f"# KUBECONFIG is the site file's: a real cluster ({real.server}) that the"
            f" sandbox neither started nor stops; its context: {real.context}\n"
        )


class MultiSiteSandbox:
    """Two or more sites (Slurm, monitoring, webhook, DR) and a global view under one
    directory; see the module documentation."""

    def __init__(
        self,
        directory: Path,
        sites: Sequence[str] = DEFAULT_SITES,
        ports: Mapping[str, int] | None = None,
        *,
        roles: Sequence[str] = SITE_ROLES,
        settings: Mapping[str, Any] | None = None,
        exporter_env: Mapping[str, Mapping[str, str]] | None = None,
        backup_cron: str = "0 2 * * *",
        drill_cron: str = "0 4 * * 0",
        on_slurm_up: Callable[[SiteSandbox], None] | None = None,
        external: ExternalClusters | None = None,
        backup_controllers: bool = False,
        backup_hooks: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        self.directory = Path(directory).absolute()
        self.sites = tuple(sites)
        if len(self.sites) < 2 or len(set(self.sites)) != len(self.sites):
            raise ValueError(f"a multi-site sandbox needs distinct sites, got {self.sites}")
        defaults = sites_config.default_ports(self.sites)
        given = dict(ports or {})
        unknown = sorted(set(given) - set(defaults))
        if unknown:
            raise ValueError(f"unknown sandbox port(s): {', '.join(unknown)}")
        self.ports = {**defaults, **given}
        self.roles = tuple(roles)
        self.settings = dict(settings or {})
        self.exporter_env = {k: dict(v) for k, v in (exporter_env or {}).items()}
        self.backup_cron = backup_cron
        self.on_slurm_up = on_slurm_up
        self.drill_cron = drill_cron
        #: Every site runs a backup slurmctld besides its primary (:mod:`.netns`).
        self.backup_controllers = backup_controllers
        self.backup_hooks = tuple(backup_hooks)
        #: The real Kubernetes/Karmada APIs (from a site file) used instead of emulated ones.
        self.external = external or ExternalClusters()
        unknown_sites = sorted(set(self.external.sites) - set(self.sites))
        if unknown_sites:
            raise ValueError(f"external clusters of unknown sites: {', '.join(unknown_sites)}")
        self.runbooks_mode = "dry-run"
        #: How long the last :meth:`up` of this object took (None: it did not start one).
        self.up_seconds: float | None = None
        self.state_file = self.directory / "state.json"
        self.manifest = self.directory / MANIFEST
        self.log_dir = self.directory / "logs"
        self._procs = procs.ProcessTable(
            self.state_file,
            cwd=self.directory,
            log_dir=self.log_dir,
            env=lambda: {**os.environ, MARKER: str(self.directory)},
            header={"directory": str(self.directory), "sites": list(self.sites)},
        )
        self._sites: dict[str, SiteSandbox] = {}

    @classmethod
    def with_free_ports(
        cls, directory: Path, sites: Sequence[str] = DEFAULT_SITES, **options: Any
    ) -> MultiSiteSandbox:
        """A sandbox whose every port is free right now (for tests next to a developer's)."""
        names = list(sites_config.default_ports(tuple(sites)))
        ports = dict(zip(names, procs.free_ports(len(names)), strict=True))
        return cls(directory, sites, ports, **options)

    @classmethod
    def load(cls, directory: Path) -> MultiSiteSandbox | None:
        """The sandbox ``up --sites`` started in *directory* (its ``sites.json``), if any."""
        manifest = Path(directory).absolute() / MANIFEST
        try:
            data = json.loads(manifest.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise SandboxError(f"cannot read {manifest}: {exc}") from exc
        try:
            external = ExternalClusters.from_json(data.get("external"))
            sandbox = cls(
                directory,
                tuple(data["sites"]),
                dict(data["ports"]),
                external=external,
                backup_controllers=bool(data.get("backup_controllers", False)),
            )
            sandbox.runbooks_mode = str(data.get("runbooks_mode", "dry-run"))
        except (KeyError, TypeError, ValueError) as exc:
            raise SandboxError(f"malformed {manifest}: {exc}") from exc
        return sandbox

    # ----------------------------------------------------------------- topology

    @property
    def topology(self) -> Topology:
        return Topology(
            directory=self.directory,
            sites=self.sites,
            ports=self.ports,
            runbooks_mode=self.runbooks_mode,
            roles=self.roles,
            settings=self.settings,
            backup_cron=self.backup_cron,
            drill_cron=self.drill_cron,
            backup_hooks=self.backup_hooks,
            external=self.external,
        )

    def site(self, name: str) -> SiteSandbox:
        """That site's Slurm sandbox (ClusterName = the site, node ``nid001``)."""
        if name not in self.sites:
            raise KeyError(f"no site {name!r} in this sandbox ({', '.join(self.sites)})")
        if name not in self._sites:
            top = self.topology
            env = self.exporter_env.get(name, {})
            self._sites[name] = SiteSandbox(
                top, name, env, self.on_slurm_up, backup_controller=self.backup_controllers
            )
        return self._sites[name]

    def port(self, site: str, name: str) -> int:
        return self.ports[site_port_key(site, name)]

    @property
    def global_url(self) -> str:
        """The global view's query URL (a Prometheus federating every site's)."""
        return local_url(self.ports["global"])

    def prometheus_url(self, site: str) -> str:
        return local_url(self.port(site, "prometheus"))

    def alertmanager_url(self, site: str) -> str:
        return local_url(self.port(site, "alertmanager"))

    def runbooks_url(self, site: str) -> str:
        return local_url(self.port(site, RUNBOOKS.name))

    def kubeapi_url(self, site: str) -> str:
        return self.topology.kubeapi_url(site)

    @property
    def karmada_url(self) -> str:
        return self.topology.karmada_url

    def dr_url(self, site: str) -> str:
        return local_url(self.port(site, DR.name))

    def kubeconfig(self, site: str) -> Path:
        return self.topology.kubeconfig(site)

    @property
    def karmada_kubeconfig(self) -> Path:
        return self.topology.karmada_kubeconfig

    def config_file(self, site: str) -> Path:
        """The rendered site file of that site's processes (``site = "<site>"``)."""
        return self.topology.config_file(site)

    @property
    def site_file(self) -> Path:
        """The sandbox's site model, which ``up`` renders."""
        return self.topology.site_file

    def env_file(self, site: str) -> Path:
        return self.site(site).directory / "env.sh"

    def audit_log(self, site: str) -> Path:
        return self.topology.audit_log(site)

    @property
    def notifications_url(self) -> str:
        """The simulated pager/ticket/dead man's switch: ``GET /received`` lists what it got."""
        return self.topology.notifications_url

    @property
    def object_store(self) -> Path:
        return self.topology.object_store

    # ----------------------------------------------------------------- status

    def status(self) -> list[dict[str, Any]]:
        """Every process ``up`` started: name, site, kind, state, url, pid."""
        rows: list[dict[str, Any]] = []
        for site in self.sites:
            sandbox = self.site(site)
            for record in sandbox.records():
                kind = record.extra.get("kind", record.name)
                url = record.extra.get("url") or _slurm_url(sandbox, record.name)
                rows.append(_row(record, f"{site}/{record.name}", site, kind, url))
        for record in self._procs.load():
            site, kind = record.extra.get("site", ""), record.extra.get("kind", record.name)
            rows.append(_row(record, record.name, site, kind, record.extra.get("url", "")))
        real = [(site, "kube-api", kube) for site, kube in self.external.sites.items()]
        if self.external.karmada is not None:
            real.append(("", "karmada-api", self.external.karmada))
        for site, label, kube in real:
            rows.append(
                {
                    "name": f"{site}-{label}" if site else label,
                    "site": site,
                    "kind": f"{label} ({EXTERNAL})",
                    "state": EXTERNAL,
                    "url": kube.server,
                    "pid": None,
                }
            )
        return rows

    def is_up(self) -> bool:
        return all_running(self.status())

    # ----------------------------------------------------------------- one process

    def process(self, name: str) -> ProcessRecord | None:
        """The recorded process *name*: a shared one (``global-prometheus``,
        ``zurich-prometheus``) or a site's (``slurmctld``... of :meth:`site`, or its
        rendered exporters, e.g. ``zurich-slurm-exporter``)."""
        for site in self.sites:
            record = self.site(site).process(name)
            if record is not None:
                return record
        return self._procs.get(name)

    def stop_process(self, name: str, timeout: float = 10.0) -> None:
        """Stop the rendered process *name* (:meth:`start_process` starts it again)."""
        process = self._rendered(name)
        if process.kind in rendered.EXPORTERS:
            self.site(process.site).stop_process(name, timeout=timeout)
            return
        record = self._procs.get(name)
        if record is not None:
            self._procs.stop(record, timeout=timeout)

    def start_process(self, name: str) -> None:
        """Start the rendered process *name* again, as ``up`` did, and wait until it is
        ready (its data directory, e.g. a Prometheus' TSDB, is kept)."""
        process = self._rendered(name)
        if process.kind in rendered.EXPORTERS:
            self.site(process.site).start_rendered(process)
        else:
            rendered.start(self._procs, [process])

    def restart_process(self, name: str) -> None:
        self.stop_process(name)
        self.start_process(name)

    def _rendered(self, name: str) -> Process:
        found = [p for p in rendered.load(self.directory) if p.name == name]
        if not found:
            raise SandboxError(f"no rendered process {name!r} in {self.directory}")
        return found[0]

    # ----------------------------------------------------------------- up, down

    def up(self, *, verbose: bool = True, runbooks_mode: str = "dry-run") -> float:
        """Start everything; the seconds it took. If everything already runs, says so.

        Every site's Slurm (and exporter) comes up in its own thread while the rest
        starts; on any failure whatever was started is stopped and :class:`SandboxError`
        raised.
        """
        if runbooks_mode not in RUNBOOKS_MODES:
            raise ValueError(f"runbooks_mode must be one of {RUNBOOKS_MODES}")
        say = printer(verbose)
        if not self.manifest.exists() and self.state_file.exists():
            raise SandboxError(
                f"{self.directory} holds a single-site sandbox; "
                f"run `gotthard sandbox down --dir {self.directory}` first"
            )
        if self.manifest.exists():
            if self.is_up():
                say(f"sandbox already running in {self.directory} ({', '.join(self.sites)})")
                return 0.0
            say(f"sandbox in {self.directory} is partly down; restarting it")
            self.down(verbose=False)
        self.runbooks_mode = runbooks_mode
        self._sites.clear()
        check_ports(self.ports)
        started = time.monotonic()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(exist_ok=True)
        self._write_manifest()
        try:
            processes = self._prepare_files()
            failures: dict[str, BaseException] = {}
            threads = [
                threading.Thread(
                    target=self._site_up,
                    args=(site, rendered.of_kind(processes, rendered.EXPORTERS, site), failures),
                    name=f"sandbox-{site}",
                )
                for site in self.sites
            ]
            for thread in threads:
                thread.start()
            try:
                monitoring = (local.ALERTMANAGER, local.PROMETHEUS, local.GLOBAL_VIEW)
                first = [
                    *self._emulated_apis(),
                    self._notifications(),
                    *rendered.of_kind(processes, monitoring),
                ]
                rendered.start(self._procs, first)
                sites_config.seed_clusters(self.topology)
                second = [*rendered.of_kind(processes, (RUNBOOKS.name,)), *self._velero()]
                rendered.start(self._procs, [*second, *rendered.of_kind(processes, (DR.name,))])
            finally:
                for thread in threads:
                    thread.join()
            if failures:
                site, error = next(iter(failures.items()))
                raise SandboxError(f"site {site}: {error}") from error
        except BaseException:
            self.down(verbose=False)
            raise
        elapsed = time.monotonic() - started
        self.up_seconds = elapsed
        say(f"{len(self.sites)}-site sandbox up in {elapsed:.1f}s ({self.directory})")
        for row in self.status():
            say(f"  {row['site'] or '-':<8} {row['kind']:<24} {row['url']}")
        say(f"  global view: {self.global_url}")
        for site in self.sites:
            say(f"  source {self.env_file(site)}")
        return elapsed

    def down(self, *, verbose: bool = True, timeout: float = 10.0) -> None:
        """Stop exactly what ``up`` started (the top-level processes, then every site's
        Slurm), as recorded; remove the state and the manifest."""
        say = printer(verbose)
        records = self._procs.load()
        for record in reversed(records):
            stopped = self._procs.stop(record, timeout=timeout)
            say(f"  {record.name:<24} {'stopped' if stopped else 'was not running'}")
            self._procs.drop(record.name)
        self._procs.remove_file()
        for site in self.sites:
            say(f"  site {site}:")
            self.site(site).down(verbose=verbose, timeout=timeout)
        for pid in procs.pids_with_environ(None, f"{MARKER}={self.directory}"):
            start = procs.process_start_time(pid)
            if start is not None:
                self._procs.stop(ProcessRecord("unrecorded", pid, [], start), timeout=timeout)
                say(f"  {'pid ' + str(pid):<24} stopped (started, but not recorded)")
        with contextlib.suppress(FileNotFoundError):
            self.manifest.unlink()

    # ----------------------------------------------------------------- internals

    def _write_manifest(self) -> None:
        data: dict[str, Any] = {
            "sites": list(self.sites),
            "ports": self.ports,
            "runbooks_mode": self.runbooks_mode,
            "backup_controllers": self.backup_controllers,
        }
        if self.external:
            data["external"] = self.external.as_json()
        self.manifest.write_text(json.dumps(data, indent=2) + "\n")

    def _site_up(
        self, site: str, exporters: Sequence[Process], failures: dict[str, BaseException]
    ) -> None:
        try:
            self.site(site).up_slurm(exporters)
        except BaseException as exc:  # reported by up() once every thread is done
            failures[site] = exc

    def _prepare_files(self) -> list[Process]:
        """The shared token, the object store, the site file and what ``deploy render
        --target local`` makes of it; the rendered processes."""
        top = self.topology
        sites_config.ensure_token(top.webhook_token)
        top.object_store.mkdir(exist_ok=True)
        for site in self.sites:
            (top.site_dir(site) / "logs").mkdir(parents=True, exist_ok=True)
        sites_config.write_site_file(top.site_file, sites_config.multi_site(top))
        return rendered.render(top.site_file, self.directory)

    def _emulated_apis(self) -> list[Process]:
        """An emulated API server per site and one for Karmada, unless the site file gave
        a real one."""
        top = self.topology
        apis = [
            (site, "kubernetes", self.port(site, "kubeapi"), top.kubeconfig(site))
            for site in self.sites
            if site not in self.external.sites
        ]
        if self.external.karmada is None:
            apis.append(("", "karmada", self.ports["karmada"], top.karmada_kubeconfig))
        found = []
        for site, kind, port, kubeconfig in apis:
            argv = [sys.executable, "-m", doubles.KUBEAPI, "--listen", f"127.0.0.1:{port}"]
            argv += ["--kind", kind, "--name", site or "karmada", "--kubeconfig", str(kubeconfig)]
            label = "karmada-api" if kind == "karmada" else "kube-api"
            name = f"{site}-{label}" if site else label
            url = local_url(port)
            found.append(Process(name, site, "", f"{label} (emulated)", argv, f"{url}/readyz", url))
        return found

    def _notifications(self) -> Process:
        """Where the Alertmanagers page, open tickets and send the Watchdog."""
        top = self.topology
        argv = [sys.executable, "-m", doubles.NOTIFICATIONS]
        argv += ["--listen", f"127.0.0.1:{self.ports['notifications']}"]
        argv += ["--log", str(top.notifications_log)]
        url = top.notifications_url
        return Process("notifications", "", "", NOTIFICATIONS_KIND, argv, f"{url}/received", url)

    def _velero(self) -> list[Process]:
        """The simulated Velero over the emulated clusters (a real cluster runs its own)."""
        emulated = [site for site in self.sites if site not in self.external.sites]
        if not emulated:
            return []
        argv = [sys.executable, "-m", doubles.VELERO_SIM]
        for site in emulated:
            argv += ["--cluster", f"{site}={self.kubeconfig(site)}"]
        argv += ["--object-store", str(self.object_store)]
        store = f"file://{self.object_store}"
        return [Process("velero", "", "", VELERO_KIND, argv, "", store)]


# --------------------------------------------------------------------------- helpers


def _row(record: ProcessRecord, name: str, site: str, kind: str, url: str) -> dict[str, Any]:
    """A row of :meth:`MultiSiteSandbox.status` for a process the sandbox started."""
    state = "running" if procs.is_running(record) else "stopped"
    return {"name": name, "site": site, "kind": kind, "state": state, "url": url, "pid": record.pid}


def _slurm_url(sandbox: Sandbox, name: str) -> str:
    net = sandbox.controller_net
    if name == slurm.BACKUP_CONTROLLER and net is not None:
        return f"tcp://{net.backup_addr}:{sandbox.port('slurmctld')}"
    if name in ("slurmctld", "slurmd"):
        host = net.host_addr if net is not None else "127.0.0.1"
        return f"tcp://{host}:{sandbox.port(name)}"
    if name == "munged":
        return f"unix:{sandbox.munge_socket}"
    if name == "exporter":
        return sandbox.exporter_url
    return ""
