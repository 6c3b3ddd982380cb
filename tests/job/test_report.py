"""``gotthard job report`` against a real Prometheus holding a known history
(:mod:`tests.job.history`): two sites, jobs whose GPUs idle, work without tensor cores or
work well, Lustre job stats and Slingshot traffic of the job's node."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gotthard.sandbox import free_ports
from tests.job import history
from tests.support.cli import gotthard
from tests.support.monitoring import Processes

NOW = int(time.time()) // 60 * 60
#: Job 42 ran 30 minutes, ending 20 minutes ago.
START, END = NOW - 3000, NOW - 1200
RUN = END - START


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("job-history")
    past = history.History()
    job = {"start": START, "end": END, "gpus": 2}
    # 42: two GPUs at 5 %, busy Lustre reads (zurich); 43: two GPUs at 90 % with tensor
    # cores (lugano); 44: GPU-heavy without tensor cores (zurich); 7: the same job id at
    # both sites
    history.gpu_job(
        past,
        site="zurich",
        cluster="alps",
        job_id="42",
        node="nid001",
        utilization=0.05,
        tensor=0.0,
        lustre_bytes_per_second=200e6,
        **job,
    )
    history.gpu_job(
        past, site="lugano", cluster="todi", job_id="43", node="nid001", utilization=0.9,
        tensor=0.5, **job,
    )  # fmt: skip
    history.gpu_job(
        past, site="zurich", cluster="alps", job_id="44", node="nid002", utilization=0.9,
        tensor=0.0, **job,
    )  # fmt: skip
    for site, cluster, node in (("zurich", "alps", "nid003"), ("lugano", "todi", "nid004")):
        history.gpu_job(
            past, site=site, cluster=cluster, job_id="7", node=node, utilization=0.5,
            tensor=0.2, **job,
        )  # fmt: skip
    with Processes(root / "logs") as procs:
        yield history.start(past, root, procs)


def site_file(tmp_path: Path, zurich: str, lugano: str, extra: str = "") -> Path:
    """Two sites, each with one cluster; Slurm is not reachable from these tests (a
    slurm.conf that does not exist), so the report reads Prometheus only."""
    path = tmp_path / "site.toml"
    missing = tmp_path / "no-slurm.conf"
    path.write_text(
        'site = "zurich"\ncluster = "alps"\n'
        f'[sites.zurich]\nprometheus_url = "{zurich}"\n'
        f'[sites.zurich.clusters.alps]\nslurm_conf = "{missing}"\n'
        f'[sites.lugano]\nprometheus_url = "{lugano}"\n'
        f'[sites.lugano.clusters.todi]\nslurm_conf = "{missing}"\n' + extra
    )
    return path


def report(config: Path, *args: str) -> tuple[int, str, str]:
    done = gotthard("--config", str(config), "job", "report", *args)
    return done.returncode, done.stdout, done.stderr


def as_json(config: Path, *args: str) -> tuple[int, dict]:
    code, out, err = report(config, *args, "--format", "json")
    assert code in (0, 1), err
    return code, json.loads(out)


def test_idle_gpus_are_a_finding_naming_metric_and_threshold(
    prometheus: str, tmp_path: Path
) -> None:
    code, data = as_json(site_file(tmp_path, prometheus, prometheus), "42")
    assert code == 1
    assert data["schema"] == "gotthard.job.report/v1"
    assert (data["site"], data["cluster"], data["job_id"]) == ("zurich", "alps", "42")
    assert data["run_seconds"] == pytest.approx(RUN, abs=1)
    assert [(g["instance"], g["gpu"]) for g in data["gpus"]] == [
        ("nid001:9877", "0"),
        ("nid001:9877", "1"),
    ]
    for gpu in data["gpus"]:
        assert gpu["values"]["gpu_utilization"] == pytest.approx(0.05)
        assert gpu["values"]["sm_active"] == pytest.approx(0.045)
        assert gpu["values"]["tensor_active"] == 0
        assert gpu["values"]["dram_active"] == pytest.approx(0.025)
    # memory high-water marks: 1 GiB and 2 GiB; energy: 100 W on 2 GPUs for the run
    assert data["used"]["memory_used"] == 3 * 2**30
    assert data["used"]["energy_joules"] == pytest.approx(2 * 100 * RUN, rel=0.02)
    assert data["lustre"]["read_bytes"] == pytest.approx(200e6 * RUN, rel=0.02)
    assert data["lustre"]["write_bytes"] == pytest.approx(1000 * RUN, rel=0.02)
    # metadata: the MDT's operations only (the OST counts 10/s as well)
    assert data["lustre"]["metadata_operations"] == pytest.approx(10 * RUN, rel=0.02)
    assert data["slingshot"]["tx_bytes"] == pytest.approx(1e6 * RUN, rel=0.05)
    kinds = {f["kind"]: f for f in data["findings"]}
    assert set(kinds) == {"idle_gpus", "io_bound"}
    idle = kinds["idle_gpus"]
    assert (idle["metric"], idle["threshold"], idle["threshold_value"]) == (
        "gotthard_gpu_utilization_ratio",
        "job_gpu_idle_ratio",
        0.1,
    )
    assert idle["value"] == pytest.approx(0.05)
    assert kinds["io_bound"]["threshold"] == "job_lustre_busy_bytes_per_second"
    assert any("Slurm" in note for note in data["notes"])


def test_a_busy_job_with_tensor_cores_has_no_finding(prometheus: str, tmp_path: Path) -> None:
    code, data = as_json(site_file(tmp_path, prometheus, prometheus), "43")
    assert code == 0
    assert (data["site"], data["cluster"]) == ("lugano", "todi")
    assert data["findings"] == []
    assert data["used"]["gpu_utilization"] == pytest.approx(0.9)


def test_tensor_cores_unused_on_a_gpu_heavy_job(prometheus: str, tmp_path: Path) -> None:
    code, data = as_json(site_file(tmp_path, prometheus, prometheus), "44")
    assert code == 1
    assert [(f["kind"], f["metric"], f["threshold"]) for f in data["findings"]] == [
        ("tensor_unused", "gotthard_gpu_tensor_active_ratio", "job_tensor_active_ratio")
    ]


def test_thresholds_are_tuned_in_the_site_file(prometheus: str, tmp_path: Path) -> None:
    tuned = "[monitoring.thresholds]\njob_gpu_idle_ratio = 0.01\n"
    _, data = as_json(site_file(tmp_path, prometheus, prometheus, tuned), "42")
    assert "idle_gpus" not in {f["kind"] for f in data["findings"]}


def test_table_and_markdown_end_with_the_findings(prometheus: str, tmp_path: Path) -> None:
    config = site_file(tmp_path, prometheus, prometheus)
    code, out, _ = report(config, "42")
    assert code == 1
    assert out.splitlines()[0].split() == ["SECTION", "WHAT", "VALUE"]
    findings = out[out.index("FINDINGS of job 42:") :]
    assert "idle_gpus: 2 of 2 GPUs idle" in findings
    assert "[gotthard_gpu_utilization_ratio; job_gpu_idle_ratio = 0.1]" in findings
    code, out, _ = report(config, "42", "--format", "markdown")
    assert out.startswith("# Job 42 (zurich/alps)\n")
    assert "## Findings" in out and "- idle_gpus: " in out


def test_a_job_id_at_both_sites_needs_its_cluster(prometheus: str, tmp_path: Path) -> None:
    config = site_file(tmp_path, prometheus, prometheus)
    code, out, err = report(config, "7")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        "gotthard: job 7 is known at several clusters (zurich/alps, lugano/todi):"
        " name one with --cluster"
    ]
    code, data = as_json(config, "7", "--cluster", "todi")
    assert (data["site"], data["gpus"][0]["instance"]) == ("lugano", "nid004:9877")


def test_an_unknown_job_is_one_line_exit_2(prometheus: str, tmp_path: Path) -> None:
    code, out, err = report(site_file(tmp_path, prometheus, prometheus), "999")
    assert (code, out) == (2, "")
    assert err.strip().splitlines() == [
        "gotthard: job 999: unknown (no series of it in the last 604800s at lugano/todi,"
        " zurich/alps)"
    ]
    code, _, err = report(site_file(tmp_path, prometheus, prometheus), "1", "--cluster", "nope")
    assert code == 2 and "cluster 'nope' is in no configured site" in err


def test_an_unreachable_prometheus_is_one_line_exit_2(prometheus: str, tmp_path: Path) -> None:
    (port,) = free_ports(1)
    down = f"http://127.0.0.1:{port}"
    # the job is found at the site that answers
    code, data = as_json(site_file(tmp_path, prometheus, down), "42")
    assert data["site"] == "zurich"
    # a job found nowhere, with a site that cannot be asked: that site is named
    code, out, err = report(site_file(tmp_path, down, down), "42")
    assert (code, out) == (2, "")
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert lines[0].startswith("gotthard: job 42: cannot ask site zurich: Prometheus cannot reach")


def test_the_digest_lists_the_findings_by_account(prometheus: str, tmp_path: Path) -> None:
    config = site_file(tmp_path, prometheus, prometheus)
    done = gotthard("--config", str(config), "job", "digest", "--since", "2h", "--format", "json")
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)
    assert data["schema"] == "gotthard.job.digest/v1" and data["problems"] == []
    (physics,) = data["accounts"]
    assert (physics["account"], physics["jobs"], physics["with_findings"]) == ("physics", 5, 2)
    assert physics["kinds"] == {"idle_gpus": 1, "io_bound": 1, "tensor_unused": 1}
    found = {(j["job_id"], j["site"]): j["findings"] for j in physics["findings"]}
    assert found == {
        ("42", "zurich"): ["idle_gpus", "io_bound"],
        ("44", "zurich"): ["tensor_unused"],
    }
    # one cluster only; nothing in the last minute
    done = gotthard("--config", str(config), "job", "digest", "--cluster", "todi")
    assert done.returncode == 0 and "physics  2  0  -" in done.stdout
    done = gotthard("--config", str(config), "job", "digest", "--since", "1m")
    assert done.returncode == 0 and done.stdout == "ACCOUNT  JOBS  WITH_FINDINGS  FINDINGS\n"
