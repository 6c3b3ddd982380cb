"""The NVML source of the ``gpu`` collector, on nvidia-ml-py (``import pynvml``).

* NVML is initialised once (retried on later polls while it fails, e.g. before the
  driver loads) and shut down once, in :meth:`NvmlSource.close`.
* A call that answers NotSupported, or a function the installed library lacks
  (FunctionNotFound), is logged once per device and call and never made again for that
  device: its metric is absent. Other unexpected NVML errors are counted.
* A device that answers GPU_IS_LOST is reported unhealthy; the others carry on.
* XID events are counted by a background thread blocked in ``nvmlEventSetWait_v2``, so
  a scrape never waits for events.
* Hopper GPM metrics come from two GPM samples: the one taken at this poll and the one
  kept from the previous poll, so the ratios cover the poll interval and no poll sleeps.
"""

from __future__ import annotations

import ctypes
import logging
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import pynvml

from gotthard.exporters.gpu.attribution import (
    PodResources,
    PodResourcesError,
    owners_of,
)
from gotthard.exporters.gpu.snapshot import (
    DeviceReading,
    GpuSnapshot,
    JobAttribution,
    PodAttribution,
)

log = logging.getLogger("gotthard.exporter.gpu")

NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
FUNCTION_NOT_FOUND = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
GPU_IS_LOST = pynvml.NVML_ERROR_GPU_IS_LOST
TIMEOUT = pynvml.NVML_ERROR_TIMEOUT
_SKIP = (NOT_SUPPORTED, FUNCTION_NOT_FOUND)
#: gpuInstanceId of a process that is not in a MIG instance
NO_INSTANCE = 0xFFFFFFFF

#: Bits of the clocks-event (throttle) mask, by label.
CLOCKS_EVENT_REASONS = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}
#: nvmlDeviceGetViolationStatus policies, by label.
VIOLATION_POLICIES = {
    "power": pynvml.NVML_PERF_POLICY_POWER,
    "thermal": pynvml.NVML_PERF_POLICY_THERMAL,
    "sync_boost": pynvml.NVML_PERF_POLICY_SYNC_BOOST,
    "board_limit": pynvml.NVML_PERF_POLICY_BOARD_LIMIT,
    "low_utilization": pynvml.NVML_PERF_POLICY_LOW_UTILIZATION,
    "reliability": pynvml.NVML_PERF_POLICY_RELIABILITY,
}
#: GPM metric ids, by label (values are percentages; exported as ratios).
GPM_METRICS = {
    "sm_active": pynvml.NVML_GPM_METRIC_SM_UTIL,
    "sm_occupancy": pynvml.NVML_GPM_METRIC_SM_OCCUPANCY,
    "tensor_active": pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    "dram_active": pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
}
FIELD_MEMORY_TEMP = 82
FIELD_PCIE_TX_BYTES = 197
FIELD_PCIE_RX_BYTES = 198
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
#: XIDs after which a GPU needs a reset or a reboot: unhealthy for xid_health_window.
FATAL_XIDS = frozenset({48, 64, 74, 79, 92, 94, 95, 119, 120, 140})

KUBELET_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"


class GpuUnavailable(Exception):
    """NVML cannot be used on this host (no library, no driver)."""


class _Lost(Exception):
    """The device answered GPU_IS_LOST."""


def _field_row_format() -> struct.Struct:
    """A struct format reading (valueType, nvmlReturn, value bits) of one
    ``c_nvmlFieldValue_t``, built from pynvml's own ctypes layout."""
    layout = pynvml.c_nvmlFieldValue_t
    wanted = [
        (layout.valueType.offset, "I"),
        (layout.nvmlReturn.offset, "I"),
        (layout.value.offset, "Q"),
    ]
    fmt, position = "<", 0
    for offset, code in sorted(wanted):
        fmt += f"{offset - position}x{code}" if offset > position else code
        position = offset + struct.calcsize(code)
    size = ctypes.sizeof(layout)
    if size > position:
        fmt += f"{size - position}x"
    return struct.Struct(fmt)


