"""Slurm accounting in the sandbox: a private MariaDB, slurmdbd, and the fair-share tree.

With ``accounting=True`` a sandbox runs, before slurmctld:

* MariaDB (``mariadbd``) on its own data directory (``<dir>/mariadb``), a unix socket and
  a free loopback port, never the machine's database;
* slurmdbd on a free loopback port, with ``slurmdbd.conf`` (0600) beside ``slurm.conf``,
  where slurmdbd looks for it;
* the cluster, and the accounts of :data:`ACCOUNTS` with their shares, root a user of
  each (``sacctmgr -i``);

and slurm.conf uses ``accounting_storage/slurmdbd`` and ``priority/multifactor``, with no
decay (``PriorityDecayHalfLife=0``), so that usage only grows with the jobs that ran and
the fair-share values stay put between two reads. slurmctld recomputes usage and
fair-share once a minute (``PriorityCalcPeriod=1``, its shortest).
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Mapping

from gotthard.sandbox.layout import MAX_SOCKET_PATH, SandboxLayout
from gotthard.sandbox.processes import (
    ProcessTable,
    SandboxError,
    find_binary,
    is_running,
    run_capture,
    tail,
    wait_for,
    write_private,
)

#: Binaries an accounting sandbox needs (Debian: mariadb-server, slurmdbd).
BINARIES = ("mariadb-install-db", "mariadbd", "mariadb", "slurmdbd", "sacctmgr")
#: The accounts of the sandbox's fair-share tree -> their raw shares (root is a user of each).
ACCOUNTS: Mapping[str, int] = {"physics": 60, "chemistry": 40}
#: MariaDB options for a throw-away test database: small redo log, no fsync (a sandbox's
#: accounting need not survive a crash of the machine; with fsync, creating the system
#: tables took minutes on a machine whose disk was busy).
MARIADB_OPTIONS = (
    "--innodb-log-file-size=8M",
    "--innodb-flush-method=nosync",
    "--innodb-flush-log-at-trx-commit=0",
    "--innodb-doublewrite=0",
    "--innodb-buffer-pool-size=32M",
)
#: The accounting database slurmdbd creates and its MariaDB user.
DATABASE = "slurm_acct_db"
DB_USER = "slurm"


def slurm_conf_lines(layout: SandboxLayout) -> list[str]:
    """What slurm.conf says instead of ``accounting_storage/none`` when accounting is on."""
    return [
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=127.0.0.1",
        f"AccountingStoragePort={layout.port('slurmdbd')}",
        # with slurmdbd, the munge socket its clients' credentials come from
        f"AccountingStoragePass={layout.munge_socket}",
        "PriorityType=priority/multifactor",
        "PriorityDecayHalfLife=0",
        "PriorityUsageResetPeriod=YEARLY",
        "PriorityCalcPeriod=1",
        "PriorityWeightFairshare=10000",
        "PriorityWeightAge=0",
    ]


def _password(layout: SandboxLayout) -> str:
    path = layout.directory / "mariadb.password"
    if not path.exists():
        write_private(path, secrets.token_hex(16))
    return path.read_text().strip()


def _mariadb_socket(layout: SandboxLayout) -> str:
    socket = layout.socket_dir / "mariadb.sock"
    if len(str(socket)) > MAX_SOCKET_PATH:
        raise SandboxError(f"directory path too long for a unix socket: {socket}")
    return str(socket)


def _client(layout: SandboxLayout, sql: str) -> None:
    argv = [
        find_binary("mariadb"),
        "--no-defaults",
        f"--socket={_mariadb_socket(layout)}",
        "--user=root",
        "--execute",
        sql,
    ]
    done = run_capture(argv, env=layout.env, timeout=30)
    if done.returncode != 0:
        raise SandboxError(f"mariadb: {(done.stderr or done.stdout).strip()}")


def start_mariadb(layout: SandboxLayout, procs: ProcessTable) -> None:
    """Initialise ``<dir>/mariadb`` once, start mariadbd on it and create slurmdbd's user."""
    data = layout.directory / "mariadb"
    log = layout.log_dir / "mariadb.log"
    # its temporary tables and files in the sandbox, not in the /tmp other programs share
    tmpdir = layout.directory / "mariadb-tmp"
    tmpdir.mkdir(mode=0o700, exist_ok=True)
    options = (*MARIADB_OPTIONS, f"--tmpdir={tmpdir}")
    if not (data / "mysql").is_dir():
        argv = [
            find_binary("mariadb-install-db"),
            "--no-defaults",
            f"--datadir={data}",
            "--auth-root-authentication-method=socket",
            "--skip-test-db",
            "--user=root",
            *options,
        ]
        done = run_capture(argv, env=layout.env, timeout=120)
        if done.returncode != 0:
            raise SandboxError(f"mariadb-install-db failed: {(done.stderr or done.stdout)[-500:]}")
    socket = _mariadb_socket(layout)
    with contextlib.suppress(FileNotFoundError):
        (layout.socket_dir / "mariadb.sock").unlink()
    argv = [
        find_binary("mariadbd"),
        "--no-defaults",
        f"--datadir={data}",
        f"--socket={socket}",
        f"--port={layout.port('mariadb')}",
        "--bind-address=127.0.0.1",
        "--user=root",
        f"--pid-file={layout.directory / 'run' / 'mariadb.pid'}",
        f"--log-error={log}",
        "--skip-name-resolve",
        *options,
    ]
    record = procs.spawn("mariadb", argv)

    def answers() -> bool:
        if not is_running(record):
            raise SandboxError(f"mariadbd exited during start-up:\n{tail(log)}")
        try:
            _client(layout, "SELECT 1")
        except SandboxError:
            return False
        return True

    if not wait_for(answers, 60.0, 0.25):
        raise SandboxError(f"mariadbd does not answer on {socket} after 60s:\n{tail(log)}")
    password = _password(layout)
    _client(
        layout,
        f"CREATE USER IF NOT EXISTS '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{password}';"
        f"ALTER USER '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{password}';"
        f"GRANT ALL ON {DATABASE}.* TO '{DB_USER}'@'127.0.0.1';",
    )


