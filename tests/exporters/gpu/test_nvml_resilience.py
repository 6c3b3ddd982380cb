"""The gpu collector on NVML libraries that lack functions, and on GPUs that come and go.

Each NVML symbol the collector can make pynvml resolve is removed, one at a time, from
the FAKE libnvidia-ml.so.1 (``fakenvml.build_without``: the symbol is made local at link
time, so ``dlsym`` fails and pynvml's real lookup raises FunctionNotFound). The list of
symbols is derived from the collector's source, so a new NVML call cannot escape: every
run must report ``gotthard_collector_up 1`` and every series of the full library except
the ones that symbol feeds (``EFFECTS``).
"""

from __future__ import annotations

import ast
import contextlib
import ctypes
import inspect
import logging
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pynvml
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gotthard.exporters.gpu import links, nvml
from gotthard.exporters.gpu.collector import GpuCollector
from gotthard.exporters.runtime import CollectorRunner, Exporter
from gotthard.exporters.settings import GpuExporterConfig
from tests.fakenvml import fakenvml
from tests.support.cli import gotthard

#: This module's tests run on one worker (make test: --dist loadgroup), so that
#: the fake NVML, relinked once per symbol (a module fixture), is built once, not once per worker.
pytestmark = pytest.mark.xdist_group("nvml-variants")

GPU_PACKAGE = Path(nvml.__file__).parent
#: What the collector cannot work without: the test keeps them.
REQUIRED = frozenset(
    {"nvmlInitWithFlags", "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2"}
)
#: pynvml resolves this one itself, to word any NVMLError (``str(err)``).
PYNVML_OWN = frozenset({"nvmlErrorString"})

Series = frozenset[tuple[str, frozenset[tuple[str, str]]]]
Effect = Callable[[Series], Series]


# --- which symbols the collector uses ---------------------------------------------------


def _symbols_of(function_name: str, seen: set[str]) -> set[str]:
    """The C symbols a pynvml function looks up, following the pynvml functions it calls."""
    if function_name in seen:
        return set()
    seen.add(function_name)
    source = inspect.getsource(getattr(pynvml, function_name))
    found = set(re.findall(r"_nvmlGetFunctionPointer\(\s*[\"'](\w+)[\"']", source))
    for called in set(re.findall(r"\b(nvml\w+)\s*\(", source)) - {function_name}:
        if inspect.isfunction(getattr(pynvml, called, None)):
            found |= _symbols_of(called, seen)
    return found


def collector_symbols() -> frozenset[str]:
    """Every NVML symbol the gpu collector's code can make pynvml resolve.

    From the source of ``gotthard/exporters/gpu``: each ``pynvml.nvml*`` function it
    names (followed through pynvml), and each ``nvml*`` attribute read straight off the
    loaded library (``lib.nvmlDeviceGetFieldValues``).
    """
    symbols: set[str] = set(PYNVML_OWN)
    for path in sorted(GPU_PACKAGE.glob("*.py")):
        tree = ast.parse(path.read_text())
        # names bound to the loaded library itself: ``lib = pynvml.nvmlLib``
        libraries = {
            target.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign) and ast.unparse(node.value) == "pynvml.nvmlLib"
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not isinstance(node.value, ast.Name):
                continue
            if node.value.id in libraries:
                symbols.add(node.attr)
            elif node.value.id == "pynvml" and inspect.isfunction(getattr(pynvml, node.attr, None)):
                symbols |= _symbols_of(node.attr, set())
    return frozenset(symbols)


# --- what each missing symbol may take away ---------------------------------------------


def _labels(labels: frozenset[tuple[str, str]]) -> dict[str, str]:
    return dict(labels)


def drop(*names: str, where: Callable[[dict[str, str]], bool] = lambda _: True) -> Effect:
    """These series go (all of them, or those whose labels satisfy ``where``)."""

    def effect(series: Series) -> Series:
        return frozenset(
            (name, labels)
            for name, labels in series
            if not (name in names and where(_labels(labels)))
        )

    return effect


def blank(label: str, *names: str) -> Effect:
    """The label is empty (so absent) on these series, or on every series."""

    def effect(series: Series) -> Series:
        return frozenset(
            (name, frozenset((k, v) for k, v in labels if k != label))
            if not names or name in names
            else (name, labels)
            for name, labels in series
        )

    return effect


def both(*effects: Effect) -> Effect:
    def effect(series: Series) -> Series:
        for each in effects:
            series = each(series)
        return series

    return effect


