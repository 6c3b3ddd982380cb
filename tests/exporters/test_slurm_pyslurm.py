"""pyslurm backend: the mapping, run on strict fakes.

pyslurm 25.11 cannot be built here (Debian 12 ships Slurm 22.05 and pyslurm refuses any
other major release), so nothing here talks to a live pyslurm. The backend runs on fakes
built from the constants that declare what it reads; the fakes use ``__slots__`` and record
reads, so reading anything undeclared fails, and a test checks that the declared lists are
exactly what the mapping reads. ``test_slurm_pyslurm_contract.py`` checks those constants
against the pyslurm 25.11.2 sources.
"""

from __future__ import annotations

import enum
import importlib
import importlib.util
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from gotthard.slurm.fields import RESERVATION_FLAG_NAMES, UNREADABLE_FLAGS
from gotthard.slurm.pyslurm_backend import (
    CONFIG_ATTRIBUTES,
    CONFIG_LOAD,
    ENTRY_POINTS,
    ERROR_CLASS,
    GPU_ATTRIBUTES,
    JOB_ATTRIBUTES,
    JOBS_LOAD,
    NODE_ATTRIBUTES,
    NODES_LOAD,
    PARTITION_ATTRIBUTES,
    PARTITIONS_LOAD,
    PING,
    RESERVATION_ATTRIBUTES,
    RESERVATIONS_LOAD,
    RPC_ATTRIBUTES,
    STATISTICS_ATTRIBUTES,
    STATISTICS_LOAD,
    TRES_ATTRIBUTES,
    PyslurmBackend,
)
from gotthard.slurm.snapshot import (
    JobGroup,
    PollOptions,
    Reservation,
    RpcStat,
    RunningJob,
    SlurmBackend,
    SlurmSnapshot,
    SlurmUnavailable,
)
from gotthard.slurm.values import count_array_tasks, gpu_count

# --- strict fakes ------------------------------------------------------------------------


def _strict_class(name: str, attributes: tuple[str, ...]) -> type:
    """A class that has exactly ``attributes`` (as slots) and records which ones are read."""
    reads: set[str] = set()
    allowed = frozenset(attributes)

    def __init__(self: Any, **values: Any) -> None:
        unknown = set(values) - allowed
        if unknown:
            raise TypeError(f"{name} has no attribute(s) {sorted(unknown)}")
        for key, value in values.items():
            object.__setattr__(self, key, value)

    def __getattribute__(self: Any, attr: str) -> Any:
        if attr in allowed:
            reads.add(attr)
        return object.__getattribute__(self, attr)

    def __repr__(self: Any) -> str:
        return f"{name}(...)"

    return type(
        name,
        (),
        {
            "__slots__": attributes,
            "__init__": __init__,
            "__getattribute__": __getattribute__,
            "__repr__": __repr__,
            "reads": reads,
        },
    )


FakeJob = _strict_class("FakeJob", JOB_ATTRIBUTES)
FakeNode = _strict_class("FakeNode", NODE_ATTRIBUTES)
FakePartition = _strict_class("FakePartition", PARTITION_ATTRIBUTES)
FakeStatistics = _strict_class("FakeStatistics", STATISTICS_ATTRIBUTES)
FakeRpc = _strict_class("FakeRpc", RPC_ATTRIBUTES)
FakeGPU = _strict_class("FakeGPU", GPU_ATTRIBUTES)
FakeTres = _strict_class("FakeTres", TRES_ATTRIBUTES)
FakeConfig = _strict_class("FakeConfig", CONFIG_ATTRIBUTES)
FakeReservation = _strict_class("FakeReservation", RESERVATION_ATTRIBUTES)
#: ``pyslurm.ReservationFlags``: an ``enum.Flag`` with pyslurm's member names.
FakeReservationFlags = enum.Flag("ReservationFlags", list(RESERVATION_FLAG_NAMES))  # type: ignore[misc]


class FakeReoccurrence(enum.StrEnum):
    """``pyslurm.ReservationReoccurrence``: a ``str`` enum whose ``str()`` is its value."""

    NO = "NO"
    DAILY = "DAILY"
    HOURLY = "HOURLY"
    WEEKLY = "WEEKLY"
    WEEKDAY = "WEEKDAY"
    WEEKEND = "WEEKEND"


ALL_FAKES = (
    FakeJob,
    FakeNode,
    FakePartition,
    FakeStatistics,
    FakeRpc,
    FakeGPU,
    FakeTres,
    FakeConfig,
    FakeReservation,
)


