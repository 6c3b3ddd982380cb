"""Tests of the FAKE libnvidia-ml.so.1 itself, through the REAL pynvml (no GPU needed).

If these pass, the GPU collector's tests exercise real ctypes marshalling, versioned
symbols, two-call protocols and NVML error mapping against a library compiled from
NVIDIA's own nvml.h.
"""

from __future__ import annotations

import ctypes
import json
import sys
import threading
import time
from pathlib import Path

import pynvml
import pytest

from tests.fakenvml import fakenvml
from tests.fakenvml.fakenvml import Fixture, err
from tests.support.cli import run

GIB = 1 << 30

# Every NVML symbol the fake exports (and no other nvml* symbol).
NVML_SYMBOLS = {
    "nvmlInit",
    "nvmlInit_v2",
    "nvmlInitWithFlags",
    "nvmlShutdown",
    "nvmlErrorString",
    "nvmlSystemGetDriverVersion",
    "nvmlSystemGetNVMLVersion",
    "nvmlSystemGetCudaDriverVersion",
    "nvmlSystemGetCudaDriverVersion_v2",
    "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetIndex",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetMinorNumber",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetTemperatureV",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetViolationStatus",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetPcieReplayCounter",
    "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceIsMigDeviceHandle",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
    "nvmlGpmQueryDeviceSupport",
    "nvmlGpmSampleAlloc",
    "nvmlGpmSampleFree",
    "nvmlGpmSampleGet",
    "nvmlGpmMigSampleGet",
    "nvmlGpmMetricsGet",
    "nvmlEventSetCreate",
    "nvmlEventSetFree",
    "nvmlDeviceRegisterEvents",
    "nvmlDeviceGetSupportedEventTypes",
    "nvmlEventSetWait_v2",
}


def _lib(fx: Fixture) -> fakenvml.FakeLib:
    assert fx.lib is not None
    return fx.lib


def _raises(code: int):  # type: ignore[no-untyped-def]
    return pytest.raises(pynvml.nvmlExceptionClass(code))


def _metrics(s1: object, s2: object, ids: list[int]) -> pynvml.c_nvmlGpmMetricsGet_t:
    mg = pynvml.c_nvmlGpmMetricsGet_t()
    mg.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    mg.numMetrics = len(ids)
    mg.sample1 = s1
    mg.sample2 = s2
    for k, metric_id in enumerate(ids):
        mg.metrics[k].metricId = metric_id
    return mg


# ----------------------------------------------------------------------------------------
# Build, symbols, ABI
# ----------------------------------------------------------------------------------------


def test_header_is_found_through_the_nvidia_package() -> None:
    include = fakenvml.header_dir()
    assert (include / "nvml.h").is_file()
    assert "site-packages" in include.parts or "dist-packages" in include.parts


def test_builds_with_werror_against_nvml_h(tmp_path: Path) -> None:
    so = fakenvml.build(tmp_path, force=True)
    assert so.name == "libnvidia-ml.so.1"
    command = fakenvml.compile_command(so)
    assert "-Werror" in command and "-DNVML_NO_UNVERSIONED_FUNC_DEFS" in command
    assert f"-I{fakenvml.header_dir()}" in command
    before = so.stat().st_mtime_ns
    assert fakenvml.build(tmp_path) == so  # up to date: not rebuilt
    assert so.stat().st_mtime_ns == before


@pytest.mark.parametrize(
    "snippet",
    [
        # wrong parameter type for a real NVML symbol
        "nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned long long *p)"
        " { (void)d; (void)p; return NVML_SUCCESS; }",
        # misspelt symbol: nvml.h declares no such function
        "nvmlReturn_t nvmlDeviceGetPowerUsag(nvmlDevice_t d, unsigned int *p)"
        " { (void)d; (void)p; return NVML_SUCCESS; }",
        # with the unversioned #defines off, the _v2 struct is not the v1 one
        "nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_v2_t *m)"
        " { (void)d; (void)m; return NVML_SUCCESS; }",
    ],
)
def test_the_build_flags_reject_a_wrong_prototype(tmp_path: Path, snippet: str) -> None:
    """The point of compiling against nvml.h: a mismatch with NVIDIA's API fails the build."""
    src = tmp_path / "bad.c"
    src.write_text(f"#include <nvml.h>\n{snippet}\n")
    flags = [f for f in fakenvml.CFLAGS if not f.startswith("-Wl,")]
    result = run(["gcc", *flags, "-fsyntax-only", str(src), f"-I{fakenvml.header_dir()}"])
    assert result.returncode != 0, snippet


def test_exports_exactly_the_listed_symbols(fake_nvml_lib: Path) -> None:
    nm = run(["nm", "-D", "--defined-only", str(fake_nvml_lib)])
    assert nm.returncode == 0, nm.stderr
    out = nm.stdout
    exported = {line.split()[-1] for line in out.splitlines() if line.split()[1:2] == ["T"]}
    assert {s for s in exported if s.startswith("nvml")} == NVML_SYMBOLS
    assert {s for s in exported if s.startswith("fake_nvml")} == set(fakenvml.HELPER_SYMBOLS)
    soname = run(["objdump", "-p", str(fake_nvml_lib)]).stdout
    if soname:
        assert "SONAME               libnvidia-ml.so.1" in soname