def is_mig(labels: dict[str, str]) -> bool:
    return bool(labels.get("gpu_instance"))


def whole_gpu(labels: dict[str, str]) -> bool:
    return not is_mig(labels)


NOTHING: Effect = both()
GPM = (
    "gotthard_gpu_sm_active_ratio",
    "gotthard_gpu_sm_occupancy_ratio",
    "gotthard_gpu_tensor_active_ratio",
)
GPM += ("gotthard_gpu_dram_active_ratio",)
MEMORY = (
    "gotthard_gpu_memory_used_bytes",
    "gotthard_gpu_memory_total_bytes",
    "gotthard_gpu_memory_reserved_bytes",
)
XIDS = ("gotthard_gpu_last_xid", "gotthard_gpu_xid_errors_total")
ALL_GPU_FAMILIES = (
    "gotthard_gpu_info",
    "gotthard_gpu_health",
    *MEMORY,
    *GPM,
    *XIDS,
    "gotthard_gpu_utilization_ratio",
    "gotthard_gpu_memory_utilization_ratio",
    "gotthard_gpu_power_watts",
    "gotthard_gpu_power_limit_watts",
    "gotthard_gpu_energy_joules_total",
    "gotthard_gpu_temperature_celsius",
    "gotthard_gpu_clock_hertz",
    "gotthard_gpu_clocks_event_reasons",
    "gotthard_gpu_throttle_seconds_total",
    "gotthard_gpu_ecc_errors_total",
    "gotthard_gpu_remapped_rows",
    "gotthard_gpu_pcie_replays_total",
    "gotthard_gpu_pcie_bytes_total",
    "gotthard_gpu_nvlink_bytes_total",
    "gotthard_gpu_nvlink_errors_total",
)
MIG_INSTANCES = drop(*ALL_GPU_FAMILIES, where=is_mig)

#: Symbol -> the series (or labels) the collector loses without it; nothing else may go.
EFFECTS: dict[str, Effect] = {
    "nvmlErrorString": NOTHING,  # pynvml words the error "NVML Error with code N"
    "nvmlShutdown": NOTHING,
    "nvmlSystemGetDriverVersion": blank("driver_version", "gotthard_gpu_info"),
    "nvmlSystemGetCudaDriverVersion": blank("cuda_version", "gotthard_gpu_info"),
    "nvmlDeviceGetUUID": blank("uuid"),
    "nvmlDeviceGetName": blank("name", "gotthard_gpu_info"),
    "nvmlDeviceGetPciInfo_v3": blank("pci_bus_id", "gotthard_gpu_info"),
    "nvmlDeviceGetFieldValues": drop(
        "gotthard_gpu_pcie_bytes_total",
        "gotthard_gpu_nvlink_bytes_total",
        "gotthard_gpu_nvlink_errors_total",
        "gotthard_gpu_temperature_celsius",
        where=lambda labels: labels.get("sensor", "memory") == "memory",
    ),
    "nvmlDeviceGetUtilizationRates": drop(
        "gotthard_gpu_utilization_ratio", "gotthard_gpu_memory_utilization_ratio"
    ),
    "nvmlDeviceGetMemoryInfo": NOTHING,  # the collector asks for version 2
    "nvmlDeviceGetMemoryInfo_v2": drop(*MEMORY),
    "nvmlDeviceGetPowerUsage": drop("gotthard_gpu_power_watts"),
    "nvmlDeviceGetEnforcedPowerLimit": drop("gotthard_gpu_power_limit_watts"),
    "nvmlDeviceGetTotalEnergyConsumption": drop("gotthard_gpu_energy_joules_total"),
    "nvmlDeviceGetTemperatureV": NOTHING,  # falls back to nvmlDeviceGetTemperature
    "nvmlDeviceGetTemperature": NOTHING,  # only the fallback
    "nvmlDeviceGetClockInfo": drop("gotthard_gpu_clock_hertz"),
    "nvmlDeviceGetCurrentClocksEventReasons": drop("gotthard_gpu_clocks_event_reasons"),
    "nvmlDeviceGetViolationStatus": drop("gotthard_gpu_throttle_seconds_total"),
    "nvmlDeviceGetTotalEccErrors": drop("gotthard_gpu_ecc_errors_total"),
    "nvmlDeviceGetRemappedRows": drop("gotthard_gpu_remapped_rows"),
    "nvmlDeviceGetPcieReplayCounter": drop("gotthard_gpu_pcie_replays_total"),
    "nvmlDeviceGetComputeRunningProcesses_v3": NOTHING,  # no processes in this fixture
    "nvmlDeviceGetMigMode": MIG_INSTANCES,
    "nvmlDeviceGetMaxMigDeviceCount": MIG_INSTANCES,
    "nvmlDeviceGetMigDeviceHandleByIndex": MIG_INSTANCES,
    "nvmlDeviceGetGpuInstanceId": MIG_INSTANCES,
    "nvmlGpmQueryDeviceSupport": drop(*GPM),
    "nvmlGpmSampleAlloc": drop(*GPM),
    "nvmlGpmSampleFree": drop(*GPM),  # samples that cannot be freed are not taken
    "nvmlGpmMetricsGet": drop(*GPM),
    "nvmlGpmSampleGet": drop(*GPM, where=whole_gpu),
    "nvmlGpmMigSampleGet": drop(*GPM, where=is_mig),
    "nvmlEventSetCreate": drop(*XIDS),
    "nvmlDeviceRegisterEvents": drop(*XIDS),
    "nvmlEventSetWait_v2": NOTHING,  # the event thread ends; counts stay at 0
    "nvmlEventSetFree": NOTHING,
}


