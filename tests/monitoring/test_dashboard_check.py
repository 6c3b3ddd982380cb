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

#: uids of the dashboards with a node (``instance``) variable
NODE_DASHBOARDS = ("gotthard-gpu-fleet", "gotthard-slingshot-network-health")


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
