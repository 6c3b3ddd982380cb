"""pyslurm backend: contract against the pyslurm 25.11.2 sources, mapping on strict fakes.

pyslurm 25.11 cannot be built here (Debian 12 ships Slurm 22.05 and pyslurm refuses any
other major release), so nothing in this file talks to a live pyslurm:

* the **contract** tests download the 25.11.2 sdist from PyPI (cached under
  ``~/.cache/gotthard/pyslurm``) and check that every entry point and attribute the
  backend declares in its ``*_ATTRIBUTES``/entry-point constants exists, on the right
  class, with the shape (types, units, parsing) the mapping assumes;
* the **mapping** tests run the backend on fakes built from those same constants. The
  fakes use ``__slots__`` and record reads, so reading anything undeclared fails, and a
  test checks that the declared lists are exactly what the mapping reads.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gotthard.exporters.slurm import pyslurm_backend as backend
from gotthard.exporters.slurm.pyslurm_backend import (
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
    RPC_ATTRIBUTES,
    STATISTICS_ATTRIBUTES,
    STATISTICS_LOAD,
    TRES_ATTRIBUTES,
    PyslurmBackend,
)
from gotthard.exporters.slurm.snapshot import (
    JobGroup,
    PollOptions,
    RpcStat,
    RunningJob,
    SlurmBackend,
    SlurmSnapshot,
    SlurmUnavailable,
)

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
ALL_FAKES = (
    FakeJob,
    FakeNode,
    FakePartition,
    FakeStatistics,
    FakeRpc,
    FakeGPU,
    FakeTres,
    FakeConfig,
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


@dataclass
class FakePyslurm:
    """A ``pyslurm`` module that has only the declared entry points and ``RPCError``."""

    jobs: list[Any] = field(default_factory=list)
    nodes: list[Any] = field(default_factory=list)
    partitions: list[Any] = field(default_factory=list)
    statistics: Any = None
    slurm_version: str = "25.11.0"
    overrides: dict[str, Callable[[], Any]] = field(default_factory=dict)
    calls: Counter[str] = field(default_factory=Counter)

    def module(self) -> SimpleNamespace:
        handlers: dict[str, Callable[[], Any]] = {
            JOBS_LOAD: lambda: FakeCollection(self.jobs),
            NODES_LOAD: lambda: FakeCollection(self.nodes),
            PARTITIONS_LOAD: lambda: FakeCollection(self.partitions),
            STATISTICS_LOAD: lambda: self.statistics or fake_statistics(),
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
    assert backend._count_array_tasks(spec) == count


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
        # the job's total wins over its per-node request
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
    assert backend._gpu_total({"gpu": {"count": 2, "indexes": "0-1"}}) == 2
    assert backend._gpu_total({"gpu": "2"}) == 2
    assert backend._gpu_total({"gres/gpu:a100": 1, "gres/gpu:h100": 2}) == 3
    assert backend._gpu_total({"gpu": 0}) == 0
    assert backend._gpu_total(None) == 0
    assert backend._gpu_total("cpu=4,mem=1G,gres/gpu=2") == 2


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
            )
        ]
    )
    (node,) = fake.poll().nodes
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
    ]:
        assert fake_class.reads == set(declared), fake_class.__name__  # type: ignore[attr-defined]
    assert set(fake.calls) == set(ENTRY_POINTS)


def test_fake_defaults_cover_the_declared_lists() -> None:
    assert set(JOB_DEFAULTS) == set(JOB_ATTRIBUTES)
    assert set(NODE_DEFAULTS) == set(NODE_ATTRIBUTES)
    assert set(PARTITION_DEFAULTS) == set(PARTITION_ATTRIBUTES)
    assert set(STATISTICS_DEFAULTS) == set(STATISTICS_ATTRIBUTES)


def test_strict_fakes_refuse_undeclared_attributes() -> None:
    job = fake_job()
    with pytest.raises(AttributeError):
        _ = job.qos
    with pytest.raises(TypeError):
        fake_job(qos="normal")
    with pytest.raises(AttributeError):
        _ = fake_job(omit=("state",)).state


# --- contract against the pyslurm 25.11.2 sources ----------------------------------------

PYSLURM_SDIST_VERSION = "25.11.2"
#: sha256 of pyslurm-25.11.2.tar.gz as published on PyPI (PyPI files never change).
PYSLURM_SDIST_SHA256 = "6e0e4bc639ea3177591b102b77c1dd8df55a9e411ac42ef339a4adb3908cca34"


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gotthard" / "pyslurm"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _download_sdist(cache: Path) -> Path:
    sdist = cache / f"pyslurm-{PYSLURM_SDIST_VERSION}.tar.gz"
    if sdist.exists() and _sha256(sdist) == PYSLURM_SDIST_SHA256:
        return sdist
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        # --no-binary pyslurm (not :all:): pip still prepares the sdist's metadata, and
        # :all: would also build setuptools and Cython from source for that (minutes).
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            "pyslurm",
            "--disable-pip-version-check",
            f"pyslurm=={PYSLURM_SDIST_VERSION}",
            "-d",
            tmp,
        ]
        result = subprocess.run(command, capture_output=True, text=True, timeout=900)
        if result.returncode != 0:
            pytest.fail(f"pip download failed:\n{result.stdout}\n{result.stderr}", pytrace=False)
        (downloaded,) = Path(tmp).glob("pyslurm-*.tar.gz")
        os.replace(downloaded, sdist)
    actual = _sha256(sdist)
    if actual != PYSLURM_SDIST_SHA256:
        pytest.fail(f"{sdist} has sha256 {actual}, expected {PYSLURM_SDIST_SHA256}")
    return sdist


def _extract(sdist: Path, cache: Path) -> Path:
    tree = cache / f"pyslurm-{PYSLURM_SDIST_VERSION}"
    marker = tree / ".gotthard-extracted"
    if marker.exists():
        return tree
    with tempfile.TemporaryDirectory(dir=cache) as tmp, tarfile.open(sdist) as archive:
        if hasattr(tarfile, "data_filter"):
            archive.extractall(tmp, filter="data")
        else:  # Python < 3.11.4
            for member in archive.getmembers():
                if member.name.startswith("/") or ".." in Path(member.name).parts:
                    raise RuntimeError(f"unsafe path in {sdist}: {member.name}")
            archive.extractall(tmp)  # members checked above
        shutil.rmtree(tree, ignore_errors=True)
        os.replace(Path(tmp) / tree.name, tree)
    marker.write_text(f"{PYSLURM_SDIST_SHA256}\n")
    return tree


@dataclass
class SourceClass:
    """A class as its .pyx/.pxd sources define it."""

    name: str
    bases: tuple[str, ...] = ()
    #: member name -> kinds: property, staticmethod, method, public (cdef public attribute)
    members: dict[str, set[str]] = field(default_factory=dict)
    #: member name -> source of its def(s), decorators and signature included
    bodies: dict[str, str] = field(default_factory=dict)
    #: class-level text of every file that defines it (docstrings of the .pxd included)
    text: str = ""


@dataclass
class SourceModule:
    classes: dict[str, SourceClass] = field(default_factory=dict)
    #: top-level function name -> its source
    functions: dict[str, str] = field(default_factory=dict)
    text: str = ""


_BUILTIN_BASES: dict[str, type] = {"object": object, "dict": dict, "list": list}
_CLASS_LINE = re.compile(r"^(?:cdef\s+)?class\s+(\w+)\s*(?:\(([^)]*)\))?\s*:")
_DEF_LINE = re.compile(r"^(?:async\s+)?(?:cpdef|cdef|def)\s+(?:[\w.*\[\]]+\s+)*?\**(\w+)\s*\(")
_PUBLIC_BLOCK = re.compile(r"^cdef\s+(?:public|readonly)\s*:\s*$")
_PUBLIC_LINE = re.compile(r"^cdef\s+(?:public|readonly)\s+(.+)$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _block(lines: list[str], start: int, indent: int) -> tuple[str, int]:
    """Lines from ``start`` to the next non-blank line indented at most ``indent``."""
    end = start + 1
    while end < len(lines):
        line = lines[end]
        stripped = line.strip()
        # comments may sit at any column inside a body (commented-out properties do)
        if stripped and not stripped.startswith("#") and _indent(line) <= indent:
            break
        end += 1
    return "\n".join(lines[start:end]), end


def _parse_source(text: str, module: SourceModule) -> None:
    module.text += text + "\n"
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.strip() or line.lstrip().startswith("#") or _indent(line) > 0:
            index += 1
            continue
        class_match = _CLASS_LINE.match(line)
        def_match = None if class_match else _DEF_LINE.match(line)
        if def_match:
            body, index = _block(lines, index, 0)
            module.functions[def_match.group(1)] = body
            continue
        if not class_match:
            index += 1
            continue
        name = class_match.group(1)
        bases = tuple(b.strip() for b in (class_match.group(2) or "").split(",") if b.strip())
        cls = module.classes.setdefault(name, SourceClass(name))
        cls.bases = cls.bases or bases
        body, end = _block(lines, index, 0)
        cls.text += body + "\n"
        _parse_class_body(lines[index + 1 : end], cls)
        index = end


def _parse_class_body(lines: list[str], cls: SourceClass) -> None:
    body_lines = [line for line in lines if line.strip()]
    if not body_lines:
        return
    member_indent = _indent(body_lines[0])
    decorators: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or _indent(line) != member_indent:
            index += 1
            continue
        if stripped.startswith("@"):
            decorators.append(stripped[1:].split("(")[0])
            index += 1
            continue
        if _PUBLIC_BLOCK.match(stripped):
            block, index = _block(lines, index, member_indent)
            for attr_line in block.splitlines()[1:]:
                words = re.findall(r"\w+", attr_line.split("#", 1)[0])
                if words:
                    cls.members.setdefault(words[-1], set()).add("public")
            continue
        public = _PUBLIC_LINE.match(stripped)
        if public:
            cls.members.setdefault(re.findall(r"\w+", public.group(1))[-1], set()).add("public")
            index += 1
            continue
        def_match = _DEF_LINE.match(stripped)
        if def_match:
            name = def_match.group(1)
            block, index = _block(lines, index, member_indent)
            kinds = cls.members.setdefault(name, set())
            if "property" in decorators:
                kinds.add("property")
            elif "staticmethod" in decorators:
                kinds.add("staticmethod")
            elif not any(d.endswith((".setter", ".deleter")) for d in decorators):
                kinds.add("method")
            prefix = "".join(f"@{d}\n" for d in decorators)
            cls.bodies[name] = cls.bodies.get(name, "") + prefix + block + "\n"
            decorators = []
            continue
        decorators = []
        index += 1


@dataclass
class PyslurmSource:
    """The pyslurm package in the sdist, resolved the way ``import pyslurm`` resolves names."""

    package: Path
    _modules: dict[Path, SourceModule] = field(default_factory=dict)

    def module(self, stem: Path) -> SourceModule:
        if stem not in self._modules:
            module = SourceModule()
            for suffix in (".pxd", ".pyx", ".py"):
                path = stem.with_suffix(suffix)
                if path.exists():
                    _parse_source(path.read_text(encoding="utf-8"), module)
            self._modules[stem] = module
        return self._modules[stem]

    def _export(self, package: Path, name: str) -> tuple[bool, Path, str]:
        """Where ``package``'s ``__init__.py`` gets ``name`` from: (is_package, path, name)."""
        tree = ast.parse((package / "__init__.py").read_text(encoding="utf-8"))
        for node in tree.body:
            if not isinstance(node, ast.ImportFrom):
                continue
            for alias in node.names:
                if (alias.asname or alias.name) != name:
                    continue
                if node.level:
                    base = package
                    for _ in range(node.level - 1):
                        base = base.parent
                else:
                    base = self.package.parent
                target = base.joinpath(*(node.module or "").split(".")) if node.module else base
                if (target / alias.name / "__init__.py").exists():
                    return True, target / alias.name, alias.name
                if (target / "__init__.py").exists():
                    return self._export(target, alias.name)
                if any(target.with_suffix(s).exists() for s in (".pyx", ".py", ".pxd")):
                    return False, target, alias.name
        raise LookupError(f"{package.relative_to(self.package.parent)} does not export {name}")

    def resolve(self, dotted: str) -> tuple[SourceModule, str, list[str]]:
        """``pyslurm.<dotted>`` → (module that defines it, its name there, the rest)."""
        parts = dotted.split(".")
        is_package, where, name = True, self.package, ""
        while is_package:
            if not parts:
                raise LookupError(f"pyslurm.{dotted} is a package")
            is_package, where, name = self._export(where, parts.pop(0))
        return self.module(where), name, parts

    def cls(self, dotted: str) -> SourceClass:
        module, name, rest = self.resolve(dotted)
        assert not rest, f"pyslurm.{dotted} is not a class"
        assert name in module.classes, f"pyslurm.{dotted}: no class {name} in its module"
        return module.classes[name]

    def find_class(self, name: str) -> SourceClass:
        found = []
        for path in self.package.rglob("*.p[yx][xd]"):
            if "slurm" in path.relative_to(self.package).parts[:1]:
                continue
            module = self.module(path.with_suffix(""))
            if name in module.classes:
                found.append(module.classes[name])
        unique = {id(c): c for c in found}
        assert len(unique) == 1, f"class {name} defined {len(unique)} times"
        return next(iter(unique.values()))

    def has_member(self, cls: SourceClass, member: str) -> bool:
        if member in cls.members:
            return True
        for base in cls.bases:
            builtin = _BUILTIN_BASES.get(base)
            if builtin is not None:
                if hasattr(builtin, member):
                    return True
            elif self.has_member(self.find_class(base), member):
                return True
        return False


