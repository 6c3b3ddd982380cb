"""Running ``gotthard`` (and other programs) from tests.

:func:`gotthard` runs ``python -m gotthard ARGS`` in a child process, as a user would;
:func:`run_in_process` runs ``gotthard.cli.main(ARGS)`` in this process (its output goes
to pytest's ``capsys``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

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
    return run(gotthard_argv(*args), env={**child, **(env or {})}, timeout=timeout, cwd=cwd)


def run_in_process(*args: str) -> int:
    """``gotthard ARGS`` in this process through the real entry point (its output goes to
    pytest's ``capsys``); the exit status."""
    return cli.main(list(args))
