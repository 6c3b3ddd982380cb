"""End to end in the sandbox: real Slurm (with a real slurmdbd for sacct), the rendered
exporters, Prometheus and Alertmanager of ``gotthard sandbox up``, the node exporter's
``gpu`` collector on the FAKE ``libnvidia-ml.so.1`` (tests/fakenvml) with a fake procfs
that puts each job's processes on the sandbox's two fake GPUs (as the GPU attribution
tests do), and slurmctld running the EpilogSlurmctld script ``deploy render`` writes.

A job holding both GPUs at 5 % gets a report with the idle-GPU finding and an AdminComment
summary; a job at 90 % (with its tensor cores busy) gets neither.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gotthard.deploy.roles import NODE_EXPORTER
from gotthard.job import slurm
from gotthard.monitoring.dashboards import build
from gotthard.monitoring.dashboards import check as live
from gotthard.sandbox import Sandbox, free_ports
from gotthard.sandbox.core import free_sandbox_ports
from gotthard.sandbox.processes import wait_for
from tests.fakenvml import fakenvml
from tests.support.cli import gotthard
from tests.support.lifecycle import running
from tests.support.monitoring import instant

pytestmark = pytest.mark.slurm

#: The GPM metric id of tensor activity (percent in the fixture).
TENSOR = f"gpm.{fakenvml.pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL}"


class GpuSandbox(Sandbox):
    """The sandbox with accounting, a node exporter on the fake NVML library, and
    slurmctld's EpilogSlurmctld set to the script the local render writes."""

    def __init__(self, directory: Path, fake_env: dict[str, str], procfs: Path) -> None:
        (port,) = free_ports(1)
        directory = directory.absolute()
        script = directory / "local" / "sandbox" / "gotthard-epilog-slurmctld.sh"
        settings = {
            "exporter": {
                "path_procfs": str(procfs),
                "gpu": {"poll_interval_seconds": 1.0, "kubelet_socket": str(procfs / "none")},
            },
            "deploy": {
                "prometheus": {"targets": {"sandbox": {NODE_EXPORTER.name: [f"127.0.0.1:{port}"]}}}
            },
        }
        super().__init__(
            directory,
            ports=free_sandbox_ports(),
            accounting=True,
            slurm_conf_extra=(f"EpilogSlurmctld={script}",),
            site_settings=settings,
        )
        self.epilog_log = script.with_name("epilog-slurmctld.log")
        self.fake_env = fake_env

    def exporter_env(self) -> dict[str, str]:
        return {**self.env, **self.fake_env}


@pytest.fixture(scope="module")
def fake_gpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[fakenvml.Fixture, Path, dict]:
    root = tmp_path_factory.mktemp("fake-gpus")
    so = fakenvml.build(root / "fakenvml")
    fixture = fakenvml.Fixture(root / "nvml.txt", fakenvml.h200_node(2))
    env = fakenvml.subprocess_env(so, fixture.path, base={})
    return fixture, root / "proc", env


@pytest.fixture(scope="module")
def sandbox(
    fake_gpus: tuple[fakenvml.Fixture, Path, dict], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GpuSandbox]:
    _, procfs, env = fake_gpus
    procfs.mkdir(parents=True, exist_ok=True)
    built = GpuSandbox(tmp_path_factory.mktemp("sandbox"), env, procfs)
    with running(built, "the sandbox with GPUs and accounting"):
        yield built


def config(sandbox: GpuSandbox) -> str:
    """The rendered site file of the sandbox's cluster (what its processes read)."""
    return str(sandbox.directory / "local" / "sandbox" / "gotthard.toml")


def put_job_on_gpus(
    fixture: fakenvml.Fixture, procfs: Path, job_id: str, utilisation: int, tensor: float
) -> None:
    """Processes of *job_id* on both fake GPUs (its slurmstepd cgroup), at *utilisation* %."""
    values: dict[str, Any] = {}
    for gpu in range(2):
        pid = 7000 + 10 * int(job_id) + gpu
        (procfs / str(pid)).mkdir(parents=True, exist_ok=True)
        (procfs / str(pid) / "cgroup").write_text(
            f"0::/system.slice/slurmstepd.scope/job_{job_id}/step_0/user/task_{gpu}\n"
        )
        values[f"{gpu}.procs"] = fakenvml.procs_value([(pid, (gpu + 1) << 30)])
        values[f"{gpu}.util.gpu"] = utilisation
        values[f"{gpu}.{TENSOR}"] = tensor
    fixture.update(values)


def off_gpus(fixture: fakenvml.Fixture) -> None:
    fixture.update({"0.procs": "", "1.procs": ""})


def state(sandbox: GpuSandbox, job_id: str) -> slurm.SlurmJob:
    out = sandbox.run_command(["scontrol", "-o", "show", "job", job_id]).stdout
    return slurm.from_scontrol(job_id, out)


