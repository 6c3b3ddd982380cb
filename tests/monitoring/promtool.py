"""promtool runs the rule tests share: a lint-fatal check, and one unit-test file."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.support.cli import run
from tests.support.monitoring import binary

#: The rule files every unit-test document loads (``rule_files``), as ``rules build`` names them.
RULE_FILES = ("recording.rules.yml", "alerts.rules.yml")


def check_rules(*files: Path) -> subprocess.CompletedProcess[str]:
    """``promtool check rules --lint=all --lint-fatal FILES``, which must pass."""
    result = run(
        [binary("promtool"), "check", "rules", "--lint=all", "--lint-fatal", *map(str, files)]
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def unit_test(built: Path, test_file: Path, workdir: Path) -> None:
    """``promtool test rules`` on *test_file* against the rule files of *built*, copied
    beside it into *workdir*; every test in it must pass."""
    for rule_file in RULE_FILES:
        shutil.copy(built / rule_file, workdir / rule_file)
    shutil.copy(test_file, workdir / test_file.name)
    result = run([binary("promtool"), "test", "rules", str(workdir / test_file.name)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
