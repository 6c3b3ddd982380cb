"""Builds fake ``/sys`` trees with HPE Slingshot (Cassini) NICs for tests and benchmarks.

Written from the documented sysfs formats (shs-cxi-driver ``sysfs-class-cxi`` ABI and
``cass_telem.c``: ``VALUE@SECONDS.NANOSECONDS``), not copied from a real node. The
telemetry item names below are a subset of the real Cassini-1 and Cassini-2 name lists
(``c1telem_attrs`` / ``c2telem_attrs`` in shs-cassini-headers
``include/cassini-telemetry-sysfs-defs.h``): every item the collector allow-lists,
plus some it does not (for ``--slingshot.extra-counters``).

The layout mirrors a real node, symlinks included::

    devices/pci0000:00/0000:00:0N.0/0000:NN:00.0/   the NIC's PCI function
        telemetry/ properties/ uc/ fru/ link_restarts/ port/
        cxi/cxiN/device -> ../..
        net/hsnN/device -> ../..
    class/cxi/cxiN -> ../../devices/.../cxi/cxiN
    class/net/hsnN -> ../../devices/.../net/hsnN
    class/net/lo/                                    (no device: not a NIC)

Counter values are deterministic: ``base + per_second * elapsed`` modulo 2**56, and
each file's timestamp is ``now + elapsed``, so two trees built with different
*elapsed* give known rates. Run as a script to (re)write the committed static tree::

    python -m tests.exporters.slingshot_tree tests/fixtures/slingshot/node
"""

from __future__ import annotations

import shutil
import sys
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

MODULUS = 1 << 56
#: 2024-12-02T14:33:20Z: the default "now" of the fixtures.
NOW = 1_733_150_000


def _n(pattern: str, count: int, start: int = 0) -> list[str]:
    return [pattern.format(i) for i in range(start, start + count)]


#: Telemetry items present on both generations (all in c1telem_attrs and c2telem_attrs).
COMMON_ITEMS: tuple[str, ...] = (
    "hni_pcs_good_cw",
    "hni_pcs_corrected_cw",
    "hni_pcs_uncorrected_cw",
    *_n("hni_pcs_fecl_errors_{}", 8),
    "hni_llr_tx_replay_event",
    "hni_llr_rx_replay_event",
    *_n("hni_pause_recv_{}", 8),
    *_n("hni_pause_xoff_sent_{}", 8),
    *_n("hni_rx_paused_{}", 8),
    "hni_rx_paused_std",
    *_n("hni_tx_paused_{}", 8),
    *_n("hni_discard_cntr_{}", 8),
    *_n("hni_pfc_fifo_oflw_cntr_{}", 8),
    "hni_rx_bad_ieee",
    "hni_rx_bad_opt",
    "hni_rx_fragment",
    "hni_rx_jabber",
    "hni_tx_poisoned_ieee",
    "hni_tx_poisoned_opt",
    "pct_spt_timeouts",
    "pct_sct_timeouts",
    "pct_tct_timeouts",
    "pct_retry_srb_requests",
    "pct_no_tct_nacks",
    "pct_no_trs_nacks",
    "pct_no_mst_nacks",
    "pct_bad_seq_nacks",
    "pct_resource_busy",
    "pct_no_matching_tct",
    "pct_trs_rsp_nack_drops",
    "pct_req_tct_tmout_drops",
    "ixe_rx_pkt_drop_pct",
    "ixe_rx_pkt_drop_rmu_norsp",
    "ixe_rx_pkt_drop_rmu_wrsp",
    "ixe_rx_pkt_drop_ixe_parser",
    "hni_sts_tx_ok_octets",
    "hni_sts_rx_ok_octets",
    *_n("hni_pkts_sent_by_tc_{}", 8),
    *_n("hni_pkts_recv_by_tc_{}", 8),
    "atu_pcie_err_poisoned",
    "atu_pcie_unsuccess_cmpl",
    "ixe_dmawr_pcie_err_poisoned",
    "ixe_dmawr_pcie_unsuccess_cmpl",
    *(
        f"{block}_mem_{kind}_err_cntr"
        for block in ("atu", "cq", "ee", "ixe", "lpe", "mst", "oxe", "pct", "rmu")
        for kind in ("cor", "ucor")
    ),
    "hni_cor_ecc_err_cntr",
    "hni_ucor_ecc_err_cntr",
    # not allow-listed: reachable with --slingshot.extra-counters
    "hni_pause_sent",
    "hni_fgfc_event_xoff",
    "hni_fgfc_event_xon",
    "hni_fgfc_discard",
    "hni_rx_ok_ieee",
    "hni_tx_ok_ieee",
    "ixe_hdr_checksum_errors",
    *_n("ixe_tc_req_ecn_pkts_{}", 8),
    "parbs_tarb_pi_posted_blocked_cnt",
    "parbs_tarb_pi_posted_pkts",
    "cq_sts_credits_in_use_tou_fq_credits",
    *_n("cq_sts_fq_load_{}", 4),
    "ee_sts_ecbs_in_use_ecbs_in_use",
)
#: Items only Cassini-2 has (in c2telem_attrs, not in c1telem_attrs).
C2_ONLY_ITEMS: tuple[str, ...] = (
    *_n("hni_pcs_fecl_errors_{}", 8, start=8),
    *_n("hni_pcs_corrected_cw_bin_{}", 15),
    "hni_llr_tx_llr_blocked",
    "oxe_spt_cdt_errs",
)
#: Gauges (UGAUGE) among the items: written as small values that do not grow.
GAUGE_PREFIXES = ("cq_sts_", "ee_sts_", "lpe_sts_")