class FakeRPCError(Exception):
    """Stands in for ``pyslurm.RPCError``."""


class FakeCollection:
    """A ``MultiClusterMap`` reduced to the one method the backend may call."""

    __slots__ = ("_items",)

    def __init__(self, items: list[Any]) -> None:
        self._items = items

    def values(self) -> list[Any]:
        return list(self._items)


# Defaults follow what pyslurm 25.11 returns for a plain one-CPU running job.
JOB_DEFAULTS: dict[str, Any] = {
    "id": 1,
    "array_id": None,
    "array_task_id": None,
    "array_tasks_waiting": None,
    "state": "RUNNING",
    "state_reason": "None",
    "partition": "debug",
    "account": "physics",
    "user_name": "alice",
    "cpus": 1,
    "num_nodes": 1,
    "ntasks": 1,
    "sockets_per_node": None,
    "gpus": {},
    "tres_per_job": None,
    "gres_per_node": {},
    "tres_per_task": None,
    "tres_per_socket": None,
}
NODE_DEFAULTS: dict[str, Any] = {
    "name": "node001",
    "state": "IDLE",
    "partitions": ["debug"],
    "total_cpus": 4,
    "allocated_cpus": 0,
    "idle_cpus": 4,
    "real_memory": 16000,
    "allocated_memory": 0,
    "configured_gres": {},
    "allocated_gres": {},
    "reason": None,
    "cpu_load": 0.0,
}
PARTITION_DEFAULTS: dict[str, Any] = {
    "name": "debug",
    "state": "UP",
    "is_default": True,
    "total_cpus": 2,
    "total_nodes": 1,
}
STATISTICS_DEFAULTS: dict[str, Any] = {
    "server_thread_count": 3,
    "agent_queue_size": 0,
    "dbd_agent_queue_size": 0,
    "schedule_queue_length": 0,
    "schedule_cycle_counter": 0,
    "schedule_cycle_last": 0,
    "schedule_cycle_max": 0,
    "schedule_cycle_mean": 0,
    "backfill_cycle_counter": 0,
    "backfill_cycle_last": 0,
    "backfill_cycle_mean": 0,
    "backfill_mean_depth": 0,
    "backfill_queue_length": 0,
    "backfilled_jobs": 0,
    "jobs_submitted": 9,
    "jobs_started": 2,
    "jobs_completed": 1,
    "jobs_canceled": 0,
    "jobs_failed": 0,
    "rpcs_by_type": {},
    "rpcs_by_user": {},
}
RESERVATION_DEFAULTS: dict[str, Any] = {
    "name": "maint_window",
    "is_active": True,
    "partition": None,
    "flags": FakeReservationFlags(0),
    "reoccurrence": FakeReoccurrence.NO,
    "node_count": 1,
}


def _build(cls: type, defaults: dict[str, Any], omit: tuple[str, ...], values: Any) -> Any:
    merged = {**defaults, **values}
    for name in omit:
        merged.pop(name)
    return cls(**merged)


def fake_job(omit: tuple[str, ...] = (), **values: Any) -> Any:
    return _build(FakeJob, JOB_DEFAULTS, omit, values)


def fake_node(omit: tuple[str, ...] = (), **values: Any) -> Any:
    return _build(FakeNode, NODE_DEFAULTS, omit, values)


def fake_partition(**values: Any) -> Any:
    return _build(FakePartition, PARTITION_DEFAULTS, (), values)


def fake_statistics(**values: Any) -> Any:
    return _build(FakeStatistics, STATISTICS_DEFAULTS, (), values)


def fake_reservation(omit: tuple[str, ...] = (), **values: Any) -> Any:
    return _build(FakeReservation, RESERVATION_DEFAULTS, omit, values)


