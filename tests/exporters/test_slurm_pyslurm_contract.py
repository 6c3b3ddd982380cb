"""pyslurm backend contract: what it reads, checked against the pyslurm 25.11.2 sources.

pyslurm 25.11 cannot be built here (see docs/pyslurm.md), so these tests download the
25.11.2 sdist from PyPI (cached under ``~/.cache/gotthard/pyslurm``) and check that every
entry point and attribute the backend declares in its ``*_ATTRIBUTES``/entry-point
constants exists, on the right class, with the shape (types, units, parsing) the mapping
assumes. ``test_slurm_pyslurm.py`` runs the mapping on strict fakes built from the same
constants.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gotthard.slurm import pyslurm_backend as backend
from gotthard.slurm.fields import RESERVATION_FLAG_NAMES
from gotthard.slurm.pyslurm_backend import (
    ENTRY_POINTS,
    JOBS_LOAD,
    NODES_LOAD,
    PARTITIONS_LOAD,
    RESERVATIONS_LOAD,
    STATISTICS_ATTRIBUTES,
    STATISTICS_LOAD,
)

#: This module's tests run on one worker (make test: --dist loadgroup), so that
#: the pyslurm sdist (a module fixture) is downloaded and unpacked once, not once per worker.
pytestmark = pytest.mark.xdist_group("pyslurm-sdist")

# --- contract against the pyslurm 25.11.2 sources ----------------------------------------

PYSLURM_SDIST_VERSION = "25.11.2"
#: sha256 of pyslurm-25.11.2.tar.gz as published on PyPI (PyPI files never change).
PYSLURM_SDIST_SHA256 = "6e0e4bc639ea3177591b102b77c1dd8df55a9e411ac42ef339a4adb3908cca34"


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gotthard" / "pyslurm"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _download_sdist(cache: Path) -> Path:
    sdist = cache / f"pyslurm-{PYSLURM_SDIST_VERSION}.tar.gz"
    if sdist.exists() and _sha256(sdist) == PYSLURM_SDIST_SHA256:
        return sdist
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        # --no-binary pyslurm (not :all:): pip still prepares the sdist's metadata, and
        # :all: would also build setuptools and Cython from source for that (minutes).
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            "pyslurm",
            "--disable-pip-version-check",
            f"pyslurm=={PYSLURM_SDIST_VERSION}",
            "-d",
            tmp,
        ]
        result = subprocess.run(command, capture_output=True, text=True, timeout=900)
        if result.returncode != 0:
            pytest.fail(f"pip download failed:\n{result.stdout}\n{result.stderr}", pytrace=False)
        (downloaded,) = Path(tmp).glob("pyslurm-*.tar.gz")
        os.replace(downloaded, sdist)
    actual = _sha256(sdist)
    if actual != PYSLURM_SDIST_SHA256:
        pytest.fail(f"{sdist} has sha256 {actual}, expected {PYSLURM_SDIST_SHA256}")
    return sdist


def _extract(sdist: Path, cache: Path) -> Path:
    tree = cache / f"pyslurm-{PYSLURM_SDIST_VERSION}"
    marker = tree / ".gotthard-extracted"
    if marker.exists():
        return tree
    with tempfile.TemporaryDirectory(dir=cache) as tmp, tarfile.open(sdist) as archive:
        if hasattr(tarfile, "data_filter"):
            archive.extractall(tmp, filter="data")
        else:  # Python < 3.11.4
            for member in archive.getmembers():
                if member.name.startswith("/") or ".." in Path(member.name).parts:
                    raise RuntimeError(f"unsafe path in {sdist}: {member.name}")
            archive.extractall(tmp)  # members checked above
        shutil.rmtree(tree, ignore_errors=True)
        os.replace(Path(tmp) / tree.name, tree)
    marker.write_text(f"{PYSLURM_SDIST_SHA256}\n")
    return tree


@dataclass
class SourceClass:
    """A class as its .pyx/.pxd sources define it."""

    name: str
    bases: tuple[str, ...] = ()
    #: member name -> kinds: property, staticmethod, method, public (cdef public attribute)
    members: dict[str, set[str]] = field(default_factory=dict)
    #: member name -> source of its def(s), decorators and signature included
    bodies: dict[str, str] = field(default_factory=dict)
    #: class-level text of every file that defines it (docstrings of the .pxd included)
    text: str = ""


@dataclass
class SourceModule:
    classes: dict[str, SourceClass] = field(default_factory=dict)
    #: top-level function name -> its source
    functions: dict[str, str] = field(default_factory=dict)
    text: str = ""


_BUILTIN_BASES: dict[str, type] = {"object": object, "dict": dict, "list": list}
_CLASS_LINE = re.compile(r"^(?:cdef\s+)?class\s+(\w+)\s*(?:\(([^)]*)\))?\s*:")
_DEF_LINE = re.compile(r"^(?:async\s+)?(?:cpdef|cdef|def)\s+(?:[\w.*\[\]]+\s+)*?\**(\w+)\s*\(")
_PUBLIC_BLOCK = re.compile(r"^cdef\s+(?:public|readonly)\s*:\s*$")
_PUBLIC_LINE = re.compile(r"^cdef\s+(?:public|readonly)\s+(.+)$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _block(lines: list[str], start: int, indent: int) -> tuple[str, int]:
    """Lines from ``start`` to the next non-blank line indented at most ``indent``."""
    end = start + 1
    while end < len(lines):
        line = lines[end]
        stripped = line.strip()
        # comments may sit at any column inside a body (commented-out properties do)
        if stripped and not stripped.startswith("#") and _indent(line) <= indent:
            break
        end += 1
    return "\n".join(lines[start:end]), end


def _parse_source(text: str, module: SourceModule) -> None:
    module.text += text + "\n"
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.strip() or line.lstrip().startswith("#") or _indent(line) > 0:
            index += 1
            continue
        class_match = _CLASS_LINE.match(line)
        def_match = None if class_match else _DEF_LINE.match(line)
        if def_match:
            body, index = _block(lines, index, 0)
            module.functions[def_match.group(1)] = body
            continue
        if not class_match:
            index += 1
            continue
        name = class_match.group(1)
        bases = tuple(b.strip() for b in (class_match.group(2) or "").split(",") if b.strip())
        cls = module.classes.setdefault(name, SourceClass(name))
        cls.bases = cls.bases or bases
        body, end = _block(lines, index, 0)
        cls.text += body + "\n"
        _parse_class_body(lines[index + 1 : end], cls)
        index = end


def _parse_class_body(lines: list[str], cls: SourceClass) -> None:
    body_lines = [line for line in lines if line.strip()]
    if not body_lines:
        return
    member_indent = _indent(body_lines[0])
    decorators: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or _indent(line) != member_indent:
            index += 1
            continue
        if stripped.startswith("@"):
            decorators.append(stripped[1:].split("(")[0])
            index += 1
            continue
        if _PUBLIC_BLOCK.match(stripped):
            block, index = _block(lines, index, member_indent)
            for attr_line in block.splitlines()[1:]:
                words = re.findall(r"\w+", attr_line.split("#", 1)[0])
                if words:
                    cls.members.setdefault(words[-1], set()).add("public")
            continue
        public = _PUBLIC_LINE.match(stripped)
        if public:
            cls.members.setdefault(re.findall(r"\w+", public.group(1))[-1], set()).add("public")
            index += 1
            continue
        def_match = _DEF_LINE.match(stripped)
        if def_match:
            name = def_match.group(1)
            block, index = _block(lines, index, member_indent)
            kinds = cls.members.setdefault(name, set())
            if "property" in decorators:
                kinds.add("property")
            elif "staticmethod" in decorators:
                kinds.add("staticmethod")
            elif not any(d.endswith((".setter", ".deleter")) for d in decorators):
                kinds.add("method")
            prefix = "".join(f"@{d}\n" for d in decorators)
            cls.bodies[name] = cls.bodies.get(name, "") + prefix + block + "\n"
            decorators = []
            continue
        decorators = []
        index += 1


@dataclass
class PyslurmSource:
    """The pyslurm package in the sdist, resolved the way ``import pyslurm`` resolves names."""

    package: Path
    _modules: dict[Path, SourceModule] = field(default_factory=dict)

    def module(self, stem: Path) -> SourceModule:
        if stem not in self._modules:
            module = SourceModule()
            for suffix in (".pxd", ".pyx", ".py"):
                path = stem.with_suffix(suffix)
                if path.exists():
                    _parse_source(path.read_text(encoding="utf-8"), module)
            self._modules[stem] = module
        return self._modules[stem]

    def _export(self, package: Path, name: str) -> tuple[bool, Path, str]:
        """Where ``package``'s ``__init__.py`` gets ``name`` from: (is_package, path, name)."""
        tree = ast.parse((package / "__init__.py").read_text(encoding="utf-8"))
        for node in tree.body:
            if not isinstance(node, ast.ImportFrom):
                continue
            for alias in node.names:
                if (alias.asname or alias.name) != name:
                    continue
                if node.level:
                    base = package
                    for _ in range(node.level - 1):
                        base = base.parent
                else:
                    base = self.package.parent
                target = base.joinpath(*(node.module or "").split(".")) if node.module else base
                if (target / alias.name / "__init__.py").exists():
                    return True, target / alias.name, alias.name
                if (target / "__init__.py").exists():
                    return self._export(target, alias.name)
                if any(target.with_suffix(s).exists() for s in (".pyx", ".py", ".pxd")):
                    return False, target, alias.name
        raise LookupError(f"{package.relative_to(self.package.parent)} does not export {name}")

    def resolve(self, dotted: str) -> tuple[SourceModule, str, list[str]]:
        """``pyslurm.<dotted>`` → (module that defines it, its name there, the rest)."""
        parts = dotted.split(".")
        is_package, where, name = True, self.package, ""
        while is_package:
            if not parts:
                raise LookupError(f"pyslurm.{dotted} is a package")
            is_package, where, name = self._export(where, parts.pop(0))
        return self.module(where), name, parts

    def cls(self, dotted: str) -> SourceClass:
        module, name, rest = self.resolve(dotted)
        assert not rest, f"pyslurm.{dotted} is not a class"
        assert name in module.classes, f"pyslurm.{dotted}: no class {name} in its module"
        return module.classes[name]

    def find_class(self, name: str) -> SourceClass:
        found = []
        for path in self.package.rglob("*.p[yx][xd]"):
            if "slurm" in path.relative_to(self.package).parts[:1]:
                continue
            module = self.module(path.with_suffix(""))
            if name in module.classes:
                found.append(module.classes[name])
        unique = {id(c): c for c in found}
        assert len(unique) == 1, f"class {name} defined {len(unique)} times"
        return next(iter(unique.values()))

    def has_member(self, cls: SourceClass, member: str) -> bool:
        if member in cls.members:
            return True
        for base in cls.bases:
            builtin = _BUILTIN_BASES.get(base)
            if builtin is not None:
                if hasattr(builtin, member):
                    return True
            elif self.has_member(self.find_class(base), member):
                return True
        return False


