"""The security compliance dashboard: kube-bench CIS results and policy violations."""

from __future__ import annotations

from grafanalib.core import Dashboard

from gotthard.monitoring.components.security import KUBE_BENCH, KUBE_BENCH_FAILED, VIOLATIONS
from gotthard.monitoring.dashboards import panels as ui
from gotthard.monitoring.shared import rx, sel
from gotthard.monitoring.thresholds import ThresholdValues

DESCRIPTION = "kube-bench CIS results (with waivers) and admission-policy violations."
TAGS = ("security",)


def kube_bench(status: str) -> str:
    """kube-bench checks whose status matches *status* (case-insensitively)."""
    return f"sum({sel(KUBE_BENCH, rx('status', '(?i)' + status))})"


def kube_bench_passing() -> str:
    """Share of the decided (passed or failed) kube-bench checks that pass."""
    return f"{kube_bench('pass')} / {kube_bench('pass|fail')}"


def violations() -> str:
    return f"sum({sel(VIOLATIONS)})"


def security_compliance(t: ThresholdValues) -> Dashboard:
    board = ui.Board()
    board.stats(
        ui.problem_stat("kube-bench failed checks", kube_bench("fail"), "failed"),
        ui.stat("kube-bench passing", "percentunit", ui.Query(kube_bench_passing(), "passing")),
        ui.stat("kube-bench warnings", "short", ui.Query(kube_bench("warn"), "warnings")),
        ui.problem_stat("Policy violations", violations(), "violations"),
    )
    board.row(
        ui.bargauge(
            "kube-bench results by node type",
            "short",
            ui.Query(f"sum by (node_type, status) ({sel(KUBE_BENCH)})", "{{node_type}} {{status}}"),
        ),
        ui.timeseries(
            "kube-bench checks by status",
            "short",
            ui.Query(f"sum by (status) ({sel(KUBE_BENCH)})", "{{status}}"),
        ),
    )
    failed = sel(KUBE_BENCH_FAILED)
    board.row(
        ui.label_table(
            "Failed kube-bench checks",
            f"max by (site, cluster, node_type, id) ({failed}) > 0",
            "failed",
            sort_by="id",
            description="CIS checks that failed and are not waived.",
        ),
        ui.table(
            "Policy violations by rule",
            "short",
            ui.Query(
                f"sum by (site, cluster, policy, rule) ({sel(VIOLATIONS)})", name="violations"
            ),
            sort_by="violations",
        ),
    )
    board.row(
        ui.timeseries(
            "Policy violations over time",
            "short",
            ui.Query(f"sum by (policy) ({sel(VIOLATIONS)})", "{{policy}}"),
        )
    )
    return ui.dashboard("security-compliance", DESCRIPTION, TAGS, board)
