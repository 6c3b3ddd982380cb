"""Slurm and munge in the sandbox: directories, configuration files and daemons.

One node with the machine's real CPUs and memory and ``gpus`` fake GPUs (character
devices with the major/minor numbers of ``/dev/null``), in partitions ``debug`` (the
default) and ``gpu``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import secrets
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from gotthard import command
from gotthard.sandbox import accounting, netns
from gotthard.sandbox.layout import MAX_SOCKET_PATH, SandboxLayout, local_url
from gotthard.sandbox.processes import (
    INSTALL_HINT,
    ProcessRecord,
    ProcessTable,
    SandboxError,
    find_binary,
    free_ports,
    is_running,
    pids_with_environ,
    port_in_use,
    process_start_time,
    run_capture,
    run_checked,
    tail,
    wait_for,
    write_private,
)
from gotthard.slurm.cli import CliBackend
from gotthard.slurm.snapshot import Controller, Node, SlurmUnavailable
from gotthard.slurm.text import parse_ping

#: OpenAPI plugin served by slurmrestd on Slurm 22.05 (the dbv plugin needs slurmdbd).
RESTD_OPENAPI = "v0.0.38"
#: Binaries ``up`` needs for munge and Slurm.
SLURM_BINARIES = ("mungekey", "munged", "slurmctld", "slurmd", "sinfo", "scontrol")
#: The process name of the backup slurmctld (``backup_controller``).
BACKUP_CONTROLLER = "slurmctld-backup"


# --------------------------------------------------------------------------- the machine


def jwt_plugin_available() -> bool:
    """Whether Slurm's ``auth/jwt`` plugin is installed (Debian: slurm-wlm-jwt-plugin)."""
    patterns = (
        "/usr/lib/*/slurm-wlm/auth_jwt.so",
        "/usr/lib/slurm-wlm/auth_jwt.so",
        "/usr/lib*/slurm/auth_jwt.so",
        "/usr/local/lib*/slurm/auth_jwt.so",
    )
    return any(glob.glob(pattern) for pattern in patterns)


def short_hostname() -> str:
    return socket.gethostname().split(".", 1)[0] or "localhost"


def backup_hostname() -> str:
    """The hostname the backup slurmctld runs under (its UTS namespace), by which it
    finds itself second in ``SlurmctldHost``."""
    return f"{short_hostname()}-backup"


