"""The one runner of external commands (shared plumbing): Slurm's client commands,
``scontrol update``, ``lctl``/``lnetctl``, ``kube-bench`` and the sandbox's one-shot
commands all run through :func:`run` (or :class:`Running` and :meth:`Running.wait`, to
run several at once).

* argv lists only: never a shell, so no alert label or user text is ever interpreted;
* no stdin (``/dev/null``), an explicit environment when one is given;
* a timeout that kills the child, in its own process group, so that a grandchild
  holding the pipes cannot keep the caller waiting;
* bounded captured output: standard output up to *max_output* bytes (more is an
  error), the tail of standard error only;
* one exception type, :class:`CommandError`, naming the command, its exit status and
  the last line of its standard error.

Long-running daemons (the sandbox's munged, slurmctld, Prometheus) are not started here.
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: Standard output kept by default: 256 MiB (``squeue`` prints ~100 bytes a job).
MAX_OUTPUT = 256 * 1024 * 1024
#: Standard error kept: its last 64 KiB.
STDERR_TAIL = 64 * 1024
#: Bytes read at a time (as subprocess reads; larger reads cost a poll more resident memory).
_CHUNK = 1 << 15
#: After a kill, how long the pipes may stay open before they are abandoned.
_DRAIN_SECONDS = 2.0
_SUBCOMMAND = re.compile(r"[a-z][a-z_]*")


def describe(argv: Sequence[str]) -> str:
    """The command as messages name it: ``sinfo``, ``scontrol update``, ``lctl get_param``."""
    words = [Path(argv[0]).name] if argv else ["(empty command)"]
    if len(argv) > 1 and _SUBCOMMAND.fullmatch(argv[1]):
        words.append(argv[1])
    return " ".join(words)


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1].strip()[:300] if lines else ""


class CommandError(Exception):
    """A command could not be started, ran past its timeout (``timed_out``), printed too
    much, or (when checked) exited non-zero. ``returncode`` is None unless it exited."""

    def __init__(
        self,
        argv: Sequence[str],
        reason: str,
        *,
        returncode: int | None = None,
        timed_out: bool = False,
        stdout: str = "",
        stderr: str = "",
    ) -> None:
        self.argv = tuple(argv)
        self.returncode = returncode
        self.timed_out = timed_out
        self.stdout = stdout
        self.stderr = stderr
        super().__init__(reason)


@dataclass(frozen=True, slots=True)
class Completed:
    """A command that ran to its end."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    #: The tail of standard error (:data:`STDERR_TAIL` bytes at most).
    stderr: str
    duration: float

    def check(self) -> Completed:
        """Itself, or :class:`CommandError` when it exited non-zero."""
        if self.returncode != 0:
            message = _last_line(self.stderr) or _last_line(self.stdout) or "no message"
            raise CommandError(
                self.argv,
                f"{describe(self.argv)} exited {self.returncode}: {message}",
                returncode=self.returncode,
                stdout=self.stdout,
                stderr=self.stderr,
            )
        return self


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process group the child leads (it was started in its own session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        process.kill()


class Running:
    """A command started (see the module docstring); :meth:`wait` collects it.
    :class:`CommandError` if it cannot start."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        max_output: int = MAX_OUTPUT,
    ) -> None:
        if isinstance(argv, str) or not argv:
            raise TypeError("a command is a non-empty argv list, never a string")
        self.argv = tuple(str(arg) for arg in argv)
        self.timeout = timeout
        self.max_output = max_output
        self.started = time.monotonic()
        self.deadline = self.started + timeout
        try:
            self._process: subprocess.Popen[bytes] = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=None if env is None else dict(env),
                cwd=cwd,
                start_new_session=True,
            )
        except OSError as err:
            raise CommandError(
                self.argv, f"cannot run {describe(argv)}: {argv[0]}: {err.strerror or err}"
            ) from None

    def wait(self) -> Completed:
        """Read the command's output until it exits. Past its timeout (or past
        *max_output* bytes of output) its process group is killed and
        :class:`CommandError` raised."""
        process = self._process
        stdout = bytearray()  # grown in place: no list of chunks and joined copy at once
        stderr = bytearray()
        failure = ""
        timed_out = False
        with selectors.DefaultSelector() as selector:
            for pipe in (process.stdout, process.stderr):
                if pipe is not None:
                    selector.register(pipe, selectors.EVENT_READ)
            try:
                while selector.get_map() and not failure:
                    left = self.deadline - time.monotonic()
                    if left <= 0:
                        timed_out = True
                        break
                    for key, _ in selector.select(left):
                        chunk = os.read(key.fd, _CHUNK)
                        if not chunk:
                            selector.unregister(key.fileobj)
                        elif key.fileobj is process.stdout:
                            stdout += chunk
                        else:
                            stderr += chunk
                            del stderr[:-STDERR_TAIL]
                    if len(stdout) > self.max_output:
                        failure = f"printed more than {self.max_output} bytes"
            finally:
                if failure or timed_out or selector.get_map():
                    _kill_group(process)
                for pipe in (process.stdout, process.stderr):
                    if pipe is not None:
                        pipe.close()
        returncode = None
        if not failure and not timed_out:
            # its pipes are closed, yet it may still run (a daemon that closed them)
            with contextlib.suppress(subprocess.TimeoutExpired):
                returncode = process.wait(timeout=max(self.deadline - time.monotonic(), 1e-3))
            if returncode is None:
                timed_out = True
                _kill_group(process)
        if timed_out:
            failure = f"timed out after {self.timeout:g}s"
        text_out = stdout.decode("utf-8", "replace")
        del stdout
        text_err = stderr.decode("utf-8", "replace")
        if returncode is None:
            with contextlib.suppress(subprocess.TimeoutExpired):  # else Popen reaps it later
                process.wait(timeout=_DRAIN_SECONDS)
            raise CommandError(
                self.argv,
                f"{describe(self.argv)} {failure}",
                timed_out=timed_out,
                stdout=text_out,
                stderr=text_err,
            )
        return Completed(self.argv, returncode, text_out, text_err, time.monotonic() - self.started)


def run(
    argv: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    check: bool = True,
    max_output: int = MAX_OUTPUT,
) -> Completed:
    """Run *argv* to its end. With *check*, a non-zero exit is a :class:`CommandError`."""
    done = Running(argv, timeout=timeout, env=env, cwd=cwd, max_output=max_output).wait()
    return done.check() if check else done
