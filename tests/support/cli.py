"""Running ``gotthard`` (and other programs) from tests.

:func:`gotthard` runs ``python -m gotthard ARGS`` in a child process, as a user would;
:func:`run_in_process` runs ``gotthard.cli.main(ARGS)`` in this process (its output goes
to pytest's ``capsys``). Both fail the test when the command crashed: for an error
nothing expected, the CLI shows a user one line and exit 2, which a test expecting exit
2 must not take for the error it provoked.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import pytest

from gotthard import cli

#: The repository root (``python -m gotthard`` children run there).
ROOT = Path(__file__).resolve().parents[2]


def gotthard_argv(*args: str) -> list[str]:
    """argv of ``python -m gotthard ARGS`` with this interpreter (for Popen)."""
    return [sys.executable, "-m", "gotthard", *args]


def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    input: str | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """*argv* in a child process; text output captured; never raises on a non-zero exit.

    *env* is the child's whole environment (``None``: this process' environment).
    """
    return subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=timeout,
        input=input,
        env=None if env is None else dict(env),
        cwd=cwd,
        check=False,
    )


def gotthard(
    *args: str,
    env: Mapping[str, str] | None = None,
    without: Iterable[str] = (),
    timeout: float = 60.0,
    cwd: Path | None = ROOT,
) -> subprocess.CompletedProcess[str]:
    """``python -m gotthard ARGS`` in a child process whose environment is this one, less
    the variables named in *without*, plus *env*."""
    removed = set(without)
    child = {k: v for k, v in os.environ.items() if k not in removed}
    done = run(gotthard_argv(*args), env={**child, **(env or {})}, timeout=timeout, cwd=cwd)
    fail_on_crash(args, done.stderr)
    return done


def missing_extra(command: str, module: str, extra: str) -> str:
    """What ``gotthard COMMAND`` writes to stderr when *module*, of the optional
    dependencies *extra*, is not installed (and exits 2)."""
    return (
        f"gotthard: '{command}' needs the optional dependency '{module}': "
        f"pip install 'gotthard-sre[{extra}]'\n"
    )


#: How ``gotthard.cli`` reports an error nothing expected: a bug.
CRASH = "gotthard: internal error: "


def fail_on_crash(args: Sequence[str], stderr: str) -> None:
    """Fail the test if ``gotthard ARGS`` crashed (its stderr says so)."""
    if CRASH in stderr:
        line = next(line for line in stderr.splitlines() if CRASH in line)
        pytest.fail(f"gotthard {' '.join(args)} crashed (a hidden traceback): {line}")


class _Tee:
    """A stream that forwards to *stream* and keeps a copy of what was written."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.written: list[str] = []

    def write(self, text: str) -> int:
        self.written.append(text)
        return self.stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def run_in_process(*args: str) -> int:
    """``gotthard ARGS`` in this process through the real entry point (its output goes to
    pytest's ``capsys``); the exit status."""
    stderr = _Tee(sys.stderr)
    sys.stderr = stderr  # type: ignore[assignment]
    try:
        status = cli.main(list(args))
    finally:
        sys.stderr = stderr.stream
    fail_on_crash(args, "".join(stderr.written))
    return status
