"""Slingshot: HPE Cassini NIC links, flaps, FEC codewords and retransmissions."""

from __future__ import annotations

from functools import partial

from gotthard.exporters.slingshot.limits import MAX_RESTARTS_1H, MAX_RESTARTS_10H
from gotthard.monitoring.components.slurm import respecting_maintenance
from gotthard.monitoring.rule_model import LINK, AlertRule, LastReading, RecordingRule, above
from gotthard.monitoring.thresholds import (
    ThresholdValues,
    count,
    duration,
    num,
    per_second,
    ratio,
    seconds,
)

COMPONENT = "slingshot"
DASHBOARD = "slingshot-network-health"

FLAPS_1H = count("slingshot_flaps_1h", MAX_RESTARTS_1H, "link restarts in 1 h that make a flap")
FLAPS_10H = count("slingshot_flaps_10h", MAX_RESTARTS_10H, "link restarts in 10 h that make a flap")
CORRECTED_BER = ratio("slingshot_corrected_ber", 1e-6, "corrected-codeword BER (cxi_stat)")
LINK_LOOKBACK = seconds(
    "slingshot_link_lookback_seconds",
    6 * 3600,
    "how long a down link that stopped reporting stays down",
)
SPT_TIMEOUTS = per_second("slingshot_spt_timeouts_per_second", 1.0, "SPT timeouts/s on one NIC")

FEC_RATE = "site_cluster_instance_device_type:gotthard_slingshot_fec_codewords:rate5m"
CODEWORD_RATIO = "site_cluster_instance_device_type:gotthard_slingshot_fec_codewords:ratio_rate5m"
BER = "site_cluster_instance_device_type:gotthard_slingshot_fec_ber:ratio_rate5m"
TIMEOUTS = "site_cluster_instance_device_type:gotthard_slingshot_timeouts:rate5m"
#: The same rates per cluster and type: what the global view federates (not per NIC).
CLUSTER_FEC_RATE = "site_cluster_type:gotthard_slingshot_fec_codewords:rate5m"
CLUSTER_TIMEOUTS = "site_cluster_type:gotthard_slingshot_timeouts:rate5m"
_ERRORS = f'{FEC_RATE}{{type=~"corrected|uncorrected"}}'
_PER_TYPE = "\n/ ignoring (type) group_left ()\n"


def _sum_rate(record: str, counter: str) -> RecordingRule:
    """The 5-minute rate of a per-device, per-type NIC counter."""
    return RecordingRule(
        COMPONENT,
        record,
        f"sum by (site, cluster, instance, device, type) (rate({counter}[5m]))",
    )


RECORDING_RULES = (
    _sum_rate(FEC_RATE, "gotthard_slingshot_fec_codewords_total"),
    RecordingRule(
        COMPONENT,
        CODEWORD_RATIO,
        f"{_ERRORS}{_PER_TYPE}(sum by (site, cluster, instance, device) ({FEC_RATE}) > 0)",
    ),
    RecordingRule(
        COMPONENT,
        "site_cluster_type:gotthard_slingshot_fec_codewords:ratio_rate5m",
        f"sum by (site, cluster, type) ({_ERRORS}){_PER_TYPE}"
        f"(sum by (site, cluster) ({FEC_RATE}) > 0)",
    ),
    RecordingRule(
        COMPONENT,
        BER,
        f"{_ERRORS}{_PER_TYPE}"
        "(max by (site, cluster, instance, device)"
        " (gotthard_slingshot_link_speed_bits_per_second) > 0)",
    ),
    _sum_rate(TIMEOUTS, "gotthard_slingshot_timeouts_total"),
    RecordingRule(COMPONENT, CLUSTER_FEC_RATE, f"sum by (site, cluster, type) ({FEC_RATE})"),
    RecordingRule(COMPONENT, CLUSTER_TIMEOUTS, f"sum by (site, cluster, type) ({TIMEOUTS})"),
)

#: SlingshotLinkDown's last reading of a link whose series stopped (:class:`LastReading`):
#: down until it reads up again.
LINK_DOWN = LastReading(
    COMPONENT,
    "site_cluster_instance_device",
    "gotthard_slingshot_link_up",
    ("down", "== 0"),
    ("up", "!= 0"),
    LINK_LOOKBACK,
)
LAST_READINGS = (LINK_DOWN,)

_alert = partial(AlertRule, component=COMPONENT, dashboard=DASHBOARD)
_above = partial(above, _alert)


def alerts(t: ThresholdValues) -> tuple[AlertRule, ...]:
    """Every NIC alert, quiet for the NICs of Slurm nodes in maintenance."""
    return tuple(respecting_maintenance(rule) for rule in _alerts(t))


def _alerts(t: ThresholdValues) -> tuple[AlertRule, ...]:
    flaps_1h, flaps_10h = num(t[FLAPS_1H]), num(t[FLAPS_10H])
    ber, spt = num(t[CORRECTED_BER]), num(t[SPT_TIMEOUTS])
    lookback = duration(t[LINK_LOOKBACK])
    return (
        _alert(
            name="SlingshotLinkDown",
            # the last reading within the lookback (LINK_DOWN's records once the series
            # stop): a down link whose series go stale (the exporter restarts, the node
            # reboots) stays down until it reads up again
            expr=LINK_DOWN.expr(t),
            for_="5m",
            severity="warning",
            summary="A Slingshot NIC link is down.",
            description="The link of " + LINK + " has been down for 5 minutes.",
            expr_summary=f"last `gotthard_slingshot_link_up` reading (within {lookback}) is 0",
            repair_query=(
                'gotthard_slingshot_link_up{instance="$labels.instance",'
                ' device="$labels.device"} == 1'
            ),
        ),
        _alert(
            name="SlingshotLinkFlapping",
            expr=(
                f'gotthard_slingshot_link_restarts_recent{{window="1h"}} >= {flaps_1h}'
                f'\nor\ngotthard_slingshot_link_restarts_recent{{window="10h"}} >= {flaps_10h}'
            ),
            for_="0s",
            severity="warning",
            summary="A Slingshot link is flapping.",
            description=(
                "The link of " + LINK + " restarted {{ $value | humanize }} times "
                "in the last {{ $labels.window }}."
            ),
            expr_summary=(
                f">= {flaps_1h} link restarts in 1 h or >= {flaps_10h} in 10 h (cxi_healthcheck)"
            ),
        ),
        _above(
            "SlingshotUncorrectedFECErrors",
            f'{FEC_RATE}{{type="uncorrected"}}',
            0,
            "10m",
            "warning",
            "A Slingshot link has uncorrectable FEC codewords.",
            LINK + " has received "
            "{{ $value | humanize }} uncorrectable FEC codewords per second for 10 minutes.",
            "uncorrected FEC codewords on every evaluation for 10 minutes",
        ),
        _above(
            "SlingshotHighBER",
            f'{BER}{{type="corrected"}}',
            t[CORRECTED_BER],
            "30m",
            "warning",
            "A Slingshot link has a high corrected bit error rate.",
            LINK + " has a corrected BER of {{ $value | humanize }} (threshold "
            f"{ber}); the cable or optic is degrading.",
            f"corrected-codeword BER (cxi_stat style) > {ber}",
        ),
        _above(
            "SlingshotRetransmissionTimeoutsHigh",
            f'{TIMEOUTS}{{type="spt"}}',
            t[SPT_TIMEOUTS],
            "15m",
            "warning",
            "Slingshot retransmission timeouts are rising.",
            LINK + " has {{ $value | humanize }} packet retransmission (SPT) timeouts per second.",
            f"SPT timeouts > {spt}/s (5-minute rate)",
        ),
    )
