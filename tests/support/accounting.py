"""Slurm accounting for a test sandbox: a real MariaDB and a real slurmdbd.

:class:`AccountedSandbox` is the Slurm sandbox with ``accounting_storage/slurmdbd``: its
slurmdbd (on the sandbox's munged, its ``slurmdbd.conf`` next to ``slurm.conf``, where
slurmdbd looks for it) starts before slurmctld, which needs the database at its first
start, and the cluster is registered with ``sacctmgr``. MariaDB runs from a private data
directory on a free port, without grant tables (a throwaway database). Everything it
started is stopped by :meth:`AccountedSandbox.down`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from gotthard.sandbox import Sandbox, SandboxError, free_ports
from gotthard.sandbox.layout import DEFAULT_PORTS
from gotthard.sandbox.processes import port_in_use, wait_for


def _binary(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/local/sbin")
    if found is None:
        raise SandboxError(f"{name} not found (apt-get install mariadb-server slurmdbd)")
    return found


class AccountedSandbox(Sandbox):
    """The Slurm sandbox with job accounting (sacct, ``sacctmgr update job``)."""

    def __init__(self, directory: Path, *, extra: Sequence[str] = (), gpus: int = 2) -> None:
        ports = dict(zip(DEFAULT_PORTS, free_ports(len(DEFAULT_PORTS)), strict=True))
        self.dbd_port, self.db_port = free_ports(2)
        accounting = (
            "AccountingStorageType=accounting_storage/slurmdbd",
            "AccountingStorageHost=localhost",
            f"AccountingStoragePort={self.dbd_port}",
        )
        super().__init__(directory, ports=ports, gpus=gpus, slurm_conf_extra=(*accounting, *extra))
        self.db_dir = self.directory / "accounting"
        self._children: list[subprocess.Popen[bytes]] = []
        self.slurm_conf_extra += (f"AccountingStoragePass={self.munge_socket}",)

    def _start(self, name: str, argv: list[str]) -> None:
        log = (self.db_dir / f"{name}.log").open("wb")
        env = {**self.env, "SLURM_CONF": str(self.slurm_conf)}
        self._children.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env))
        log.close()

    def _listening(self, port: int, what: str) -> None:
        if not wait_for(lambda: port_in_use(port), 30, 0.2):
            logs = "\n".join(p.read_text()[-1500:] for p in self.db_dir.glob("*.log"))
            raise SandboxError(f"{what} is not listening on {port}:\n{logs}")

    def before_slurmctld(self) -> None:
        self.db_dir.mkdir(parents=True, exist_ok=True)
        data = self.db_dir / "data"
        if not data.exists():
            subprocess.run(
                [
                    _binary("mariadb-install-db"),
                    "--no-defaults",
                    f"--datadir={data}",
                    "--user=root",
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                ],
                check=True,
                capture_output=True,
                timeout=120,
            )
        self._start(
            "mariadb",
            [
                _binary("mariadbd"),
                "--no-defaults",
                f"--datadir={data}",
                f"--socket={self.db_dir / 'mysql.sock'}",
                f"--port={self.db_port}",
                "--bind-address=127.0.0.1",
                "--user=root",
                "--skip-grant-tables",
                f"--pid-file={self.db_dir / 'mariadb.pid'}",
            ],
        )
        self._listening(self.db_port, "MariaDB")
        conf = self.directory / "slurmdbd.conf"
        conf.write_text(
            "AuthType=auth/munge\n"
            f"AuthInfo=socket={self.munge_socket}\n"
            "DbdHost=localhost\nDbdAddr=127.0.0.1\n"
            f"DbdPort={self.dbd_port}\n"
            "SlurmUser=root\n"
            f"PidFile={self.db_dir / 'slurmdbd.pid'}\n"
            f"LogFile={self.db_dir / 'slurmdbd-file.log'}\n"
            "StorageType=accounting_storage/mysql\n"
            f"StorageHost=127.0.0.1\nStoragePort={self.db_port}\nStorageUser=root\n"
            "StorageLoc=slurm_acct_db\n"
        )
        os.chmod(conf, 0o600)
        self._start("slurmdbd", [_binary("slurmdbd"), "-D"])
        self._listening(self.dbd_port, "slurmdbd")
        done = self.run_command(
            ["sacctmgr", "-i", "add", "cluster", self.cluster_name], check=False, timeout=120
        )
        if done.returncode != 0 and "already exists" not in done.stdout + done.stderr:
            raise SandboxError(f"sacctmgr add cluster: {done.stderr.strip()}")

    def down(self, *, verbose: bool = True, timeout: float = 10.0) -> None:
        try:
            super().down(verbose=verbose, timeout=timeout)
        finally:
            for child in reversed(self._children):
                child.terminate()
                try:
                    child.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
            self._children.clear()
