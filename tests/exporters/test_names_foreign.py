"""Gotthard's metric names against the exporters a site already runs.

The lists in tests/fixtures/foreign-names/ (each file says where it comes from) hold the
names of node_exporter, dcgm-exporter, HPE's lustre_exporter, lustrefs-exporter and
vpenso's and SckyzO's Slurm exporters. A Gotthard family may carry another exporter's
name only with exactly that exporter's semantics and labels, listed in
:data:`INTENTIONAL_SHARES` with the reason; any other shared name fails here, since a
site running both exporters would get two meanings under one name (double counts in
``sum()``, alerts that fire on the other's series).
migrate-names: skip-file (the renamed names below are other exporters' names)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gotthard.exporters import names
from gotthard.monitoring import dcgm, rules
from tests.monitoring.gpu_sample import gpu_family_names

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FOREIGN = FIXTURES / "foreign-names"
GOLDEN = FIXTURES / "golden"
EXPORTERS = (
    "node_exporter",
    "dcgm-exporter",
    "hpe-lustre_exporter",
    "lustrefs-exporter",
    "vpenso-prometheus-slurm-exporter",
    "sckyzo-slurm_exporter",
)
#: How the rename table's "why" names each exporter.
OWNER = {
    "node_exporter": "node_exporter",
    "dcgm-exporter": "dcgm-exporter",
    "hpe-lustre_exporter": "HPE",
    "lustrefs-exporter": "lustrefs-exporter",
    "vpenso-prometheus-slurm-exporter": "vpenso",
    "sckyzo-slurm_exporter": "SckyzO",
}
#: (Gotthard name, exporter) -> why the name is shared on purpose: same semantics and
#: labels as that exporter's. None today.
INTENTIONAL_SHARES: dict[tuple[str, str], str] = {}


def foreign(exporter: str) -> set[str]:
    lines = (FOREIGN / f"{exporter}.txt").read_text(encoding="utf-8").splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def gotthard_names() -> set[str]:
    """Every name Gotthard writes: the families of the ``gotthard exporter --once``
    outputs of the golden tests, the GPU collector's families, the families of the
    rename table, and the recording rules (the DCGM mapping's included)."""
    found = set(gpu_family_names())
    for golden in GOLDEN.glob("*.prom"):
        for line in golden.read_text(encoding="utf-8").splitlines():
            if line.startswith("# TYPE "):
                found.add(line.split()[2])
    found |= {rename.new for rename in names.RENAMES}
    for group in [*rules.recording_groups()["groups"], dcgm.recording_group()]:
        found |= {rule["record"] for rule in group["rules"]}
    return found


def base(name: str) -> str:
    """A name without its counter suffix: ``x_total`` and ``x`` are one family."""
    return name.removesuffix("_total")


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_no_gotthard_name_is_another_exporters_name(exporter: str) -> None:
    theirs = {base(name) for name in foreign(exporter)}
    shared = {name for name in gotthard_names() if base(name) in theirs}
    unexplained = {n for n in shared if (n, exporter) not in INTENTIONAL_SHARES}
    assert unexplained == set(), f"also {exporter}'s names, with other semantics"


def test_every_collector_family_is_in_its_areas_namespace() -> None:
    exported = {name for name in gotthard_names() if ":" not in name}
    prefixes = tuple(f"gotthard_{area}_" for area in names.AREAS)
    others = {n for n in exported if n.startswith("gotthard_") and not n.startswith(prefixes)}
    assert {n for n in exported if not n.startswith("gotthard_")} == set()
    # the exporter's own families (collector health, textfile, build) keep gotthard_
    assert all(n.startswith(("gotthard_collector_", "gotthard_textfile_", "gotthard_build_",
                             "gotthard_time_")) for n in others), others  # fmt: skip


def test_the_lists_are_the_real_ones_and_the_old_names_collided() -> None:
    """The fixtures hold what the issue found: five Lustre names identical to HPE's,
    vpenso's scheduler names; and the rename table says, for every old name another
    exporter used, whose name it was."""
    lists = {exporter: foreign(exporter) for exporter in EXPORTERS}
    assert len(lists["node_exporter"]) > 1000 and "node_cpu_seconds_total" in lists["node_exporter"]
    assert "DCGM_FI_DEV_GPU_UTIL" in lists["dcgm-exporter"]
    old = set(names.mapping())
    assert old & lists["hpe-lustre_exporter"] == {
        "lustre_health_check",
        "lustre_read_bytes_total",
        "lustre_write_bytes_total",
        "lustre_job_read_bytes_total",
        "lustre_job_write_bytes_total",
    }
    vpenso = old & lists["vpenso-prometheus-slurm-exporter"]
    assert {"slurm_scheduler_threads", "slurm_scheduler_backfill_depth_mean"} <= vpenso
    why = {rename.old: rename.why for rename in names.RENAMES}
    for exporter, theirs in lists.items():
        for name in {n for n in old if base(n) in {base(t) for t in theirs}}:
            assert OWNER[exporter] in why[name], (name, exporter, why[name])