def meminfo_mb() -> int:
    """Total memory in MiB from ``/proc/meminfo`` (4096 when unreadable)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return 4096


def slurmd_topology() -> dict[str, str]:
    """CPU topology as slurmd sees it (``slurmd -C``), so the node never comes up INVAL."""
    try:
        slurmd = find_binary("slurmd")
    except SandboxError:
        return {}
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    try:
        out = command.run([slurmd, "-C"], env=env, timeout=30, check=False).stdout
    except command.CommandError:
        return {}
    first = out.splitlines()[0] if out else ""
    keys = (
        "CPUs",
        "Boards",
        "SocketsPerBoard",
        "CoresPerSocket",
        "ThreadsPerCore",
        "RealMemory",
    )
    found = dict(re.findall(r"(\w+)=(\S+)", first))
    return {k: found[k] for k in keys if k in found and found[k].isdigit()}


def node_resources() -> dict[str, str]:
    """The node's CPUs, topology and RealMemory (a little below the machine's) for slurm.conf."""
    topo = slurmd_topology()
    cpus = int(topo.get("CPUs", os.cpu_count() or 1))
    mem_mb = min(int(topo.get("RealMemory", 10**9)), meminfo_mb())
    real_mb = max(256, mem_mb - max(256, mem_mb // 20))
    resources = {"CPUs": str(cpus)}
    for key in ("Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore"):
        if key in topo:
            resources[key] = topo[key]
    resources["RealMemory"] = str(real_mb)
    return resources


# --------------------------------------------------------------------------- files


def prepare_directories(layout: SandboxLayout) -> None:
    """Spool, run, log, job, munge and socket directories, fake GPUs and the JWT key."""
    layout.directory.mkdir(parents=True, exist_ok=True)
    for sub in ("spool/slurmctld", "run", "run-backup", "logs", "jobs", "fakedev"):
        (layout.directory / sub).mkdir(parents=True, exist_ok=True)
    if layout.socket_dir != layout.directory:
        layout.socket_dir.mkdir(mode=0o711, exist_ok=True)
        if layout.socket_dir.stat().st_uid != os.geteuid():
            raise SandboxError(f"{layout.socket_dir} exists and belongs to someone else")
        os.chmod(layout.socket_dir, 0o711)
    layout.slurmd_spool.mkdir(parents=True, exist_ok=True)
    # munged insists that nobody else may write its directory; execute for all lets
    # non-root clients reach the socket (the key itself stays 0600).
    layout.munge_dir.mkdir(exist_ok=True)
    os.chmod(layout.munge_dir, 0o711)
    os.chmod(layout.directory / "spool", 0o700)
    if len(str(layout.munge_socket)) > MAX_SOCKET_PATH:
        raise SandboxError(f"directory path too long for a unix socket: {layout.munge_socket}")
    fakedev = layout.directory / "fakedev"
    for old in fakedev.iterdir():
        old.unlink()
    for index in range(layout.gpus):
        device = fakedev / f"nvidia{index}"
        try:
            os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except PermissionError as exc:
            raise SandboxError(
                f"cannot create fake GPU device {device} (mknod needs root): {exc}"
            ) from exc
        os.chmod(device, 0o666)
    if not layout.jwt_key.exists():
        write_private(layout.jwt_key, secrets.token_bytes(32))


def slurm_conf_lines(layout: SandboxLayout) -> list[str]:
    """The lines of ``slurm.conf`` for this machine."""
    d = layout.directory
    res = node_resources()
    cpus = int(res["CPUs"])
    def_mem = max(100, min(1024, int(res["RealMemory"]) // max(cpus, 1)))
    node_spec = " ".join(f"{k}={v}" for k, v in res.items())
    gres = f" Gres=gpu:{layout.gpus}" if layout.gpus else ""
    node = layout.node_name
    # slurmctld refuses to run unless SlurmctldHost is this machine's hostname.
    controllers = [f"SlurmctldHost={short_hostname()}(127.0.0.1)"]
    node_addr = "127.0.0.1"
    net = layout.controller_net
    if layout.backup_controller:
        if net is None:
            raise SandboxError("backup controller: its namespace was not made before slurm.conf")
        # the host end of the backup's veth pair: the backup reaches the primary and the
        # nodes there, as everyone else does
        node_addr = net.host_addr
        controllers = [
            f"SlurmctldHost={short_hostname()}({net.host_addr})",
            f"SlurmctldHost={backup_hostname()}({net.backup_addr})",
        ]
    lines = [
        "# Written by gotthard sandbox; regenerated on every `up`.",
        f"ClusterName={layout.cluster_name}",
        *controllers,
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={layout.munge_socket}",
        f"SlurmctldPort={layout.port('slurmctld')}",
        f"SlurmdPort={layout.port('slurmd')}",
        f"StateSaveLocation={d / 'spool/slurmctld'}",
        f"SlurmdSpoolDir={layout.slurmd_spool}",
        f"SlurmctldPidFile={d / 'run/slurmctld.pid'}",
        f"SlurmdPidFile={d / 'run/slurmd.pid'}",
        f"SlurmctldLogFile={layout.log_dir / 'slurmctld.log'}",
        f"SlurmdLogFile={layout.log_dir / 'slurmd.log'}",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "MpiDefault=none",
        "MailProg=/bin/true",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        f"DefMemPerCPU={def_mem}",
        "GresTypes=gpu",
        "SchedulerType=sched/backfill",
        # React within about a second in tests instead of the production defaults.
        (
            "SchedulerParameters=batch_sched_delay=0,sched_interval=2,"
            "sched_min_interval=100000,bf_interval=2"
        ),
        *(
            accounting.slurm_conf_lines(layout)
            if layout.accounting
            else ["AccountingStorageType=accounting_storage/none"]
        ),
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none",
        "ReturnToService=2",
        "MinJobAge=300",
        "KillWait=2",
        "InactiveLimit=0",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=30",
        # Clients give up after ~5 s when slurmctld is down (default 10 s).
        "MessageTimeout=5",
        f"NodeName={node} NodeAddr={node_addr} {node_spec}{gres} State=UNKNOWN",
    ]
    nodes = node
    if layout.maintenance_node:
        spare = layout.maintenance_node
        # no slurmd ever runs for it (port 1: slurmctld's pings are refused at once):
        # drained from the start, as a node under maintenance
        lines.append(
            f"NodeName={spare} NodeAddr={node_addr} Port=1 {node_spec} "
            'State=DRAIN Reason="maintenance"'
        )
        nodes = f"{node},{spare}"
    lines += [
        f"PartitionName=debug Nodes={nodes} Default=YES MaxTime=INFINITE State=UP",
        f"PartitionName=gpu Nodes={nodes} MaxTime=INFINITE State=UP",
    ]
    if jwt_plugin_available():
        # Lets `scontrol token` mint JWTs for slurmrestd's rest_auth/jwt.
        at = next(i for i, line in enumerate(lines) if line.startswith("AuthInfo=")) + 1
        lines[at:at] = [
            "AuthAltTypes=auth/jwt",
            f"AuthAltParameters=jwt_key={layout.jwt_key}",
        ]
    keys = {extra.split("=", 1)[0] for extra in layout.slurm_conf_extra}
    lines = [line for line in lines if line.split("=", 1)[0] not in keys]
    return lines + list(layout.slurm_conf_extra)


def write_slurm_configs(layout: SandboxLayout) -> None:
    """``slurm.conf`` and ``gres.conf`` (the fake GPUs)."""
    layout.slurm_conf.write_text("\n".join(slurm_conf_lines(layout)) + "\n")
    gres_lines = ["# Fake GPUs: character devices with /dev/null's numbers."]
    if layout.gpus:
        files = layout.directory / "fakedev" / f"nvidia[0-{layout.gpus - 1}]"
        gres_lines.append(f"NodeName={layout.node_name} Name=gpu File={files}")
    layout.gres_conf.write_text("\n".join(gres_lines) + "\n")


# --------------------------------------------------------------------------- daemons


def start_munge(layout: SandboxLayout, procs: ProcessTable, mungekey: str, munged: str) -> None:
    """Create the munge key once, then start munged on the sandbox's own socket."""
    key = layout.munge_dir / "munge.key"
    if not key.exists():
        run_checked([mungekey, "--create", f"--keyfile={key}", "--bits=1024"], env=layout.env)
    os.chmod(key, 0o600)
    with contextlib.suppress(FileNotFoundError):
        layout.munge_socket.unlink()
    pid_file = layout.munge_dir / "munged.pid"
    log = layout.log_dir / "munged.log"
    argv = [
        munged,
        f"--key-file={key}",
        f"--socket={layout.munge_socket}",
        f"--pid-file={pid_file}",
        f"--log-file={log}",
        f"--seed-file={layout.munge_dir / 'munged.seed'}",
        "--force",
    ]
    procs.start_daemon("munged", argv, pid_file, log)
    if not wait_for(layout.munge_socket.exists, 10.0):
        raise SandboxError(f"munged created no socket {layout.munge_socket}:\n{tail(log)}")


