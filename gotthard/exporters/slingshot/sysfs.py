"""The sysfs source of the ``slingshot`` collector: discovery, then cheap reads.

Layout (below ``--path.sysfs``, default ``/sys``)::

    class/cxi/cxiN/device/            the NIC's PCI device directory
        telemetry/<item>              "VALUE@SECONDS.NANOSECONDS\\n", 56-bit counters
        properties/{cassini_version,nid,speed,link,pcie_corr_err,pcie_uncorr_err}
        uc/qspi_blob_version          firmware
        link_restarts/time_0..time_9  epoch seconds of recent link restarts, "0" = unused
        port/{link,speed}             Cassini-1
        port/0/link/{state,speed}     Cassini-2
    class/net/hsnN/device/cxi/cxiN    maps the interface hsnN to the NIC cxiN

Discovery (listing ``class/cxi``, ``class/net`` and each ``telemetry`` directory,
resolving symlinks, picking the Cassini-1 or Cassini-2 port files) runs once and
yields a plan: the absolute paths one poll reads (:meth:`SysfsSource.files`). A poll
lists ``class/cxi`` (to notice a NIC appearing or disappearing) and then only opens,
reads and parses the planned files with ``os.open``/``os.read``; a planned file that
vanished (ENOENT/ENODEV) makes the next poll discover again.

A missing file means no value (the series is absent); an unreadable file or one whose
content does not parse counts one error in the snapshot and the rest is still read.
The ``parse_*`` functions are pure and raise only :class:`ValueError` on bad input.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from gotthard.exporters.slingshot.snapshot import (
    LinkState,
    NicIdentity,
    NicReading,
    SlingshotSnapshot,
)

log = logging.getLogger("gotthard.exporter.slingshot")

T = TypeVar("T")

#: Largest value accepted from a sysfs number (the driver prints ``%llu``).
MAX_U64 = (1 << 64) - 1
#: Bytes read per file. Telemetry lines are at most about 42 bytes; a file that fills
#: the buffer is not a sysfs value we understand and counts as an error.
READ_SIZE = 256
#: Link restart ring buffer slots ``link_restarts/time_0`` .. ``time_9``.
RESTART_SLOTS = 10

_CXI_NAME = re.compile(r"cxi[0-9]+")
_NID = re.compile(rb"0[xX][0-9a-fA-F]+|[0-9]+")
_SPEED_MODE = re.compile(r"([0-9]+)\s*G", re.IGNORECASE)
#: errnos meaning the file (or its device) went away: rediscover, no error.
_GONE = frozenset({errno.ENOENT, errno.ENODEV, errno.ENXIO})


# --------------------------------------------------------------------------- parsing


def _decimal(text: bytes, data: bytes, expected: str, name: str, limit: int = MAX_U64) -> int:
    """*text* (taken from the file content *data*) as an unsigned decimal up to *limit*.

    The errors say what was *expected* (``a restart time``) or which value (*name*) is out of
    range, and quote the start of the raw content.
    """
    if not text.isdigit():
        raise ValueError(f"not {expected}: {data[:48]!r}")
    number = int(text)
    if number > limit:
        raise ValueError(f"{name} out of range: {data[:48]!r}")
    return number


def parse_telemetry(data: bytes) -> tuple[int, float]:
    """``b"90049@1733150000.123456789\\n"`` -> ``(90049, 1733150000.123456789)``.

    The value is an unsigned decimal (returned as an exact int, also near 2**56); the
    timestamp is the driver's CLOCK_REALTIME at the read. A value without ``@`` is
    accepted with a NaN timestamp.
    """
    value, at, stamp = data.partition(b"@")
    if not at:
        value = value.strip()
    number = _decimal(value, data, "a telemetry value", "telemetry value")
    if not at:
        return number, math.nan
    seconds = float(stamp)  # ValueError on garbage; cheaper than validating digits first
    if not 0.0 <= seconds < 1e11:  # NaN, inf, negative or absurd
        raise ValueError(f"not a telemetry timestamp: {data[:48]!r}")
    return number, seconds


def parse_uint(data: bytes) -> int:
    """An unsigned decimal such as ``properties/speed`` or ``pcie_corr_err``."""
    return _decimal(data.strip(), data, "an unsigned integer", "integer")


def parse_nid(data: bytes) -> int:
    """``properties/nid``: ``0x12`` (the driver prints ``0x%x``); plain decimal accepted."""
    text = data.strip()
    if not _NID.fullmatch(text):
        raise ValueError(f"not a NID: {data[:48]!r}")
    number = int(text, 0) if text[:2] in (b"0x", b"0X") else int(text)
    if number > MAX_U64:
        raise ValueError(f"NID out of range: {data[:48]!r}")
    return number


def parse_text(data: bytes) -> str:
    """A one-line printable ASCII value (``up``, ``BS_200G``, ``1.1``, ``1.6.0.326``)."""
    text = data.strip().decode("ascii")  # UnicodeDecodeError is a ValueError
    if not text or not text.isprintable():
        raise ValueError(f"not a printable value: {data[:48]!r}")
    return text


def parse_flag(data: bytes) -> bool:
    """``properties/link``: ``1`` or ``0``."""
    text = data.strip()
    if text == b"1":
        return True
    if text == b"0":
        return False
    raise ValueError(f"not 0 or 1: {data[:48]!r}")


def parse_restart_time(data: bytes) -> int | None:
    """``link_restarts/time_N``: epoch seconds (``%lld``); ``0`` marks an unused slot (None)."""
    return _decimal(data.strip(), data, "a restart time", "restart time", (1 << 63) - 1) or None


def parse_speed_mode(mode: str) -> int:
    """Bits/s from a port speed mode: ``BS_200G`` -> 200e9, ``CK_400G``/``ck400G`` -> 400e9."""
    match = _SPEED_MODE.search(mode)
    if match is None:
        raise ValueError(f"no speed in port mode {mode!r}")
    return int(match.group(1)) * 1_000_000_000


def parse_generation(version: str) -> int:
    """``properties/cassini_version``: ``1.0``/``1.1`` -> 1, ``2.0`` -> 2, else 0."""
    major = version.split(".", 1)[0]
    return int(major) if major in ("1", "2") else 0


# --------------------------------------------------------------------------- the plan


@dataclass(slots=True)
class NicPlan:
    """What discovery found for one NIC: identity and the absolute paths to read."""

    device: str
    interface: str
    generation: int
    #: (telemetry item name, path), allow-listed and extra items that exist.
    telemetry: list[tuple[str, str]] = field(default_factory=list)
    #: properties counter name (``pcie_corr_err``) -> path
    property_counters: list[tuple[str, str]] = field(default_factory=list)
    version: str | None = None
    nid: str | None = None
    firmware: str | None = None
    phy_link: str | None = None
    speed: str | None = None
    port_state: str | None = None
    port_mode: str | None = None
    #: link_restarts/time_N paths that exist; None without a link_restarts directory
    restarts: list[str] | None = None

    def files(self) -> list[str]:
        """The paths :meth:`SysfsSource.poll` reads for this NIC, in its reading order."""
        singles = (
            self.version,
            self.nid,
            self.firmware,
            self.port_mode,
            self.speed,
            self.port_state,
            self.phy_link,
        )
        out = [path for path in singles if path is not None]
        out.extend(self.restarts or ())
        out.extend(path for _, path in self.property_counters)
        out.extend(path for _, path in self.telemetry)
        return out


def _nic_sort_key(name: str) -> tuple[int, str]:
    return (int(name[3:]), name)


# --------------------------------------------------------------------------- the source


class SysfsSource:
    """Discovers the NICs once, then reads the planned files on every :meth:`poll`.

    *telemetry* maps each allow-listed telemetry item to the Cassini generations that
    have it; *extra* selects further items (anchored match) read for
    ``gotthard_slingshot_counter``; *property_counters* names ``properties`` files read as
    counters. *clock* is "now" for the snapshot (restart windows).
    """

    def __init__(
        self,
        root: str = "/sys",
        *,
        telemetry: Mapping[str, frozenset[int]],
        property_counters: tuple[str, ...] = ("pcie_corr_err", "pcie_uncorr_err"),
        extra: re.Pattern[str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.root = root
        self._telemetry = dict(telemetry)
        self._property_counters = property_counters
        self._extra = extra
        self._clock = clock
        self._cxi_dir = os.path.join(root, "class", "cxi")
        self._net_dir = os.path.join(root, "class", "net")
        self._listed: list[str] | None = None
        self._plans: list[NicPlan] = []
        self._rediscover = True
        self._errors = 0
        self._warned: set[str] = set()
        #: How many times discovery ran (for tests).
        self.discoveries = 0

    # ------------------------------------------------------------------ public

    @property
    def plans(self) -> list[NicPlan]:
        return self._plans

    def files(self) -> list[str]:
        """The absolute paths one poll opens and reads, in the order it reads them.

        Discovers first when needed. Besides these files, a poll lists ``class/cxi``
        once to notice NICs coming and going. Meant for benchmarks: a bare loop over
        these paths reads exactly what the collector reads.
        """
        self._maybe_discover()
        return [path for plan in self._plans for path in plan.files()]

    def poll(self) -> SlingshotSnapshot:
        self._errors = 0
        self._maybe_discover()
        nics = tuple(self._read_nic(plan) for plan in self._plans)
        return SlingshotSnapshot(nics=nics, now=self._clock(), errors=self._errors)

    # ------------------------------------------------------------------ discovery

    def _list_cxi(self) -> list[str]:
        try:
            names = os.listdir(self._cxi_dir)
        except (FileNotFoundError, NotADirectoryError):
            return []  # no Slingshot NIC (or no cxi driver) on this host: not an error
        except OSError as err:
            self._fail(self._cxi_dir, err)
            return []
        names = [name for name in names if _CXI_NAME.fullmatch(name)]
        names.sort(key=_nic_sort_key)
        return names

    def _maybe_discover(self) -> None:
        names = self._list_cxi()
        if not self._rediscover and names == self._listed:
            return
        self._listed = names
        self._rediscover = False
        self.discoveries += 1
        interfaces = self._interfaces() if names else {}
        plans = []
        for name in names:
            plan = self._discover_nic(name, interfaces.get(name, ""))
            if plan is not None:
                plans.append(plan)
        self._plans = plans
        log.debug("slingshot: discovered %s", ", ".join(p.device for p in plans) or "no NICs")

    def _interfaces(self) -> dict[str, str]:
        """cxiN -> hsnN through ``class/net/<iface>/device/cxi/cxiN``."""
        found: dict[str, str] = {}
        try:
            ifaces = sorted(os.listdir(self._net_dir))
        except OSError:
            return found
        for iface in ifaces:
            try:
                nics = os.listdir(os.path.join(self._net_dir, iface, "device", "cxi"))
            except OSError:
                continue  # lo, eth0, ...: not a CXI interface
            for nic in nics:
                found.setdefault(nic, iface)
        return found

    def _discover_nic(self, name: str, interface: str) -> NicPlan | None:
        device = os.path.join(self._cxi_dir, name, "device")
        if not os.path.isdir(device):
            log.debug("slingshot: %s has no device directory", device)
            return None
        base = os.path.realpath(device)  # resolve the symlinks once, not on every open

        def path(*parts: str) -> str | None:
            full = os.path.join(base, *parts)
            return full if os.path.lexists(full) else None

        plan = NicPlan(device=name, interface=interface, generation=0)
        plan.version = path("properties", "cassini_version")
        plan.nid = path("properties", "nid")
        plan.firmware = path("uc", "qspi_blob_version")
        plan.phy_link = path("properties", "link")
        plan.speed = path("properties", "speed")
        for counter in self._property_counters:
            found = path("properties", counter)
            if found is not None:
                plan.property_counters.append((counter, found))

        generation = 0
        if plan.version is not None:
            try:
                generation = parse_generation(parse_text(_read_quiet(plan.version)))
            except (OSError, ValueError):
                generation = 0  # the poll reads it again and counts the error
        c2_port = os.path.isdir(os.path.join(base, "port", "0"))
        c1_port = os.path.lexists(os.path.join(base, "port", "link"))
        if generation == 0:
            generation = 2 if c2_port else 1 if c1_port else 0
        plan.generation = generation
        if c2_port:
            plan.port_state = path("port", "0", "link", "state")
            plan.port_mode = path("port", "0", "link", "speed")
        elif c1_port:
            plan.port_state = path("port", "link")
            plan.port_mode = path("port", "speed")

        restarts_dir = os.path.join(base, "link_restarts")
        if os.path.isdir(restarts_dir):
            slots = (path("link_restarts", f"time_{slot}") for slot in range(RESTART_SLOTS))
            plan.restarts = [slot for slot in slots if slot is not None]

        telemetry_dir = os.path.join(base, "telemetry")
        try:
            items = sorted(os.listdir(telemetry_dir))
        except FileNotFoundError:
            items = []  # no telemetry (a VF with telemetry disabled): no counters
        except OSError as err:
            self._fail(telemetry_dir, err)
            items = []
        allowed = self._telemetry
        extra = self._extra
        for item in items:
            generations = allowed.get(item)
            if generations is not None:
                wanted = generation == 0 or generation in generations
            else:
                wanted = extra is not None and extra.fullmatch(item) is not None
            if wanted:
                plan.telemetry.append((item, os.path.join(telemetry_dir, item)))
        return plan

    # ------------------------------------------------------------------ reading

    def _fail(self, path: str, err: BaseException) -> None:
        self._errors += 1
        level = logging.DEBUG if path in self._warned else logging.WARNING
        self._warned.add(path)
        log.log(level, "slingshot: %s: %s", path, err)

    def _read(self, path: str | None) -> bytes | None:
        """The file's bytes; None when missing (no error) or unreadable (one error)."""
        if path is None:
            return None
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as err:
            self._gone_or_fail(path, err)
            return None
        try:
            data = os.read(fd, READ_SIZE)
        except OSError as err:
            self._gone_or_fail(path, err)
            return None
        finally:
            os.close(fd)
        if len(data) >= READ_SIZE:
            self._fail(path, ValueError(f"more than {READ_SIZE - 1} bytes"))
            return None
        return data

    def _gone_or_fail(self, path: str, err: OSError) -> None:
        if err.errno in _GONE:
            self._rediscover = True
            if err.errno != errno.ENOENT:
                self._fail(path, err)
        else:
            self._fail(path, err)

    def _parsed(self, path: str | None, parse: Callable[[bytes], T]) -> T | None:
        data = self._read(path)
        if data is None:
            return None
        try:
            return parse(data)
        except ValueError as err:
            self._fail(path or "", err)
            return None

    def _read_nic(self, plan: NicPlan) -> NicReading:
        parsed = self._parsed
        version = parsed(plan.version, parse_text)
        identity = NicIdentity(
            device=plan.device,
            interface=plan.interface,
            generation=plan.generation,
            cassini_version=version or "",
            nid=parsed(plan.nid, parse_nid),
            firmware=parsed(plan.firmware, parse_text) or "",
        )
        mode = parsed(plan.port_mode, parse_text)
        speed_mbps = parsed(plan.speed, parse_uint)
        speed: int | None = None
        if speed_mbps is not None:
            speed = speed_mbps * 1_000_000
        elif mode is not None:
            try:
                speed = parse_speed_mode(mode)
            except ValueError:
                speed = None  # a mode without a rate ("unknown"): not an error
        link = LinkState(
            state=parsed(plan.port_state, parse_text),
            phy_up=parsed(plan.phy_link, parse_flag),
            mode=mode,
            speed_bits_per_second=speed,
        )
        restarts: tuple[int, ...] | None = None
        if plan.restarts:
            times: list[int] = []
            readable = False
            for slot in plan.restarts:
                data = self._read(slot)
                if data is None:
                    continue
                try:
                    stamp = parse_restart_time(data)
                except ValueError as err:
                    self._fail(slot, err)
                    continue
                readable = True
                if stamp is not None:
                    times.append(stamp)
            if readable:
                restarts = tuple(sorted(times, reverse=True))
        properties: dict[str, int] = {}
        for name, path in plan.property_counters:
            value = parsed(path, parse_uint)
            if value is not None:
                properties[name] = value
        return NicReading(
            identity=identity,
            link=link,
            restarts=restarts,
            counters=self._read_telemetry(plan.telemetry),
            property_counters=properties,
        )

    def _read_telemetry(self, items: list[tuple[str, str]]) -> dict[str, tuple[int, float]]:
        """The hot loop: open, read, close, parse; nothing else per file."""
        counters: dict[str, tuple[int, float]] = {}
        if not items:
            return counters
        os_open, os_close, rdonly = os.open, os.close, os.O_RDONLY
        # Every item lives in one telemetry directory: open it once and open the items
        # relative to it, so the kernel does not walk the long device path per file.
        try:
            directory = os_open(os.path.dirname(items[0][1]), rdonly | os.O_DIRECTORY)
        except OSError as err:
            self._gone_or_fail(os.path.dirname(items[0][1]), err)
            return counters
        try:
            self._read_items(items, directory, counters)
        finally:
            os_close(directory)
        return counters

    def _read_items(
        self,
        items: list[tuple[str, str]],
        directory: int,
        counters: dict[str, tuple[int, float]],
    ) -> None:
        os_open, os_read, os_close, rdonly = os.open, os.read, os.close, os.O_RDONLY
        parse = parse_telemetry
        for name, path in items:
            try:
                fd = os_open(name, rdonly, dir_fd=directory)
            except OSError as err:
                self._gone_or_fail(path, err)
                continue
            try:
                data = os_read(fd, READ_SIZE)
            except OSError as err:
                os_close(fd)
                self._gone_or_fail(path, err)
                continue
            os_close(fd)
            # parse_telemetry inlined for the common well-formed case; anything else
            # goes through it for the exact checks and error messages.
            value, at, stamp = data.partition(b"@")
            if at and value.isdigit() and len(data) < READ_SIZE:
                number = int(value)
                try:
                    seconds = float(stamp)
                except ValueError:
                    seconds = -1.0
                if number <= MAX_U64 and 0.0 <= seconds < 1e11:
                    counters[name] = (number, seconds)
                    continue
            try:
                counters[name] = parse(data)
            except ValueError as err:
                self._fail(path, err)
                continue
            if len(data) >= READ_SIZE:  # a prefix of something longer: not ours
                del counters[name]
                self._fail(path, ValueError(f"more than {READ_SIZE - 1} bytes"))


def _read_quiet(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, READ_SIZE)
    finally:
        os.close(fd)
