"""The shape of the package: readable modules, no import cycles, lean roles.

* no module over 900 lines;
* no cycle among the package's imports, those inside functions included (a function-level
  import loads a heavy library late; it must not hide a cycle); imports under
  ``if TYPE_CHECKING`` are for annotations only and are left out;
* ``gotthard.monitoring`` depends only downward, layer by layer (its package docstring
  lists the layers);
* ``gotthard exporter`` with every collector loads none of the control plane's
  libraries: a node exporter does not pay for kubernetes, APScheduler, SQLAlchemy,
  regopy, grafanalib or grpcio (the kubelet client loads grpcio itself, when used), nor
  for the monitoring code (only the ``[monitoring]`` settings model the site file needs);
* one TOML reader (``gotthard/config.py``) and one Kubernetes client factory
  (``gotthard/kube.py``).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import ROOT

PACKAGE = ROOT / "gotthard"
FIXTURES = ROOT / "tests" / "fixtures"
HEAVY = ("kubernetes", "apscheduler", "sqlalchemy", "regopy", "grafanalib", "grpc")
#: The monitoring modules a site file's validation loads; the exporter loads no other.
MONITORING_FOR_CONFIG = ("gotthard.monitoring", "gotthard.monitoring.settings")


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _type_checking_only(tree: ast.AST) -> set[int]:
    """Ids of the nodes inside an ``if TYPE_CHECKING:`` block."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            inside.update(id(sub) for stmt in node.body for sub in ast.walk(stmt))
    return inside


def _parse(path: Path) -> ast.AST:
    """``ast.parse``, retried: CPython 3.11 before 3.11.8 keeps one AST recursion counter
    for all threads and can raise a spurious "AST constructor recursion depth mismatch"
    SystemError when another thread builds an AST at the same time (CPython gh-106905),
    as in a pytest-xdist worker."""
    source = path.read_text(encoding="utf-8")
    for _ in range(4):
        try:
            return ast.parse(source, filename=str(path))
        except SystemError:
            continue
    return ast.parse(source, filename=str(path))


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Package modules *name* imports anywhere in its code (at module level or inside a
    function; ``if TYPE_CHECKING`` excluded), relative imports resolved."""
    tree = _parse(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    annotations_only = _type_checking_only(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in annotations_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from package import submodule`` depends on the submodule alone
            names = [f"{base}.{alias.name}" for alias in node.names]
            found.update(n for n in names if n in known)
            if any(n not in known for n in names):
                found.add(base)
    return {m for m in found if m in known and m != name}


def test_no_module_is_over_900_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for path in modules().values()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > 900
    }
    assert long == {}


def import_graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports(name, path, set(found)) for name, path in found.items()}


def test_no_import_cycles() -> None:
    graph = import_graph()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == [], "\n".join(" -> ".join(c) for c in cycles)


#: ``gotthard.monitoring``'s layers, lowest first, as its package docstring lists them;
#: each names the modules (or sub-packages) of the layer.
MONITORING_LAYERS: tuple[tuple[str, ...], ...] = (
    ("thresholds", "rule_model", "shared", "documents"),
    ("components", "settings"),
    ("rules", "dcgm"),
    ("dashboards",),
    ("alertmanager",),
    ("runbook_pages",),
    ("deliver",),
    ("cli", "cli_common", "rules_cli", "thresholds_cli", "migrate_names"),
)


def _monitoring_layer(module: str) -> int | None:
    """The layer of a ``gotthard.monitoring`` module; None outside the package."""
    prefix = "gotthard.monitoring."
    if not module.startswith(prefix):
        return None
    part = module.removeprefix(prefix).split(".")[0]
    for level, members in enumerate(MONITORING_LAYERS):
        if part in members:
            return level
    raise AssertionError(f"{module}: in no layer of MONITORING_LAYERS")


def test_monitoring_depends_only_downward() -> None:
    upward = []
    for name, targets in import_graph().items():
        level = _monitoring_layer(name)
        if level is None:
            continue
        for target in sorted(targets):
            other = _monitoring_layer(target)
            if other is not None and other > level:
                upward.append(f"{name} -> {target}")
    assert upward == [], "\n".join(upward)


def test_one_toml_reader_and_one_kubernetes_client_factory() -> None:
    readers, factories = [], []
    for path in modules().values():
        text = path.read_text(encoding="utf-8")
        rel = str(path.relative_to(ROOT))
        if "tomllib" in text:
            readers.append(rel)
        if any(
            call in text
            for call in ("new_client_from_config", "load_kube_config", "load_incluster_config")
        ):
            factories.append(rel)
    assert readers == ["gotthard/config.py"]
    assert factories == ["gotthard/kube.py"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--collectors", "slurm", "--slurm.backend", "cli"],
        ["--collectors", "gpu"],
        ["--collectors", "slingshot", "--path.sysfs", str(FIXTURES / "slingshot" / "node")],
        [
            "--collectors",
            "lustre",
            "--path.procfs",
            str(FIXTURES / "lustre" / "oss-2.15" / "proc"),
            "--path.sysfs",
            str(FIXTURES / "lustre" / "oss-2.15" / "sys"),
        ],
    ],
    ids=["slurm", "gpu", "slingshot", "lustre"],
)
def test_the_exporter_loads_no_control_plane_library(tmp_path: Path, argv: list[str]) -> None:
    site = tmp_path / "site.toml"
    site.write_text(f'[exporter.slurm]\nbin_dir = "{FIXTURES / "recorded-slurm-bin"}"\n')
    code = (
        "import json, sys\n"
        "from gotthard.cli import main\n"
        f"status = main(['--config', {str(site)!r}, 'exporter', '--once', *{argv!r}])\n"
        f"loaded = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "loaded += sorted(m for m in sys.modules if m.startswith('gotthard.monitoring')\n"
        f"                 and m not in {MONITORING_FOR_CONFIG!r})\n"
        "print(json.dumps({'status': status, 'loaded': loaded}), file=sys.stderr)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    report = json.loads(result.stderr.strip().splitlines()[-1])
    assert report == {"status": 0, "loaded": []}, result.stderr
