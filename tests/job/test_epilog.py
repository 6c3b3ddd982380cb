"""``gotthard job epilog`` on the real Slurm sandbox with accounting (a real slurmdbd on
MariaDB): a job ends, the epilog reports on it from a real Prometheus holding its GPUs'
history, and stores the compact summary in its AdminComment, where ``sacct`` shows it
(slurmctld refuses ``scontrol update`` of an ended job, so ``sacctmgr update job`` writes
it); it never fails (exit 0, one log line) and stays within its time bound."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gotthard.job import slurm
from gotthard.sandbox import Sandbox, free_ports
from tests.job import history
from tests.support.cli import gotthard
from tests.support.lifecycle import running
from tests.support.monitoring import Processes

pytestmark = pytest.mark.slurm


def finished(sandbox: Sandbox, job_id: str, timeout: float = 60) -> slurm.SlurmJob:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = sandbox.run_command(["scontrol", "-o", "show", "job", job_id]).stdout
        job = slurm.from_scontrol(job_id, out)
        if job.ended:
            return job
        time.sleep(0.25)
    raise AssertionError(f"job {job_id} not finished after {timeout}s")


def gpu_job(sandbox: Sandbox, *args: str) -> slurm.SlurmJob:
    """A job on both fake GPUs of the sandbox, to its end."""
    job_id = sandbox.submit("-p", "gpu", "--gres=gpu:2", "-o", "/dev/null", *args)
    return finished(sandbox, job_id)


def admin_comment(sandbox: Sandbox, job_id: str) -> str:
    """The job's AdminComment as ``sacct`` prints it."""
    argv = ["sacct", "-P", "-n", "-j", job_id, "-o", ",".join(slurm.SACCT_FIELDS)]
    return slurm.from_sacct(job_id, sandbox.run_command(argv).stdout).admin_comment


@pytest.fixture(scope="module")
def slurm_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    sandbox = Sandbox.with_free_ports(tmp_path_factory.mktemp("accounted"), accounting=True)
    with running(sandbox, "the Slurm sandbox with accounting", with_exporter=False,
                 with_prometheus=False):  # fmt: skip
        yield sandbox


def site_file(root: Path, sandbox: Sandbox, prometheus: str) -> Path:
    path = root / "site.toml"
    path.write_text(
        'site = "local"\ncluster = "sandbox"\n'
        f'[sites.local]\nprometheus_url = "{prometheus}"\n'
        f'[sites.local.clusters.sandbox]\nslurm_conf = "{sandbox.slurm_conf}"\n'
    )
    return path


@pytest.fixture(scope="module")
def jobs(slurm_sandbox: Sandbox) -> dict[str, slurm.SlurmJob]:
    """An idle job with a 10-minute time limit and a busy one without a limit, ended."""
    return {
        "idle": gpu_job(slurm_sandbox, "--time=10", "--wrap", "sleep 3"),
        "busy": gpu_job(slurm_sandbox, "--wrap", "sleep 3"),
    }


@pytest.fixture(scope="module")
def prometheus(
    jobs: dict[str, slurm.SlurmJob], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The GPUs' history of both jobs, over their runs as Slurm recorded them."""
    root = tmp_path_factory.mktemp("epilog-history")
    past = history.History()
    for name, job in jobs.items():
        assert job.start is not None and job.end is not None
        history.gpu_job(
            past,
            site="local",
            cluster="sandbox",
            job_id=job.job_id,
            node=f"node-{name}",
            gpus=2,
            utilization=0.05 if name == "idle" else 0.9,
            tensor=0.0 if name == "idle" else 0.4,
            start=int(job.start),
            end=int(job.end),
        )
    with Processes(root / "logs") as procs:
        yield history.start(past, root, procs)


def epilog(config: Path, job_id: str, *args: str, log: Path | None = None) -> tuple[int, str]:
    env = {"SLURM_JOB_ID": job_id}
    extra = ("--log-file", str(log)) if log else ()
    if "--timeout" not in args:  # a loaded test machine is not the bound under test here
        extra += ("--timeout", "60")
    done = gotthard("--config", str(config), "job", "epilog", *args, *extra, env=env)
    return done.returncode, done.stderr


def test_an_idle_job_gets_its_summary_in_the_admin_comment(
    slurm_sandbox: Sandbox, jobs: dict[str, slurm.SlurmJob], prometheus: str, tmp_path: Path
) -> None:
    job = jobs["idle"]
    config = site_file(tmp_path, slurm_sandbox, prometheus)
    code, err = epilog(config, job.job_id, "--cluster", "sandbox", log=tmp_path / "epilog.log")
    assert code == 0, err
    (line,) = err.strip().splitlines()
    assert f"job {job.job_id}: stored summary with sacctmgr update job" in line
    assert line in (tmp_path / "epilog.log").read_text()
    assert (tmp_path / "epilog.log").stat().st_mode & 0o777 == 0o600
    comment = admin_comment(slurm_sandbox, job.job_id)
    summary = slurm.read_summary(comment)
    assert summary is not None, comment
    assert summary["v"] == "gotthard.job.summary/v1"
    assert summary["gpus"] == 2
    assert summary["util"] == pytest.approx(0.05)
    kinds = {kind: threshold for kind, threshold, _ in summary["findings"]}
    # the Slurm request: 2 GPUs and a 10-minute limit, of which it ran seconds
    assert kinds == {
        "idle_gpus": "job_gpu_idle_ratio",
        "time_limit_unused": "job_time_limit_used_ratio",
    }


def test_a_busy_job_gets_no_summary_unless_always(
    slurm_sandbox: Sandbox, jobs: dict[str, slurm.SlurmJob], prometheus: str, tmp_path: Path
) -> None:
    job = jobs["busy"]
    config = site_file(tmp_path, slurm_sandbox, prometheus)
    code, err = epilog(config, job.job_id)
    assert code == 0 and "no findings, nothing stored" in err
    assert admin_comment(slurm_sandbox, job.job_id) == ""
    code, err = epilog(config, job.job_id, "--always")
    assert code == 0 and "stored summary" in err, err
    summary = slurm.read_summary(admin_comment(slurm_sandbox, job.job_id))
    assert summary is not None
    assert summary["findings"] == [] and summary["util"] == pytest.approx(0.9)


def test_any_error_is_exit_0_with_one_log_line(
    slurm_sandbox: Sandbox, jobs: dict[str, slurm.SlurmJob], tmp_path: Path
) -> None:
    (port,) = free_ports(1)
    config = site_file(tmp_path, slurm_sandbox, f"http://127.0.0.1:{port}")
    job = jobs["busy"]
    before = admin_comment(slurm_sandbox, job.job_id)
    code, err = epilog(config, job.job_id)
    assert code == 0
    (line,) = err.strip().splitlines()
    assert f"job {job.job_id}: not stored: JobError: " in line and "cannot reach" in line
    assert admin_comment(slurm_sandbox, job.job_id) == before
    code, err = epilog(config, "")
    assert code == 0 and "no job id: --job-id or $SLURM_JOB_ID" in err


def test_a_prometheus_that_never_answers_is_cut_off_in_time(
    slurm_sandbox: Sandbox, jobs: dict[str, slurm.SlurmJob], tmp_path: Path
) -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        config = site_file(tmp_path, slurm_sandbox, f"http://127.0.0.1:{silent.getsockname()[1]}")
        started = time.monotonic()
        code, err = epilog(config, jobs["idle"].job_id, "--timeout", "2")
        took = time.monotonic() - started
    assert code == 0 and "not stored" in err
    assert took < 8, took  # 2 s of work plus the interpreter's start