# --- running the exporter on one library ------------------------------------------------


def node_fixture() -> dict[str, fakenvml.FixtureValue]:
    """Two H200s with 2 NVLinks each; GPU 1 in MIG mode (two instances, one empty slot)."""
    lines = fakenvml.with_traffic(fakenvml.h200_node(2), links=2)
    for i in range(2):
        for link in range(2):  # every NVLink error type, so each one's loss shows
            for field_id in links.NVLINK_ERROR_FIELDS.values():
                lines[f"{i}.field.{field_id}.{link}"] = 0
    lines.update({"1.mig.mode": 1, "1.mig.count": 3})
    for slot, gi in ((0, 1), (1, 5)):
        prefix = f"1.mig.{slot}."
        lines[prefix + "uuid"] = f"MIG-fa4e0000-{gi:04x}-4000-8000-{slot:012x}"
        lines[prefix + "gi"] = gi
        lines[prefix + "memory.total"] = 40 * fakenvml.GIB
        lines[prefix + "memory.used"] = (slot + 1) * fakenvml.GIB
        lines[prefix + f"gpm.{pynvml.NVML_GPM_METRIC_SM_UTIL}"] = 10.0 * (slot + 1)
    return lines


@contextlib.contextmanager
def loaded(so_path: Path) -> Iterator[fakenvml.FakeLib]:
    lib = fakenvml.load_into_pynvml(so_path)
    lib.reset()
    try:
        yield lib
    finally:
        fakenvml.unload()
        lib.reset()


def gpu_collector(tmp_path: Path, **source: int) -> GpuCollector:
    config = GpuExporterConfig(
        poll_interval_seconds=0.001, kubelet_socket=str(tmp_path / "no-kubelet.sock")
    )
    gpu = GpuCollector(config, procfs=str(tmp_path / "proc"))
    gpu.source.event_timeout_ms = 20  # the event thread stops within a test's patience
    for name, value in source.items():
        setattr(gpu.source, name, value)
    return gpu


def parse(text: str) -> tuple[Series, float | None]:
    """The gotthard_gpu_* series (empty labels dropped) and ``gotthard_collector_up{gpu}``."""
    series, up = set(), None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "gotthard_collector_up" and sample.labels["collector"] == "gpu":
                up = sample.value
            elif sample.name.startswith("gotthard_gpu_"):
                labels = frozenset((k, v) for k, v in sample.labels.items() if v)
                series.add((sample.name, labels))
    return frozenset(series), up


@contextlib.contextmanager
def node(tmp_path: Path) -> Iterator[fakenvml.Fixture]:
    """The fake's fixture file, ``node_fixture()``, named by ``FAKE_NVML_FIXTURE``."""
    fixture = fakenvml.Fixture(tmp_path / "nvml.txt", node_fixture())
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(fakenvml.ENV_VAR, str(fixture.path))
        yield fixture


def exporter_output(so_path: Path, tmp_path: Path, polls: int = 3) -> tuple[Series, float | None]:
    """What ``/metrics`` shows once steady: after at least ``polls`` scrapes (GPM ratios
    need two polls), and until two scrapes in a row show the same series (a poll on a
    loaded machine can leave a GPM sample pair for the next one), at most 3 more."""
    with node(tmp_path), loaded(so_path):
        gpu = gpu_collector(tmp_path)
        exporter = Exporter([CollectorRunner(gpu)])
        try:
            outputs = [parse(exporter.scrape(timeout=10)) for _ in range(polls)]
            while outputs[-1][0] != outputs[-2][0] and len(outputs) < polls + 3:
                outputs.append(parse(exporter.scrape(timeout=10)))
        finally:
            exporter.close()
            gpu.close()
    return outputs[-1]


