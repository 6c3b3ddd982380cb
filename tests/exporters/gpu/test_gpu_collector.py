"""The gpu collector through the real nvidia-ml-py and the fake libnvidia-ml.so.1."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gotthard.exporters.families import render_text
from gotthard.exporters.gpu.collector import GpuCollector
from gotthard.exporters.gpu.nvml import GpuUnavailable
from gotthard.exporters.runtime import CollectorRunner, Exporter
from gotthard.exporters.settings import GpuExporterConfig
from tests.exporters.gpu.fakekubelet import (
    FakeContainer,
    FakeDevice,
    FakePod,
    encode_list_response,
    fake_kubelet,
    short_socket_dir,
)
from tests.fakenvml import fakenvml
from tests.support.cli import gotthard
from tests.support.monitoring import promtool_check_metrics

#: ``gotthard`` arguments: one scrape of the GPU collector.
GPU_ONCE = ("exporter", "--once", "--collectors", "gpu")


def collector(tmp_path: Path, **overrides: object) -> GpuCollector:
    settings = {"kubelet_socket": str(tmp_path / "no-kubelet.sock"), **overrides}
    return GpuCollector(GpuExporterConfig(**settings), procfs=str(tmp_path / "proc"))


def scrape(gpu: GpuCollector) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = render_text(gpu.render(gpu.poll()))
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def value(found: dict, name: str, **labels: str) -> float | None:
    matches = [
        v
        for sample_labels, v in found.get(name, [])
        if all(sample_labels.get(k) == want for k, want in labels.items())
    ]
    assert len(matches) <= 1, (name, labels, matches)
    return matches[0] if matches else None


def h200_collector(fake_nvml, tmp_path: Path, gpus: int) -> GpuCollector:
    """A collector on the fake NVML with an H200 node of *gpus* GPUs."""
    fake_nvml.write(fakenvml.h200_node(gpus))
    return collector(tmp_path)


def scrape_after_xid(fake_nvml, gpu: GpuCollector, index: int, xid: int) -> tuple[dict, int]:
    """Add XID *xid* on GPU *index* and scrape until the background thread counted it:
    the scrape and the fake's event number."""
    event = fake_nvml.add_event(index, xid)
    deadline = time.monotonic() + 5
    while value(found := scrape(gpu), "gotthard_gpu_last_xid", gpu=str(index)) != xid:
        assert time.monotonic() < deadline, f"XID {xid} never counted"
        time.sleep(0.05)
    return found, event


def value_labels(found: dict, name: str, **labels: str) -> dict[str, str]:
    """The labels of the one sample of *name* with *labels*."""
    (match,) = [
        sample_labels
        for sample_labels, _ in found.get(name, [])
        if all(sample_labels.get(k) == want for k, want in labels.items())
    ]
    return match


def h200_with_links() -> dict:
    lines = fakenvml.with_traffic(fakenvml.h200_node(8), links=18)
    lines["5.clocks_event_reasons"] = hex(0x4 | 0x40)
    lines["5.violation.0"] = 2_500_000_000
    lines["6.ecc.corrected"] = 17
    lines["6.remapped_rows"] = "3,1,1,0"
    return lines