def _as_double(raw: int) -> float:
    return struct.unpack("<d", raw.to_bytes(8, "little"))[0]


#: (value type, bytes, signed) of the integer members of the field value union.
_INTEGER_TYPES = {
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: (4, False),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: (8, False),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: (8, False),
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: (8, True),
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: (4, True),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: (2, False),
}


def _as_integer(raw: int, kind: int) -> int:
    size, signed = _INTEGER_TYPES.get(kind, (8, False))
    value = raw & ((1 << (8 * size)) - 1)
    if signed and value >= 1 << (8 * size - 1):
        value -= 1 << (8 * size)
    return value


_FIELD_ROW = _field_row_format()


def _get_field_values(device: _Device) -> Any:
    """``nvmlDeviceGetFieldValues`` on the device's prepared request array.

    The same C call as ``pynvml.nvmlDeviceGetFieldValues``, without rebuilding the
    request (pynvml sets two attributes per entry, ~0.2 ms per GPU with 18 NVLinks).
    """
    lib = pynvml.nvmlLib
    if lib is None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
    try:
        function = lib.nvmlDeviceGetFieldValues
    except AttributeError:
        raise pynvml.NVMLError(FUNCTION_NOT_FOUND) from None
    request = device.field_request
    status = function(device.handle, ctypes.c_int32(len(request)), ctypes.byref(request))
    if status != pynvml.NVML_SUCCESS:
        raise pynvml.NVMLError(status)
    return request


def field_value(entry: Any) -> float:
    """The value of one ``c_nvmlFieldValue_t`` according to its ``valueType``."""
    kind = entry.valueType
    value = entry.value
    if kind == pynvml.NVML_VALUE_TYPE_DOUBLE:
        return float(value.dVal)
    if kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT:
        return value.uiVal
    if kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG:
        return value.ulVal
    if kind == pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
        return value.sllVal
    if kind == pynvml.NVML_VALUE_TYPE_SIGNED_INT:
        return value.siVal
    if kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT:
        return value.usVal
    return value.ullVal


@dataclass
class _Device:
    """What discovery learned about one GPU or MIG instance."""

    index: str
    uuid: str
    handle: Any
    name: str = ""
    pci_bus_id: str = ""
    gpu_instance: str = ""
    parent: _Device | None = None
    nvlink_links: int = 0
    gpm: bool = False
    gpm_sample: Any = None
    field_ids: list[Any] = field(default_factory=list)
    field_plan: list[tuple[str, Any]] = field(default_factory=list)
    #: the nvmlFieldValue_t request array, ids filled once and reused every poll
    field_request: Any = None
    lost: bool = False
    mig: list[_Device] = field(default_factory=list)
    #: MIG instances: PIDs found on the parent's process list for this instance
    pids: tuple[int, ...] = ()