@pytest.mark.parametrize(
    ("c_name", "ctype", "expected"),
    [
        ("nvmlProcessInfo_t", pynvml.c_nvmlProcessInfo_v3_t, 24),
        ("nvmlMemory_v2_t", pynvml.c_nvmlMemory_v2_t, 40),
        ("nvmlMemory_t", pynvml.c_nvmlMemory_t, 24),
        ("nvmlUtilization_t", pynvml.c_nvmlUtilization_t, 8),
        ("nvmlEventData_t", pynvml.c_nvmlEventData_t, 32),
        ("nvmlFieldValue_t", pynvml.c_nvmlFieldValue_t, 40),
        ("nvmlValue_t", pynvml.c_nvmlValue_t, 8),
        ("nvmlGpmMetric_t", pynvml.c_nvmlGpmMetric_t, 40),
        ("nvmlGpmMetricsGet_t", pynvml.c_nvmlGpmMetricsGet_t, 19104),
        ("nvmlGpmSupport_t", pynvml.c_nvmlGpmSupport_t, 8),
        ("nvmlPciInfo_t", pynvml.nvmlPciInfo_t, 68),
        ("nvmlViolationTime_t", pynvml.c_nvmlViolationTime_t, 16),
        ("nvmlTemperature_t", pynvml.c_nvmlTemperature_v1_t, 12),
        ("nvmlDevice_t", pynvml.c_nvmlDevice_t, 8),
        ("nvmlEventSet_t", pynvml.c_nvmlEventSet_t, 8),
        ("nvmlGpmSample_t", pynvml.c_nvmlGpmSample_t, 8),
    ],
)
def test_pynvml_ctypes_layout_equals_nvml_h(
    fake_nvml_lib: Path, c_name: str, ctype: type, expected: int
) -> None:
    lib = fakenvml.FakeLib(ctypes.CDLL(str(fake_nvml_lib)))
    assert lib.sizeof(c_name) == ctypes.sizeof(ctype) == expected
    for field, *_ in getattr(ctype, "_fields_", []):
        c_offset = lib.offsetof(f"{c_name}.{field}")
        if c_offset >= 0:  # the C table lists the fields the fake writes
            assert c_offset == getattr(ctype, field).offset, f"{c_name}.{field}"


def test_version_constants_match_the_c_sizes(fake_nvml_lib: Path) -> None:
    lib = fakenvml.FakeLib(ctypes.CDLL(str(fake_nvml_lib)))
    assert pynvml.nvmlMemory_v2 == (2 << 24) | lib.sizeof("nvmlMemory_v2_t") == 0x2000028
    assert pynvml.nvmlTemperature_v1 == (1 << 24) | lib.sizeof("nvmlTemperature_t")


# ----------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------

_SUBPROCESS_SCRIPT = """
import json, pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(1)
out = {
    "count": pynvml.nvmlDeviceGetCount(),
    "driver": pynvml.nvmlSystemGetDriverVersion(),
    "name": pynvml.nvmlDeviceGetName(h),
    "util": pynvml.nvmlDeviceGetUtilizationRates(h).gpu,
    "fake": hasattr(pynvml.nvmlLib, "fake_nvml_init_count"),
    "lib": pynvml.nvmlLib._name,
}
pynvml.nvmlShutdown()
print(json.dumps(out))
"""


