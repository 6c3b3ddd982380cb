"""``gotthard deploy render --target systemd``: units systemd accepts, each sandboxed to
the exposure ceiling docs/deploy.md documents (``systemd-analyze``, no running systemd)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from gotthard.deploy.systemd import EXPOSURE_CEILINGS
from tests.deploy.rendering import SITE, render
from tests.support.cli import ROOT, run

#: The venv's gotthard: verify needs ExecStart to name an existing executable.
GOTTHARD_BIN = Path(sys.executable).with_name("gotthard")


@pytest.fixture(scope="module")
def units(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("systemd")
    site = base / "site.toml"
    site.write_text(f'{SITE.read_text()}\n[deploy.systemd]\ngotthard_bin = "{GOTTHARD_BIN}"\n')
    return render("systemd", base / "units", site)


def test_every_role_has_a_unit_and_the_audits_a_timer(units: Path) -> None:
    assert sorted(p.name for p in units.iterdir() if p.is_file()) == sorted(
        [*EXPOSURE_CEILINGS, "gotthard-kube-bench.timer", "gotthard-policy-textfile.timer"]
    )


def test_the_slurmctld_epilog_script_and_its_slurm_conf_line(units: Path) -> None:
    """``slurm/``: the EpilogSlurmctld wrapper (executable) that stores the job summary."""
    script = units / "slurm" / "gotthard-epilog-slurmctld.sh"
    assert script.stat().st_mode & 0o777 == 0o755
    text = script.read_text()
    assert text.startswith("#!/bin/sh\n")
    assert f"exec {GOTTHARD_BIN} --config /etc/gotthard/site.toml job epilog --cluster " in text
    assert "--timeout 20 --log-file /var/log/slurm/gotthard-epilog.log\n" in text
    line = (units / "slurm" / "slurm.conf.gotthard").read_text()
    assert re.fullmatch(r"EpilogSlurmctld=/\S+/gotthard-epilog-slurmctld\.sh\n", line)
    assert run(["sh", "-n", str(script)]).returncode == 0


def test_systemd_analyze_verify_accepts_them_without_a_warning(units: Path) -> None:
    files = sorted(str(p) for p in units.iterdir() if p.is_file())
    result = run(["systemd-analyze", "verify", *files])
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", result.stderr  # an unknown key or bad value only warns


def test_verify_fails_on_a_missing_binary(units: Path, tmp_path: Path) -> None:
    unit = tmp_path / "gotthard-dr.service"
    text = (units / unit.name).read_text()
    unit.write_text(text.replace(str(GOTTHARD_BIN), "/nonexistent/gotthard"))
    assert run(["systemd-analyze", "verify", str(unit)]).returncode != 0


@pytest.mark.parametrize("name", sorted(EXPOSURE_CEILINGS))
def test_exposure_stays_under_the_documented_ceiling(units: Path, name: str) -> None:
    result = run(["systemd-analyze", "security", "--offline=true", str(units / name)])
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout)
    assert match, result.stdout + result.stderr
    assert float(match.group(1)) <= EXPOSURE_CEILINGS[name], result.stdout
    docs = (ROOT / "docs" / "deploy.md").read_text()
    assert f"| `{name}` | {EXPOSURE_CEILINGS[name]} |" in docs


def test_units_are_hardened(units: Path) -> None:
    for name in EXPOSURE_CEILINGS:
        text = (units / name).read_text()
        for line in (
            "DynamicUser=yes",
            "ProtectSystem=strict",
            "NoNewPrivileges=yes",
            "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
            f"ExecStart={GOTTHARD_BIN} --config /etc/gotthard/site.toml ",
        ):
            assert line in text, (name, line)
        bounding = re.findall(r"^CapabilityBoundingSet=(.*)$", text, re.M)
        expected = ["CAP_DAC_READ_SEARCH"] if "kube-bench" in name else [""]
        assert bounding == expected, name
    assert "ReadOnlyPaths=/proc /sys" in (units / "gotthard-node-exporter.service").read_text()
