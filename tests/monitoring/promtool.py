"""promtool runs the rule tests share: a lint-fatal check, and one unit-test file."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from gotthard.monitoring.deliver import ALERTS_FILE, GLOBAL_ALERTS_FILE, RECORDING_FILE
from tests.support.cli import run
from tests.support.monitoring import binary, load_yaml

#: The rule files every unit-test document loads (``rule_files``), as ``rules build`` names them.
RULE_FILES = (RECORDING_FILE, ALERTS_FILE)


#: The global evaluator's groups (placement ``global``).
GLOBAL_FILE = GLOBAL_ALERTS_FILE


def check_rules(*files: Path) -> subprocess.CompletedProcess[str]:
    """``promtool check rules --lint=all --lint-fatal FILES``, which must pass."""
    result = run(
        [binary("promtool"), "check", "rules", "--lint=all", "--lint-fatal", *map(str, files)]
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result


#: The components whose rule groups a unit-test file needs, where not only the one it is
#: named after: the DCGM translation feeds the GPU component's rules.
_COMPONENTS_OF = {
    "gotthard": ("self",),
    # the GPU, NIC and Lustre client alerts leave out nodes in maintenance, a Slurm
    # recording rule
    "gpu": ("gpu", "slurm"),
    "slingshot": ("slingshot", "slurm"),
    "lustre": ("lustre", "slurm"),
    "dcgm": ("dcgm", "gpu", "slurm"),
    "slurm_controllers": ("slurm",),
}


def components_of(test_file: Path) -> tuple[str, ...]:
    """The components a unit-test file tests (``dr.test.yml``: dr)."""
    stem = test_file.name.removesuffix(".test.yml")
    return _COMPONENTS_OF.get(stem, (stem,))


def unit_test(built: Path, test_file: Path, workdir: Path) -> None:
    """``promtool test rules`` on *test_file* against the rule groups of its components in
    the rule files of *built*, written beside it into *workdir*; every test in it must pass.

    promtool evaluates every group of the rule files at every step of every test, so the
    other components' groups would only cost time (11 s instead of 2 s for dr.test.yml);
    a rule that needs another component's recording rule fails here, and says so."""
    prefixes = tuple(f"gotthard-{component}." for component in components_of(test_file))
    for rule_file in RULE_FILES:
        # the alerts a unit test judges include its components' global groups: the
        # global evaluator loads them from their own file, a site Prometheus never does
        sources = [rule_file, GLOBAL_FILE] if rule_file == ALERTS_FILE else [rule_file]
        groups = [
            g
            for source in sources
            for g in load_yaml(built / source)["groups"]
            if g["name"].startswith(prefixes)
        ]
        (workdir / rule_file).write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    shutil.copy(test_file, workdir / test_file.name)
    result = run([binary("promtool"), "test", "rules", str(workdir / test_file.name)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
