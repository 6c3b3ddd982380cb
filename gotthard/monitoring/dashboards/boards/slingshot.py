"""The Slingshot network health dashboard: HPE Slingshot (Cassini) NICs and their links."""

from __future__ import annotations

from grafanalib.core import Dashboard, TimeSeries

from gotthard.monitoring.components import slingshot
from gotthard.monitoring.dashboards import panels as ui
from gotthard.monitoring.dashboards.panels import NODE
from gotthard.monitoring.shared import agg, count_zero, eq, rate, rx, sel
from gotthard.monitoring.thresholds import ThresholdValues

DESCRIPTION = (
    "HPE Slingshot (Cassini) NICs: link state and flaps, retransmissions, FEC, "
    "LLR replays, pause, discards and throughput."
)
TAGS = ("slingshot", "network")
#: The dashboard's own variable, after datasource, site and cluster.
VARIABLES = (ui.node_variable("gotthard_slingshot_info"),)
#: The recorded FEC codeword rates of the selected nodes, corrected and uncorrected.
FEC_ERRORS = sel(slingshot.FEC_RATE, NODE, rx("type", "corrected|uncorrected"))


def _rate_by(
    title: str, metric: str, labels: str, legend: str, unit: str = "cps", description: str = ""
) -> TimeSeries:
    """The rate of a NIC counter over the selected nodes, summed by *labels*."""
    query = ui.Query(agg("sum", labels, rate(metric, NODE)), legend)
    return ui.timeseries(title, unit, query, description=description)


def _per_link(metric: str) -> str:
    """One value per NIC device, for the NIC ui.table."""
    return agg("max", "site, cluster, instance, device", sel(metric, NODE))


def slingshot_network(t: ThresholdValues) -> Dashboard:
    flaps = ((t[slingshot.FLAPS_1H], "orange"), (t[slingshot.FLAPS_10H], "red"))
    board = ui.Board()
    board.stats(
        ui.stat(
            "NICs", "short", ui.Query(f"count({sel('gotthard_slingshot_info', NODE)})", "NICs")
        ),
        ui.problem_stat("Links down", count_zero("gotthard_slingshot_link_up", NODE), "down"),
        ui.problem_stat(
            "Links unhealthy",
            count_zero("gotthard_slingshot_link_healthy", NODE),
            "unhealthy",
            description="cxi_healthcheck rule: link down, or too many restarts in 1 h / 10 h.",
        ),
        ui.stat(
            "Uncorrected FEC codewords",
            "cps",
            ui.Query(
                f"sum({sel(slingshot.FEC_RATE, NODE, eq('type', 'uncorrected'))})", "uncorrected"
            ),
            thresholds=((0.001, "red"),),
        ),
    )
    restarts = agg(
        "sum", "instance, device, window", sel("gotthard_slingshot_link_restarts_recent", NODE)
    )
    board.row(
        ui.timeseries(
            "Link restarts (flaps)",
            "short",
            ui.Query(f"topk(10, {restarts})", "{{instance}} {{device}} {{window}}"),
            description="Restarts in the last 1 h and 10 h windows (link_restarts/time_*). "
            "SlingshotLinkFlapping fires at the orange line (1 h) or the red line (10 h).",
            lines=flaps,
        ),
        ui.timeseries(
            "Retransmission timeouts",
            "cps",
            ui.Query(agg("max", "type", sel(slingshot.TIMEOUTS, NODE)), "{{type}}"),
            description="SPT, SCT and TCT timeouts: packets the NIC had to retransmit, on the "
            "worst NIC. SlingshotRetransmissionTimeoutsHigh fires for SPT above the line.",
            lines=((t[slingshot.SPT_TIMEOUTS], "red"),),
        ),
    )
    board.row(
        ui.timeseries("FEC codewords", "cps", ui.Query(agg("sum", "type", FEC_ERRORS), "{{type}}")),
        ui.timeseries(
            "Bit error rate",
            "sci",
            ui.Query(
                sel(slingshot.BER, NODE, rx("type", "corrected|uncorrected")),
                "{{instance}} {{device}} {{type}}",
            ),
            description="Corrected (pre-FEC) and uncorrected (post-FEC) codewords over the "
            "link's bit rate, as cxi_stat computes the BER. SlingshotHighBER fires for the "
            "corrected BER above the line.",
            lines=((t[slingshot.CORRECTED_BER], "red"),),
        ),
        _rate_by(
            "LLR replays", "gotthard_slingshot_llr_replays_total", "direction", "{{direction}}"
        ),
    )
    board.row(
        _rate_by(
            "Pause frames",
            "gotthard_slingshot_pause_frames_total",
            "direction, class",
            "{{direction}} class {{class}}",
        ),
        _rate_by("Discards", "gotthard_slingshot_discards_total", "class", "class {{class}}"),
        _rate_by(
            "Bad frames received", "gotthard_slingshot_rx_bad_frames_total", "type", "{{type}}"
        ),
    )
    board.row(
        _rate_by("NACKs", "gotthard_slingshot_nacks_total", "reason", "{{reason}}"),
        _rate_by(
            "Throughput", "gotthard_slingshot_bytes_total", "direction", "{{direction}}", "Bps"
        ),
        _rate_by("NIC PCIe errors", "gotthard_slingshot_pcie_errors_total", "type", "{{type}}"),
    )
    nics = "site, cluster, instance, device, interface, nid, cassini_version, firmware"
    board.row(
        ui.table(
            "NICs and links",
            "none",
            ui.Query(agg("max", nics, sel("gotthard_slingshot_info", NODE)), name="info"),
            ui.Query(
                _per_link("gotthard_slingshot_link_up"), name="link up", mappings=(ui.UP_DOWN,)
            ),
            ui.Query(
                _per_link("gotthard_slingshot_link_healthy"), name="healthy", mappings=(ui.HEALTHY,)
            ),
            ui.Query(
                _per_link("gotthard_slingshot_link_speed_bits_per_second"), name="speed", unit="bps"
            ),
            hide=("Time", "Value #A"),
        )
    )
    return ui.dashboard("slingshot-network-health", DESCRIPTION, TAGS, board, VARIABLES)