#: Bytes per second on the wire for the rate tests: 100 Gb/s received, 40 Gb/s sent.
RATES: dict[str, int] = {
    "hni_sts_rx_ok_octets": 12_500_000_000,
    "hni_sts_tx_ok_octets": 5_000_000_000,
    "hni_pcs_good_cw": 250_000_000,
    "hni_pcs_corrected_cw": 4,
}


def items(generation: int) -> tuple[str, ...]:
    return COMMON_ITEMS + (C2_ONLY_ITEMS if generation == 2 else ())


def base_value(device: int, item: str) -> int:
    return (zlib.crc32(item.encode()) % 1_000_000) * (device + 1)


def per_second(item: str) -> int:
    if item.startswith(GAUGE_PREFIXES):
        return 0
    return RATES.get(item, zlib.crc32(item.encode()) % 97)


@dataclass
class Nic:
    """One NIC of the tree; everything not given gets realistic defaults."""

    index: int
    generation: int = 1
    link_up: bool = True
    #: Epoch seconds written to link_restarts/time_0.. (the rest of the 10 slots are 0).
    restarts: Sequence[int] = ()
    #: Paths below the PCI device directory not to write (``telemetry/hni_rx_jabber``).
    missing: Iterable[str] = ()
    #: Paths below the PCI device directory -> raw content (replaces the default).
    overrides: dict[str, str] = field(default_factory=dict)
    #: Telemetry item -> starting value instead of the default (``2**56 - 5``).
    bases: dict[str, int] = field(default_factory=dict)
    interface: bool = True


def _pci(nic: Nic) -> str:
    bus = 0x21 + 0x20 * nic.index
    return f"devices/pci0000:00/0000:00:0{nic.index + 1}.0/0000:{bus:02x}:00.0"