@dataclass
class FakePyslurm:
    """A ``pyslurm`` module that has only the declared entry points and ``RPCError``."""

    jobs: list[Any] = field(default_factory=list)
    nodes: list[Any] = field(default_factory=list)
    partitions: list[Any] = field(default_factory=list)
    statistics: Any = None
    reservations: list[Any] = field(default_factory=list)
    slurm_version: str = "25.11.0"
    overrides: dict[str, Callable[[], Any]] = field(default_factory=dict)
    calls: Counter[str] = field(default_factory=Counter)

    def module(self) -> SimpleNamespace:
        handlers: dict[str, Callable[[], Any]] = {
            JOBS_LOAD: lambda: FakeCollection(self.jobs),
            NODES_LOAD: lambda: FakeCollection(self.nodes),
            PARTITIONS_LOAD: lambda: FakeCollection(self.partitions),
            STATISTICS_LOAD: lambda: self.statistics or fake_statistics(),
            RESERVATIONS_LOAD: lambda: FakeCollection(self.reservations),
            PING: lambda: None,
            CONFIG_LOAD: lambda: FakeConfig(version=self.slurm_version),
        }
        assert set(handlers) == set(ENTRY_POINTS), "the fake must cover exactly ENTRY_POINTS"
        handlers.update(self.overrides)
        root = SimpleNamespace(**{ERROR_CLASS: FakeRPCError})
        for path, handler in handlers.items():
            *parents, leaf = path.split(".")
            node = root
            for part in parents:
                if not hasattr(node, part):
                    setattr(node, part, SimpleNamespace())
                node = getattr(node, part)
            setattr(node, leaf, self._counted(path, handler))
        return root

    def _counted(self, path: str, handler: Callable[[], Any]) -> Callable[[], Any]:
        def call() -> Any:
            self.calls[path] += 1
            return handler()

        return call

    def poll(self, options: PollOptions | None = None) -> SlurmSnapshot:
        return PyslurmBackend(module=self.module()).poll(options or PollOptions())


def _raise(exc: BaseException) -> Callable[[], Any]:
    def fail() -> Any:
        raise exc

    return fail


@pytest.fixture(autouse=True)
def _clear_reads() -> Iterator[None]:
    for fake in ALL_FAKES:
        fake.reads.clear()  # type: ignore[attr-defined]
    yield


# --- this machine ------------------------------------------------------------------------


def test_this_machine_has_no_pyslurm_so_the_backend_refuses_to_start() -> None:
    """Documents this machine: Slurm 22.05, pyslurm 25.11 not installable, backend refused."""
    assert importlib.util.find_spec("pyslurm") is None, (
        "pyslurm is importable here now: run the backend against it and update docs/pyslurm.md"
    )
    with pytest.raises(SlurmUnavailable, match=r"^pyslurm is not importable: .*pyslurm"):
        PyslurmBackend()


def test_an_import_that_fails_inside_libslurm_is_reported_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken_import(name: str) -> Any:
        raise RuntimeError("slurm_init failed: Unable to contact slurm controller")

    monkeypatch.setattr(importlib, "import_module", broken_import)
    with pytest.raises(SlurmUnavailable, match="not importable: RuntimeError: slurm_init failed"):
        PyslurmBackend()


# --- mapping: jobs -----------------------------------------------------------------------


def test_backend_satisfies_the_protocol_and_reports_itself() -> None:
    fake = FakePyslurm()
    instance: SlurmBackend = PyslurmBackend(module=fake.module())
    assert instance.name == "pyslurm"
    snapshot = instance.poll(PollOptions())
    assert snapshot.up is True
    assert snapshot.backend == "pyslurm"
    assert snapshot.version == "25.11.0"
    assert snapshot.errors == 0


def test_running_job_is_grouped_and_kept_for_job_info() -> None:
    fake = FakePyslurm(jobs=[fake_job(id=42, cpus=8, user_name="alice", partition="gpu")])
    snapshot = fake.poll(PollOptions(per_user=False, job_info=True))
    assert snapshot.job_groups == (
        JobGroup("running", "gpu", "physics", "", "", count=1, cpus=8, gpus=0),
    )
    assert snapshot.running_jobs == (RunningJob("42", "alice", "physics", "gpu"),)
    assert snapshot.errors == 0


def test_pending_jobs_keep_a_bounded_reason() -> None:
    fake = FakePyslurm(
        jobs=[
            fake_job(id=3, state="PENDING", state_reason="Resources", cpus=2),
            fake_job(
                id=4,
                state="PENDING",
                state_reason="Nodes required for job are DOWN, DRAINED or reserved for jobs "
                "in higher priority partitions",
            ),
            fake_job(id=5, state="PENDING", state_reason="Resources", cpus=2),
        ]
    )
    snapshot = fake.poll()
    assert snapshot.job_groups == (
        JobGroup("pending", "debug", "physics", "ReqNodeNotAvail", "", 1, 1, 0),
        JobGroup("pending", "debug", "physics", "Resources", "", 2, 4, 0),
    )
    assert snapshot.running_jobs == ()


def test_held_job() -> None:
    fake = FakePyslurm(jobs=[fake_job(id=5, state="PENDING", state_reason="JobHeldUser")])
    (group,) = fake.poll().job_groups
    assert (group.state, group.reason, group.count) == ("pending", "JobHeldUser", 1)


