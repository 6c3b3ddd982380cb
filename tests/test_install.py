"""The distribution installs per role.

* ``pyproject.toml``'s extras and :data:`gotthard.extras.EXTRAS` (what the missing-extra
  hint is computed from) say the same; ``test`` pulls in every role;
* a command whose optional library is missing says which extra installs it and exits 2,
  with no traceback;
* the test doubles are another distribution (``testing/``): the product's wheel holds no
  emulator, simulator, CRD copy or ``gotthard_testing`` module, no extra installs their
  libraries, and the two-site sandbox says what to install when they are missing;
* the base wheel alone, in a fresh virtual environment (dependencies from PyPI), is a
  working node exporter: every collector's ``--once`` output equals the development
  install's, a site file with DR schedules still loads, ``gotthard dr`` and
  ``gotthard dashboards`` name their extras, and its site-packages stays small.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gotthard import cli, extras
from tests.fakenvml import fakenvml
from tests.support.cli import ROOT, gotthard, missing_extra, run, run_in_process
from tests.support.golden import mask
from tests.support.install import (
    TESTING,
    TESTING_SOURCES,
    build_wheel,
    installed,
    make_venv,
    site_packages,
    tree_mb,
)

#: This module's tests run on one worker (make test: --dist loadgroup), so that
#: the wheels and the fresh base venv (module fixtures) are made once, not once per worker.
pytestmark = pytest.mark.xdist_group("install")

FIXTURES = ROOT / "tests" / "fixtures"
LUSTRE = FIXTURES / "lustre" / "oss-2.15"
#: Distributions only the control-plane roles install.
CONTROL_PLANE = {
    "kubernetes",
    "apscheduler",
    "sqlalchemy",
    "regopy",
    "opa-python-client",
    "grafanalib",
    "grpcio",
}
#: The libraries only the test doubles use.
DOUBLES_LIBRARIES = {"kmock", "aiohttp"}
#: Ceiling for the base install's site-packages (it measured about 17 MB; the full
#: install is over ten times that).
BASE_MB_CEILING = 30.0


def _name(requirement: str) -> str:
    """The normalised distribution name of a requirement (``APScheduler>=3`` -> ``apscheduler``)."""
    name = re.split(r"[\s<>=!~;\[@]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def pyproject() -> dict[str, Any]:
    """The ``[project]`` table of pyproject.toml."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def declared_extras() -> dict[str, set[str]]:
    """pyproject.toml's extras, each as the set of distribution names it installs (an
    extra naming the project's own extras is expanded)."""
    project = pyproject()
    table: dict[str, list[str]] = project["optional-dependencies"]

    def expand(extra: str) -> set[str]:
        names: set[str] = set()
        for requirement in table[extra]:
            if _name(requirement) == extras.DISTRIBUTION:
                inner = requirement.partition("[")[2].partition("]")[0]
                for part in inner.split(","):
                    names |= expand(part.strip())
            else:
                names.add(_name(requirement))
        return names

    assert project["name"] == extras.DISTRIBUTION
    return {extra: expand(extra) for extra in table}


# --- the extras table ------------------------------------------------------------------------


def test_the_hint_table_matches_pyproject() -> None:
    declared = declared_extras()
    assert {k: {_name(d) for d in v} for k, v in extras.EXTRAS.items()} == {
        extra: names for extra, names in declared.items() if extra in extras.EXTRAS
    }
    assert set(declared) - set(extras.EXTRAS) == {"all", "test"}
    # every optional distribution has its import name in the table
    assert set().union(*extras.EXTRAS.values()) == set(extras.MODULES.values())


def test_all_installs_every_role_and_test_installs_all() -> None:
    declared = declared_extras()
    roles = set(extras.EXTRAS) - {"pyslurm", "postgres"}
    assert declared["all"] == set().union(*(declared[role] for role in roles))
    assert declared["all"] <= declared["test"]


def test_no_extra_installs_the_test_doubles_libraries() -> None:
    declared = declared_extras()
    assert "sandbox" not in declared
    for extra, names in declared.items():
        assert names & (DOUBLES_LIBRARIES | {"gotthard-testing"}) == set(), extra
    testing = tomllib.loads((TESTING / "pyproject.toml").read_text(encoding="utf-8"))
    needs = {_name(r) for r in testing["project"]["dependencies"]}
    assert DOUBLES_LIBRARIES | {extras.DISTRIBUTION, "kubernetes-validate"} <= needs


def test_the_base_install_holds_no_control_plane_library() -> None:
    base = {_name(r) for r in pyproject()["dependencies"]}
    assert base == {"prometheus-client", "nvidia-ml-py", "pydantic", "pyyaml", "bcrypt"}