def test_subprocess_loads_it_through_ld_library_path(fake_nvml_lib: Path, tmp_path: Path) -> None:
    """As a deployed exporter would: plain nvmlInit(), library found by the dynamic loader."""
    fixture = Fixture(tmp_path / "fx.txt", fakenvml.h200_node(2))
    result = run(
        [sys.executable, "-c", _SUBPROCESS_SCRIPT],
        env=fakenvml.subprocess_env(fake_nvml_lib, fixture.path),
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out == {
        "count": 2,
        "driver": "570.133.20",
        "name": "NVIDIA H200",
        "util": 89,
        "fake": True,
        "lib": "libnvidia-ml.so.1",
    }


def test_load_and_unload_restore_pynvml(fake_nvml_lib: Path) -> None:
    before_lib = pynvml.nvmlLib
    before_cache = dict(pynvml._nvmlGetFunctionPointer_cache)
    lib = fakenvml.load_into_pynvml(fake_nvml_lib)
    try:
        assert pynvml.nvmlLib is lib.cdll
        assert pynvml._nvmlGetFunctionPointer_cache == {}
    finally:
        fakenvml.unload()
    assert pynvml.nvmlLib is before_lib
    assert pynvml._nvmlGetFunctionPointer_cache == before_cache


def test_unimplemented_symbol_is_function_not_found(fake_nvml: Fixture) -> None:
    fake_nvml.write(fakenvml.h200_node(1))
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetSerial(h)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetPerformanceState(h)
    # pynvml's @throwOnVersionMismatch wrappers turn FunctionNotFound into this:
    with pytest.raises(pynvml.NVMLLibraryMismatchError):
        pynvml.nvmlDeviceGetGraphicsRunningProcesses(h)


# ----------------------------------------------------------------------------------------
# Lifecycle
# ----------------------------------------------------------------------------------------


def test_calls_before_init_are_uninitialized(fake_nvml: Fixture) -> None:
    fake_nvml.write(fakenvml.h200_node(1))
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlShutdown()


def test_init_refcount(fake_nvml: Fixture) -> None:
    lib = _lib(fake_nvml)
    fake_nvml.write(fakenvml.h200_node(1))
    pynvml.nvmlInit()
    pynvml.nvmlInitWithFlags(pynvml.NVML_INIT_FLAG_NO_GPUS)
    assert lib.init_count() == 2 and lib.init_calls() == 2
    pynvml.nvmlShutdown()
    assert pynvml.nvmlDeviceGetCount() == 1  # still initialised once
    pynvml.nvmlShutdown()
    assert lib.init_count() == 0 and lib.shutdown_calls() == 2
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()


def test_init_error_injection(fake_nvml: Fixture) -> None:
    fake_nvml.write({"init": err(9), "count": 1})
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        pynvml.nvmlInit()
    assert _lib(fake_nvml).init_count() == 0
    fake_nvml.update({"init": None})
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetCount() == 1


def test_unreadable_fixture_fails_init(fake_nvml: Fixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fakenvml.ENV_VAR, str(fake_nvml.path) + ".missing")
    with pytest.raises(pynvml.NVMLError_Unknown):
        pynvml.nvmlInit()


def test_empty_fixture_means_no_gpus(fake_nvml: Fixture) -> None:
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetCount() == 0
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlSystemGetDriverVersion()


# ----------------------------------------------------------------------------------------
# Fixture file handling
# ----------------------------------------------------------------------------------------


def test_fixture_reparsed_only_when_it_changes(fake_nvml: Fixture) -> None:
    lib = _lib(fake_nvml)
    fake_nvml.write(fakenvml.h200_node(8))
    pynvml.nvmlInit()
    loads = lib.fixture_loads()
    for i in range(8):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        for _ in range(10):
            pynvml.nvmlDeviceGetPowerUsage(h)
            pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    assert lib.fixture_loads() == loads
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    for watts in range(100, 110):  # many quick rewrites, each one seen
        fake_nvml.update({"0.power_mw": watts * 1000})
        assert pynvml.nvmlDeviceGetPowerUsage(h) == watts * 1000
    assert lib.fixture_loads() == loads + 10


def test_fixture_format_comments_spaces_duplicates(fake_nvml: Fixture) -> None:
    fake_nvml.path.write_text(
        "# comment\n"
        "   count 1\n"
        "\n"
        "0.name   NVIDIA  H200 NVL   \n"
        "  # indented comment\n"
        "0.power_mw 1\n"
        "0.power_mw 2\n"  # last line wins
        "0.clocks_event_reasons 0x48\n"
    )
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetName(h) == "NVIDIA  H200 NVL"
    assert pynvml.nvmlDeviceGetPowerUsage(h) == 2
    assert pynvml.nvmlDeviceGetCurrentClocksEventReasons(h) == 0x48


def test_malformed_value_is_unknown_error(fake_nvml: Fixture) -> None:
    fake_nvml.write({"count": 1, "0.power_mw": "lots", "0.remapped_rows": "1,2"})
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_Unknown):
        pynvml.nvmlDeviceGetPowerUsage(h)
    with pytest.raises(pynvml.NVMLError_Unknown):
        pynvml.nvmlDeviceGetRemappedRows(h)


def test_fixture_helpers_validate() -> None:
    with pytest.raises(ValueError):
        fakenvml._check_key("has space")
    with pytest.raises(ValueError):
        fakenvml._format_value("k", "two\nlines")
    assert fakenvml.procs_value([(1, 2), (3, None, 4, 5)]) == "1:2,3:na:4:5"
    assert err(15) == "ERR:15"


# ----------------------------------------------------------------------------------------
# System and device queries
# ----------------------------------------------------------------------------------------


def test_system_queries(fake_nvml: Fixture) -> None:
    fake_nvml.write(fakenvml.h200_node(8))
    pynvml.nvmlInit()
    assert pynvml.nvmlSystemGetDriverVersion() == "570.133.20"
    assert pynvml.nvmlSystemGetNVMLVersion() == "12.570.133.20"
    assert pynvml.nvmlSystemGetCudaDriverVersion() == 12080
    assert pynvml.nvmlSystemGetCudaDriverVersion_v2() == 12080
    assert pynvml.nvmlDeviceGetCount() == 8
    assert pynvml.nvmlErrorString(pynvml.NVML_ERROR_GPU_IS_LOST) == "GPU is lost"


