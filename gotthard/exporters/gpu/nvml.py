"""The NVML source of the ``gpu`` collector, on nvidia-ml-py (``import pynvml``).

* Only ``nvmlInit``, ``nvmlDeviceGetCount`` and ``nvmlDeviceGetHandleByIndex`` are
  required. Every other call is optional per device: NotSupported, NoPermission, or a
  function the installed library lacks (FunctionNotFound) is logged once per device and
  call and that call is never made again for the device: its metric (or label) is absent.
  Other unexpected NVML errors are counted. Discovery never drops a GPU for one optional
  call: without a UUID the GPU is keyed by its index, without a PCI bus id the label is
  empty.
* NVML is initialised once and shut down once, in :meth:`NvmlSource.close`. While init
  fails, or while GPUs are missing (lost, or fewer than NVML ever listed), NVML is shut
  down, initialised and enumerated again once every ``rediscover_every_polls`` polls
  (:data:`REDISCOVER_EVERY_POLLS`), so a GPU that comes back, or a reloaded driver, is
  picked up without a restart.
* A device that answers GPU_IS_LOST is reported lost, and so is a GPU this exporter
  listed (by UUID) that left NVML's device list since: NVML's word, never missing
  readings. A restarted exporter reports only what NVML says then. A lost GPU keeps its
  XID series.
* NVLink errors and bytes are read per link and exported summed over the GPU's links,
  never decreasing (:mod:`.links`); as read per link too with ``nvlink_per_link``.
* XID events are counted by a background thread (:mod:`.events`), so a scrape never
  waits for events.
* Hopper GPM metrics come from two GPM samples: the one taken at this poll and the one
  kept from the previous poll, so the ratios cover the poll interval and no poll sleeps.
"""

from __future__ import annotations

import ctypes
import logging
import struct
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
from gotthard.exporters.gpu.events import XidState, XidWatcher
from gotthard.exporters.gpu.links import FIELD_NVLINK_LINK_COUNT, LinkTotals, link_fields
from gotthard.exporters.gpu.snapshot import (
    DeviceReading,
    GpuSnapshot,
    JobAttribution,
    PodAttribution,
)

log = logging.getLogger("gotthard.exporter.gpu")

NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
FUNCTION_NOT_FOUND = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
NO_PERMISSION = pynvml.NVML_ERROR_NO_PERMISSION
GPU_IS_LOST = pynvml.NVML_ERROR_GPU_IS_LOST
#: Answers that mean "this device cannot give this reading": logged once, never asked again.
_SKIP = (NOT_SUPPORTED, FUNCTION_NOT_FOUND, NO_PERMISSION)
#: While NVML init fails or GPUs are missing, NVML is re-initialised and the GPUs
#: enumerated again once every this many polls (15 s polls: once a minute).
REDISCOVER_EVERY_POLLS = 4
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
    #: the sums over the links of the NVLink error and byte counters
    nvlink_sums: tuple[LinkTotals, LinkTotals] = field(
        default_factory=lambda: (LinkTotals(), LinkTotals())
    )
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

    @property
    def key(self) -> str:
        """What identifies the GPU across polls and re-discoveries: its UUID, else its index."""
        return self.uuid or f"index-{self.index}"


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
        rediscover_every_polls: int = REDISCOVER_EVERY_POLLS,
        nvlink_per_link: bool = False,
    ) -> None:
        self.procfs = Path(procfs)
        self.pod_resources = PodResources(kubelet_socket)
        self.use_gpm = gpm
        self.use_xid_events = xid_events
        self.event_timeout_ms = event_timeout_ms
        self.xid_health_window = xid_health_window_seconds
        self.rediscover_every = max(1, rediscover_every_polls)
        self.nvlink_per_link = nvlink_per_link
        #: device key -> its NVLink sums, kept across re-discoveries
        self._link_sums: dict[str, tuple[LinkTotals, LinkTotals]] = {}
        self._initialised = False
        self._devices: list[_Device] = []
        self._driver = ""
        self._cuda = ""
        #: (device key, gpu_instance, call) answered NotSupported/FunctionNotFound/NoPermission;
        #: kept across re-discoveries, so each is logged once.
        self._unsupported: set[tuple[str, str, str]] = set()
        self._watcher: XidWatcher | None = None
        self._xid_state = XidState()
        self._errors = 0
        #: the most GPUs NVML ever listed: fewer later means some are missing
        self._expected = 0
        #: every GPU NVML listed since the start, by UUID: one listed no more is lost
        self._known: dict[str, _Device] = {}
        #: polls since the last init/discovery attempt, while one is pending
        self._waited = 0
        self._looking = False
        self._failure = ""
        #: stands for the host in calls that are not about one GPU (driver version...)
        self._system = _Device("", "", None)

    # --- lifecycle ------------------------------------------------------------------------

    def _ensure_current(self) -> None:
        """Initialise NVML and enumerate the GPUs; again, every N polls, while that failed
        or GPUs are missing."""
        if not self._initialised:
            if self._failure and not self._due():
                raise GpuUnavailable(self._failure)
            self._start()
            return
        if not self._missing():
            self._waited, self._looking = 0, False
        elif self._due():
            # logged when the search starts, not on every attempt while a GPU stays gone
            level = logging.DEBUG if self._looking else logging.INFO
            log.log(level, "GPU(s) missing: re-initialising NVML to look for them again")
            self._looking = True
            self._shutdown()
            self._start()

    def _due(self) -> bool:
        self._waited += 1
        if self._waited < self.rediscover_every:
            return False
        self._waited = 0
        return True

    def _missing(self) -> bool:
        if any(device.lost for device in self._devices):
            return True
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError:
            return True
        return count != len(self._devices) or count < self._expected

    def _start(self) -> None:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as err:
            self._failure = f"NVML unavailable: {err}"
            raise GpuUnavailable(self._failure) from None
        self._initialised = True
        try:
            self._discover()
        except pynvml.NVMLError as err:
            self._shutdown()
            self._failure = f"NVML device discovery failed: {err}"
            raise GpuUnavailable(self._failure) from None
        self._failure = ""
        self._expected = max(self._expected, len(self._devices))
        self._recognise_lost()
        for d in self._devices:
            if d.uuid:
                self._known[d.uuid] = _Device(d.index, d.uuid, None, d.name, d.pci_bus_id)
        if self.use_xid_events:
            self._watch_xids()

    def _recognise_lost(self) -> None:
        """A GPU lost before this enumeration hides its UUID too: it is the known GPU at
        its index (if listed no more), with its UUID and XIDs, not a second, nameless GPU."""
        listed = {device.uuid for device in self._devices if device.uuid}
        for device in (d for d in self._devices if d.lost and not d.uuid):
            for known in self._known.values():
                if known.index == device.index and known.uuid not in listed:
                    for name in ("uuid", "name", "pci_bus_id"):
                        setattr(device, name, getattr(known, name))
                    listed.add(known.uuid)
                    break

    def _watch_xids(self) -> None:
        try:
            event_set = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as err:
            if not self._is_unsupported(self._system, "xid_events"):
                self._unsupported.add((self._system.key, "", "xid_events"))
                log.info("XID events unavailable: %s", err)
            return
        watcher = XidWatcher(event_set, self.event_timeout_ms, self._xid_state)
        for device in self._all_devices():
            if device.lost or device.parent is not None:
                continue
            try:
                registered = self._call(device, "xid_events", _register_xids, device, event_set)
            except _Lost:
                device.lost = True
                continue
            if registered:
                watcher.watch(device.handle, device.key)
        watcher.start()
        self._watcher = watcher

    def close(self) -> None:
        """Stop the event thread, free GPM samples and shut NVML down (once)."""
        self._shutdown()

    def _shutdown(self) -> None:
        if not self._initialised:
            return
        if self._watcher is not None:
            self._xid_state = self._watcher.stop()
            self._watcher = None
        for device in self._all_devices():
            if device.gpm_sample is not None:
                try:
                    _free_sample(device.gpm_sample)
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
        driver = self._call(self._system, "driver_version", pynvml.nvmlSystemGetDriverVersion)
        self._driver = "" if driver is None else _text(driver)
        cuda = self._call(self._system, "cuda_version", pynvml.nvmlSystemGetCudaDriverVersion)
        self._cuda = "" if cuda is None else f"{cuda // 1000}.{cuda % 1000 // 10}"
        devices = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            except pynvml.NVMLError as err:
                log.error("GPU %d: no NVML handle (%s); reported lost", index, err)
                devices.append(_Device(str(index), "", None, lost=True))
                continue
            device = _Device(str(index), "", handle)
            try:
                self._discover_device(device)
            except _Lost:
                device.lost = True
            devices.append(device)
        self._devices = devices
        log.info(
            "NVML %s: %d GPU(s), %d MIG instance(s)",
            self._driver,
            len(devices),
            sum(len(d.mig) for d in devices),
        )

    def _discover_device(self, device: _Device) -> None:
        call, handle = self._call, device.handle
        device.uuid = _text(call(device, "uuid", pynvml.nvmlDeviceGetUUID, handle) or "")
        device.name = _text(call(device, "name", pynvml.nvmlDeviceGetName, handle) or "")
        pci = call(device, "pci_info", pynvml.nvmlDeviceGetPciInfo, handle)
        device.pci_bus_id = "" if pci is None else _text(pci.busId)
        self._discover_links(device)
        self._discover_gpm(device)
        self._discover_mig(device)

    def _discover_links(self, device: _Device) -> None:
        links = 0
        found = self._call(
            device,
            "nvlink_count",
            pynvml.nvmlDeviceGetFieldValues,
            device.handle,
            [FIELD_NVLINK_LINK_COUNT],
        )
        if found is not None and found[0].nvmlReturn == pynvml.NVML_SUCCESS:
            links = int(field_value(found[0]))
        device.nvlink_links = links
        device.nvlink_sums = self._link_sums.setdefault(device.key, device.nvlink_sums)
        # The batch request, and for each entry (same order) where its value goes.
        link_ids, link_plan = link_fields(links)
        ids: list[Any] = [FIELD_MEMORY_TEMP, FIELD_PCIE_TX_BYTES, FIELD_PCIE_RX_BYTES, *link_ids]
        device.field_ids = ids
        device.field_plan = [("temperature", "memory"), ("pcie", "tx"), ("pcie", "rx"), *link_plan]
        request = (pynvml.c_nvmlFieldValue_t * len(ids))()
        for entry, wanted in zip(request, ids, strict=True):
            entry.fieldId, entry.scopeId = wanted if isinstance(wanted, tuple) else (wanted, 0)
        device.field_request = request

    def _discover_gpm(self, device: _Device) -> None:
        if not self.use_gpm:
            return
        support = self._call(device, "gpm_support", pynvml.nvmlGpmQueryDeviceSupport, device.handle)
        device.gpm = support is not None and bool(support.isSupportedDevice)

    def _discover_mig(self, device: _Device) -> None:
        call, handle = self._call, device.handle
        mode = call(device, "mig_mode", pynvml.nvmlDeviceGetMigMode, handle)
        if mode is None or mode[0] != pynvml.NVML_DEVICE_MIG_ENABLE:
            return
        slots = call(device, "mig_slots", pynvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0
        for slot in range(slots):
            instance_handle = call(
                device,
                "mig_handle",
                pynvml.nvmlDeviceGetMigDeviceHandleByIndex,
                handle,
                slot,
                empty=pynvml.NVML_ERROR_NOT_FOUND,  # an empty slot
            )
            if instance_handle is None:
                continue
            instance = call(
                device, "mig_instance_id", pynvml.nvmlDeviceGetGpuInstanceId, instance_handle
            )
            if instance is None:
                continue  # without its GPU instance id a MIG device cannot be labelled
            device.mig.append(
                _Device(
                    device.index,
                    device.uuid,
                    instance_handle,
                    name=device.name,
                    pci_bus_id=device.pci_bus_id,
                    gpu_instance=str(instance),
                    parent=device,
                    gpm=device.gpm,
                )
            )

    # --- reading --------------------------------------------------------------------------

    def _call(
        self,
        device: _Device,
        key: str,
        fn: Callable[..., Any],
        *args: Any,
        empty: int | None = None,
    ) -> Any:
        """One optional NVML call; None when unsupported (remembered and logged once),
        when it answers ``empty`` (nothing there), or when it failed (counted).
        Raises :class:`_Lost` when the device answers GPU_IS_LOST."""
        if self._is_unsupported(device, key):
            return None
        try:
            return fn(*args)
        except pynvml.NVMLError as err:
            code = err.value
            if code == GPU_IS_LOST:
                raise _Lost from None
            if code == empty:
                return None
            if code in _SKIP:
                self._unsupported.add((device.key, device.gpu_instance, key))
                log.info(
                    "%s: %s not supported (%s: %s); left out",
                    _where(device),
                    key,
                    getattr(fn, "__name__", "NVML"),
                    err,
                )
                return None
            self._errors += 1
            log.debug("%s: %s failed: %s", _where(device), key, err)
            return None

    def _is_unsupported(self, device: _Device, key: str) -> bool:
        return (device.key, device.gpu_instance, key) in self._unsupported

    def poll(self) -> GpuSnapshot:
        self._errors = 0
        self._ensure_current()
        readings: list[DeviceReading] = []
        for device in self._devices:
            readings.append(self._read_device(device))
            for instance in device.mig:
                if device.lost:
                    continue
                readings.append(self._read_mig(instance))
        listed = {device.uuid for device in self._devices}
        for uuid, gone in self._known.items():
            if uuid not in listed:
                readings.append(self._gone(gone))
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
        reading.healthy, reading.lost, reading.health_reason = False, True, "lost"
        self._read_xids(device, reading)
        return reading

    def _gone(self, device: _Device) -> DeviceReading:
        """A GPU NVML listed earlier and no longer lists: lost, with its XIDs."""
        if not device.lost:
            log.error("GPU %s (%s) is lost: NVML no longer lists it", device.index, device.uuid)
            device.lost = True
        reading = DeviceReading(device.index, device.uuid, "", device.name, device.pci_bus_id)
        reading.healthy, reading.lost, reading.health_reason = False, True, "gone"
        self._read_xids(device, reading)
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
        if temp is None and self._is_unsupported(device, "temperature_v"):
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
        # the versioned call: pynvml's unversioned wrapper turns FunctionNotFound into
        # NVMLLibraryMismatchError, which is not an NVMLError
        procs = call(device, "processes", pynvml.nvmlDeviceGetComputeRunningProcesses_v3, handle)
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
        errors, data = device.nvlink_sums
        per_link = self.nvlink_per_link
        link_errors, link_bytes = reading.nvlink_link_errors, reading.nvlink_link_bytes
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
                errors.add(key, int(value))
                if per_link:
                    link_errors[key] = int(value)
            elif target == "nvlink_kib":
                data.add(key, int(value) * 1024)
                if per_link:
                    link_bytes[key] = int(value) * 1024
            elif target == "pcie":
                pcie[key] = int(value)
            else:
                temperature[key] = value
        reading.nvlink_errors, reading.nvlink_bytes = dict(errors.totals), dict(data.totals)

    def _read_gpm(self, device: _Device, reading: DeviceReading) -> None:
        if not device.gpm:
            return
        sample = self._call(device, "gpm_sample_alloc", pynvml.nvmlGpmSampleAlloc)
        if sample is None:
            device.gpm = not self._is_unsupported(device, "gpm_sample_alloc")
            return
        parent = device.parent
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
            self._free_gpm(device, sample)
            if self._is_unsupported(device, "gpm_sample"):
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
            freed = self._free_gpm(device, previous)
        if result is None or not freed:
            return
        for slot, label in enumerate(GPM_METRICS):
            metric = result.metrics[slot]
            if metric.nvmlReturn == pynvml.NVML_SUCCESS:
                reading.gpm[label] = metric.value / 100

    def _free_gpm(self, device: _Device, sample: Any) -> bool:
        """Free a GPM sample; if samples cannot be freed, stop taking them (no leak per poll)."""
        if self._call(device, "gpm_sample_free", _free_sample, sample) is not None:
            return True
        if self._is_unsupported(device, "gpm_sample_free"):
            device.gpm = False
        return False

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
        xids = self._watcher.read(device.key)
        if xids is None:
            return  # XID events unsupported on this device: no XID series
        reading.xid_counts = xids.counts
        reading.last_xid = xids.last or 0
        reading.xid_seen_at = xids.seen_at
        fatal = xids.last_fatal
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


def _where(device: _Device) -> str:
    if device.handle is None and not device.index:
        return "NVML"
    return (
        f"GPU {device.index}/{device.gpu_instance}"
        if device.gpu_instance
        else f"GPU {device.index}"
    )


def _register_xids(device: _Device, event_set: Any) -> bool:
    pynvml.nvmlDeviceRegisterEvents(device.handle, pynvml.nvmlEventTypeXidCriticalError, event_set)
    return True


def _free_sample(sample: Any) -> bool:
    pynvml.nvmlGpmSampleFree(sample)
    return True


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