@pytest.mark.parametrize(
    ("module", "command", "extra"),
    [
        ("kubernetes", "dr", "dr"),
        ("kubernetes", "runbooks", "runbooks"),
        ("kubernetes", "audit", "audit"),
        ("regopy", "policy", "policy"),
        ("grafanalib", "dashboards", "dashboards"),
        ("grpc", "exporter", "kubelet"),
        ("kubernetes.client", None, "dr"),
        ("opa_client", "rules", "policy"),
    ],
)
def test_the_suggested_extra(module: str, command: str | None, extra: str) -> None:
    assert extras.extra_for(module, command) == extra


def test_a_library_that_is_not_optional_gets_no_hint() -> None:
    assert extras.missing_extra(ModuleNotFoundError("x", name="pydantic"), "dr") is None
    assert extras.extra_for("gotthard.nosuch") is None


# --- the product's wheel and the test doubles' wheel -------------------------------------------


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """The files of the product's wheel and of the test doubles' wheel, built from this
    tree (offline: no build isolation)."""
    work = tmp_path_factory.mktemp("wheels")
    product = build_wheel(work / "product")
    doubles = build_wheel(
        work / "testing",
        project=TESTING,
        sources=TESTING_SOURCES,
        distribution="gotthard_testing",
    )
    return {
        name: zipfile.ZipFile(path).namelist()
        for name, path in (("product", product), ("testing", doubles))
    }


def test_the_product_wheel_holds_no_test_double(wheels: dict[str, list[str]]) -> None:
    files = wheels["product"]
    assert "gotthard/cli.py" in files and "gotthard/sandbox/doubles.py" in files
    tops = {name.split("/")[0] for name in files}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"gotthard"}
    doubles = [
        name
        for name in files
        if "gotthard_testing" in name
        or name.endswith(("/kubeapi.py", "/velero_sim.py", "/controllers.py"))
        or "/crds/" in name
        or re.search(r"(velero\.io|karmada\.io)_.*\.yaml$", name)
    ]
    assert doubles == []


def test_the_testing_wheel_holds_the_doubles_and_the_crds(wheels: dict[str, list[str]]) -> None:
    files = set(wheels["testing"])
    crds = {path.name for path in (TESTING / "gotthard_testing" / "crds").glob("*.yaml")}
    assert len(crds) == 5
    expected = {
        "gotthard_testing/__init__.py",
        "gotthard_testing/kubeapi.py",
        "gotthard_testing/velero_sim.py",
        "gotthard_testing/controllers.py",
        "gotthard_testing/resources.py",
        "gotthard_testing/py.typed",
        *(f"gotthard_testing/crds/{name}" for name in crds),
    }
    assert expected <= files
    assert not any(name.startswith("gotthard/") for name in files)


