"""A local single-node site: munge, Slurm, the Gotthard exporter and Prometheus.

``gotthard sandbox up`` builds everything under one directory (``.sandbox`` by default):

* ``munge/``: a private munge key, socket, pid, log and seed file (mode 0700);
* ``slurm.conf`` / ``gres.conf``: one node with the machine's real CPUs and memory and
  ``gpus`` fake GPUs (character devices with the major/minor numbers of ``/dev/null``);
* ``spool/``, ``run/``, ``logs/``: Slurm state, pid files and every daemon's log;
* ``gotthard.toml``, ``prometheus.yml``, ``prometheus/``: the exporter and Prometheus;
* ``env.sh``: ``source`` it to point ``sinfo``/``squeue``/``gotthard`` at the sandbox;
* ``state.json``: every process started, with its pid and kernel start time, so that
  ``down`` stops exactly those processes and never a recycled pid.

All ports are parameters, so a test session can run its own sandbox next to a developer's.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import hashlib
import http.client
import json
import os
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from gotthard.exporters.slurm.rest import UnixHTTPConnection

__all__ = [
    "ProcessRecord",
    "Sandbox",
    "SandboxError",
    "add_cli",
    "find_binary",
    "free_ports",
    "process_start_time",
]

#: Directories searched after ``PATH``: munged, slurmctld and slurmd live in sbin.
EXTRA_BIN_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")
#: Hint printed when a system binary is missing.
INSTALL_HINT = "run scripts/install-system-deps"
#: OpenAPI plugin served by slurmrestd on Slurm 22.05 (the dbv plugin needs slurmdbd).
RESTD_OPENAPI = "v0.0.38"
#: Node states in which the single node can run jobs.
USABLE_NODE_STATES = ("idle", "mixed", "allocated", "completing")
#: Longest path accepted for a unix socket (sun_path is 108 bytes including the NUL).
MAX_SOCKET_PATH = 107
#: slurmstepd listens on ``<SlurmdSpoolDir>/<node>_<jobid>.<stepid>``; room for job ids up
#: to 7 digits and the 10-digit batch/extern step ids.
STEPD_SOCKET_SUFFIX = "_1234567.4294967291"


class SandboxError(Exception):
    """The sandbox cannot be started, stopped or used; the message says why."""


@dataclass
class ProcessRecord:
    """One process started by the sandbox, as stored in ``state.json``."""

    name: str
    pid: int
    argv: list[str]
    start_time: int
    log: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProcessRecord:
        return cls(
            name=str(data["name"]),
            pid=int(data["pid"]),
            argv=[str(arg) for arg in data.get("argv", [])],
            start_time=int(data["start_time"]),
            log=str(data.get("log", "")),
            extra={str(k): str(v) for k, v in dict(data.get("extra", {})).items()},
        )


# --------------------------------------------------------------------------- helpers


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct TCP ports that were free on 127.0.0.1 a moment ago."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


def _search_path() -> list[str]:
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    dirs.extend(d for d in EXTRA_BIN_DIRS if d not in dirs)
    return dirs


def find_binary(name: str) -> str:
    """Absolute path of ``name`` on ``PATH`` or in sbin; :class:`SandboxError` if absent."""
    found = shutil.which(name, path=os.pathsep.join(_search_path()))
    if found is None:
        raise SandboxError(f"{name} not found: {INSTALL_HINT}")
    return found


def process_start_time(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (``/proc/PID/stat`` field 22).

    ``None`` when the process does not exist or is a zombie.
    """
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) is in parentheses and may contain spaces or ')'.
    fields = raw[raw.rfind(")") + 2 :].split()
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _reap(pid: int) -> None:
    """Collect ``pid`` if it is an exited child of this process."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _is_running(record: ProcessRecord) -> bool:
    _reap(record.pid)
    return process_start_time(record.pid) == record.start_time


def _tail(path: Path, lines: int = 15) -> str:
    try:
        content = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    if not content:
        return f"(empty log {path})"
    return "\n".join(f"    {line}" for line in content[-lines:])


def _wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def _jwt_plugin_available() -> bool:
    """Whether Slurm's ``auth/jwt`` plugin is installed (Debian: slurm-wlm-jwt-plugin)."""
    patterns = (
        "/usr/lib/*/slurm-wlm/auth_jwt.so",
        "/usr/lib/slurm-wlm/auth_jwt.so",
        "/usr/lib*/slurm/auth_jwt.so",
        "/usr/local/lib*/slurm/auth_jwt.so",
    )
    return any(glob.glob(pattern) for pattern in patterns)


def _short_hostname() -> str:
    return socket.gethostname().split(".", 1)[0] or "localhost"


def _meminfo_mb() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return 4096


def _write_private(path: Path, content: str | bytes, mode: int = 0o600) -> None:
    data = content.encode() if isinstance(content, str) else content
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(path, mode)