class _XidWatcher(threading.Thread):
    """Counts XID events in the background; a scrape only copies the counts."""

    def __init__(self, devices: list[_Device], timeout_ms: int) -> None:
        super().__init__(name="gpu-xid-events", daemon=True)
        self.timeout_ms = timeout_ms
        self.counts: dict[str, dict[int, int]] = {}
        self.last: dict[str, tuple[int, float]] = {}
        self.last_fatal: dict[str, tuple[int, float]] = {}
        self.lock = threading.Lock()
        self._stop_event = threading.Event()
        self.event_set = pynvml.nvmlEventSetCreate()
        self.by_handle: dict[int, str] = {}
        for device in devices:
            try:
                pynvml.nvmlDeviceRegisterEvents(
                    device.handle, pynvml.nvmlEventTypeXidCriticalError, self.event_set
                )
            except pynvml.NVMLError as err:
                log.info("GPU %s: XID events unavailable (%s)", device.index, err)
                continue
            self.counts[device.uuid] = {}
            self.by_handle[ctypes.cast(device.handle, ctypes.c_void_p).value or 0] = device.uuid

    def run(self) -> None:
        while not self._stop_event.is_set():
            try:
                data = pynvml.nvmlEventSetWait_v2(self.event_set, self.timeout_ms)
            except pynvml.NVMLError as err:
                if err.value != TIMEOUT:
                    log.debug("nvmlEventSetWait_v2: %s", err)
                    self._stop_event.wait(self.timeout_ms / 1000)
                continue
            if data.eventType != pynvml.nvmlEventTypeXidCriticalError:
                continue
            uuid = self.by_handle.get(ctypes.cast(data.device, ctypes.c_void_p).value or 0)
            if uuid is None:
                continue
            xid = int(data.eventData)
            with self.lock:
                per_device = self.counts.setdefault(uuid, {})
                per_device[xid] = per_device.get(xid, 0) + 1
                self.last[uuid] = (xid, time.monotonic())
                if xid in FATAL_XIDS:
                    self.last_fatal[uuid] = (xid, time.monotonic())
            log.warning("GPU %s: XID %d", uuid, xid)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=self.timeout_ms / 1000 + 2)
        try:
            pynvml.nvmlEventSetFree(self.event_set)
        except pynvml.NVMLError as err:
            log.debug("nvmlEventSetFree: %s", err)

    def read(self, uuid: str) -> tuple[dict[int, int] | None, int | None, tuple[int, float] | None]:
        """XID counts (None when events are unsupported), the last XID, the last fatal one."""
        with self.lock:
            counts = self.counts.get(uuid)
            last = self.last.get(uuid)
            return (
                dict(counts) if counts is not None else None,
                last[0] if last else None,
                self.last_fatal.get(uuid),
            )