def nic_files(nic: Nic, *, now: int = NOW, elapsed: int = 0) -> dict[str, str]:
    """Relative path below the PCI device directory -> content."""
    c2 = nic.generation == 2
    seconds = now + elapsed
    state = "up" if nic.link_up else "down"
    files: dict[str, str] = {
        "properties/cassini_version": "2.0\n" if c2 else "1.1\n",
        "properties/nid": f"0x{0x12 + nic.index:x}\n",
        "properties/nic_addr": f"0x{0x12 + nic.index:x}\n",
        "properties/speed": ("400000\n" if c2 else "200000\n") if nic.link_up else "0\n",
        "properties/link": "1\n" if nic.link_up else "0\n",
        "properties/pid_granule": "256\n",
        "properties/hpc_mtu": "2112\n",
        "properties/driver_rev": "5f3c2a1\n",
        "properties/current_esm_link_speed": "Disabled\n",
        "properties/pcie_corr_err": f"{3 * nic.index}\n",
        "properties/pcie_uncorr_err": "0\n",
        "uc/qspi_blob_version": "2.1.0.101\n" if c2 else "1.6.0.326\n",
        "fru/description": "SS11 200Gb 2P NIC Mezz\n" if not c2 else "SS11 400Gb NIC\n",
        "fru/part_number": "P43012-001\n",
        "fru/serial_number": f"GR2112000{nic.index}\n",
        "uevent": f"DRIVER=cxi_ss1\nPCI_SLOT_NAME={_pci(nic).rsplit('/', 1)[1]}\n",
    }
    slots = [*nic.restarts, *[0] * 10][:10]
    for slot, stamp in enumerate(slots):
        files[f"link_restarts/time_{slot}"] = f"{stamp}\n"
    if c2:
        files["port/0/link/state"] = state  # the SL driver prints without a newline
        files["port/0/link/speed"] = "CK_400G"
        files["port/0/media/type"] = "electrical"
        files["port/0/llr/state"] = "on"
        files["port/0/pause"] = "pfc/802.1qbb"
    else:
        files["port/link"] = state  # cass_sbl.c prints without a newline
        files["port/speed"] = "BS_200G"
        files["port/link_layer_retry"] = "on"
        files["port/loopback"] = "off"
        files["port/media"] = "electrical"
        files["port/pause"] = "pfc/802.1qbb"
        files["port/mtu"] = "2112"
    nanos = 123_456_789 + 1000 * nic.index
    for item in items(nic.generation):
        value = nic.bases.get(item, base_value(nic.index, item)) + per_second(item) * elapsed
        files[f"telemetry/{item}"] = f"{value % MODULUS}@{seconds}.{nanos:09d}\n"
    for path in nic.missing:
        files.pop(path, None)
    files.update(nic.overrides)
    return files


def build(root: Path, nics: Sequence[Nic], *, now: int = NOW, elapsed: int = 0) -> Path:
    """Write a sysfs tree under *root* (created; an existing tree is replaced)."""
    if root.exists():
        shutil.rmtree(root)
    (root / "class" / "cxi").mkdir(parents=True)
    (root / "class" / "net" / "lo").mkdir(parents=True)
    (root / "class" / "net" / "lo" / "address").write_text("00:00:00:00:00:00\n")
    for nic in nics:
        pci = root / _pci(nic)
        for rel, content in nic_files(nic, now=now, elapsed=elapsed).items():
            path = pci / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
        cxi = pci / "cxi" / f"cxi{nic.index}"
        cxi.mkdir(parents=True)
        (cxi / "device").symlink_to("../..")
        (root / "class" / "cxi" / f"cxi{nic.index}").symlink_to(
            f"../../{_pci(nic)}/cxi/cxi{nic.index}"
        )
        if nic.interface:
            net = pci / "net" / f"hsn{nic.index}"
            net.mkdir(parents=True)
            (net / "device").symlink_to("../..")
            (net / "address").write_text(f"02:00:00:00:00:{0x12 + nic.index:02x}\n")
            (root / "class" / "net" / f"hsn{nic.index}").symlink_to(
                f"../../{_pci(nic)}/net/hsn{nic.index}"
            )
    return root


def telemetry_path(root: Path, nic: Nic, item: str) -> Path:
    return root / _pci(nic) / "telemetry" / item


def device_path(root: Path, nic: Nic) -> Path:
    return root / _pci(nic)


#: The committed static tree (tests/fixtures/slingshot/node): one Cassini-1 NIC
#: (cxi0/hsn0) with a corrected-codeword counter 5 below the 56-bit wrap, one
#: Cassini-2 NIC (cxi1/hsn1) with old restarts, one missing telemetry file and one
#: missing properties file.
STATIC_NICS: tuple[Nic, ...] = (
    Nic(0, generation=1, bases={"hni_pcs_corrected_cw": MODULUS - 5}),
    Nic(
        1,
        generation=2,
        restarts=(NOW - 86_400, NOW - 90_000, NOW - 100_000),
        missing=("telemetry/hni_rx_jabber", "properties/pcie_uncorr_err"),
    ),
)


def four_nics(generation: int = 1) -> list[Nic]:
    """A GPU node's four NICs of one generation, all healthy."""
    return [Nic(i, generation=generation) for i in range(4)]


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/slingshot/node")
    build(target, STATIC_NICS)
    print(f"wrote {target}")