def write_slurmdbd_conf(layout: SandboxLayout) -> None:
    """``slurmdbd.conf`` beside slurm.conf (slurmdbd refuses one others can read)."""
    lines = [
        "# Written by gotthard sandbox; regenerated on every `up`.",
        "AuthType=auth/munge",
        f"AuthInfo=socket={layout.munge_socket}",
        "DbdHost=localhost",
        "DbdAddr=127.0.0.1",
        f"DbdPort={layout.port('slurmdbd')}",
        "SlurmUser=root",
        "DebugLevel=info",
        f"LogFile={layout.log_dir / 'slurmdbd.log'}",
        f"PidFile={layout.directory / 'run' / 'slurmdbd.pid'}",
        "StorageType=accounting_storage/mysql",
        "StorageHost=127.0.0.1",
        f"StoragePort={layout.port('mariadb')}",
        f"StorageUser={DB_USER}",
        f"StoragePass={_password(layout)}",
        f"StorageLoc={DATABASE}",
    ]
    write_private(layout.directory / "slurmdbd.conf", "\n".join(lines) + "\n")


def sacctmgr(layout: SandboxLayout, *args: str) -> str:
    """``sacctmgr -i -n -P ARGS`` against the sandbox's slurmdbd; its output."""
    argv = [find_binary("sacctmgr"), "-i", "-n", "-P", *args]
    done = run_capture(argv, env=layout.env, timeout=30)
    if done.returncode != 0:
        raise SandboxError(f"sacctmgr {' '.join(args)}: {(done.stderr or done.stdout).strip()}")
    return done.stdout


def start_slurmdbd(layout: SandboxLayout, procs: ProcessTable) -> None:
    """slurmdbd (in the foreground, recorded), then the cluster and the fair-share tree."""
    write_slurmdbd_conf(layout)
    log = layout.log_dir / "slurmdbd.log"
    record = procs.spawn("slurmdbd", [find_binary("slurmdbd"), "-D"])
    last: list[str] = [""]

    def answers() -> bool:
        if not is_running(record):
            raise SandboxError(f"slurmdbd exited during start-up:\n{tail(log)}")
        try:
            sacctmgr(layout, "list", "cluster", "format=cluster")
        except SandboxError as err:
            last[0] = str(err)
            return False
        return True

    if not wait_for(answers, 60.0, 0.5):
        raise SandboxError(f"slurmdbd does not answer sacctmgr after 60s ({last[0]}):\n{tail(log)}")
    cluster = layout.cluster_name
    if cluster not in sacctmgr(layout, "list", "cluster", "format=cluster").split():
        sacctmgr(layout, "add", "cluster", cluster)
    present = set(sacctmgr(layout, "list", "account", "format=account").split())
    for account, shares in ACCOUNTS.items():
        if account not in present:
            sacctmgr(layout, "add", "account", account, f"cluster={cluster}", f"fairshare={shares}")
            sacctmgr(layout, "add", "user", "root", f"account={account}", f"cluster={cluster}")


def wait_usage(layout: SandboxLayout, accounts: tuple[str, ...], timeout: float = 150.0) -> None:
    """Wait until slurmctld's priority thread has charged every one of *accounts* with
    usage (``sshare`` raw usage > 0): it runs once a minute."""
    sshare = find_binary("sshare")
    argv = [sshare, "-n", "-P", "-a", "-o", "Account,User,RawUsage"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = run_capture(argv, env=layout.env, timeout=30)
        used = set()
        for line in done.stdout.splitlines():
            account, user, raw = ([*line.split("|"), "", ""])[:3]
            if not user.strip() and raw.strip().isdigit() and int(raw) > 0:
                used.add(account.strip())
        if set(accounts) <= used:
            return
        time.sleep(2.0)
    raise SandboxError(f"no usage charged to {', '.join(accounts)} after {timeout:.0f}s")
