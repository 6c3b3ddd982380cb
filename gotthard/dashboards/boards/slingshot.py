"""The Slingshot network health dashboard: HPE Slingshot (Cassini) NICs and their links."""

from __future__ import annotations

from grafanalib.core import Dashboard, TimeSeries

from gotthard.dashboards.panels import (
    HEALTHY,
    UP_DOWN,
    Board,
    Query,
    agg,
    count_zero,
    dashboard,
    eq,
    label_variable,
    problem_stat,
    rate,
    sel,
    stat,
    table,
    timeseries,
)

NAME = "Slingshot network health"
DESCRIPTION = (
    "HPE Slingshot (Cassini) NICs: link state and flaps, retransmissions, FEC, "
    "LLR replays, pause, discards and throughput."
)
TAGS = ("slingshot", "network")
NODE = 'instance=~"$instance"'
FEC = "slingshot_fec_codewords_total"


def _rate_by(
    title: str, metric: str, labels: str, legend: str, unit: str = "cps", description: str = ""
) -> TimeSeries:
    """The rate of a NIC counter over the selected nodes, summed by *labels*."""
    query = Query(agg("sum", labels, rate(metric, NODE)), legend)
    return timeseries(title, unit, query, description=description)


def _codeword_ratio(kind: str) -> Query:
    """Share of all FEC codewords of one device that were corrected or uncorrected."""
    link = "instance, device"
    errors = agg("sum", link, rate(FEC, NODE, eq("type", kind)))
    return Query(
        f"{errors} / {agg('sum', link, rate(FEC, NODE))}", "{{instance}} {{device}} " + kind
    )


def _per_link(metric: str) -> str:
    """One value per NIC device, for the NIC table."""
    return agg("max", "site, cluster, instance, device", sel(metric, NODE))


def slingshot_network() -> Dashboard:
    board = Board()
    board.stats(
        stat("NICs", "short", Query(f"count({sel('slingshot_info', NODE)})", "NICs")),
        problem_stat("Links down", count_zero("slingshot_link_up", NODE), "down"),
        problem_stat(
            "Links unhealthy",
            count_zero("slingshot_link_healthy", NODE),
            "unhealthy",
            description="cxi_healthcheck rule: link down, or too many restarts in 1 h / 10 h.",
        ),
        stat(
            "Uncorrected FEC codewords",
            "cps",
            Query(f"sum({rate(FEC, NODE, eq('type', 'uncorrected'))})", "uncorrected"),
            thresholds=((0.001, "red"),),
        ),
    )
    restarts = agg("sum", "instance, device, window", sel("slingshot_link_restarts_recent", NODE))
    board.row(
        timeseries(
            "Link restarts (flaps)",
            "short",
            Query(f"topk(10, {restarts})", "{{instance}} {{device}} {{window}}"),
            description="Restarts in the last 1 h and 10 h windows (link_restarts/time_*).",
        ),
        _rate_by(
            "Retransmission timeouts",
            "slingshot_timeouts_total",
            "type",
            "{{type}}",
            description="SPT, SCT and TCT timeouts: packets the NIC had to retransmit.",
        ),
    )
    board.row(
        timeseries(
            "FEC codewords",
            "cps",
            Query(agg("sum", "type", rate(FEC, NODE, 'type=~"corrected|uncorrected"')), "{{type}}"),
        ),
        timeseries(
            "Codeword error ratio (BER proxy)",
            "sci",
            _codeword_ratio("corrected"),
            _codeword_ratio("uncorrected"),
            description="Corrected (pre-FEC) and uncorrected (post-FEC) codewords over all "
            "codewords: a proxy for the bit error rate.",
        ),
        _rate_by("LLR replays", "slingshot_llr_replays_total", "direction", "{{direction}}"),
    )
    board.row(
        _rate_by(
            "Pause frames",
            "slingshot_pause_total",
            "direction, class",
            "{{direction}} class {{class}}",
        ),
        _rate_by("Discards", "slingshot_discards_total", "class", "class {{class}}"),
        _rate_by("Bad frames received", "slingshot_rx_bad_frames_total", "type", "{{type}}"),
    )
    board.row(
        _rate_by("NACKs", "slingshot_nacks_total", "reason", "{{reason}}"),
        _rate_by("Throughput", "slingshot_octets_total", "direction", "{{direction}}", "Bps"),
        _rate_by("NIC PCIe errors", "slingshot_pcie_errors_total", "type", "{{type}}"),
    )
    nics = "site, cluster, instance, device, interface, nid, cassini_version, firmware"
    board.row(
        table(
            "NICs and links",
            "none",
            Query(agg("max", nics, sel("slingshot_info", NODE)), name="info"),
            Query(_per_link("slingshot_link_up"), name="link up", mappings=(UP_DOWN,)),
            Query(_per_link("slingshot_link_healthy"), name="healthy", mappings=(HEALTHY,)),
            Query(_per_link("slingshot_link_speed_bits_per_second"), name="speed", unit="bps"),
            hide=("Time", "Value #A"),
        )
    )
    return dashboard(
        NAME, DESCRIPTION, TAGS, board, [label_variable("instance", "Node", "slingshot_info")]
    )
