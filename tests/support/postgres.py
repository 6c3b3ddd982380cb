"""A private PostgreSQL cluster for tests and benchmarks: Debian's ``initdb``/``pg_ctl``.

:class:`PostgresCluster` initialises a data directory in a fresh temporary directory,
starts ``postgres`` on a free 127.0.0.1 port (its Unix socket in the same directory, so
no system path is touched), and stops it with ``pg_ctl stop -m immediate`` and deletes
the directory on exit. Authentication is ``trust`` for the one role, ``gotthard``.

``initdb`` refuses to run as root: as root, the cluster's commands run as ``nobody``
(``runuser``) and the temporary directory is handed to that user; the tests still
connect over TCP as the ``gotthard`` role.

The binaries are Debian's (``/usr/lib/postgresql/VERSION/bin``, the newest version;
``scripts/install-system-deps`` installs the ``postgresql`` package); ``$PG_BINDIR``
overrides the directory.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Self

from gotthard.sandbox import free_ports

from .lifecycle import StopOnExit

#: The role (trust authentication) and the database the cluster serves.
ROLE = "gotthard"
DATABASE = "postgres"
#: The user the cluster runs as when the tests run as root.
ROOT_STAND_IN = "nobody"


def postgres_bindir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``, or None if PostgreSQL is absent."""
    if os.environ.get("PG_BINDIR"):
        return Path(os.environ["PG_BINDIR"])
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda path: int(Path(path).parts[-3]) if Path(path).parts[-3].isdigit() else 0,
    )
    return Path(found[-1]).parent if found else None


class PostgresCluster(StopOnExit):
    """A throw-away PostgreSQL server (see module docstring); a context manager."""

    def __init__(self) -> None:
        bindir = postgres_bindir()
        if bindir is None:
            raise FileNotFoundError("PostgreSQL is not installed (/usr/lib/postgresql/*/bin)")
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="gotthard-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        (self.port,) = free_ports(1)
        self._as: list[str] = []
        if os.geteuid() == 0:
            account = pwd.getpwnam(ROOT_STAND_IN)
            os.chown(self.root, account.pw_uid, account.pw_gid)
            self._as = ["runuser", "-u", ROOT_STAND_IN, "--"]
        self.running = False

    def _run(self, *argv: str) -> None:
        done = subprocess.run(
            [*self._as, *argv], capture_output=True, text=True, timeout=60, cwd=self.root
        )
        if done.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(f"{argv[0]} failed: {done.stdout}{done.stderr}{log}")

    def start(self) -> PostgresCluster:
        self._run(
            str(self.bindir / "initdb"),
            "-D",
            str(self.data),
            "-U",
            ROLE,
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        )
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.root}"
            " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        self._run(
            str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", options,
            "-w", "-t", "30", "start",
        )  # fmt: skip
        self.running = True
        return self

    def __enter__(self) -> Self:
        self.start()
        return self

    @property
    def url(self) -> str:
        """The SQLAlchemy URL (psycopg 3 driver) of the cluster's database."""
        return f"postgresql+psycopg://{ROLE}@127.0.0.1:{self.port}/{DATABASE}"

    def stop(self) -> None:
        try:
            if self.running:
                self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate",
                          "-w", "stop")  # fmt: skip
                self.running = False
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
