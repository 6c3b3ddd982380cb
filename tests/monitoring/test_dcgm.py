"""The DCGM mapping group (``[monitoring] gpu_source = "dcgm"``).

``promtool test rules`` (tests/monitoring/dcgm_tests/) feeds dcgm-exporter series, with
its real metric names, units and labels, through the built rules: the mapped series have
Gotthard's names, units and labels, and Gotthard's GPU alerts fire from them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gotthard.monitoring import dcgm
from tests.monitoring import promtool
from tests.monitoring.gpu_sample import gpu_family_names
from tests.support.cli import run_in_process
from tests.support.monitoring import load_yaml

UNIT_TESTS = Path(__file__).resolve().parent / "dcgm_tests"
#: dcgm-exporter's field names (default-counters.csv and the commented-out ones; see
#: docs/exporter.md): the mapping may read no other.
DCGM_FIELDS = frozenset(
    {
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_MEMORY_TEMP",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_RESERVED",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "DCGM_FI_DEV_POWER_VIOLATION",
        "DCGM_FI_DEV_THERMAL_VIOLATION",
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    }
)


def build(out: Path, site_file: Path, source: str) -> None:
    site_file.write_text(f'[monitoring]\ngpu_source = "{source}"\n')
    argv = ["--config", str(site_file), "rules", "build", "--out", str(out)]
    assert run_in_process(*argv) == 0


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dcgm")
    build(out, out / "site.toml", "dcgm")
    return out


def test_the_group_is_in_the_rules_only_when_dcgm_is_the_gpu_source(
    built: Path, tmp_path: Path
) -> None:
    groups = [g["name"] for g in load_yaml(built / "recording.rules.yml")["groups"]]
    assert groups[0] == dcgm.GROUP
    build(tmp_path, tmp_path / "site.toml", "gotthard")
    groups = [g["name"] for g in load_yaml(tmp_path / "recording.rules.yml")["groups"]]
    assert dcgm.GROUP not in groups
    # an unknown source is a configuration error that names the key
    (tmp_path / "bad.toml").write_text('[monitoring]\ngpu_source = "nvsmi"\n')
    argv = ["--config", str(tmp_path / "bad.toml"), "rules", "build", "--out", str(tmp_path)]
    assert run_in_process(*argv) == 2


def test_promtool_check_rules(built: Path) -> None:
    promtool.check_rules(built / "recording.rules.yml")


@pytest.mark.parametrize("name", sorted(p.name for p in UNIT_TESTS.glob("*.test.yml")))
def test_promtool_unit_tests(built: Path, name: str, tmp_path: Path) -> None:
    promtool.unit_test(built, UNIT_TESTS / name, tmp_path)


def test_unit_tests_fire_gpu_alerts_from_dcgm_input() -> None:
    fired = set()
    for path in UNIT_TESTS.glob("*.test.yml"):
        for case in load_yaml(path)["tests"]:
            for series in case.get("input_series", []):
                assert series["series"].startswith("DCGM_FI_"), series["series"]
            fired |= {c["alertname"] for c in case.get("alert_rule_test", []) if c["exp_alerts"]}
    assert {"GPURowRemapFailure", "GPUThermalThrottling", "GPUIdleWhileAllocated"} <= fired


def test_records_are_gotthard_gpu_names_read_from_real_dcgm_fields() -> None:
    exported = gpu_family_names()
    for rule in dcgm.rules():
        assert rule["record"] in exported, rule["record"]
        for name in re.findall(r"\bDCGM_\w+", rule["expr"]):
            if name != "DCGM_FI_DRIVER_VERSION":  # a label, not a series
                assert name in DCGM_FIELDS, name
