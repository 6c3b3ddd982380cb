"""XID event counting for the ``gpu`` collector, in a background thread.

The thread blocks in ``nvmlEventSetWait_v2`` so a scrape never waits for events; a scrape
only copies the counts. Counts are kept per device key (the UUID, or the NVML index when
the UUID is unreadable) and survive a re-discovery: the next watcher starts from the
previous one's :class:`XidState`.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pynvml

from gotthard.exporters.gpu.xid import FATAL_XIDS

log = logging.getLogger("gotthard.exporter.gpu")

TIMEOUT = pynvml.NVML_ERROR_TIMEOUT
#: Errors after which waiting again cannot succeed: the thread ends (logged once).
_FINAL = (
    pynvml.NVML_ERROR_NOT_SUPPORTED,
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
    pynvml.NVML_ERROR_NO_PERMISSION,
    pynvml.NVML_ERROR_UNINITIALIZED,
)


@dataclass
class XidState:
    """XID counts, the last XID and the last fatal XID (with its monotonic time), and
    when each XID was last seen (Unix time), by key."""

    counts: dict[str, dict[int, int]] = field(default_factory=dict)
    last: dict[str, tuple[int, float]] = field(default_factory=dict)
    last_fatal: dict[str, tuple[int, float]] = field(default_factory=dict)
    seen_at: dict[str, dict[int, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class XidReading:
    """What :meth:`XidWatcher.read` returns for one device."""

    #: XID -> count since the exporter started
    counts: dict[int, int]
    #: the last XID seen, or None
    last: int | None
    #: the last fatal XID and its monotonic time, or None
    last_fatal: tuple[int, float] | None
    #: XID -> Unix time of its last event: what makes an XID new, whatever the gaps
    seen_at: dict[int, float]


def _address(handle: Any) -> int:
    return ctypes.cast(handle, ctypes.c_void_p).value or 0


class XidWatcher(threading.Thread):
    """Counts XID events of the devices registered with :meth:`watch`."""

    def __init__(self, event_set: Any, timeout_ms: int, state: XidState | None = None) -> None:
        super().__init__(name="gpu-xid-events", daemon=True)
        self.event_set = event_set
        self.timeout_ms = timeout_ms
        self.state = state or XidState()
        self.lock = threading.Lock()
        self._stop_event = threading.Event()
        self._by_handle: dict[int, str] = {}

    def watch(self, handle: Any, key: str) -> None:
        """Count the XIDs of the device ``handle`` (already registered on the set) as ``key``."""
        with self.lock:
            self._by_handle[_address(handle)] = key
            self.state.counts.setdefault(key, {})

    def run(self) -> None:
        while not self._stop_event.is_set():
            try:
                data = pynvml.nvmlEventSetWait_v2(self.event_set, self.timeout_ms)
            except pynvml.NVMLError as err:
                if err.value == TIMEOUT:
                    continue
                if err.value in _FINAL:
                    log.info("XID events stop: nvmlEventSetWait_v2: %s", err)
                    return
                log.debug("nvmlEventSetWait_v2: %s", err)
                self._stop_event.wait(self.timeout_ms / 1000)
                continue
            if data.eventType != pynvml.nvmlEventTypeXidCriticalError:
                continue
            key = self._by_handle.get(_address(data.device))
            if key is None:
                continue
            xid = int(data.eventData)
            with self.lock:
                per_device = self.state.counts.setdefault(key, {})
                per_device[xid] = per_device.get(xid, 0) + 1
                self.state.last[key] = (xid, time.monotonic())
                self.state.seen_at.setdefault(key, {})[xid] = time.time()
                # unhealthy for xid_health_window (the list is shared with the alerts)
                if xid in FATAL_XIDS:
                    self.state.last_fatal[key] = (xid, time.monotonic())
            log.warning("GPU %s: XID %d", key, xid)

    def stop(self) -> XidState:
        """End the thread, free the event set; the counts, for the next watcher."""
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout=self.timeout_ms / 1000 + 2)
        try:
            pynvml.nvmlEventSetFree(self.event_set)
        except pynvml.NVMLError as err:
            log.debug("nvmlEventSetFree: %s", err)
        return self.state

    def read(self, key: str) -> XidReading | None:
        """The XIDs of a device watched by this watcher or an earlier one (a GPU lost since
        keeps them: XID 79 comes just before the loss); None for a device never watched."""
        with self.lock:
            counts = self.state.counts.get(key)
            if counts is None:
                return None
            last = self.state.last.get(key)
            return XidReading(
                dict(counts),
                last[0] if last else None,
                self.state.last_fatal.get(key),
                dict(self.state.seen_at.get(key, {})),
            )
