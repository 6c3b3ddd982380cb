"""The typed snapshot the sysfs source produces for the ``slingshot`` collector.

A value the NIC does not expose (missing file) is ``None`` or missing from its dict:
the metric is then absent for that NIC, never 0. Counters are raw 56-bit hardware
counters; :func:`counter_delta` and :func:`counter_rate` show how to difference them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

#: Cassini telemetry counters are 56 bits wide and wrap to 0 after 2**56 - 1.
COUNTER_MODULUS = 1 << 56


@dataclass(frozen=True, slots=True)
class NicIdentity:
    """Who the NIC is: ``gotthard_slingshot_info`` and the ``device`` label."""

    #: ``cxi0``: the name under ``class/cxi``.
    device: str
    #: ``hsn0``: the network interface mapped through ``class/net/hsnN/device/cxi/cxiN``;
    #: empty when there is none.
    interface: str = ""
    #: 1 (Cassini-1, SS11 200G), 2 (Cassini-2, 400G), 0 when neither is recognisable.
    generation: int = 0
    #: ``properties/cassini_version`` as written (``1.1``, ``2.0``); empty when missing.
    cassini_version: str = ""
    #: ``properties/nid`` (hex in sysfs); None when missing or unreadable.
    nid: int | None = None
    #: ``uc/qspi_blob_version``; empty when missing.
    firmware: str = ""


@dataclass(frozen=True, slots=True)
class LinkState:
    """The port's link: Cassini-1 ``port/{link,speed}``, Cassini-2 ``port/0/link/{state,speed}``."""

    #: Port link state string (``up``, ``down``, ``resetting``, ...); None when unknown.
    state: str | None = None
    #: ``properties/link`` (PHY running); None when unknown.
    phy_up: bool | None = None
    #: Port speed mode string (``BS_200G``, ``CK_400G``); None when unknown.
    mode: str | None = None
    #: Negotiated speed in bits/s (``properties/speed`` in Mb/s, else from the mode).
    speed_bits_per_second: int | None = None

    @property
    def up(self) -> bool | None:
        """Link up: the port state when known, else the PHY flag, else None."""
        if self.state is not None:
            return self.state.lower() == "up"
        return self.phy_up


@dataclass(slots=True)
class NicReading:
    """One poll of one NIC."""

    identity: NicIdentity
    link: LinkState = field(default_factory=LinkState)
    #: Epoch seconds of the used ``link_restarts/time_N`` slots (``0`` = unused slot is
    #: left out); None when the NIC has no readable ``link_restarts`` (VFs).
    restarts: tuple[int, ...] | None = None
    #: telemetry item name -> (raw value, CLOCK_REALTIME seconds of the read; NaN when
    #: the file had no ``@timestamp``).
    counters: dict[str, tuple[int, float]] = field(default_factory=dict)
    #: ``properties`` counter file name (``pcie_corr_err``, ``pcie_uncorr_err``) -> value.
    property_counters: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SlingshotSnapshot:
    nics: tuple[NicReading, ...] = ()
    #: Wall-clock time of the poll (the injectable clock): "now" for the restart windows.
    now: float = 0.0
    #: Recoverable problems: unreadable or garbage files.
    errors: int = 0


def counter_delta(first: int, second: int) -> int:
    """Increase of a 56-bit counter from *first* to *second*, across one wrap."""
    if second >= first:
        return second - first
    return COUNTER_MODULUS + second - first


def counter_rate(first: tuple[int, float], second: tuple[int, float]) -> float:
    """Per-second rate between two ``(value, timestamp)`` readings of a 56-bit counter.

    Uses the timestamps the driver wrote next to the values, not the scrape times.
    NaN when a timestamp is missing or the two do not advance.
    """
    elapsed = second[1] - first[1]
    if not elapsed > 0 or math.isnan(elapsed):
        return math.nan
    return counter_delta(first[0], second[0]) / elapsed
