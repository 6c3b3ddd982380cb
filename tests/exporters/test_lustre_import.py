"""A client's connection to each target (``osc.*.import``, ``mdc.*.import``): which server
NID it uses and whether it is connected, as ``gotthard_lustre_target_import_connected``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gotthard.exporters.lustre.parse import parse_import
from tests.exporters.test_lustre import LUSTRE, poll, samples, value

HPE_OSC = LUSTRE / "hpe-lustre_exporter/proc/fs/lustre/osc/lustrefs-OST0004-osc-ffff88105db50000"


def test_a_real_import_reads_its_state_and_server_nid() -> None:
    text = (HPE_OSC / "import").read_text()
    assert parse_import(text) == ("FULL", "172.20.20.5@o2ib")


@pytest.mark.parametrize(
    ("state", "connection", "expected"),
    [
        ("DISCONN", "172.20.20.6@o2ib", ("DISCONN", "172.20.20.6@o2ib")),
        # an import that never connected prints no NID
        ("NEW", "<none>", ("NEW", "")),
    ],
)
def test_an_import_in_another_state(state: str, connection: str, expected: tuple[str, str]) -> None:
    text = (HPE_OSC / "import").read_text()
    text = text.replace("state: FULL", f"state: {state}")
    text = text.replace("current_connection: 172.20.20.5@o2ib", f"current_connection: {connection}")
    assert parse_import(text) == expected


def test_an_import_without_a_state_is_an_error() -> None:
    with pytest.raises(ValueError, match="not an import"):
        parse_import("import:\n    name: x\n")


def test_disconnected_and_idle_imports_as_the_alerts_read_them(tmp_path: Path) -> None:
    """CONNECTING (the server does not answer) reads 0; IDLE (unused, closed on purpose)
    and FULL read 1; an unreadable import is counted as an error, nothing is made up."""
    _, combined = poll("combined-2.12")
    parsed = samples(combined)
    osc = {"fs": "testfs", "target": "testfs-OST0000", "component": "osc"}
    assert (
        value(parsed, "gotthard_lustre_target_import_connected", **osc, nid="10.10.0.11@o2ib") == 0
    )
    mdc = {"fs": "testfs", "target": "testfs-MDT0000", "component": "mdc"}
    assert (
        value(parsed, "gotthard_lustre_target_import_connected", **mdc, nid="10.10.0.1@o2ib") == 1
    )
    _, client = poll("client-2.15")
    idle = {"fs": "scratch", "target": "scratch-OST0000", "component": "osc"}
    assert value(
        samples(client), "gotthard_lustre_target_import_connected", **idle, nid="10.10.0.11@o2ib"
    )

    tree = tmp_path / "tree"
    shutil.copytree(LUSTRE / "combined-2.12", tree)
    broken = tree / "proc/fs/lustre/osc/testfs-OST0000-osc-ffff9a4c2d1e8000/import"
    broken.write_text("garbage\n")
    snapshot, text = poll(tree)
    assert snapshot.errors == 1
    assert ("testfs", "testfs-OST0000", "osc") not in snapshot.imports
    assert "gotthard_lustre_target_import_connected{" in text