def test_missing_account_and_partition_read_as_empty_labels() -> None:
    fake = FakePyslurm(jobs=[fake_job(account=None, partition=None, user_name=None)])
    snapshot = fake.poll()
    assert snapshot.job_groups == (JobGroup("running", "", "", "", "", 1, 1, 0),)
    assert snapshot.running_jobs == (RunningJob("1", "", "", ""),)


def test_array_task_ids_as_squeue_prints_them() -> None:
    fake = FakePyslurm(
        jobs=[
            fake_job(id=13, array_id=10, array_task_id=3),
            # pyslurm reads array task id 0 as None (u32_parse treats 0 as unset)
            fake_job(id=10, array_id=10, array_task_id=None),
        ]
    )
    ids = {job.job_id for job in fake.poll().running_jobs}
    assert ids == {"10_3", "10_0"}


def test_pending_array_meta_record_counts_every_waiting_task() -> None:
    fake = FakePyslurm(
        jobs=[
            fake_job(
                id=20,
                array_id=20,
                array_task_id=None,
                array_tasks_waiting="4-7,9",
                state="PENDING",
                state_reason="Resources",
                cpus=2,
                gres_per_node={"gres/gpu": 1},
            ),
            fake_job(id=24, array_id=20, array_task_id=3, state="RUNNING", cpus=2),
        ]
    )
    snapshot = fake.poll()
    assert snapshot.job_groups == (
        JobGroup("pending", "debug", "physics", "Resources", "", count=5, cpus=10, gpus=5),
        JobGroup("running", "debug", "physics", "", "", count=1, cpus=2, gpus=0),
    )
    assert [job.job_id for job in snapshot.running_jobs] == ["20_3"]


@pytest.mark.parametrize(
    ("spec", "count"),
    [("0-3", 4), ("1,3,5-7", 5), ("1-9:2", 5), ("7", 1), ("0-99%10", 100), ("garbage", 1)],
)
def test_array_task_counting(spec: str, count: int) -> None:
    assert count_array_tasks(spec) == count


def gpus_per_job(*jobs: Any) -> dict[str, int]:
    """GPUs in the snapshot's groups per job; give each job its own account to keep them apart."""
    snapshot = FakePyslurm(jobs=list(jobs)).poll()
    assert snapshot.errors == 0
    return {group.account: group.gpus for group in snapshot.job_groups}


def test_gpu_job_via_gres_per_node_is_multiplied_by_nodes() -> None:
    assert gpus_per_job(
        # Slurm 23.02+ form keeps the gres/ prefix in pyslurm's dict keys
        fake_job(account="typed", num_nodes=2, gres_per_node={"gres/gpu:a100": 2}),
        # older form: pyslurm strips "gres:"
        fake_job(account="old", num_nodes=None, gres_per_node={"gpu": 1}),
        # not a GPU
        fake_job(account="shard", gres_per_node={"gres/shard": 4}),
    ) == {"typed": 4, "old": 1, "shard": 0}


def test_gpu_job_via_gpus_counts_untyped_total_once() -> None:
    assert gpus_per_job(
        # TRES lists carry gres/gpu=4 and gres/gpu:a100=4 for the same GPUs
        fake_job(account="both", gpus={"gpu": FakeGPU(count=4), "gpu:a100": FakeGPU(count=4)}),
        # only typed entries: summed
        fake_job(
            account="typed", gpus={"gpu:a100": FakeGPU(count=2), "gpu:h100": FakeGPU(count=1)}
        ),
        # its request (4 per node on 2 nodes) and its TRES total are the same GPUs, once
        fake_job(
            account="total",
            num_nodes=2,
            gpus={"gpu": FakeGPU(count=8)},
            gres_per_node={"gres/gpu": 4},
        ),
    ) == {"both": 4, "typed": 3, "total": 8}


def test_gpu_job_via_per_job_task_and_socket_requests() -> None:
    assert gpus_per_job(
        fake_job(account="job", tres_per_job=FakeTres(gres={"gpu": FakeGPU(count=3)})),
        fake_job(account="task", ntasks=4, tres_per_task=FakeTres(gres={"gpu": FakeGPU(count=1)})),
        fake_job(
            account="socket",
            num_nodes=2,
            sockets_per_node=2,
            tres_per_socket=FakeTres(gres={"gpu:a100": FakeGPU(count=1)}),
        ),
        # a future pyslurm handing back the raw string still works
        fake_job(account="text", ntasks=2, tres_per_task="gres/gpu:2"),
    ) == {"job": 3, "task": 4, "socket": 4, "text": 4}


