"""The site overview dashboard: Zurich and Lugano side by side, one stat row per area."""

from __future__ import annotations

from grafanalib.core import Dashboard, Stat, Table

from gotthard.monitoring.components import gpu, lustre, slingshot, slurm
from gotthard.monitoring.components.dr import DRILL_PASSED, DRILL_RTO, LAST_BACKUP, SITE_HEALTHY
from gotthard.monitoring.dashboards import panels as ui
from gotthard.monitoring.dashboards.boards.lustre import fill_thresholds, spread_thresholds
from gotthard.monitoring.dashboards.boards.security import (
    kube_bench,
    kube_bench_passing,
    violations,
)
from gotthard.monitoring.dashboards.boards.slurm import allocated, unavailable_nodes
from gotthard.monitoring.shared import count_zero, eq, sel
from gotthard.monitoring.thresholds import ThresholdValues

DESCRIPTION = "Zurich and Lugano side by side: Slurm, GPUs, Slingshot, Lustre, DR and compliance."
TAGS = ("overview",)
PERCENT = "percentunit"
CLUSTER_UNCORRECTED_FEC = sel(slingshot.CLUSTER_FEC_RATE, eq("type", "uncorrected"))
#: Every OST's fill, as the Lustre fill alerts see it.
FILL = sel(lustre.OST_FILL)


def _per_site(title: str, unit: str, *queries: ui.Query, description: str = "") -> Stat:
    """A stat panel Grafana repeats for every selected site."""
    return ui.stat(title, unit, *queries, description=description, repeat="site")


def _bad(expr: str, legend: str) -> ui.Query:
    return ui.Query(expr, legend, thresholds=ui.BAD_FROM_ONE)


def _area_stats(t: ThresholdValues) -> list[Stat]:
    """One row per area, each repeated per site."""
    return [
        _per_site(
            "Slurm — $site",
            "short",
            ui.Query(
                f"min({sel('gotthard_slurm_up')})",
                "controller",
                unit="none",
                mappings=(ui.UP_DOWN,),
            ),
            ui.Query(allocated("gotthard_slurm_node_cpus", ""), "CPUs allocated", unit=PERCENT),
            ui.Query(allocated("gotthard_slurm_node_gpus", ""), "GPUs allocated", unit=PERCENT),
            ui.Query(f"sum({sel('gotthard_slurm_jobs', eq('state', 'pending'))})", "jobs pending"),
            _bad(unavailable_nodes(), "nodes unavailable"),
            description="Controller reachability, allocation of CPUs and GPUs over all "
            "nodes, pending backlog, and nodes that cannot take work.",
        ),
        _per_site(
            "GPUs — $site",
            "short",
            ui.Query(
                f"avg({sel('gotthard_gpu_utilization_ratio')})", "mean utilisation", unit=PERCENT
            ),
            ui.Query(f"count({sel('gotthard_gpu_info')})", "GPUs"),
            _bad(count_zero("gotthard_gpu_health", 'gpu_instance=""'), "unhealthy"),
            ui.Query(f"sum({sel('gotthard_gpu_power_watts')})", "power", unit="watt"),
        ),
        _per_site(
            "Slingshot — $site",
            "short",
            _bad(count_zero("gotthard_slingshot_link_up"), "links down"),
            _bad(count_zero("gotthard_slingshot_link_healthy"), "links unhealthy"),
            ui.Query(
                f"sum({sel('gotthard_slingshot_link_restarts_recent', eq('window', '1h'))})",
                "link restarts (1h)",
            ),
            ui.Query(f"sum({CLUSTER_UNCORRECTED_FEC})", "uncorrected FEC", unit="cps"),
        ),
        _per_site(
            "Lustre — $site",
            PERCENT,
            ui.Query(f"max({FILL})", "fullest OST", thresholds=fill_thresholds(t)),
            ui.Query(
                f"max({sel(lustre.FILL_SPREAD)})",
                "OST fill spread",
                thresholds=spread_thresholds(t),
            ),
            ui.Query(f"sum({sel(lustre.FS_MDT_OPERATIONS)})", "metadata ops", unit="ops"),
        ),
        _per_site(
            "DR — $site",
            "s",
            ui.Query(f"min({sel(SITE_HEALTHY)})", "site", unit="none", mappings=(ui.HEALTHY,)),
            ui.Query(f"max(time() - {sel(LAST_BACKUP)})", "oldest backup"),
            ui.Query(
                f"min({sel(DRILL_PASSED)})", "last drills", unit="none", mappings=(ui.PASS_FAIL,)
            ),
            ui.Query(f"max({sel(DRILL_RTO)})", "worst drill RTO"),
        ),
        _per_site(
            "Compliance — $site",
            "short",
            _bad(kube_bench("fail"), "kube-bench failed"),
            ui.Query(kube_bench_passing(), "kube-bench passing", unit=PERCENT),
            _bad(violations(), "policy violations"),
        ),
    ]


def site_overview(t: ThresholdValues) -> Dashboard:
    board = ui.Board()
    for panel in _area_stats(t):
        board.add(panel, w=12, h=5, alone=True)
    board.row(
        ui.ratio_timeseries(
            "Slurm allocation by site",
            ui.Query(f"avg by (site) ({sel(slurm.NODE_CPUS_ALLOC)})", "CPUs {{site}}"),
            ui.Query(f"avg by (site) ({sel(slurm.NODE_GPUS_ALLOC)})", "GPUs {{site}}"),
        ),
        ui.ratio_timeseries(
            "GPU utilisation by site",
            ui.Query(f"avg by (site) ({sel(gpu.CLUSTER_UTILIZATION)})", "{{site}}"),
        ),
    )
    board.row(
        ui.timeseries(
            "Slingshot errors by site",
            "cps",
            ui.Query(f"sum by (site) ({CLUSTER_UNCORRECTED_FEC})", "uncorrected FEC {{site}}"),
            ui.Query(
                f"sum by (site) ({sel(slingshot.CLUSTER_TIMEOUTS)})",
                "retransmission timeouts {{site}}",
            ),
        ),
        ui.ratio_timeseries(
            "Lustre fullest OST by site",
            ui.Query(f"max by (site) ({FILL})", "{{site}}"),
            lines=fill_thresholds(t),
        ),
    )
    board.row(_firing_alerts())
    return ui.dashboard("site-overview", DESCRIPTION, TAGS, board)


def _firing_alerts() -> Table:
    """Alerts firing now, one row per alert, site and cluster."""
    firing = sel("ALERTS", 'alertstate="firing"')
    return ui.label_table(
        "Firing alerts",
        f"sum by (site, cluster, alertname, severity) ({firing})",
        "firing",
        description="Alerts firing now (ALERTS series of the rules in Prometheus).",
        sort_by="severity",
    )