@pytest.fixture(scope="module")
def pyslurm_source() -> PyslurmSource:
    cache = _cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    tree = _extract(_download_sdist(cache), cache)
    return PyslurmSource(tree / "pyslurm")


#: Which pyslurm class each ``*_ATTRIBUTES`` list of the backend is read from.
ATTRIBUTE_CONTRACT: dict[str, tuple[str, ...]] = {
    "JOB_ATTRIBUTES": ("Job",),
    "NODE_ATTRIBUTES": ("Node",),
    "PARTITION_ATTRIBUTES": ("Partition",),
    "STATISTICS_ATTRIBUTES": ("slurmctld.Statistics",),
    "RPC_ATTRIBUTES": ("slurmctld.RPCType", "slurmctld.RPCUser"),
    "GPU_ATTRIBUTES": ("db.GPU",),
    "TRES_ATTRIBUTES": ("db.TrackableResources",),
    "CONFIG_ATTRIBUTES": ("slurmctld.Config",),
    "RESERVATION_ATTRIBUTES": ("Reservation",),
}

#: What the mapping assumes about each value, as the 25.11.2 source spells it.
SHAPES: list[tuple[str, str, str]] = [
    # (class, member, regex its source must match)
    ("Job", "id", r"return self\.ptr\.job_id"),
    ("Job", "state", r"slurm_job_state_string\("),
    ("Job", "state_reason", r"state_desc[\s\S]*slurm_job_state_reason_string"),
    ("Job", "user_name", r"uid_to_name\(self\.ptr\.user_id"),
    ("Job", "cpus", r"u32_parse\(self\.ptr\.num_cpus, on_noval=1\)"),
    ("Job", "num_nodes", r"u32_parse\(self\.ptr\.num_nodes\)"),
    ("Job", "ntasks", r"u32_parse\(self\.ptr\.num_tasks, on_noval=1\)"),
    ("Job", "array_id", r"u32_parse\(self\.ptr\.array_job_id\)"),
    # u32_parse's zero_is_noval default: task 0 reads as None
    ("Job", "array_task_id", r"u32_parse\(self\.ptr\.array_task_id\)"),
    ("Job", "array_tasks_waiting", r"array_task_str[\s\S]*rindex\(\"%\"\)"),
    ("Job", "gpus", r"isinstance\(v, GPU\)"),
    ("Job", "gres_per_node", r"to_gres_dict\(self\.ptr\.tres_per_node\)"),
    ("Job", "tres_per_job", r"TrackableResources\.from_cstr\(self\.ptr\.tres_per_job\)"),
    ("Job", "tres_per_task", r"TrackableResources\.from_cstr\(self\.ptr\.tres_per_task\)"),
    ("Job", "tres_per_socket", r"TrackableResources\.from_cstr\(self\.ptr\.tres_per_socket\)"),
    ("Node", "state", r"slurm_node_state_string_complete\("),
    ("Node", "total_cpus", r"u16_parse\(self\.info\.cpus, on_noval=0\)"),
    ("Node", "allocated_cpus", r"u16_parse\(self\.info\.alloc_cpus, on_noval=0\)"),
    ("Node", "idle_cpus", r"self\.effective_cpus - self\.allocated_cpus"),
    ("Node", "real_memory", r"u64_parse\(self\.info\.real_memory\)"),
    ("Node", "allocated_memory", r"u64_parse\(self\.info\.alloc_memory, on_noval=0\)"),
    ("Node", "configured_gres", r"to_gres_dict\(self\.info\.gres\)"),
    ("Node", "allocated_gres", r"gres_from_tres_dict\(self\.allocated_tres\)"),
    ("Node", "partitions", r"to_list\(self\.info\.partitions\)"),
    ("Node", "cpu_load", r"u32_parse\(self\.info\.cpu_load\)[\s\S]*load / 100\.0"),
    ("Partition", "state", r"_partition_state_int_to_str\("),
    ("Partition", "is_default", r"PART_FLAG_DEFAULT"),
    ("slurmctld.Config", "version", r"to_unicode\(self\.ptr\.version\)"),
    ("Reservation", "name", r"to_unicode\(self\.info\.name\)"),
    ("Reservation", "is_active", r"start_time <= now and self\.info\.end_time >= now"),
    ("Reservation", "partition", r"to_unicode\(self\.info\.partition\)"),
    ("Reservation", "node_count", r"u32_parse\(self\.info\.node_cnt"),
    ("Reservation", "flags", r"return ReservationFlags\(self\.info\.flags\)"),
    ("Reservation", "reoccurrence", r"return self\._reoccurrence"),
]