def test_identity_and_pci(fake_nvml: Fixture) -> None:
    fake_nvml.write(fakenvml.h200_node(8))
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(3)
    assert pynvml.nvmlDeviceGetIndex(h) == 3
    assert pynvml.nvmlDeviceGetName(h) == "NVIDIA H200"
    assert pynvml.nvmlDeviceGetUUID(h) == fakenvml.h200_node(8)["3.uuid"]
    assert pynvml.nvmlDeviceGetMinorNumber(h) == 3
    pci = pynvml.nvmlDeviceGetPciInfo(h)
    assert pci.busId == "00000000:5D:00.0"
    assert pci.busIdLegacy == "0000:5D:00.0"
    assert (pci.domain, pci.bus, pci.device) == (0, 0x5D, 0)
    assert pci.pciDeviceId == 0x233510DE
    # a second handle for the same index is the same handle
    same = pynvml.nvmlDeviceGetHandleByIndex(3)
    assert ctypes.cast(same, ctypes.c_void_p).value == ctypes.cast(h, ctypes.c_void_p).value
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetHandleByIndex(8)


def test_string_buffer_too_small_is_insufficient_size(fake_nvml: Fixture) -> None:
    fake_nvml.write(fakenvml.h200_node(1))
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    fn = pynvml.nvmlLib.nvmlDeviceGetName
    small = ctypes.create_string_buffer(b"\xff" * 8, 8)
    assert fn(h, small, ctypes.c_uint(8)) == pynvml.NVML_ERROR_INSUFFICIENT_SIZE
    assert small.raw == b"\xff" * 8  # untouched
    exact = ctypes.create_string_buffer(12)  # "NVIDIA H200" + NUL
    assert fn(h, exact, ctypes.c_uint(12)) == pynvml.NVML_SUCCESS
    assert exact.value == b"NVIDIA H200"
    assert pynvml.nvmlLib.nvmlDeviceGetName(h, None, 96) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    version = ctypes.create_string_buffer(4)
    assert (
        pynvml.nvmlLib.nvmlSystemGetDriverVersion(version, ctypes.c_uint(4))
        == pynvml.NVML_ERROR_INSUFFICIENT_SIZE
    )


def test_invalid_handle_is_invalid_argument(fake_nvml: Fixture) -> None:
    fake_nvml.write(fakenvml.h200_node(1))
    pynvml.nvmlInit()
    bogus = ctypes.cast(ctypes.c_void_p(0x1000), pynvml.c_nvmlDevice_t)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetPowerUsage(bogus)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetPowerUsage(pynvml.c_nvmlDevice_t())


def test_scalar_metrics(fake_nvml: Fixture) -> None:
    fake_nvml.write(fakenvml.h200_node(2))
    fake_nvml.update({"1.clocks_event_reasons": "0x0000000000000048", "1.pcie_replay": 7})
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(1)
    util = pynvml.nvmlDeviceGetUtilizationRates(h)
    assert (util.gpu, util.memory) == (89, 41)
    assert pynvml.nvmlDeviceGetPowerUsage(h) == 401_000
    assert pynvml.nvmlDeviceGetEnforcedPowerLimit(h) == 700_000
    assert pynvml.nvmlDeviceGetTotalEnergyConsumption(h) == 5_000_000_001
    assert pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU) == 41
    assert pynvml.nvmlDeviceGetTemperatureV(h, pynvml.NVML_TEMPERATURE_GPU) == 41
    assert pynvml.nvmlDeviceGetTemperatureV(h, pynvml.NVML_TEMPERATURE_GPU_MAX) == 49
    assert pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM) == 1980
    assert pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM) == 3201
    assert pynvml.nvmlDeviceGetCurrentClocksEventReasons(h) == 0x48
    assert pynvml.nvmlDeviceGetPcieReplayCounter(h) == 7
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetClockInfo(h, 99)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetTemperature(h, 7)


def test_temperature_v_checks_the_struct_version(fake_nvml: Fixture) -> None:
    fake_nvml.write(fakenvml.h200_node(1))
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    t = pynvml.c_nvmlTemperature_v1_t()
    t.version = 0x1000000  # wrong size in the version word
    t.sensorType = pynvml.NVML_TEMPERATURE_GPU
    rc = pynvml.nvmlLib.nvmlDeviceGetTemperatureV(h, ctypes.byref(t))
    assert rc == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH


def test_memory_v1_and_v2(fake_nvml: Fixture) -> None:
    fake_nvml.write(
        {
            "count": 2,
            "0.memory.total": 100 * GIB,
            "0.memory.reserved": GIB,
            "0.memory.used": 10 * GIB,
            "1.memory.total": 100,
            "1.memory.used": 30,
            "1.memory.free": 50,
        }
    )
    pynvml.nvmlInit()
    h0 = pynvml.nvmlDeviceGetHandleByIndex(0)
    m2 = pynvml.nvmlDeviceGetMemoryInfo(h0, version=pynvml.nvmlMemory_v2)
    assert (m2.total, m2.reserved, m2.used, m2.free) == (100 * GIB, GIB, 10 * GIB, 89 * GIB)
    m1 = pynvml.nvmlDeviceGetMemoryInfo(h0)  # v1: used includes reserved
    assert (m1.total, m1.used, m1.free) == (100 * GIB, 11 * GIB, 89 * GIB)
    h1 = pynvml.nvmlDeviceGetHandleByIndex(1)
    m2 = pynvml.nvmlDeviceGetMemoryInfo(h1, version=pynvml.nvmlMemory_v2)
    assert (m2.total, m2.reserved, m2.used, m2.free) == (100, 0, 30, 50)
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        pynvml.nvmlDeviceGetMemoryInfo(h0, version=0x1000028)


