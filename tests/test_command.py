"""The one command runner: argv lists, timeouts that kill, bounded output, one error type."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from gotthard import command
from gotthard.command import CommandError


def _script(tmp_path: Path, body: str, name: str = "tool") -> str:
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\n{body}")
    path.chmod(0o755)
    return str(path)


def test_output_status_and_environment_are_the_commands(tmp_path: Path) -> None:
    tool = _script(tmp_path, 'echo "out $GREETING"; echo "err line" >&2; exit 3\n')
    done = command.run([tool], timeout=10, env={"GREETING": "hello"}, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (3, "out hello\n", "err line\n")
    assert done.argv == (tool,)
    assert done.duration >= 0


def test_a_failed_command_names_itself_its_status_and_its_last_words(tmp_path: Path) -> None:
    tool = _script(
        tmp_path, 'echo "first" >&2; echo "slurm_update error: Invalid node" >&2; exit 1\n'
    )
    with pytest.raises(CommandError) as caught:
        command.run([tool, "update", "NodeName=n1"], timeout=10)
    assert str(caught.value) == "tool update exited 1: slurm_update error: Invalid node"
    assert caught.value.returncode == 1
    assert not caught.value.timed_out


def test_arguments_reach_the_program_as_they_are_never_through_a_shell(tmp_path: Path) -> None:
    tool = _script(tmp_path, 'for a in "$@"; do echo "[$a]"; done\n')
    hostile = "$(touch pwned); rm -rf / `id`"
    done = command.run([tool, hostile, "a b"], timeout=10)
    assert done.stdout == f"[{hostile}]\n[a b]\n"
    assert not (tmp_path / "pwned").exists()
    with pytest.raises(TypeError):
        command.run(f"{tool} x", timeout=10)  # type: ignore[arg-type]


def test_no_stdin(tmp_path: Path) -> None:
    tool = _script(tmp_path, "cat\n")
    assert command.run([tool], timeout=10).stdout == ""


def test_timeout_kills_the_child_and_what_it_started(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    # the grandchild keeps the pipes open: without a process-group kill this would hang
    tool = _script(tmp_path, f"sleep 60 &\necho $! > {pid_file}\nsleep 60\n")
    started = time.monotonic()
    with pytest.raises(CommandError) as caught:
        command.run([tool], timeout=0.5)
    assert time.monotonic() - started < 5
    assert str(caught.value) == "tool timed out after 0.5s"
    assert caught.value.timed_out and caught.value.returncode is None
    grandchild = int(pid_file.read_text())

    def gone() -> bool:
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            return True
        stat = Path(f"/proc/{grandchild}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] == "Z"  # killed, not yet reaped by init

    deadline = time.monotonic() + 5
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone()


def test_a_command_that_closes_its_pipes_and_lingers_still_times_out(tmp_path: Path) -> None:
    tool = _script(tmp_path, "exec >/dev/null 2>&1\nsleep 60\n")
    with pytest.raises(CommandError, match=r"timed out after 0\.3s"):
        command.run([tool], timeout=0.3)


def test_output_is_bounded(tmp_path: Path) -> None:
    tool = _script(tmp_path, "yes\n")
    with pytest.raises(CommandError, match="printed more than 100000 bytes"):
        command.run([tool], timeout=10, max_output=100_000)
    noisy = _script(
        tmp_path, 'i=0; while [ $i -lt 20000 ]; do echo "line $i" >&2; i=$((i+1)); done\n', "noisy"
    )
    done = command.run([noisy], timeout=30)
    assert len(done.stderr) <= command.STDERR_TAIL
    assert done.stderr.endswith("line 19999\n")


def test_a_missing_program_is_one_error_too(tmp_path: Path) -> None:
    with pytest.raises(CommandError) as caught:
        command.run([str(tmp_path / "nope"), "get_param"], timeout=10)
    assert str(caught.value) == (
        f"cannot run nope get_param: {tmp_path / 'nope'}: No such file or directory"
    )
    assert caught.value.returncode is None and not caught.value.timed_out


def test_several_commands_run_at_once(tmp_path: Path) -> None:
    flag = tmp_path / "flag"
    # the first waits for what the second does: both run before either is waited for
    waiter = _script(
        tmp_path, f'while [ ! -e "{flag}" ]; do sleep 0.05; done; echo seen\n', "waiter"
    )
    setter = _script(tmp_path, f'touch "{flag}"; echo set\n', "setter")
    running = [command.Running([waiter], timeout=30), command.Running([setter], timeout=30)]
    assert [run.wait().stdout for run in running] == ["seen\n", "set\n"]