@pytest.fixture(scope="module")
def pyslurm_source() -> PyslurmSource:
    cache = _cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    tree = _extract(_download_sdist(cache), cache)
    return PyslurmSource(tree / "pyslurm")


#: Which pyslurm class each ``*_ATTRIBUTES`` list of the backend is read from.
ATTRIBUTE_CONTRACT: dict[str, tuple[str, ...]] = {
    "JOB_ATTRIBUTES": ("Job",),
    "NODE_ATTRIBUTES": ("Node",),
    "PARTITION_ATTRIBUTES": ("Partition",),
    "STATISTICS_ATTRIBUTES": ("slurmctld.Statistics",),
    "RPC_ATTRIBUTES": ("slurmctld.RPCType", "slurmctld.RPCUser"),
    "GPU_ATTRIBUTES": ("db.GPU",),
    "TRES_ATTRIBUTES": ("db.TrackableResources",),
    "CONFIG_ATTRIBUTES": ("slurmctld.Config",),
}

#: What the mapping assumes about each value, as the 25.11.2 source spells it.
SHAPES: list[tuple[str, str, str]] = [
    # (class, member, regex its source must match)
    ("Job", "id", r"return self\.ptr\.job_id"),
    ("Job", "state", r"slurm_job_state_string\("),
    ("Job", "state_reason", r"state_desc[\s\S]*slurm_job_state_reason_string"),
    ("Job", "user_name", r"uid_to_name\(self\.ptr\.user_id"),
    ("Job", "cpus", r"u32_parse\(self\.ptr\.num_cpus, on_noval=1\)"),
    ("Job", "num_nodes", r"u32_parse\(self\.ptr\.num_nodes\)"),
    ("Job", "ntasks", r"u32_parse\(self\.ptr\.num_tasks, on_noval=1\)"),
    ("Job", "array_id", r"u32_parse\(self\.ptr\.array_job_id\)"),
    # u32_parse's zero_is_noval default: task 0 reads as None
    ("Job", "array_task_id", r"u32_parse\(self\.ptr\.array_task_id\)"),
    ("Job", "array_tasks_waiting", r"array_task_str[\s\S]*rindex\(\"%\"\)"),
    ("Job", "gpus", r"isinstance\(v, GPU\)"),
    ("Job", "gres_per_node", r"to_gres_dict\(self\.ptr\.tres_per_node\)"),
    ("Job", "tres_per_job", r"TrackableResources\.from_cstr\(self\.ptr\.tres_per_job\)"),
    ("Job", "tres_per_task", r"TrackableResources\.from_cstr\(self\.ptr\.tres_per_task\)"),
    ("Job", "tres_per_socket", r"TrackableResources\.from_cstr\(self\.ptr\.tres_per_socket\)"),
    ("Node", "state", r"slurm_node_state_string_complete\("),
    ("Node", "total_cpus", r"u16_parse\(self\.info\.cpus, on_noval=0\)"),
    ("Node", "allocated_cpus", r"u16_parse\(self\.info\.alloc_cpus, on_noval=0\)"),
    ("Node", "idle_cpus", r"self\.effective_cpus - self\.allocated_cpus"),
    ("Node", "real_memory", r"u64_parse\(self\.info\.real_memory\)"),
    ("Node", "allocated_memory", r"u64_parse\(self\.info\.alloc_memory, on_noval=0\)"),
    ("Node", "configured_gres", r"to_gres_dict\(self\.info\.gres\)"),
    ("Node", "allocated_gres", r"gres_from_tres_dict\(self\.allocated_tres\)"),
    ("Node", "partitions", r"to_list\(self\.info\.partitions\)"),
    ("Partition", "state", r"_partition_state_int_to_str\("),
    ("Partition", "is_default", r"PART_FLAG_DEFAULT"),
    ("slurmctld.Config", "version", r"to_unicode\(self\.ptr\.version\)"),
]