def test_violation_ecc_remapped_rows(fake_nvml: Fixture) -> None:
    fake_nvml.write(
        {
            "count": 1,
            "0.violation.0": 123_456_789,
            "0.violation.11": 5,
            "0.ecc.corrected": 3,
            "0.ecc.uncorrected": 1,
            "0.ecc.aggregate.corrected": 30,
            "0.ecc.aggregate.uncorrected": 10,
            "0.remapped_rows": "4,2,1,0",
        }
    )
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    v = pynvml.nvmlDeviceGetViolationStatus(h, pynvml.NVML_PERF_POLICY_POWER)
    assert v.violationTime == 123_456_789
    assert abs(v.referenceTime / 1e6 - time.time()) < 60
    assert (
        pynvml.nvmlDeviceGetViolationStatus(
            h, pynvml.NVML_PERF_POLICY_TOTAL_BASE_CLOCKS
        ).violationTime
        == 5
    )
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetViolationStatus(h, pynvml.NVML_PERF_POLICY_THERMAL)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetViolationStatus(h, 12)
    corrected, uncorrected = (
        pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
        pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
    )
    assert pynvml.nvmlDeviceGetTotalEccErrors(h, corrected, pynvml.NVML_VOLATILE_ECC) == 3
    assert pynvml.nvmlDeviceGetTotalEccErrors(h, uncorrected, pynvml.NVML_VOLATILE_ECC) == 1
    assert pynvml.nvmlDeviceGetTotalEccErrors(h, corrected, pynvml.NVML_AGGREGATE_ECC) == 30
    assert pynvml.nvmlDeviceGetTotalEccErrors(h, uncorrected, pynvml.NVML_AGGREGATE_ECC) == 10
    assert pynvml.nvmlDeviceGetRemappedRows(h) == (4, 2, 1, 0)


def test_field_values(fake_nvml: Fixture) -> None:
    tx = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
    fake_nvml.write(
        {
            "count": 1,
            "0.field.82": 47,
            f"0.field.{tx}.3": "u:1234567890123",
            f"0.field.{tx}.4": err(15),
            "0.field.186": "d:612.5",
            "0.field.999": "i:-5",
        }
    )
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    values = pynvml.nvmlDeviceGetFieldValues(h, [82, (tx, 3), (tx, 4), (tx, 5), 186, 999, 1])
    rc = [v.nvmlReturn for v in values]
    assert rc == [0, 0, 15, 3, 0, 0, 3]
    assert values[0].valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
    assert values[0].value.ullVal == 47
    assert (values[1].fieldId, values[1].scopeId, values[1].value.ullVal) == (tx, 3, 1234567890123)
    assert values[4].valueType == pynvml.NVML_VALUE_TYPE_DOUBLE
    assert values[4].value.dVal == 612.5
    assert values[5].valueType == pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG
    assert values[5].value.sllVal == -5
    assert abs(values[0].timestamp / 1e6 - time.time()) < 60
    assert len(pynvml.nvmlDeviceGetFieldValues(h, [])) == 0


def test_compute_processes_two_call_protocol(fake_nvml: Fixture) -> None:
    fake_nvml.write(
        {
            "count": 2,
            "0.procs": fakenvml.procs_value([(4242, GIB), (4343, None, 1, 0), (7, 2 * GIB)]),
            "1.procs": "",
        }
    )
    pynvml.nvmlInit()
    h0 = pynvml.nvmlDeviceGetHandleByIndex(0)
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h0)
    got = [(p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId) for p in procs]
    assert got == [
        (4242, GIB, 0xFFFFFFFF, 0xFFFFFFFF),
        (4343, None, 1, 0),
        (7, 2 * GIB, 0xFFFFFFFF, 0xFFFFFFFF),
    ]
    assert pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(1)) == []

    fn = pynvml.nvmlLib.nvmlDeviceGetComputeRunningProcesses_v3
    count = ctypes.c_uint(2)
    buf = (pynvml.c_nvmlProcessInfo_v3_t * 2)()
    assert fn(h0, ctypes.byref(count), buf) == pynvml.NVML_ERROR_INSUFFICIENT_SIZE
    assert count.value == 3
    assert buf[0].pid == 0  # nothing written on INSUFFICIENT_SIZE
    buf3 = (pynvml.c_nvmlProcessInfo_v3_t * 3)()
    assert fn(h0, ctypes.byref(count), buf3) == pynvml.NVML_SUCCESS
    assert [p.pid for p in buf3] == [4242, 4343, 7]


def test_absent_keys_are_not_supported_and_err_injects(fake_nvml: Fixture) -> None:
    fake_nvml.write(fakenvml.consumer_card())
    fake_nvml.update({"0.power_mw": err(2), "0.temp.gpu": err(999)})
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    for call in (
        lambda: pynvml.nvmlDeviceGetTotalEccErrors(
            h, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC
        ),
        lambda: pynvml.nvmlDeviceGetRemappedRows(h),
        lambda: pynvml.nvmlDeviceGetViolationStatus(h, pynvml.NVML_PERF_POLICY_POWER),
        lambda: pynvml.nvmlDeviceGetMigMode(h),
        lambda: pynvml.nvmlDeviceGetSupportedEventTypes(h),
    ):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            call()
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetPowerUsage(h)
    with pytest.raises(pynvml.NVMLError_Unknown):
        pynvml.nvmlDeviceGetTemperatureV(h, pynvml.NVML_TEMPERATURE_GPU)
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(h) == 0  # nvml.h: 0 when MIG unsupported
    assert pynvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice == 0
    assert [v.nvmlReturn for v in pynvml.nvmlDeviceGetFieldValues(h, [82])] == [3]
    assert pynvml.nvmlDeviceGetComputeRunningProcesses(h)[0].pid == 4242


