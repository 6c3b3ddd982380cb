"""The one field table: complete, and read the same way by the three backends.

The same node, job or partition written as each source writes it (a ``sinfo``/``squeue``
row, a slurmrestd record of v0.0.38 and of v0.0.40+, a pyslurm object) must come out as
the same record; the keys the table names for slurmrestd v0.0.38 must be in the recorded
Slurm 22.05 answers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gotthard.exporters.slurm.render import render
from gotthard.slurm.fields import (
    CONTROLLER_FIELDS,
    JOB_FIELDS,
    NODE_FIELDS,
    PARTITION_FIELDS,
    RESERVATION_FIELDS,
    Derived,
    Field,
    RecordReader,
    TextReader,
    job_from,
    node_from,
    partition_from,
)
from gotthard.slurm.rest_json import map_job, map_node, map_partition
from gotthard.slurm.snapshot import JobRecord, Node, PollOptions, SlurmSnapshot
from gotthard.slurm.text import NODE_COLUMNS, parse_sinfo_nodes, parse_sinfo_partitions
from tests.exporters.test_slurm_pyslurm import fake_job, fake_node, fake_partition

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurm-22.05"
MIB = 1024 * 1024
EVERY_USER = PollOptions(per_user=True)


def recorded(endpoint: str) -> list[dict[str, Any]]:
    document = json.loads((FIXTURES / f"slurmrestd-v0.0.38-{endpoint}.json").read_text())
    records: list[dict[str, Any]] = document[endpoint]
    return records


def wrapped(number: int) -> dict[str, Any]:
    return {"set": True, "infinite": False, "number": number}


def sinfo_rows(partitions: tuple[str, ...], **cells: str) -> str:
    """What ``sinfo -N -O`` prints for one node (a row per partition), in the columns the
    reader asks for; a column the test does not give is a KeyError."""
    return "".join(
        "".join({**cells, "Partition": partition}[column] + "|" for column in NODE_COLUMNS.columns)
        + "\n"
        for partition in partitions
    )


def test_every_node_attribute_has_a_row_or_is_derived() -> None:
    rows = {field.name for field in NODE_FIELDS}
    # the state row gives the base state and the flags
    assert rows | {"flags"} == set(Node._fields)


@pytest.mark.parametrize(
    ("fields", "endpoint"),
    [
        (NODE_FIELDS, "nodes"),
        (JOB_FIELDS, "jobs"),
        (PARTITION_FIELDS, "partitions"),
        (RESERVATION_FIELDS, "reservations"),
        (CONTROLLER_FIELDS, "pings"),
    ],
)
def test_slurmrestd_keys_are_in_the_recorded_v0038_answers(
    fields: tuple[Field, ...], endpoint: str
) -> None:
    if endpoint == "pings":
        keys = set(json.loads((FIXTURES / "slurmrestd-v0.0.38-ping.json").read_text())["pings"][0])
    else:
        keys = set().union(*(record.keys() for record in recorded(endpoint)))
    for field in fields:
        source = field.rest
        if source is None:
            continue
        names = source.reads if isinstance(source, Derived) else source
        # each field in at least one of its names (the others are newer versions')
        assert keys & {name.split(".")[0] for name in names}, field.name


def test_a_column_without_the_part_asked_for_is_an_error() -> None:
    reader = TextReader(PARTITION_FIELDS)
    with pytest.raises(ValueError, match="CPUsState"):
        reader.row(["debug*", "up", "1", "2/0"])
    with pytest.raises(ValueError, match="columns"):
        reader.row(["debug*", "up"])


def test_a_record_without_a_required_field_is_an_error() -> None:
    with pytest.raises(ValueError, match="name"):
        RecordReader(NODE_FIELDS, "pyslurm").values(fake_node(**{**PYSLURM_NODE001, "name": None}))
    with pytest.raises(KeyError):
        RecordReader(NODE_FIELDS, "rest").values({"state": "idle"})


# --- the same node from every source ------------------------------------------------------

#: node001 of the recorded slurmrestd answer: allocated, both CPUs busy, one GPU of two.
RECORDED_NODE = Node(
    name="node001",
    state="allocated",
    partitions=("debug", "gpu"),
    cpus_alloc=2,
    cpus_total=2,
    memory_total_bytes=20000 * MIB,
    memory_alloc_bytes=2000 * MIB,
    gpus_total=2,
    gpus_alloc=1,
    cpu_load=0.16,
)


#: The same node as pyslurm 25.11's ``Node`` describes it (a strict fake: see
#: test_slurm_pyslurm.py).
PYSLURM_NODE001: dict[str, Any] = {
    "name": "node001",
    "state": "ALLOCATED",
    "partitions": ["debug", "gpu"],
    "total_cpus": 2,
    "allocated_cpus": 2,
    "idle_cpus": 0,
    "real_memory": 20000,
    "allocated_memory": 2000,
    "configured_gres": {"gpu": 2},
    "allocated_gres": {"gpu": 1},
    "reason": None,
    "cpu_load": 0.16,
}


def test_the_recorded_node_reads_the_same_from_every_source() -> None:
    sinfo = sinfo_rows(
        ("debug*", "gpu"),
        NodeList="node001",
        StateComplete="allocated",
        CPUsState="2/0/0/2",
        Memory="20000",
        AllocMem="2000",
        Gres="gpu:2",
        GresUsed="gpu:1",
        CPUsLoad="0.16",
        Reason="none",
    )
    (record,) = recorded("nodes")
    v40 = {
        **record,
        "state": ["ALLOCATED"],
        "real_memory": 20000,
        "cpus": 2,
        "alloc_cpus": 2,
        "idle_cpus": 0,
    }
    del v40["state_flags"]
    pyslurm = fake_node(**PYSLURM_NODE001)
    from_sinfo = parse_sinfo_nodes(sinfo)
    assert from_sinfo.errors == 0
    assert from_sinfo.nodes == (RECORDED_NODE,)
    assert map_node(record) == RECORDED_NODE
    assert map_node(v40) == RECORDED_NODE
    assert node_from(RecordReader(NODE_FIELDS, "pyslurm").values(pyslurm)) == RECORDED_NODE


def test_a_drained_node_reads_the_same_from_every_source() -> None:
    expected = Node(
        name="n7",
        state="mixed",
        flags=("drain",),
        partitions=("gpu",),
        cpus_alloc=32,
        cpus_other=96,  # like sinfo: a drained node's free CPUs are not idle
        cpus_total=128,
        memory_total_bytes=1024000 * MIB,
        memory_alloc_bytes=131072 * MIB,
        gpus_total=8,
        gpus_alloc=4,
        reason="gpu lost: XID 79",
        cpu_load=3.5,
    )
    sinfo = sinfo_rows(
        ("gpu",),
        NodeList="n7",
        StateComplete="mixed+drain",
        CPUsState="32/0/96/128",
        Memory="1024000",
        AllocMem="131072",
        Gres="gpu:h100:8(S:0-1)",
        GresUsed="gpu:h100:4(IDX:0-3)",
        CPUsLoad="3.50",
        Reason="gpu lost: XID 79",
    )
    v38 = {
        "name": "n7",
        "state": "mixed",
        "state_flags": ["DRAIN"],
        "partitions": ["gpu"],
        "cpus": 128,
        "alloc_cpus": 32,
        "idle_cpus": 96,
        "real_memory": 1024000,
        "alloc_memory": 131072,
        "gres": "gpu:h100:8(S:0-1)",
        "gres_used": "gpu:h100:4(IDX:0-3)",
        "reason": "gpu lost: XID 79",
        "cpu_load": 350,  # hundredths
    }
    v40 = {**v38, "state": ["MIXED", "DRAIN"], "cpus": wrapped(128), "cpu_load": wrapped(350)}
    del v40["state_flags"]
    pyslurm = fake_node(
        name="n7",
        state="MIXED+DRAIN",
        partitions=["gpu"],
        total_cpus=128,
        allocated_cpus=32,
        idle_cpus=96,
        real_memory=1024000,
        allocated_memory=131072,
        configured_gres={"gpu:h100": 8},
        allocated_gres={"gpu": 4, "gpu:h100": 4},
        reason="gpu lost: XID 79",
        cpu_load=3.5,
    )
    assert parse_sinfo_nodes(sinfo).nodes == (expected,)
    assert map_node(v38) == expected
    assert map_node(v40) == expected
    assert node_from(RecordReader(NODE_FIELDS, "pyslurm").values(pyslurm)) == expected


def test_a_partition_reads_the_same_from_every_source() -> None:
    (from_sinfo,), errors = parse_sinfo_partitions("debug*|up|1|2/0/0/2|\n")
    assert errors == 0
    debug = next(r for r in recorded("partitions") if r["name"] == "debug")
    v40 = {"name": "debug", "partition": {"state": ["UP"], "default": True}}
    v40 |= {"nodes": {"total": 1}, "cpus": {"total": 2}}
    pyslurm = fake_partition(name="debug", state="UP", is_default=True, total_cpus=2)
    from_pyslurm = partition_from(RecordReader(PARTITION_FIELDS, "pyslurm").values(pyslurm))
    assert from_sinfo == map_partition(debug) == map_partition(v40) == from_pyslurm


def test_a_job_reads_the_same_from_slurmrestd_and_pyslurm() -> None:
    """A running task of an array on two nodes with four GPUs per node (squeue -r prints
    such a row as the cli backend groups it; only the per-job backends build records)."""
    expected = JobRecord("20_3", "running", "gpu", "ml", "alice", "None", 16, 8)
    v40 = {
        "job_id": 23,
        "array_job_id": wrapped(20),
        "array_task_id": wrapped(3),
        "job_state": ["RUNNING"],
        "partition": "gpu",
        "account": "ml",
        "user_name": "alice",
        "state_reason": "None",
        "cpus": wrapped(16),
        "node_count": wrapped(2),
        "tasks": wrapped(2),
        "tres_per_node": "gres/gpu:4",
    }
    pyslurm = fake_job(
        id=23,
        array_id=20,
        array_task_id=3,
        partition="gpu",
        account="ml",
        cpus=16,
        num_nodes=2,
        ntasks=2,
        gres_per_node={"gres/gpu": 4},
    )
    assert map_job(v40, EVERY_USER) == expected
    assert job_from(RecordReader(JOB_FIELDS, "pyslurm").values(pyslurm), EVERY_USER) == expected


def test_a_node_without_a_load_gets_no_load_series() -> None:
    """sinfo prints N/A, slurmrestd NO_VAL (v0.0.38) or an unset number (v0.0.39+) for a
    node that has reported no load: no gotthard_slurm_node_cpu_load series, not a made-up 0."""
    (record,) = recorded("nodes")
    cells = dict(
        NodeList="node001",
        StateComplete="idle",
        CPUsState="0/2/0/2",
        Memory="20000",
        AllocMem="0",
        Gres="gpu:2",
        GresUsed="gpu:0",
        Reason="none",
    )
    nodes = [
        *parse_sinfo_nodes(sinfo_rows(("debug*",), **cells, CPUsLoad="N/A")).nodes,
        map_node({**record, "cpu_load": 4294967294}),
        map_node({**record, "cpu_load": {"set": False, "infinite": False, "number": 0}}),
    ]
    assert [node.cpu_load for node in nodes] == [None, None, None]
    snapshot = SlurmSnapshot(up=True, nodes=(nodes[0],))
    families = {family.name: family for family in render(snapshot, PollOptions())}
    assert families["gotthard_slurm_node_cpu_load"].samples == []
