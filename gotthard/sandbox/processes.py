"""Generic process management: start, record, check and stop the sandbox's processes.

Every process is recorded with its pid and kernel start time (``/proc/PID/stat``), so a
stop never signals a recycled pid. Nothing here knows about Slurm or Prometheus.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gotthard import command
from gotthard.slurm.rest import UnixHTTPConnection

#: Directories searched after ``PATH``: munged, slurmctld and slurmd live in sbin.
EXTRA_BIN_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")
#: Hint printed when a system binary is missing.
INSTALL_HINT = "run scripts/install-system-deps"


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


# --------------------------------------------------------------------------- ports, binaries


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


def port_in_use(port: int) -> bool:
    """Whether binding ``port`` on all interfaces fails right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


def search_path() -> list[str]:
    """``PATH`` followed by the sbin directories it lacks."""
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    dirs.extend(d for d in EXTRA_BIN_DIRS if d not in dirs)
    return dirs


def find_binary(name: str) -> str:
    """Absolute path of ``name`` on ``PATH`` or in sbin; :class:`SandboxError` if absent."""
    found = shutil.which(name, path=os.pathsep.join(search_path()))
    if found is None:
        raise SandboxError(f"{name} not found: {INSTALL_HINT}")
    return found


# --------------------------------------------------------------------------- /proc


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


def pids_with_environ(comm: str | None, entry: str) -> list[int]:
    """Pids of processes named ``comm`` (None: any) whose environment holds ``entry``
    (``KEY=value``).

    Zombies are included; processes whose ``/proc`` files cannot be read are skipped.
    """
    marker = entry.encode()
    pids: list[int] = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if comm is not None and (proc / "comm").read_text().strip() != comm:
                continue
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker in environ:
            pids.append(int(proc.name))
    return pids


def _reap(pid: int) -> None:
    """Collect ``pid`` if it is an exited child of this process."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def is_running(record: ProcessRecord) -> bool:
    """Whether the recorded process still runs (same pid *and* same start time)."""
    _reap(record.pid)
    return process_start_time(record.pid) == record.start_time


# --------------------------------------------------------------------------- small helpers


def tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a log, indented, for error messages."""
    try:
        content = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    if not content:
        return f"(empty log {path})"
    return "\n".join(f"    {line}" for line in content[-lines:])


def wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    """Poll ``predicate`` until it is true (True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def write_private(path: Path, content: str | bytes, mode: int = 0o600) -> None:
    """Write ``path`` so that it never exists with a wider mode than ``mode``."""
    data = content.encode() if isinstance(content, str) else content
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(path, mode)


def http_status(url: str, headers: Mapping[str, str] | None = None, timeout: float = 3.0) -> int:
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


def run_capture(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    timeout: float,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` to completion (through :mod:`gotthard.command`) with its output captured
    as text; never raises on exit status. Past *timeout* it is killed and
    :class:`subprocess.TimeoutExpired` raised; :class:`SandboxError` if it cannot run."""
    try:
        done = command.run(argv, env=env, cwd=cwd, timeout=timeout, check=False)
    except command.CommandError as err:
        if err.timed_out:
            raise subprocess.TimeoutExpired(list(argv), timeout, err.stdout, err.stderr) from None
        raise SandboxError(str(err)) from None
    return subprocess.CompletedProcess(list(argv), done.returncode, done.stdout, done.stderr)


