"""The lustre collector's client exports, job components, open times, health, recovery,
evictions, connected clients and LNet counters, on the fixture trees and recorded lctl
output, plus random input (hypothesis) for their parsers."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gotthard.exporters.families import render_text
from gotthard.exporters.lustre import parse
from gotthard.exporters.lustre.render import render
from gotthard.exporters.lustre.source import assemble, tree_from_lctl
from tests.exporters.test_lustre import LUSTRE, RECORDED, ost, poll, samples, series, value

# --- correctness: client exports, job components, open times -----------------------------


def test_lctl_export_stats_are_never_targets() -> None:
    # lctl's obdfilter.*.stats pattern can also print exports.<nid>.stats (the recordings
    # hold them): those are clients, not targets, and without the flag they are ignored
    text = (RECORDED / "oss-2.15" / "stdout.txt").read_text()
    assert "obdfilter.lustre-OST0000.exports.10.20.0.11@o2ib.stats=" in text
    tree = tree_from_lctl(text, job_stats=False)
    assert set(tree.params["obdfilter"]) == {"lustre-OST0000", "lustre-OST0001", "lustre-OST0002"}
    assert tree.exports == {}
    parsed = samples(render_text(render(assemble(tree, job_stats=False))))
    targets = {s["target"] for s in series(parsed, "gotthard_lustre_operations_total")}
    assert targets == {"lustre-OST0000", "lustre-OST0001"}
    assert not any(name.startswith("gotthard_lustre_export_") for name, _ in parsed)


def test_export_stats_per_client_nid_with_a_cap() -> None:
    _, text = poll("oss-2.15", export_stats=True)
    parsed = samples(text)
    labels = {**ost("lustre-OST0000"), "nid": "10.20.0.13@o2ib"}
    assert (
        value(parsed, "gotthard_lustre_export_write_bytes_total", **labels)
        == 3 * 50 * 3 * 4_194_304
    )
    assert (
        value(parsed, "gotthard_lustre_export_operations_total", **labels, operation="read") == 900
    )
    assert value(parsed, "gotthard_lustre_export_stats_clients", **ost("lustre-OST0000")) == 3
    assert not series(parsed, "gotthard_lustre_export_stats_clients", target="lustre-OST0002")
    _, text = poll("oss-2.15", export_stats=True, export_stats_limit=1)
    parsed = samples(text)
    assert value(parsed, "gotthard_lustre_export_stats_truncated", **ost("lustre-OST0000")) == 2
    nids = {s["nid"] for s in series(parsed, "gotthard_lustre_export_read_bytes_total")}
    assert nids == {"10.20.0.13@o2ib"}  # the highest IO is kept
    _, text = poll("oss-2.15")
    assert "lustre_export_" not in text  # opt-in


def test_job_series_of_an_ost_and_an_mdt_are_told_apart() -> None:
    _, text = poll("combined-2.12", job_stats=True)
    parsed = samples(text)
    for name in ("gotthard_lustre_job_operations_total", "gotthard_lustre_job_stats_jobs"):
        components = {(s["target"], s["component"]) for s in series(parsed, name)}
        assert components == {("testfs-OST0000", "ost"), ("testfs-MDT0000", "mdt")}


def test_open_close_time_is_not_an_operation_latency() -> None:
    _, text = poll("client-2.15")
    parsed = samples(text)
    client = {"fs": "lustre", "target": "lustre", "component": "client"}
    assert value(parsed, "gotthard_lustre_client_file_closes_total", **client) == 3 * 3_100
    seconds = 3 * 3_100 * 2_500_000 / 1e6
    assert value(parsed, "gotthard_lustre_client_file_open_seconds_total", **client) == seconds
    for name in (
        "gotthard_lustre_operations_total",
        "gotthard_lustre_operation_latency_seconds_total",
    ):
        operations = {s["operation"] for s in series(parsed, name)}
        assert "openclosetime" not in operations and "opencount" not in operations


# --- health, recovery, evictions, clients, LNet ------------------------------------------


@pytest.mark.parametrize(
    ("tree", "state"),
    [("oss-2.15", "healthy"), ("combined-2.12", "sick"), ("combined-2.10", "sick"),
     ("hpe-lustre_exporter", "healthy")],
)  # fmt: skip
def test_health_check_state(tree: str, state: str) -> None:
    _, text = poll(tree)
    parsed = samples(text)
    assert {s["state"]: value(parsed, "gotthard_lustre_health_state", **s) for s in
            series(parsed, "gotthard_lustre_health_state")} == {
        name: float(name == state) for name in parse.HEALTH_STATES
    }  # fmt: skip


@pytest.mark.parametrize(
    ("text", "state"),
    [("healthy\n", "healthy"), ("NOT HEALTHY\n", "sick"), ("LBUG\n", "lbug"),
     ("device fs-OST0001 reported unhealthy\nNOT HEALTHY\n", "sick")],
)  # fmt: skip
def test_parse_health_check(text: str, state: str) -> None:
    assert parse.parse_health_check(text) == state
    with pytest.raises(ValueError):
        parse.parse_health_check("")


def test_recovery_status_of_a_recovering_and_a_complete_ost() -> None:
    _, text = poll("oss-2.15")
    parsed = samples(text)
    recovering = ost("lustre-OST0002")
    assert (
        value(parsed, "gotthard_lustre_target_recovery_status", **recovering, status="recovering")
        == 1
    )
    assert (
        value(parsed, "gotthard_lustre_target_recovery_status", **recovering, status="complete")
        == 0
    )
    assert value(parsed, "gotthard_lustre_target_recovery_connected_clients", **recovering) == 9
    assert value(parsed, "gotthard_lustre_target_recovery_clients", **recovering) == 12
    assert (
        value(parsed, "gotthard_lustre_target_recovery_time_remaining_seconds", **recovering) == 231
    )
    done = ost("lustre-OST0000")
    assert value(parsed, "gotthard_lustre_target_recovery_status", **done, status="complete") == 1
    assert value(parsed, "gotthard_lustre_target_recovery_completed_clients", **done) == 12
    assert not series(parsed, "gotthard_lustre_target_recovery_time_remaining_seconds", **done)


def test_recovery_status_of_real_captures() -> None:
    # Lustre 2.10 (HPE tree) and 2.14 (lustrefs-exporter fixture) recovery_status texts
    text = LUSTRE / "hpe-lustre_exporter/proc/fs/lustre/mdt/lustrefs-MDT0000/recovery_status"
    inactive = parse.parse_recovery_status(text.read_text())
    assert (inactive.status, inactive.errors, inactive.total_clients) == ("inactive", 0, None)
    recovering = parse.parse_recovery_status(
        "status: RECOVERING\nrecovery_start: 1620920843\ntime_remaining: 119\n"
        "connected_clients: 3/7\nreq_replay_clients: 0\nlock_repay_clients: 0\n"
        "completed_clients: 3\n"
    )
    assert recovering.status == "recovering" and recovering.errors == 0
    assert (recovering.connected_clients, recovering.total_clients) == (3, 7)
    assert (recovering.completed_clients, recovering.time_remaining_seconds) == (3, 119)
    odd = parse.parse_recovery_status("status: WAITING_FOR_GODOT\ncompleted_clients: x/y\n??\n")
    assert (odd.status, odd.errors) == ("other", 2)


def test_evictions_and_connected_clients() -> None:
    _, text = poll("mds-2.15")
    parsed = samples(text)
    mdt = {"fs": "lustre", "target": "lustre-MDT0000", "component": "mdt"}
    assert value(parsed, "gotthard_lustre_target_evictions_total", **mdt) == 17
    assert value(parsed, "gotthard_lustre_target_connected_clients", **mdt) == 14
    # 2.10 has no eviction_count: no series, no error
    _, text = poll("combined-2.10")
    assert "gotthard_lustre_target_evictions_total" not in text
    assert "gotthard_lustre_target_connected_clients{" in text


@pytest.mark.parametrize("tree", ["oss-2.15", "combined-2.10", "hpe-lustre_exporter"])
def test_lnet_counters(tree: str) -> None:
    _, text = poll(tree)
    parsed = samples(text)
    if tree == "hpe-lustre_exporter":  # the real /proc/sys/lnet/stats of that tree
        assert value(parsed, "gotthard_lustre_lnet_send_messages_total") == 101_719_323
        assert value(parsed, "gotthard_lustre_lnet_receive_bytes_total") == 53_029_565_353_720
        return
    if tree == "oss-2.15":
        assert value(parsed, "gotthard_lustre_lnet_drop_messages_total") == 11
        assert value(parsed, "gotthard_lustre_lnet_drop_bytes_total") == 4_832
    else:
        assert value(parsed, "gotthard_lustre_lnet_send_messages_total") == 180_076


def test_lnetctl_stats_show_is_read_as_the_file() -> None:
    text = (
        "statistics:\n    msgs_alloc: 0\n    errors: 0\n    send_count: 1110532\n"
        "    recv_count: 1110512\n    drop_count: 11\n    send_length: 261865376\n"
        "    recv_length: 254091008\n    drop_length: 4832\n"
    )
    stats = parse.parse_lnet_stats(text)
    assert stats.values["send_count"] == 1_110_532 and stats.values["drop_length"] == 4832
    assert parse.parse_lnet_stats("1 2 3\n").errors == 1


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.text())
def test_new_block_parsers_never_raise(text: str) -> None:
    for parser in (parse.parse_recovery_status, parse.parse_lnet_stats):
        assert parser(text).errors >= 0
    with contextlib.suppress(ValueError):
        assert parse.parse_health_check(text) in parse.HEALTH_STATES


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_new_parsers_on_random_bytes(data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    assert parse.parse_recovery_status(text).errors >= 0
    assert parse.parse_lnet_stats(text).errors >= 0
    tree = tree_from_lctl(text, job_stats=True, export_stats=True)
    assemble(tree, job_stats=True, export_stats=True)