def test_explicit_err_3_is_not_confused_with_an_absent_key(fake_nvml: Fixture) -> None:
    """Keys with a default when absent (count, mig.count, gpm.supported, ...) still honour ERR:3."""
    fake_nvml.write(fakenvml.mig_gpu())
    fake_nvml.update(
        {
            "0.mig.count": err(3),
            "0.gpm.supported": err(3),
            "0.memory.used": err(3),
            "0.supported_events": err(3),
            "event_wait": err(3),
        }
    )
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    es = pynvml.nvmlEventSetCreate()
    for call in (
        lambda: pynvml.nvmlDeviceGetMaxMigDeviceCount(h),
        lambda: pynvml.nvmlGpmQueryDeviceSupport(h),
        lambda: pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2),
        lambda: pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, es),
        lambda: pynvml.nvmlEventSetWait_v2(es, 0),
    ):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            call()
    fake_nvml.update({"0.mig.count": 7, "0.mig.1.uuid": err(3)})
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 1)
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 3)
    fake_nvml.update({"count": err(9)})
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        pynvml.nvmlDeviceGetCount()
    pynvml.nvmlEventSetFree(es)


def test_lost_gpu(fake_nvml: Fixture) -> None:
    fake_nvml.write(fakenvml.h200_node(2))
    fake_nvml.update({"1.lost": 1})
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetCount() == 2
    h1 = pynvml.nvmlDeviceGetHandleByIndex(1)  # enumeration still succeeds
    for call in (
        lambda: pynvml.nvmlDeviceGetName(h1),
        lambda: pynvml.nvmlDeviceGetIndex(h1),
        lambda: pynvml.nvmlDeviceGetPowerUsage(h1),
        lambda: pynvml.nvmlDeviceGetMemoryInfo(h1, version=pynvml.nvmlMemory_v2),
        lambda: pynvml.nvmlDeviceGetFieldValues(h1, [82]),
        lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(h1),
        lambda: pynvml.nvmlGpmQueryDeviceSupport(h1),
        lambda: pynvml.nvmlDeviceIsMigDeviceHandle(h1),
    ):
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            call()
    h0 = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetPowerUsage(h0) == 400_000
    fake_nvml.update({"1.lost": None})  # back on the bus
    assert pynvml.nvmlDeviceGetName(h1) == "NVIDIA H200"


# ----------------------------------------------------------------------------------------
# MIG
# ----------------------------------------------------------------------------------------


def test_mig_handles(fake_nvml: Fixture) -> None:
    fake_nvml.write(fakenvml.mig_gpu())
    pynvml.nvmlInit()
    gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetMigMode(gpu) == [1, 1]
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(gpu) == 7
    assert not pynvml.nvmlDeviceIsMigDeviceHandle(gpu).value
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetUtilizationRates(gpu)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetGpuInstanceId(gpu)

    seen = []
    for j in range(7):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, j)
        except pynvml.NVMLError_NotFound:
            continue
        assert pynvml.nvmlDeviceIsMigDeviceHandle(mig).value == 1
        parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
        assert pynvml.nvmlDeviceGetUUID(parent) == pynvml.nvmlDeviceGetUUID(gpu)
        mem = pynvml.nvmlDeviceGetMemoryInfo(mig, version=pynvml.nvmlMemory_v2)
        seen.append(
            (
                j,
                pynvml.nvmlDeviceGetGpuInstanceId(mig),
                pynvml.nvmlDeviceGetUUID(mig)[:4],
                pynvml.nvmlDeviceGetName(mig),
                mem.total // GIB,
            )
        )
    assert seen == [
        (0, 1, "MIG-", "NVIDIA H100 80GB HBM3 MIG 3g.40gb", 40),
        (1, 5, "MIG-", "NVIDIA H100 80GB HBM3 MIG 2g.20gb", 20),
        (2, 13, "MIG-", "NVIDIA H100 80GB HBM3 MIG 1g.10gb", 10),
    ]
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 7)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(gpu)
    mig0 = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0)
    assert [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(mig0)] == [1001]
    assert [p.gpuInstanceId for p in pynvml.nvmlDeviceGetComputeRunningProcesses(gpu)] == [1, 5]
    fake_nvml.update({"0.lost": 1})
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetUUID(mig0)


# ----------------------------------------------------------------------------------------
# GPM
# ----------------------------------------------------------------------------------------