def test_gpu_dict_values_in_every_form_pyslurm_uses() -> None:
    assert gpu_count({"gpu": {"count": 2, "indexes": "0-1"}}) == 2
    assert gpu_count({"gpu": "2"}) == 2
    assert gpu_count({"gres/gpu:a100": 1, "gres/gpu:h100": 2}) == 3
    assert gpu_count({"gpu": 0}) == 0
    assert gpu_count(None) == 0
    assert gpu_count("cpu=4,mem=1G,gres/gpu=2") == 2


def test_one_broken_job_is_counted_and_the_rest_still_mapped() -> None:
    fake = FakePyslurm(
        jobs=[
            fake_job(id=1),
            fake_job(id=2, omit=("state",)),  # reading .state raises AttributeError
            fake_job(id=3, cpus="many"),  # not an int
            fake_job(id=4),
        ],
        nodes=[fake_node(name="n1"), fake_node(name="n2", total_cpus="x")],
    )
    snapshot = fake.poll()
    assert snapshot.errors == 3
    assert [job.job_id for job in snapshot.running_jobs] == ["1", "4"]
    assert [node.name for node in snapshot.nodes] == ["n1"]


def test_per_user_on_and_off() -> None:
    jobs = [
        fake_job(id=1, user_name="alice"),
        fake_job(id=2, user_name="bob"),
        fake_job(id=3, user_name="bob"),
    ]
    on = FakePyslurm(jobs=jobs).poll(PollOptions(per_user=True))
    assert [(g.user, g.count) for g in on.job_groups] == [("alice", 1), ("bob", 2)]
    off = FakePyslurm(jobs=jobs).poll(PollOptions(per_user=False))
    assert [(g.user, g.count) for g in off.job_groups] == [("", 3)]


def test_job_info_off_keeps_no_running_jobs_and_skips_user_lookup() -> None:
    fake = FakePyslurm(jobs=[fake_job(id=1), fake_job(id=2, state="PENDING")])
    snapshot = fake.poll(PollOptions(per_user=False, job_info=False))
    assert snapshot.running_jobs == ()
    assert sum(g.count for g in snapshot.job_groups) == 2
    assert "user_name" not in FakeJob.reads  # type: ignore[attr-defined]


# --- mapping: nodes and partitions -------------------------------------------------------


def test_idle_drained_node() -> None:
    fake = FakePyslurm(
        nodes=[fake_node(state="IDLE+DRAIN", total_cpus=4, idle_cpus=4, reason="gpu lost")]
    )
    (node,) = fake.poll().nodes
    assert (node.state, node.flags) == ("idle", ("drain",))
    assert node.effective_state == "drained"
    assert node.full_state == "idle+drain"
    assert node.reason == "gpu lost"
    # like sinfo's CPUS(A/I/O/T): unused CPUs of a drained node are "other", not idle
    assert (node.cpus_alloc, node.cpus_idle, node.cpus_other, node.cpus_total) == (0, 0, 4, 4)


def test_mixed_node_with_gpus_and_memory_in_bytes() -> None:
    fake = FakePyslurm(
        nodes=[
            fake_node(
                name="gpu01",
                state="MIXED",
                partitions=["gpu", "debug"],
                total_cpus=64,
                allocated_cpus=16,
                idle_cpus=46,  # effective CPUs 62: two cores reserved for the system
                real_memory=512000,
                allocated_memory=64000,
                configured_gres={"gpu:a100": 4},
                allocated_gres={"gpu": 2, "gpu:a100": 2},
                cpu_load=15.5,  # pyslurm divides slurmctld's hundredths by 100
            )
        ]
    )
    (node,) = fake.poll().nodes
    assert node.cpu_load == 15.5
    assert node.state == "mixed"
    assert node.flags == ()
    assert node.effective_state == "mixed"
    assert node.partitions == ("gpu", "debug")
    assert (node.cpus_alloc, node.cpus_idle, node.cpus_other, node.cpus_total) == (16, 46, 2, 64)
    assert node.memory_total_bytes == 512000 * 1024 * 1024
    assert node.memory_alloc_bytes == 64000 * 1024 * 1024
    assert (node.gpus_total, node.gpus_alloc) == (4, 2)


