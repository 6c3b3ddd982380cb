"""``gotthard dashboards check``'s variable resolution, without a Prometheus: what each
variable stands for when every value is selected, as Grafana's "All" fills it in, and
its list of queries allowed to be empty.

The check against a real Prometheus is in test_dashboards.py."""

from __future__ import annotations

from typing import Any

import pytest

from gotthard.monitoring.dashboards import build, lint
from gotthard.monitoring.dashboards import check as live
from gotthard.monitoring.dashboards.panels import ALL_NODES

#: uids of the dashboards with a node (``instance``) variable that has "All"
NODE_DASHBOARDS = ("gotthard-slingshot-network-health",)


class LabelValues:
    """What ``/api/v1/label/<label>/values`` answers: *values* per label, any selector."""

    def __init__(self, **values: list[str]) -> None:
        self.values = values

    def label_values(self, label: str, selector: str = "") -> list[str]:
        return self.values.get(label, [])


def dashboard(uid: str) -> dict[str, Any]:
    return next(d for d in build.build_dashboards() if d["uid"] == uid)


@pytest.mark.parametrize("uid", NODE_DASHBOARDS)
def test_all_nodes_is_the_node_variables_all_value_not_every_node(uid: str) -> None:
    nodes = [f"nid{n:06d}:9877" for n in range(2700)]
    prometheus = LabelValues(site=["lugano", "zurich"], cluster=["alps"], instance=nodes)
    values, problems = live.resolve_variables(prometheus, dashboard(uid), "1m")
    assert problems == {}
    # what Grafana writes for "All" nodes: the variable's allValue, a short regex
    assert values["instance"] == ALL_NODES == ".*"
    assert (
        next(v for v in dashboard(uid)["templating"]["list"] if v["name"] == "instance")["allValue"]
        == ALL_NODES
    )
    # a variable without one still stands for the alternation of its values
    assert values["site"] == "(lugano|zurich)" and values["cluster"] == "alps"


def test_a_node_choice_without_all_is_every_node_in_a_check_and_the_first_when_opened() -> None:
    """The GPU fleet's node variable has no "All": the check reads every node's series
    (the alternation), a dashboard opens on the first node, as Grafana opens it."""
    nodes = ["nid000002:9400", "nid000001:9400", "nid000003:9400"]
    prometheus = LabelValues(site=["zurich"], cluster=["alps"], instance=sorted(nodes))
    board = dashboard("gotthard-gpu-fleet")
    values, problems = live.resolve_variables(prometheus, board, "1m")
    assert problems == {}
    assert values["instance"] == "(nid000001:9400|nid000002:9400|nid000003:9400)"
    opened, _ = live.resolve_variables(prometheus, board, "1m", opening=True)
    assert opened["instance"] == "nid000001:9400"
    # variables with "All" open on it
    assert opened["site"] == "zurich" and opened["cluster"] == "alps"
    slingshot, _ = live.resolve_variables(
        prometheus, dashboard("gotthard-slingshot-network-health"), "1m", opening=True
    )
    assert slingshot["instance"] == ALL_NODES


def test_a_node_variable_without_nodes_is_a_problem_despite_its_all_value() -> None:
    prometheus = LabelValues(site=["zurich"], cluster=["alps"])
    uid = "gotthard-slingshot-network-health"
    values, problems = live.resolve_variables(prometheus, dashboard(uid), "1m")
    assert "instance" not in values
    assert problems["instance"].startswith("$instance has no values")


def test_variable_values_are_escaped_for_promql_regexes() -> None:
    assert live.regex_escape("zurich") == "zurich"
    assert live.regex_escape("a.b") == "a\\\\.b"
    assert live._alternation(["a", "b.c"], regex=True) == "(a|b\\\\.c)"
    assert (
        live.substitute(
            "x[$__rate_interval] ${site} [[cluster]] $other",
            {
                "__rate_interval": "1m",
                "site": "s",
                "cluster": "c",
            },
        )
        == "x[1m] s c $other"
    )


def test_allow_list_is_short_and_names_real_queries() -> None:
    dashboards = build.build_dashboards()
    assert len(live.ALLOWED_EMPTY) <= 5
    known = {
        (d["uid"], p["title"], t["refId"])
        for d in dashboards
        for p in lint.iter_panels(d)
        for t in p["targets"]
    }
    for key, reason in live.ALLOWED_EMPTY.items():
        assert key in known, key
        assert len(reason) > 20


@pytest.mark.parametrize(
    ("pattern", "values", "kept"),
    [
        # the Job dashboard's: the host of each instance, once
        ("/^([^:]+)/", ["nid001:9400", "nid002:9400", "nid001:9401"], ["nid001", "nid002"]),
        # no group: the match itself; values it does not match are dropped
        ("/nid00[12]/", ["nid001:9400", "nid003:9400"], ["nid001"]),
        ("/NID(0+1)/i", ["nid001"], ["001"]),
        # without slashes the pattern must match the whole value
        ("nid00.", ["nid001", "nid001:9400"], ["nid001"]),
    ],
)
def test_a_variable_regex_keeps_what_grafana_keeps(
    pattern: str, values: list[str], kept: list[str]
) -> None:
    assert live.variable_regex(pattern, values) == kept


def test_a_variable_with_an_invalid_regex_is_a_problem_not_a_crash() -> None:
    board = dashboard("gotthard-job")
    for variable in board["templating"]["list"]:
        if variable["name"] == "job_node":
            variable["regex"] = "/([/"
    prometheus = LabelValues(site=["lugano"], cluster=["alps"], job_id=["42"], instance=["a:1"])
    _values, problems = live.resolve_variables(prometheus, board, "1m")
    assert "job_node" in problems and "not valid" in problems["job_node"]


def test_the_job_dashboard_reads_the_series_of_the_jobs_nodes_only() -> None:
    """The job's GPU and NIC series are selected by its nodes before the join: a panel
    reads a few nodes' series, not every node's of the site."""
    board = dashboard("gotthard-job")
    nodes = ["nid000001:9400", "nid000002:9400", "nid000002:9401"]
    prometheus = LabelValues(site=["lugano"], cluster=["alps"], job_id=["42"], instance=nodes)
    values, problems = live.resolve_variables(prometheus, board, "1m")
    assert problems == {}
    assert values["job_node"] == "(nid000001|nid000002)"
    [hidden] = [v for v in board["templating"]["list"] if v["name"] == "job_node"]
    assert hidden["hide"] == 2
    exprs = {p["title"]: p["targets"][0]["expr"] for p in lint.iter_panels(board)}
    narrowed = 'instance=~"((nid000001|nid000002))(:[0-9]+)?"'
    for title in ("GPU utilisation", "Tensor active", "GPU power", "Slingshot traffic"):
        [expr] = [e for t, e in exprs.items() if t.startswith(title)]
        assert narrowed in live.substitute(expr, values), title
