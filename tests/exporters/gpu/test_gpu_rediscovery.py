"""GPUs that go missing and come back, and NVML that starts working later: the gpu
collector picks them up without a restart, re-initialising NVML at most once every
``rediscover_every`` polls while something is missing."""

from __future__ import annotations

import time
from pathlib import Path

import pynvml
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gotthard.exporters.gpu.collector import GpuCollector
from gotthard.exporters.gpu.nvml import GpuUnavailable
from gotthard.exporters.runtime import CollectorRunner, Exporter
from gotthard.exporters.settings import GpuExporterConfig
from tests.fakenvml import fakenvml

EVERY = 3


def collector(tmp_path: Path) -> GpuCollector:
    config = GpuExporterConfig(
        poll_interval_seconds=0.001, kubelet_socket=str(tmp_path / "no-kubelet.sock")
    )
    gpu = GpuCollector(config, procfs=str(tmp_path / "proc"))
    gpu.source.rediscover_every = EVERY
    gpu.source.event_timeout_ms = 20
    return gpu


def health(gpu: GpuCollector) -> dict[str, bool]:
    """GPU index -> healthy, for whole GPUs, from one poll."""
    return {d.index: d.healthy for d in gpu.poll().devices if not d.gpu_instance}


def test_a_lost_gpu_that_comes_back_is_picked_up_without_restart(
    fake_nvml: fakenvml.Fixture, tmp_path: Path
) -> None:
    fake_nvml.write(fakenvml.h200_node(4))
    gpu = collector(tmp_path)
    assert health(gpu) == {"0": True, "1": True, "2": True, "3": True}
    fake_nvml.update({"3.lost": 1})
    assert health(gpu)["3"] is False
    inits = fake_nvml.lib.init_calls()
    for _ in range(2 * EVERY):
        assert health(gpu) == {"0": True, "1": True, "2": True, "3": False}
    # looked for again twice in 2 * EVERY polls, not on every poll
    assert fake_nvml.lib.init_calls() == inits + 2
    fake_nvml.update({"3.lost": None})
    seen = [health(gpu)["3"] for _ in range(EVERY)]
    assert seen[-1] is True, seen
    snapshot = gpu.poll()
    (gpu3,) = [d for d in snapshot.devices if d.index == "3" and not d.gpu_instance]
    assert gpu3.utilization_ratio is not None and gpu3.uuid
    # steady again: no more re-initialisation, and every init matched by a shutdown
    calls = fake_nvml.lib.init_calls()
    for _ in range(2 * EVERY):
        gpu.poll()
    assert fake_nvml.lib.init_calls() == calls
    assert fake_nvml.lib.init_count() == 1
    gpu.close()
    assert fake_nvml.lib.init_count() == 0
    assert fake_nvml.lib.gpm_samples_live() == 0 and fake_nvml.lib.event_sets_live() == 0


def test_a_gpu_gone_from_the_device_count_returns_when_listed_again(
    fake_nvml: fakenvml.Fixture, tmp_path: Path
) -> None:
    fake_nvml.write(fakenvml.h200_node(4))
    gpu = collector(tmp_path)
    assert len(health(gpu)) == 4
    fake_nvml.update({"count": 3})  # fell off the bus and the driver stopped listing it
    seen = [health(gpu) for _ in range(EVERY)]
    # still reported, as lost: the exporter listed it and NVML no longer does
    assert seen[-1] == {"0": True, "1": True, "2": True, "3": False}, seen
    assert [d.lost for d in gpu.poll().devices] == [False, False, False, True]
    fake_nvml.update({"count": 4})
    seen = [health(gpu) for _ in range(EVERY)]
    assert seen[-1] == {"0": True, "1": True, "2": True, "3": True}, seen
    assert not any(d.lost for d in gpu.poll().devices)
    gpu.close()


def test_xid_counts_survive_a_rediscovery(fake_nvml: fakenvml.Fixture, tmp_path: Path) -> None:
    fake_nvml.write(fakenvml.h200_node(2))
    gpu = collector(tmp_path)
    gpu.poll()
    event = fake_nvml.add_event(0, 79)
    deadline = time.monotonic() + 5
    while not (reading := gpu.poll().devices[0]).xid_counts and time.monotonic() < deadline:
        time.sleep(0.02)
    assert reading.xid_counts == {79: 1}
    # the real driver delivers an event once; the fake would replay it to a new event set
    fake_nvml.update({f"event.{event}": None, "1.lost": 1})
    for _ in range(EVERY + 2):
        snapshot = gpu.poll()
    assert fake_nvml.lib.init_calls() >= 2
    assert snapshot.devices[0].xid_counts == {79: 1}
    assert snapshot.devices[0].health_reason == "xid_79"
    gpu.close()


def test_nvml_that_fails_to_initialise_is_tried_again_every_few_polls(
    fake_nvml: fakenvml.Fixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts = []
    real_init = pynvml.nvmlInit

    def counting_init() -> None:
        attempts.append(1)
        real_init()

    monkeypatch.setattr(pynvml, "nvmlInit", counting_init)
    fake_nvml.write({**fakenvml.h200_node(2), "init": fakenvml.err(9)})  # driver not loaded
    gpu = collector(tmp_path)
    exporter = Exporter([CollectorRunner(gpu)])

    def up() -> float:
        time.sleep(0.002)  # past the poll interval: each scrape polls
        text = exporter.scrape(timeout=10)
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "gotthard_collector_up" and sample.labels["collector"] == "gpu":
                    return sample.value
        raise AssertionError("no gotthard_collector_up for gpu")

    try:
        assert [up() for _ in range(2 * EVERY + 1)] == [0] * (2 * EVERY + 1)
        assert len(attempts) == 3  # the first poll, then once every EVERY polls
        fake_nvml.update({"init": None})  # the driver is loaded now
        seen = [up() for _ in range(EVERY)]
        assert seen[-1] == 1, seen
        assert [up() for _ in range(EVERY)] == [1] * EVERY
        assert len(attempts) == 4
    finally:
        exporter.close()
        gpu.close()


def test_a_failed_init_still_raises_until_it_is_due_again(
    fake_nvml: fakenvml.Fixture, tmp_path: Path
) -> None:
    fake_nvml.write({"init": fakenvml.err(9)})
    gpu = collector(tmp_path)
    for _ in range(EVERY + 1):
        with pytest.raises(GpuUnavailable, match="Driver Not Loaded"):
            gpu.poll()
    gpu.close()