def test_h200_node_reports_every_metric_in_base_units(fake_nvml, tmp_path: Path) -> None:
    fake_nvml.write(h200_with_links())
    gpu = collector(tmp_path)
    first = scrape(gpu)
    # GPM needs two samples: absent on the first poll, present on the second
    assert "gotthard_gpu_sm_active_ratio" not in first
    found = scrape(gpu)

    assert len(found["gotthard_gpu_info"]) == 8
    labels, _ = found["gotthard_gpu_info"][0]
    assert labels["name"] == "NVIDIA H200"
    assert labels["driver_version"] == "570.133.20"
    assert labels["cuda_version"] == "12.8"
    assert labels["pci_bus_id"].startswith("00000000:")
    uuid3 = next(lab["uuid"] for lab, _ in found["gotthard_gpu_info"] if lab["gpu"] == "3")
    assert value(found, "gotthard_gpu_utilization_ratio", gpu="3", uuid=uuid3) == pytest.approx(
        0.87
    )
    assert value(found, "gotthard_gpu_memory_utilization_ratio", gpu="3") == pytest.approx(0.43)
    assert value(found, "gotthard_gpu_memory_used_bytes", gpu="3") == 4 * 1024**3
    assert value(found, "gotthard_gpu_memory_total_bytes", gpu="3") == 143771 * 1024**2
    assert value(found, "gotthard_gpu_memory_reserved_bytes", gpu="3") == 540 * 1024**2
    assert value(found, "gotthard_gpu_power_watts", gpu="3") == pytest.approx(403.0)
    assert value(found, "gotthard_gpu_power_limit_watts", gpu="3") == pytest.approx(700.0)
    assert value(found, "gotthard_gpu_energy_joules_total", gpu="3") == pytest.approx(5_000_000.003)
    assert value(found, "gotthard_gpu_temperature_celsius", gpu="3", sensor="gpu") == 43
    assert value(found, "gotthard_gpu_temperature_celsius", gpu="3", sensor="memory") == 48
    assert value(found, "gotthard_gpu_clock_hertz", gpu="3", clock="sm") == 1980e6
    assert value(found, "gotthard_gpu_clock_hertz", gpu="3", clock="memory") == 3201e6
    assert value(found, "gotthard_gpu_clocks_event_reasons", gpu="5", reason="sw_power_cap") == 1
    assert (
        value(found, "gotthard_gpu_clocks_event_reasons", gpu="5", reason="hw_thermal_slowdown")
        == 1
    )
    assert value(found, "gotthard_gpu_clocks_event_reasons", gpu="5", reason="gpu_idle") == 0
    assert len([s for s in found["gotthard_gpu_clocks_event_reasons"] if s[0]["gpu"] == "5"]) == 9
    assert value(found, "gotthard_gpu_throttle_seconds_total", gpu="5", reason="power") == 2.5
    assert value(found, "gotthard_gpu_ecc_errors_total", gpu="6", type="corrected") == 17
    assert value(found, "gotthard_gpu_remapped_rows", gpu="6", state="correctable") == 3
    assert value(found, "gotthard_gpu_remapped_rows", gpu="6", state="pending") == 1
    assert value(found, "gotthard_gpu_pcie_replays_total", gpu="6") == 0
    assert value(found, "gotthard_gpu_pcie_bytes_total", gpu="2", direction="rx") == 20_002
    # NVLink per GPU, summed over its 18 links (tx 1000 + link KiB, receive errors link % 2)
    assert value(found, "gotthard_gpu_nvlink_bytes_total", gpu="1", direction="tx") == (
        sum(1000 + link for link in range(18)) * 1024
    )
    assert value(found, "gotthard_gpu_nvlink_errors_total", gpu="1", type="rcv") == 9
    assert len([s for s in found["gotthard_gpu_nvlink_bytes_total"] if s[0]["gpu"] == "0"]) == 2
    assert "gotthard_gpu_nvlink_link_bytes_total" not in found
    assert value(found, "gotthard_gpu_sm_active_ratio", gpu="3") == pytest.approx(0.75)
    assert value(found, "gotthard_gpu_sm_occupancy_ratio", gpu="3") == pytest.approx(0.40)
    assert value(found, "gotthard_gpu_tensor_active_ratio", gpu="3") == pytest.approx(0.5225)
    assert value(found, "gotthard_gpu_dram_active_ratio", gpu="3") == pytest.approx(0.31)
    assert all(v == 1 for _, v in found["gotthard_gpu_health"])
    assert value(found, "gotthard_gpu_last_xid", gpu="0") == 0
    gpu.close()


def test_nvml_is_initialised_once_and_shut_down_cleanly(fake_nvml, tmp_path: Path) -> None:
    fake_nvml.write(fakenvml.h200_node(8))
    gpu = collector(tmp_path)
    for _ in range(3):
        gpu.poll()
    lib = fake_nvml.lib
    assert lib.init_calls() == 1 and lib.init_count() == 1
    assert lib.gpm_samples_live() == 8  # one kept per GPU for the next interval
    assert lib.event_sets_live() == 1
    gpu.close()
    assert lib.init_count() == 0 and lib.shutdown_calls() == 1
    assert lib.gpm_samples_live() == 0 and lib.gpm_bad_frees() == 0
    assert lib.event_sets_live() == 0


