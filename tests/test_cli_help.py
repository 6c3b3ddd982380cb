"""What ``--help`` promises is what the commands do: every leaf command states its exit
statuses (from the one table, ``gotthard.cli.FINDINGS``); a command or subcommand whose
extra is missing is marked in the listing and in its own help, and refuses to run with
exit 2 naming the extra. The missing libraries are simulated in a child process the way
the import system sees a library that is not installed (``None`` in ``sys.modules``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from gotthard import cli, extras
from tests.support.cli import (
    ROOT,
    fail_on_crash,
    gotthard,
    missing_extra,
    run,
    run_in_process,
)

#: ``gotthard ARGS`` in a child process where the import names of argv[1] (comma-separated)
#: cannot be imported, through the real entry point.
_WITHOUT = (
    "import sys\n"
    "for name in sys.argv[1].split(','):\n"
    "    sys.modules[name] = None\n"
    "from gotthard.cli import main\n"
    "sys.exit(main(sys.argv[2:]))\n"
)
LEAVES = [" ".join(path) for path, _ in cli.leaves(cli.build_parser())]


def without(modules: Sequence[str], *args: str):  # type: ignore[no-untyped-def]
    done = run([sys.executable, "-c", _WITHOUT, ",".join(modules), *args], cwd=ROOT, timeout=60)
    fail_on_crash(args, done.stderr)
    return done


def flat(text: str) -> str:
    return " ".join(text.split())


def help_of(capsys: pytest.CaptureFixture[str], *words: str) -> str:
    with pytest.raises(SystemExit) as stopped:
        run_in_process(*words, "--help")
    assert stopped.value.code == 0
    return flat(capsys.readouterr().out)


def test_there_are_the_leaf_commands_the_docs_count() -> None:
    assert len(LEAVES) >= 26
    assert {"dr placement plan", "dr placement apply", "runbooks serve"} <= set(LEAVES)
    assert "dr placement" not in LEAVES


@pytest.mark.parametrize("command", LEAVES)
def test_every_leaf_states_its_exit_statuses(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    text = help_of(capsys, *command.split())
    assert "exit status: 0 success;" in text
    assert f"2 {flat(cli.USAGE_ERROR)}." in text
    if command in cli.FINDINGS:
        assert f"; 1 {flat(cli.FINDINGS[command])};" in text
    else:
        assert "; 1 " not in text.split("exit status:", 1)[1]
    assert "not installed" not in text  # this environment has every extra


def test_the_tables_name_real_commands() -> None:
    assert sorted(set(cli.FINDINGS) - set(LEAVES)) == []
    top = {leaf.split()[0] for leaf in LEAVES}
    assert sorted(set(extras.NEEDS) - set(LEAVES) - top) == []
    for extra, groups in extras.NEEDS.values():
        assert extra in extras.EXTRAS
        for group in groups:
            assert all(module in extras.MODULES for module in group)


def test_help_marks_every_command_whose_extra_is_missing() -> None:
    done = without(["kubernetes", "grafanalib"], "--help")
    assert done.returncode == 0, done.stderr
    text = flat(done.stdout)
    for command, extra in (("dr", "dr"), ("runbooks", "runbooks"), ("dashboards", "dashboards")):
        assert f"(not installed: pip install 'gotthard-sre[{extra}]')" in text, command
    assert text.count("not installed") == 3  # audit still runs kube-bench; policy runs
    listing = flat(without(["kubernetes"], "audit", "--help").stdout)
    assert "PeerAuthentications (not installed: pip install 'gotthard-sre[audit]')" in listing
    assert listing.count("not installed") == 1
    own = without(["kubernetes"], "dr", "status", "--help")
    assert own.returncode == 0
    assert "not installed: pip install 'gotthard-sre[dr]'. exit status: 0" in flat(own.stdout)


@pytest.mark.parametrize(
    ("modules", "argv", "who", "module", "extra"),
    [
        (
            ["kubernetes"],
            ["runbooks", "serve", "--listen", "127.0.0.1:0"],
            "runbooks",
            "kubernetes",
            "runbooks",
        ),
        (["kubernetes"], ["dr", "placement", "plan"], "dr", "kubernetes", "dr"),
        (["kubernetes"], ["audit", "cluster"], "audit cluster", "kubernetes", "audit"),
        (
            ["regopy", "opa_client"],
            ["policy", "eval", "--input", "pod.yaml"],
            "policy eval",
            "regopy",
            "policy",
        ),
        (
            ["regopy", "opa_client"],
            ["audit", "kube-bench", "--report", "r.json"],
            "audit kube-bench",
            "regopy",
            "policy",
        ),
    ],
    ids=["runbooks-serve", "dr-placement", "audit-cluster", "policy-eval", "audit-kube-bench"],
)
def test_a_command_without_its_extra_exits_2_naming_it(
    modules: list[str], argv: list[str], who: str, module: str, extra: str
) -> None:
    done = without(modules, *argv)
    assert done.returncode == 2
    assert done.stderr == missing_extra(who, module, extra)
    assert done.stdout == ""


def test_what_needs_no_extra_runs_without_it() -> None:
    done = without(["regopy", "opa_client", "kubernetes"], "policy", "rules", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert '"rules"' in done.stdout


@pytest.mark.parametrize("command", ["policy", "audit"])
def test_kube_bench_errors_name_the_command_run(command: str, tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    done = gotthard(command, "kube-bench", "--report", str(missing))
    assert done.returncode == 2
    assert done.stderr.startswith(f"gotthard {command}: ")
    assert str(missing) in done.stderr and done.stderr.count("\n") == 1


def test_dr_placement_plan_and_apply_have_their_own_help(
    capsys: pytest.CaptureFixture[str],
) -> None:
    listing = help_of(capsys, "dr", "placement")
    assert "plan print each service's placement decision" in listing
    assert "apply evaluate the placement and write" in listing
    plan = help_of(capsys, "dr", "placement", "plan")
    assert "without writing it" in plan and "usage: gotthard dr placement plan" in plan
    with pytest.raises(SystemExit) as stopped:
        run_in_process("dr", "placement")
    assert stopped.value.code == 2
    assert "required: ACTION" in flat(capsys.readouterr().err)