def start_slurm_daemon(
    layout: SandboxLayout, procs: ProcessTable, name: str, argv: Sequence[str]
) -> None:
    """Start slurmctld or slurmd (``argv``: binary and options) on the sandbox's slurm.conf."""
    procs.start_daemon(
        name,
        [argv[0], "-f", str(layout.slurm_conf), *argv[1:]],
        layout.directory / "run" / f"{name}.pid",
        layout.log_dir / f"{name}.log",
    )


def start_backup_controller(layout: SandboxLayout, procs: ProcessTable) -> None:
    """Start the backup slurmctld in its namespaces (:mod:`.netns`), with its own pid file
    and log, and wait until ``scontrol ping`` sees it up."""
    net = layout.controller_net
    if net is None:
        raise SandboxError("backup controller: the sandbox was not started with one")
    run = layout.directory / "run"
    log = layout.log_dir / f"{BACKUP_CONTROLLER}.log"
    argv = [find_binary("slurmctld"), "-f", str(layout.slurm_conf), "-L", str(log)]
    wrapped = netns.wrap(net, backup_hostname(), (run.with_name("run-backup"), run), argv)
    procs.start_daemon(BACKUP_CONTROLLER, wrapped, backup_pid_file(layout), log)

    def backup_up() -> bool:
        found = controllers(layout)
        return len(found) > 1 and found[1].up

    if not wait_for(backup_up, 30.0, 0.5):
        raise SandboxError(
            f"the backup slurmctld does not answer `scontrol ping` after 30s:\n{tail(log)}"
        )


