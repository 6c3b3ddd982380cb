"""The ``lustre`` collector on client/OSS/MDS trees of Lustre 2.10, 2.12 and 2.15, the real
HPE lustre_exporter tree, recorded ``lctl`` output, and random input (hypothesis)."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from gotthard.exporters.families import render_text
from gotthard.exporters.lustre import parse
from gotthard.exporters.lustre.collector import LustreCollector
from gotthard.exporters.lustre.render import render, render_job_stats, top_jobs
from gotthard.exporters.lustre.snapshot import ClientIO, LustreSnapshot, TargetJobStats
from gotthard.exporters.lustre.source import (
    LctlError,
    LctlSource,
    ParamTree,
    ProcfsSource,
    assemble,
    tree_from_lctl,
)
from gotthard.exporters.runtime import CollectorRunner
from gotthard.exporters.settings import LustreExporterConfig
from tests.exporters.lustre_tree import (
    NODES,
    TREES,
    ClientView,
    Job,
    Node,
    Op,
    build_job_stats,
    job_stats_text,
    stats_text,
    write_tree,
)
from tests.support.cli import gotthard
from tests.support.golden import assert_golden, mask
from tests.support.monitoring import promtool_check_metrics

FIXTURES = Path(__file__).parent.parent / "fixtures"
LUSTRE = FIXTURES / "lustre"
GOLDEN = FIXTURES / "golden"
RECORDED = LUSTRE / "recorded-lctl"
ALL_TREES = [*TREES, "hpe-lustre_exporter"]

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def config(**overrides: object) -> LustreExporterConfig:
    return LustreExporterConfig(**overrides)  # type: ignore[arg-type]


def collector(tree: str | Path, **overrides: object) -> LustreCollector:
    root = Path(tree) if isinstance(tree, Path) else LUSTRE / tree
    return LustreCollector(config(**overrides), procfs=str(root / "proc"), sysfs=str(root / "sys"))


def poll(tree: str | Path, **overrides: object) -> tuple[LustreSnapshot, str]:
    source = collector(tree, **overrides)
    snapshot = source.poll()
    return snapshot, render_text(source.render(snapshot))


def samples(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in out, f"duplicate series {key}"
            out[key] = sample.value
    return out


def value(parsed: Samples, name: str, **labels: str) -> float:
    return parsed[(name, tuple(sorted(labels.items())))]


def series(parsed: Samples, name: str, **labels: str) -> list[dict[str, str]]:
    """Label sets of *name* whose labels include *labels*."""
    found = []
    for (metric, label_items), _ in parsed.items():
        have = dict(label_items)
        if metric == name and all(have.get(k) == v for k, v in labels.items()):
            found.append(have)
    return found


def ost(target: str) -> dict[str, str]:
    """The labels of an OST target of the ``lustre`` file system as its server sees it."""
    return {"fs": "lustre", "target": target, "component": "ost"}


def kib(tree: str, path: str) -> int:
    return int((LUSTRE / tree / path).read_text()) * 1024


# --- golden --once output ----------------------------------------------------------------


def once(root: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """``gotthard exporter --once`` with the lustre collector on the tree at *root*."""
    result = gotthard(
        "exporter", "--once", "--collectors", "lustre",
        "--path.procfs", str(root / "proc"), "--path.sysfs", str(root / "sys"), *flags,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result


def check_golden(name: str, stdout: str) -> None:
    assert_golden(GOLDEN / f"lustre-{name}.prom", mask(stdout))
    promtool_check_metrics(stdout)


@pytest.mark.parametrize("tree", ALL_TREES)
def test_once_output_matches_golden(tree: str) -> None:
    result = once(LUSTRE / tree)
    assert result.stderr == ""
    assert 'gotthard_collector_up{collector="lustre"} 1' in result.stdout
    assert 'gotthard_collector_errors_total{collector="lustre"} 0' in result.stdout
    assert "lustre_job_" not in result.stdout  # job stats are opt-in
    check_golden(tree, result.stdout)


def test_once_output_with_job_stats_matches_golden() -> None:
    result = once(LUSTRE / "oss-2.15", "--lustre.job-stats", "--lustre.job-stats-limit", "2")
    assert (
        'gotthard_lustre_job_stats_truncated{fs="lustre",target="lustre-OST0000",component="ost"} 1'
        in result.stdout
    )
    check_golden("oss-2.15-job-stats", result.stdout)


def test_lctl_source_from_the_command_line_matches_procfs(tmp_path: Path) -> None:
    site = tmp_path / "site.toml"
    site.write_text(f'[exporter.lustre]\nlctl_path = "{RECORDED / "oss-2.15" / "lctl"}"\n')
    result = gotthard(
        "--config", str(site), "exporter", "--once", "--collectors", "lustre",
        "--lustre.source", "lctl",
        # LNet counters are read from their file in both modes
        "--path.procfs", str(LUSTRE / "oss-2.15" / "proc"),
        "--path.sysfs", str(LUSTRE / "oss-2.15" / "sys"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert mask(result.stdout) == (GOLDEN / "lustre-oss-2.15.prom").read_text()


# --- roles, versions, labels -------------------------------------------------------------


@pytest.mark.parametrize(
    ("tree", "roles", "version"),
    [
        ("client-2.15", ("client",), "2.15.4"),
        ("oss-2.15", ("oss",), "2.15.4"),
        ("mds-2.15", ("mds", "mgs"), "2.15.4"),
        ("combined-2.12", ("client", "oss", "mds", "mgs"), "2.12.9"),
        ("combined-2.10", ("client", "oss", "mds", "mgs"), "2.10.8"),
        ("hpe-lustre_exporter", ("client", "oss", "mds", "mgs"), "2.10.1"),
    ],
)
def test_roles_and_version_are_detected(tree: str, roles: tuple[str, ...], version: str) -> None:
    snapshot, text = poll(tree, job_stats=True)
    assert snapshot.roles == roles
    assert snapshot.version == version
    assert snapshot.errors == 0
    parsed = samples(text)
    assert value(parsed, "gotthard_lustre_info", version=version) == 1
    assert {labels["role"] for labels in series(parsed, "gotthard_lustre_node_role_info")} == set(
        roles
    )


def test_oss_capacity_comes_from_osd_in_bytes() -> None:
    _, text = poll("oss-2.15")
    parsed = samples(text)
    osd = "sys/fs/lustre/osd-ldiskfs/lustre-OST0000"
    key = {"fs": "lustre", "target": "lustre-OST0000", "component": "ost"}
    total = kib("oss-2.15", f"{osd}/kbytestotal")
    assert value(parsed, "gotthard_lustre_target_capacity_bytes", **key) == total
    avail = kib("oss-2.15", f"{osd}/kbytesavail")
    assert value(parsed, "gotthard_lustre_target_available_bytes", **key) == avail
    free = kib("oss-2.15", f"{osd}/kbytesfree")
    assert value(parsed, "gotthard_lustre_target_free_bytes", **key) == free
    files = int((LUSTRE / "oss-2.15" / osd / "filestotal").read_text())
    assert value(parsed, "gotthard_lustre_target_files", **key, state="total") == files
    assert len(series(parsed, "gotthard_lustre_target_capacity_bytes")) == 3
    # a server has no client view
    assert not series(parsed, "gotthard_lustre_target_active")


def test_old_obdfilter_capacity_is_the_fallback() -> None:
    # 2.10 tree: OST space only under proc/fs/lustre/obdfilter/*, MDT space under osd-ldiskfs
    _, text = poll("combined-2.10")
    parsed = samples(text)
    ost = {"fs": "testfs", "target": "testfs-OST0000", "component": "ost"}
    path = "proc/fs/lustre/obdfilter/testfs-OST0000/kbytestotal"
    assert value(parsed, "gotthard_lustre_target_capacity_bytes", **ost) == kib(
        "combined-2.10", path
    )
    mdt = {"fs": "testfs", "target": "testfs-MDT0000", "component": "mdt"}
    path = "proc/fs/lustre/osd-ldiskfs/testfs-MDT0000/kbytestotal"
    assert value(parsed, "gotthard_lustre_target_capacity_bytes", **mdt) == kib(
        "combined-2.10", path
    )


def test_osd_wins_over_obdfilter_when_both_exist() -> None:
    # the HPE tree (2.10.1 on ZFS) has both; their kbytesavail differ
    _, text = poll("hpe-lustre_exporter")
    parsed = samples(text)
    key = {"fs": "lustrefs", "target": "lustrefs-OST0000", "component": "ost"}
    osd = kib("hpe-lustre_exporter", "proc/fs/lustre/osd-zfs/lustrefs-OST0000/kbytesavail")
    obdfilter = kib("hpe-lustre_exporter", "proc/fs/lustre/obdfilter/lustrefs-OST0000/kbytesavail")
    assert osd != obdfilter
    assert value(parsed, "gotthard_lustre_target_available_bytes", **key) == osd


@pytest.mark.parametrize("tree", ["combined-2.10", "combined-2.12", "hpe-lustre_exporter"])
def test_the_same_ost_has_the_same_labels_on_client_and_server(tree: str) -> None:
    _, text = poll(tree)
    parsed = samples(text)
    name = "gotthard_lustre_target_capacity_bytes"
    client = {(s["fs"], s["target"]) for s in series(parsed, name, component="osc")}
    server = {(s["fs"], s["target"]) for s in series(parsed, name, component="ost")}
    assert server and server <= client


def test_client_trees_join_server_trees() -> None:
    _, client_text = poll("client-2.15")
    _, oss_text = poll("oss-2.15")
    name = "gotthard_lustre_target_capacity_bytes"
    client = {(s["fs"], s["target"]) for s in series(samples(client_text), name, component="osc")}
    server = {(s["fs"], s["target"]) for s in series(samples(oss_text), name, component="ost")}
    assert server == {("lustre", f"lustre-OST000{i}") for i in range(3)}
    assert server <= client


def test_without_client_target_space_the_servers_alone_export_space() -> None:
    """``--lustre.client-target-space=false``: a client drops its view of each target's
    space and inodes, and keeps whether it can reach the target; a server loses nothing."""
    space = {
        "gotthard_lustre_target_capacity_bytes",
        "gotthard_lustre_target_available_bytes",
        "gotthard_lustre_target_free_bytes",
        "gotthard_lustre_target_files",
    }
    full, lean = (samples(poll("client-2.15", client_target_space=on)[1]) for on in (True, False))
    dropped = set(full) - set(lean)
    # five gauges (files: total and free) of each active OSC (9) and MDC (3)
    assert set(lean) <= set(full) and len(dropped) == 5 * 9 + 5 * 3
    assert {name for name, _ in dropped} == space
    assert {dict(labels)["component"] for _, labels in dropped} == {"osc", "mdc"}
    assert not [key for key in lean if key[0] in space]
    for name in ("gotthard_lustre_target_active", "gotthard_lustre_target_import_connected"):
        assert series(lean, name, component="osc") == series(full, name, component="osc")
    server = [samples(poll("oss-2.15", client_target_space=on)[1]) for on in (True, False)]
    assert server[0] == server[1] and series(server[1], "gotthard_lustre_target_free_bytes")
    flag = "--lustre.client-target-space=false"
    text = once(LUSTRE / "client-2.15", flag).stdout
    assert "gotthard_lustre_target_import_connected{" in text
    assert "gotthard_lustre_target_capacity_bytes{" not in text


def test_without_client_target_imports_a_client_exports_only_the_imports_in_trouble() -> None:
    """``--lustre.client-target-imports=false``: a client exports a target's import and
    activity only while the import is disconnected or deactivated, and the per-file-system
    summary counts every import either way: what the alerts read at a large site."""
    per_target = ("gotthard_lustre_target_active", "gotthard_lustre_target_import_connected")
    summary = "gotthard_lustre_client_imports"
    for tree in ("client-2.15", "combined-2.12"):
        full, lean = (samples(poll(tree, client_target_imports=on)[1]) for on in (True, False))
        in_trouble = {key: v for key, v in full.items() if key[0] in per_target and v == 0}
        assert in_trouble, tree  # each tree has a deactivated or a disconnected import
        assert {key: v for key, v in lean.items() if key[0] in per_target} == in_trouble
        rest = {key: v for key, v in full.items() if key[0] not in per_target}
        assert {key: v for key, v in lean.items() if key[0] not in per_target} == rest
        # the summary: per file system and component, the per-target series counted
        counted: dict[tuple[str, str, str], float] = {}
        for (name, labels), v in full.items():
            if name in per_target:
                have = dict(labels)
                state = (
                    "deactivated"
                    if name == per_target[0]
                    else ("connected" if v == 1 else "disconnected")
                )
                if name == per_target[0] and v == 1:
                    continue
                key = (have["fs"], have["component"], state)
                counted[key] = counted.get(key, 0) + 1
        exported = {
            (have["fs"], have["component"], have["state"]): value(lean, summary, **have)
            for have in series(lean, summary)
        }
        assert {key: v for key, v in exported.items() if v} == counted, tree
        assert {key[2] for key in exported} == {"connected", "disconnected", "deactivated"}
    # a server has no client imports, so no summary
    assert not series(samples(poll("oss-2.15", client_target_imports=False)[1]), summary)
    text = once(LUSTRE / "client-2.15", "--lustre.client-target-imports=false").stdout
    assert 'gotthard_lustre_target_active{fs="lustre",target="lustre-OST0003"' in text
    assert "gotthard_lustre_target_import_connected{" not in text
    assert 'gotthard_lustre_client_imports{fs="lustre",component="osc",state="connected"} 7' in text


def test_inactive_ost_is_skipped_on_the_client() -> None:
    snapshot, text = poll("client-2.15")
    parsed = samples(text)
    assert snapshot.errors == 0
    key = {"fs": "lustre", "target": "lustre-OST0003", "component": "osc"}
    assert value(parsed, "gotthard_lustre_target_active", **key) == 0
    for name in ("gotthard_lustre_target_capacity_bytes", "gotthard_lustre_target_available_bytes"):
        assert not series(parsed, name, target="lustre-OST0003")
        assert len(series(parsed, name, fs="lustre", component="osc")) == 7
    # the other file system mounted on the client is there too
    assert len(series(parsed, "gotthard_lustre_target_capacity_bytes", fs="scratch")) == 3


def test_inactive_osc_files_are_not_even_read(tmp_path: Path) -> None:
    root = write_tree(tmp_path, NODES["client"], "2.15")
    device = root / "sys/fs/lustre/osc/lustre-OST0003-osc-ffff9a4c2d1e8000"
    for name in ("kbytestotal", "kbytesavail"):
        (device / name).unlink()
        (device / name).mkdir()  # reading it would be an error
    snapshot, _ = poll(root)
    assert snapshot.errors == 0


def test_mds_side_osc_devices_are_not_a_client() -> None:
    for tree in ("mds-2.15", "combined-2.10"):
        _, text = poll(tree)
        parsed = samples(text)
        names = {s["target"] for s in series(parsed, "gotthard_lustre_target_active")}
        assert all("MDT" in name or "OST" in name for name in names)
    snapshot, _ = poll("mds-2.15")
    assert "client" not in snapshot.roles
    _, text = poll("combined-2.10")
    osc = series(samples(text), "gotthard_lustre_target_capacity_bytes", component="osc")
    assert len(osc) == 1  # the client's, not the MDS's testfs-OST0000-osc-MDT0000


def test_files_that_moved_between_proc_and_sys_work_in_either_place(tmp_path: Path) -> None:
    """The 2.15 client and OSS trees with every parameter moved to the other place."""
    for tree in ("client-2.15", "oss-2.15", "mds-2.15"):
        _, expected = poll(tree, job_stats=True)
        moved = tmp_path / tree
        shutil.copytree(LUSTRE / tree, moved, symlinks=True)
        proc = moved / "proc/fs/lustre"
        sys_ = moved / "sys/fs/lustre"
        debug = moved / "sys/kernel/debug/lustre"
        # everything from /sys and debugfs to /proc and the /proc files to /sys
        staging = moved / "staging"
        shutil.move(str(proc), staging)
        for source in (sys_, debug):
            if source.exists():
                shutil.copytree(source, proc, dirs_exist_ok=True)
                shutil.rmtree(source)
        shutil.copytree(staging, sys_, dirs_exist_ok=True)
        shutil.rmtree(staging)
        snapshot, text = poll(moved, job_stats=True)
        assert snapshot.errors == 0
        assert text == expected, tree


def test_node_without_lustre_reports_nothing_and_no_error(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "sys" / "fs").mkdir(parents=True)
    for tree in (tmp_path, tmp_path / "missing"):
        snapshot, text = poll(tree, job_stats=True)
        assert snapshot.roles == ()
        assert snapshot.errors == 0
        assert text == ""


def test_node_without_lustre_on_the_command_line(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "sys").mkdir()
    result = once(tmp_path, "--lustre.job-stats")
    assert result.stderr == ""
    assert 'gotthard_collector_up{collector="lustre"} 1' in result.stdout
    assert 'gotthard_collector_errors_total{collector="lustre"} 0' in result.stdout
    assert "\ngotthard_lustre_" not in result.stdout and not result.stdout.startswith(
        "gotthard_lustre_"
    )


def test_unreadable_debugfs_is_reported_once_not_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    root = write_tree(tmp_path, NODES["client"], "2.15")
    real_scandir = os.scandir

    def scandir(path: str):  # type: ignore[no-untyped-def]
        if "kernel/debug" in str(path):
            raise PermissionError(13, "Permission denied")
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    source = collector(root)
    with caplog.at_level(logging.WARNING, logger="gotthard.exporter.lustre"):
        first = source.poll()
        second = source.poll()
    assert first.errors == second.errors == 0
    assert len([r for r in caplog.records if "run as root" in r.message]) == 1
    # client stats live in debugfs from 2.12 on; capacity still comes from /sys
    assert not [s for s in first.stats if s.component == "client"]
    assert first.capacity


def test_unreadable_and_garbage_files_are_counted(tmp_path: Path) -> None:
    root = write_tree(tmp_path, NODES["oss"], "2.15")
    osd = root / "sys/fs/lustre/osd-ldiskfs/lustre-OST0000"
    (osd / "kbytestotal").write_text("lots\n")
    (osd / "kbytesfree").unlink()
    (osd / "kbytesfree").mkdir()  # IsADirectoryError on read
    stats = root / "proc/fs/lustre/obdfilter/lustre-OST0001/stats"
    stats.write_text(stats.read_text() + "this is not a stats line\n")
    snapshot, text = poll(root)
    assert snapshot.errors == 3
    parsed = samples(text)
    key = {"fs": "lustre", "target": "lustre-OST0000", "component": "ost"}
    assert not series(parsed, "gotthard_lustre_target_capacity_bytes", **key)
    assert series(parsed, "gotthard_lustre_target_available_bytes", **key)
    assert value(parsed, "gotthard_lustre_operations_total", fs="lustre", target="lustre-OST0001",
                 component="ost", operation="statfs") > 0  # fmt: skip


# --- operations --------------------------------------------------------------------------


def test_oss_operations_latency_and_bytes_2_15() -> None:
    _, text = poll("oss-2.15")
    parsed = samples(text)
    key = {"fs": "lustre", "target": "lustre-OST0000", "component": "ost"}
    block = parse.parse_stats(
        (LUSTRE / "oss-2.15/proc/fs/lustre/obdfilter/lustre-OST0000/stats").read_text()
    )
    assert block.errors == 0
    assert value(parsed, "gotthard_lustre_operations_total", **key, operation="write") == 98_765 * 7
    assert value(
        parsed, "gotthard_lustre_operation_latency_seconds_total", **key, operation="write"
    ) == (pytest.approx(98_765 * 7 * 2_310 / 1e6))
    assert value(parsed, "gotthard_lustre_write_bytes_total", **key) == 98_765 * 7 * 4_194_304
    assert value(parsed, "gotthard_lustre_read_bytes_total", **key) == 120_345 * 7 * 1_048_576
    # byte lines are not operations of their own
    assert not series(parsed, "gotthard_lustre_operations_total", operation="write_bytes")
    # an idle OST prints no operation lines: no series, no error
    assert not series(parsed, "gotthard_lustre_operations_total", target="lustre-OST0002")


def test_count_only_2_10_stats_have_no_latency() -> None:
    _, text = poll("combined-2.10")
    parsed = samples(text)
    assert not series(parsed, "gotthard_lustre_operation_latency_seconds_total")
    key = {"fs": "testfs", "target": "testfs-MDT0000", "component": "mdt"}
    assert value(parsed, "gotthard_lustre_operations_total", **key, operation="open") == 400_123
    # 2.10 OST stats have no read/write lines: counted from read_bytes/write_bytes samples
    ost = {"fs": "testfs", "target": "testfs-OST0000", "component": "ost"}
    assert value(parsed, "gotthard_lustre_operations_total", **ost, operation="write") == 98_765
    assert value(parsed, "gotthard_lustre_write_bytes_total", **ost) == 98_765 * 4_194_304


def test_2_12_stats_have_latency_without_start_time() -> None:
    text = (LUSTRE / "combined-2.12/proc/fs/lustre/mdt/testfs-MDT0000/md_stats").read_text()
    assert "start_time" not in text
    _, out = poll("combined-2.12")
    parsed = samples(out)
    key = {"fs": "testfs", "target": "testfs-MDT0000", "component": "mdt"}
    assert value(
        parsed, "gotthard_lustre_operation_latency_seconds_total", **key, operation="open"
    ) == (pytest.approx(400_123 * 41 / 1e6))
    client = {"fs": "testfs", "target": "testfs", "component": "client"}
    assert value(parsed, "gotthard_lustre_operations_total", **client, operation="open") == 3_100


def test_hpe_stats_duplicates_are_summed_and_typos_tolerated() -> None:
    _, text = poll("hpe-lustre_exporter")
    parsed = samples(text)
    ost = {"fs": "lustrefs", "target": "lustrefs-OST0000", "component": "ost"}
    # obdfilter stats list statfs twice (35359 + 124430)
    assert value(parsed, "gotthard_lustre_operations_total", **ost, operation="statfs") == 159_789
    assert value(parsed, "gotthard_lustre_operations_total", **ost, operation="write") == 4_298_711
    assert value(parsed, "gotthard_lustre_write_bytes_total", **ost) == 16_552_048_697_344
    # llite stats print the unit as [regs]
    client = {"fs": "lustrefs", "target": "lustrefs", "component": "client"}
    assert value(parsed, "gotthard_lustre_operations_total", **client, operation="open") == 136
    assert value(parsed, "gotthard_lustre_read_bytes_total", **client) == 4_194_304
    # the client sees all seven OSTs; the OSS serves four of them
    assert len(series(parsed, "gotthard_lustre_target_capacity_bytes", component="osc")) == 7
    assert len(series(parsed, "gotthard_lustre_target_capacity_bytes", component="ost")) == 4


@pytest.mark.parametrize("version", ["2.10", "2.12", "2.15"])
def test_parse_stats_every_version(version: str) -> None:
    ops = (Op("read_bytes", 3, 3 * 4096), Op("open", 5, 50), Op("close", 0, 0), Op("statfs", 7, 21))
    block = parse.parse_stats(stats_text(ops, version))
    assert block.errors == 0
    assert block.operations == {"open": 5, "statfs": 7, "read": 3}
    assert block.read_bytes == 3 * 4096 and block.write_bytes is None
    if version == "2.10":
        assert block.latency_usecs == {}
    else:
        assert block.latency_usecs == {"open": 50, "statfs": 21}


def test_parse_stats_headers_units_and_garbage() -> None:
    text = (
        "snapshot_time             1716295737.287969347 secs.nsecs\n"
        "start_time                1715712428.324534805 secs.nsecs\n"
        "elapsed_time              583308.963434542 secs.nsecs\n"
        "create                    4 samples [usecs] 3 1058 1459 1227857\n"
        "ost_write                 18 samples [usec] 119 1348857 110277857878 8341476394008222\n"
        "req_active                18 samples [reqs] 1 17 83626277 470089669\n"
        "write_bytes               52 samples [bytes] 4096 475136 5468160 1071040692224\n"
        "write                     52 samples [usecs] 12 40081 692342 17432258604\n"
        "\n"
        "garbage line\n"
        "open -3 samples [reqs]\n"
    )
    block = parse.parse_stats(text)
    assert block.errors == 2
    assert block.operations == {"create": 4, "ost_write": 18, "req_active": 18, "write": 52}
    # only time units are latency; [reqs] sums (queue depths) are not
    assert block.latency_usecs == {"create": 1459, "ost_write": 110277857878, "write": 692342}
    assert block.write_bytes == 5468160


# --- job stats ---------------------------------------------------------------------------


def test_job_stats_are_off_by_default() -> None:
    snapshot, text = poll("oss-2.15")
    assert snapshot.job_stats is None
    assert "lustre_job" not in text


def test_job_stats_on_oss_and_mds() -> None:
    snapshot, text = poll("oss-2.15", job_stats=True)
    assert snapshot.errors == 0
    parsed = samples(text)
    key = {"fs": "lustre", "target": "lustre-OST0000", "component": "ost", "job_id": "4201337"}
    assert value(parsed, "gotthard_lustre_job_write_bytes_total", **key) == 9_000 * 4_194_304
    assert value(parsed, "gotthard_lustre_job_read_bytes_total", **key) == 4_500 * 1_048_576
    assert value(parsed, "gotthard_lustre_job_operations_total", **key, operation="write") == 9_000
    # zero counts are left out: 4201338 did not read, 4201337 did not punch
    assert not series(parsed, "gotthard_lustre_job_read_bytes_total", job_id="4201338")
    assert not series(parsed, "gotthard_lustre_job_operations_total", **key, operation="punch")
    assert value(parsed, "gotthard_lustre_job_stats_jobs", **ost("lustre-OST0000")) == 3
    assert value(parsed, "gotthard_lustre_job_stats_jobs", **ost("lustre-OST0002")) == 0
    assert value(parsed, "gotthard_lustre_job_stats_truncated", **ost("lustre-OST0002")) == 0

    _, text = poll("mds-2.15", job_stats=True)
    parsed = samples(text)
    key = {"fs": "lustre", "target": "lustre-MDT0000", "component": "mdt", "job_id": "4201338"}
    assert (
        value(parsed, "gotthard_lustre_job_operations_total", **key, operation="open") == 300 * 30
    )
    assert not series(parsed, "gotthard_lustre_job_read_bytes_total")


def test_job_stats_limit_keeps_the_highest_io() -> None:
    _, text = poll("oss-2.15", job_stats=True, job_stats_limit=1)
    parsed = samples(text)
    assert value(parsed, "gotthard_lustre_job_stats_truncated", **ost("lustre-OST0000")) == 2
    assert value(parsed, "gotthard_lustre_job_stats_truncated", **ost("lustre-OST0001")) == 1
    assert value(parsed, "gotthard_lustre_job_stats_jobs", **ost("lustre-OST0000")) == 3
    jobs = {
        (s["target"], s["job_id"]) for s in series(parsed, "gotthard_lustre_job_operations_total")
    }
    assert jobs == {("lustre-OST0000", "4201337"), ("lustre-OST0001", "4201337")}


def test_top_jobs_orders_by_io_then_operations() -> None:
    jobs = [
        ClientIO("a", 10, 0, {"write": 1}),
        ClientIO("b", 0, 30, {"write": 1}),
        ClientIO("c", 0, 0, {"open": 500}),
        ClientIO("d", 0, 0, {"open": 5}),
        ClientIO("e", 20, 10, {"read": 9}),
    ]
    kept, dropped = top_jobs(jobs, 3)
    assert [job.name for job in kept] == ["e", "b", "a"] and dropped == 2
    kept, dropped = top_jobs(jobs, 4)
    assert [job.name for job in kept][-1] == "c"
    assert top_jobs(jobs, 10) == (jobs, 0)


def test_parse_job_stats_2_10_and_2_15_forms() -> None:
    old = (
        "job_stats:\n"
        "- job_id:          24\n"
        "  snapshot_time:   1510782606\n"
        "  read_bytes:      { samples:           0, unit: bytes, min:       0, max:       0,"
        " sum:               0 }\n"
        "  write_bytes:     { samples:       64575, unit: bytes, min:    4096, max: 4194304,"
        " sum:    215147593728 }\n"
        "  punch:           { samples:           1, unit:  reqs }\n"
        "  sync:            { samples:           0, unit:  reqs }\n"
    )  # fmt: skip
    result = parse.parse_job_stats(old)
    assert result.errors == 0
    assert [(j.name, j.read_bytes, j.write_bytes, j.operations) for j in result.jobs] == [
        ("24", 0, 215147593728, {"punch": 1, "write": 64575})
    ]
    new = (
        "job_stats:\n"
        '- job_id:          "SLURM_JOB10"\n'
        "  snapshot_time:   1720516680.287969347 secs.nsecs\n"
        "  start_time:      1720516000.000000000 secs.nsecs\n"
        "  elapsed_time:    680.287969347 secs.nsecs\n"
        "  read_bytes:      { samples:   0, unit: bytes, min:    0, max:      0, sum:       0,"
        " sumsq:             0 }\n"
        "  write_bytes:     { samples:  52, unit: bytes, min: 4096, max: 475136, sum: 5468160,"
        " sumsq: 1071040692224, hist: { 4K: 1, 512K: 51 } }\n"
        "  write:           { samples:  52, unit: usecs, min:   12, max:  40081, sum:  692342,"
        " sumsq:   17432258604 }\n"
        '- job_id:          "say \\"hi\\" \\\\ bye"\n'
        "  open:            { samples:   3, unit: usecs, min: 1, max: 2, sum: 4, sumsq: 6 }\n"
    )  # fmt: skip
    result = parse.parse_job_stats(new)
    assert result.errors == 0
    first, second = result.jobs
    assert (first.name, first.write_bytes, first.operations) == (
        "SLURM_JOB10",
        5468160,
        {"write": 52},
    )
    assert second.name == 'say "hi" \\ bye' and second.operations == {"open": 3}


def test_parse_job_stats_edge_cases() -> None:
    assert parse.parse_job_stats("job_stats:\n").jobs == []
    assert parse.parse_job_stats("job_stats:\n").errors == 0
    assert parse.parse_job_stats("").errors == 0
    # a job listed twice is summed; the file may start right at "- job_id:"
    text = (
        "- job_id: 7\n  open: { samples: 2, unit: reqs }\n"
        "- job_id: 7\n  open: { samples: 3, unit: reqs }\n  close: { samples: 1, unit: reqs }\n"
    )
    result = parse.parse_job_stats(text)
    assert result.errors == 0
    assert [(j.name, j.operations) for j in result.jobs] == [("7", {"open": 5, "close": 1})]
    # unplaced lines are counted, the rest still parsed
    text = "job_stats:\nnoise\n- job_id: 1\n  open: { samples: 2, unit: reqs }\nmore noise\n\n"
    result = parse.parse_job_stats(text)
    assert result.errors == 2 and result.jobs[0].operations == {"open": 2}


@pytest.mark.parametrize("version", ["2.10", "2.12", "2.15"])
@pytest.mark.parametrize("kind", ["ost", "mdt"])
def test_job_stats_builder_round_trips(version: str, kind: str) -> None:
    ops = {"open": (4, 40)} if kind == "mdt" else {"write_bytes": (2, 8192), "punch": (1, 9)}
    text = job_stats_text([Job("1", ops), Job("x.0", {})], version, kind)
    result = parse.parse_job_stats(text)
    assert result.errors == 0
    assert [j.name for j in result.jobs] == ["1", "x.0"]
    if kind == "ost":
        assert result.jobs[0].write_bytes == 8192
        assert result.jobs[0].operations == {"punch": 1, "write": 2}


def test_ten_thousand_jobs_are_all_parsed_and_rendered() -> None:
    # The time this takes is measured by benchmarks/node_scrape.py, not asserted here.
    text = build_job_stats(10_000)
    result = parse.parse_job_stats(text)
    out = render_text(
        render_job_stats([TargetJobStats("lustre", "lustre-OST0000", "ost", result.jobs)], 10_000)
    )
    assert result.errors == 0 and len(result.jobs) == 10_000
    assert out.count("gotthard_lustre_job_write_bytes_total{") > 7_000


# --- lctl --------------------------------------------------------------------------------


def test_lctl_argv_is_a_list_with_named_parameters() -> None:
    source = LctlSource("/opt/lustre/bin/lctl", 3.0)
    argv = source.argv(job_stats=False)
    assert argv[:3] == ["/opt/lustre/bin/lctl", "get_param", "version"]
    assert "-n" not in argv and not any(" " in arg for arg in argv)
    assert "osc.*.active" in argv and "osd-*.*.kbytesavail" in argv and "llite.*.stats" in argv
    assert not any("job_stats" in arg for arg in argv)
    with_jobs = source.argv(job_stats=True)
    assert "obdfilter.*.job_stats" in with_jobs and "mdt.*.job_stats" in with_jobs


@pytest.mark.parametrize("tree", ["client-2.15", "oss-2.15", "mds-2.15"])
@pytest.mark.parametrize("job_stats", [False, True])
@pytest.mark.parametrize("export_stats", [False, True])
def test_recorded_lctl_output_reads_as_the_tree(
    tree: str, job_stats: bool, export_stats: bool
) -> None:
    # the recordings always hold the per-client exports.<nid>.stats lines: without
    # --lustre.export-stats they must not turn into targets
    procfs = collector(tree, job_stats=job_stats, export_stats=export_stats)
    lctl = LustreCollector(
        config(
            source="lctl",
            lctl_path=str(RECORDED / tree / "lctl"),
            job_stats=job_stats,
            export_stats=export_stats,
        ),
        procfs=str(LUSTRE / tree / "proc"),
        sysfs=str(LUSTRE / tree / "sys"),
    )
    expected = procfs.poll()
    got = lctl.poll()
    assert got.errors == 0  # rc 2 with "No such file or directory" only is normal
    assert render_text(lctl.render(got)) == render_text(procfs.render(expected))
    assert (RECORDED / tree / "rc").read_text().strip() in ("0", "2")


def test_lctl_framing() -> None:
    text = (
        "warning: noise before any parameter\n"
        "version=2.15.4\n"
        "obdfilter.fs-OST0001.job_stats=job_stats:\n"
        "obdfilter.fs-OST0000.stats=\n"
        "snapshot_time             1702058707.803624686 secs.nsecs\n"
        "create                    16 samples [usecs] 0 37539 88178 2725609146\n"
        "ost.OSS.ost_io.stats=snapshot_time             1702058707.803943735 secs.nsecs\n"
        "mdt.fs-MDT0000.exports.10.73.20.12@tcp.uuid=\n"
        "52cb8dca-ba5c-4725-9cff-41cd0d45e3e7\n"
        "osd-ldiskfs.fs-OST0000.kbytestotal=4108388"
    )
    output = parse.parse_lctl_output(text)
    assert output.errors == 1
    assert output.params["version"] == "2.15.4\n"
    assert output.params["obdfilter.fs-OST0001.job_stats"] == "job_stats:\n"
    assert output.params["obdfilter.fs-OST0000.stats"].splitlines()[1].startswith("create")
    assert output.params["ost.OSS.ost_io.stats"].startswith("snapshot_time")
    assert output.params["mdt.fs-MDT0000.exports.10.73.20.12@tcp.uuid"].startswith("52cb8dca")
    assert output.params["osd-ldiskfs.fs-OST0000.kbytestotal"] == "4108388"
    tree = tree_from_lctl(text, job_stats=True)
    assert tree.params["obdfilter"]["fs-OST0001"] == {"job_stats": "job_stats:\n"}
    assert "ost" not in tree.params  # not asked for
    assert tree_from_lctl(text, job_stats=False).params["obdfilter"]["fs-OST0001"] == {}


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "lctl"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_lctl_unexpected_failure_is_one_error(tmp_path: Path) -> None:
    stdout = (RECORDED / "oss-2.15" / "stdout.txt").read_text()
    (tmp_path / "out.txt").write_text(stdout)
    lctl = _script(
        tmp_path,
        f'cat "{tmp_path}/out.txt"\n'
        "echo \"error: get_param: param_path 'osc/*/active': No such file or directory\" >&2\n"
        "echo 'error: get_param: read(obdfilter/fs-OST0000/stats) failed: Input/output error' >&2\n"
        "exit 5\n",
    )
    snapshot = LustreCollector(config(source="lctl", lctl_path=lctl)).poll()
    assert snapshot.errors == 1
    assert snapshot.roles == ("oss",)  # what it did print is used


def test_lctl_complaint_about_an_inactive_osc_is_not_an_error(tmp_path: Path) -> None:
    (tmp_path / "out.txt").write_text((RECORDED / "client-2.15" / "stdout.txt").read_text())
    device = "lustre-OST0003-osc-ffff9a4c2d1e8000"
    lctl = _script(
        tmp_path,
        f'cat "{tmp_path}/out.txt"\n'
        f"echo \"error: get_param: read('/sys/fs/lustre/osc/{device}/kbytestotal') failed\" >&2\n"
        "exit 5\n",
    )
    snapshot = LustreCollector(config(source="lctl", lctl_path=lctl)).poll()
    assert snapshot.errors == 0


def test_lctl_missing_or_hanging_fails_the_poll(tmp_path: Path) -> None:
    missing = LustreCollector(config(source="lctl", lctl_path=str(tmp_path / "nope")))
    with pytest.raises(LctlError, match="cannot run"):
        missing.poll()
    runner = CollectorRunner(missing)
    event = runner.kick()
    assert event is not None and event.wait(10)
    state = runner.state(waited_out=False)
    assert not state.up and "cannot run" in state.last_error
    hanging = _script(tmp_path, "exec sleep 30\n")
    slow = LustreCollector(config(source="lctl", lctl_path=hanging, command_timeout_seconds=0.3))
    started = time.monotonic()
    with pytest.raises(LctlError, match="timed out"):
        slow.poll()
    assert time.monotonic() - started < 5


def test_replayer_refuses_other_commands() -> None:
    lctl = str(RECORDED / "oss-2.15" / "lctl")
    assert subprocess.run([lctl, "set_param", "x=1"], capture_output=True).returncode != 0
    assert subprocess.run([lctl, "get_param", "-n", "x"], capture_output=True).returncode != 0


# --- names -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("lustre-OST0000", ("lustre", "lustre-OST0000", "OST", "")),
        ("ai400x2-MDT0003", ("ai400x2", "ai400x2-MDT0003", "MDT", "")),
        ("lustre-OST001f-osc-ffff8810", ("lustre", "lustre-OST001f", "OST", "osc-ffff8810")),
        ("MGS", ("", "MGS", "MGS", "")),
        ("num_refs", ("", "num_refs", "", "")),
    ],
)  # fmt: skip
def test_parse_target_name(name: str, expected: tuple[str, str, str, str]) -> None:
    assert parse.parse_target_name(name) == expected


def test_client_device_and_llite_names() -> None:
    assert parse.client_device("lustre-OST0000-osc-ffff88105db50000", "osc") == (
        "lustre",
        "lustre-OST0000",
    )
    assert parse.client_device("lustre-MDT0000-mdc-ffff88105db50000", "mdc") == (
        "lustre",
        "lustre-MDT0000",
    )
    assert parse.client_device("lustre-OST0000-osc-MDT0000", "osc") is None
    assert parse.client_device("lustre-OST0000-osc-ffff88105db50000", "mdc") is None
    assert parse.client_device("lustre-OST0000", "osc") is None
    assert parse.llite_fs("lustrefs-ffff88105db50000") == "lustrefs"
    assert parse.llite_fs("odd") == "odd"


def test_two_mounts_of_one_file_system_add_up() -> None:
    node = Node(
        "twice",
        oscs=[
            ClientView("fs-OST0000-osc-ffff000000000001", True, 100, 50, 40, 10, 5),
            ClientView("fs-OST0000-osc-ffff000000000002", True, 100, 50, 40, 10, 5),
        ],
        mounts={
            "fs-ffff000000000001": (Op("open", 2, 20),),
            "fs-ffff000000000002": (Op("open", 3, 30),),
        },
    )
    with tempfile.TemporaryDirectory() as folder:
        _, text = poll(write_tree(Path(folder), node, "2.15"))
    parsed = samples(text)
    client = {"fs": "fs", "target": "fs", "component": "client"}
    assert value(parsed, "gotthard_lustre_operations_total", **client, operation="open") == 5
    assert len(series(parsed, "gotthard_lustre_target_capacity_bytes")) == 1


def test_single_value_parsers() -> None:
    assert parse.parse_int(" 42\n") == 42
    for bad in ("", "-1", "4 2", "0x10", "١٢", "1.5"):
        with pytest.raises(ValueError):
            parse.parse_int(bad)
    assert parse.parse_version("2.15.4\n") == "2.15.4"
    assert parse.parse_version("lustre: 2.10.1\nkernel: patchless_client\n") == "2.10.1"
    assert parse.parse_version("2.14.0_ddn133") == "2.14.0_ddn133"
    with pytest.raises(ValueError):
        parse.parse_version("kernel: patchless_client")


# --- random input ------------------------------------------------------------------------

TEXT = st.one_of(
    st.text(max_size=400),
    st.binary(max_size=400).map(lambda data: data.decode("utf-8", "replace")),
    # near misses of the real formats
    st.lists(
        st.sampled_from(
            [
                "job_stats:",
                "- job_id: 1",
                '- job_id: "a\\"',
                "  open: { samples: 3, unit: reqs }",
                "  read_bytes: { samples: 9, unit: bytes, min: 1, max: 2, sum: 3 }",
                "  write_bytes: { samples: 99999999999999999999, unit: bytes, sum: 3",
                "  snapshot_time: 1",
                "open 1 samples [usecs] 1 2 3 4",
                "write_bytes 1 samples [bytes] 1 2 3",
                "snapshot_time 1.2 secs.nsecs",
                "osc.x-OST0000-osc-ffff0001.active=0",
                "osd-zfs.x-OST0000.kbytestotal=",
                "=",
                "",
                "\x00",
            ]
        ),
        max_size=30,
    ).map("\n".join),
)


@given(TEXT)
@settings(max_examples=300, deadline=None)
def test_block_parsers_never_raise(text: str) -> None:
    block = parse.parse_stats(text)
    assert block.errors >= 0 and all(v >= 0 for v in block.operations.values())
    jobs = parse.parse_job_stats(text)
    assert jobs.errors >= 0 and len({j.name for j in jobs.jobs}) == len(jobs.jobs)
    output = parse.parse_lctl_output(text)
    assert output.errors >= 0
    tree = tree_from_lctl(text, job_stats=True)
    snapshot = assemble(tree, job_stats=True)
    samples(render_text(render(snapshot, job_stats_limit=2)))


@given(TEXT)
@settings(max_examples=300, deadline=None)
def test_value_parsers_raise_only_value_error(text: str) -> None:
    for parser in (parse.parse_int, parse.parse_version):
        with contextlib.suppress(ValueError):
            parser(text)
    parse.parse_target_name(text)
    parse.client_device(text, "osc")
    parse.llite_fs(text)


@given(
    contents=st.lists(st.binary(max_size=200), min_size=1, max_size=8),
    version=st.sampled_from(["2.10", "2.12", "2.15"]),
)
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_poll_never_raises_on_random_file_contents(contents: list[bytes], version: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = write_tree(Path(folder), NODES["combined"], version)
        files = sorted(path for path in root.rglob("*") if path.is_file())
        for index, path in enumerate(files):
            path.write_bytes(contents[index % len(contents)])
        for job_stats in (False, True):
            source = collector(root, job_stats=job_stats, job_stats_limit=1)
            snapshot = source.poll()
            assert snapshot.errors >= 0
            samples(render_text(source.render(snapshot)))


def test_empty_param_tree_renders_nothing() -> None:
    assert render_text(render(assemble(ParamTree(), job_stats=True))) == ""
    assert render_text(render(LustreSnapshot())) == ""


def test_procfs_source_reads_nothing_it_does_not_need() -> None:
    tree = ProcfsSource(
        str(LUSTRE / "hpe-lustre_exporter/proc"), str(LUSTRE / "hpe-lustre_exporter/sys")
    ).read(job_stats=False)
    assert "ldlm" not in tree.params and "osp" not in tree.params
    assert all("job_stats" not in texts for texts in tree.params["obdfilter"].values())
    # the HPE tree keeps osc/<fs>-OST0000-osc-MDT0000 as plain files: skipped
    assert "lustrefs-OST0000-osc-MDT0000" not in tree.params["osc"]