def run_checked(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path | None = None,
    timeout: float = 30.0,
) -> str:
    """Standard output of ``argv``; :class:`SandboxError` on timeout or a non-zero exit."""
    try:
        result = run_capture(argv, env=env, cwd=cwd, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise SandboxError(f"{Path(argv[0]).name} timed out after {timeout:.0f}s") from exc
    if result.returncode != 0:
        message = (result.stderr or result.stdout).strip()
        raise SandboxError(f"{Path(argv[0]).name} failed ({result.returncode}): {message}")
    return result.stdout


# --------------------------------------------------------------------------- the table


class ProcessTable:
    """The processes recorded in one ``state.json``: start, look up and stop them.

    Processes run in ``cwd`` with the environment ``env()`` returns at start time; the
    output of foreground programs goes to ``<log_dir>/<name>.log``. ``header`` is written
    at the top of the state file next to the process list.
    """

    def __init__(
        self,
        state_file: Path,
        *,
        cwd: Path,
        log_dir: Path,
        env: Callable[[], dict[str, str]],
        header: Mapping[str, Any],
    ) -> None:
        self.state_file = state_file
        self.cwd = cwd
        self.log_dir = log_dir
        self.env = env
        self.header = dict(header)
        #: Popen handles of children started by this object (reaped when stopped).
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    # ----------------------------------------------------------------- state file

    def load(self) -> list[ProcessRecord]:
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

    def _save(self, records: Sequence[ProcessRecord]) -> None:
        payload = {**self.header, "processes": [asdict(record) for record in records]}
        tmp = self.state_file.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(payload, indent=2) + "\n")
        tmp.replace(self.state_file)

    def add(self, record: ProcessRecord) -> None:
        records = [r for r in self.load() if r.name != record.name]
        records.append(record)
        self._save(records)

    def drop(self, name: str) -> None:
        self._save([r for r in self.load() if r.name != name])

    def get(self, name: str) -> ProcessRecord | None:
        return next((r for r in self.load() if r.name == name), None)

    def status(self) -> dict[str, bool]:
        """Process name -> running, for every recorded process."""
        return {record.name: is_running(record) for record in self.load()}

    def remove_file(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.state_file.unlink()

    # ----------------------------------------------------------------- starting

    def start_daemon(self, name: str, argv: list[str], pid_file: Path, log: Path) -> None:
        """Run a self-daemonizing program and record the daemon's pid from its pid file."""
        with contextlib.suppress(FileNotFoundError):
            pid_file.unlink()
        try:
            result = run_capture(argv, env=self.env(), cwd=self.cwd, timeout=30)
        except subprocess.TimeoutExpired as exc:
            raise SandboxError(f"{name} did not daemonize within 30s:\n{tail(log)}") from exc
        if result.returncode != 0:
            raise SandboxError(
                f"{name} failed to start ({result.returncode}): "
                f"{(result.stderr or result.stdout).strip()}\n{tail(log)}"
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

        if not wait_for(pid_ready, 10.0):
            raise SandboxError(f"{name} wrote no live pid to {pid_file}:\n{tail(log)}")
        self.add(found[-1])

    def spawn(
        self,
        name: str,
        argv: list[str],
        *,
        env: Mapping[str, str] | None = None,
        extra: Mapping[str, str] | None = None,
    ) -> ProcessRecord:
        """Start a foreground program in its own session, output to ``<log_dir>/<name>.log``."""
        log = self.log_dir / f"{name}.log"
        with open(log, "ab") as out:
            try:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=dict(env if env is not None else self.env()),
                    cwd=self.cwd,
                    start_new_session=True,
                )
            except OSError as exc:
                raise SandboxError(f"cannot start {name}: {exc}") from exc
        self._children[proc.pid] = proc
        start = process_start_time(proc.pid)
        if start is None:
            proc.wait()
            self._children.pop(proc.pid, None)
            raise SandboxError(f"{name} exited at once ({proc.returncode}):\n{tail(log)}")
        record = ProcessRecord(name, proc.pid, argv, start, log=str(log), extra=dict(extra or {}))
        self.add(record)
        return record

    def wait_http(
        self,
        record: ProcessRecord,
        url: str,
        *,
        timeout: float,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Wait until ``GET url`` answers 200; :class:`SandboxError` if the process dies first."""
        log = Path(record.log)
        deadline = time.monotonic() + timeout
        last = 0
        while time.monotonic() < deadline:
            if not is_running(record):
                raise SandboxError(
                    f"{record.name} exited during start-up; last lines of {log}:\n{tail(log)}"
                )
            last = http_status(url, headers=headers)
            if last == 200:
                return
            time.sleep(0.2)
        got = f"HTTP {last}" if last else "no answer"
        raise SandboxError(
            f"{record.name} not ready after {timeout:.0f}s ({url.replace('|', '')}: {got}); "
            f"last lines of {log}:\n{tail(log)}"
        )

    def start_service(
        self,
        name: str,
        argv: list[str],
        ready_url: str,
        *,
        timeout: float = 30.0,
        env: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        extra: Mapping[str, str] | None = None,
    ) -> ProcessRecord:
        """:meth:`spawn` a server, then wait until ``ready_url`` answers 200."""
        record = self.spawn(name, argv, env=env, extra=extra)
        self.wait_http(record, ready_url, timeout=timeout, headers=headers)
        return record

    # ----------------------------------------------------------------- stopping

    def stop(self, record: ProcessRecord, timeout: float) -> bool:
        """SIGTERM, then SIGKILL after ``timeout``; True if it was running. Never kills a
        process whose start time differs from the record (a recycled pid)."""
        if not is_running(record):
            self._forget_child(record.pid)
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(record.pid, signal.SIGTERM)
        if not wait_for(lambda: not is_running(record), timeout, interval=0.05):
            if is_running(record):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(record.pid, signal.SIGKILL)
            wait_for(lambda: not is_running(record), 5.0, interval=0.05)
        self._forget_child(record.pid)
        return True

    def stop_named(self, name: str, timeout: float) -> bool:
        """Stop and forget the process recorded as ``name``; True if it was running."""
        record = self.get(name)
        if record is None:
            return False
        stopped = self.stop(record, timeout=timeout)
        self.drop(name)
        return stopped

    def _forget_child(self, pid: int) -> None:
        proc = self._children.pop(pid, None)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1.0)
