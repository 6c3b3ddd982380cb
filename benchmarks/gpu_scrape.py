#!/usr/bin/env python3
"""Per-scrape cost of the gpu collector for an 8-GPU node, against a bare NVML loop.

Uses the real nvidia-ml-py over the FAKE libnvidia-ml.so.1 of ``tests/fakenvml``
(built here with gcc against NVIDIA's nvml.h from the nvidia-nvml-dev wheel), with an
H200-like fixture: 8 GPUs, 18 NVLinks each, GPM on, every call supported.

* ``scrape_ms``: one collector poll (every NVML call, attribution with no processes)
  plus rendering to exposition text, median over the runs;
* ``bare_loop_ms``: the same NVML calls through pynvml in a plain loop, values dropped.

Prints one JSON line. Targets: scrape <= 1.5x the bare loop and <= 5 ms. The fake's own
cost per call is small (about 1 us), so both figures are dominated by pynvml/ctypes,
as they would be with the real library; real drivers add their own per-call latency
equally to both.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pynvml  # noqa: E402

from gotthard.exporters.families import render_text  # noqa: E402
from gotthard.exporters.gpu.collector import GpuCollector  # noqa: E402
from gotthard.exporters.gpu.nvml import GPM_METRICS, VIOLATION_POLICIES  # noqa: E402
from gotthard.exporters.settings import GpuExporterConfig  # noqa: E402
from tests.fakenvml import fakenvml  # noqa: E402

GPUS, LINKS, RUNS = 8, 18, 300


def fixture() -> dict:
    lines = fakenvml.h200_node(GPUS)
    for i in range(GPUS):
        lines[f"{i}.field.197"] = 1
        lines[f"{i}.field.198"] = 2
        for link in range(LINKS):
            for field_id in (138, 139, 208, 212, 214, 219, 221):
                lines[f"{i}.field.{field_id}.{link}"] = link
    return lines


def bare_loop(handles: list, field_ids: list, samples: list) -> None:
    """Every call the collector makes per GPU, with nothing around them."""
    for slot, handle in enumerate(handles):
        pynvml.nvmlDeviceGetUtilizationRates(handle)
        pynvml.nvmlDeviceGetMemoryInfo(handle, pynvml.nvmlMemory_v2)
        pynvml.nvmlDeviceGetPowerUsage(handle)
        pynvml.nvmlDeviceGetEnforcedPowerLimit(handle)
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        pynvml.nvmlDeviceGetTemperatureV(handle, pynvml.NVML_TEMPERATURE_GPU)
        pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
        pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM)
        pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
        for policy in VIOLATION_POLICIES.values():
            pynvml.nvmlDeviceGetViolationStatus(handle, policy)
        pynvml.nvmlDeviceGetTotalEccErrors(handle, 0, pynvml.NVML_VOLATILE_ECC)
        pynvml.nvmlDeviceGetTotalEccErrors(handle, 1, pynvml.NVML_VOLATILE_ECC)
        pynvml.nvmlDeviceGetRemappedRows(handle)
        pynvml.nvmlDeviceGetPcieReplayCounter(handle)
        pynvml.nvmlDeviceGetFieldValues(handle, field_ids)
        sample = pynvml.nvmlGpmSampleAlloc()
        pynvml.nvmlGpmSampleGet(handle, sample)
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM_METRICS)
        request.sample1 = samples[slot]
        request.sample2 = sample
        for index, metric_id in enumerate(GPM_METRICS.values()):
            request.metrics[index].metricId = metric_id
        pynvml.nvmlGpmMetricsGet(request)
        pynvml.nvmlGpmSampleFree(samples[slot])
        samples[slot] = sample
        pynvml.nvmlDeviceGetComputeRunningProcesses(handle)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="gotthard-gpu-bench-") as tmp:
        lib = fakenvml.build(Path(tmp))
        fixture_path = Path(tmp) / "fixture.txt"
        fakenvml.Fixture(fixture_path).write(fixture())
        os.environ["FAKE_NVML_FIXTURE"] = str(fixture_path)
        fakenvml.load_into_pynvml(lib)

        collector = GpuCollector(
            GpuExporterConfig(kubelet_socket=str(Path(tmp) / "none.sock")),
            procfs=str(Path(tmp) / "proc"),
        )
        collector.poll()  # discovery and the first GPM sample
        devices = collector.source._devices
        handles = [device.handle for device in devices]
        field_ids = devices[0].field_ids
        samples = []
        for handle in handles:
            sample = pynvml.nvmlGpmSampleAlloc()
            pynvml.nvmlGpmSampleGet(handle, sample)
            samples.append(sample)
        # Interleaved, so drift of the machine affects both series alike.
        scrape_times, bare_times = [], []
        for _ in range(RUNS):
            started = time.perf_counter()
            render_text(collector.render(collector.poll()))
            scrape_times.append(time.perf_counter() - started)
            started = time.perf_counter()
            bare_loop(handles, field_ids, samples)
            bare_times.append(time.perf_counter() - started)
        for sample in samples:
            pynvml.nvmlGpmSampleFree(sample)
        collector.close()
        fakenvml.unload()

    scrape_ms = statistics.median(scrape_times) * 1000
    bare_ms = statistics.median(bare_times) * 1000
    print(
        json.dumps(
            {
                "gpus": GPUS,
                "nvlinks_per_gpu": LINKS,
                "fields_per_gpu": len(field_ids),
                "runs": RUNS,
                "scrape_ms": round(scrape_ms, 3),
                "bare_loop_ms": round(bare_ms, 3),
                "ratio": round(scrape_ms / bare_ms, 2),
                "scrape_p95_ms": round(sorted(scrape_times)[int(RUNS * 0.95)] * 1000, 3),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
