"""Smoke test of the gpu collector on a real NVIDIA driver (``pytest -m gpu``).

Needs hardware: skipped, with the reason, on machines without libnvidia-ml.so.1.
"""

from __future__ import annotations

import ctypes

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.cli import gotthard


def _has_nvidia_driver() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not _has_nvidia_driver(),
        reason="needs a real NVIDIA GPU and driver (libnvidia-ml.so.1 not loadable here)",
    ),
]


def test_collector_reads_every_gpu_of_the_real_driver() -> None:
    result = gotthard(
        "exporter", "--once", "--collectors", "gpu", without=("FAKE_NVML_FIXTURE",), timeout=120
    )
    assert result.returncode == 0, result.stderr
    families = {f.name: f for f in text_string_to_metric_families(result.stdout)}
    up = {s.labels["collector"]: s.value for s in families["gotthard_collector_up"].samples}
    assert up["gpu"] == 1, result.stderr
    info = families["gotthard_gpu_info"].samples
    assert info, "no GPU reported"
    for sample in info:
        assert sample.labels["uuid"].startswith(("GPU-", "MIG-"))
        assert sample.labels["driver_version"]
    for sample in families["gotthard_gpu_health"].samples:
        assert sample.value in (0, 1)
    for sample in families.get(
        "gpu_memory_total", families["gotthard_gpu_memory_total_bytes"]
    ).samples:
        assert sample.value > 0