def sacct_comment(sandbox: GpuSandbox, job_id: str) -> str:
    argv = ["sacct", "-P", "-n", "-j", job_id, "-o", ",".join(slurm.SACCT_FIELDS)]
    done = sandbox.run_command(argv, check=False)
    try:
        return slurm.from_sacct(job_id, done.stdout).admin_comment
    except slurm.SlurmError:
        return ""


def gpu_job(
    sandbox: GpuSandbox, fake_gpus: tuple[fakenvml.Fixture, Path, dict], utilisation: int,
    tensor: float, seconds: int,
) -> str:  # fmt: skip
    """A job of *seconds* on both GPUs at *utilisation*, running and seen by Prometheus."""
    fixture, procfs, _ = fake_gpus
    # a one-minute limit it uses a good share of: no time-limit finding
    job_id = sandbox.submit("-p", "gpu", "--gres=gpu:2", "--time=1", "-o", "/dev/null",
                            "--wrap", f"sleep {seconds}")  # fmt: skip
    assert wait_for(lambda: state(sandbox, job_id).state == "RUNNING", 30, 0.2)
    put_job_on_gpus(fixture, procfs, job_id, utilisation, tensor)
    seen = f'count_over_time(gotthard_gpu_job_info{{job_id="{job_id}"}}[1m]) >= 4'
    assert wait_for(lambda: len(instant(sandbox.prometheus_url, seen)) == 2, 60, 0.5), job_id
    return job_id


def ended(sandbox: GpuSandbox, fixture: fakenvml.Fixture, job_id: str) -> None:
    assert wait_for(lambda: state(sandbox, job_id).ended, 90, 0.5), job_id
    off_gpus(fixture)


def report(sandbox: GpuSandbox, job_id: str) -> tuple[int, dict[str, Any]]:
    done = gotthard("--config", config(sandbox), "job", "report", job_id, "--format", "json")
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def epilog_line(sandbox: GpuSandbox, job_id: str) -> str:
    if not sandbox.epilog_log.exists():
        return ""
    lines = [
        line for line in sandbox.epilog_log.read_text().splitlines() if f" job {job_id}:" in line
    ]
    return lines[-1] if lines else ""


def test_an_idle_job_gets_the_finding_and_its_summary_a_busy_one_neither(
    sandbox: GpuSandbox, fake_gpus: tuple[fakenvml.Fixture, Path, dict]
) -> None:
    fixture = fake_gpus[0]
    idle = gpu_job(sandbox, fake_gpus, 5, 0.0, 30)
    # while it runs: the Job dashboard's GPU panels read the sandbox's Prometheus
    dashboard = next(d for d in build.build_dashboards() if d["uid"] == "gotthard-job")
    results = live.check_dashboard(live.Prometheus(sandbox.prometheus_url), dashboard)
    gpu_panels = [r for r in results if "Lustre" not in r.panel and "Slingshot" not in r.panel]
    assert gpu_panels and all(r.status == live.OK for r in gpu_panels), gpu_panels
    code, running_report = report(sandbox, idle)
    assert code == 1 and running_report["state"] == "RUNNING"
    ended(sandbox, fixture, idle)

    # the epilog stored the summary (through slurmdbd: sacct shows it)
    assert wait_for(lambda: sacct_comment(sandbox, idle), 60, 0.5), epilog_line(sandbox, idle)
    assert "stored summary with sacctmgr update job" in epilog_line(sandbox, idle)
    summary = slurm.read_summary(sacct_comment(sandbox, idle))
    assert summary is not None and summary["gpus"] == 2
    assert summary["util"] == pytest.approx(0.05, abs=0.005)
    assert [f[:2] for f in summary["findings"]] == [["idle_gpus", "job_gpu_idle_ratio"]]
    code, data = report(sandbox, idle)
    assert code == 1
    assert (data["state"], data["request"]["gpus"]) == ("COMPLETED", 2)
    assert [(f["kind"], f["metric"], f["threshold"]) for f in data["findings"]] == [
        ("idle_gpus", "gotthard_gpu_utilization_ratio", "job_gpu_idle_ratio")
    ]

    busy = gpu_job(sandbox, fake_gpus, 90, 52.25, 20)
    ended(sandbox, fixture, busy)
    assert wait_for(lambda: "nothing stored" in epilog_line(sandbox, busy), 60, 0.5), epilog_line(
        sandbox, busy
    )
    assert sacct_comment(sandbox, busy) == ""
    code, data = report(sandbox, busy)
    assert code == 0 and data["findings"] == []
    assert data["used"]["gpu_utilization"] == pytest.approx(0.9, abs=0.01)
    assert data["used"]["tensor_active"] == pytest.approx(0.5225, abs=0.01)