def backup_pid_file(layout: SandboxLayout) -> Path:
    return layout.directory / "run-backup" / "slurmctld.pid"


def controllers(layout: SandboxLayout) -> tuple[Controller, ...]:
    """Every slurmctld as ``scontrol ping`` sees it (the exporter's parser): hostname,
    role (primary, backup) and whether it answers; () when scontrol cannot run. (It
    exits 1 when a controller is down, yet lists them all.)"""
    try:
        done = run_capture([find_binary("scontrol"), "ping"], env=layout.env, timeout=30)
    except (SandboxError, subprocess.TimeoutExpired):
        return ()
    return parse_ping(done.stdout)[0]


def read_node(layout: SandboxLayout, reader: CliBackend | None = None) -> Node | None:
    """The sandbox's node as the shared Slurm reader sees it (the exporter's sinfo columns
    and parser); None when sinfo does not answer or does not list it."""
    if reader is None:
        reader = CliBackend(paths={"sinfo": find_binary("sinfo")}, env=layout.env, timeout=10.0)
    try:
        nodes = reader.nodes([layout.node_name])
    except SlurmUnavailable:
        return None
    return next((node for node in nodes if node.name == layout.node_name), None)


def needs_resume(node: Node) -> bool:
    """Whether slurmctld holds the node out of service (drained, down, or its registration
    refused), which ``scontrol update state=resume`` undoes."""
    return node.state == "down" or not {"drain", "invalid_reg", "invalid"}.isdisjoint(node.flags)


def wait_node_usable(layout: SandboxLayout, procs: ProcessTable, timeout: float) -> None:
    """Wait until the node can run jobs, resuming it once if it came up drained or down."""
    deadline = time.monotonic() + timeout
    resumed = False
    node: Node | None = None
    reader = CliBackend(paths={"sinfo": find_binary("sinfo")}, env=layout.env, timeout=10.0)
    while time.monotonic() < deadline:
        for name in ("slurmctld", "slurmd"):
            record = procs.get(name)
            if record is not None and not is_running(record):
                raise SandboxError(
                    f"{name} died during start-up; last lines of {record.log}:\n"
                    f"{tail(Path(record.log))}"
                )
        node = read_node(layout, reader)
        if node is not None:
            if not node.unavailable:
                return
            responding = "not_responding" not in node.flags
            if needs_resume(node) and responding and not resumed:
                resumed = True
                resume = [
                    find_binary("scontrol"),
                    "update",
                    f"nodename={layout.node_name}",
                    "state=resume",
                ]
                with contextlib.suppress(SandboxError):
                    run_checked(resume, env=layout.env)
        time.sleep(0.1)
    state = f"{node.full_state} ({node.reason or 'no reason'})" if node else "no answer"
    raise SandboxError(
        f"node {layout.node_name} not usable after {timeout:.0f}s "
        f"(sinfo state: {state}); "
        f"slurmctld log:\n{tail(layout.log_dir / 'slurmctld.log')}\n"
        f"slurmd log:\n{tail(layout.log_dir / 'slurmd.log')}"
    )


def cancel_jobs_quietly(layout: SandboxLayout, timeout: float = 5.0) -> None:
    """Cancel every job and wait briefly for them to end; errors are ignored."""
    env = layout.env
    with contextlib.suppress(SandboxError):
        squeue = find_binary("squeue")
        listing = [squeue, "-h", "-o", "%A", "-t", "PENDING,RUNNING,COMPLETING,SUSPENDED"]

        def no_jobs() -> bool:
            return not run_checked(listing, env=env, timeout=timeout).strip()

        if no_jobs():
            return
        run_checked([find_binary("scancel"), "--user", "root"], env=env, timeout=timeout)
        wait_for(no_jobs, timeout, 0.2)


def daemon_pid_files(layout: SandboxLayout) -> dict[str, Path]:
    """The pid file of each self-daemonizing process, by name."""
    run = layout.directory / "run"
    return {
        "munged": layout.munge_dir / "munged.pid",
        "slurmctld": run / "slurmctld.pid",
        "slurmd": run / "slurmd.pid",
        BACKUP_CONTROLLER: backup_pid_file(layout),
    }


