"""The security compliance dashboard: kube-bench CIS results and policy violations."""

from __future__ import annotations

from grafanalib.core import Dashboard

from gotthard.dashboards.panels import (
    Board,
    Query,
    bargauge,
    dashboard,
    label_table,
    problem_stat,
    rx,
    sel,
    stat,
    table,
    timeseries,
)

NAME = "Security compliance"
DESCRIPTION = "kube-bench CIS results (with waivers) and admission-policy violations."
TAGS = ("security",)
KUBE_BENCH = "gotthard_kube_bench_checks"
VIOLATIONS = "gotthard_policy_violations"


def kube_bench(status: str) -> str:
    """kube-bench checks whose status matches *status* (case-insensitively)."""
    return f"sum({sel(KUBE_BENCH, rx('status', '(?i)' + status))})"


def kube_bench_passing() -> str:
    """Share of the decided (passed or failed) kube-bench checks that pass."""
    return f"{kube_bench('pass')} / {kube_bench('pass|fail')}"


def violations() -> str:
    return f"sum({sel(VIOLATIONS)})"


def security_compliance() -> Dashboard:
    board = Board()
    board.stats(
        problem_stat("kube-bench failed checks", kube_bench("fail"), "failed"),
        stat("kube-bench passing", "percentunit", Query(kube_bench_passing(), "passing")),
        stat("kube-bench warnings", "short", Query(kube_bench("warn"), "warnings")),
        problem_stat("Policy violations", violations(), "violations"),
    )
    board.row(
        bargauge(
            "kube-bench results by node type",
            "short",
            Query(f"sum by (node_type, status) ({sel(KUBE_BENCH)})", "{{node_type}} {{status}}"),
        ),
        timeseries(
            "kube-bench checks by status",
            "short",
            Query(f"sum by (status) ({sel(KUBE_BENCH)})", "{{status}}"),
        ),
    )
    failed = sel("gotthard_kube_bench_check_failed")
    board.row(
        label_table(
            "Failed kube-bench checks",
            f"max by (site, cluster, node_type, id) ({failed}) > 0",
            "failed",
            sort_by="id",
            description="CIS checks that failed and are not waived.",
        ),
        table(
            "Policy violations by rule",
            "short",
            Query(f"sum by (site, cluster, policy, rule) ({sel(VIOLATIONS)})", name="violations"),
            sort_by="violations",
        ),
    )
    board.row(
        timeseries(
            "Policy violations over time",
            "short",
            Query(f"sum by (policy) ({sel(VIOLATIONS)})", "{{policy}}"),
        )
    )
    return dashboard(NAME, DESCRIPTION, TAGS, board)