def test_the_crds_are_stored_once_in_the_tree() -> None:
    """The emulator and the tests read the one copy under testing/."""
    tracked = subprocess.run(
        ["git", "ls-files", "*.yaml"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    crds = [path for path in tracked if re.search(r"(velero|karmada)\.io_[a-z]+\.yaml$", path)]
    assert sorted(crds) == sorted(
        f"testing/gotthard_testing/crds/{path.name}"
        for path in (TESTING / "gotthard_testing" / "crds").glob("*.yaml")
    )


def test_the_sites_sandbox_names_what_to_install_without_the_doubles(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``import gotthard_testing`` fails as where testing/ is not installed: ``sandbox up
    --sites`` exits 2 with one line naming the install command, before it starts anything."""
    monkeypatch.setitem(sys.modules, "gotthard_testing", None)
    directory = tmp_path / "sandbox"
    code = run_in_process("sandbox", "up", "--sites", "zurich,lugano", "--dir", str(directory))
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "pip install -e ./testing" in err and "gotthard-testing" in err
    assert not directory.exists()


# --- the guard in gotthard.cli, in this process ----------------------------------------------


@pytest.fixture
def without_kubernetes(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``import kubernetes`` fails as on a host without the extra (``None`` in
    ``sys.modules`` makes the import system raise ModuleNotFoundError)."""
    for name in [m for m in sys.modules if m == "kubernetes" or m.startswith("kubernetes.")]:
        monkeypatch.delitem(sys.modules, name)
    # the DR modules that import it are imported afresh (and fail) under the guard
    for name in [m for m in sys.modules if m.startswith("gotthard.dr.")]:
        parent, _, child = name.rpartition(".")
        monkeypatch.delattr(sys.modules[parent], child, raising=False)
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "kubernetes", None)
    yield


def test_a_missing_extra_is_one_line_and_exit_2(
    without_kubernetes: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_in_process("dr", "status") == 2
    err = capsys.readouterr().err
    assert err == missing_extra("dr", "kubernetes", "dr")


def test_an_unrelated_missing_module_is_not_explained_away(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "gotthard.dr.cli", None)
    assert cli.main(["dr", "status"]) == 2  # not run_in_process: it fails on a crash
    err = capsys.readouterr().err
    assert err.startswith("gotthard: internal error: ModuleNotFoundError: ")
    assert "gotthard.dr.cli" in err and "pip install" not in err


# --- the base wheel alone --------------------------------------------------------------------


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python`` of a fresh virtual environment holding the base wheel and its
    dependencies only."""
    work = tmp_path_factory.mktemp("install")
    wheel = build_wheel(work)
    return make_venv(work / "base", wheel)


def base_gotthard(
    python: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The installed ``gotthard`` script of that environment, outside the source tree."""
    child = {k: v for k, v in os.environ.items() if k not in ("GOTTHARD_CONFIG", "PYTHONPATH")}
    script = python.parent / "gotthard"
    return run([str(script), *args], env={**child, **(env or {})}, cwd=python.parent)


COLLECTORS: dict[str, list[str]] = {
    "slurm": ["--collectors", "slurm", "--slurm.backend", "cli"],
    "gpu": ["--collectors", "gpu"],
    "slingshot": ["--collectors", "slingshot", "--path.sysfs", str(FIXTURES / "slingshot/node")],
    "lustre": [
        "--collectors",
        "lustre",
        "--path.procfs",
        str(LUSTRE / "proc"),
        "--path.sysfs",
        str(LUSTRE / "sys"),
    ],
}


@pytest.mark.network
def test_the_base_install_is_the_distribution_without_control_plane_libraries(
    base: Path,
) -> None:
    names = installed(base)
    assert "gotthard-sre" in names
    assert names & CONTROL_PLANE == set()
    result = base_gotthard(base, "--version")
    assert (result.returncode, result.stdout.split()[0]) == (0, "gotthard"), result.stderr


@pytest.mark.network
@pytest.mark.parametrize("collector", list(COLLECTORS))
def test_each_collector_runs_from_the_base_install(
    base: Path, collector: str, tmp_path: Path
) -> None:
    site = tmp_path / "site.toml"
    site.write_text(f'[exporter.slurm]\nbin_dir = "{FIXTURES / "recorded-slurm-bin"}"\n')
    argv = ["--config", str(site), "exporter", "--once", *COLLECTORS[collector]]
    env: dict[str, str] = {}
    if collector == "gpu":  # the fake libnvidia-ml.so.1 with an 8-GPU H200 node
        so_path = fakenvml.build(tmp_path / "nvml")
        fixture = fakenvml.Fixture(tmp_path / "nvml.txt", fakenvml.h200_node(8))
        env = fakenvml.subprocess_env(so_path, fixture.path, {})
    installed_run = base_gotthard(base, *argv, env=env)
    assert installed_run.returncode == 0, installed_run.stderr
    assert "Traceback" not in installed_run.stderr
    development = gotthard(*argv, env=env, without=("GOTTHARD_CONFIG",))
    assert development.returncode == 0, development.stderr
    assert mask(installed_run.stdout) == mask(development.stdout)
    assert f'collector="{collector}"' in installed_run.stdout


@pytest.mark.network
def test_a_site_file_with_dr_schedules_loads_without_the_dr_extra(base: Path) -> None:
    example = ROOT / "docs" / "site.example.toml"
    assert "[[dr.schedules]]" in example.read_text(encoding="utf-8")
    result = base_gotthard(
        base, "--config", str(example), "exporter", "--once", *COLLECTORS["slingshot"]
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.network
@pytest.mark.parametrize(
    ("argv", "module", "extra"),
    [
        (["dr", "status"], "kubernetes", "dr"),
        (["dashboards", "build", "--out", "boards"], "grafanalib", "dashboards"),
    ],
    ids=["dr", "dashboards"],
)
def test_a_command_without_its_extra_names_it(
    base: Path, argv: list[str], module: str, extra: str
) -> None:
    result = base_gotthard(base, *argv)
    assert result.returncode == 2
    assert result.stderr == missing_extra(argv[0], module, extra)


@pytest.mark.network
def test_help_lists_a_command_whose_extra_is_missing(base: Path) -> None:
    result = base_gotthard(base, "--help")
    assert result.returncode == 0, result.stderr
    assert "(not installed: pip install 'gotthard-sre[dashboards]')" in result.stdout


@pytest.mark.network
def test_kubelet_attribution_without_grpcio_is_a_warning_not_a_crash(
    base: Path, tmp_path: Path
) -> None:
    path = tmp_path / "kubelet.sock"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(path))
        code = (
            "import sys\n"
            "from gotthard.exporters.gpu.attribution import PodResources, PodResourcesError\n"
            "try:\n"
            f"    PodResources({str(path)!r}).devices()\n"
            "except PodResourcesError as err:\n"
            "    print(err)\n"
        )
        result = run([str(base), "-c", code], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"reading {path} needs grpcio: pip install 'gotthard-sre[kubelet]'\n"


@pytest.mark.network
def test_the_base_install_is_small(base: Path) -> None:
    size = tree_mb(site_packages(base))
    print(f"base install site-packages: {size} MB")
    assert size < BASE_MB_CEILING