def test_gpm_metrics_for_gpu_and_mig(fake_nvml: Fixture) -> None:
    lib = _lib(fake_nvml)
    fake_nvml.write(fakenvml.mig_gpu())
    pynvml.nvmlInit()
    gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlGpmQueryDeviceSupport(gpu).isSupportedDevice == 1
    s1, s2 = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    assert lib.gpm_samples_live() == 2

    pynvml.nvmlGpmSampleGet(gpu, s1)
    pynvml.nvmlGpmSampleGet(gpu, s2)
    graphics, sm = pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL, pynvml.NVML_GPM_METRIC_SM_UTIL
    mg = pynvml.nvmlGpmMetricsGet(_metrics(s1, s2, [graphics, sm, 0]))
    assert (mg.metrics[0].nvmlReturn, mg.metrics[0].value) == (0, 60.0)
    assert mg.metrics[1].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert mg.metrics[2].nvmlReturn == pynvml.NVML_ERROR_INVALID_ARGUMENT

    # MIG instance by GPU instance id (GI 5 = slot 1), and by MIG device handle (slot 2)
    pynvml.nvmlGpmMigSampleGet(gpu, 5, s1)
    pynvml.nvmlGpmMigSampleGet(gpu, 5, s2)
    mg = pynvml.nvmlGpmMetricsGet(_metrics(s1, s2, [graphics, sm]))
    assert [(m.nvmlReturn, m.value) for m in mg.metrics[:2]] == [(0, 20.0), (0, 10.0)]
    mig2 = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 2)
    assert pynvml.nvmlGpmQueryDeviceSupport(mig2).isSupportedDevice == 1
    pynvml.nvmlGpmSampleGet(mig2, s1)
    pynvml.nvmlGpmSampleGet(mig2, s2)
    mg = pynvml.nvmlGpmMetricsGet(_metrics(s1, s2, [graphics]))
    assert mg.metrics[0].value == 30.0
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlGpmMigSampleGet(gpu, 99, s1)

    # samples from different devices cannot be combined
    pynvml.nvmlGpmSampleGet(gpu, s1)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlGpmMetricsGet(_metrics(s1, s2, [graphics]))

    pynvml.nvmlGpmSampleFree(s1)
    pynvml.nvmlGpmSampleFree(s2)
    assert lib.gpm_samples_live() == 0 and lib.gpm_bad_frees() == 0


def test_gpm_misuse(fake_nvml: Fixture) -> None:
    lib = _lib(fake_nvml)
    fake_nvml.write(fakenvml.h200_node(1))
    pynvml.nvmlInit()
    gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
    s1, s2 = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    pynvml.nvmlGpmSampleGet(gpu, s1)
    # sample2 never taken
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlGpmMetricsGet(_metrics(s1, s2, [1]))
    pynvml.nvmlGpmSampleGet(gpu, s2)
    wrong_version = _metrics(s1, s2, [1])
    wrong_version.version = 2
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        pynvml.nvmlGpmMetricsGet(wrong_version)
    too_many = _metrics(s1, s2, [1])
    too_many.numMetrics = pynvml.NVML_GPM_METRIC_MAX + 1
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlGpmMetricsGet(too_many)
    support = pynvml.c_nvmlGpmSupport_t()
    support.version = 7
    rc = pynvml.nvmlLib.nvmlGpmQueryDeviceSupport(gpu, ctypes.byref(support))
    assert rc == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH

    pynvml.nvmlGpmSampleFree(s1)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlGpmSampleFree(s1)  # double free: detected, no crash
    assert lib.gpm_bad_frees() == 1
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlGpmSampleGet(gpu, s1)  # use after free
    assert lib.gpm_samples_live() == 1  # s2 leaked so far
    pynvml.nvmlShutdown()
    pynvml.nvmlGpmSampleFree(s2)  # free works after shutdown
    assert lib.gpm_samples_live() == 0

    pynvml.nvmlInit()
    fake_nvml.update({"0.gpm.supported": 0})
    s3 = pynvml.nvmlGpmSampleAlloc()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlGpmSampleGet(gpu, s3)
    pynvml.nvmlGpmSampleFree(s3)


# ----------------------------------------------------------------------------------------
# Events
# ----------------------------------------------------------------------------------------


def test_xid_events_delivered_once(fake_nvml: Fixture) -> None:
    lib = _lib(fake_nvml)
    fake_nvml.write(fakenvml.h200_node(3))
    fake_nvml.add_event(0, 79)
    fake_nvml.add_event(2, 48)  # GPU 2 is not registered: never delivered
    fake_nvml.add_event(1, 94, gi=3, ci=0)
    pynvml.nvmlInit()
    h = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(3)]
    assert pynvml.nvmlDeviceGetSupportedEventTypes(h[0]) == fakenvml.H200_EVENTS
    es = pynvml.nvmlEventSetCreate()
    assert lib.event_sets_live() == 1
    for gpu in h[:2]:
        pynvml.nvmlDeviceRegisterEvents(gpu, pynvml.nvmlEventTypeXidCriticalError, es)

    got = []
    for _ in range(2):
        data = pynvml.nvmlEventSetWait_v2(es, 1000)
        got.append(
            (
                pynvml.nvmlDeviceGetIndex(data.device),
                data.eventType,
                data.eventData,
                data.gpuInstanceId,
                data.computeInstanceId,
            )
        )
    xid = pynvml.nvmlEventTypeXidCriticalError
    assert got == [(0, xid, 79, 0xFFFFFFFF, 0xFFFFFFFF), (1, xid, 94, 3, 0)]
    start = time.monotonic()
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait_v2(es, 100)
    assert 0.08 <= time.monotonic() - start < 5

    # a second set sees the same events independently
    es2 = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(h[0], xid, es2)
    assert pynvml.nvmlEventSetWait_v2(es2, 0).eventData == 79
    pynvml.nvmlEventSetFree(es2)
    pynvml.nvmlEventSetFree(es)
    assert lib.event_sets_live() == 0
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlEventSetFree(es)


