"""Per-controller state (``gotthard_slurm_controller_up``) from ``scontrol ping`` and
slurmrestd /ping.

The two-controller outputs below are written in the exact format Slurm 22.05's scontrol
prints (``Slurmctld(<mode>) at <host> is UP|DOWN``, then a banner of ``*`` lines when one
is down); the one-controller output is the real recording in ``fixtures/slurm-22.05``.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from gotthard.exporters.families import render_text
from gotthard.exporters.slurm.render import render
from gotthard.slurm.cli import CommandOutput, assemble
from gotthard.slurm.rest_json import map_controllers, map_ping
from gotthard.slurm.snapshot import (
    Controller,
    PollOptions,
    SlurmSnapshot,
    controller_role,
)
from gotthard.slurm.text import parse_ping
from tests.exporters.test_slurm_cli import OPTIONS, outputs, read

PRIMARY_DOWN = """\
Slurmctld(primary) at ctl1 is DOWN
Slurmctld(backup) at ctl2 is UP
*****************************************
** RESTORE SLURMCTLD DAEMON TO SERVICE **
*****************************************
"""
BOTH_UP = "Slurmctld(primary) at ctl1 is UP\nSlurmctld(backup) at ctl2 is UP\n"


def cli_outputs(ping: str, error: str = "") -> dict[str, CommandOutput]:
    """The recorded poll's outputs with *ping* as scontrol ping's (and *error*, if it failed)."""
    return {**outputs(), "ping": CommandOutput(ping, error)}


def rest_ping(*entries: tuple[str, str, str]) -> dict[str, Any]:
    """A v0.0.38 /ping document (the recorded one) with the given (host, answer, mode)."""
    document = json.loads(read("slurmrestd-v0.0.38-ping.json"))
    template = document["pings"][0]
    document["pings"] = [
        {**copy.deepcopy(template), "hostname": host, "ping": answer, "mode": mode}
        for host, answer, mode in entries
    ]
    return document


def controller_lines(snapshot: SlurmSnapshot) -> list[str]:
    text = render_text(render(snapshot, OPTIONS))
    return [line for line in text.splitlines() if "gotthard_slurm_controller_up" in line]


def test_recorded_ping_is_one_primary_up() -> None:
    assert parse_ping(read("gotthard-scontrol-ping.txt")) == (
        (Controller("node001", "primary", 0, True),),
        0,
    )


def test_primary_down_backup_up_is_read_and_the_banner_skipped() -> None:
    assert parse_ping(PRIMARY_DOWN) == (
        (Controller("ctl1", "primary", 0, False), Controller("ctl2", "backup", 1, True)),
        0,
    )


def test_numbered_backups_and_unknown_lines() -> None:
    text = (
        "Slurmctld(primary) at ctl1 is UP\n"
        "Slurmctld(backup1) at ctl2 is DOWN\n"
        "Slurmctld(primary/backup2) at ctl3 is UP\n"
        "something else entirely\n"
    )
    controllers, errors = parse_ping(text)
    assert [(c.hostname, c.role, c.index, c.up) for c in controllers] == [
        ("ctl1", "primary", 0, True),
        ("ctl2", "backup", 1, False),
        ("ctl3", "primary", 2, True),
    ]
    assert errors == 1


@pytest.mark.parametrize(
    ("mode", "index", "role"),
    [
        ("primary", 0, "primary"),
        ("backup", 1, "backup"),
        ("BACKUP2", 2, "backup"),
        ("", 0, "primary"),
        ("", 1, "backup"),
    ],
)
def test_controller_role(mode: str, index: int, role: str) -> None:
    assert controller_role(mode, index) == role


def test_cli_keeps_controllers_when_scontrol_exits_non_zero() -> None:
    snapshot = assemble(cli_outputs(PRIMARY_DOWN, error="scontrol exited 1: no message"), OPTIONS)
    assert not snapshot.probes[0].success
    assert [c.up for c in snapshot.controllers] == [False, True]
    assert controller_lines(snapshot) == [
        "# HELP gotthard_slurm_controller_up 1 if the slurmctld answered the ping probe; "
        "role is primary or backup, index its position in SlurmctldHost.",
        "# TYPE gotthard_slurm_controller_up gauge",
        'gotthard_slurm_controller_up{controller="ctl1",role="primary",index="0"} 0',
        'gotthard_slurm_controller_up{controller="ctl2",role="backup",index="1"} 1',
    ]


def test_garbage_ping_is_counted_not_raised() -> None:
    clean = assemble(cli_outputs(BOTH_UP), OPTIONS)
    garbage = assemble(cli_outputs("Slurmctld at nowhere\n"), OPTIONS)
    assert garbage.errors == clean.errors + 1
    assert garbage.controllers == ()
    assert controller_lines(garbage) == []


def test_without_the_probe_there_is_no_controller_series() -> None:
    without_ping = cli_outputs(BOTH_UP)
    del without_ping["ping"]
    snapshot = assemble(without_ping, PollOptions(probe=False))
    assert snapshot.controllers == ()
    assert controller_lines(snapshot) == []


def test_map_controllers_v38_and_newer_shapes() -> None:
    recorded = json.loads(read("slurmrestd-v0.0.38-ping.json"))
    assert map_controllers(recorded) == ((Controller("node001", "primary", 0, True),), 0)
    newer = {
        "pings": [
            {"hostname": "ctl1", "pinged": "DOWN", "responding": False, "primary": True},
            {"hostname": "ctl2", "pinged": "UP", "responding": True, "primary": False},
            {"pinged": "UP"},
            "not an entry",
        ]
    }
    assert map_controllers(newer) == (
        (Controller("ctl1", "primary", 0, False), Controller("ctl2", "backup", 1, True)),
        2,
    )
    assert map_controllers({"pings": None}) == ((), 0)


@pytest.mark.parametrize(
    ("text", "entries"),
    [
        (PRIMARY_DOWN, [("ctl1", "DOWN", "primary"), ("ctl2", "UP", "backup")]),
        (BOTH_UP, [("ctl1", "UP", "primary"), ("ctl2", "UP", "backup")]),
        (read("gotthard-scontrol-ping.txt"), [("node001", "UP", "primary")]),
    ],
)
def test_cli_and_rest_render_the_same_controller_series(
    text: str, entries: list[tuple[str, str, str]]
) -> None:
    document = rest_ping(*entries)
    controllers, errors = map_controllers(document)
    assert errors == 0
    rest_snapshot = SlurmSnapshot(up=True, controllers=controllers)
    cli_snapshot = SlurmSnapshot(up=True, controllers=parse_ping(text)[0])
    assert controller_lines(cli_snapshot) == controller_lines(rest_snapshot)
    assert len(controller_lines(cli_snapshot)) == 2 + len(entries)
    # the probe itself still says whether any controller answers, in both backends
    assert map_ping(document)[0] == (" is UP" in text)