def test_mig_instances_carry_gpu_instance(fake_nvml, tmp_path: Path) -> None:
    fake_nvml.write(fakenvml.mig_gpu())
    gpu = collector(tmp_path)
    gpu.poll()
    found = scrape(gpu)
    instances = {labels["gpu_instance"] for labels, _ in found["gotthard_gpu_memory_total_bytes"]}
    assert instances == {"", "1", "5", "13"}
    assert (
        value(found, "gotthard_gpu_memory_total_bytes", gpu="0", gpu_instance="5") == 20 * 1024**3
    )
    # whole-GPU utilisation is NotSupported under MIG: absent, not 0
    assert "gotthard_gpu_utilization_ratio" not in found
    assert {labels["gpu_instance"] for labels, _ in found["gotthard_gpu_health"]} == {
        "",
        "1",
        "5",
        "13",
    }
    gpu.close()


def test_a_gpu_falling_off_the_bus_between_scrapes(fake_nvml, tmp_path: Path) -> None:
    fake_nvml.write(fakenvml.h200_node(8))
    gpu = collector(tmp_path)
    before = scrape(gpu)
    assert value(before, "gotthard_gpu_health", gpu="3") == 1
    fake_nvml.update({"3.lost": 1})
    after = scrape(gpu)
    assert value(after, "gotthard_gpu_health", gpu="3") == 0
    assert value(after, "gotthard_gpu_utilization_ratio", gpu="3") is None
    for other in ("0", "2", "4", "7"):
        assert value(after, "gotthard_gpu_health", gpu=other) == 1
        assert value(after, "gotthard_gpu_utilization_ratio", gpu=other) is not None
    assert len(after["gotthard_gpu_info"]) == 8  # still listed, so dashboards show it as lost
    # the explicit lost signal: 1 for the lost GPU, 0 for every GPU that reads
    assert value(before, "gotthard_gpu_lost", gpu="3") == 0
    assert value(after, "gotthard_gpu_lost", gpu="3") == 1
    assert [v for labels, v in after["gotthard_gpu_lost"] if labels["gpu"] != "3"] == [0] * 7
    gpu.close()


def test_a_lost_gpu_keeps_its_xid_79_with_the_time_it_was_seen(fake_nvml, tmp_path: Path) -> None:
    gpu = h200_collector(fake_nvml, tmp_path, 4)
    gpu.poll()
    before = time.time()
    _, event = scrape_after_xid(fake_nvml, gpu, 2, 79)
    # the GPU falls off the bus after its XID 79 (the real driver delivers an event once)
    fake_nvml.update({f"event.{event}": None, "2.lost": 1})
    found = scrape(gpu)
    assert value(found, "gotthard_gpu_lost", gpu="2") == 1
    assert value(found, "gotthard_gpu_xid_errors_total", gpu="2", xid="79") == 1
    assert value(found, "gotthard_gpu_last_xid", gpu="2") == 79
    seen = value(found, "gotthard_gpu_xid_last_timestamp_seconds", gpu="2", xid="79")
    assert seen is not None and before <= seen <= time.time()
    # other GPUs have seen no XID: no timestamp series at all
    assert {labels["gpu"] for labels, _ in found["gotthard_gpu_xid_last_timestamp_seconds"]} == {
        "2"
    }
    # NVML is enumerated again while a GPU is lost; the lost GPU (no UUID readable now)
    # stays the one GPU it was, with its XIDs
    gpu.source.rediscover_every = 1
    inits = fake_nvml.lib.init_calls()
    for _ in range(3):
        found = scrape(gpu)
    assert fake_nvml.lib.init_calls() > inits
    assert [
        (labels["uuid"], v) for labels, v in found["gotthard_gpu_lost"] if labels["gpu"] == "2"
    ] == [(value_labels(found, "gotthard_gpu_info", gpu="2")["uuid"], 1)]
    assert value(found, "gotthard_gpu_xid_last_timestamp_seconds", gpu="2", xid="79") == seen
    gpu.close()


def test_a_gpu_gone_from_the_device_list_is_lost_until_listed_again(
    fake_nvml, tmp_path: Path
) -> None:
    gpu = h200_collector(fake_nvml, tmp_path, 4)
    gpu.source.rediscover_every = 1  # enumerate again at every poll while one is missing
    uuid = value_labels(scrape(gpu), "gotthard_gpu_lost", gpu="3")["uuid"]
    fake_nvml.update({"count": 3})  # the driver stopped listing GPU 3
    found = scrape(gpu)
    assert value(found, "gotthard_gpu_lost", gpu="3", uuid=uuid) == 1
    assert value(found, "gotthard_gpu_health", gpu="3", uuid=uuid) == 0
    assert value(found, "gotthard_gpu_memory_total_bytes", gpu="3") is None
    assert [value(found, "gotthard_gpu_lost", gpu=i) for i in "012"] == [0, 0, 0]
    fake_nvml.update({"count": 4})
    found = scrape(gpu)
    assert value(found, "gotthard_gpu_lost", gpu="3", uuid=uuid) == 0
    assert value(found, "gotthard_gpu_health", gpu="3", uuid=uuid) == 1
    gpu.close()