@pytest.mark.parametrize(
    ("state", "base", "flags", "effective"),
    [
        ("MIXED+DRAIN", "mixed", ("drain",), "draining"),
        ("DOWN+NOT_RESPONDING", "down", ("not_responding",), "down"),
        ("IDLE+MAINTENANCE+RESERVED", "idle", ("maint", "reserved"), "maint"),
        ("ALLOCATED+COMPLETING", "allocated", ("completing",), "completing"),
        ("IDLE+POWERED_DOWN", "idle", ("powered_down",), "powered_down"),
        ("", "unknown", (), "unknown"),
    ],
)
def test_node_state_strings(state: str, base: str, flags: tuple[str, ...], effective: str) -> None:
    (node,) = FakePyslurm(nodes=[fake_node(state=state)]).poll().nodes
    assert (node.state, node.flags, node.effective_state) == (base, flags, effective)


def test_down_node_cpus_are_other_and_unset_memory_is_zero() -> None:
    fake = FakePyslurm(
        nodes=[
            fake_node(
                state="DOWN",
                total_cpus=8,
                idle_cpus=8,
                real_memory=None,
                partitions=None,
            )
        ]
    )
    (node,) = fake.poll().nodes
    assert (node.cpus_idle, node.cpus_other) == (0, 8)
    assert node.memory_total_bytes == 0
    assert node.partitions == ()


def test_partitions() -> None:
    fake = FakePyslurm(
        partitions=[
            fake_partition(name="gpu", state="UP", is_default=False),
            fake_partition(name="debug", state="UP", is_default=True),
            fake_partition(name="old", state="INACTIVE", is_default=False),
        ]
    )
    parts = fake.poll().partitions
    assert [(p.name, p.state, p.is_default) for p in parts] == [
        ("debug", "up", True),
        ("gpu", "up", False),
        ("old", "inactive", False),
    ]


# --- mapping: statistics, probes, errors -------------------------------------------------


#: (pyslurm Statistics attribute, value it holds, SchedulerStats field, value expected there):
#: counters stay ints, cycle times in microseconds become seconds.
STATISTICS_CASES: list[tuple[str, int, str, float]] = [
    ("server_thread_count", 7, "server_threads", 7),
    ("agent_queue_size", 1, "agent_queue_size", 1),
    ("dbd_agent_queue_size", 2, "dbd_agent_queue_size", 2),
    ("schedule_queue_length", 12, "queue_length", 12),
    ("schedule_cycle_counter", 300, "cycles_total", 300),
    ("schedule_cycle_last", 1500, "cycle_last_seconds", 0.0015),
    ("schedule_cycle_max", 250_000, "cycle_max_seconds", 0.25),
    ("schedule_cycle_mean", 2_000, "cycle_mean_seconds", 0.002),
    ("backfill_cycle_counter", 40, "backfill_cycles_total", 40),
    ("backfill_cycle_last", 3_500_000, "backfill_cycle_last_seconds", 3.5),
    ("backfill_cycle_mean", 1_250_000, "backfill_cycle_mean_seconds", 1.25),
    ("backfill_mean_depth", 17, "backfill_depth_mean", 17.0),
    ("backfill_queue_length", 9, "backfill_queue_length", 9),
    ("backfilled_jobs", 123, "backfilled_jobs_total", 123),
]


def test_statistics_microseconds_become_seconds() -> None:
    stats = fake_statistics(
        **{attribute: value for attribute, value, _, _ in STATISTICS_CASES},
        rpcs_by_type={
            "REQUEST_JOB_INFO": FakeRpc(count=10, time=90_000),
            "REQUEST_PING": FakeRpc(count=4, time=400),
        },
        rpcs_by_user={"root": FakeRpc(count=14, time=90_400), "12345": FakeRpc(count=1, time=5)},
    )
    scheduler = FakePyslurm(statistics=stats).poll().scheduler
    assert scheduler is not None
    for _, _, field_name, expected in STATISTICS_CASES:
        value = getattr(scheduler, field_name)
        assert value == pytest.approx(expected), field_name
        assert type(value) is type(expected), field_name
    assert scheduler.rpc_by_type == {
        "REQUEST_JOB_INFO": RpcStat(10, pytest.approx(0.09)),
        "REQUEST_PING": RpcStat(4, pytest.approx(0.0004)),
    }
    assert scheduler.rpc_by_user == {
        "root": RpcStat(14, pytest.approx(0.0904)),
        "12345": RpcStat(1, pytest.approx(0.000005)),
    }


def test_rpc_error_on_load_means_unavailable() -> None:
    fake = FakePyslurm(
        overrides={JOBS_LOAD: _raise(FakeRPCError("Unable to contact slurm controller"))}
    )
    with pytest.raises(SlurmUnavailable, match=r"Jobs\.load: slurmctld RPC failed: Unable to"):
        fake.poll()


