"""The cardinality budget: no role exports more series than benchmarks/cardinality_budget.json
allows, at the stated size of benchmarks/cardinality.py (the real render code)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cardinality() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gotthard_cardinality", ROOT / "benchmarks" / "cardinality.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rows(cardinality: ModuleType) -> list[dict]:
    return cardinality.measure()


def test_every_role_stays_within_its_budget(cardinality: ModuleType, rows: list[dict]) -> None:
    budget = json.loads(cardinality.BUDGET_FILE.read_text())
    assert {row["role"] for row in rows} == set(budget), "a role without a budget, or the reverse"
    assert cardinality.over_budget(rows) == []


def test_growth_past_the_budget_is_reported(cardinality: ModuleType, rows: list[dict]) -> None:
    grown = [dict(row, series=row["budget"] + 1) if row["role"] == "gpu" else row for row in rows]
    assert cardinality.over_budget(grown) == [
        f"gpu: {rows[0]['budget'] + 1} series, budget {rows[0]['budget']}"
    ]


def test_per_job_and_per_user_series_are_opt_in_and_bounded(rows: list[dict]) -> None:
    by_role = {row["role"]: row for row in rows}
    # the per-job rows name the option that turns them on and their bound
    for role in ("lustre-oss-jobs", "lustre-mds-jobs", "slurm-job-info", "slurm-per-user"):
        assert by_role[role]["option"] and by_role[role]["bound"], role
    # job stats of 10,000 jobs per target are cut to the limit: under 10 series per job kept
    assert by_role["lustre-oss-jobs"]["series"] < 10 * 1000 * 10
    # without the options, the Slurm controller's series do not grow with the jobs
    assert by_role["slurm"]["series"] < by_role["slurm-job-info"]["series"]
    assert by_role["slurm"]["per"]["node"] < 20


def test_nvlink_series_are_per_gpu_unless_per_link_is_asked_for(
    cardinality: ModuleType, rows: list[dict]
) -> None:
    by_role = {row["role"]: row for row in rows}
    sizes = cardinality.SIZES
    links = sizes["gpus_per_node"] * sizes["nvlinks_per_gpu"]
    per_link = by_role["gpu-nvlink-per-link"]
    assert per_link["option"] == "--gpu.nvlink-per-link" and per_link["bound"]
    # the option adds 5 error types and 2 directions per link, and nothing else
    assert per_link["series"] - by_role["gpu"]["series"] == links * 7
    # by default a GPU exports fewer series in all than one per NVLink and error type
    assert by_role["gpu"]["per"]["gpu"] < sizes["nvlinks_per_gpu"] * 5
