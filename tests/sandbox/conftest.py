"""``two_sites``: one two-site sandbox (Zurich + Lugano) for the whole session.

Started once with the runbook webhooks in enforce mode, and with every source the
dashboards need, as the live dashboard test has them (tests/monitoring), all of it set in
the sandbox's site file: each site also runs the node exporter role (``gpu`` collector) on
the FAKE NVML library (jobs 1 and 2 on the GPUs); real Slingshot, Lustre and ``textfile``
exporters on the fixture trees and on the files ``gotthard policy eval`` and ``gotthard
audit kube-bench`` write are extra scrape targets of both sites; each site's Slurm runs
jobs 1 and 2, has one pending job and a reservation; the DR daemon backs up and drills
every minute.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gotthard.deploy.roles import NODE_EXPORTER
from gotthard.sandbox import SandboxError, free_ports
from gotthard.sandbox.sites import MultiSiteSandbox, SiteSandbox
from gotthard.sandbox.sites_config import SITE_ROLES
from tests.monitoring.live_sources import LiveTrees, write_security_textfiles
from tests.monitoring.test_dashboards import exporter_argv, fake_gpu_node
from tests.support.monitoring import Processes

SITES = ("zurich", "lugano")
#: Every minute: the DR panels have a backup and a drill within a minute or two.
EVERY_MINUTE = "* * * * *"


class DashboardSources:
    """The fake GPU node, the security textfiles and the Slingshot/Lustre exporters."""

    def __init__(self, root: Path, procs: Processes) -> None:
        root.mkdir(parents=True, exist_ok=True)
        env, procfs = fake_gpu_node(root)
        #: only what the fake NVML library adds to the environment
        self.exporter_env = {k: v for k, v in env.items() if os.environ.get(k) != v}
        textfiles = root / "textfile"
        write_security_textfiles(textfiles)
        #: the node exporter's settings (site file), on the fake GPU node
        self.exporter = {
            "path_procfs": str(procfs),
            "gpu": {"poll_interval_seconds": 1.0, "kubelet_socket": str(root / "no-kubelet")},
        }
        self.trees = LiveTrees(root / "nodes")
        self.trees.build()
        names = ("compute-node", "lustre-oss", "lustre-mds")
        ports = dict(zip(names, free_ports(len(names)), strict=True))
        plain_env = {k: v for k, v in os.environ.items() if k != "GOTTHARD_CONFIG"}
        compute = self.trees.compute
        argvs = {
            "compute-node": exporter_argv(
                ports["compute-node"],
                "--collectors=slingshot,lustre,textfile",
                f"--path.sysfs={compute / 'sys'}",
                f"--path.procfs={compute / 'proc'}",
                f"--textfile.directory={textfiles}",
            ),
            **{
                f"lustre-{server}": exporter_argv(
                    ports[f"lustre-{server}"],
                    "--collectors=lustre",
                    "--lustre.job-stats",
                    f"--path.sysfs={self.trees.root / server / 'sys'}",
                    f"--path.procfs={self.trees.root / server / 'proc'}",
                )
                for server in self.trees.servers
            },
        }
        self.trees.start()
        for name, argv in argvs.items():
            procs.start(name, argv, plain_env)
        #: job -> targets, scraped by every site's Prometheus with that site's labels
        self.targets = {name: [f"127.0.0.1:{port}"] for name, port in ports.items()}

    def settings(self, sites: tuple[str, ...]) -> dict[str, Any]:
        """The site file's tuning for them (each sandbox site has one cluster, its name)."""
        extra = dict.fromkeys(sites, self.targets)
        return {"exporter": self.exporter, "deploy": {"prometheus": {"extra_targets": extra}}}

    def stop(self) -> None:
        self.trees.stop()


def seed_slurm(slurm: SiteSandbox) -> None:
    """Jobs 1 and 2 running (the fake GPUs' processes and the Lustre job stats belong to
    them), one job pending until tomorrow and a reservation, as a busy site has them.

    Run as soon as the site's Slurm takes jobs: the exporter's submission probe
    (``sbatch --test-only``) uses up job ids once it runs."""
    for _ in range(2):
        slurm.submit("-o", "/dev/null", "-n", "1", "--time=600", "--wrap", "sleep 100000")
    slurm.submit("-o", "/dev/null", "--begin=now+1day", "--wrap", "true")
    slurm.run_command(
        [
            "scontrol",
            "create",
            "reservation",
            "reservationname=maintenance",
            "starttime=now+1day",
            "duration=60",
            f"nodes={slurm.node_name}",
            "users=root",
            "flags=ignore_jobs",
        ]
    )


#: The two-site sandbox is one session fixture of 21 processes: the files that use it run on
#: one worker (``pytest -n N --dist loadgroup``), so that it starts once, not once per worker.
TWO_SITES = pytest.mark.xdist_group("two_sites")


def _start_once_per_run(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Fail when another xdist worker of this run has started the two-site sandbox too:
    its tests were not kept together (run with ``--dist loadgroup``, as ``make test``
    does, on a pytest-xdist that honours ``xdist_group``)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return
    # every worker's base temporary directory lies in the run's one directory
    run_dir = tmp_path_factory.getbasetemp().parent
    (run_dir / f"two-sites-started-by-{worker}").touch()
    others = sorted(p.name for p in run_dir.glob("two-sites-started-by-*"))
    if len(others) > 1:
        pytest.fail(
            f"the two-site sandbox was started by more than one worker ({others}): "
            "xdist_group('two_sites') is not honoured; run with --dist loadgroup",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def two_sites(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MultiSiteSandbox]:
    """The two-site sandbox, runbook webhooks enforcing (``up_seconds``: how long ``up``
    took)."""
    _start_once_per_run(tmp_path_factory)
    root = tmp_path_factory.mktemp("two-sites")
    with Processes(root / "source-logs") as procs:
        sources = DashboardSources(root / "sources", procs)
        sandbox = MultiSiteSandbox.with_free_ports(
            root / "sandbox",
            SITES,
            roles=(*SITE_ROLES, NODE_EXPORTER.name),
            settings=sources.settings(SITES),
            exporter_env=dict.fromkeys(SITES, sources.exporter_env),
            backup_cron=EVERY_MINUTE,
            drill_cron=EVERY_MINUTE,
            on_slurm_up=seed_slurm,
        )
        try:
            try:
                sandbox.up(verbose=False, runbooks_mode="enforce")
            except SandboxError as exc:
                pytest.fail(f"cannot start the two-site sandbox: {exc}", pytrace=False)
            yield sandbox
        finally:
            sandbox.down(verbose=False)
            sources.stop()