def _http_status(url: str, headers: Mapping[str, str] | None = None, timeout: float = 3.0) -> int:
    """Status code of ``GET url`` (``unix:/path`` + ``path`` supported), 0 on connection error."""
    try:
        if url.startswith("unix:"):
            sock_path, _, path = url[len("unix:") :].partition("|")
            conn = UnixHTTPConnection(sock_path, timeout=timeout)
            try:
                conn.request("GET", path or "/", headers=dict(headers or {}))
                return conn.getresponse().status
            finally:
                conn.close()
        request = urllib.request.Request(url, headers=dict(headers or {}))
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return int(exc.code)
    except (OSError, http.client.HTTPException):
        return 0


def _slurmd_topology() -> dict[str, str]:
    """CPU topology as slurmd sees it (``slurmd -C``), so the node never comes up INVAL."""
    try:
        slurmd = find_binary("slurmd")
    except SandboxError:
        return {}
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    try:
        out = subprocess.run(
            [slurmd, "-C"],
            capture_output=True,
            text=True,
            timeout=30,
            env=env,
            check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
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


# --------------------------------------------------------------------------- the sandbox


class Sandbox:
    """A single-node Slurm site (plus exporter and Prometheus) under ``directory``."""

    def __init__(
        self,
        directory: Path,
        *,
        slurmctld_port: int = 6817,
        slurmd_port: int = 6818,
        exporter_port: int = 9877,
        prometheus_port: int = 9090,
        alertmanager_port: int = 9093,
        runbooks_port: int = 9878,
        node_name: str = "gotthard-node",
        gpus: int = 2,
        exporter_poll_interval: float = 5.0,
    ) -> None:
        if gpus < 0:
            raise ValueError("gpus must be >= 0")
        self.directory = Path(directory).absolute()
        self.slurmctld_port = slurmctld_port
        self.slurmd_port = slurmd_port
        self.exporter_port = exporter_port
        self.prometheus_port = prometheus_port
        self.alertmanager_port = alertmanager_port
        self.runbooks_port = runbooks_port
        self.node_name = node_name
        self.gpus = gpus
        self.exporter_poll_interval = exporter_poll_interval
        #: Popen handles of children started by this object (reaped in :meth:`down`).
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    @classmethod
    def with_free_ports(
        cls,
        directory: Path,
        *,
        node_name: str = "gotthard-node",
        gpus: int = 2,
        exporter_poll_interval: float = 5.0,
    ) -> Sandbox:
        """A sandbox whose six ports are free right now (for tests next to a developer's)."""
        ctld, slurmd, exporter, prometheus, alertmanager, runbooks = free_ports(6)
        return cls(
            directory,
            slurmctld_port=ctld,
            slurmd_port=slurmd,
            exporter_port=exporter,
            prometheus_port=prometheus,
            alertmanager_port=alertmanager,
            runbooks_port=runbooks,
            node_name=node_name,
            gpus=gpus,
            exporter_poll_interval=exporter_poll_interval,
        )

    # ----------------------------------------------------------------- paths

    @property
    def slurm_conf(self) -> Path:
        return self.directory / "slurm.conf"

    @property
    def gres_conf(self) -> Path:
        return self.directory / "gres.conf"

    @property
    def gotthard_config(self) -> Path:
        return self.directory / "gotthard.toml"

    @property
    def state_file(self) -> Path:
        return self.directory / "state.json"

    @property
    def log_dir(self) -> Path:
        return self.directory / "logs"

    @property
    def munge_dir(self) -> Path:
        return self.directory / "munge"

    @property
    def socket_dir(self) -> Path:
        """Where unix sockets live: munged's, slurmrestd's and slurmstepd's (the slurmd
        spool). The sandbox directory itself when its paths fit a unix socket address
        (107 bytes), else a short private ``/tmp/gotthard-<hash>`` removed by :meth:`down`;
        pytest's ``tmp_path`` is often too long for slurmstepd's sockets."""
        longest = self.directory / "spool" / "slurmd" / f"{self.node_name}{STEPD_SOCKET_SUFFIX}"
        if len(str(longest)) <= MAX_SOCKET_PATH:
            return self.directory
        digest = hashlib.sha256(str(self.directory).encode()).hexdigest()[:12]
        return Path("/tmp") / f"gotthard-{digest}"

    @property
    def slurmd_spool(self) -> Path:
        base = self.socket_dir
        return base / "spool" / "slurmd" if base == self.directory else base / "slurmd"

    @property
    def munge_socket(self) -> Path:
        base = self.socket_dir
        return self.munge_dir / "munge.socket" if base == self.directory else base / "munge.socket"

    @property
    def slurmrestd_socket(self) -> Path:
        return self.socket_dir / "slurmrestd.sock"

    @property
    def jwt_key(self) -> Path:
        return self.directory / "jwt_hs256.key"

    @property
    def job_dir(self) -> Path:
        """Working directory of jobs submitted with :meth:`submit` (their ``slurm-N.out``)."""
        return self.directory / "jobs"

    @property
    def exporter_url(self) -> str:
        return f"http://127.0.0.1:{self.exporter_port}"

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.prometheus_port}"

    @property
    def alertmanager_url(self) -> str:
        return f"http://127.0.0.1:{self.alertmanager_port}"

    @property
    def runbooks_url(self) -> str:
        return f"http://127.0.0.1:{self.runbooks_port}"

    @property
    def env(self) -> dict[str, str]:
        """Environment for a subprocess that talks to this sandbox (a full copy of ours)."""
        env = {k: v for k, v in os.environ.items() if k not in ("SLURM_JWT", "SLURM_CONF")}
        env["SLURM_CONF"] = str(self.slurm_conf)
        env["GOTTHARD_CONFIG"] = str(self.gotthard_config)
        env["PATH"] = os.pathsep.join(_search_path())
        return env

    # ----------------------------------------------------------------- state file

    def _load_state(self) -> list[ProcessRecord]:
        try:
            data = json.loads(self.state_file.read_text())
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            raise SandboxError(f"cannot read {self.state_file}: {exc}") from exc
        try:
            return [ProcessRecord.from_json(item) for item in data.get("processes", [])]
        except (KeyError, TypeError, ValueError) as exc:
            raise SandboxError(f"malformed {self.state_file}: {exc}") from exc

    def _save_state(self, records: Sequence[ProcessRecord]) -> None:
        payload = {
            "directory": str(self.directory),
            "ports": {
                "slurmctld": self.slurmctld_port,
                "slurmd": self.slurmd_port,
                "exporter": self.exporter_port,
                "prometheus": self.prometheus_port,
                "alertmanager": self.alertmanager_port,
                "runbooks": self.runbooks_port,
            },
            "processes": [asdict(record) for record in records],
        }
        tmp = self.state_file.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(payload, indent=2) + "\n")
        tmp.replace(self.state_file)

    def _add_record(self, record: ProcessRecord) -> None:
        records = [r for r in self._load_state() if r.name != record.name]
        records.append(record)
        self._save_state(records)

    def _drop_record(self, name: str) -> None:
        records = self._load_state()
        self._save_state([r for r in records if r.name != name])

    def _record(self, name: str) -> ProcessRecord | None:
        return next((r for r in self._load_state() if r.name == name), None)

    # ----------------------------------------------------------------- public API

    def status(self) -> dict[str, bool]:
        """Process name -> running, for every process in ``state.json``."""
        return {record.name: _is_running(record) for record in self._load_state()}

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
        say: Callable[[str], None] = print if verbose else (lambda _msg: None)
        states = self.status()
        if states and all(states.values()):
            say(f"sandbox already running in {self.directory} ({', '.join(states)})")
            return
        if states:
            say(f"sandbox in {self.directory} is partly down; restarting it")
            self.down(verbose=False)

        binaries = {
            name: find_binary(name)
            for name in (
                "mungekey",
                "munged",
                "slurmctld",
                "slurmd",
                "sinfo",
                "scontrol",
            )
        }
        if with_prometheus:
            binaries["prometheus"] = find_binary("prometheus")
            binaries["alertmanager"] = find_binary("prometheus-alertmanager")
        self._check_ports(with_exporter=with_exporter, with_prometheus=with_prometheus)

        started = time.monotonic()
        try:
            self._prepare_layout()
            self._start_munge(binaries["mungekey"], binaries["munged"])
            self._write_slurm_configs()
            self._write_gotthard_config()
            self._start_slurm_daemon("slurmctld", [binaries["slurmctld"], "-c"])
            self._start_slurm_daemon("slurmd", [binaries["slurmd"], "-c", "-N", self.node_name])
            self._wait_node_usable(timeout=30.0)
            if with_exporter:
                self._start_exporter()
            if with_prometheus:
                self._write_rules_and_dashboards()
                self._start_alertmanager(binaries["alertmanager"])
                self._start_runbooks()
                self._start_prometheus(binaries["prometheus"])
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
            say(f"  runbooks:    {self.runbooks_url}/alerts (dry-run; audit in logs/)")
            say(f"  dashboards:  {self.directory / 'dashboards'} (import into Grafana)")
        say(f"  source {self.directory / 'env.sh'}")

    def down(self, *, verbose: bool = True, timeout: float = 10.0) -> None:
        """Stop exactly the processes in ``state.json`` (reverse order) and remove it."""
        say: Callable[[str], None] = print if verbose else (lambda _msg: None)
        records = self._load_state()
        if not records:
            say(f"sandbox in {self.directory} is not running")
            with contextlib.suppress(FileNotFoundError):
                self.state_file.unlink()
            return
        ctld = next((r for r in records if r.name == "slurmctld"), None)
        if ctld is not None and _is_running(ctld):
            # Let slurmd finish the jobs' steps; otherwise slurmstepd lingers after slurmd.
            self._cancel_jobs_quietly()
        for record in reversed(records):
            stopped = self._stop(record, timeout=timeout)
            say(f"  {record.name:<16} {'stopped' if stopped else 'was not running'}")
            self._drop_record(record.name)
        stray = self._kill_stray_stepds()
        if stray:
            say(f"  {'slurmstepd':<16} killed {stray} left over")
        if self.socket_dir != self.directory:
            shutil.rmtree(self.socket_dir, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            self.state_file.unlink()

    def stop_controller(self, timeout: float = 10.0) -> None:
        """Stop only slurmctld (slurmd, munge and the rest keep running).

        Its entry stays in ``state.json``, so :meth:`status` reports it as not running
        until :meth:`start_controller`.
        """
        record = self._record("slurmctld")
        if record is None:
            raise SandboxError("slurmctld is not part of this sandbox's state")
        self._stop(record, timeout=timeout)

    def start_controller(self, timeout: float = 30.0) -> None:
        """Restart slurmctld, recovering saved state, and wait until the node answers."""
        record = self._record("slurmctld")
        if record is not None and _is_running(record):
            return
        self._start_slurm_daemon("slurmctld", [find_binary("slurmctld")])
        self._wait_node_usable(timeout=timeout)

    def start_slurmrestd(
        self,
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
        existing = self._record(name)
        if existing is not None:
            self._stop(existing, timeout=10.0)
            self._drop_record(name)
        restd = find_binary("slurmrestd")
        env = self.env
        env["SLURMRESTD_SECURITY"] = "disable_user_check"
        argv = [restd, "-f", str(self.slurm_conf), "-s", f"openapi/{RESTD_OPENAPI}"]
        token: str | None = None
        headers: dict[str, str] = {}
        if mode == "unix":
            sock_path = self.slurmrestd_socket
            if len(str(sock_path)) > MAX_SOCKET_PATH:
                raise SandboxError(f"socket path too long for a unix socket: {sock_path}")
            with contextlib.suppress(FileNotFoundError):
                sock_path.unlink()
            argv += ["-a", "rest_auth/local", f"unix:{sock_path}"]
            url = f"unix:{sock_path}"
            ping = f"unix:{sock_path}|/slurm/{RESTD_OPENAPI}/ping"
        else:
            if "AuthAltTypes=auth/jwt" not in self.slurm_conf.read_text():
                raise SandboxError(
                    "Slurm's auth/jwt plugin was missing when the sandbox started "
                    f"(package slurm-wlm-jwt-plugin): {INSTALL_HINT}, then restart the sandbox"
                )
            port = port if port is not None else free_ports(1)[0]
            if _port_in_use(port):
                raise SandboxError(f"port {port} for slurmrestd is already in use")
            env["SLURM_JWT"] = "daemon"
            argv += ["-a", "rest_auth/jwt", f"127.0.0.1:{port}"]
            url = f"http://127.0.0.1:{port}"
            ping = f"{url}/slurm/{RESTD_OPENAPI}/ping"
            token = self.token()
            headers = {"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": token}
        record = self._spawn(name, argv, env=env, extra={"url": url})
        self._wait_http(record, ping, timeout=timeout, headers=headers)
        return url, token

    def stop_slurmrestd(self, mode: Literal["unix", "jwt"], timeout: float = 10.0) -> bool:
        """Stop the slurmrestd started by :meth:`start_slurmrestd`; True if it was running."""
        name = f"slurmrestd-{mode}"
        record = self._record(name)
        if record is None:
            return False
        stopped = self._stop(record, timeout=timeout)
        self._drop_record(name)
        return stopped

    def token(self, username: str = "root", lifespan: int = 3600) -> str:
        """A JWT from ``scontrol token`` for ``username``."""
        out = self._run(
            [
                find_binary("scontrol"),
                "token",
                f"username={username}",
                f"lifespan={lifespan}",
            ]
        )
        match = re.search(r"SLURM_JWT=(\S+)", out)
        if match is None:
            raise SandboxError(f"scontrol token printed no SLURM_JWT: {out.strip()!r}")
        return match.group(1)

    def submit(self, *args: str) -> str:
        """``sbatch --parsable ARGS`` in the sandbox; returns the job id."""
        self.job_dir.mkdir(parents=True, exist_ok=True)
        out = self._run([find_binary("sbatch"), "--parsable", *args], cwd=self.job_dir)
        job_id = out.strip().split(";", 1)[0]
        if not job_id.isdigit():
            raise SandboxError(f"sbatch printed no job id: {out.strip()!r}")
        return job_id

    def cancel_all(self, timeout: float = 30.0) -> None:
        """Cancel every job and wait until none is pending, running or completing."""
        self._run([find_binary("scancel"), "--user", "root"])
        squeue = find_binary("squeue")

        def no_jobs() -> bool:
            out = self._run(
                [
                    squeue,
                    "-h",
                    "-o",
                    "%A",
                    "-t",
                    "PENDING,RUNNING,COMPLETING,CONFIGURING,SUSPENDED",
                ]
            )
            return not out.strip()

        if not _wait_for(no_jobs, timeout, interval=0.25):
            raise SandboxError(f"jobs still active {timeout:.0f}s after scancel")

    def run_command(
        self, argv: Sequence[str], timeout: float = 30.0, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` with the sandbox environment and capture its output."""
        result = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise SandboxError(
                f"{' '.join(argv)} exited {result.returncode}: {result.stderr.strip()}"
            )
        return result

    # ----------------------------------------------------------------- internals

    def _run(self, argv: Sequence[str], cwd: Path | None = None, timeout: float = 30.0) -> str:
        try:
            result = subprocess.run(
                list(argv),
                capture_output=True,
                text=True,
                env=self.env,
                cwd=cwd,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise SandboxError(f"{Path(argv[0]).name} timed out after {timeout:.0f}s") from exc
        if result.returncode != 0:
            message = (result.stderr or result.stdout).strip()
            raise SandboxError(f"{Path(argv[0]).name} failed ({result.returncode}): {message}")
        return result.stdout

    def _check_ports(self, *, with_exporter: bool, with_prometheus: bool) -> None:
        ports = {"slurmctld": self.slurmctld_port, "slurmd": self.slurmd_port}
        if with_exporter:
            ports["exporter"] = self.exporter_port
        if with_prometheus:
            ports["prometheus"] = self.prometheus_port
            ports["alertmanager"] = self.alertmanager_port
            ports["runbooks"] = self.runbooks_port
        if len(set(ports.values())) != len(ports):
            raise SandboxError(f"sandbox ports must be distinct: {ports}")
        busy = [f"{name} port {port}" for name, port in ports.items() if _port_in_use(port)]
        if busy:
            raise SandboxError(
                f"{', '.join(busy)} already in use (another sandbox or daemon running?)"
            )

    def _prepare_layout(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        for sub in ("spool/slurmctld", "run", "logs", "jobs", "fakedev"):
            (self.directory / sub).mkdir(parents=True, exist_ok=True)
        if self.socket_dir != self.directory:
            self.socket_dir.mkdir(mode=0o711, exist_ok=True)
            if self.socket_dir.stat().st_uid != os.geteuid():
                raise SandboxError(f"{self.socket_dir} exists and belongs to someone else")
            os.chmod(self.socket_dir, 0o711)
        self.slurmd_spool.mkdir(parents=True, exist_ok=True)
        # munged insists that nobody else may write its directory; execute for all lets
        # non-root clients reach the socket (the key itself stays 0600).
        self.munge_dir.mkdir(exist_ok=True)
        os.chmod(self.munge_dir, 0o711)
        os.chmod(self.directory / "spool", 0o700)
        if len(str(self.munge_socket)) > MAX_SOCKET_PATH:
            raise SandboxError(f"directory path too long for a unix socket: {self.munge_socket}")
        fakedev = self.directory / "fakedev"
        for old in fakedev.iterdir():
            old.unlink()
        for index in range(self.gpus):
            device = fakedev / f"nvidia{index}"
            try:
                os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
            except PermissionError as exc:
                raise SandboxError(
                    f"cannot create fake GPU device {device} (mknod needs root): {exc}"
                ) from exc
            os.chmod(device, 0o666)
        if not self.jwt_key.exists():
            _write_private(self.jwt_key, secrets.token_bytes(32))

    def _start_munge(self, mungekey: str, munged: str) -> None:
        key = self.munge_dir / "munge.key"
        if not key.exists():
            self._run([mungekey, "--create", f"--keyfile={key}", "--bits=1024"])
        os.chmod(key, 0o600)
        with contextlib.suppress(FileNotFoundError):
            self.munge_socket.unlink()
        pid_file = self.munge_dir / "munged.pid"
        log = self.log_dir / "munged.log"
        argv = [
            munged,
            f"--key-file={key}",
            f"--socket={self.munge_socket}",
            f"--pid-file={pid_file}",
            f"--log-file={log}",
            f"--seed-file={self.munge_dir / 'munged.seed'}",
            "--force",
        ]
        self._start_daemon("munged", argv, pid_file, log)
        if not _wait_for(self.munge_socket.exists, 10.0):
            raise SandboxError(f"munged created no socket {self.munge_socket}:\n{_tail(log)}")

    def _node_resources(self) -> dict[str, str]:
        topo = _slurmd_topology()
        cpus = int(topo.get("CPUs", os.cpu_count() or 1))
        mem_mb = min(int(topo.get("RealMemory", 10**9)), _meminfo_mb())
        real_mb = max(256, mem_mb - max(256, mem_mb // 20))
        resources = {"CPUs": str(cpus)}
        for key in ("Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore"):
            if key in topo:
                resources[key] = topo[key]
        resources["RealMemory"] = str(real_mb)
        return resources

    def _write_slurm_configs(self) -> None:
        d = self.directory
        res = self._node_resources()
        cpus = int(res["CPUs"])
        def_mem = max(100, min(1024, int(res["RealMemory"]) // max(cpus, 1)))
        node_spec = " ".join(f"{k}={v}" for k, v in res.items())
        gres = f" Gres=gpu:{self.gpus}" if self.gpus else ""
        lines = [
            "# Written by gotthard sandbox; regenerated on every `up`.",
            "ClusterName=gotthard-sandbox",
            # slurmctld refuses to run unless SlurmctldHost is this machine's hostname.
            f"SlurmctldHost={_short_hostname()}(127.0.0.1)",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"SlurmctldPort={self.slurmctld_port}",
            f"SlurmdPort={self.slurmd_port}",
            f"StateSaveLocation={d / 'spool/slurmctld'}",
            f"SlurmdSpoolDir={self.slurmd_spool}",
            f"SlurmctldPidFile={d / 'run/slurmctld.pid'}",
            f"SlurmdPidFile={d / 'run/slurmd.pid'}",
            f"SlurmctldLogFile={self.log_dir / 'slurmctld.log'}",
            f"SlurmdLogFile={self.log_dir / 'slurmd.log'}",
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
            "AccountingStorageType=accounting_storage/none",
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
            f"NodeName={self.node_name} NodeAddr=127.0.0.1 {node_spec}{gres} State=UNKNOWN",
            f"PartitionName=debug Nodes={self.node_name} Default=YES MaxTime=INFINITE State=UP",
            f"PartitionName=gpu Nodes={self.node_name} MaxTime=INFINITE State=UP",
        ]
        if _jwt_plugin_available():
            # Lets `scontrol token` mint JWTs for slurmrestd's rest_auth/jwt.
            at = next(i for i, line in enumerate(lines) if line.startswith("AuthInfo=")) + 1
            lines[at:at] = [
                "AuthAltTypes=auth/jwt",
                f"AuthAltParameters=jwt_key={self.jwt_key}",
            ]
        self.slurm_conf.write_text("\n".join(lines) + "\n")
        gres_lines = ["# Fake GPUs: character devices with /dev/null's numbers."]
        if self.gpus:
            files = d / "fakedev" / f"nvidia[0-{self.gpus - 1}]"
            gres_lines.append(f"NodeName={self.node_name} Name=gpu File={files}")
        self.gres_conf.write_text("\n".join(gres_lines) + "\n")

    def _write_gotthard_config(self) -> None:
        self.gotthard_config.write_text(
            "\n".join(
                [
                    'site = "local"',
                    'cluster = "sandbox"',
                    "",
                    "[exporter]",
                    f'listen = "127.0.0.1:{self.exporter_port}"',
                    'collectors = ["slurm"]',
                    "",
                    "[exporter.slurm]",
                    'backend = "cli"',
                    f"poll_interval_seconds = {float(self.exporter_poll_interval)}",
                    "",
                    "[runbooks]",
                    f'listen = "127.0.0.1:{self.runbooks_port}"',
                    f'token_file = "{self.directory / "webhook.token"}"',
                    'mode = "dry-run"',
                    f'audit_log = "{self.log_dir / "runbooks-audit.jsonl"}"',
                    f'kill_switch_file = "{self.directory / "runbooks.disabled"}"',
                    f'slurm_conf = "{self.slurm_conf}"',
                    'default_cluster = "sandbox"',
                    "",
                    "[runbooks.limits]",
                    "# one node: the default 10% of a partition would refuse every drain",
                    "max_partition_fraction = 1.0",
                ]
            )
            + "\n"
        )

    def _write_env_sh(self) -> None:
        (self.directory / "env.sh").write_text(
            "# source this file to use the gotthard sandbox\n"
            f"export SLURM_CONF={self.slurm_conf}\n"
            f"export GOTTHARD_CONFIG={self.gotthard_config}\n"
        )

    def _start_daemon(self, name: str, argv: list[str], pid_file: Path, log: Path) -> None:
        """Run a self-daemonizing program and record the daemon's pid from its pid file."""
        with contextlib.suppress(FileNotFoundError):
            pid_file.unlink()
        try:
            result = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                env=self.env,
                cwd=self.directory,
                timeout=30,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise SandboxError(f"{name} did not daemonize within 30s:\n{_tail(log)}") from exc
        if result.returncode != 0:
            raise SandboxError(
                f"{name} failed to start ({result.returncode}): "
                f"{(result.stderr or result.stdout).strip()}\n{_tail(log)}"
            )

        found: list[ProcessRecord] = []

        def pid_ready() -> bool:
            try:
                pid = int(pid_file.read_text().strip())
            except (OSError, ValueError):
                return False
            start = process_start_time(pid)
            if start is None:
                return False
            found.append(ProcessRecord(name, pid, argv, start, log=str(log)))
            return True

        if not _wait_for(pid_ready, 10.0):
            raise SandboxError(f"{name} wrote no live pid to {pid_file}:\n{_tail(log)}")
        self._add_record(found[-1])

    def _start_slurm_daemon(self, name: str, argv: list[str]) -> None:
        log = self.log_dir / f"{name}.log"
        self._start_daemon(
            name,
            [argv[0], "-f", str(self.slurm_conf), *argv[1:]],
            self.directory / "run" / f"{name}.pid",
            log,
        )

    def _spawn(
        self,
        name: str,
        argv: list[str],
        *,
        env: Mapping[str, str] | None = None,
        extra: Mapping[str, str] | None = None,
    ) -> ProcessRecord:
        """Start a foreground program in its own session, output to ``logs/<name>.log``."""
        log = self.log_dir / f"{name}.log"
        with open(log, "ab") as out:
            try:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=dict(env if env is not None else self.env),
                    cwd=self.directory,
                    start_new_session=True,
                )
            except OSError as exc:
                raise SandboxError(f"cannot start {name}: {exc}") from exc
        self._children[proc.pid] = proc
        start = process_start_time(proc.pid)
        if start is None:
            proc.wait()
            self._children.pop(proc.pid, None)
            raise SandboxError(f"{name} exited at once ({proc.returncode}):\n{_tail(log)}")
        record = ProcessRecord(name, proc.pid, argv, start, log=str(log), extra=dict(extra or {}))
        self._add_record(record)
        return record

    def _wait_http(
        self,
        record: ProcessRecord,
        url: str,
        *,
        timeout: float,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        log = Path(record.log)
        deadline = time.monotonic() + timeout
        last = 0
        while time.monotonic() < deadline:
            if not _is_running(record):
                raise SandboxError(
                    f"{record.name} exited during start-up; last lines of {log}:\n{_tail(log)}"
                )
            last = _http_status(url, headers=headers)
            if last == 200:
                return
            time.sleep(0.2)
        got = f"HTTP {last}" if last else "no answer"
        raise SandboxError(
            f"{record.name} not ready after {timeout:.0f}s ({url.replace('|', '')}: {got}); "
            f"last lines of {log}:\n{_tail(log)}"
        )

    def _start_exporter(self) -> None:
        # --config is an option of the top-level `gotthard` parser, not of `exporter`.
        argv = [
            sys.executable,
            "-m",
            "gotthard",
            "--config",
            str(self.gotthard_config),
            "exporter",
        ]
        record = self._spawn("exporter", argv)
        self._wait_http(record, f"{self.exporter_url}/healthz", timeout=30.0)

    def _write_rules_and_dashboards(self) -> None:
        """Recording/alerting rules and the Alertmanager config, plus the dashboard JSON."""
        from gotthard.dashboards import alertmanager, grafana, rules_cli

        token = self.directory / "webhook.token"
        if not token.exists():
            token.write_text(secrets.token_hex(16) + "\n")
            token.chmod(0o600)
        settings = alertmanager.AlertmanagerSettings(
            webhook_url=f"{self.runbooks_url}/alerts",  # the runbook webhook, in dry-run
            webhook_token_file=str(token),
            pager_urls={"local": alertmanager.default_pager_url("local")},
        )
        rules_cli.build(self.directory / "rules", settings=settings)
        grafana.write_dashboards(self.directory / "dashboards")

    def _start_alertmanager(self, binary: str) -> None:
        data = self.directory / "alertmanager"
        data.mkdir(exist_ok=True)
        argv = [
            binary,
            f"--config.file={self.directory / 'rules' / 'alertmanager.yml'}",
            f"--storage.path={data}",
            f"--web.listen-address=127.0.0.1:{self.alertmanager_port}",
            "--cluster.listen-address=",  # no gossip: a single local instance
        ]
        record = self._spawn("alertmanager", argv)
        self._wait_http(record, f"{self.alertmanager_url}/-/ready", timeout=30.0)

    def _start_runbooks(self) -> None:
        """The runbook webhook in dry-run: Alertmanager's critical/warning alerts reach it."""
        argv = [
            sys.executable,
            "-m",
            "gotthard",
            "--config",
            str(self.gotthard_config),
            "runbooks",
            "serve",
            "--mode",
            "dry-run",
        ]
        record = self._spawn("runbooks", argv)
        self._wait_http(record, f"{self.runbooks_url}/healthz", timeout=30.0)

    def _start_prometheus(self, prometheus: str) -> None:
        config = self.directory / "prometheus.yml"
        config.write_text(
            "\n".join(
                [
                    "# Written by gotthard sandbox.",
                    "global:",
                    "  scrape_interval: 5s",
                    "  evaluation_interval: 5s",
                    "rule_files:",
                    f"  - {self.directory / 'rules' / 'recording.rules.yml'}",
                    f"  - {self.directory / 'rules' / 'alerts.rules.yml'}",
                    "alerting:",
                    "  alertmanagers:",
                    "    - static_configs:",
                    f"        - targets: ['127.0.0.1:{self.alertmanager_port}']",
                    "scrape_configs:",
                    "  - job_name: gotthard",
                    "    scrape_interval: 5s",
                    "    scrape_timeout: 4s",
                    "    static_configs:",
                    f"      - targets: ['127.0.0.1:{self.exporter_port}']",
                    "        labels:",
                    "          site: local",
                    "          cluster: sandbox",
                ]
            )
            + "\n"
        )
        tsdb = self.directory / "prometheus"
        tsdb.mkdir(exist_ok=True)
        argv = [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={tsdb}",
            f"--web.listen-address=127.0.0.1:{self.prometheus_port}",
            "--storage.tsdb.retention.time=2d",
            "--web.enable-lifecycle",
        ]
        record = self._spawn("prometheus", argv)
        self._wait_http(record, f"{self.prometheus_url}/-/ready", timeout=60.0)

    def _node_states(self) -> list[str] | None:
        """States of the node per partition (``sinfo -h -o %T``), None if no answer."""
        try:
            result = subprocess.run(
                [find_binary("sinfo"), "-h", "-n", self.node_name, "-o", "%T"],
                capture_output=True,
                text=True,
                env=self.env,
                timeout=10,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return None
        if result.returncode != 0:
            return None
        return [line.strip() for line in result.stdout.splitlines() if line.strip()]

    def _wait_node_usable(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        resumed = False
        states: list[str] | None = None
        while time.monotonic() < deadline:
            for name in ("slurmctld", "slurmd"):
                record = self._record(name)
                if record is not None and not _is_running(record):
                    raise SandboxError(
                        f"{name} died during start-up; last lines of {record.log}:\n"
                        f"{_tail(Path(record.log))}"
                    )
            states = self._node_states()
            if states:
                if all(state in USABLE_NODE_STATES for state in states):
                    return
                bad = any(s.startswith(("drain", "inval", "down")) for s in states)
                responding = not any(s.endswith("*") for s in states)
                if bad and responding and not resumed:
                    resumed = True
                    with contextlib.suppress(SandboxError):
                        self._run(
                            [
                                find_binary("scontrol"),
                                "update",
                                f"nodename={self.node_name}",
                                "state=resume",
                            ]
                        )
            time.sleep(0.1)
        raise SandboxError(
            f"node {self.node_name} not usable after {timeout:.0f}s "
            f"(sinfo states: {states or 'no answer'}); "
            f"slurmctld log:\n{_tail(self.log_dir / 'slurmctld.log')}\n"
            f"slurmd log:\n{_tail(self.log_dir / 'slurmd.log')}"
        )

    def _cancel_jobs_quietly(self, timeout: float = 5.0) -> None:
        with contextlib.suppress(SandboxError, OSError, subprocess.SubprocessError):
            squeue = find_binary("squeue")
            listing = [
                squeue,
                "-h",
                "-o",
                "%A",
                "-t",
                "PENDING,RUNNING,COMPLETING,SUSPENDED",
            ]
            if not self._run(listing, timeout=timeout).strip():
                return
            self._run([find_binary("scancel"), "--user", "root"], timeout=timeout)
            _wait_for(lambda: not self._run(listing, timeout=timeout).strip(), timeout, 0.2)

    def _kill_stray_stepds(self) -> int:
        """SIGKILL slurmstepd processes of *this* sandbox (their environment names our
        slurm.conf) that outlived slurmd; they ignore SIGTERM. Returns how many."""
        marker = f"SLURM_CONF={self.slurm_conf}".encode()
        killed = 0
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if (entry / "comm").read_text().strip() != "slurmstepd":
                    continue
                environ = (entry / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if marker in environ:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(entry.name), signal.SIGKILL)
                    killed += 1
        return killed

    def _stop(self, record: ProcessRecord, timeout: float) -> bool:
        """SIGTERM, then SIGKILL after ``timeout``; True if it was running. Never kills a
        process whose start time differs from the record (a recycled pid)."""
        if not _is_running(record):
            self._forget_child(record.pid)
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(record.pid, signal.SIGTERM)
        if not _wait_for(lambda: not _is_running(record), timeout, interval=0.05):
            if _is_running(record):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(record.pid, signal.SIGKILL)
            _wait_for(lambda: not _is_running(record), 5.0, interval=0.05)
        self._forget_child(record.pid)
        return True

    def _forget_child(self, pid: int) -> None:
        proc = self._children.pop(pid, None)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1.0)


# --------------------------------------------------------------------------- CLI


def add_cli(subparsers: Any) -> None:
    """Register ``sandbox up|down|status`` on an argparse ``add_subparsers()`` object.

    Each leaf parser sets ``func``: call ``args.func(args)`` to get the exit code.
    """
    parser = subparsers.add_parser(
        "sandbox",
        help="local single-node Slurm site with exporter and Prometheus",
        description="A local single-node Slurm site (munge, slurmctld, slurmd, exporter, "
        "Prometheus) for development and tests.",
    )
    commands = parser.add_subparsers(dest="sandbox_command", metavar="{up,down,status}")
    commands.required = True

    def with_dir(sub: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sub.add_argument(
            "--dir",
            type=Path,
            default=Path(".sandbox"),
            help="sandbox directory (default: .sandbox)",
        )
        return sub

    up = with_dir(commands.add_parser("up", help="start the sandbox"))
    up.add_argument("--no-prometheus", action="store_true", help="do not start Prometheus")
    up.add_argument("--no-exporter", action="store_true", help="do not start the Gotthard exporter")
    up.set_defaults(func=_cmd_up)
    down = with_dir(commands.add_parser("down", help="stop what `up` started"))
    down.set_defaults(func=_cmd_down)
    status = with_dir(commands.add_parser("status", help="show which processes run"))
    status.set_defaults(func=_cmd_status)


def _guarded(action: Callable[[], int]) -> int:
    try:
        return action()
    except SandboxError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _cmd_up(args: argparse.Namespace) -> int:
    sandbox = Sandbox(args.dir)

    def run() -> int:
        sandbox.up(with_exporter=not args.no_exporter, with_prometheus=not args.no_prometheus)
        return 0

    return _guarded(run)


def _cmd_down(args: argparse.Namespace) -> int:
    sandbox = Sandbox(args.dir)

    def run() -> int:
        sandbox.down()
        return 0

    return _guarded(run)


def format_status(states: Mapping[str, bool]) -> str:
    rows = [f"{'PROCESS':<16} STATE"]
    rows.extend(f"{name:<16} {'running' if ok else 'stopped'}" for name, ok in states.items())
    return "\n".join(rows)


def _cmd_status(args: argparse.Namespace) -> int:
    sandbox = Sandbox(args.dir)

    def run() -> int:
        states = sandbox.status()
        if not states:
            print(f"sandbox in {sandbox.directory} is not running")
            return 3
        print(format_status(states))
        return 0 if all(states.values()) else 3

    return _guarded(run)
