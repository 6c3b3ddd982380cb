"""The site overview dashboard: Zurich and Lugano side by side, one stat row per area."""

from __future__ import annotations

from grafanalib.core import Dashboard, Stat

from gotthard.dashboards.boards.dr import DRILL_PASSED, DRILL_RTO, LAST_BACKUP
from gotthard.dashboards.boards.lustre import (
    FILL_THRESHOLDS,
    SPREAD_THRESHOLDS,
    fill_spread,
    ost_fill,
)
from gotthard.dashboards.boards.security import kube_bench, kube_bench_passing, violations
from gotthard.dashboards.boards.slurm import allocated, unavailable_nodes
from gotthard.dashboards.panels import (
    BAD_FROM_ONE,
    HEALTHY,
    PASS_FAIL,
    UP_DOWN,
    Board,
    Query,
    count_zero,
    dashboard,
    eq,
    label_table,
    rate,
    ratio_timeseries,
    sel,
    stat,
    timeseries,
)

NAME = "Site overview"
DESCRIPTION = "Zurich and Lugano side by side: Slurm, GPUs, Slingshot, Lustre, DR and compliance."
TAGS = ("overview",)
PERCENT = "percentunit"
UNCORRECTED_FEC = rate("slingshot_fec_codewords_total", eq("type", "uncorrected"))


def _per_site(title: str, unit: str, *queries: Query, description: str = "") -> Stat:
    """A stat panel Grafana repeats for every selected site."""
    return stat(title, unit, *queries, description=description, repeat="site")


def _bad(expr: str, legend: str) -> Query:
    return Query(expr, legend, thresholds=BAD_FROM_ONE)


def _area_stats(fill: str) -> list[Stat]:
    """One row per area, each repeated per site."""
    return [
        _per_site(
            "Slurm — $site",
            "short",
            Query(f"min({sel('slurm_up')})", "controller", unit="none", mappings=(UP_DOWN,)),
            Query(allocated("slurm_node_cpus", ""), "CPUs allocated", unit=PERCENT),
            Query(allocated("slurm_node_gpus", ""), "GPUs allocated", unit=PERCENT),
            Query(f"sum({sel('slurm_jobs', eq('state', 'pending'))})", "jobs pending"),
            _bad(unavailable_nodes(), "nodes down or draining"),
            description="Controller reachability, allocation of CPUs and GPUs over all "
            "nodes, pending backlog, and nodes that cannot take work.",
        ),
        _per_site(
            "GPUs — $site",
            "short",
            Query(f"avg({sel('gpu_utilization_ratio')})", "mean utilisation", unit=PERCENT),
            Query(f"count({sel('gpu_info')})", "GPUs"),
            _bad(count_zero("gpu_health", 'gpu_instance=""'), "unhealthy"),
            Query(f"sum({sel('gpu_power_watts')})", "power", unit="watt"),
        ),
        _per_site(
            "Slingshot — $site",
            "short",
            _bad(count_zero("slingshot_link_up"), "links down"),
            _bad(count_zero("slingshot_link_healthy"), "links unhealthy"),
            Query(
                f"sum({sel('slingshot_link_restarts_recent', eq('window', '1h'))})",
                "link restarts (1h)",
            ),
            Query(f"sum({UNCORRECTED_FEC})", "uncorrected FEC", unit="cps"),
        ),
        _per_site(
            "Lustre — $site",
            PERCENT,
            Query(f"max({fill})", "fullest OST", thresholds=FILL_THRESHOLDS),
            Query(
                f"max({fill_spread(fill, 'fs')})", "OST fill spread", thresholds=SPREAD_THRESHOLDS
            ),
            Query(
                f"sum({rate('lustre_operations_total', eq('component', 'mdt'))})",
                "metadata ops",
                unit="ops",
            ),
        ),
        _per_site(
            "DR — $site",
            "s",
            Query(
                f"min({sel('gotthard_dr_site_healthy')})", "site", unit="none", mappings=(HEALTHY,)
            ),
            Query(f"max(time() - {sel(LAST_BACKUP)})", "oldest backup"),
            Query(f"min({sel(DRILL_PASSED)})", "last drills", unit="none", mappings=(PASS_FAIL,)),
            Query(f"max({sel(DRILL_RTO)})", "worst drill RTO"),
        ),
        _per_site(
            "Compliance — $site",
            "short",
            _bad(kube_bench("fail"), "kube-bench failed"),
            Query(kube_bench_passing(), "kube-bench passing", unit=PERCENT),
            _bad(violations(), "policy violations"),
        ),
    ]


def site_overview() -> Dashboard:
    fill = ost_fill(fs=False)
    board = Board()
    for panel in _area_stats(fill):
        board.add(panel, w=12, h=5, alone=True)
    board.row(
        ratio_timeseries(
            "Slurm allocation by site",
            Query(allocated("slurm_node_cpus", "site"), "CPUs {{site}}"),
            Query(allocated("slurm_node_gpus", "site"), "GPUs {{site}}"),
        ),
        ratio_timeseries(
            "GPU utilisation by site",
            Query(f"avg by (site) ({sel('gpu_utilization_ratio')})", "{{site}}"),
        ),
    )
    board.row(
        timeseries(
            "Slingshot errors by site",
            "cps",
            Query(f"sum by (site) ({UNCORRECTED_FEC})", "uncorrected FEC {{site}}"),
            Query(
                f"sum by (site) ({rate('slingshot_timeouts_total')})",
                "retransmission timeouts {{site}}",
            ),
        ),
        ratio_timeseries(
            "Lustre fullest OST by site", Query(f"max by (site) ({fill})", "{{site}}")
        ),
    )
    firing = sel("ALERTS", 'alertstate="firing"')
    board.row(
        label_table(
            "Firing alerts",
            f"sum by (site, cluster, alertname, severity) ({firing})",
            "firing",
            description="Alerts firing now (ALERTS series of the rules in Prometheus).",
            sort_by="severity",
        )
    )
    return dashboard(NAME, DESCRIPTION, TAGS, board)
