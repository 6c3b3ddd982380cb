"""Build and drive the FAKE ``libnvidia-ml.so.1`` (``fake_nvml.c``) from Python tests.

The library is a test double of NVIDIA's NVML: no GPU, no driver. The real ``pynvml``
(nvidia-ml-py) loads it, either in-process (:func:`load_into_pynvml`) or, in a subprocess,
through ``LD_LIBRARY_PATH`` (:func:`subprocess_env`). What it reports comes from a fixture
file named by ``FAKE_NVML_FIXTURE``, written with :class:`Fixture`. Format: ``README.md``.

    so = build(tmp_dir)                       # gcc against nvml.h, -Werror
    fx = Fixture(tmp_dir / "nvml.txt", h200_node(8))
    lib = load_into_pynvml(so)                # pynvml now calls the fake
    ...
    unload()                                  # pynvml as it was before
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pynvml

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "fake_nvml.c"
SONAME = "libnvidia-ml.so.1"
ENV_VAR = "FAKE_NVML_FIXTURE"

#: Compiler flags. ``NVML_NO_UNVERSIONED_FUNC_DEFS`` stops nvml.h from #defining
#: ``nvmlInit`` -> ``nvmlInit_v2`` etc., so each function is defined under its exact symbol
#: name and checked against that symbol's prototype; ``-Wmissing-prototypes`` turns a
#: misspelt NVML name (one nvml.h does not declare) into an error.
CFLAGS: tuple[str, ...] = (
    "-shared",
    "-fPIC",
    "-O2",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-Wmissing-prototypes",
    "-Wstrict-prototypes",
    "-DNVML_NO_UNVERSIONED_FUNC_DEFS",
    f"-Wl,-soname,{SONAME}",
)

FixtureValue = str | int | float | bool

# NVML constants used by the fixture helpers (same values as pynvml / nvml.h).
XID_EVENTS = pynvml.nvmlEventTypeXidCriticalError
H200_EVENTS = (
    pynvml.nvmlEventTypeSingleBitEccError
    | pynvml.nvmlEventTypeDoubleBitEccError
    | pynvml.nvmlEventTypePState
    | pynvml.nvmlEventTypeXidCriticalError
    | pynvml.nvmlEventTypeClock
    | pynvml.nvmlEventTypeDramRetirementEvent
    | pynvml.nvmlEventTypeDramRetirementFailure
)


class BuildError(RuntimeError):
    """The fake library did not compile (message holds the compiler output)."""


# --------------------------------------------------------------------------------------
# Build
# --------------------------------------------------------------------------------------


def _cuda_major(include_dir: Path) -> int:
    match = re.fullmatch(r"cu(\d+)", include_dir.parent.name)
    return int(match.group(1)) if match else -1


def header_dir() -> Path:
    """The ``include`` directory holding NVIDIA's ``nvml.h`` from the nvidia-nvml-dev wheel.

    Found through the ``nvidia`` namespace package (``nvidia/cu13/include/nvml.h``); the
    newest CUDA major wins if several are installed.
    """
    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    found = {h.parent for root in roots for h in Path(root).glob("*/include/nvml.h")}
    found |= {h.parent for root in roots for h in Path(root).glob("include/nvml.h")}
    if not found:
        raise FileNotFoundError(
            "nvml.h not found under the 'nvidia' package; pip install nvidia-nvml-dev"
        )
    return max(found, key=lambda d: (_cuda_major(d), str(d)))


def compile_command(out: Path, cc: str | None = None) -> list[str]:
    """The gcc command line that builds the fake into ``out``.

    ``$CC`` picks the compiler; ``$FAKE_NVML_CFLAGS`` adds flags (e.g.
    ``-fsanitize=address,undefined -g`` for a sanitizer run).
    """
    return [
        cc or os.environ.get("CC", "gcc"),
        *CFLAGS,
        *shlex.split(os.environ.get("FAKE_NVML_CFLAGS", "")),
        "-o",
        str(out),
        str(SOURCE),
        f"-I{header_dir()}",
        "-lpthread",
    ]


_build_lock = threading.Lock()


def build(out_dir: Path, *, force: bool = False) -> Path:
    """Compile ``fake_nvml.c`` to ``out_dir/libnvidia-ml.so.1`` and return that path.

    Skips the compiler when the library is newer than the source and was built with the
    same command (kept in ``libnvidia-ml.so.1.cmd``), unless ``force``. Writes to a
    temporary name and renames, so a library already mapped by a process is never
    overwritten in place.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    so_path = out_dir / SONAME
    stamp = out_dir / f"{SONAME}.cmd"
    cc = os.environ.get("CC", "gcc")
    wanted = shlex.join(compile_command(so_path, cc))
    with _build_lock:
        if (
            not force
            and so_path.exists()
            and so_path.stat().st_mtime_ns >= SOURCE.stat().st_mtime_ns
            and stamp.exists()
            and stamp.read_text() == wanted
        ):
            return so_path
        if shutil.which(cc) is None:
            raise BuildError(f"C compiler {cc!r} not found (needed to build the fake NVML)")
        tmp = out_dir / f".{SONAME}.{os.getpid()}.tmp"
        result = subprocess.run(
            compile_command(tmp, cc), capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise BuildError(f"building the fake NVML failed:\n{result.stderr}")
        os.replace(tmp, so_path)
        stamp.write_text(wanted)
    return so_path


def _object_command(out: Path, cc: str) -> list[str]:
    """``compile_command`` stopped before linking: ``fake_nvml.o`` for the variants."""
    link_only = {"-shared", f"-Wl,-soname,{SONAME}", "-lpthread"}
    command = compile_command(out, cc)
    return [command[0], "-c", *(flag for flag in command[1:] if flag not in link_only)]


def _link_command(out: Path, obj: Path, script: Path, cc: str) -> list[str]:
    return [
        cc,
        "-shared",
        f"-Wl,-soname,{SONAME}",
        f"-Wl,--version-script={script}",
        *shlex.split(os.environ.get("FAKE_NVML_CFLAGS", "")),
        "-o",
        str(out),
        str(obj),
        "-lpthread",
    ]


def _run(command: list[str], what: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BuildError(f"{what} failed:\n{shlex.join(command)}\n{result.stderr}")


def build_without(out_dir: Path, symbols: Iterable[str]) -> dict[str, Path]:
    """One fake library per symbol, each lacking exactly that symbol; ``{symbol: path}``.

    ``fake_nvml.c`` is compiled once to an object file; each variant is only a link of
    that object with a linker version script that makes the one symbol local, so it is
    missing from the library's dynamic symbol table. ``dlsym`` then fails for it and
    pynvml's own lookup (``_nvmlGetFunctionPointer``) raises FunctionNotFound, as with a
    driver that predates the function. Links run in parallel; a variant newer than the
    object is reused. Each variant lives in its own directory as ``libnvidia-ml.so.1``,
    so it is a distinct library (with its own state) when loaded by path.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cc = os.environ.get("CC", "gcc")
    if shutil.which(cc) is None:
        raise BuildError(f"C compiler {cc!r} not found (needed to build the fake NVML)")
    obj, stamp = out_dir / "fake_nvml.o", out_dir / "fake_nvml.o.cmd"
    wanted = shlex.join(_object_command(obj, cc))
    with _build_lock:
        fresh = (
            obj.exists()
            and obj.stat().st_mtime_ns >= SOURCE.stat().st_mtime_ns
            and stamp.exists()
            and stamp.read_text() == wanted
        )
        if not fresh:
            tmp = out_dir / f".fake_nvml.{os.getpid()}.o"
            _run(_object_command(tmp, cc), "compiling the fake NVML")
            os.replace(tmp, obj)
            stamp.write_text(wanted)

    def link(symbol: str) -> Path:
        if not re.fullmatch(r"\w+", symbol):
            raise ValueError(f"not a symbol name: {symbol!r}")
        where = out_dir / f"without-{symbol}"
        where.mkdir(exist_ok=True)
        so_path = where / SONAME
        if so_path.exists() and so_path.stat().st_mtime_ns >= obj.stat().st_mtime_ns:
            return so_path
        script = where / "hide.map"
        # an exact name wins over the wildcard: only this symbol becomes local
        script.write_text(f"{{ global: *; local: {symbol}; }};\n")
        tmp = where / f".{SONAME}.{os.getpid()}.tmp"
        _run(_link_command(tmp, obj, script, cc), f"linking the fake NVML without {symbol}")
        os.replace(tmp, so_path)
        return so_path

    wanted_symbols = sorted(set(symbols))
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        paths = list(pool.map(link, wanted_symbols))
    return dict(zip(wanted_symbols, paths, strict=True))


# --------------------------------------------------------------------------------------
# Fixture file
# --------------------------------------------------------------------------------------


def err(code: int) -> str:
    """Fixture value making the call return NVML error ``code`` (``err(3)`` = NotSupported)."""
    return f"ERR:{int(code)}"


def procs_value(items: Iterable[tuple[int, ...]]) -> str:
    """``<i>.procs`` value from ``(pid, used_bytes)`` or ``(pid, used_bytes, gi, ci)``.

    ``used_bytes`` may be ``None``: NVML_VALUE_NOT_AVAILABLE (pynvml reports ``None``).
    """
    parts = []
    for item in items:
        pid, used, *rest = item
        text = f"{pid}:{'na' if used is None else used}"
        if rest:
            gi, ci = rest
            text += f":{gi}:{ci}"
        parts.append(text)
    return ",".join(parts)


def _format_value(key: str, value: FixtureValue) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    text = str(value)
    if "\n" in text or "\r" in text:
        raise ValueError(f"fixture value for {key!r} has a line break")
    return text.strip()


def _check_key(key: str) -> None:
    if not key or key.startswith("#") or any(c.isspace() for c in key):
        raise ValueError(f"bad fixture key {key!r}")


class Fixture:
    """The fixture file the fake reads (its path goes in ``FAKE_NVML_FIXTURE``).

    Every change rewrites the whole file atomically (temporary file + rename) and gives it
    a strictly increasing mtime, so the fake, which re-parses only when the file's
    identity/size/mtime change, always sees the new content on its next call.
    """

    _clock_lock = threading.Lock()
    _last_mtime_ns = 0

    def __init__(self, path: Path | str, lines: Mapping[str, FixtureValue] | None = None) -> None:
        self.path = Path(path)
        self._lines: dict[str, str] = {}
        #: Set by the ``fake_nvml`` pytest fixture: the loaded library's helper calls.
        self.lib: FakeLib | None = None
        self.write(lines or {})

    @property
    def lines(self) -> dict[str, str]:
        """The current ``key -> value`` lines (a copy)."""
        return dict(self._lines)

    def write(self, lines: Mapping[str, FixtureValue]) -> None:
        """Replace the whole fixture with ``lines``."""
        new = {}
        for key, value in lines.items():
            _check_key(key)
            new[key] = _format_value(key, value)
        self._lines = new
        self._flush()

    def update(self, changes: Mapping[str, FixtureValue | None]) -> None:
        """Set some keys; a value of ``None`` removes the key (its call -> NotSupported)."""
        new = dict(self._lines)
        for key, value in changes.items():
            _check_key(key)
            if value is None:
                new.pop(key, None)
            else:
                new[key] = _format_value(key, value)
        self._lines = new
        self._flush()

    def add_event(self, gpu: int, xid: int, *, gi: int | None = None, ci: int | None = None) -> int:
        """Append XID event ``event.<n> gpu:xid[:gi:ci]``; returns its number ``n``."""
        numbers = [int(k.split(".", 1)[1]) for k in self._lines if re.fullmatch(r"event\.\d+", k)]
        n = max(numbers, default=0) + 1
        value = f"{gpu}:{xid}"
        if gi is not None or ci is not None:
            value += f":{0xFFFFFFFF if gi is None else gi}:{0xFFFFFFFF if ci is None else ci}"
        self.update({f"event.{n}": value})
        return n

    def _flush(self) -> None:
        text = "# FAKE NVML fixture (tests/fakenvml); not from a GPU\n" + "".join(
            f"{key} {value}\n" for key, value in self._lines.items()
        )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        with Fixture._clock_lock:
            stamp = max(time.time_ns(), Fixture._last_mtime_ns + 1_000)
            Fixture._last_mtime_ns = stamp
        os.utime(tmp, ns=(stamp, stamp))
        os.replace(tmp, self.path)


# --------------------------------------------------------------------------------------
# Ready-made fixtures
# --------------------------------------------------------------------------------------

_H200_BUS = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
GIB = 1 << 30
MIB = 1 << 20


def _gpu_uuid(i: int, tag: int = 0) -> str:
    return f"GPU-fa4e0000-{tag:04x}-4000-8000-{i:012x}"


def h200_node(n: int = 8) -> dict[str, FixtureValue]:
    """An HGX H200 node: ``n`` GPUs, every implemented call supported, GPM on, MIG off."""
    lines: dict[str, FixtureValue] = {
        "count": n,
        "driver_version": "570.133.20",
        "nvml_version": "12.570.133.20",
        "cuda_version": 12080,
    }
    for i in range(n):
        bus = _H200_BUS[i] if i < len(_H200_BUS) else 0xE0 + i
        p = f"{i}."
        lines.update(
            {
                p + "name": "NVIDIA H200",
                p + "uuid": _gpu_uuid(i, 0x200),
                p + "pci_bus_id": f"00000000:{bus:02X}:00.0",
                p + "pci_device_id": 0x233510DE,
                p + "minor": i,
                p + "util.gpu": 90 - i,
                p + "util.memory": 40 + i,
                p + "memory.total": 143771 * MIB,
                p + "memory.reserved": 540 * MIB,
                p + "memory.used": (i + 1) * GIB,
                p + "power_mw": 400_000 + 1_000 * i,
                p + "power_limit_mw": 700_000,
                p + "energy_mj": 5_000_000_000 + i,
                p + "temp.gpu": 40 + i,
                p + "temp.gpu_max": 48 + i,
                p + "clock.graphics": 1980,
                p + "clock.sm": 1980,
                p + "clock.mem": 3201,
                p + "clock.video": 1755,
                p + "clocks_event_reasons": "0x0",
                p + "ecc.corrected": 0,
                p + "ecc.uncorrected": 0,
                p + "ecc.aggregate.corrected": 0,
                p + "ecc.aggregate.uncorrected": 0,
                p + "remapped_rows": "0,0,0,0",
                p + "pcie_replay": 0,
                p + f"field.{pynvml.NVML_FI_DEV_MEMORY_TEMP}": 45 + i,
                p + f"field.{pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT}": 18,
                p + f"field.{pynvml.NVML_FI_DEV_POWER_INSTANT}": 400_000 + 1_000 * i,
                p + "procs": "",
                p + "supported_events": H200_EVENTS,
                p + "mig.mode": 0,
                p + "gpm.supported": 1,
                p + f"gpm.{pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL}": 88.5,
                p + f"gpm.{pynvml.NVML_GPM_METRIC_SM_UTIL}": 75.0,
                p + f"gpm.{pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL}": 52.25,
                p + f"gpm.{pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL}": 31.0,
            }
        )
        for policy in (0, 1, 2, 3, 4, 5, 10, 11):
            lines[p + f"violation.{policy}"] = 0
    return lines


def with_traffic(lines: dict[str, FixtureValue], links: int) -> dict[str, FixtureValue]:
    """``lines`` (e.g. ``h200_node``) with, on every GPU, ``links`` NVLinks with traffic
    (tx ``1000 + link``, rx ``2000 + link`` KiB) and receive errors (``link % 2``), PCIe
    byte counters (tx ``10000 + i``, rx ``20000 + i``) and GPM SM occupancy (40 %)."""
    lines = dict(lines)
    for i in range(int(lines.get("count", 0))):
        p = f"{i}."
        lines[p + f"field.{pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT}"] = links
        lines[p + f"field.{pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES}"] = 10_000 + i
        lines[p + f"field.{pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES}"] = 20_000 + i
        lines[p + f"gpm.{pynvml.NVML_GPM_METRIC_SM_OCCUPANCY}"] = 40.0
        for link in range(links):
            lines[p + f"field.{pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX}.{link}"] = 1000 + link
            lines[p + f"field.{pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX}.{link}"] = 2000 + link
            lines[p + f"field.{pynvml.NVML_FI_DEV_NVLINK_COUNT_RCV_ERRORS}.{link}"] = link % 2
    return lines


def consumer_card() -> dict[str, FixtureValue]:
    """One GeForce RTX 4090: no ECC, no row remapping, no violation counters, no MIG,
    no GPM (``isSupportedDevice`` 0), no field values, no events (all simply omitted)."""
    return {
        "count": 1,
        "driver_version": "570.133.07",
        "nvml_version": "12.570.133.07",
        "cuda_version": 12080,
        "0.name": "NVIDIA GeForce RTX 4090",
        "0.uuid": _gpu_uuid(0, 0x4090),
        "0.pci_bus_id": "00000000:01:00.0",
        "0.minor": 0,
        "0.util.gpu": 37,
        "0.util.memory": 12,
        "0.memory.total": 24564 * MIB,
        "0.memory.reserved": 0,
        "0.memory.used": 3 * GIB,
        "0.power_mw": 120_000,
        "0.power_limit_mw": 450_000,
        "0.energy_mj": 987_654_321,
        "0.temp.gpu": 52,
        "0.clock.graphics": 2520,
        "0.clock.sm": 2520,
        "0.clock.mem": 10501,
        "0.clocks_event_reasons": "0x1",
        "0.pcie_replay": 0,
        "0.procs": procs_value([(4242, 512 * MIB)]),
    }


def mig_gpu() -> dict[str, FixtureValue]:
    """One H100 80GB in MIG mode: 7 slots, slots 0-2 populated (GI 1, 5, 13), 3-6 empty.

    Whole-GPU utilisation is NotSupported (as under MIG); each MIG device has memory,
    processes and GPM metrics of its own.
    """
    lines: dict[str, FixtureValue] = {
        "count": 1,
        "driver_version": "570.133.20",
        "nvml_version": "12.570.133.20",
        "cuda_version": 12080,
        "0.name": "NVIDIA H100 80GB HBM3",
        "0.uuid": _gpu_uuid(0, 0x100),
        "0.pci_bus_id": "00000000:18:00.0",
        "0.minor": 0,
        "0.memory.total": 81559 * MIB,
        "0.memory.reserved": 500 * MIB,
        "0.memory.used": 30 * GIB,
        "0.power_mw": 350_000,
        "0.power_limit_mw": 700_000,
        "0.energy_mj": 1_000_000,
        "0.temp.gpu": 44,
        "0.clock.sm": 1980,
        "0.clock.mem": 2619,
        "0.procs": procs_value([(1001, 10 * GIB, 1, 0), (1002, 4 * GIB, 5, 0)]),
        "0.supported_events": XID_EVENTS,
        "0.mig.mode": 1,
        "0.mig.count": 7,
        "0.gpm.supported": 1,
        f"0.gpm.{pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL}": 60.0,
    }
    profiles = ((1, "3g.40gb", 40 * GIB), (5, "2g.20gb", 20 * GIB), (13, "1g.10gb", 10 * GIB))
    for j, (gi, profile, total) in enumerate(profiles):
        p = f"0.mig.{j}."
        lines.update(
            {
                p + "uuid": f"MIG-fa4e0000-{gi:04x}-4000-8000-{j:012x}",
                p + "name": f"NVIDIA H100 80GB HBM3 MIG {profile}",
                p + "gi": gi,
                p + "memory.total": total,
                p + "memory.reserved": 0,
                p + "memory.used": (j + 1) * GIB,
                p + f"gpm.{pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL}": 10.0 * (j + 1),
                p + f"gpm.{pynvml.NVML_GPM_METRIC_SM_UTIL}": 5.0 * (j + 1),
            }
        )
    lines["0.mig.0.procs"] = procs_value([(1001, 10 * GIB, 1, 0)])
    return lines


# --------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------


#: The fake's helper counters: ``int fake_nvml_NAME(void)``.
COUNTER_SYMBOLS = (
    "fake_nvml_init_count",
    "fake_nvml_init_calls",
    "fake_nvml_shutdown_calls",
    "fake_nvml_gpm_samples_live",
    "fake_nvml_gpm_bad_frees",
    "fake_nvml_event_sets_live",
    "fake_nvml_fixture_loads",
)
#: Every fake-only symbol the library exports (none of them is in the real NVML).
HELPER_SYMBOLS = (*COUNTER_SYMBOLS, "fake_nvml_sizeof", "fake_nvml_offsetof", "fake_nvml_reset")


class FakeLib:
    """Typed access to the fake-only helper symbols (``fake_nvml_*``) of a loaded fake."""

    def __init__(self, cdll: ctypes.CDLL) -> None:
        self.cdll = cdll
        for name in COUNTER_SYMBOLS:
            fn = getattr(cdll, name)
            fn.argtypes = []
            fn.restype = ctypes.c_int
        for name in ("fake_nvml_sizeof", "fake_nvml_offsetof"):
            fn = getattr(cdll, name)
            fn.argtypes = [ctypes.c_char_p]
            fn.restype = ctypes.c_long
        cdll.fake_nvml_reset.argtypes = []
        cdll.fake_nvml_reset.restype = None

    def init_count(self) -> int:
        """Current init refcount (0 once every nvmlInit has been matched by nvmlShutdown)."""
        return int(self.cdll.fake_nvml_init_count())

    def init_calls(self) -> int:
        """Successful nvmlInit* calls since the last :meth:`reset`."""
        return int(self.cdll.fake_nvml_init_calls())

    def shutdown_calls(self) -> int:
        """Successful nvmlShutdown calls since the last :meth:`reset`."""
        return int(self.cdll.fake_nvml_shutdown_calls())

    def gpm_samples_live(self) -> int:
        """GPM samples allocated and not yet freed."""
        return int(self.cdll.fake_nvml_gpm_samples_live())

    def gpm_bad_frees(self) -> int:
        """nvmlGpmSampleFree calls on a pointer that is not a live sample (double free...)."""
        return int(self.cdll.fake_nvml_gpm_bad_frees())

    def event_sets_live(self) -> int:
        """Event sets created and not yet freed."""
        return int(self.cdll.fake_nvml_event_sets_live())

    def fixture_loads(self) -> int:
        """How many times the fixture file was (re)parsed since the last :meth:`reset`."""
        return int(self.cdll.fake_nvml_fixture_loads())

    def sizeof(self, type_name: str) -> int:
        """C ``sizeof`` of an nvml.h type, e.g. ``"nvmlFieldValue_t"`` (-1: not in table)."""
        return int(self.cdll.fake_nvml_sizeof(type_name.encode()))

    def offsetof(self, type_dot_field: str) -> int:
        """C ``offsetof``, e.g. ``"nvmlFieldValue_t.value"`` (-1: not in table)."""
        return int(self.cdll.fake_nvml_offsetof(type_dot_field.encode()))

    def reset(self) -> None:
        """Forget refcount, counters, live GPM samples and event sets (between tests)."""
        self.cdll.fake_nvml_reset()


_saved: list[tuple[Any, dict[str, Any], int]] = []


def load_into_pynvml(so_path: Path | str) -> FakeLib:
    """Make the already-imported real ``pynvml`` call the fake at ``so_path``.

    pynvml has no path option: ``nvmlInit`` dlopens ``libnvidia-ml.so.1`` only while
    ``pynvml.nvmlLib`` is None, and ``_nvmlGetFunctionPointer`` caches each symbol it
    resolves. So this sets ``nvmlLib`` to a ``CDLL`` of the fake and empties the cache
    (under ``pynvml.libLoadLock``), saving the previous library, cache and pynvml's own
    refcount for :func:`unload`. Call it before the code under test calls ``nvmlInit``.
    """
    with pynvml.libLoadLock:
        _saved.append(
            (
                pynvml.nvmlLib,
                dict(pynvml._nvmlGetFunctionPointer_cache),
                pynvml._nvmlLib_refcount,
            )
        )
        cdll = ctypes.CDLL(str(Path(so_path).resolve()))
        pynvml.nvmlLib = cdll
        pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml._nvmlLib_refcount = 0
    return FakeLib(cdll)


def unload() -> None:
    """Undo the last :func:`load_into_pynvml` (the fake stays mapped in the process)."""
    with pynvml.libLoadLock:
        if not _saved:
            return
        lib, cache, refcount = _saved.pop()
        pynvml.nvmlLib = lib
        pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml._nvmlGetFunctionPointer_cache.update(cache)
        pynvml._nvmlLib_refcount = refcount


def subprocess_env(
    so_path: Path | str, fixture_path: Path | str, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Environment for a subprocess whose plain ``pynvml.nvmlInit()`` loads the fake.

    ``LD_LIBRARY_PATH`` is read by ld.so at process start, so it only works for a new
    process (setting it in ``os.environ`` of a running one has no effect).
    """
    env = dict(os.environ if base is None else base)
    lib_dir = str(Path(so_path).resolve().parent)
    old = env.get("LD_LIBRARY_PATH")
    env["LD_LIBRARY_PATH"] = lib_dir if not old else f"{lib_dir}{os.pathsep}{old}"
    env[ENV_VAR] = str(Path(fixture_path).resolve())
    return env