def test_a_restarted_exporter_reports_lost_only_what_nvml_says_is_lost(
    fake_nvml, tmp_path: Path
) -> None:
    # before the restart: GPU 3 left the device list, GPU 1 answers GPU_IS_LOST
    fake_nvml.write({**fakenvml.h200_node(4), "count": 3, "1.lost": 1})
    gpu = collector(tmp_path)
    found = scrape(gpu)
    # a fresh exporter never listed GPU 3: no evidence, no series, nothing lost
    assert value(found, "gotthard_gpu_lost", gpu="3") is None
    # NVML still says GPU 1 is lost (its UUID unreadable too): lost again
    assert value(found, "gotthard_gpu_lost", gpu="1") == 1
    assert [value(found, "gotthard_gpu_lost", gpu=i) for i in "02"] == [0, 0]
    gpu.close()


def test_not_supported_everywhere_leaves_metrics_absent_and_logs_once(
    fake_nvml, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake_nvml.write(fakenvml.consumer_card())
    gpu = collector(tmp_path)
    with caplog.at_level(logging.INFO, logger="gotthard.exporter.gpu"):
        snapshot = gpu.poll()
        first_logs = [r for r in caplog.records if "not supported" in r.getMessage()]
        caplog.clear()
        gpu.poll()
        again = [r for r in caplog.records if "not supported" in r.getMessage()]
    found = scrape(gpu)
    assert snapshot.errors == 0
    assert first_logs and not again
    for absent in (
        "gotthard_gpu_ecc_errors_total",
        "gotthard_gpu_remapped_rows",
        "gotthard_gpu_throttle_seconds_total",
        "gotthard_gpu_sm_active_ratio",
        "gotthard_gpu_xid_errors_total",
        "gotthard_gpu_last_xid",
        "gotthard_gpu_nvlink_errors_total",
    ):
        assert absent not in found, absent
    assert value(found, "gotthard_gpu_health", gpu="0") == 1
    assert value(found, "gotthard_gpu_utilization_ratio", gpu="0") is not None
    gpu.close()


def test_xid_79_is_counted_in_the_background_and_marks_the_gpu_unhealthy(
    fake_nvml, tmp_path: Path
) -> None:
    gpu = h200_collector(fake_nvml, tmp_path, 4)
    gpu.poll()
    found, _ = scrape_after_xid(fake_nvml, gpu, 2, 79)
    assert value(found, "gotthard_gpu_xid_errors_total", gpu="2", xid="79") == 1
    assert value(found, "gotthard_gpu_health", gpu="2") == 0
    # a later, harmless XID (13: graphics engine exception) does not hide the fatal one
    found, _ = scrape_after_xid(fake_nvml, gpu, 2, 13)
    assert value(found, "gotthard_gpu_health", gpu="2") == 0
    assert value(found, "gotthard_gpu_xid_errors_total", gpu="2", xid="13") == 1
    assert value(found, "gotthard_gpu_health", gpu="1") == 1
    assert value(found, "gotthard_gpu_last_xid", gpu="1") == 0
    gpu.close()


def write_proc(procfs: Path, pid: int, cgroup: str) -> None:
    (procfs / str(pid)).mkdir(parents=True)
    (procfs / str(pid) / "cgroup").write_text(cgroup)


POD_UID = "2c2a4f3e-9d1b-4c55-8a8e-0123456789ab"


def test_processes_are_attributed_to_slurm_jobs_and_pods(fake_nvml, tmp_path: Path) -> None:
    procfs = tmp_path / "proc"
    write_proc(
        procfs,
        4242,
        "12:memory:/slurm/uid_1000/job_1234/step_0/task_0\n"
        "11:devices:/slurm/uid_1000/job_1234/step_0\n",
    )
    write_proc(procfs, 4343, "0::/system.slice/slurmstepd.scope/job_5678/step_batch/user/task_0\n")
    write_proc(
        procfs,
        4444,
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
        + POD_UID.replace("-", "_")
        + ".slice/cri-containerd-"
        + "ab" * 32
        + ".scope\n",
    )
    lines = fakenvml.h200_node(4)
    lines["0.procs"] = fakenvml.procs_value([(4242, 1024**3)])
    lines["1.procs"] = fakenvml.procs_value([(4343, 1024**3), (9999, 1024**3)])  # 9999 exited
    lines["2.procs"] = fakenvml.procs_value([(4444, 1024**3)])
    fake_nvml.write(lines)
    gpu = collector(tmp_path)
    found = scrape(gpu)
    jobs = sorted((labels["gpu"], labels["job_id"]) for labels, _ in found["gotthard_gpu_job_info"])
    assert jobs == [("0", "1234"), ("1", "5678")]
    ((pod, _),) = found["gotthard_gpu_pod_info"]
    assert (pod["gpu"], pod["pod_uid"], pod["namespace"]) == ("2", POD_UID, "")
    # no GPU metric is multiplied per job: one utilisation series per GPU
    assert len(found["gotthard_gpu_utilization_ratio"]) == 4
    gpu.close()


def test_pod_names_come_from_the_kubelet_pod_resources_api(fake_nvml, tmp_path: Path) -> None:
    procfs = tmp_path / "proc"
    write_proc(procfs, 4444, f"0::/kubepods/burstable/pod{POD_UID}/{'cd' * 32}\n")
    lines = fakenvml.h200_node(2)
    lines["0.procs"] = fakenvml.procs_value([(4444, 1024**3)])
    fake_nvml.write(lines)
    uuid0, uuid1 = lines["0.uuid"], lines["1.uuid"]
    response = encode_list_response(
        [
            FakePod(
                "train-7", "ml", [FakeContainer("trainer", [FakeDevice("nvidia.com/gpu", [uuid0])])]
            ),
            FakePod(
                "idle-1", "ml", [FakeContainer("main", [FakeDevice("nvidia.com/gpu", [uuid1])])]
            ),
        ]
    )
    with (
        short_socket_dir() as directory,
        fake_kubelet(response, socket_path=directory / "kubelet.sock") as kubelet,
    ):
        gpu = collector(tmp_path, kubelet_socket=str(kubelet.socket_path))
        found = scrape(gpu)
        gpu.close()
    pods = sorted(
        (labels["gpu"], labels["pod_uid"], labels["namespace"], labels["pod"], labels["container"])
        for labels, _ in found["gotthard_gpu_pod_info"]
    )
    assert pods == [
        ("0", POD_UID, "ml", "train-7", "trainer"),
        ("1", "", "ml", "idle-1", "main"),  # allocated, no process running yet
    ]


def test_driver_not_loaded_is_a_clear_collector_failure(fake_nvml, tmp_path: Path) -> None:
    fake_nvml.write({"init": fakenvml.err(9)})
    gpu = collector(tmp_path)
    with pytest.raises(GpuUnavailable, match="Driver Not Loaded"):
        gpu.poll()
    runner = CollectorRunner(gpu)
    text = Exporter([runner]).scrape(timeout=5)
    assert 'gotthard_collector_up{collector="gpu"} 0' in text
    gpu.close()


def test_exporter_once_loads_the_library_through_ld_library_path(
    fake_nvml_lib: Path, tmp_path: Path
) -> None:
    fixture = tmp_path / "fixture.txt"
    fakenvml.Fixture(fixture).write(fakenvml.h200_node(8))
    env = fakenvml.subprocess_env(fake_nvml_lib, fixture, base=dict(os.environ))
    result = gotthard(*GPU_ONCE, env=env)
    assert result.returncode == 0, result.stderr
    assert 'gotthard_collector_up{collector="gpu"} 1' in result.stdout
    assert result.stdout.count("gotthard_gpu_info{") == 8
    promtool_check_metrics(result.stdout)


def test_without_any_nvml_library_the_exporter_runs_on(tmp_path: Path) -> None:
    result = gotthard(*GPU_ONCE, without=("LD_LIBRARY_PATH", "FAKE_NVML_FIXTURE"))
    assert result.returncode == 0
    assert 'gotthard_collector_up{collector="gpu"} 0' in result.stdout
    assert "NVML Shared Library Not Found" in result.stderr
