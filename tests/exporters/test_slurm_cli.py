"""The cli backend's parsers on real Slurm 22.05.8 output, and on garbage (hypothesis)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gotthard.exporters.slurm.render import render
from gotthard.slurm.cli import CommandOutput, assemble
from gotthard.slurm.snapshot import (
    Node,
    Partition,
    PollOptions,
    Reservation,
    normalize_reason,
)
from gotthard.slurm.text import (
    JOB_COLUMNS,
    parse_reservations,
    parse_sdiag,
    parse_sinfo_nodes,
    parse_sinfo_partitions,
    parse_squeue,
    squeue_argv,
)
from gotthard.slurm.values import gpus_from_tres
from gotthard.slurm_state import normalize

DATA = Path(__file__).parent.parent / "fixtures" / "slurm-22.05"
OPTIONS = PollOptions(per_user=False, job_info=True, probe=True)


def read(name: str) -> str:
    return (DATA / name).read_text()


def outputs(**overrides: str) -> dict[str, CommandOutput]:
    texts = {
        "squeue": read("gotthard-squeue.txt"),
        "nodes": read("gotthard-sinfo-nodes.txt"),
        "partitions": read("gotthard-sinfo-partitions.txt"),
        "sdiag": read("sdiag.txt"),
        "ping": read("gotthard-scontrol-ping.txt"),
    }
    texts.update(overrides)
    return {key: CommandOutput(text) for key, text in texts.items()}


def test_squeue_asks_for_all_states_and_a_narrow_format() -> None:
    argv = squeue_argv()
    assert "--states=all" in argv
    assert "--json" not in argv and "--yaml" not in argv
    assert argv[-1].count("|") == len(JOB_COLUMNS.columns)


def test_recorded_queue_is_grouped_by_state_partition_account() -> None:
    parsed = parse_squeue(read("gotthard-squeue.txt"), OPTIONS)
    assert parsed.errors == 0
    groups = {
        (g.state, g.partition, g.account, g.reason): (g.count, g.cpus, g.gpus)
        for g in parsed.tally.groups()
    }
    assert groups == {
        # job 7 (account physics) waits for the drained node
        ("pending", "debug", "physics", "ReqNodeNotAvail"): (1, 1, 0),
        ("pending", "debug", "", "Dependency"): (1, 1, 0),
        ("pending", "debug", "", "JobHeldUser"): (1, 1, 0),
        # array job 4: four tasks, 2 CPUs and --gpus-per-task=1 each
        ("pending", "gpu", "", "ReqNodeNotAvail"): (4, 8, 4),
        # job 1 --gres=gpu:1 (tres-per-node), job 2 --gpus=1 (tres-per-job)
        ("running", "gpu", "", ""): (2, 2, 2),
    }
    running = sorted(parsed.tally.running)
    assert [(j.job_id, j.user, j.partition) for j in running] == [
        ("1", "root", "gpu"),
        ("2", "root", "gpu"),
    ]


def test_per_user_keeps_the_user_and_job_info_can_be_dropped() -> None:
    parsed = parse_squeue(read("gotthard-squeue.txt"), PollOptions(per_user=True, job_info=False))
    assert {g.user for g in parsed.tally.groups()} == {"root"}
    assert parsed.tally.running == []


def test_recorded_drained_node_with_running_jobs_is_draining() -> None:
    parsed = parse_sinfo_nodes(read("gotthard-sinfo-nodes.txt"))
    assert parsed.errors == 0
    (node,) = parsed.nodes
    assert node.name == "node001"
    assert node.partitions == ("debug", "gpu")
    assert (node.state, node.flags) == ("allocated", ("drain",))
    assert node.effective_state == "draining"
    assert node.full_state == "allocated+drain"
    assert (node.cpus_alloc, node.cpus_idle, node.cpus_other, node.cpus_total) == (2, 0, 0, 2)
    assert node.memory_total_bytes == 22900 * 1024 * 1024
    assert (node.gpus_alloc, node.gpus_total) == (2, 2)
    assert node.reason == "gpu lost: XID 79"
    assert node.cpu_load == 11.62


def test_partitions_with_default_marker() -> None:
    partitions, errors = parse_sinfo_partitions(read("gotthard-sinfo-partitions.txt"))
    assert errors == 0
    assert [(p.name, p.state, p.is_default) for p in partitions] == [
        ("debug", "up", True),
        ("gpu", "up", False),
    ]


def test_sdiag_recorded_values_in_seconds() -> None:
    stats, errors = parse_sdiag(read("sdiag.txt"))
    assert errors == 0
    assert stats.server_threads == 3
    assert stats.queue_length == 4
    assert stats.cycle_last_seconds == pytest.approx(0.001758)
    assert stats.cycle_mean_seconds == pytest.approx(0.000891)
    assert stats.cycles_total == 2
    assert stats.backfill_cycle_last_seconds == pytest.approx(0.000510)
    assert stats.backfilled_jobs_total == 0
    assert stats.backfill_queue_length == 2
    assert stats.rpc_by_type["REQUEST_SUBMIT_BATCH_JOB"].count == 6
    assert stats.rpc_by_type["REQUEST_SUBMIT_BATCH_JOB"].total_seconds == pytest.approx(0.004417)
    assert stats.rpc_by_user["root"].count == 36


@pytest.mark.parametrize(
    ("text", "base", "flags", "effective"),
    [
        ("idle", "idle", (), "idle"),
        ("IDLE+DRAIN", "idle", ("drain",), "drained"),
        ("mixed+drain", "mixed", ("drain",), "draining"),
        ("down*", "down", ("not_responding",), "down"),
        ("idle+maint+reserved", "idle", ("maint", "reserved"), "maint"),
        ("IDLE+MAINTENANCE", "idle", ("maint",), "maint"),
        ("drng", "allocated", ("drain",), "draining"),
        ("idle~", "idle", ("powered_down",), "powered_down"),
        ("allocated+completing", "allocated", ("completing",), "completing"),
    ],
)
def test_node_states(text: str, base: str, flags: tuple[str, ...], effective: str) -> None:
    assert normalize(text) == (base, flags)
    assert Node(name="n", state=base, flags=flags).effective_state == effective


@pytest.mark.parametrize(
    ("text", "gpus"),
    [
        ("gres:gpu:2", 2),
        ("gres/gpu:2", 2),
        ("gpu:a100:4(S:0-1)", 4),
        ("cpu=4,mem=1G,gres/gpu=2", 2),
        ("gres/gpu=2,gres/gpu:a100=2", 2),
        ("gpu:a100:1(IDX:0),gpu:v100:2(IDX:1-2)", 3),
        ("gpu:0(IDX:N/A)", 0),
        ("N/A", 0),
        ("(null)", 0),
        ("gres/gpumem:10", 0),
    ],
)
def test_gpu_counts_from_every_gres_form(text: str, gpus: int) -> None:
    assert gpus_from_tres(text) == gpus


def test_unset_task_count_does_not_multiply_gpus() -> None:
    # a job cancelled before it ran prints NumTasks as NO_VAL (4294967294)
    row = "CANCELLED|gpu|(null)|1|1|4294967294|N/A|N/A|gres:gpu:1|N/A|None|root|12|"
    (group,) = parse_squeue(row, OPTIONS).tally.groups()
    assert group.gpus == 1


def test_reasons_are_bounded() -> None:
    assert normalize_reason("ReqNodeNotAvail, UnavailableNodes:nid[001-100]") == "ReqNodeNotAvail"
    assert normalize_reason("(Resources)") == "Resources"
    assert normalize_reason("some free text from an admin") == "Other"


def test_assemble_counts_a_failed_sdiag_and_keeps_the_rest() -> None:
    runs = outputs()
    runs["sdiag"] = CommandOutput("", error="sdiag exited 1: Access denied")
    snapshot = assemble(runs, OPTIONS)
    assert snapshot.scheduler is None
    assert snapshot.errors == 1
    assert sum(g.count for g in snapshot.job_groups) == 9
    assert [p.op for p in snapshot.probes] == ["ping"]


# --- garbage in: counted, never raised -----------------------------------------------------

RECORDED_QUEUE = read("gotthard-squeue.txt")
garbage = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=400)
row_like = st.lists(
    st.sampled_from(["RUNNING", "PENDING", "gpu", "", "1", "x", "N/A", "gres:gpu:2", "None"]),
    max_size=16,
).map("|".join)


def _nonblank_lines(text: str) -> int:
    return sum(1 for line in text.splitlines() if line)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(garbage, row_like), max_size=20).map("\n".join), st.booleans())
def test_every_squeue_row_is_a_job_or_an_error(text: str, per_user: bool) -> None:
    parsed = parse_squeue(text, PollOptions(per_user=per_user))
    counted = sum(g.count for g in parsed.tally.groups())
    assert counted + parsed.errors == _nonblank_lines(text)


@settings(max_examples=200)
@given(st.integers(min_value=0, max_value=len(RECORDED_QUEUE)))
def test_truncated_squeue_output_loses_only_the_cut_row(cut: int) -> None:
    text = RECORDED_QUEUE[:cut]
    parsed = parse_squeue(text, OPTIONS)
    counted = sum(g.count for g in parsed.tally.groups())
    assert counted + parsed.errors == _nonblank_lines(text)
    assert parsed.errors <= 1


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(squeue=garbage, nodes=garbage, partitions=garbage, sdiag=garbage, ping=garbage)
def test_assemble_survives_garbage_everywhere(
    squeue: str, nodes: str, partitions: str, sdiag: str, ping: str
) -> None:
    snapshot = assemble(
        outputs(squeue=squeue, nodes=nodes, partitions=partitions, sdiag=sdiag, ping=ping),
        OPTIONS,
    )
    assert snapshot.up
    assert snapshot.errors >= 0


@settings(max_examples=200)
@given(st.integers(min_value=0, max_value=len(read("gotthard-sinfo-nodes.txt"))))
def test_truncated_sinfo_never_raises(cut: int) -> None:
    parsed = parse_sinfo_nodes(read("gotthard-sinfo-nodes.txt")[:cut])
    assert len(parsed.nodes) <= 1


# --- robustness, zero series, partition totals, reservations, job counters -------------


def test_an_infinite_sdiag_counter_is_one_error_not_a_failed_poll() -> None:
    text = read("gotthard-sdiag.txt").replace("Server thread count:  3", "Server thread count: inf")
    stats, errors = parse_sdiag(text)
    assert errors == 1
    assert stats.server_threads is None  # no series rather than a made-up value
    assert stats.cycles_total == 114
    snapshot = assemble(outputs(sdiag=text), OPTIONS)
    assert snapshot.up and snapshot.scheduler is not None and snapshot.errors == 1


def test_sdiag_job_counters_become_slurm_scheduler_jobs_total() -> None:
    stats, errors = parse_sdiag(read("gotthard-sdiag.txt"))
    assert errors == 0
    assert (stats.jobs_submitted_total, stats.jobs_started_total) == (9, 2)
    families = {f.name: f for f in render(assemble(outputs(), OPTIONS), OPTIONS)}
    assert dict(
        (labels[0], value)
        for labels, value in families["gotthard_slurm_scheduler_jobs_total"].samples
    ) == {"submitted": 9, "started": 2, "completed": 0, "canceled": 0, "failed": 0}


def test_partition_totals_come_from_sinfo_partition_view() -> None:
    partitions, errors = parse_sinfo_partitions(read("gotthard-sinfo-partitions.txt"))
    assert errors == 0
    assert partitions == (
        Partition("debug", "up", True, total_cpus=2, total_nodes=1),
        Partition("gpu", "up", False, total_cpus=2, total_nodes=1),
    )
    # rows sinfo splits by state add up; a row that is neither form is an error
    split, errors = parse_sinfo_partitions("big*|up|3|1/2/0/3\nbig|up|2|0/0/2/2\nbad|up|x\n")
    assert split == (Partition("big", "up", True, total_cpus=5, total_nodes=5),)
    assert errors == 1


def test_partition_totals_are_the_controllers_and_idle_memory_skips_drained_nodes() -> None:
    # the record says 4 nodes / 512 CPUs while only one node is listed: the record wins
    snapshot = assemble(outputs(partitions="debug*|up|4|2/0/510/512\ngpu|up|1|2/0/0/2\n"), OPTIONS)
    samples = {
        (f.name, labels): value for f in render(snapshot, OPTIONS) for labels, value in f.samples
    }
    assert samples[("gotthard_slurm_partition_cpus", ("debug", "total"))] == 512
    assert samples[("gotthard_slurm_partition_nodes", ("debug",))] == 4
    # the only node is allocated+drain: none of its free memory is idle
    assert samples[("gotthard_slurm_partition_memory_bytes", ("debug", "idle"))] == 0
    assert samples[("gotthard_slurm_partition_memory_bytes", ("debug", "total"))] > 0


def test_an_idle_cluster_has_slurm_jobs_series_at_0_for_every_partition() -> None:
    snapshot = assemble(outputs(squeue=""), OPTIONS)
    families = {f.name: f for f in render(snapshot, OPTIONS)}
    jobs = dict(families["gotthard_slurm_jobs"].samples)
    assert jobs[("running", "debug", "")] == 0
    assert jobs[("pending", "gpu", "")] == 0
    assert {labels[1] for labels in jobs} == {"debug", "gpu"}
    assert set(jobs.values()) == {0}
    # with jobs, a state that has them gets no extra empty row
    busy = dict(
        next(
            f
            for f in render(assemble(outputs(), OPTIONS), OPTIONS)
            if f.name == "gotthard_slurm_jobs"
        ).samples
    )
    assert ("running", "gpu", "") in busy and busy[("running", "gpu", "")] == 2
    assert busy[("completed", "gpu", "")] == 0


def test_reservations_from_recorded_scontrol_output() -> None:
    reservations, errors = parse_reservations(read("gotthard-scontrol-show-reservation.txt"))
    assert errors == 0
    assert reservations == (
        Reservation("maint_window", "active", "", "maint,ignore_jobs,spec_nodes", 1),
        Reservation("future_gpu", "inactive", "gpu", "overlap", 1),
    )
    assert parse_reservations(read("scontrol-show-reservation-none.txt")) == ((), 0)
    assert parse_reservations("ReservationName=x NodeCnt=lots\n") == ((), 1)
    none = assemble(outputs(reservations=read("scontrol-show-reservation-none.txt")), OPTIONS)
    names = {f.name: f for f in render(none, OPTIONS)}
    assert names["gotthard_slurm_reservation_info"].samples == []


def test_reservation_flag_values_do_not_reach_the_label() -> None:
    # scontrol prints PURGE_COMP with its time; the label keeps the flag only, so a
    # changed purge time is not a new series.
    line = "ReservationName=r NodeCnt=2 State=ACTIVE Flags=MAINT,PURGE_COMP=00:05:00,MAGNETIC\n"
    (reservation,), errors = parse_reservations(line)
    assert errors == 0
    assert reservation.flags == "maint,purge_comp,magnetic"


# --- slurmdbd: sacctmgr ping (Slurm 24.11+) ----------------------------------------------

#: What sacctmgr ping prints (src/sacctmgr/sacctmgr.c, ``_print_db_ping``, Slurm 24.11+):
#: the primary down, its backup up; it exits 0 while one slurmdbd answers, 1 otherwise.
DBD_PING = "slurmdbd(primary) at dbd1 is DOWN\nslurmdbd(backup) at dbd2 is UP\n"


def test_sacctmgr_ping_becomes_one_slurm_dbd_up_series_per_slurmdbd() -> None:
    runs = outputs()
    runs["dbd"] = CommandOutput(DBD_PING)
    families = {f.name: f for f in render(assemble(runs, OPTIONS), OPTIONS)}
    assert families["gotthard_slurm_dbd_up"].samples == [
        (("dbd1", "primary"), 0),
        (("dbd2", "backup"), 1),
    ]


def test_every_slurmdbd_down_is_read_from_a_failed_sacctmgr_ping() -> None:
    runs = outputs()
    runs["dbd"] = CommandOutput("slurmdbd(primary) at dbd1 is DOWN\n", error="sacctmgr exited 1")
    families = {f.name: f for f in render(assemble(runs, OPTIONS), OPTIONS)}
    assert families["gotthard_slurm_dbd_up"].samples == [(("dbd1", "primary"), 0)]


@pytest.mark.parametrize(
    "printed",
    [
        # what Slurm 22.05.8's sacctmgr prints (seen on the project's machine): it has no
        # ping; with accounting_storage/none it refuses before reading the command
        "invalid keyword: ping\n",
        "You are not running a supported accounting_storage plugin\n"
        "Only 'accounting_storage/slurmdbd' is supported.\n",
        "",
    ],
)
def test_no_understood_ping_is_no_slurm_dbd_up_at_all(printed: str) -> None:
    runs = outputs()
    runs["dbd"] = CommandOutput(printed, error="sacctmgr exited 1")
    families = {f.name for f in render(assemble(runs, OPTIONS), OPTIONS)}
    assert "gotthard_slurm_dbd_up" not in families