#: Units and containers, from the class docstrings and parse_response().
STATISTICS_SHAPES: list[tuple[str, str]] = [
    *(
        (name, rf"{name} \(int\):\s+(?:Time|Mean time|Maximum time)[^:]*microseconds")
        for name in (
            "schedule_cycle_last",
            "schedule_cycle_max",
            "schedule_cycle_mean",
            "backfill_cycle_mean",
        )
    ),
    ("backfill_cycle_last", r"backfill_cycle_last \(int\):\s+Time in microseconds"),
    ("rpcs_by_type", r"out\.rpcs_by_type = RPCTypeStatistics\.from_ptr"),
    ("rpcs_by_user", r"out\.rpcs_by_user = RPCUserStatistics\.from_ptr"),
    ("schedule_cycle_mean", r"out\.schedule_cycle_mean = int\(ptr\.schedule_cycle_sum / "),
    ("backfill_mean_depth", r"out\.backfill_mean_depth = int\(ptr\.bf_depth_sum / "),
]


#: The name scontrol prints for each ``RESERVE_FLAG_<bit>`` (libslurm's
#: ``reservation_flags_string``; USER_DEL, SKIP and SCHED_FAILED are newer than Slurm 22.05
#: and printed by their scontrol option names).
SCONTROL_RESERVATION_FLAGS = {
    "MAINT": "MAINT",
    "FLEX": "FLEX",
    "OVERLAP": "OVERLAP",
    "IGN_JOBS": "IGNORE_JOBS",
    "SPEC_NODES": "SPEC_NODES",
    "ALL_NODES": "ALL_NODES",
    "ANY_NODES": "ANY_NODES",
    "STATIC": "STATIC",
    "PART_NODES": "PART_NODES",
    "PURGE_COMP": "PURGE_COMP",
    "NO_HOLD_JOBS": "NO_HOLD_JOBS_AFTER_END",
    "MAGNETIC": "MAGNETIC",
    "USER_DEL": "USER_DELETE",
    "SKIP": "SKIP",
    "SCHED_FAILED": "SCHED_FAILED",
}


