"""``gotthard rules migrate-names``: old metric names out of text files, by the table of
gotthard/exporters/names.py.
migrate-names: skip-file (this file holds old names on purpose)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gotthard.exporters import names
from tests.support.cli import ROOT, run_in_process

#: What ``migrate-names --check`` holds to no old name: the repository's own files.
TREE = (
    "gotthard",
    "tests",
    "testing",
    "docs",
    "scripts",
    "benchmarks",
    "README.md",
    "CHANGELOG.md",
    "Makefile",
    "Containerfile",
    "pyproject.toml",
)

PYTHON = """def gpu_health(gpu_lost: int) -> None:
    slurm_up: bool = True
    snapshot.gpu_lost = gpu_lost
    query = "sum(slurm_up) + gpu_lost{site='a'}"  # reads slurm_nodes
    text = f"lustre_health_check{{state=\\"{gpu_lost}\\"}} slurm_jobs"
    rule = "site_cluster_partition:slurm_nodes:sum and gotthard_slurm_up and slurm_up_x"
    kept = "slurm_up"  # migrate-names: keep
    expr = f"count({sel('gpu_info', slurm_up)})\\nslurm_up"
"""
PYTHON_MIGRATED = """def gpu_health(gpu_lost: int) -> None:
    slurm_up: bool = True
    snapshot.gpu_lost = gpu_lost
    query = "sum(gotthard_slurm_up) + gotthard_gpu_lost{site='a'}"  # reads gotthard_slurm_nodes
    text = f"gotthard_lustre_health_state{{state=\\"{gpu_lost}\\"}} gotthard_slurm_jobs"
    rule = "site_cluster_partition:gotthard_slurm_nodes:sum and gotthard_slurm_up and slurm_up_x"
    kept = "slurm_up"  # migrate-names: keep
    expr = f"count({sel('gotthard_gpu_info', slurm_up)})\\ngotthard_slurm_up"
"""
MARKDOWN = """On `slurm_up == 0`; `rate(slingshot_octets_total[5m])`.
record: site_cluster:gpu_utilization_ratio:avg
In code: gpu_lost=1, x.gpu_lost, def f(slurm_up: int).
<!-- migrate-names: off -->
lustre_node_role stays here
<!-- migrate-names: on -->
The role is lustre_node_role.
"""
MARKDOWN_MIGRATED = """On `gotthard_slurm_up == 0`; `rate(gotthard_slingshot_bytes_total[5m])`.
record: site_cluster:gotthard_gpu_utilization_ratio:avg
In code: gpu_lost=1, x.gpu_lost, def f(slurm_up: int).
<!-- migrate-names: off -->
lustre_node_role stays here
<!-- migrate-names: on -->
The role is gotthard_lustre_node_role_info.
"""


def test_migrates_then_check_is_clean_and_a_second_run_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "board.py").write_text(PYTHON)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "alerts.md").write_text(MARKDOWN)
    (tmp_path / "upstream.txt").write_text("# migrate-names: skip-file\nslurm_up 1\n")
    (tmp_path / "image.png").write_bytes(b"\x89PNG\0slurm_up")

    assert run_in_process("rules", "migrate-names", "--check", str(tmp_path)) == 1
    listed = capsys.readouterr().out.splitlines()
    assert f"{tmp_path / 'board.py'}:4: slurm_up -> gotthard_slurm_up" in listed
    assert (
        f"{tmp_path / 'notes' / 'alerts.md'}:7: lustre_node_role -> gotthard_lustre_node_role_info"
        in listed
    )
    assert not any("upstream.txt" in line or "image.png" in line for line in listed)
    assert (tmp_path / "board.py").read_text() == PYTHON  # --check changes nothing

    assert run_in_process("rules", "migrate-names", str(tmp_path)) == 0
    assert (tmp_path / "board.py").read_text() == PYTHON_MIGRATED
    assert (tmp_path / "notes" / "alerts.md").read_text() == MARKDOWN_MIGRATED
    assert (tmp_path / "upstream.txt").read_text() == "# migrate-names: skip-file\nslurm_up 1\n"
    capsys.readouterr()

    assert run_in_process("rules", "migrate-names", "--check", str(tmp_path)) == 0
    assert capsys.readouterr().out == ""
    assert run_in_process("rules", "migrate-names", str(tmp_path)) == 0
    assert (tmp_path / "board.py").read_text() == PYTHON_MIGRATED


def test_a_missing_path_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_in_process("rules", "migrate-names", str(tmp_path / "nope")) == 2
    assert "nope" in capsys.readouterr().err


def test_the_table_is_one_to_one_and_every_new_name_is_in_an_area_namespace() -> None:
    table = names.mapping()
    assert len(table) == len(names.RENAMES)
    assert len(set(table.values())) == len(table)
    assert not set(table) & set(table.values())
    for rename in names.RENAMES:
        metric = rename.new.split(":")[1] if rename.kind == "recording rule" else rename.new
        assert any(metric.startswith(f"gotthard_{area}_") for area in names.AREAS), rename
        assert rename.why


def test_without_legacy_names_no_old_name_is_built_and_with_it_only_the_legacy_group_has_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain, legacy = tmp_path / "plain", tmp_path / "legacy"
    site = tmp_path / "site.toml"
    site.write_text("[monitoring]\nlegacy_names = true\n")
    assert run_in_process("rules", "build", "--out", str(plain / "rules")) == 0
    assert run_in_process("dashboards", "build", "--out", str(plain / "dashboards")) == 0
    argv = ("rules", "build", "--format", "prometheus-operator", "--out", str(legacy))
    assert run_in_process("--config", str(site), *argv) == 0
    capsys.readouterr()

    assert run_in_process("rules", "migrate-names", "--check", str(plain)) == 0
    assert capsys.readouterr().out == ""

    assert run_in_process("rules", "migrate-names", "--check", str(legacy)) == 1
    left = {line.split(":", 1)[0] for line in capsys.readouterr().out.splitlines()}
    assert left == {str(legacy / "gotthard-legacy.prometheusrule.yaml")}
    document = yaml.safe_load((legacy / "gotthard-legacy.prometheusrule.yaml").read_text())
    (group,) = document["spec"]["groups"]
    assert group["name"] == names.LEGACY_GROUP
    assert {(r["record"], r["expr"]) for r in group["rules"]} == set(names.mapping().items())


def test_no_old_name_is_left_in_the_repository(capsys: pytest.CaptureFixture[str]) -> None:
    """What the coordinator runs after each merge: every old name is gone but where a
    marker keeps it (the table, the legacy fixture, other exporters' lists, the
    CHANGELOG entry, the rename table of docs/exporter.md)."""
    paths = [ROOT / name for name in TREE if (ROOT / name).exists()]
    assert run_in_process("rules", "migrate-names", "--check", *map(str, paths)) == 0, (
        capsys.readouterr().out
    )


def test_a_file_that_cannot_be_written_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    board = tmp_path / "board.json"
    board.write_text('{"expr": "sum(slurm_up)"}\n')

    real_write_text = Path.write_text

    def full_disk(self: Path, *args: Any, **kwargs: Any) -> int:
        # only this test's files: other threads of the worker (a live test's counter
        # trees) go on writing theirs
        if self.is_relative_to(tmp_path):
            raise OSError(28, "No space left on device")
        return real_write_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full_disk)  # the file system refuses the write
    assert run_in_process("rules", "migrate-names", str(tmp_path)) == 2
    assert capsys.readouterr().err.strip() == (
        f"gotthard rules migrate-names: cannot write {board}: No space left on device"
    )