#: Units and containers, from the class docstrings and parse_response().
STATISTICS_SHAPES: list[tuple[str, str]] = [
    *(
        (name, rf"{name} \(int\):\s+(?:Time|Mean time|Maximum time)[^:]*microseconds")
        for name in (
            "schedule_cycle_last",
            "schedule_cycle_max",
            "schedule_cycle_mean",
            "backfill_cycle_mean",
        )
    ),
    ("backfill_cycle_last", r"backfill_cycle_last \(int\):\s+Time in microseconds"),
    ("rpcs_by_type", r"out\.rpcs_by_type = RPCTypeStatistics\.from_ptr"),
    ("rpcs_by_user", r"out\.rpcs_by_user = RPCUserStatistics\.from_ptr"),
    ("schedule_cycle_mean", r"out\.schedule_cycle_mean = int\(ptr\.schedule_cycle_sum / "),
    ("backfill_mean_depth", r"out\.backfill_mean_depth = int\(ptr\.bf_depth_sum / "),
]


@pytest.mark.network
class TestContractWithPyslurm25112:
    def test_the_sdist_is_the_series_the_backend_targets(
        self, pyslurm_source: PyslurmSource
    ) -> None:
        module, _, _ = pyslurm_source.resolve("__version__")
        assert re.search(rf'__version__ = "{re.escape(PYSLURM_SDIST_VERSION)}"', module.text)
        assert PYSLURM_SDIST_VERSION.startswith(backend.PYSLURM_SERIES + ".")

    @pytest.mark.parametrize("path", ENTRY_POINTS)
    def test_entry_point_exists_and_takes_no_required_argument(
        self, pyslurm_source: PyslurmSource, path: str
    ) -> None:
        module, name, rest = pyslurm_source.resolve(path)
        if rest:
            assert rest == ["load"], path
            cls = module.classes[name]
            assert "staticmethod" in cls.members.get("load", set()), f"{path} not a staticmethod"
            source = cls.bodies["load"]
        else:
            assert name in module.functions, f"{path} is not a module-level function"
            source = module.functions[name]
        signature = re.search(r"def\s+\w+\s*\(([^)]*)\)", source)
        assert signature is not None
        params = [p.strip() for p in signature.group(1).split(",") if p.strip()]
        required = [p for p in params if "=" not in p and not p.startswith("*")]
        assert required == [], f"{path} requires {required}"

    def test_rpc_error_is_the_exception_the_loads_raise(
        self, pyslurm_source: PyslurmSource
    ) -> None:
        module, name, rest = pyslurm_source.resolve(backend.ERROR_CLASS)
        assert (name, rest) == ("RPCError", [])
        assert re.search(r"^class RPCError\(PyslurmError\):", module.text, re.MULTILINE)
        assert re.search(r"^class PyslurmError\(Exception\):", module.text, re.MULTILINE)
        assert re.search(r"raise RPCError\(errno\)", module.functions["verify_rpc"])
        for path in (JOBS_LOAD, NODES_LOAD, PARTITIONS_LOAD, STATISTICS_LOAD):
            load_module, cls_name, _ = pyslurm_source.resolve(path)
            assert "verify_rpc(" in load_module.classes[cls_name].bodies["load"], path
        for attribute in backend.MODULE_ATTRIBUTES:
            pyslurm_source.resolve(attribute)

    @pytest.mark.parametrize("path", [JOBS_LOAD, NODES_LOAD, PARTITIONS_LOAD])
    def test_collections_are_read_through_values(
        self, pyslurm_source: PyslurmSource, path: str
    ) -> None:
        cls = pyslurm_source.cls(path.rsplit(".", 1)[0])
        assert "MultiClusterMap" in cls.bases
        assert pyslurm_source.has_member(cls, backend.COLLECTION_METHOD)

    def test_every_attribute_list_has_a_contract(self) -> None:
        declared = {name for name in dir(backend) if name.endswith("_ATTRIBUTES")}
        assert declared - {"MODULE_ATTRIBUTES"} == set(ATTRIBUTE_CONTRACT)

    @pytest.mark.parametrize(
        ("constant", "class_path"),
        [(c, p) for c, paths in ATTRIBUTE_CONTRACT.items() for p in paths],
    )
    def test_attributes_are_readable_on_the_right_class(
        self, pyslurm_source: PyslurmSource, constant: str, class_path: str
    ) -> None:
        cls = pyslurm_source.cls(class_path)
        missing = []
        for attribute in getattr(backend, constant):
            kinds = cls.members.get(attribute, set())
            if not kinds & {"property", "public"}:
                missing.append(f"{attribute} ({', '.join(sorted(kinds)) or 'absent'})")
        assert missing == [], f"pyslurm.{class_path} lacks readable {missing}"

    @pytest.mark.parametrize(("class_path", "member", "pattern"), SHAPES)
    def test_value_shapes(
        self, pyslurm_source: PyslurmSource, class_path: str, member: str, pattern: str
    ) -> None:
        body = pyslurm_source.cls(class_path).bodies[member]
        assert re.search(pattern, body), f"pyslurm.{class_path}.{member}:\n{body}"

    @pytest.mark.parametrize(("member", "pattern"), STATISTICS_SHAPES)
    def test_statistics_units_and_containers(
        self, pyslurm_source: PyslurmSource, member: str, pattern: str
    ) -> None:
        module, _, _ = pyslurm_source.resolve("slurmctld.Statistics")
        assert member in STATISTICS_ATTRIBUTES
        assert re.search(pattern, module.text), f"{member}: {pattern}"

    def test_rpc_dicts_are_keyed_by_name_with_microsecond_totals(
        self, pyslurm_source: PyslurmSource
    ) -> None:
        by_type = pyslurm_source.cls("slurmctld.RPCTypeStatistics")
        by_user = pyslurm_source.cls("slurmctld.RPCUserStatistics")
        assert by_type.bases == ("dict",)
        assert by_user.bases == ("dict",)
        assert "out[stats.name] = stats" in by_type.bodies["from_ptr"]
        assert "out[key] = stats" in by_user.bodies["from_ptr"]
        for cls_path in ("slurmctld.RPCType", "slurmctld.RPCUser"):
            text = pyslurm_source.cls(cls_path).text
            assert re.search(r"time \(int\):[^:]*unit is\s+microseconds", text), cls_path

    def test_gres_helpers_give_the_dict_keys_the_mapping_expects(
        self, pyslurm_source: PyslurmSource
    ) -> None:
        cstr = pyslurm_source.module(pyslurm_source.package / "utils" / "cstr")
        to_gres_dict = cstr.functions["to_gres_dict"]
        assert 'gres_delim = "gres:"' in to_gres_dict  # only "gres:" is stripped
        assert 'name_and_typ = f"{name}:{typ}" if typ else name' in to_gres_dict
        assert '"count": int(cnt)' in to_gres_dict  # IDX form: {"count", "indexes"}
        helpers = pyslurm_source.module(pyslurm_source.package / "utils" / "helpers")
        assert 'gres_prefix = "gres/"' in helpers.functions["gres_from_tres_dict"]
        tres = pyslurm_source.cls("db.TrackableResources")
        assert re.search(r'tres\.name == "gpu" or tres\.name\.startswith\("gpu:"\)', tres.text)
        assert "self.gres[gres.name] = gres" in tres.text
        gpu = pyslurm_source.cls("db.GPU")
        assert 'f"gpu:{self.type}" if self.type else "gpu"' in gpu.bodies["name"]
