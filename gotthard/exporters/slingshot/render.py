"""Pure function from a :class:`SlingshotSnapshot` to metric families, and the allow-list.

Every series carries ``device`` (``cxi0``). Counters are the raw 56-bit hardware
counters (they wrap at 2**56; Prometheus' ``rate()`` treats the wrap as a reset) and
are exported as exact integers. Help texts give the unit and the sysfs source. A file
that is missing or unreadable gives no series, never 0.

:data:`TELEMETRY` is the curated allow-list as data: one row per telemetry file,
``(file, metric, label values, generations)``, with the names of the real Cassini-1
and Cassini-2 lists (``c1telem_attrs`` / ``c2telem_attrs`` of shs-cassini-headers).
Any other telemetry file can be exported as ``gotthard_slingshot_counter{counter}`` with
``--slingshot.extra-counters REGEX``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gotthard.exporters.families import MetricFamily, counter, gauge
from gotthard.exporters.slingshot.limits import MAX_RESTARTS_1H, MAX_RESTARTS_10H
from gotthard.exporters.slingshot.snapshot import NicReading, SlingshotSnapshot

C1 = frozenset({1})
C2 = frozenset({2})
BOTH = frozenset({1, 2})
#: Cassini clock: ``hni_{rx,tx}_paused_*`` count 1 GHz cycles (CAS_HZ in cxi_stat).
CYCLES_PER_SECOND = 1_000_000_000
WRAP = "Raw 56-bit counter, wraps at 2^56."


@dataclass(frozen=True, slots=True)
class Spec:
    """One exported family fed by telemetry rows."""

    help: str
    labels: tuple[str, ...]
    #: Divide the raw value by this (cycles -> seconds); None exports the exact integer.
    divisor: int | None = None


#: metric name -> spec, in exposition order.
FAMILIES: dict[str, Spec] = {
    "gotthard_slingshot_fec_codewords_total": Spec(
        "FEC codewords received by the PCS, by outcome (good, corrected, uncorrected); "
        f"count. {WRAP} Source: telemetry/hni_pcs_{{good,corrected,uncorrected}}_cw.",
        ("type",),
    ),
    "gotthard_slingshot_fec_lane_errors_total": Spec(
        "Symbol errors corrected per FEC lane; count. "
        f"{WRAP} Source: telemetry/hni_pcs_fecl_errors_N (0-7; 8-15 on Cassini-2).",
        ("lane",),
    ),
    "gotthard_slingshot_llr_replays_total": Spec(
        "Link-level retry replay events: tx = replays this NIC started, rx = replays "
        f"seen from the peer; count. {WRAP} "
        "Source: telemetry/hni_llr_{tx,rx}_replay_event.",
        ("direction",),
    ),
    "gotthard_slingshot_pause_frames_total": Spec(
        "Pause frames per priority class: rx = received, tx = XOFF sent; frames. "
        f"{WRAP} Source: telemetry/hni_pause_recv_N, hni_pause_xoff_sent_N.",
        ("direction", "class"),
    ),
    "gotthard_slingshot_paused_seconds_total": Spec(
        "Time the port was paused per priority class (std = standard pause), seconds "
        "(1 GHz cycle counter / 1e9, wraps at 2^56 cycles). "
        "Source: telemetry/hni_rx_paused_N, hni_rx_paused_std, hni_tx_paused_N.",
        ("direction", "class"),
        CYCLES_PER_SECOND,
    ),
    "gotthard_slingshot_discards_total": Spec(
        f"Packets discarded per traffic class; packets. {WRAP} "
        "Source: telemetry/hni_discard_cntr_N.",
        ("class",),
    ),
    "gotthard_slingshot_pfc_fifo_overflows_total": Spec(
        f"PFC FIFO overflows per traffic class; count. {WRAP} "
        "Source: telemetry/hni_pfc_fifo_oflw_cntr_N.",
        ("class",),
    ),
    "gotthard_slingshot_rx_bad_frames_total": Spec(
        f"Bad frames received at the MAC, by type; frames. {WRAP} "
        "Source: telemetry/hni_rx_bad_ieee, hni_rx_bad_opt, hni_rx_fragment, hni_rx_jabber.",
        ("type",),
    ),
    "gotthard_slingshot_tx_poisoned_frames_total": Spec(
        f"Poisoned frames sent, by format; frames. {WRAP} "
        "Source: telemetry/hni_tx_poisoned_ieee, hni_tx_poisoned_opt.",
        ("type",),
    ),
    "gotthard_slingshot_timeouts_total": Spec(
        "Transport timeouts (spt = source packet, causes a retransmission; sct = source "
        f"connection; tct = target connection); count. {WRAP} "
        "Source: telemetry/pct_{spt,sct,tct}_timeouts.",
        ("type",),
    ),
    "gotthard_slingshot_srb_retries_total": Spec(
        f"Hardware retries from the source retry buffer; requests. {WRAP} "
        "Source: telemetry/pct_retry_srb_requests.",
        (),
    ),
    "gotthard_slingshot_nacks_total": Spec(
        f"NACKs by reason (target resource exhaustion, bad sequence); count. {WRAP} "
        "Source: telemetry/pct_no_tct_nacks, pct_no_trs_nacks, pct_no_mst_nacks, "
        "pct_bad_seq_nacks, pct_resource_busy, pct_no_matching_tct.",
        ("reason",),
    ),
    "gotthard_slingshot_transport_drops_total": Spec(
        f"Transport responses/requests dropped, by reason; packets. {WRAP} "
        "Source: telemetry/pct_trs_rsp_nack_drops, pct_req_tct_tmout_drops.",
        ("reason",),
    ),
    "gotthard_slingshot_rx_drops_total": Spec(
        f"Received packets dropped by the IXE, by reason; packets. {WRAP} "
        "Source: telemetry/ixe_rx_pkt_drop_{pct,rmu_norsp,rmu_wrsp,ixe_parser}.",
        ("reason",),
    ),
    "gotthard_slingshot_bytes_total": Spec(
        f"Octets sent (tx) and received (rx) in good frames; bytes. {WRAP} "
        "Source: telemetry/hni_sts_{tx,rx}_ok_octets.",
        ("direction",),
    ),
    "gotthard_slingshot_packets_total": Spec(
        f"Packets sent (tx) and received (rx) per traffic class; packets. {WRAP} "
        "Source: telemetry/hni_pkts_sent_by_tc_N, hni_pkts_recv_by_tc_N.",
        ("direction", "class"),
    ),
    "gotthard_slingshot_pcie_errors_total": Spec(
        "PCIe errors by type: correctable/uncorrectable (driver counters, refreshed at "
        "most once a minute, from properties/pcie_corr_err, pcie_uncorr_err) and poisoned "
        "TLPs / unsuccessful completions seen by the ATU and IXE DMA writes (telemetry/"
        f"atu_pcie_*, ixe_dmawr_pcie_*); count. {WRAP}",
        ("type",),
    ),
    "gotthard_slingshot_memory_errors_total": Spec(
        "Internal SRAM ECC errors per block (corrected, uncorrected: a hardware fault); "
        f"count. {WRAP} Source: telemetry/<block>_mem_{{cor,ucor}}_err_cntr, "
        "hni_{cor,ucor}_ecc_err_cntr.",
        ("block", "type"),
    ),
}


def _indexed(
    pattern: str, metric: str, prefix: tuple[str, ...], indexes: Iterable[int], gens: frozenset[int]
) -> list[tuple[str, str, tuple[str, ...], frozenset[int]]]:
    return [(pattern.format(i), metric, (*prefix, str(i)), gens) for i in indexes]


#: The allow-list: (telemetry file, metric, label values after ``device``, generations).
TELEMETRY: tuple[tuple[str, str, tuple[str, ...], frozenset[int]], ...] = (
    ("hni_pcs_good_cw", "gotthard_slingshot_fec_codewords_total", ("good",), BOTH),
    ("hni_pcs_corrected_cw", "gotthard_slingshot_fec_codewords_total", ("corrected",), BOTH),
    ("hni_pcs_uncorrected_cw", "gotthard_slingshot_fec_codewords_total", ("uncorrected",), BOTH),
    *_indexed(
        "hni_pcs_fecl_errors_{}", "gotthard_slingshot_fec_lane_errors_total", (), range(8), BOTH
    ),
    *_indexed(
        "hni_pcs_fecl_errors_{}", "gotthard_slingshot_fec_lane_errors_total", (), range(8, 16), C2
    ),
    ("hni_llr_tx_replay_event", "gotthard_slingshot_llr_replays_total", ("tx",), BOTH),
    ("hni_llr_rx_replay_event", "gotthard_slingshot_llr_replays_total", ("rx",), BOTH),
    *_indexed(
        "hni_pause_recv_{}", "gotthard_slingshot_pause_frames_total", ("rx",), range(8), BOTH
    ),
    *_indexed(
        "hni_pause_xoff_sent_{}", "gotthard_slingshot_pause_frames_total", ("tx",), range(8), BOTH
    ),
    *_indexed(
        "hni_rx_paused_{}", "gotthard_slingshot_paused_seconds_total", ("rx",), range(8), BOTH
    ),
    ("hni_rx_paused_std", "gotthard_slingshot_paused_seconds_total", ("rx", "std"), BOTH),
    *_indexed(
        "hni_tx_paused_{}", "gotthard_slingshot_paused_seconds_total", ("tx",), range(8), BOTH
    ),
    *_indexed("hni_discard_cntr_{}", "gotthard_slingshot_discards_total", (), range(8), BOTH),
    *_indexed(
        "hni_pfc_fifo_oflw_cntr_{}",
        "gotthard_slingshot_pfc_fifo_overflows_total",
        (),
        range(8),
        BOTH,
    ),
    ("hni_rx_bad_ieee", "gotthard_slingshot_rx_bad_frames_total", ("ieee",), BOTH),
    ("hni_rx_bad_opt", "gotthard_slingshot_rx_bad_frames_total", ("opt",), BOTH),
    ("hni_rx_fragment", "gotthard_slingshot_rx_bad_frames_total", ("fragment",), BOTH),
    ("hni_rx_jabber", "gotthard_slingshot_rx_bad_frames_total", ("jabber",), BOTH),
    ("hni_tx_poisoned_ieee", "gotthard_slingshot_tx_poisoned_frames_total", ("ieee",), BOTH),
    ("hni_tx_poisoned_opt", "gotthard_slingshot_tx_poisoned_frames_total", ("opt",), BOTH),
    ("pct_spt_timeouts", "gotthard_slingshot_timeouts_total", ("spt",), BOTH),
    ("pct_sct_timeouts", "gotthard_slingshot_timeouts_total", ("sct",), BOTH),
    ("pct_tct_timeouts", "gotthard_slingshot_timeouts_total", ("tct",), BOTH),
    ("pct_retry_srb_requests", "gotthard_slingshot_srb_retries_total", (), BOTH),
    ("pct_no_tct_nacks", "gotthard_slingshot_nacks_total", ("no_tct",), BOTH),
    ("pct_no_trs_nacks", "gotthard_slingshot_nacks_total", ("no_trs",), BOTH),
    ("pct_no_mst_nacks", "gotthard_slingshot_nacks_total", ("no_mst",), BOTH),
    ("pct_bad_seq_nacks", "gotthard_slingshot_nacks_total", ("bad_sequence",), BOTH),
    ("pct_resource_busy", "gotthard_slingshot_nacks_total", ("resource_busy",), BOTH),
    ("pct_no_matching_tct", "gotthard_slingshot_nacks_total", ("no_matching_tct",), BOTH),
    ("pct_trs_rsp_nack_drops", "gotthard_slingshot_transport_drops_total", ("trs_rsp_nack",), BOTH),
    (
        "pct_req_tct_tmout_drops",
        "gotthard_slingshot_transport_drops_total",
        ("req_tct_timeout",),
        BOTH,
    ),
    ("ixe_rx_pkt_drop_pct", "gotthard_slingshot_rx_drops_total", ("pct",), BOTH),
    ("ixe_rx_pkt_drop_rmu_norsp", "gotthard_slingshot_rx_drops_total", ("rmu_norsp",), BOTH),
    ("ixe_rx_pkt_drop_rmu_wrsp", "gotthard_slingshot_rx_drops_total", ("rmu_wrsp",), BOTH),
    ("ixe_rx_pkt_drop_ixe_parser", "gotthard_slingshot_rx_drops_total", ("parser",), BOTH),
    ("hni_sts_tx_ok_octets", "gotthard_slingshot_bytes_total", ("tx",), BOTH),
    ("hni_sts_rx_ok_octets", "gotthard_slingshot_bytes_total", ("rx",), BOTH),
    *_indexed(
        "hni_pkts_sent_by_tc_{}", "gotthard_slingshot_packets_total", ("tx",), range(8), BOTH
    ),
    *_indexed(
        "hni_pkts_recv_by_tc_{}", "gotthard_slingshot_packets_total", ("rx",), range(8), BOTH
    ),
    ("atu_pcie_err_poisoned", "gotthard_slingshot_pcie_errors_total", ("atu_poisoned",), BOTH),
    (
        "atu_pcie_unsuccess_cmpl",
        "gotthard_slingshot_pcie_errors_total",
        ("atu_unsuccessful_completion",),
        BOTH,
    ),
    (
        "ixe_dmawr_pcie_err_poisoned",
        "gotthard_slingshot_pcie_errors_total",
        ("dmawr_poisoned",),
        BOTH,
    ),
    (
        "ixe_dmawr_pcie_unsuccess_cmpl",
        "gotthard_slingshot_pcie_errors_total",
        ("dmawr_unsuccessful_completion",),
        BOTH,
    ),
    *(
        (
            f"{block}_mem_{kind}_err_cntr",
            "gotthard_slingshot_memory_errors_total",
            (block, label),
            BOTH,
        )
        for block in ("atu", "cq", "ee", "ixe", "lpe", "mst", "oxe", "pct", "rmu")
        for kind, label in (("cor", "corrected"), ("ucor", "uncorrected"))
    ),
    ("hni_cor_ecc_err_cntr", "gotthard_slingshot_memory_errors_total", ("hni", "corrected"), BOTH),
    (
        "hni_ucor_ecc_err_cntr",
        "gotthard_slingshot_memory_errors_total",
        ("hni", "uncorrected"),
        BOTH,
    ),
)

#: ``properties`` files read as counters: (file, metric, label values).
PROPERTY_COUNTERS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("pcie_corr_err", "gotthard_slingshot_pcie_errors_total", ("correctable",)),
    ("pcie_uncorr_err", "gotthard_slingshot_pcie_errors_total", ("uncorrectable",)),
)

#: telemetry file -> generations that have it: what the sysfs source reads.
TELEMETRY_NAMES: dict[str, frozenset[int]] = {row[0]: row[3] for row in TELEMETRY}

#: Restart windows of the health rule: (label, seconds).
WINDOWS: tuple[tuple[str, float], ...] = (("1h", 3600.0), ("10h", 36000.0))


@dataclass(frozen=True, slots=True)
class HealthRule:
    """HPE ``cxi_healthcheck`` link_flap_check: fewer than these restarts is healthy."""

    max_restarts_1h: int = MAX_RESTARTS_1H
    max_restarts_10h: int = MAX_RESTARTS_10H


def recent_restarts(restarts: tuple[int, ...], now: float, seconds: float) -> int:
    """Restarts newer than ``now - seconds`` (a timestamp ahead of *now* counts too)."""
    since = now - seconds
    return sum(1 for stamp in restarts if stamp > since)


def link_healthy(nic: NicReading, now: float, rule: HealthRule) -> bool | None:
    """Up, and fewer restarts than the rule allows in 1 h and in 10 h; None if unknown."""
    up = nic.link.up
    if up is None:
        return None
    if not up:
        return False
    if nic.restarts is None:
        return True  # no restart history (VF): judged on the link alone
    return (
        recent_restarts(nic.restarts, now, 3600.0) < rule.max_restarts_1h
        and recent_restarts(nic.restarts, now, 36000.0) < rule.max_restarts_10h
    )


_ROWS_BY_METRIC: dict[str, list[tuple[str, tuple[str, ...]]]] = {name: [] for name in FAMILIES}
for _file, _metric, _values, _gens in TELEMETRY:
    _ROWS_BY_METRIC[_metric].append((_file, _values))
_PROPERTY_ROWS: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
for _file, _metric, _values in PROPERTY_COUNTERS:
    _PROPERTY_ROWS.setdefault(_metric, []).append((_file, _values))


def render(snapshot: SlingshotSnapshot, rule: HealthRule | None = None) -> list[MetricFamily]:
    rule = rule or HealthRule()
    now = snapshot.now
    nics = snapshot.nics
    info = gauge(
        "gotthard_slingshot_info",
        "Slingshot NIC identity; always 1. Source: class/net/<interface>/device/cxi/<device>, "
        "properties/nid (decimal here), properties/cassini_version, uc/qspi_blob_version.",
        "device",
        "interface",
        "nid",
        "cassini_version",
        "firmware",
    )
    link_up = gauge(
        "gotthard_slingshot_link_up",
        "1 if the port link is up, else 0. Source: port/link (Cassini-1), port/0/link/state "
        "(Cassini-2), else properties/link.",
        "device",
    )
    link_info = gauge(
        "gotthard_slingshot_link_info",
        "Port link state and speed mode as labels; always 1. Source: port/link, port/speed "
        "(Cassini-1), port/0/link/state, port/0/link/speed (Cassini-2).",
        "device",
        "state",
        "mode",
    )
    healthy = gauge(
        "gotthard_slingshot_link_healthy",
        f"1 if the link is up with fewer than {rule.max_restarts_1h} restarts in the last hour "
        f"and fewer than {rule.max_restarts_10h} in the last 10 hours (cxi_healthcheck "
        "link_flap_check), else 0. Source: port link state, link_restarts/time_0..9.",
        "device",
    )
    speed = gauge(
        "gotthard_slingshot_link_speed_bits_per_second",
        "Negotiated link speed, bits per second. Source: properties/speed (Mb/s), else the "
        "port speed mode.",
        "device",
    )
    recent = gauge(
        "gotthard_slingshot_link_restarts_recent",
        "Link auto-restarts within the window before the poll; count. "
        "Source: link_restarts/time_0..9 (epoch seconds, 0 = unused slot).",
        "device",
        "window",
    )
    last = gauge(
        "gotthard_slingshot_link_restart_last_timestamp_seconds",
        "Unix time of the most recent link auto-restart, seconds; absent when none is "
        "recorded. Source: link_restarts/time_0..9.",
        "device",
    )
    for nic in nics:
        ident = nic.identity
        device = (ident.device,)
        info.add(
            (
                ident.device,
                ident.interface,
                "" if ident.nid is None else str(ident.nid),
                ident.cassini_version,
                ident.firmware,
            ),
            1,
        )
        up = nic.link.up
        if up is not None:
            link_up.add(device, 1 if up else 0)
        if nic.link.state is not None or nic.link.mode is not None:
            link_info.add((ident.device, nic.link.state or "", nic.link.mode or ""), 1)
        health = link_healthy(nic, now, rule)
        if health is not None:
            healthy.add(device, 1 if health else 0)
        if nic.link.speed_bits_per_second is not None:
            speed.add(device, nic.link.speed_bits_per_second)
        if nic.restarts is not None:
            for label, seconds in WINDOWS:
                recent.add((ident.device, label), recent_restarts(nic.restarts, now, seconds))
            if nic.restarts:
                last.add(device, max(nic.restarts))
    families = [info, link_up, link_info, healthy, speed, recent, last]

    for metric, spec in FAMILIES.items():
        family = counter(metric, spec.help, "device", *spec.labels)
        rows = _ROWS_BY_METRIC[metric]
        property_rows = _PROPERTY_ROWS.get(metric, ())
        divisor = spec.divisor
        for nic in nics:
            device_name = nic.identity.device
            counters = nic.counters
            if divisor is None:
                family.samples += [
                    ((device_name, *values), reading[0])
                    for file, values in rows
                    if (reading := counters.get(file)) is not None
                ]
            else:
                family.samples += [
                    ((device_name, *values), reading[0] / divisor)
                    for file, values in rows
                    if (reading := counters.get(file)) is not None
                ]
            for file, values in property_rows:
                number = nic.property_counters.get(file)
                if number is not None:
                    family.add((device_name, *values), number)
        families.append(family)

    extra = gauge(
        "gotthard_slingshot_counter",
        "Telemetry items selected with --slingshot.extra-counters, raw value as read "
        "(counters wrap at 2^56; use rate()). Source: telemetry/<counter>.",
        "device",
        "counter",
    )
    for nic in nics:
        for name, (value, _stamp) in nic.counters.items():
            if name not in TELEMETRY_NAMES:
                extra.add((nic.identity.device, name), value)
    families.append(extra)
    return families
