"""Slingshot: HPE Cassini NIC links, flaps, FEC codewords and retransmissions."""

from __future__ import annotations

from dataclasses import dataclass
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
#: Per NIC, the SPT timeouts only (what SlingshotRetransmissionTimeoutsHigh reads); the
#: other types per cluster (:data:`CLUSTER_TIMEOUTS`).
TIMEOUTS = "site_cluster_instance_device_type:gotthard_slingshot_timeouts:rate5m"
ALERTED_TIMEOUTS = "spt"
#: The same rates per cluster and type: what the global view federates (not per NIC).
CLUSTER_FEC_RATE = "site_cluster_type:gotthard_slingshot_fec_codewords:rate5m"
CLUSTER_TIMEOUTS = "site_cluster_type:gotthard_slingshot_timeouts:rate5m"
CLUSTER_CODEWORD_RATIO = "site_cluster_type:gotthard_slingshot_fec_codewords:ratio_rate5m"
#: How many NICs (links) the top-NIC records keep per cluster: what the dashboard's
#: busiest-NIC panels show.
TOP_NICS = 10
#: The :data:`TOP_NICS` links of each cluster with the highest corrected BER, NICs with
#: the most SPT timeouts, and links with the most restarts (per window): what the
#: dashboard's busiest-NIC panels read (``slow``, like :attr:`NicCounter.top_record`).
BER_TOP = f"site_cluster_instance_device_type:gotthard_slingshot_fec_ber:top{TOP_NICS}_ratio_rate5m"
TIMEOUTS_TOP = f"site_cluster_instance_device_type:gotthard_slingshot_timeouts:top{TOP_NICS}_rate5m"
FLAPS_TOP = (
    f"site_cluster_instance_device_window:gotthard_slingshot_link_restarts_recent:top{TOP_NICS}"
)
_ERRORS = f'{FEC_RATE}{{type=~"corrected|uncorrected"}}'
_PER_TYPE = "\n/ ignoring (type) group_left ()\n"
#: The labels of one NIC.
NIC = "site, cluster, instance, device"


def _top(record: str, source: str, by: str = "") -> RecordingRule:
    """The :data:`TOP_NICS` NICs of each cluster (and of each *by* value) with the highest
    *source* (a per-NIC record evaluated before it, or a gauge) above 0: what a
    busiest-NIC panel reads, at most :data:`TOP_NICS` series per cluster (and *by* value)
    at each step of a day instead of every NIC's (ranking every NIC of an Alps-size
    cluster at each step took seconds, docs/scale.md). ``slow``: only panels read it."""
    group = f"site, cluster, {by}" if by else "site, cluster"
    # only NICs with a count: a healthy cluster's zeros would fill the ten places with
    # NICs that change at every evaluation (and each one a series over a day's range)
    return RecordingRule(
        COMPONENT, record, f"topk by ({group}) ({TOP_NICS}, {source} > 0)", cadence="slow"
    )


@dataclass(frozen=True)
class NicCounter:
    """A NIC counter family the dashboard shows for the whole cluster (by its labels
    *by*) and for its busiest NICs (summed per NIC, or per NIC and *nic_by*).

    Its records are ``slow``: they read every NIC's counters, and only panels read them.
    """

    #: the counter, ``gotthard_slingshot_pause_frames_total``
    metric: str
    #: its labels the cluster record keeps, ``direction, class``
    by: str
    #: its labels the per-NIC record keeps besides the NIC's; when they are *by*, the
    #: cluster record sums the per-NIC one instead of the counter
    nic_by: str = ""

    @property
    def _name(self) -> str:
        return self.metric.removesuffix("_total")

    @staticmethod
    def _level(labels: str) -> str:
        return "_".join(label.strip() for label in labels.split(","))

    @property
    def cluster_record(self) -> str:
        """``site_cluster_direction_class:gotthard_slingshot_pause_frames:rate5m``."""
        return f"site_cluster_{self._level(self.by)}:{self._name}:rate5m"

    @property
    def nic_record(self) -> str:
        """``site_cluster_instance_device:gotthard_slingshot_pause_frames:rate5m``."""
        level = self._level(f"{NIC}, {self.nic_by}" if self.nic_by else NIC)
        return f"{level}:{self._name}:rate5m"

    @property
    def top_record(self) -> str:
        """``site_cluster_instance_device:gotthard_slingshot_pause_frames:top10_rate5m``:
        the :data:`TOP_NICS` NICs of each cluster (and *nic_by* value) with the highest
        :attr:`nic_record`."""
        level = self.nic_record.split(":")[0]
        return f"{level}:{self._name}:top{TOP_NICS}_rate5m"

    def rules(self) -> tuple[RecordingRule, RecordingRule, RecordingRule]:
        nic_labels = f"{NIC}, {self.nic_by}" if self.nic_by else NIC
        rate = f"rate({self.metric}[5m])"
        cluster_source = self.nic_record if self.nic_by == self.by else rate
        return (
            RecordingRule(
                COMPONENT, self.nic_record, f"sum by ({nic_labels}) ({rate})", cadence="slow"
            ),
            RecordingRule(
                COMPONENT,
                self.cluster_record,
                f"sum by (site, cluster, {self.by}) ({cluster_source})",
                cadence="slow",
            ),
            _top(self.top_record, self.nic_record, self.nic_by),
        )