@pytest.mark.parametrize("path", [NODES_LOAD, PARTITIONS_LOAD])
def test_any_load_failure_means_unavailable(path: str) -> None:
    fake = FakePyslurm(overrides={path: _raise(MemoryError("xmalloc failed"))})
    with pytest.raises(SlurmUnavailable, match=re.escape(path) + ".*MemoryError"):
        fake.poll()


def test_statistics_that_cannot_be_loaded_are_an_error_not_an_outage() -> None:
    fake = FakePyslurm(overrides={STATISTICS_LOAD: _raise(FakeRPCError("Access denied"))})
    snapshot = fake.poll()
    assert snapshot.up is True
    assert snapshot.scheduler is None
    assert snapshot.errors == 1


def test_ping_probe_is_timed() -> None:
    fake = FakePyslurm()
    snapshot = fake.poll(PollOptions(probe=True))
    (probe,) = snapshot.probes
    assert probe.op == "ping"
    assert probe.success is True
    assert probe.duration_seconds >= 0.0
    assert probe.error == ""
    assert fake.calls[PING] == 1


def test_failed_ping_is_a_failed_probe_not_an_outage() -> None:
    fake = FakePyslurm(overrides={PING: _raise(FakeRPCError("Connection refused"))})
    snapshot = fake.poll(PollOptions(probe=True))
    (probe,) = snapshot.probes
    assert probe.success is False
    assert probe.error == "FakeRPCError: Connection refused"
    assert snapshot.up is True


def test_no_probe_when_disabled() -> None:
    fake = FakePyslurm()
    assert fake.poll(PollOptions(probe=False)).probes == ()
    assert fake.calls[PING] == 0


def test_slurm_version_is_asked_once() -> None:
    fake = FakePyslurm(slurm_version="25.11.1")
    instance = PyslurmBackend(module=fake.module())
    assert instance.poll(PollOptions()).version == "25.11.1"
    assert instance.poll(PollOptions()).version == "25.11.1"
    assert fake.calls[CONFIG_LOAD] == 1


def test_unreadable_config_leaves_the_version_empty() -> None:
    fake = FakePyslurm(overrides={CONFIG_LOAD: _raise(FakeRPCError("denied"))})
    snapshot = fake.poll()
    assert snapshot.version == ""
    assert snapshot.errors == 0


def test_broken_statistics_are_counted_not_fatal() -> None:
    fake = FakePyslurm(statistics=fake_statistics(schedule_cycle_last="soon"))
    snapshot = fake.poll()
    assert snapshot.scheduler is None
    assert snapshot.errors == 1


# --- reservations -----------------------------------------------------------------------


def test_reservations_read_like_scontrol_prints_them() -> None:
    """The same labels as the cli backend on the recorded ``scontrol show reservation``."""
    flags = FakeReservationFlags
    fake = FakePyslurm(
        reservations=[
            fake_reservation(
                name="maint_window",
                flags=flags.SPECIFIC_NODES | flags.IGNORE_RUNNING_JOBS | flags.MAINTENANCE,
            ),
            fake_reservation(
                name="future_gpu", is_active=False, partition="gpu", flags=flags.OVERLAP
            ),
        ]
    )
    snapshot = fake.poll()
    assert snapshot.errors == 0
    # sorted by name, as the rest backend and the rendered series are
    assert snapshot.reservations == (
        Reservation("future_gpu", "inactive", "gpu", "overlap", 1),
        Reservation("maint_window", "active", "", "maint,ignore_jobs,spec_nodes", 1),
    )


def test_reservation_flags_take_scontrol_names_and_the_reoccurrence() -> None:
    flags = FakeReservationFlags
    reservation = fake_reservation(
        flags=flags.NO_JOB_HOLD_AFTER_END | flags.PURGE | flags.STATIC_NODES | flags.FLEX,
        reoccurrence=FakeReoccurrence.WEEKLY,
        node_count=None,
    )
    (mapped,) = FakePyslurm(reservations=[reservation]).poll().reservations or ()
    # pyslurm takes the reoccurrence bit out of flags; scontrol lists it among them
    assert mapped.flags == "flex,weekly,static,purge_comp,no_hold_jobs_after_end"
    assert mapped.nodes == 0  # NO_VAL reads as None


class _UnreadableFlagsReservation(FakeReservation):  # type: ignore[valid-type,misc]
    """pyslurm's strict ``ReservationFlags`` refusing a bit it has no member for."""

    __slots__ = ()

    @property
    def flags(self) -> Any:
        raise ValueError("<flag 'ReservationFlags'> invalid value 16777217")


