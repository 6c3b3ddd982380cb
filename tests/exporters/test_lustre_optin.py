"""The lustre collector's opt-in readings: LNet NI health (lnetctl), quota accounting and
brw_stats, on the fixture trees, recorded lctl/lnetctl output of 2.12, 2.14 and 2.15, and
random input (hypothesis) for their parsers."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gotthard.exporters.families import render_text
from gotthard.exporters.lustre.collector import LustreCollector
from gotthard.exporters.lustre.parse_optin import (
    parse_brw_stats,
    parse_lnet_net_show,
    parse_quota_acct,
)
from gotthard.exporters.lustre.render_optin import render_optin
from gotthard.exporters.lustre.snapshot import LustreSnapshot
from gotthard.exporters.lustre.source import assemble, tree_from_lctl
from tests.exporters.test_lustre import (
    GOLDEN,
    LUSTRE,
    RECORDED,
    check_golden,
    config,
    once,
    ost,
    poll,
    samples,
    series,
    value,
)

LNETCTL = LUSTRE / "recorded-lnetctl"
LCTL_214 = LUSTRE / "recorded-lctl-2.14"


def lnetctl(tmp_path: Path, body: str) -> str:
    """A stand-in ``lnetctl`` that records its arguments and runs *body*."""
    path = tmp_path / "lnetctl"
    path.write_text(f'#!/bin/sh\necho "$@" > "{tmp_path}/argv"\n{body}')
    path.chmod(0o755)
    return str(path)


def replaying(tmp_path: Path, version: str) -> str:
    return lnetctl(tmp_path, f'cat "{LNETCTL / f"net-show-{version}.txt"}"\n')


# --- LNet NI health ----------------------------------------------------------------------


def assemble_nis(text: str) -> LustreSnapshot:
    """The snapshot of a node whose only reading is *text* from ``lnetctl net show``."""
    tree = tree_from_lctl("", job_stats=False)
    tree.lnet_net_show = text
    return assemble(tree, job_stats=False)


def test_lnet_ni_health_and_status_from_lnetctl(tmp_path: Path) -> None:
    path = replaying(tmp_path, "2.15")
    snapshot, text = poll("oss-2.15", lnet_health=True, lnetctl_path=path)
    assert (tmp_path / "argv").read_text().split() == ["net", "show", "-v", "4"]
    assert snapshot.errors == 0
    parsed = samples(text)
    down = {"net": "o2ib", "nid": "10.20.0.32@o2ib"}
    assert value(parsed, "gotthard_lustre_lnet_ni_health", **down) == 350
    assert value(parsed, "gotthard_lustre_lnet_ni_status", **down) == 0
    up = {"net": "o2ib", "nid": "10.20.0.31@o2ib"}
    assert value(parsed, "gotthard_lustre_lnet_ni_health", **up) == 1000
    assert value(parsed, "gotthard_lustre_lnet_ni_status", **up) == 1
    assert value(parsed, "gotthard_lustre_lnet_ni_status", net="lo", nid="0@lo") == 1
    assert value(
        parsed, "gotthard_lustre_operations_total", **ost("lustre-OST0000"), operation="read"
    )


@pytest.mark.parametrize(
    ("version", "nis"),
    [
        ("2.12", {("lo", "0@lo"): 1000, ("o2ib", "10.20.0.31@o2ib"): 900}),
        (
            "2.14",
            {
                ("lo", "0@lo"): 1000,
                ("tcp", "172.16.0.24@tcp"): 1000,
                ("tcp", "172.16.0.25@tcp"): 1000,
            },
        ),
        (
            "2.15",
            {
                ("lo", "0@lo"): 1000,
                ("o2ib", "10.20.0.31@o2ib"): 1000,
                ("o2ib", "10.20.0.32@o2ib"): 350,
            },
        ),
    ],
)
def test_parse_lnet_net_show_every_version(version: str, nis: dict[tuple[str, str], int]) -> None:
    result = parse_lnet_net_show((LNETCTL / f"net-show-{version}.txt").read_text())
    assert result.errors == 0
    assert {(ni.net, ni.nid): ni.health_value for ni in result.nis} == nis


def test_lnet_ni_without_health_stats_has_status_only() -> None:
    # before 2.12 lnetctl printed no health stats
    text = "net:\n    - net type: o2ib\n      local NI(s):\n        - nid: 10.0.0.1@o2ib\n"
    text += "          status: up\n          statistics:\n              send_count: 4\n"
    result = parse_lnet_net_show(text)
    assert result.errors == 0 and result.nis[0].health_value is None
    parsed = samples(render_text(render_optin(assemble_nis(text))))
    assert value(parsed, "gotthard_lustre_lnet_ni_status", net="o2ib", nid="10.0.0.1@o2ib") == 1
    assert not series(parsed, "gotthard_lustre_lnet_ni_health")


def test_lnet_health_is_opt_in(tmp_path: Path) -> None:
    path = replaying(tmp_path, "2.15")
    snapshot, text = poll("oss-2.15", lnetctl_path=path)
    assert not (tmp_path / "argv").exists()  # lnetctl not even run
    assert snapshot.lnet_nis is None and "lustre_lnet_ni_" not in text


def test_failing_lnetctl_is_one_error_and_keeps_the_rest(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-lnetctl")
    snapshot, text = poll("oss-2.15", lnet_health=True, lnetctl_path=missing)
    assert snapshot.errors == 1 and snapshot.roles == ("oss",)
    assert "lustre_lnet_ni_" not in text
    failing = lnetctl(tmp_path, "echo 'lnetctl: no LNet' >&2\nexit 1\n")
    assert poll("oss-2.15", lnet_health=True, lnetctl_path=failing)[0].errors == 1
    hanging = lnetctl(tmp_path, "exec sleep 30\n")
    slow = LustreCollector(
        config(lnet_health=True, lnetctl_path=hanging, command_timeout_seconds=0.3),
        procfs=str(LUSTRE / "oss-2.15" / "proc"),
        sysfs=str(LUSTRE / "oss-2.15" / "sys"),
    )
    snapshot = slow.poll()
    assert snapshot.errors == 1 and snapshot.capacity


# --- quota accounting --------------------------------------------------------------------


def test_quota_usage_per_user_group_and_project() -> None:
    snapshot, text = poll("oss-2.15", quota=True)
    assert snapshot.errors == 0
    parsed = samples(text)
    labels = {**ost("lustre-OST0000"), "type": "user", "id": "1001"}
    # OST0000 lists three jobs: the fixture scales its usage by 4
    assert value(parsed, "gotthard_lustre_quota_used_bytes", **labels) == 4 * 52_428_800 * 1024
    assert value(parsed, "gotthard_lustre_quota_used_inodes", **labels) == 4 * 9_120
    project = {**ost("lustre-OST0001"), "type": "project", "id": "0"}
    assert value(parsed, "gotthard_lustre_quota_used_bytes", **project) == 3 * 191_355_101 * 1024
    types = {s["type"] for s in series(parsed, "gotthard_lustre_quota_ids")}
    assert types == {"user", "group", "project"}
    assert "lustre_quota_" not in poll("oss-2.15")[1]  # opt-in


def test_quota_limit_keeps_the_ids_using_most_space() -> None:
    _, text = poll("oss-2.15", quota=True, quota_limit=1)
    parsed = samples(text)
    key = {**ost("lustre-OST0000"), "type": "user"}
    assert value(parsed, "gotthard_lustre_quota_ids", **key) == 2
    assert value(parsed, "gotthard_lustre_quota_truncated", **key) == 1
    assert [s["id"] for s in series(parsed, "gotthard_lustre_quota_used_bytes", **key)] == ["0"]


@pytest.mark.parametrize("tree", ["mds-2.15", "combined-2.12", "combined-2.10"])
def test_quota_of_mdts_and_older_layouts(tree: str) -> None:
    snapshot, text = poll(tree, quota=True)
    assert snapshot.errors == 0
    components = {
        s["component"] for s in series(samples(text), "gotthard_lustre_quota_used_inodes")
    }
    assert "mdt" in components


def test_quota_of_the_real_2_10_zfs_tree() -> None:
    snapshot, text = poll("hpe-lustre_exporter", quota=True)
    assert snapshot.errors == 0
    labels = {"fs": "lustrefs", "target": "lustrefs-OST0000", "component": "ost"}
    user = {**labels, "type": "user", "id": "0"}
    assert value(samples(text), "gotthard_lustre_quota_used_bytes", **user) == 138_926_301 * 1024


def test_quota_of_recorded_2_14_lctl_output() -> None:
    text = (LCTL_214 / "quota.txt").read_text()
    snapshot = assemble(
        tree_from_lctl(text, job_stats=False, extras=("quota",)), job_stats=False, extras=("quota",)
    )
    assert snapshot.errors == 0
    parsed = samples(render_text(render_optin(snapshot)))
    mdt = {"fs": "ai400x2", "target": "ai400x2-MDT0000", "component": "mdt", "type": "user"}
    assert value(parsed, "gotthard_lustre_quota_used_inodes", **mdt, id="23") == 241_123_355
    assert value(parsed, "gotthard_lustre_quota_used_bytes", **mdt, id="23") == 102_141_328 * 1024


def test_parse_quota_acct_pairs_ids_with_usage() -> None:
    text = (
        "usr_accounting:\n- id:      7\n  usage:   { inodes: 3, kbytes: 4 }\n"
        "- id:      8\n- id:      9\n  usage:   { inodes: 1, kbytes: 1 }\n"
        "  usage:   { inodes: 5, kbytes: 5 }\ngarbage\n- id:      7\n"
        "  usage:   { inodes: 1, kbytes: 1 }\n"
    )
    result = parse_quota_acct(text)
    # id 8 without usage, usage without id, garbage
    assert result.errors == 3
    assert [(u.id, u.inodes, u.used_bytes) for u in result.usage] == [
        ("7", 4, 5 * 1024),
        ("9", 1, 1024),
    ]


# --- brw_stats ---------------------------------------------------------------------------


@pytest.mark.parametrize("tree", ["oss-2.15", "combined-2.12", "combined-2.10"])
def test_brw_stats_buckets_per_operation(tree: str) -> None:
    snapshot, text = poll(tree, brw_stats=True)
    assert snapshot.errors == 0
    parsed = samples(text)
    target = "lustre-OST0000" if tree == "oss-2.15" else "testfs-OST0000"
    labels = {**ost(target), "fs": target.split("-")[0]}
    scale = 4 if tree == "oss-2.15" else 3
    rpcs = "gotthard_lustre_target_brw_rpcs_total"
    assert value(parsed, rpcs, **labels, op="write", pages="256") == 58_945 * scale
    assert value(parsed, rpcs, **labels, op="write", pages="1024") == 4_059 * scale
    assert value(parsed, rpcs, **labels, op="read", pages="4") == 0  # a zero bucket in between
    ios = "gotthard_lustre_target_brw_disk_ios_total"
    assert value(parsed, ios, **labels, op="read", size_bytes=str(1 << 20)) == 2_200 * scale
    assert value(parsed, ios, **labels, op="write", size_bytes="4096") == 310 * scale


def test_brw_stats_of_an_idle_target_and_opt_in() -> None:
    _, text = poll("oss-2.15", brw_stats=True)
    assert not series(
        samples(text), "gotthard_lustre_target_brw_rpcs_total", target="lustre-OST0002"
    )
    assert "lustre_target_brw_" not in poll("oss-2.15")[1]


def test_brw_stats_of_the_real_2_10_tree() -> None:
    snapshot, text = poll("hpe-lustre_exporter", brw_stats=True)
    assert snapshot.errors == 0
    labels = {"fs": "lustrefs", "target": "lustrefs-OST0000", "component": "ost"}
    rpcs = "gotthard_lustre_target_brw_rpcs_total"
    assert value(samples(text), rpcs, **labels, op="write", pages="1024") == 4_059_303


def test_brw_stats_of_recorded_2_14_lctl_output() -> None:
    result = parse_brw_stats((LCTL_214 / "brw-stats.txt").read_text().split("\n", 1)[1])
    assert result.errors == 0
    assert len(result.tables) == 8  # 2.14 adds "block maps msec" (maps, not rpcs or ios)
    assert result.tables["pages per bulk r/w"][0] == (1, 8_747_797, 4_054_463)
    assert result.tables["disk I/O size"][0][0] == 4096


def test_parse_brw_stats_units_and_garbage() -> None:
    text = (
        "snapshot_time:         1.2 (secs.nsecs)\n1:   1 1 1 | 1 1 1\n\n"
        "                           read      |     write\n"
        "disk I/O size          ios   % cum % |  ios         % cum %\n"
        "4K:                      1   0   0   |    2   0   0\n"
        "2M:\t\t       3 100 100   | 4 100 100\n1G:  5 0 0 | 6 0 0\nnonsense\n"
    )
    result = parse_brw_stats(text)
    assert result.errors == 2  # a bucket before any title, a line of nothing known
    assert result.tables == {"disk I/O size": [(4096, 1, 2), (2 << 20, 3, 4), (1 << 30, 5, 6)]}


# --- lctl mode and golden ----------------------------------------------------------------


@pytest.mark.parametrize("tree", ["oss-2.15", "mds-2.15", "client-2.15"])
def test_recorded_lctl_output_reads_the_opt_ins_as_the_tree(tree: str) -> None:
    options = {"quota": True, "brw_stats": True}
    procfs = LustreCollector(
        config(**options), procfs=str(LUSTRE / tree / "proc"), sysfs=str(LUSTRE / tree / "sys")
    )
    lctl = LustreCollector(
        config(source="lctl", lctl_path=str(RECORDED / tree / "lctl"), **options),
        procfs=str(LUSTRE / tree / "proc"),
        sysfs=str(LUSTRE / tree / "sys"),
    )
    argv = lctl.source.argv(job_stats=False, extras=lctl.extras)  # type: ignore[union-attr]
    assert "osd-*.*.quota_slave.acct_project" in argv and "osd-*.*.brw_stats" in argv
    got, expected = lctl.poll(), procfs.poll()
    assert got.errors == 0
    assert render_text(lctl.render(got)) == render_text(procfs.render(expected))


def test_once_output_with_quota_and_brw_stats_matches_golden() -> None:
    result = once(LUSTRE / "oss-2.15", "--lustre.quota", "--lustre.brw-stats")
    assert 'gotthard_collector_errors_total{collector="lustre"} 0' in result.stdout
    check_golden("oss-2.15-quota-brw", result.stdout)
    assert (GOLDEN / "lustre-oss-2.15-quota-brw.prom").exists()


# --- random input ------------------------------------------------------------------------

_LINES = st.lists(
    st.one_of(
        st.text(max_size=40),
        st.sampled_from(
            [
                "- net type: o2ib",
                "        - nid: 1@o2ib",
                "          status: up",
                "              health value: x",
                "usr_accounting:",
                "- id:      1",
                "  usage:   { inodes: 1, kbytes: 2 }",
                "pages per bulk r/w     rpcs  % cum % |  rpcs        % cum %",
                "1K:   1 2 3 | 4 5 6",
            ]
        ),
    ),
    max_size=30,
).map("\n".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.one_of(_LINES, st.binary(max_size=300).map(lambda b: b.decode("utf-8", "replace"))))
def test_optin_parsers_never_raise(text: str) -> None:
    nis = parse_lnet_net_show(text)
    quota = parse_quota_acct(text)
    brw = parse_brw_stats(text)
    assert nis.errors >= 0 and quota.errors >= 0 and brw.errors >= 0
    assert all(usage.used_bytes % 1024 == 0 for usage in quota.usage)
    render_text(render_optin(assemble_nis(text)))