LLR_REPLAYS = NicCounter("gotthard_slingshot_llr_replays_total", "direction")
PAUSE_FRAMES = NicCounter("gotthard_slingshot_pause_frames_total", "direction, class")
DISCARDS = NicCounter("gotthard_slingshot_discards_total", "class")
RX_BAD_FRAMES = NicCounter("gotthard_slingshot_rx_bad_frames_total", "type")
NACKS = NicCounter("gotthard_slingshot_nacks_total", "reason")
#: per NIC and direction: the Job dashboard reads the traffic of the job's nodes from it
BYTES = NicCounter("gotthard_slingshot_bytes_total", "direction", nic_by="direction")
PCIE_ERRORS = NicCounter("gotthard_slingshot_pcie_errors_total", "type")
#: The counters of the dashboard's cluster and busiest-NIC panels, in its order.
NIC_COUNTERS = (LLR_REPLAYS, PAUSE_FRAMES, DISCARDS, RX_BAD_FRAMES, NACKS, BYTES, PCIE_ERRORS)


def _rate_by_type(record: str, counter: str, *matchers: str) -> RecordingRule:
    """The 5-minute rate of a per-device, per-type NIC counter."""
    selector = f"{counter}{{{', '.join(matchers)}}}" if matchers else counter
    return RecordingRule(COMPONENT, record, f"sum by ({NIC}, type) (rate({selector}[5m]))")


#: What the alerts read, at every evaluation: per NIC, the FEC codeword rates (all types:
#: the codeword ratios need the good ones), the BER and the SPT timeouts.
_ALERTED = (
    _rate_by_type(FEC_RATE, "gotthard_slingshot_fec_codewords_total"),
    RecordingRule(
        COMPONENT,
        BER,
        f"{_ERRORS}{_PER_TYPE}(max by ({NIC}) (gotthard_slingshot_link_speed_bits_per_second) > 0)",
    ),
    _rate_by_type(TIMEOUTS, "gotthard_slingshot_timeouts_total", f'type="{ALERTED_TIMEOUTS}"'),
)
#: What only dashboards and the global view read, in the slow group: the codeword ratios
#: and the per-cluster rates (from the per-NIC records where they have every type).
_SHOWN = (
    RecordingRule(
        COMPONENT,
        CODEWORD_RATIO,
        f"{_ERRORS}{_PER_TYPE}(sum by ({NIC}) ({FEC_RATE}) > 0)",
        cadence="slow",
    ),
    RecordingRule(
        COMPONENT, CLUSTER_FEC_RATE, f"sum by (site, cluster, type) ({FEC_RATE})", cadence="slow"
    ),
    RecordingRule(
        COMPONENT,
        CLUSTER_CODEWORD_RATIO,
        f'{CLUSTER_FEC_RATE}{{type=~"corrected|uncorrected"}}{_PER_TYPE}'
        f"(sum by (site, cluster) ({CLUSTER_FEC_RATE}) > 0)",
        cadence="slow",
    ),
    RecordingRule(
        COMPONENT,
        CLUSTER_TIMEOUTS,
        "sum by (site, cluster, type) (rate(gotthard_slingshot_timeouts_total[5m]))",
        cadence="slow",
    ),
    *(rule for counter in NIC_COUNTERS for rule in counter.rules()),
    _top(BER_TOP, f'{BER}{{type="corrected"}}'),
    _top(TIMEOUTS_TOP, f'{TIMEOUTS}{{type="{ALERTED_TIMEOUTS}"}}'),
    # one series per link and window (not per scrape job): the labels the name says
    _top(
        FLAPS_TOP,
        f"max by ({NIC}, window) (gotthard_slingshot_link_restarts_recent)",
        "window",
    ),
)
RECORDING_RULES = (*_ALERTED, *_SHOWN)

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
            f'{TIMEOUTS}{{type="{ALERTED_TIMEOUTS}"}}',
            t[SPT_TIMEOUTS],
            "15m",
            "warning",
            "Slingshot retransmission timeouts are rising.",
            LINK + " has {{ $value | humanize }} packet retransmission (SPT) timeouts per second.",
            f"SPT timeouts > {spt}/s (5-minute rate)",
        ),
    )