class NvmlSource:
    """Reads every GPU of this host through NVML into a :class:`GpuSnapshot`."""

    def __init__(
        self,
        *,
        procfs: str | Path = "/proc",
        kubelet_socket: str | Path = KUBELET_SOCKET,
        gpm: bool = True,
        xid_events: bool = True,
        event_timeout_ms: int = 500,
        xid_health_window_seconds: float = 3600.0,
    ) -> None:
        self.procfs = Path(procfs)
        self.pod_resources = PodResources(kubelet_socket)
        self.use_gpm = gpm
        self.use_xid_events = xid_events
        self.event_timeout_ms = event_timeout_ms
        self.xid_health_window = xid_health_window_seconds
        self._initialised = False
        self._devices: list[_Device] = []
        self._driver = ""
        self._cuda = ""
        self._unsupported: set[tuple[str, str]] = set()
        self._watcher: _XidWatcher | None = None
        self._errors = 0

    # --- lifecycle ------------------------------------------------------------------------

    def _ensure_init(self) -> None:
        if self._initialised:
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as err:
            raise GpuUnavailable(f"NVML unavailable: {err}") from None
        self._initialised = True
        try:
            self._discover()
        except pynvml.NVMLError as err:
            self.close()
            raise GpuUnavailable(f"NVML device discovery failed: {err}") from None
        if self.use_xid_events:
            try:
                self._watcher = _XidWatcher(self._all_devices(), self.event_timeout_ms)
                self._watcher.start()
            except pynvml.NVMLError as err:
                log.info("XID events unavailable: %s", err)
                self._watcher = None

    def close(self) -> None:
        """Stop the event thread, free GPM samples and shut NVML down (once)."""
        if not self._initialised:
            return
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None
        for device in self._all_devices():
            if device.gpm_sample is not None:
                try:
                    pynvml.nvmlGpmSampleFree(device.gpm_sample)
                except pynvml.NVMLError as err:
                    log.debug("nvmlGpmSampleFree: %s", err)
                device.gpm_sample = None
        self._devices = []
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as err:
            log.debug("nvmlShutdown: %s", err)
        self._initialised = False

    def _all_devices(self) -> list[_Device]:
        found: list[_Device] = []
        for device in self._devices:
            found.append(device)
            found.extend(device.mig)
        return found

    # --- discovery ------------------------------------------------------------------------

    def _discover(self) -> None:
        self._driver = _text(pynvml.nvmlSystemGetDriverVersion())
        try:
            cuda = pynvml.nvmlSystemGetCudaDriverVersion()
            self._cuda = f"{cuda // 1000}.{cuda % 1000 // 10}"
        except pynvml.NVMLError:
            self._cuda = ""
        devices = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            device = _Device(str(index), "", handle)
            try:
                device.uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
                device.name = _text(pynvml.nvmlDeviceGetName(handle))
                device.pci_bus_id = _text(pynvml.nvmlDeviceGetPciInfo(handle).busId)
            except pynvml.NVMLError as err:
                if err.value != GPU_IS_LOST:
                    raise
                device.lost = True
                device.uuid = device.uuid or f"lost-gpu-{index}"
                devices.append(device)
                continue
            self._discover_links(device)
            self._discover_gpm(device)
            self._discover_mig(device)
            devices.append(device)
        self._devices = devices
        log.info(
            "NVML %s: %d GPU(s), %d MIG instance(s)",
            self._driver,
            len(devices),
            sum(len(d.mig) for d in devices),
        )

    def _discover_links(self, device: _Device) -> None:
        links = 0
        try:
            (entry,) = pynvml.nvmlDeviceGetFieldValues(device.handle, [FIELD_NVLINK_LINK_COUNT])
            if entry.nvmlReturn == pynvml.NVML_SUCCESS:
                links = int(field_value(entry))
        except pynvml.NVMLError as err:
            if err.value not in _SKIP:
                raise
        device.nvlink_links = links
        # The batch request, and for each entry (same order) where its value goes.
        ids: list[Any] = [FIELD_MEMORY_TEMP, FIELD_PCIE_TX_BYTES, FIELD_PCIE_RX_BYTES]
        plan: list[tuple[str, Any]] = [
            ("temperature", "memory"),
            ("pcie", "tx"),
            ("pcie", "rx"),
        ]
        for link in range(links):
            scope = str(link)
            ids += [(FIELD_NVLINK_TX_KIB, link), (FIELD_NVLINK_RX_KIB, link)]
            plan += [("nvlink_kib", (scope, "tx")), ("nvlink_kib", (scope, "rx"))]
            for label, field_id in NVLINK_ERROR_FIELDS.items():
                ids.append((field_id, link))
                plan.append(("nvlink_errors", (scope, label)))
        device.field_ids = ids
        device.field_plan = plan
        request = (pynvml.c_nvmlFieldValue_t * len(ids))()
        for entry, wanted in zip(request, ids, strict=True):
            entry.fieldId, entry.scopeId = wanted if isinstance(wanted, tuple) else (wanted, 0)
        device.field_request = request

    def _discover_gpm(self, device: _Device) -> None:
        if not self.use_gpm:
            return
        try:
            device.gpm = bool(pynvml.nvmlGpmQueryDeviceSupport(device.handle).isSupportedDevice)
        except pynvml.NVMLError as err:
            if err.value not in _SKIP:
                raise
            device.gpm = False

    def _discover_mig(self, device: _Device) -> None:
        try:
            current, _pending = pynvml.nvmlDeviceGetMigMode(device.handle)
        except pynvml.NVMLError as err:
            if err.value not in _SKIP:
                raise
            return
        if current != pynvml.NVML_DEVICE_MIG_ENABLE:
            return
        for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(device.handle)):
            try:
                handle = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(device.handle, slot)
            except pynvml.NVMLError as err:
                if err.value == pynvml.NVML_ERROR_NOT_FOUND:
                    continue  # an empty slot
                raise
            instance = pynvml.nvmlDeviceGetGpuInstanceId(handle)
            device.mig.append(
                _Device(
                    device.index,
                    device.uuid,
                    handle,
                    name=device.name,
                    pci_bus_id=device.pci_bus_id,
                    gpu_instance=str(instance),
                    parent=device,
                    gpm=device.gpm,
                )
            )

    # --- reading --------------------------------------------------------------------------

    def _call(self, device: _Device, key: str, fn: Callable[..., Any], *args: Any) -> Any:
        """One NVML call; None when unsupported (remembered) or failed (counted)."""
        if (device.uuid, device.gpu_instance, key) in self._unsupported:
            return None
        try:
            return fn(*args)
        except pynvml.NVMLError as err:
            code = err.value
            if code == GPU_IS_LOST:
                raise _Lost from None
            if code in _SKIP:
                self._unsupported.add((device.uuid, device.gpu_instance, key))
                log.info(
                    "GPU %s%s: %s not supported (%s); metric left out",
                    device.index,
                    f"/{device.gpu_instance}" if device.gpu_instance else "",
                    key,
                    err,
                )
                return None
            self._errors += 1
            log.debug("GPU %s: %s failed: %s", device.index, key, err)
            return None

    def poll(self) -> GpuSnapshot:
        self._ensure_init()
        self._errors = 0
        readings: list[DeviceReading] = []
        for device in self._devices:
            readings.append(self._read_device(device))
            for instance in device.mig:
                if device.lost:
                    continue
                readings.append(self._read_mig(instance))
        jobs, pods = self._attribute(readings)
        return GpuSnapshot(
            driver_version=self._driver,
            cuda_version=self._cuda,
            devices=tuple(readings),
            jobs=jobs,
            pods=pods,
            errors=self._errors,
        )

    def _lost(self, device: _Device, reading: DeviceReading) -> DeviceReading:
        if not device.lost:
            log.error(
                "GPU %s (%s) is lost: fell off the bus or the driver lost it",
                device.index,
                device.uuid,
            )
        device.lost = True
        reading.healthy = False
        reading.health_reason = "lost"
        return reading

    def _read_device(self, device: _Device) -> DeviceReading:
        reading = DeviceReading(
            device.index, device.uuid, name=device.name, pci_bus_id=device.pci_bus_id
        )
        if device.lost:
            return self._lost(device, reading)
        try:
            self._read_core(device, reading)
        except _Lost:
            return self._lost(device, reading)
        self._read_xids(device, reading)
        return reading

    def _read_core(self, device: _Device, reading: DeviceReading) -> None:
        call, handle = self._call, device.handle
        rates = call(device, "utilization", pynvml.nvmlDeviceGetUtilizationRates, handle)
        if rates is not None:
            reading.utilization_ratio = rates.gpu / 100
            reading.memory_utilization_ratio = rates.memory / 100
        self._read_memory(device, reading)
        power = call(device, "power", pynvml.nvmlDeviceGetPowerUsage, handle)
        if power is not None:
            reading.power_watts = power / 1000
        limit = call(device, "power_limit", pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)
        if limit is not None:
            reading.power_limit_watts = limit / 1000
        energy = call(device, "energy", pynvml.nvmlDeviceGetTotalEnergyConsumption, handle)
        if energy is not None:
            reading.energy_joules = energy / 1000
        temp = call(
            device,
            "temperature_v",
            pynvml.nvmlDeviceGetTemperatureV,
            handle,
            pynvml.NVML_TEMPERATURE_GPU,
        )
        if temp is None and (device.uuid, "", "temperature_v") in self._unsupported:
            # drivers before nvmlDeviceGetTemperatureV: the deprecated call
            temp = call(
                device,
                "temperature",
                pynvml.nvmlDeviceGetTemperature,
                handle,
                pynvml.NVML_TEMPERATURE_GPU,
            )
        if temp is not None:
            reading.temperature_celsius["gpu"] = temp
        for label, clock in (("sm", pynvml.NVML_CLOCK_SM), ("memory", pynvml.NVML_CLOCK_MEM)):
            mhz = call(device, f"clock_{label}", pynvml.nvmlDeviceGetClockInfo, handle, clock)
            if mhz is not None:
                reading.clock_hertz[label] = mhz * 1_000_000
        mask = call(
            device, "clocks_event_reasons", pynvml.nvmlDeviceGetCurrentClocksEventReasons, handle
        )
        if mask is not None:
            reading.clocks_event_reasons = {
                reason: 1 if mask & bit else 0 for reason, bit in CLOCKS_EVENT_REASONS.items()
            }
        for reason, policy in VIOLATION_POLICIES.items():
            status = call(
                device, f"violation_{reason}", pynvml.nvmlDeviceGetViolationStatus, handle, policy
            )
            if status is not None:
                reading.throttle_seconds[reason] = status.violationTime / 1e9
        for label, kind in (
            ("corrected", pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
            ("uncorrected", pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
        ):
            count = call(
                device,
                f"ecc_{label}",
                pynvml.nvmlDeviceGetTotalEccErrors,
                handle,
                kind,
                pynvml.NVML_VOLATILE_ECC,
            )
            if count is not None:
                reading.ecc_errors[label] = count
        rows = call(device, "remapped_rows", pynvml.nvmlDeviceGetRemappedRows, handle)
        if rows is not None:
            correctable, uncorrectable, pending, failure = rows
            reading.remapped_rows = {
                "correctable": correctable,
                "uncorrectable": uncorrectable,
                "pending": int(pending),
                "failure": int(failure),
            }
            if failure:
                reading.healthy, reading.health_reason = False, "row_remap_failure"
        reading.pcie_replay = call(
            device, "pcie_replay", pynvml.nvmlDeviceGetPcieReplayCounter, handle
        )
        self._read_fields(device, reading)
        self._read_gpm(device, reading)
        procs = call(device, "processes", pynvml.nvmlDeviceGetComputeRunningProcesses, handle)
        by_instance: dict[str, list[int]] = {}
        for process in procs or ():
            instance = process.gpuInstanceId
            key = "" if instance in (None, NO_INSTANCE) else str(instance)
            by_instance.setdefault(key, []).append(process.pid)
        reading.pids = tuple(by_instance.get("", ()))
        for instance in device.mig:
            instance.pids = tuple(by_instance.get(instance.gpu_instance, ()))

    def _read_memory(self, device: _Device, reading: DeviceReading) -> None:
        memory = self._call(
            device, "memory", pynvml.nvmlDeviceGetMemoryInfo, device.handle, pynvml.nvmlMemory_v2
        )
        if memory is not None:
            reading.memory_used_bytes = memory.used
            reading.memory_total_bytes = memory.total
            reading.memory_reserved_bytes = memory.reserved

    def _read_fields(self, device: _Device, reading: DeviceReading) -> None:
        if not device.field_ids:
            return
        entries = self._call(device, "field_values", _get_field_values, device)
        if entries is None:
            return
        temperature, pcie = reading.temperature_celsius, reading.pcie_bytes
        nvlink_bytes, nvlink_errors = reading.nvlink_bytes, reading.nvlink_errors
        ok, double = pynvml.NVML_SUCCESS, pynvml.NVML_VALUE_TYPE_DOUBLE
        ull = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
        # One C-level unpack of the whole result array: pynvml's structure attribute
        # access costs about 0.4 us per field, which dominated scrapes of NVLink nodes.
        rows = _FIELD_ROW.iter_unpack(memoryview(entries).cast("B"))
        for (kind, status, raw), (target, key) in zip(rows, device.field_plan, strict=True):
            if status != ok:
                continue
            if kind == ull:
                value = raw
            elif kind == double:
                value = _as_double(raw)
            else:
                value = _as_integer(raw, kind)
            if target == "nvlink_errors":
                nvlink_errors[key] = int(value)
            elif target == "nvlink_kib":
                nvlink_bytes[key] = int(value) * 1024
            elif target == "pcie":
                pcie[key] = int(value)
            else:
                temperature[key] = value

    def _read_gpm(self, device: _Device, reading: DeviceReading) -> None:
        if not device.gpm:
            return
        parent = device.parent
        try:
            sample = pynvml.nvmlGpmSampleAlloc()
        except pynvml.NVMLError as err:
            if err.value == GPU_IS_LOST:
                raise _Lost from None
            self._errors += 1
            return
        if parent is None:
            taken = self._call(device, "gpm_sample", pynvml.nvmlGpmSampleGet, device.handle, sample)
        else:
            taken = self._call(
                device,
                "gpm_sample",
                pynvml.nvmlGpmMigSampleGet,
                parent.handle,
                int(device.gpu_instance),
                sample,
            )
        if taken is None:
            pynvml.nvmlGpmSampleFree(sample)
            if (device.uuid, device.gpu_instance, "gpm_sample") in self._unsupported:
                device.gpm = False
            return
        previous, device.gpm_sample = device.gpm_sample, sample
        if previous is None:
            return  # the first sample: ratios appear from the next poll on
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM_METRICS)
        request.sample1 = previous
        request.sample2 = sample
        for slot, metric_id in enumerate(GPM_METRICS.values()):
            request.metrics[slot].metricId = metric_id
        try:
            result = self._call(device, "gpm_metrics", pynvml.nvmlGpmMetricsGet, request)
        finally:
            pynvml.nvmlGpmSampleFree(previous)
        if result is None:
            return
        for slot, label in enumerate(GPM_METRICS):
            metric = result.metrics[slot]
            if metric.nvmlReturn == pynvml.NVML_SUCCESS:
                reading.gpm[label] = metric.value / 100

    def _read_mig(self, instance: _Device) -> DeviceReading:
        reading = DeviceReading(
            instance.index,
            instance.uuid,
            gpu_instance=instance.gpu_instance,
            name=instance.name,
            pci_bus_id=instance.pci_bus_id,
        )
        try:
            self._read_memory(instance, reading)
            self._read_gpm(instance, reading)
        except _Lost:
            reading.healthy, reading.health_reason = False, "lost"
        reading.pids = instance.pids
        return reading

    def _read_xids(self, device: _Device, reading: DeviceReading) -> None:
        if self._watcher is None:
            return
        counts, last, fatal = self._watcher.read(device.uuid)
        if counts is None:
            return  # XID events unsupported on this device: no XID series
        reading.xid_counts = counts
        reading.last_xid = last or 0
        if (
            fatal is not None
            and time.monotonic() - fatal[1] < self.xid_health_window
            and reading.healthy
        ):
            reading.healthy, reading.health_reason = False, f"xid_{fatal[0]}"

    # --- attribution ----------------------------------------------------------------------

    def _attribute(
        self, readings: list[DeviceReading]
    ) -> tuple[tuple[JobAttribution, ...], tuple[PodAttribution, ...]]:
        all_pids = {pid for reading in readings for pid in reading.pids}
        owners, errors = owners_of(all_pids, self.procfs) if all_pids else ({}, 0)
        self._errors += errors
        assignments: dict[str, tuple[Any, ...]] = {}
        if self.pod_resources.available():
            try:
                assignments = self.pod_resources.devices()
            except PodResourcesError as err:
                self._errors += 1
                log.warning("kubelet pod-resources: %s; exporting pod uids only", err)
        jobs: set[JobAttribution] = set()
        pods: set[PodAttribution] = set()
        for reading in readings:
            key = (reading.index, reading.uuid, reading.gpu_instance)
            containers = assignments.get(reading.uuid, ())
            named = containers[0] if len(containers) == 1 else None
            seen_uids = set()
            for pid in reading.pids:
                owner = owners.get(pid)
                if owner is None:
                    continue
                if owner.slurm_job_id:
                    jobs.add(JobAttribution(*key, owner.slurm_job_id))
                if owner.pod_uid:
                    seen_uids.add(owner.pod_uid)
            for uid in seen_uids:
                if named is not None:
                    pods.add(PodAttribution(*key, uid, named.namespace, named.pod, named.container))
                else:
                    pods.add(PodAttribution(*key, uid))
            if not seen_uids:
                # allocated to a container by the kubelet, but no process on it right now
                for container in containers:
                    pods.add(
                        PodAttribution(
                            *key, "", container.namespace, container.pod, container.container
                        )
                    )
        return tuple(sorted(jobs, key=_order)), tuple(sorted(pods, key=_order))


def _order(item: JobAttribution | PodAttribution) -> tuple[str, ...]:
    return tuple(str(getattr(item, each.name)) for each in fields(item))


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