@pytest.fixture(scope="module")
def variants(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    try:
        return fakenvml.build_without(
            tmp_path_factory.mktemp("nvml-variants"), collector_symbols() - REQUIRED
        )
    except (fakenvml.BuildError, FileNotFoundError) as exc:
        pytest.fail(f"cannot build the fake NVML variants: {exc}", pytrace=False)


@pytest.fixture(scope="module")
def full_output(
    fake_nvml_lib: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Series, float | None]:
    return exporter_output(fake_nvml_lib, tmp_path_factory.mktemp("full"))


def test_every_symbol_the_collector_uses_has_a_stated_effect() -> None:
    symbols = collector_symbols()
    assert symbols >= REQUIRED
    assert set(EFFECTS) == symbols - REQUIRED


def test_the_full_library_shows_every_family_and_resolves_only_known_symbols(
    fake_nvml_lib: Path, full_output: tuple[Series, float | None], tmp_path: Path
) -> None:
    series, up = full_output
    assert up == 1
    # every family appears, so a symbol's loss is visible (gotthard_gpu_xid_errors_total needs
    # an XID)
    assert {name for name, _ in series} >= set(ALL_GPU_FAMILIES) - {"gotthard_gpu_xid_errors_total"}
    assert any(is_mig(_labels(labels)) for name, labels in series if name in GPM)
    # what pynvml looked up while the collector ran is all in the derived list
    with node(tmp_path), loaded(fake_nvml_lib):
        gpu = gpu_collector(tmp_path)
        for _ in range(2):
            gpu.poll()
        resolved = set(pynvml._nvmlGetFunctionPointer_cache)
        gpu.close()
    assert resolved <= collector_symbols()


@pytest.mark.parametrize("symbol", sorted(EFFECTS))
def test_a_library_without_one_function_loses_only_what_that_function_gives(
    symbol: str,
    variants: dict[str, Path],
    fake_nvml_lib: Path,
    full_output: tuple[Series, float | None],
    tmp_path: Path,
) -> None:
    library = variants[symbol]
    assert not hasattr(ctypes.CDLL(str(library)), symbol)
    assert hasattr(ctypes.CDLL(str(fake_nvml_lib)), symbol)
    full, _ = full_output
    series, up = exporter_output(library, tmp_path)
    assert up == 1
    expected = EFFECTS[symbol](full)
    assert series - expected == frozenset(), "unexpected series"
    assert expected - series == frozenset(), "series missing beyond what the symbol gives"


def test_a_missing_function_is_logged_once_per_device_not_per_poll(
    variants: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with node(tmp_path), loaded(variants["nvmlDeviceGetPowerUsage"]):
        gpu = gpu_collector(tmp_path)
        with caplog.at_level(logging.INFO, logger="gotthard.exporter.gpu"):
            for _ in range(4):
                snapshot = gpu.poll()
        gpu.close()
    lines = [r.getMessage() for r in caplog.records if "power not supported" in r.getMessage()]
    assert sorted(line.split(":")[0] for line in lines) == ["GPU 0", "GPU 1"]
    assert "Function Not Found" in lines[0]
    assert snapshot.errors == 0


def test_exporter_on_a_driver_without_the_versioned_pci_call_reports_its_gpus(
    variants: dict[str, Path], tmp_path: Path
) -> None:
    """pynvml calls nvmlDeviceGetPciInfo_v3; a driver without it must not hide the GPUs."""
    fixture = fakenvml.Fixture(tmp_path / "nvml.txt", fakenvml.h200_node(8))
    env = fakenvml.subprocess_env(variants["nvmlDeviceGetPciInfo_v3"], fixture.path)
    result = gotthard("exporter", "--once", "--collectors", "gpu", env=env)
    assert result.returncode == 0, result.stderr
    assert 'gotthard_collector_up{collector="gpu"} 1' in result.stdout
    info = [line for line in result.stdout.splitlines() if line.startswith("gotthard_gpu_info{")]
    assert len(info) == 8 and all('uuid="GPU-' in line for line in info)
    assert not any('pci_bus_id="0' in line for line in info)
    assert result.stdout.count("gotthard_gpu_power_watts{") == 8
    assert "Traceback" not in result.stderr
