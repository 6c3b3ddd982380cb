"""The one command-line error path (:func:`gotthard.cli.main`): exit 0, 1 or 2, and one
line on stderr instead of a traceback.

* A reader that stops early (``| head -1``, ``| true``) ends the output quietly; the
  command runs on to its own exit status, so a finding is still exit 1.
* Output that cannot be written, a file that cannot be written: exit 2, naming it.
* An error no part of Gotthard expected: one line, exit 2.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

import pytest

from gotthard import cli, config
from tests.support.cli import ROOT, fail_on_crash, gotthard, gotthard_argv

FIXTURES = ROOT / "tests" / "fixtures"
RKE2 = FIXTURES / "policies" / "kube-bench" / "rke2-1.1.7-1.1.9-mixedcase.json"
#: Linux's fcntl to resize a pipe (fcntl.F_SETPIPE_SZ where the module has it).
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)

#: Every command that prints a listing or a document: (argv, exit status). ``{out}`` is
#: an empty directory, ``{site}`` a site file (recorded Slurm output, a kubeconfig that
#: does not exist).
LISTINGS: dict[str, tuple[tuple[str, ...], int]] = {
    "help": (("--help",), 0),
    "rules thresholds": (("rules", "thresholds"), 0),
    "policy rules": (("policy", "rules"), 0),
    "rules build": (("rules", "build", "--out", "{out}"), 0),
    "alertmanager build": (("alertmanager", "build", "--out", "{out}"), 0),
    "dashboards build": (("dashboards", "build", "--out", "{out}"), 0),
    "deploy render": (("deploy", "render", "--target", "kubernetes", "--out", "{out}"), 0),
    "exporter --once": (("--config", "{site}", "exporter", "--once"), 0),
    "audit kube-bench": (("audit", "kube-bench", "--report", str(RKE2)), 1),
    "sandbox status": (("sandbox", "status", "--dir", "{out}"), 1),
    "dr status": (("--config", "{site}", "dr", "status"), 2),
}


def _argv(tmp_path: Path, args: tuple[str, ...]) -> list[str]:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    site = tmp_path / "site.toml"
    site.write_text(
        f'[exporter.slurm]\nbin_dir = "{FIXTURES / "recorded-slurm-bin"}"\n'
        f'[sites.local.clusters.sandbox.kubernetes]\nkubeconfig = "{tmp_path / "none"}"\n'
    )
    return gotthard_argv(*(a.format(out=out, site=site) for a in args))


def run_with_reader_gone(argv: list[str], after_first_line: bool) -> tuple[int, str, bytes]:
    """Run *argv* with stdout a pipe (one page big) whose reader goes away after the
    first line, or before anything is written; exit status, stderr, what was read."""
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, F_SETPIPE_SZ, 4096)
    if not after_first_line:
        os.close(read_end)
    env = {k: v for k, v in os.environ.items() if k != config.ENV_VAR}
    child = subprocess.Popen(argv, stdout=write_end, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    os.close(write_end)
    seen = b""
    if after_first_line:
        with os.fdopen(read_end, "rb", buffering=0) as reader:
            while not seen.endswith(b"\n") and (chunk := reader.read(1)):
                seen += chunk
    _, stderr = child.communicate(timeout=120)
    return child.returncode, stderr.decode(), seen


@pytest.mark.parametrize("after_first_line", [True, False], ids=["head-1", "true"])
@pytest.mark.parametrize("command", sorted(LISTINGS))
def test_a_reader_that_stops_early_changes_nothing_but_the_output(
    tmp_path: Path, command: str, after_first_line: bool
) -> None:
    args, status = LISTINGS[command]
    code, stderr, seen = run_with_reader_gone(_argv(tmp_path, args), after_first_line)
    fail_on_crash(args, stderr)
    assert code == status, stderr
    for noise in ("Traceback", "BrokenPipe", "Exception ignored", "Errno 32"):
        assert noise not in stderr
    assert bool(seen) is after_first_line


def test_a_full_disk_on_standard_output_is_exit_2() -> None:
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            gotthard_argv("rules", "thresholds"), stdout=full, capture_output=False,
            stderr=subprocess.PIPE, text=True, check=False, cwd=ROOT,
        )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr == "gotthard: cannot write standard output: No space left on device\n"


@pytest.mark.parametrize(
    "args",
    [
        ("rules", "build"),
        ("alertmanager", "build"),
        ("dashboards", "build"),
        ("deploy", "render", "--target", "systemd"),
        ("policy", "gatekeeper"),
    ],
    ids=" ".join,
)
def test_an_output_directory_that_cannot_be_written_is_exit_2_naming_it(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = blocker / "out"  # below a regular file: unwritable even for root
    done = gotthard(*args, "--out", str(out), without=[config.ENV_VAR])
    assert done.returncode == 2, done.stderr
    assert str(out) in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_an_unexpected_error_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(*args: object) -> config.Config:
        raise RuntimeError("boom")

    monkeypatch.setattr(config, "load", broken)
    assert cli.main(["rules", "thresholds"]) == 2  # not run_in_process: it fails on a crash
    assert capsys.readouterr().err == (
        "gotthard: internal error: RuntimeError: boom"
        " (a bug; `python -X dev -m gotthard ...` shows where)\n"
    )
