"""Building the distribution and installing it into fresh virtual environments.

Used by tests/test_install.py and benchmarks/install_size.py. A wheel is built from a
copy of the sources (setuptools writes ``build/`` and ``*.egg-info`` next to the project
it builds; the working tree stays untouched), without build isolation: offline, with the
setuptools and wheel of this environment (the ``test`` extra installs them). Virtual
environments are made without pip: this interpreter's pip installs into them (``pip
--python``), so a site-packages holds exactly the distribution and its dependencies.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.cli import ROOT

#: What the product's wheel is built from.
SOURCES = ("gotthard", "pyproject.toml", "README.md")
#: The test doubles' distribution (its own project) and what its wheel is built from.
TESTING = ROOT / "testing"
TESTING_SOURCES = ("gotthard_testing", "pyproject.toml", "README.md")


class InstallError(RuntimeError):
    """pip or venv failed; the message holds their output."""


def _run(argv: list[str], timeout: float) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        raise InstallError(f"{' '.join(argv)} exited {result.returncode}:\n{result.stderr}")


def build_wheel(
    work: Path,
    timeout: float = 180.0,
    project: Path = ROOT,
    sources: tuple[str, ...] = SOURCES,
    distribution: str = "gotthard_sre",
) -> Path:
    """Build the wheel of *project* (default: the product; no dependencies) from its
    *sources* under *work*; its path."""
    src = work / "src"
    for name in sources:
        path = project / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            src.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, src / name)
    out = work / "wheels"
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    _run([*pip, "-w", str(out), str(src)], timeout)
    (wheel,) = out.glob(f"{distribution}-*.whl")
    return wheel


def make_venv(where: Path, wheel: Path, extras: str = "", timeout: float = 600.0) -> Path:
    """A fresh virtual environment at *where* with *wheel* (and ``[extras]``) and the
    dependencies they declare, from the package index; its ``python``."""
    _run([sys.executable, "-m", "venv", "--without-pip", str(where)], 60)
    python = where / "bin" / "python"
    requirement = f"gotthard-sre[{extras}] @ {wheel.as_uri()}" if extras else str(wheel)
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q"]
    _run([*pip, "--disable-pip-version-check", requirement], timeout)
    return python


def site_packages(python: Path) -> Path:
    """The purelib directory of the environment whose interpreter is *python*."""
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return Path(out.stdout.strip())


def tree_mb(path: Path) -> float:
    """Size of the files under *path* in MB (bytes as stored, links not followed)."""
    total = sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())
    return round(total / 1e6, 1)


def installed(python: Path) -> set[str]:
    """Normalised names of the distributions installed in that environment."""
    code = (
        "import importlib.metadata as m, re\n"
        "for d in m.distributions():\n"
        "    print(re.sub(r'[-_.]+', '-', d.metadata['Name']).lower())\n"
    )
    out = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, check=True, timeout=30
    )
    return set(out.stdout.split())