def unrecorded_daemons(layout: SandboxLayout, recorded: set[int]) -> list[ProcessRecord]:
    """Live daemons of this sandbox that ``state.json`` lacks: ``up`` was killed after a
    daemon started and before its pid file was read. Found by their pid files, and only
    if their command line names this sandbox's directory (never someone else's process)."""
    found: list[ProcessRecord] = []
    for name, pid_file in daemon_pid_files(layout).items():
        try:
            pid = int(pid_file.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        start = process_start_time(pid)
        if pid in recorded or start is None or str(layout.directory).encode() not in cmdline:
            continue
        found.append(ProcessRecord(name, pid, [], start, log=str(pid_file)))
    return found


def stepd_marker(layout: SandboxLayout) -> str:
    """The environment entry that tells this sandbox's slurmstepd processes from others'."""
    return f"SLURM_CONF={layout.slurm_conf}"


def kill_stray_stepds(layout: SandboxLayout) -> int:
    """SIGKILL slurmstepd processes of *this* sandbox (their environment names our
    slurm.conf) that outlived slurmd; they ignore SIGTERM. Returns how many."""
    killed = 0
    for pid in pids_with_environ("slurmstepd", stepd_marker(layout)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            killed += 1
    return killed


# --------------------------------------------------------------------------- slurmrestd


def token(layout: SandboxLayout, username: str = "root", lifespan: int = 3600) -> str:
    """A JWT from ``scontrol token`` for ``username``."""
    argv = [find_binary("scontrol"), "token", f"username={username}", f"lifespan={lifespan}"]
    out = run_checked(argv, env=layout.env)
    match = re.search(r"SLURM_JWT=(\S+)", out)
    if match is None:
        raise SandboxError(f"scontrol token printed no SLURM_JWT: {out.strip()!r}")
    return match.group(1)


def start_slurmrestd(
    layout: SandboxLayout,
    procs: ProcessTable,
    mode: Literal["unix", "jwt"],
    port: int | None = None,
    timeout: float = 30.0,
) -> tuple[str, str | None]:
    """Start slurmrestd in the background; return ``(url, token)``.

    ``unix``: ``rest_auth/local`` on ``<dir>/slurmrestd.sock``, url ``unix:<path>``,
    no token. ``jwt``: ``rest_auth/jwt`` on ``127.0.0.1:<port>`` (a free port when
    ``None``), url ``http://127.0.0.1:<port>`` and a token for root valid one hour.
    """
    if mode not in ("unix", "jwt"):
        raise ValueError(f"mode must be 'unix' or 'jwt', not {mode!r}")
    name = f"slurmrestd-{mode}"
    procs.stop_named(name, timeout=10.0)
    restd = find_binary("slurmrestd")
    env = layout.env
    env["SLURMRESTD_SECURITY"] = "disable_user_check"
    argv = [restd, "-f", str(layout.slurm_conf), "-s", f"openapi/{RESTD_OPENAPI}"]
    jwt: str | None = None
    headers: dict[str, str] = {}
    if mode == "unix":
        sock_path = layout.slurmrestd_socket
        if len(str(sock_path)) > MAX_SOCKET_PATH:
            raise SandboxError(f"socket path too long for a unix socket: {sock_path}")
        with contextlib.suppress(FileNotFoundError):
            sock_path.unlink()
        argv += ["-a", "rest_auth/local", f"unix:{sock_path}"]
        url = f"unix:{sock_path}"
        ping = f"unix:{sock_path}|/slurm/{RESTD_OPENAPI}/ping"
    else:
        if "AuthAltTypes=auth/jwt" not in layout.slurm_conf.read_text():
            raise SandboxError(
                "Slurm's auth/jwt plugin was missing when the sandbox started "
                f"(package slurm-wlm-jwt-plugin): {INSTALL_HINT}, then restart the sandbox"
            )
        port = port if port is not None else free_ports(1)[0]
        if port_in_use(port):
            raise SandboxError(f"port {port} for slurmrestd is already in use")
        env["SLURM_JWT"] = "daemon"
        argv += ["-a", "rest_auth/jwt", f"127.0.0.1:{port}"]
        url = local_url(port)
        ping = f"{url}/slurm/{RESTD_OPENAPI}/ping"
        jwt = token(layout)
        headers = {"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": jwt}
    procs.start_service(
        name, argv, ping, timeout=timeout, env=env, headers=headers, extra={"url": url}
    )
    return url, jwt
