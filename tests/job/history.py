"""A real Prometheus holding a known past: the series of jobs, written as OpenMetrics,
turned into TSDB blocks by ``promtool tsdb create-blocks-from openmetrics`` and loaded by
a real ``prometheus`` (no scrape targets). Every query of the report then runs against
exactly the history a test describes, minutes long, without waiting for it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.monitoring import Processes, binary, start_prometheus

#: Seconds between two samples of the history (a 15 s scrape interval).
STEP = 15


def _labels(labels: Mapping[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


@dataclass
class History:
    """Samples of gauges and counters over time, as OpenMetrics."""

    lines: dict[str, list[str]] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)

    def gauge(
        self, name: str, labels: Mapping[str, str], value: float, start: int, end: int
    ) -> None:
        self.types.setdefault(name, "gauge")
        series = self.lines.setdefault(name, [])
        series += [f"{name}{_labels(labels)} {value} {t}" for t in range(start, end + 1, STEP)]

    def counter(
        self, name: str, labels: Mapping[str, str], per_second: float, start: int, end: int
    ) -> None:
        """``name`` (a ``_total``) growing by *per_second* from 0 at *start*."""
        family = name.removesuffix("_total")
        self.types.setdefault(family, "counter")
        series = self.lines.setdefault(family, [])
        series += [
            f"{name}{_labels(labels)} {per_second * (t - start)} {t}"
            for t in range(start, end + 1, STEP)
        ]

    def text(self) -> str:
        out = []
        for family, lines in self.lines.items():
            out.append(f"# TYPE {family} {self.types[family]}")
            out += sorted(lines, key=lambda line: (line.split(" ")[0], int(line.split(" ")[-1])))
        return "\n".join(out) + "\n# EOF\n"


def gpu_job(
    history: History,
    *,
    site: str,
    cluster: str,
    job_id: str,
    node: str,
    gpus: int,
    utilization: float,
    tensor: float,
    start: int,
    end: int,
    power_watts: float = 100.0,
    lustre_bytes_per_second: float = 0.0,
) -> None:
    """Job *job_id* on *gpus* GPUs of *node* from *start* to *end*, as the Gotthard
    exporters report one (the GPU exporter on ``node:9877``, the Slurm controller's
    exporter, Lustre job stats of an OSS and an MDS, Slingshot of the node)."""
    where = {"site": site, "cluster": cluster}
    instance = f"{node}:9877"
    history.gauge(
        "gotthard_slurm_job_info",
        {
            **where,
            "instance": "ctl:9877",
            "job_id": job_id,
            "user": "alice",
            "account": "physics",
            "partition": "gpu",
        },
        1,
        start,
        end,
    )
    for gpu in range(gpus):
        key = {**where, "instance": instance, "gpu": str(gpu), "uuid": f"GPU-{node}-{gpu}"}
        history.gauge("gotthard_gpu_job_info", {**key, "job_id": job_id}, 1, start, end)
        values = {
            "gotthard_gpu_utilization_ratio": utilization,
            "gotthard_gpu_sm_active_ratio": utilization * 0.9,
            "gotthard_gpu_tensor_active_ratio": tensor,
            "gotthard_gpu_dram_active_ratio": utilization / 2,
            "gotthard_gpu_memory_used_bytes": (gpu + 1) * 2**30,
            "gotthard_gpu_power_watts": power_watts,
        }
        # the GPUs report before and after the job too: only its run counts
        for name, value in values.items():
            history.gauge(name, key, value, start - 600, start - STEP)
            history.gauge(name, key, value, start, end)
            history.gauge(name, key, 0.0, end + STEP, end + 600)
    if lustre_bytes_per_second:
        for component, target in (("ost", "fs-OST0000"), ("mdt", "fs-MDT0000")):
            labels = {
                **where,
                "instance": f"{component}:9877",
                "fs": "fs",
                "target": target,
                "component": component,
                "job_id": job_id,
            }
            if component == "ost":
                history.counter(
                    "gotthard_lustre_job_read_bytes_total",
                    labels,
                    lustre_bytes_per_second,
                    start,
                    end,
                )
                history.counter("gotthard_lustre_job_write_bytes_total", labels, 1000.0, start, end)
            history.counter(
                "gotthard_lustre_job_operations_total",
                {**labels, "operation": "open"},
                10,
                start,
                end,
            )
    for direction in ("tx", "rx"):
        history.counter(
            "gotthard_slingshot_bytes_total",
            {**where, "instance": f"{node}:9878", "interface": "hsn0", "direction": direction},
            1e6,
            start - 600,
            end + 600,
        )


def start(history: History, root: Path, procs: Processes) -> str:
    """A real Prometheus serving *history*; its URL."""
    data = root / "prom"
    data.mkdir(parents=True, exist_ok=True)
    source = root / "history.om"
    source.write_text(history.text())
    subprocess.run(
        [binary("promtool"), "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    config = root / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 15s\nscrape_configs: []\n")
    return start_prometheus(
        procs, config, root, "--storage.tsdb.retention.time=30d", "--log.level=warn"
    )