@pytest.mark.network
class TestContractWithPyslurm25112:
    def test_the_sdist_is_the_series_the_backend_targets(
        self, pyslurm_source: PyslurmSource
    ) -> None:
        module, _, _ = pyslurm_source.resolve("__version__")
        assert re.search(rf'__version__ = "{re.escape(PYSLURM_SDIST_VERSION)}"', module.text)
        assert PYSLURM_SDIST_VERSION.startswith(backend.PYSLURM_SERIES + ".")

    @pytest.mark.parametrize("path", ENTRY_POINTS)
    def test_entry_point_exists_and_takes_no_required_argument(
        self, pyslurm_source: PyslurmSource, path: str
    ) -> None:
        module, name, rest = pyslurm_source.resolve(path)
        if rest:
            assert rest == ["load"], path
            cls = module.classes[name]
            assert "staticmethod" in cls.members.get("load", set()), f"{path} not a staticmethod"
            source = cls.bodies["load"]
        else:
            assert name in module.functions, f"{path} is not a module-level function"
            source = module.functions[name]
        signature = re.search(r"def\s+\w+\s*\(([^)]*)\)", source)
        assert signature is not None
        params = [p.strip() for p in signature.group(1).split(",") if p.strip()]
        required = [p for p in params if "=" not in p and not p.startswith("*")]
        assert required == [], f"{path} requires {required}"

    def test_rpc_error_is_the_exception_the_loads_raise(
        self, pyslurm_source: PyslurmSource
    ) -> None:
        module, name, rest = pyslurm_source.resolve(backend.ERROR_CLASS)
        assert (name, rest) == ("RPCError", [])
        assert re.search(r"^class RPCError\(PyslurmError\):", module.text, re.MULTILINE)
        assert re.search(r"^class PyslurmError\(Exception\):", module.text, re.MULTILINE)
        assert re.search(r"raise RPCError\(errno\)", module.functions["verify_rpc"])
        for path in (JOBS_LOAD, NODES_LOAD, PARTITIONS_LOAD, STATISTICS_LOAD, RESERVATIONS_LOAD):
            load_module, cls_name, _ = pyslurm_source.resolve(path)
            assert "verify_rpc(" in load_module.classes[cls_name].bodies["load"], path
        for attribute in backend.MODULE_ATTRIBUTES:
            pyslurm_source.resolve(attribute)

    @pytest.mark.parametrize("path", [JOBS_LOAD, NODES_LOAD, PARTITIONS_LOAD, RESERVATIONS_LOAD])
    def test_collections_are_read_through_values(
        self, pyslurm_source: PyslurmSource, path: str
    ) -> None:
        cls = pyslurm_source.cls(path.rsplit(".", 1)[0])
        assert "MultiClusterMap" in cls.bases
        assert pyslurm_source.has_member(cls, backend.COLLECTION_METHOD)

    def test_every_attribute_list_has_a_contract(self) -> None:
        declared = {name for name in dir(backend) if name.endswith("_ATTRIBUTES")}
        assert declared - {"MODULE_ATTRIBUTES"} == set(ATTRIBUTE_CONTRACT)

    @pytest.mark.parametrize(
        ("constant", "class_path"),
        [(c, p) for c, paths in ATTRIBUTE_CONTRACT.items() for p in paths],
    )
    def test_attributes_are_readable_on_the_right_class(
        self, pyslurm_source: PyslurmSource, constant: str, class_path: str
    ) -> None:
        cls = pyslurm_source.cls(class_path)
        missing = []
        for attribute in getattr(backend, constant):
            kinds = cls.members.get(attribute, set())
            if not kinds & {"property", "public"}:
                missing.append(f"{attribute} ({', '.join(sorted(kinds)) or 'absent'})")
        assert missing == [], f"pyslurm.{class_path} lacks readable {missing}"

    @pytest.mark.parametrize(("class_path", "member", "pattern"), SHAPES)
    def test_value_shapes(
        self, pyslurm_source: PyslurmSource, class_path: str, member: str, pattern: str
    ) -> None:
        body = pyslurm_source.cls(class_path).bodies[member]
        assert re.search(pattern, body), f"pyslurm.{class_path}.{member}:\n{body}"

    @pytest.mark.parametrize(("member", "pattern"), STATISTICS_SHAPES)
    def test_statistics_units_and_containers(
        self, pyslurm_source: PyslurmSource, member: str, pattern: str
    ) -> None:
        module, _, _ = pyslurm_source.resolve("slurmctld.Statistics")
        assert member in STATISTICS_ATTRIBUTES
        assert re.search(pattern, module.text), f"{member}: {pattern}"

    def test_rpc_dicts_are_keyed_by_name_with_microsecond_totals(
        self, pyslurm_source: PyslurmSource
    ) -> None:
        by_type = pyslurm_source.cls("slurmctld.RPCTypeStatistics")
        by_user = pyslurm_source.cls("slurmctld.RPCUserStatistics")
        assert by_type.bases == ("dict",)
        assert by_user.bases == ("dict",)
        assert "out[stats.name] = stats" in by_type.bodies["from_ptr"]
        assert "out[key] = stats" in by_user.bodies["from_ptr"]
        for cls_path in ("slurmctld.RPCType", "slurmctld.RPCUser"):
            text = pyslurm_source.cls(cls_path).text
            assert re.search(r"time \(int\):[^:]*unit is\s+microseconds", text), cls_path

    def test_gres_helpers_give_the_dict_keys_the_mapping_expects(
        self, pyslurm_source: PyslurmSource
    ) -> None:
        cstr = pyslurm_source.module(pyslurm_source.package / "utils" / "cstr")
        to_gres_dict = cstr.functions["to_gres_dict"]
        assert 'gres_delim = "gres:"' in to_gres_dict  # only "gres:" is stripped
        assert 'name_and_typ = f"{name}:{typ}" if typ else name' in to_gres_dict
        assert '"count": int(cnt)' in to_gres_dict  # IDX form: {"count", "indexes"}
        helpers = pyslurm_source.module(pyslurm_source.package / "utils" / "helpers")
        assert 'gres_prefix = "gres/"' in helpers.functions["gres_from_tres_dict"]
        tres = pyslurm_source.cls("db.TrackableResources")
        assert re.search(r'tres\.name == "gpu" or tres\.name\.startswith\("gpu:"\)', tres.text)
        assert "self.gres[gres.name] = gres" in tres.text
        gpu = pyslurm_source.cls("db.GPU")
        assert 'f"gpu:{self.type}" if self.type else "gpu"' in gpu.bodies["name"]

    def test_reservation_flag_names_are_scontrols_for_the_same_bit(
        self, pyslurm_source: PyslurmSource
    ) -> None:
        """Each ``ReservationFlags`` member is named as scontrol names its Slurm bit."""
        text = pyslurm_source.cls("ReservationFlags").text
        members = dict(re.findall(r"^\s+(\w+)\s+=\s+slurm\.RESERVE_FLAG_(\w+)", text, re.M))
        assert set(members) == set(RESERVATION_FLAG_NAMES)
        for member, bit in members.items():
            assert RESERVATION_FLAG_NAMES[member] == SCONTROL_RESERVATION_FLAGS[bit], member

    def test_reoccurrence_is_a_str_enum_taken_out_of_the_flags(
        self, pyslurm_source: PyslurmSource
    ) -> None:
        cls = pyslurm_source.cls("ReservationReoccurrence")
        assert cls.bases == ("SlurmEnum",)
        names = re.findall(r'^\s+(\w+)\s+=\s+"(\w+)"', cls.text, re.M)
        # str() of a member is the name scontrol prints; NO is the one the backend skips
        assert ("NO", "NO") in names and len(names) > 1
        assert all(name == value for name, value in names)
        from_ptr = pyslurm_source.cls("Reservation").bodies["from_ptr"]
        assert "wrap.info.flags &= ~wrap.reoccurrence._flag" in from_ptr
        assert re.search(
            r"class SlurmEnum\(str, Enum",
            pyslurm_source.module(pyslurm_source.package / "utils" / "enums").text,
        )
        assert re.search(
            r"class SlurmFlag\(Flag,",
            pyslurm_source.module(pyslurm_source.package / "utils" / "enums").text,
        )

    def test_no_fair_share_call_is_bound(self, pyslurm_source: PyslurmSource) -> None:
        """The backend exports no fair-share tree because pyslurm binds no call of it; once
        a release does, this fails and the backend can read it (docs/pyslurm.md)."""
        sources = [
            path.read_text(encoding="utf-8")
            for suffix in ("pyx", "pxd", "pxi", "py")
            for path in pyslurm_source.package.rglob(f"*.{suffix}")
        ]
        assert len(sources) > 20
        assert not any(backend.SHARES_RPC in text for text in sources)
        assert not any("shares_request_msg" in text for text in sources)
