"""The Slingshot network health dashboard: HPE Slingshot (Cassini) NICs and their links."""

from __future__ import annotations

from grafanalib.core import Dashboard, TimeSeries

from gotthard.monitoring.components import slingshot
from gotthard.monitoring.components.slingshot import TOP_NICS
from gotthard.monitoring.dashboards import panels as ui
from gotthard.monitoring.dashboards.panels import NODE
from gotthard.monitoring.shared import agg, count_zero, eq, rx, sel
from gotthard.monitoring.thresholds import ThresholdValues

DESCRIPTION = (
    "HPE Slingshot (Cassini) NICs: link state and flaps, retransmissions, FEC, "
    "LLR replays, pause, discards and throughput."
)
TAGS = ("slingshot", "network")
#: The dashboard's own variable, after datasource, site and cluster.
VARIABLES = (ui.node_variable("gotthard_slingshot_info"),)
_NIC_LEGEND = "{{instance}} {{device}}"
#: The recorded FEC codeword rates of the selected sites and clusters, corrected and
#: uncorrected.
CLUSTER_FEC_ERRORS = sel(slingshot.CLUSTER_FEC_RATE, rx("type", "corrected|uncorrected"))
_CLUSTER_NOTE = (
    " All NICs of the selected sites and clusters (the Node selection does not apply), "
    "recorded every slow rule interval ({record})."
)
_TOP_NOTE = (
    " The {TOP_NICS} {what} of each selected cluster{per} with the {most}, recorded every "
    "slow rule interval ({record}); the Node selection does not apply."
)


def _top_note(record: str, what: str = "NICs", per: str = "", most: str = "highest rate") -> str:
    """What a busiest-NIC panel shows: *record*, the recorded top NICs of each cluster."""
    return _TOP_NOTE.format(TOP_NICS=TOP_NICS, what=what, per=per, most=most, record=record)


def _cluster(
    title: str, counter: slingshot.NicCounter, legend: str, unit: str, description: str
) -> TimeSeries:
    """*counter*'s rate over the whole cluster, by its labels (a per-cluster record)."""
    query = ui.Query(agg("sum", counter.by, sel(counter.cluster_record)), legend)
    note = _CLUSTER_NOTE.format(record=counter.cluster_record)
    return ui.timeseries(f"{title} (cluster)", unit, query, description=description + note)


def _top(title: str, counter: slingshot.NicCounter, unit: str) -> TimeSeries:
    """The busiest NICs of each selected cluster by *counter* (its top-NIC record)."""
    series = sel(counter.top_record)
    if counter.nic_by:
        query = ui.Query(series, f"{_NIC_LEGEND} {{{{{counter.nic_by}}}}}")
        note = _top_note(counter.top_record, per=f" and {counter.nic_by}")
    else:
        query = ui.Query(series, _NIC_LEGEND)
        note = _top_note(counter.top_record, most=f"highest rate (every {counter.by} summed)")
    description = note.strip()
    return ui.timeseries(f"{title}: top {TOP_NICS} NICs", unit, query, description=description)


def _counter_row(
    board: ui.Board,
    title: str,
    counter: slingshot.NicCounter,
    legend: str,
    description: str,
    unit: str = "cps",
) -> None:
    """One counter family: the cluster by its labels, and the busiest NICs."""
    board.row(_cluster(title, counter, legend, unit, description), _top(title, counter, unit))


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
    board.row(
        ui.timeseries(
            "Link restarts (flaps)",
            "short",
            ui.Query(sel(slingshot.FLAPS_TOP), "{{instance}} {{device}} {{window}}"),
            description="Restarts in the last 1 h and 10 h windows (link_restarts/time_*). "
            "SlingshotLinkFlapping fires at the orange line (1 h) or the red line (10 h)."
            + _top_note(slingshot.FLAPS_TOP, "links", " and window", "most restarts"),
            lines=flaps,
        ),
        ui.timeseries(
            f"Retransmission (SPT) timeouts: top {TOP_NICS} NICs",
            "cps",
            ui.Query(sel(slingshot.TIMEOUTS_TOP), _NIC_LEGEND),
            description="Source packet timeouts: packets the NIC had to retransmit. "
            "SlingshotRetransmissionTimeoutsHigh fires above the line."
            + _top_note(slingshot.TIMEOUTS_TOP, most="most timeouts"),
            lines=((t[slingshot.SPT_TIMEOUTS], "red"),),
        ),
    )
    board.row(
        ui.timeseries(
            "FEC codewords (cluster)",
            "cps",
            ui.Query(agg("sum", "type", CLUSTER_FEC_ERRORS), "{{type}}"),
            description="Corrected and uncorrected FEC codewords received."
            + _CLUSTER_NOTE.format(record=slingshot.CLUSTER_FEC_RATE),
        ),
        ui.timeseries(
            f"Corrected bit error rate: top {TOP_NICS} links",
            "sci",
            ui.Query(sel(slingshot.BER_TOP), _NIC_LEGEND),
            description="Corrected (pre-FEC) codewords over the link's bit rate, as cxi_stat "
            "computes the BER. SlingshotHighBER fires above the line."
            + _top_note(slingshot.BER_TOP, "links", most="highest BER"),
            lines=((t[slingshot.CORRECTED_BER], "red"),),
        ),
        ui.timeseries(
            "Transport timeouts (cluster)",
            "cps",
            ui.Query(agg("sum", "type", sel(slingshot.CLUSTER_TIMEOUTS)), "{{type}}"),
            description="SPT (source packet: a retransmission), SCT (source connection) "
            "and TCT (target connection) timeouts."
            + _CLUSTER_NOTE.format(record=slingshot.CLUSTER_TIMEOUTS),
        ),
    )
    _counter_row(
        board,
        "LLR replays",
        slingshot.LLR_REPLAYS,
        "{{direction}}",
        "Link-level retry replays: tx = started by this NIC, rx = by the peer.",
    )
    _counter_row(
        board,
        "Pause frames",
        slingshot.PAUSE_FRAMES,
        "{{direction}} class {{class}}",
        "Pause frames per traffic class: rx = received, tx = XOFF sent (congestion).",
    )
    _counter_row(
        board, "Discards", slingshot.DISCARDS, "class {{class}}", "Packets discarded per class."
    )
    _counter_row(
        board,
        "Bad frames received",
        slingshot.RX_BAD_FRAMES,
        "{{type}}",
        "Bad frames at the MAC: bad IEEE or optimized frames, fragments, jabber.",
    )
    _counter_row(
        board,
        "NACKs",
        slingshot.NACKS,
        "{{reason}}",
        "NACKs by reason: target resource exhaustion, bad sequence.",
    )
    _counter_row(
        board,
        "Throughput",
        slingshot.BYTES,
        "{{direction}}",
        "Bytes in good frames, sent (tx) and received (rx).",
        unit="Bps",
    )
    _counter_row(
        board,
        "NIC PCIe errors",
        slingshot.PCIE_ERRORS,
        "{{type}}",
        "PCIe errors: correctable, uncorrectable, poisoned TLPs, unsuccessful completions.",
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