def test_flags_pyslurm_cannot_build_leave_the_reservation_with_unknown_flags() -> None:
    values = {k: v for k, v in RESERVATION_DEFAULTS.items() if k != "flags"}
    snapshot = FakePyslurm(reservations=[_UnreadableFlagsReservation(**values)]).poll()
    assert snapshot.errors == 0
    assert snapshot.reservations == (
        Reservation("maint_window", "active", "", UNREADABLE_FLAGS, 1),
    )


def test_reservations_that_cannot_be_loaded_cost_an_error_and_their_series_only() -> None:
    fake = FakePyslurm(
        jobs=[fake_job()], overrides={RESERVATIONS_LOAD: _raise(FakeRPCError("timeout"))}
    )
    snapshot = fake.poll()
    assert snapshot.up and snapshot.errors == 1
    assert snapshot.reservations is None  # absent, not "no reservations"
    assert FakePyslurm().poll().reservations == ()


def test_a_reservation_without_a_name_is_counted_and_the_rest_kept() -> None:
    fake = FakePyslurm(reservations=[fake_reservation(name=None), fake_reservation(name="ok")])
    snapshot = fake.poll()
    assert snapshot.errors == 1
    assert [r.name for r in snapshot.reservations or ()] == ["ok"]


# --- the declared lists are exactly what the mapping reads -------------------------------


def test_mapping_reads_exactly_the_declared_attributes() -> None:
    """Every declared attribute is read by some path, and nothing else can be (slots)."""
    fake = FakePyslurm(
        jobs=[
            fake_job(id=1, gpus={"gpu": FakeGPU(count=1)}),
            fake_job(id=2, tres_per_job=FakeTres(gres={"gpu": FakeGPU(count=1)})),
            fake_job(id=3, gres_per_node={"gres/gpu": 1}),
            fake_job(id=4, tres_per_task=FakeTres(gres={"gpu": FakeGPU(count=1)})),
            fake_job(id=5, sockets_per_node=2, tres_per_socket=FakeTres(gres={"gpu": 1})),
            fake_job(id=6, array_id=6, array_tasks_waiting="0-1", state="PENDING"),
        ],
        nodes=[fake_node(), fake_node(name="n2", state="MIXED", allocated_cpus=1, idle_cpus=3)],
        partitions=[fake_partition()],
        statistics=fake_statistics(
            rpcs_by_type={"REQUEST_PING": FakeRpc(count=1, time=1)},
            rpcs_by_user={"root": FakeRpc(count=1, time=1)},
        ),
        reservations=[fake_reservation(flags=FakeReservationFlags.MAINTENANCE)],
    )
    snapshot = fake.poll(PollOptions(per_user=True, job_info=True, probe=True))
    assert snapshot.errors == 0
    for fake_class, declared in [
        (FakeJob, JOB_ATTRIBUTES),
        (FakeNode, NODE_ATTRIBUTES),
        (FakePartition, PARTITION_ATTRIBUTES),
        (FakeStatistics, STATISTICS_ATTRIBUTES),
        (FakeRpc, RPC_ATTRIBUTES),
        (FakeGPU, GPU_ATTRIBUTES),
        (FakeTres, TRES_ATTRIBUTES),
        (FakeConfig, CONFIG_ATTRIBUTES),
        (FakeReservation, RESERVATION_ATTRIBUTES),
    ]:
        assert fake_class.reads == set(declared), fake_class.__name__  # type: ignore[attr-defined]
    assert set(fake.calls) == set(ENTRY_POINTS)


def test_fake_defaults_cover_the_declared_lists() -> None:
    assert set(JOB_DEFAULTS) == set(JOB_ATTRIBUTES)
    assert set(NODE_DEFAULTS) == set(NODE_ATTRIBUTES)
    assert set(PARTITION_DEFAULTS) == set(PARTITION_ATTRIBUTES)
    assert set(STATISTICS_DEFAULTS) == set(STATISTICS_ATTRIBUTES)
    assert set(RESERVATION_DEFAULTS) == set(RESERVATION_ATTRIBUTES)


def test_strict_fakes_refuse_undeclared_attributes() -> None:
    job = fake_job()
    with pytest.raises(AttributeError):
        _ = job.qos
    with pytest.raises(TypeError):
        fake_job(qos="normal")
    with pytest.raises(AttributeError):
        _ = fake_job(omit=("state",)).state
