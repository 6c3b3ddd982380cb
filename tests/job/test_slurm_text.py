"""The pure parsers of what ``scontrol show job`` and ``sacct`` print (recorded shapes of
Slurm 22.05), and the summary as sacct returns it."""

from __future__ import annotations

import pytest

from gotthard.job import slurm

#: ``scontrol -o show job`` of an ended GPU job (abridged; values may hold spaces).
SCONTROL = (
    "JobId=7 JobName=train run UserId=alice(1000) GroupId=alice(1000) Account=physics "
    "JobState=COMPLETED Reason=None Partition=gpu TimeLimit=1-00:00:00 "
    "StartTime=2026-12-05T07:00:00 EndTime=2026-12-05T07:30:00 NodeList=nid[001-002] "
    "NumNodes=2 NumCPUs=16 TRES=cpu=16,mem=64G,node=2,billing=16 "
    "TresPerNode=gres:gpu:4 Command=/home/alice/run me.sh AdminComment=hello there"
)


def test_scontrol_fields_with_spaces_and_an_ended_jobs_gpus() -> None:
    job = slurm.from_scontrol("7", SCONTROL)
    assert (job.user, job.account, job.partition, job.state) == (
        "alice",
        "physics",
        "gpu",
        "COMPLETED",
    )
    assert job.ended and job.node_list == "nid[001-002]"
    # an ended job's TRES lose gres/gpu: 4 per node on 2 nodes
    assert (job.nodes, job.cpus, job.gpus) == (2, 16, 8)
    assert job.memory_bytes == 64 << 30 and job.time_limit_seconds == 86400
    assert job.end is not None and job.start is not None and job.end - job.start == 1800
    assert job.admin_comment == "hello there"
    assert slurm.parse_scontrol(SCONTROL)["Command"] == "/home/alice/run me.sh"


def test_sacct_keeps_the_steps_peak_rss_and_a_comment_with_a_bar() -> None:
    text = (
        "7|COMPLETED|alice|physics|gpu|2|nid[001-002]|16|cpu=16,mem=64G,node=2,"
        "gres/gpu=8|1-00:00:00|2026-12-05T07:00:00|2026-12-05T07:30:00||{`v`:`a|b`}\n"
        "7.batch|COMPLETED||physics||1|nid001|8|cpu=8,mem=32G,node=1|||||\n"
        "7.0|COMPLETED||physics||2|nid[001-002]|16||||2026-12-05T07:30:00|12G|\n"
    )
    job = slurm.from_sacct("7", text)
    assert (job.gpus, job.max_rss_bytes) == (8, 12 << 30)
    assert slurm.read_summary(job.admin_comment) == {"v": "a|b"}
    with pytest.raises(slurm.SlurmError, match="job 8: not in Slurm's accounting"):
        slurm.from_sacct("8", text)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("UNLIMITED", None),
        ("Partition_Limit", None),
        ("5", 300),
        ("10:30", 630),
        ("02:00:00", 7200),
        ("1-00:00:00", 86400),
        ("2-3", 2 * 86400 + 3 * 3600),
        ("1-2:30", 86400 + 2 * 3600 + 1800),
    ],
)
def test_slurm_durations(text: str, seconds: int | None) -> None:
    assert slurm.duration(text) == seconds


def test_memory_units_and_a_comment_that_is_not_a_summary() -> None:
    assert [slurm.memory(t) for t in ("512", "1024M", "4G", "1.5T", "x")] == [
        512 << 20,
        1 << 30,
        4 << 30,
        int(1.5 * (1 << 40)),
        None,
    ]
    assert slurm.read_summary("JS1:abc") is None and slurm.read_summary("[1]") is None
