"""Paired actions put a node back only on a confirmed repair: the webhook asks a real
Prometheus (fed by a text endpoint) the alert's ``repair_query``; a series that went
stale, a missing query or an unreachable Prometheus never resume a node. Also the
blast-radius minimum of one node per partition."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from gotthard.config import from_mapping
from gotthard.monitoring.rules import dump_yaml
from gotthard.runbooks.cli import effective_settings
from gotthard.runbooks.clusters import from_config
from gotthard.runbooks.repair import RepairError, escape, render
from gotthard.sandbox import free_ports
from gotthard.slurm_state import DRAIN_REASON_PREFIX
from tests.runbooks.conftest import (
    FakeSlurm,
    RepairFeed,
    Running,
    alert_payload,
    settings_for,
    with_repair_query,
)
from tests.support.cli import run
from tests.support.monitoring import binary


def _drained(fake_slurm: FakeSlurm, node: str) -> bool:
    return bool(fake_slurm.state()["nodes"][node]["state"] == "drained")


def _resume_records(running: Running) -> list[dict[str, Any]]:
    return [r for r in running.audit() if r.get("action") == "slurm.resume_node"]


def _link_down(
    tmp_path: Path, fake_slurm: FakeSlurm, start_server: Any, url: str, node: str
) -> Running:
    """The webhook (enforce) with *url* as its Prometheus, after SlingshotLinkDown on *node*
    fired and drained it."""
    running = start_server(settings_for(tmp_path, fake_slurm, mode="enforce", prometheus_url=url))
    assert running.post(alert_payload("SlingshotLinkDown", node=node))[1]["results"] == {"ok": 2}
    assert _drained(fake_slurm, node)
    return running


def _resolved(node: str, query: str | None = None, **labels: str) -> dict[str, Any]:
    payload = alert_payload("SlingshotLinkDown", status="resolved", node=node, **labels)
    return with_repair_query(payload) if query is None else with_repair_query(payload, query)


def test_a_stale_series_does_not_resume_and_a_repair_does(
    tmp_path: Path, fake_slurm: FakeSlurm, start_server: Any, repair_feed: RepairFeed
) -> None:
    running = _link_down(tmp_path, fake_slurm, start_server, repair_feed.url, "nid010")
    repair_feed.health("nid010", 0)  # still failing
    assert running.post(_resolved("nid010"))[1]["results"] == {"not-repaired": 1}
    repair_feed.health("nid010", None)  # the series goes stale: the alert resolves...
    assert running.post(_resolved("nid010"))[1]["results"] == {"not-repaired": 1}
    assert _drained(fake_slurm, "nid010")  # ...but nothing says the link is back
    record = _resume_records(running)[-1]
    assert record["status"] == "resolved" and record["targets"] == {"node": "nid010"}
    assert "returns no series" in record["why"] and "stale" in record["why"]
    assert [c for c in fake_slurm.updates() if "State=RESUME" in c] == []
    # The repair shows: the next notification resumes the node, once.
    repair_feed.health("nid010", 1)
    assert running.post(_resolved("nid010"))[1]["results"] == {"ok": 1}
    assert fake_slurm.state()["nodes"]["nid010"] == {
        "partitions": ["gpu"],
        "state": "idle",
        "reason": "",
    }
    assert running.post(_resolved("nid010"))[1]["results"] == {"duplicate": 1}
    _, metrics = running.get("/metrics")
    assert 'action="slurm.resume_node",result="not-repaired"' in metrics.decode()


def test_dry_run_also_plans_a_resume_only_on_repair(
    tmp_path: Path, fake_slurm: FakeSlurm, start_server: Any, repair_feed: RepairFeed
) -> None:
    running = start_server(settings_for(tmp_path, fake_slurm, prometheus_url=repair_feed.url))
    repair_feed.health("nid011", None)
    assert running.post(_resolved("nid011"))[1]["results"] == {"not-repaired": 1}
    repair_feed.health("nid011", 1)
    assert running.post(_resolved("nid011"))[1]["results"] == {"planned": 1}
    assert fake_slurm.updates() == []


def test_no_repair_query_or_no_prometheus_never_resumes(
    tmp_path: Path, fake_slurm: FakeSlurm, start_server: Any, repair_feed: RepairFeed
) -> None:
    repair_feed.health("nid012", 1)
    running = _link_down(tmp_path, fake_slurm, start_server, repair_feed.url, "nid012")
    plain = alert_payload("SlingshotLinkDown", status="resolved", node="nid012")
    assert running.post(plain)[1]["results"] == {"not-repaired": 1}
    assert "no repair_query annotation" in _resume_records(running)[-1]["why"]
    # A query whose placeholder is not in a string literal is refused, never sent.
    bare = "gotthard_test_node_healthy == $labels.node"
    assert running.post(_resolved("nid012", bare))[1]["results"] == {"not-repaired": 1}
    assert "not inside a string literal" in _resume_records(running)[-1]["why"]
    assert _drained(fake_slurm, "nid012")

    # A Prometheus that is down (nothing listens on the port) confirms nothing either.
    (port,) = free_ports(1)
    down = settings_for(
        tmp_path / "down",
        fake_slurm,
        mode="enforce",
        prometheus_url=f"http://127.0.0.1:{port}",
        prometheus_timeout_seconds=2,
    )
    other = start_server(down)
    assert other.post(_resolved("nid012"))[1]["results"] == {"not-repaired": 1}
    why = _resume_records(other)[-1]["why"]
    assert why.startswith(f"repair not confirmed: Prometheus http://127.0.0.1:{port}"), why
    assert _drained(fake_slurm, "nid012")
    assert [c for c in fake_slurm.updates() if "State=RESUME" in c] == []


def test_label_values_cannot_change_the_repair_query(
    tmp_path: Path, fake_slurm: FakeSlurm, start_server: Any, repair_feed: RepairFeed
) -> None:
    odd = 'port "7"\\ of\nsw-1'
    exposed = 'port \\"7\\"\\\\ of\\nsw-1'  # the same value in the exposition format
    repair_feed.expose(
        f'gotthard_test_port_up{{node="nid013",port="{exposed}"}} 1\n',
        'gotthard_test_port_up{node="nid013"}',
        present=True,
    )
    running = _link_down(tmp_path, fake_slurm, start_server, repair_feed.url, "nid013")
    # A value that would close the string and add "or vector(1)" if it were not escaped.
    hostile = 'x"} or vector(1) or gotthard_test_port_up{port="'
    query = 'gotthard_test_port_up{node="$labels.node", port="$labels.port"} == 1'
    payload = _resolved("nid013", query, port=hostile)
    assert running.post(payload)[1]["results"] == {"not-repaired": 1}
    assert _drained(fake_slurm, "nid013")
    # The odd but real value is escaped so that Prometheus matches it exactly.
    assert running.post(_resolved("nid013", query, port=odd))[1]["results"] == {"ok": 1}
    assert not _drained(fake_slurm, "nid013")


@pytest.mark.parametrize(
    ("template", "labels", "expected"),
    [
        ('up{node="$labels.node"}', {"node": 'a"b'}, 'up{node="a\\"b"}'),
        ("up{node='$labels.node'}", {"node": "a'b\"c"}, "up{node='a\\'b\"c'}"),
        ('up{node="$labels.node", x="\\"$"}', {"node": "n\\1\t"}, 'up{node="n\\\\1\\t", x="\\"$"}'),
        ('up{node="$labels.nodes"}', {"nodes": "\x01"}, 'up{node="\\x01"}'),
    ],
)
def test_render_escapes_for_the_enclosing_string(
    template: str, labels: dict[str, str], expected: str
) -> None:
    assert render(template, labels) == expected


def test_rendered_queries_parse_whatever_the_label_values(tmp_path: Path) -> None:
    values = ["a'b\"c\\d", "line\nbreak\ttab\x01\x7f", "`é`", "$labels.node", "}"]
    templates = ['up{node="$labels.node"} == 1', "up{node='$labels.node'} == 1"]
    rules = [
        {"record": f"r{i}", "expr": render(template, {"node": value})}
        for i, (template, value) in enumerate((t, v) for t in templates for v in values)
    ]
    path = tmp_path / "rendered.rules.yml"
    path.write_text(dump_yaml({"groups": [{"name": "rendered", "rules": rules}]}))
    check = run([binary("promtool"), "check", "rules", str(path)])
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(rules)} rules found" in check.stdout


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("up == $labels.node", "not inside a string literal"),
        ("up{node=`$labels.node`}", "not inside a raw string"),
        ('up{node="$labels.instance"}', "the alert has no 'instance' label"),
    ],
)
def test_render_refuses_what_it_cannot_fill_in_safely(template: str, message: str) -> None:
    with pytest.raises(RepairError, match=message):
        render(template, {"node": "nid001"})
    assert escape("plain", '"') == "plain"


def test_one_node_of_a_small_partition_may_always_drain(
    tmp_path: Path, fake_slurm: FakeSlurm, start_server: Any
) -> None:
    fake_slurm.set_nodes({"small": ["sm1", "sm2", "sm3", "sm4"]})
    running = start_server(settings_for(tmp_path, fake_slurm, mode="enforce"))  # 10 % default
    assert running.post(alert_payload("SlingshotLinkDown", node="sm1"))[1]["results"] == {"ok": 2}
    assert fake_slurm.state()["nodes"]["sm1"]["reason"] == f"{DRAIN_REASON_PREFIX}SlingshotLinkDown"
    second = alert_payload("SlingshotLinkDown", node="sm2", fingerprint="b1")
    assert running.post(second)[1]["results"] == {"ok": 1, "limited": 1}
    record = [r for r in running.audit() if r.get("result") == "limited"][-1]
    assert "would leave 2/4 nodes of partition small unavailable" in record["why"]
    assert [n for n, i in fake_slurm.state()["nodes"].items() if i["state"] == "drained"] == ["sm1"]


@pytest.mark.parametrize(
    ("cluster", "own", "expected"),
    [
        ("hpc1", "", "http://prom-hpc1:9090"),  # the cluster's Prometheus
        ("hpc2", "", "http://prom-zurich:9090"),  # else the site's
        ("hpc1", "http://other:9090", "http://other:9090"),  # [runbooks] wins when set
    ],
)
def test_the_prometheus_comes_from_the_site_model(cluster: str, own: str, expected: str) -> None:
    site = {
        "prometheus_url": "http://prom-zurich:9090",
        "clusters": {"hpc1": {"prometheus_url": "http://prom-hpc1:9090"}, "hpc2": {}},
    }
    cfg = from_mapping(
        {
            "site": "zurich",
            "cluster": cluster,
            "sites": {"zurich": site},
            "runbooks": {"prometheus_url": own},
        }
    )
    args = argparse.Namespace(listen=None, token_file=None, audit_log=None, mode=None)
    clusters = from_config(cfg, effective_settings(args, cfg))
    assert clusters.owned[cluster].repair.url == expected
