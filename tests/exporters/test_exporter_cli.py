"""``gotthard exporter`` as a user runs it: --once golden output, bad input, serving."""

from __future__ import annotations

import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

from gotthard.sandbox import free_ports
from tests.support.cli import gotthard, gotthard_argv
from tests.support.golden import assert_golden, mask
from tests.support.monitoring import http_ok, promtool_check_metrics
from tests.support.tls import write_web_config
from tests.support.wait import wait_until

FIXTURES = Path(__file__).parent.parent / "fixtures"
RECORDED_BIN = FIXTURES / "recorded-slurm-bin"
GOLDEN = FIXTURES / "golden" / "exporter-once-slurm.prom"


def write_config(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "site.toml"
    path.write_text(body)
    return path


def test_once_on_recorded_slurm_output_matches_golden(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        f'[exporter.slurm]\nbin_dir = "{RECORDED_BIN}"\n',
    )
    result = gotthard("--config", str(config), "exporter", "--once")
    assert result.returncode == 0, result.stderr
    assert_golden(GOLDEN, mask(result.stdout))
    # and it is valid exposition text by Prometheus' own linter
    promtool_check_metrics(result.stdout)


def test_unknown_collector_is_a_usage_error() -> None:
    result = gotthard("exporter", "--once", "--collectors", "slurm,nosuch")
    assert result.returncode == 2
    assert "nosuch" in result.stderr and "Traceback" not in result.stderr


def test_unusable_flag_values_exit_2() -> None:
    for args in (
        ["--slurm.poll-interval", "-1"],
        ["--slurm.poll-interval", "soon"],
        ["--slurm.backend", "magic"],
        ["--listen", "no-port"],
    ):
        result = gotthard("exporter", "--once", *args)
        assert result.returncode == 2, args
        assert "Traceback" not in result.stderr


def test_unreadable_config_file_names_the_file(tmp_path: Path) -> None:
    result = gotthard("--config", str(tmp_path / "missing.toml"), "exporter", "--once")
    assert result.returncode == 2
    assert "missing.toml" in result.stderr and "cannot read" in result.stderr
    bad = write_config(tmp_path, "[exporter\n")
    result = gotthard("--config", str(bad), "exporter", "--once")
    assert result.returncode == 2 and "not valid TOML" in result.stderr


def test_once_reads_the_web_config_first(tmp_path: Path) -> None:
    """--once checks --web.config as serving does: a missing or bad file (or a TLS file
    it names) is exit 2 naming the file, before anything is collected."""
    config = write_config(tmp_path, f'[exporter.slurm]\nbin_dir = "{RECORDED_BIN}"\n')
    web = tmp_path / "web.yml"
    missing_cert = tmp_path / "missing.crt"
    cases = {
        str(tmp_path / "nonexistent.yml"): str(tmp_path / "nonexistent.yml"),
        str(write_web_config(web, missing_cert, tmp_path / "x.key")): str(missing_cert),
    }
    for path, named in cases.items():
        result = gotthard("--config", str(config), "exporter", "--once", "--web.config", path)
        assert result.returncode == 2, result.stderr
        assert named in result.stderr and "Traceback" not in result.stderr
        assert result.stdout == ""  # nothing collected
    bad = tmp_path / "bad.yml"
    bad.write_text("tls_server_config: [1]\n")
    result = gotthard("--config", str(config), "exporter", "--once", "--web.config", str(bad))
    assert result.returncode == 2 and str(bad) in result.stderr


def test_config_error_names_the_bad_key(tmp_path: Path) -> None:
    config = write_config(tmp_path, "[exporter.slurm]\npoll_interval_seconds = 0\nbogus = 1\n")
    result = gotthard("--config", str(config), "exporter", "--once")
    assert result.returncode == 2
    assert "exporter.slurm.poll_interval_seconds" in result.stderr
    assert "exporter.slurm.bogus: unknown key" in result.stderr


def test_the_exporter_reads_only_its_own_table(tmp_path: Path) -> None:
    # a node's exporter starts without importing or checking the other areas' settings
    # (their models are most of a one-shot start-up); the site file keeps its own checks
    config = write_config(
        tmp_path,
        f'[exporter.slurm]\nbin_dir = "{RECORDED_BIN}"\n[dr]\nnot_a_dr_key = 1\n',
    )
    probe = (
        "import sys, runpy\n"
        "sys.argv = ['gotthard', '--config', sys.argv[1], 'exporter', '--once']\n"
        "try:\n"
        "    runpy.run_module('gotthard', run_name='__main__')\n"
        "except SystemExit as exit:\n"
        "    assert not exit.code, exit.code\n"
        "areas = ('dr', 'runbooks', 'monitoring', 'policies', 'deploy')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[1:2] and m.split('.')[1] in areas"
        " and m.startswith('gotthard.')), file=sys.stderr)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, str(config)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "gotthard_slurm_up 1" in result.stdout or "gotthard_slurm_up{" in result.stdout
    assert result.stderr.strip().splitlines()[-1] == "[]"
    # the whole file is still checked by every command that reads other tables
    whole = gotthard("--config", str(config), "rules", "thresholds")
    assert whole.returncode == 2
    assert "dr.not_a_dr_key: unknown key" in whole.stderr
    # and an unknown table is an error for the exporter too
    typo = write_config(tmp_path, "[exportr]\ncollectors = []\n")
    result = gotthard("--config", str(typo), "exporter", "--once")
    assert result.returncode == 2
    assert "exportr: unknown key" in result.stderr


def test_config_from_environment_variable(tmp_path: Path) -> None:
    config = write_config(tmp_path, '[exporter]\ncollectors = ["lustre-typo"]\n')
    result = gotthard("exporter", "--once", env={"GOTTHARD_CONFIG": str(config)})
    assert result.returncode == 2
    assert "lustre-typo" in result.stderr


def test_bad_rest_url_is_a_clear_error() -> None:
    result = gotthard(
        "exporter", "--once", "--slurm.backend", "rest", "--slurm.rest-url", "ftp://ctl:6820"
    )
    assert result.returncode == 2
    assert "ftp://ctl:6820" in result.stderr and "Traceback" not in result.stderr


def test_missing_slurm_commands_do_not_crash_the_exporter(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    config = write_config(tmp_path, f'[exporter.slurm]\nbin_dir = "{empty}"\n')
    result = gotthard("--config", str(config), "exporter", "--once")
    assert result.returncode == 0
    assert "gotthard_slurm_up 0" in result.stdout
    assert 'gotthard_collector_up{collector="slurm"} 1' in result.stdout
    assert "squeue" in result.stderr and "not found" in result.stderr


def failing_slurm_bin(tmp_path: Path, seconds: float) -> Path:
    """Slurm commands that answer like an unreachable controller, after *seconds*."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for command in ("squeue", "sinfo", "sdiag", "scontrol", "sbatch"):
        script = bin_dir / command
        script.write_text(
            f"#!/bin/sh\nsleep {seconds}\n"
            f'echo "{command}: error: Unable to contact slurm controller (connect failure)" >&2\n'
            "exit 1\n"
        )
        script.chmod(0o755)
    return bin_dir


def test_once_with_an_unreachable_controller_reports_what_serving_reports(
    tmp_path: Path,
) -> None:
    # The commands fail after 2 s, past the 1 s scrape timeout but within the command
    # timeout: --once waits for its poll and reports the failure, like the served mode.
    bin_dir = failing_slurm_bin(tmp_path, 2)
    config = write_config(
        tmp_path,
        "[exporter]\nscrape_timeout_seconds = 1\n"
        f'[exporter.slurm]\nbin_dir = "{bin_dir}"\ncommand_timeout_seconds = 8\n',
    )
    result = gotthard("--config", str(config), "exporter", "--once")
    assert result.returncode == 0, result.stderr
    found = samples(result.stdout)
    assert found["gotthard_slurm_up"] == 0
    assert found['gotthard_collector_up{collector="slurm"}'] == 1
    assert found['gotthard_collector_errors_total{collector="slurm"}'] >= 1
    assert 2.0 <= found['gotthard_collector_duration_seconds{collector="slurm"}'] < 8
    assert "Unable to contact slurm controller" in result.stderr


def samples(text: str) -> dict[str, float]:
    """``name{labels}`` -> value of every sample line of exposition *text*."""
    found = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            found[name] = float(value)
    return found


def test_serves_metrics_and_healthz_and_stops_on_sigterm(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    config = write_config(tmp_path, f'[exporter.slurm]\nbin_dir = "{RECORDED_BIN}"\n')
    process = subprocess.Popen(
        gotthard_argv("--config", str(config), "exporter", "--listen", f"127.0.0.1:{port}"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        healthz = f"http://127.0.0.1:{port}/healthz"
        wait_until(lambda: http_ok(healthz), 15, "the exporter's /healthz")
        with urllib.request.urlopen(healthz, timeout=2) as response:
            assert response.read().decode() == "ok\n"
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/metrics",
            headers={"X-Prometheus-Scrape-Timeout-Seconds": "5"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            text = response.read().decode()
        assert 'gotthard_slurm_jobs{state="running",partition="gpu",account=""} 2' in text
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert process.returncode == 0


def test_promtool_is_installed() -> None:
    # CI installs Prometheus' tools with scripts/install-system-deps; never skip without them.
    assert shutil.which("promtool"), "promtool missing: run scripts/install-system-deps"