def test_event_registration_refused(fake_nvml: Fixture) -> None:
    fake_nvml.write(fakenvml.h200_node(2))
    fake_nvml.update({"1.register_events": err(3)})
    pynvml.nvmlInit()
    es = pynvml.nvmlEventSetCreate()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceRegisterEvents(
            pynvml.nvmlDeviceGetHandleByIndex(1), pynvml.nvmlEventTypeXidCriticalError, es
        )
    with pytest.raises(pynvml.NVMLError_NotSupported):  # not in supported_events
        pynvml.nvmlDeviceRegisterEvents(
            pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlEventTypeGpuRecoveryAction, es
        )
    fake_nvml.update({"event_wait": err(15)})
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlEventSetWait_v2(es, 10)
    pynvml.nvmlEventSetFree(es)


def test_event_wait_in_a_thread_while_main_thread_queries(fake_nvml: Fixture) -> None:
    """Like the collector: a background thread blocks in nvmlEventSetWait_v2."""
    fake_nvml.write(fakenvml.h200_node(8))
    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(8)]
    es = pynvml.nvmlEventSetCreate()
    for h in handles:
        pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, es)
    received: list[tuple[int, int]] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def waiter() -> None:
        try:
            while not stop.is_set():
                try:
                    data = pynvml.nvmlEventSetWait_v2(es, 50)
                except pynvml.NVMLError_Timeout:
                    continue
                received.append((pynvml.nvmlDeviceGetIndex(data.device), data.eventData))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    try:
        expected = []
        for k in range(20):
            gpu, xid = k % 8, 40 + k
            fake_nvml.add_event(gpu, xid)
            expected.append((gpu, xid))
            for h in handles:  # the scrape path, concurrently
                pynvml.nvmlDeviceGetPowerUsage(h)
                pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
                pynvml.nvmlDeviceGetFieldValues(h, [82, 91])
        deadline = time.monotonic() + 10
        while len(received) < len(expected) and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        thread.join(timeout=5)
    assert not errors
    assert received == expected
    pynvml.nvmlEventSetFree(es)


def test_shutdown_releases_a_waiting_thread(fake_nvml: Fixture) -> None:
    fake_nvml.write(fakenvml.h200_node(1))
    pynvml.nvmlInit()
    es = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(
        pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlEventTypeXidCriticalError, es
    )
    outcome: list[type] = []

    def waiter() -> None:
        try:
            pynvml.nvmlEventSetWait_v2(es, 10_000)
        except pynvml.NVMLError as exc:
            outcome.append(type(exc))

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    time.sleep(0.05)
    pynvml.nvmlShutdown()
    thread.join(timeout=2)
    assert outcome == [pynvml.NVMLError_Uninitialized]


# ----------------------------------------------------------------------------------------
# Ready-made fixtures
# ----------------------------------------------------------------------------------------


def test_h200_node_answers_every_implemented_call(fake_nvml: Fixture) -> None:
    lib = _lib(fake_nvml)
    fake_nvml.write(fakenvml.h200_node(8))
    pynvml.nvmlInit()
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        pynvml.nvmlDeviceGetName(h)
        pynvml.nvmlDeviceGetUUID(h)
        pynvml.nvmlDeviceGetPciInfo(h)
        pynvml.nvmlDeviceGetUtilizationRates(h)
        pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
        pynvml.nvmlDeviceGetPowerUsage(h)
        pynvml.nvmlDeviceGetEnforcedPowerLimit(h)
        pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
        pynvml.nvmlDeviceGetTemperatureV(h, pynvml.NVML_TEMPERATURE_GPU)
        pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
        pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)
        for policy in (0, 1, 2, 3, 4, 5, 10, 11):
            pynvml.nvmlDeviceGetViolationStatus(h, policy)
        pynvml.nvmlDeviceGetTotalEccErrors(h, 0, 0)
        pynvml.nvmlDeviceGetRemappedRows(h)
        pynvml.nvmlDeviceGetPcieReplayCounter(h)
        assert pynvml.nvmlDeviceGetMigMode(h) == [0, 0]
        assert pynvml.nvmlDeviceGetMaxMigDeviceCount(h) == 0
        assert pynvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice == 1
        assert pynvml.nvmlDeviceGetComputeRunningProcesses(h) == []
        fields = pynvml.nvmlDeviceGetFieldValues(h, [82, 91, 186])
        assert [f.nvmlReturn for f in fields] == [0, 0, 0]
    pynvml.nvmlShutdown()
    assert lib.init_count() == 0
