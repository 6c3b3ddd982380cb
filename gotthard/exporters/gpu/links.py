"""NVLink counters of one GPU summed over its links, kept monotonic.

NVML counts NVLink errors and data per link (field values scoped by link). The ``gpu``
collector exports them per GPU, summed over the GPU's links
(``gotthard_gpu_nvlink_errors_total{type}``, ``gotthard_gpu_nvlink_bytes_total{direction}``),
and per link only on request (``--gpu.nvlink-per-link``: the ``gotthard_gpu_nvlink_link_*``
families). A metric's labels never depend on a flag: the per-link series have names of
their own, and the per-GPU series are the same sums with the flag on or off.

A plain sum of the links' counters is a counter only while every link keeps counting up;
Prometheus takes any decrease for a reset of the whole sum and counts the sum's new value
as new errors (a burst of thousands of errors that never happened). :class:`LinkTotals`
adds to each sum what each link counted since the previous poll instead:

* a link that does not answer on a poll (its field value fails: link down, training,
  a transient error) keeps what it counted before in the sum; what it counts while it
  does not answer is added when it answers again;
* a link whose counter went down (its counters were reset, ``nvmlDeviceResetNvLinkErrorCounters``
  / ``nvidia-smi nvlink -e -r``, or the driver was reloaded) counts on from its new value;
* a link read for the first time adds its whole value (as the sum does at the first poll).

So a sum never decreases while the exporter runs, whatever single links do; it starts
again from the links' current values when the exporter restarts, which Prometheus sees as
the counter reset it is. The totals of a GPU are kept by its UUID across re-discoveries.
"""

from __future__ import annotations

#: NVML field ids: the number of NVLinks (scope 0), and each link's data counters in KiB.
FIELD_NVLINK_LINK_COUNT = 91
FIELD_NVLINK_TX_KIB = 138
FIELD_NVLINK_RX_KIB = 139
#: Per-link NVLink error counters (field id, scoped by link), by label: receive errors,
#: transmit discards, failed link recoveries, errors left after FEC, and symbol errors.
NVLINK_ERROR_FIELDS = {
    "rcv": 208,
    "xmit_discards": 212,
    "link_recovery_failed": 214,
    "effective": 219,
    "symbol": 221,
}


def link_fields(links: int) -> tuple[list[tuple[int, int]], list[tuple[str, tuple[str, str]]]]:
    """The (field id, link) requests of a GPU with *links* NVLinks and, for each one in
    the same order, where its value goes: ``("nvlink_kib", (link, direction))`` or
    ``("nvlink_errors", (link, type))``."""
    ids: list[tuple[int, int]] = []
    plan: list[tuple[str, tuple[str, str]]] = []
    for link in range(links):
        scope = str(link)
        ids += [(FIELD_NVLINK_TX_KIB, link), (FIELD_NVLINK_RX_KIB, link)]
        plan += [("nvlink_kib", (scope, "tx")), ("nvlink_kib", (scope, "rx"))]
        for label, field_id in NVLINK_ERROR_FIELDS.items():
            ids.append((field_id, link))
            plan.append(("nvlink_errors", (scope, label)))
    return ids, plan


class LinkTotals:
    """Per label (an error type, a direction), the sum over one GPU's links of what each
    link's counter counted, never decreasing."""

    __slots__ = ("_last", "totals")

    def __init__(self) -> None:
        #: (link, label) -> the link's counter at its last successful read
        self._last: dict[tuple[str, str], int] = {}
        #: label -> the sum over the links; a label no link ever answered is absent
        self.totals: dict[str, int] = {}

    def add(self, key: tuple[str, str], value: int) -> None:
        """Take the counter *value* that (link, label) *key* answered on this poll."""
        last = self._last
        previous = last.get(key)
        # a first read adds its value; a counter that went down was reset: it counted
        # its new value since
        step = value if previous is None or value < previous else value - previous
        last[key] = value
        label = key[1]
        self.totals[label] = self.totals.get(label, 0) + step
