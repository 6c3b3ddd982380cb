#!/usr/bin/env python3
"""The cardinality budget: series each role exports, at a stated size, through the real code.

Every role's exposition is made the way the role makes it: the collectors' own render
functions on synthetic snapshots (GPU, Slurm), the real collectors reading generated
sysfs/procfs trees (Slingshot, Lustre: the trees of tests/exporters), and the real
prometheus_client registries of the DR daemon and the runbook webhook filled through
their own instruments. Series are the sample lines of the text Prometheus would scrape.

Sizes (:data:`SIZES`) are Alps-like: a GH200 node has 4 GPUs with 18 NVLinks each and 4
Slingshot NICs; the file system has 400 OSTs on 40 OSSs (10 OSTs each) and 4 MDTs; the
Slurm controller sees 100,000 jobs on 10,000 nodes. Per-job and per-user series are
opt-in, and so are the NVLink series per link; their rows name the option and the bound.

``python benchmarks/cardinality.py`` prints one JSON line per role
(``{"role", "series", "families", "per", "size", "budget"}``) and one per node kind
(``{"node", "series", "roles"}``); ``--check`` exits 1 when a role exceeds its budget
(benchmarks/cardinality_budget.json); ``--markdown`` prints the table of docs/exporter.md.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

BUDGET_FILE = ROOT / "benchmarks" / "cardinality_budget.json"

#: The stated size of every synthetic input.
SIZES: dict[str, int] = {
    "gpus_per_node": 4,
    "nvlinks_per_gpu": 18,
    "mig_instances_per_gpu": 7,
    "nics_per_node": 4,
    "osts": 400,
    "osts_per_oss": 10,
    "mdts": 4,
    "lustre_jobs_per_target": 10_000,
    "slurm_job_count": 100_000,
    "slurm_node_count": 10_000,
    "dr_schedules": 20,
    "dr_services": 10,
}


def series_of(text: str) -> tuple[int, int]:
    """(series, families) of an exposition text: sample lines and distinct names."""
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    names = {line.partition(" ")[0].partition("{")[0] for line in samples}
    families = {re.sub(r"_(bucket|sum|count)$", "", name) for name in names}
    return len(samples), len(families)


# --- GPU ----------------------------------------------------------------------------------


def _gpu_snapshot(mig: bool, per_link: bool) -> Any:
    from gotthard.exporters.gpu import nvml
    from gotthard.exporters.gpu.links import NVLINK_ERROR_FIELDS, LinkTotals
    from gotthard.exporters.gpu.snapshot import DeviceReading, GpuSnapshot, JobAttribution

    gib = 1 << 30
    devices = []
    jobs = []
    for i in range(SIZES["gpus_per_node"]):
        index, uuid = str(i), f"GPU-a1b2c3d4-0000-4000-8000-{i:012x}"
        links = [str(link) for link in range(SIZES["nvlinks_per_gpu"])]
        # what the NVML source reads per link, and its sums per GPU
        link_errors = {(link, kind): 0 for link in links for kind in NVLINK_ERROR_FIELDS}
        link_bytes = {(link, d): 1 for link in links for d in ("tx", "rx")}
        errors, data = LinkTotals(), LinkTotals()
        for key, count in link_errors.items():
            errors.add(key, count)
        for key, count in link_bytes.items():
            data.add(key, count)
        devices.append(
            DeviceReading(
                index=index,
                uuid=uuid,
                name="NVIDIA GH200 120GB",
                pci_bus_id=f"00000009:{i:02X}:00.0",
                utilization_ratio=None if mig else 0.9,
                memory_utilization_ratio=None if mig else 0.4,
                memory_used_bytes=20 * gib,
                memory_total_bytes=96 * gib,
                memory_reserved_bytes=gib // 2,
                power_watts=400.0,
                power_limit_watts=660.0,
                energy_joules=5e6,
                temperature_celsius={"gpu": 45.0, "memory": 50.0},
                clock_hertz={"sm": 1.98e9, "memory": 2.6e9},
                clocks_event_reasons=dict.fromkeys(nvml.CLOCKS_EVENT_REASONS, 0),
                throttle_seconds=dict.fromkeys(nvml.VIOLATION_POLICIES, 0.0),
                ecc_errors={"corrected": 0, "uncorrected": 0},
                remapped_rows=dict.fromkeys(
                    ("correctable", "uncorrectable", "pending", "failure"), 0
                ),
                pcie_replay=0,
                pcie_bytes={"tx": 1, "rx": 1},
                nvlink_errors=errors.totals,
                nvlink_bytes=data.totals,
                nvlink_link_errors=link_errors if per_link else {},
                nvlink_link_bytes=link_bytes if per_link else {},
                gpm={} if mig else dict.fromkeys(nvml.GPM_METRICS, 0.5),
                xid_counts={},  # events supported, none seen (each XID seen adds 2 series)
            )
        )
        if not mig:
            jobs.append(JobAttribution(index, uuid, "", str(4_000_000 + i)))
            continue
        for slot in range(SIZES["mig_instances_per_gpu"]):
            instance = str(slot + 7)
            devices.append(
                DeviceReading(
                    index=index,
                    uuid=f"MIG-a1b2c3d4-{i:04x}-4000-8000-{slot:012x}",
                    gpu_instance=instance,
                    memory_used_bytes=gib,
                    memory_total_bytes=12 * gib,
                    memory_reserved_bytes=0,
                    gpm=dict.fromkeys(nvml.GPM_METRICS, 0.5),
                )
            )
            jobs.append(JobAttribution(index, uuid, instance, str(4_000_000 + i * 10 + slot)))
    return GpuSnapshot("570.133.20", "12.8", tuple(devices), tuple(jobs))


def gpu(mig: bool, *, per_link: bool = False) -> str:
    from gotthard.exporters.families import render_text
    from gotthard.exporters.gpu.render import render

    return render_text(render(_gpu_snapshot(mig, per_link)))


# --- node trees (Slingshot, Lustre) -------------------------------------------------------


def _tmp() -> Path:
    shm = Path("/dev/shm")
    return Path(tempfile.mkdtemp(prefix="gotthard-card-", dir=shm if shm.is_dir() else None))


def slingshot(generation: int) -> str:
    from gotthard.exporters.families import render_text
    from gotthard.exporters.settings import SlingshotExporterConfig
    from gotthard.exporters.slingshot.collector import SlingshotCollector
    from tests.exporters import slingshot_tree

    root = _tmp()
    try:
        nics = [slingshot_tree.Nic(i, generation=generation) for i in range(SIZES["nics_per_node"])]
        slingshot_tree.build(root, nics)
        collector = SlingshotCollector(SlingshotExporterConfig(), sysfs=str(root))
        return render_text(collector.render(collector.poll()))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _lustre_node(kind: str) -> Any:
    from tests.exporters import lustre_tree as lt

    fs, mount = "alps", "ffff9a4c2d1e8000"
    osts = [lt._ost(f"{fs}-OST{i:04x}", 0.6) for i in range(SIZES["osts"])]
    mdts = [lt._mdt(f"{fs}-MDT{i:04x}") for i in range(SIZES["mdts"])]
    if kind == "client":
        return lt.Node(
            "client",
            oscs=[lt._view(ost, f"{ost.name}-osc-{mount}") for ost in osts],
            mdcs=[lt._view(m, f"{m.name}-mdc-{mount}", md_ops=lt._mdt_ops(1)) for m in mdts],
            mounts={f"{fs}-{mount}": lt._client_ops(1)},
        )
    if kind == "oss":
        served = [
            lt._ost(f"{fs}-OST{i:04x}", 0.6, lt._ost_ops(1)) for i in range(SIZES["osts_per_oss"])
        ]
        node = lt.Node("oss", osts=served)
        for target in served:
            target.exports = lt._exports("ost", 1)
        return node
    node = lt.Node(
        "mds",
        mgs=lt.Target("MGS", 500_000, 480_000, 460_000, 32_768, 32_500),
        mdts=[lt._mdt(f"{fs}-MDT0000", lt._mdt_ops(1))],
        mds_oscs=[lt._view(ost, f"{ost.name}-osc-MDT0000") for ost in osts],
    )
    node.mdts[0].exports = lt._exports("mdt", 1)
    return node


def lustre(
    kind: str,
    *,
    job_stats: bool = False,
    client_target_space: bool = True,
    client_target_imports: bool = True,
) -> str:
    from gotthard.exporters.families import render_text
    from gotthard.exporters.lustre.collector import LustreCollector
    from gotthard.exporters.settings import LustreExporterConfig
    from tests.exporters import lustre_tree

    root = _tmp()
    try:
        lustre_tree.write_tree(root, _lustre_node(kind), "2.15")
        if job_stats:
            target = "ost" if kind == "oss" else "mdt"
            text = lustre_tree.build_job_stats(
                SIZES["lustre_jobs_per_target"], version="2.15", kind=target
            )
            for path in root.rglob("job_stats"):
                path.write_text(text)
        collector = LustreCollector(
            LustreExporterConfig(
                job_stats=job_stats,
                client_target_space=client_target_space,
                client_target_imports=client_target_imports,
            ),
            procfs=str(root / "proc"),
            sysfs=str(root / "sys"),
        )
        return render_text(collector.render(collector.poll()))
    finally:
        shutil.rmtree(root, ignore_errors=True)


# --- Slurm --------------------------------------------------------------------------------


def slurm(*, per_user: bool = False, job_info: bool = True) -> str:
    import slurm_scale

    from gotthard.exporters.families import render_text
    from gotthard.exporters.slurm.render import render
    from gotthard.slurm.cli import assemble
    from gotthard.slurm.snapshot import PollOptions

    root = _tmp()
    try:
        slurm_scale.generate(root, SIZES["slurm_job_count"], SIZES["slurm_node_count"])
        options = PollOptions(per_user=per_user, job_info=job_info, probe=False)
        snapshot = assemble(slurm_scale.read_outputs(root), options)
        return render_text(render(snapshot, options))
    finally:
        shutil.rmtree(root, ignore_errors=True)


# --- DR daemon and runbook webhook --------------------------------------------------------


def dr_daemon() -> str:
    """Every DR family, filled through its instruments for 2 sites, the schedules (one
    namespace each, tiers in turn) and the services of :data:`SIZES`."""
    from gotthard.dr.metrics import DrMetrics

    metrics = DrMetrics()
    sites = ("zurich", "lugano")
    schedules = [
        {"schedule": f"s{i}", "namespace": f"ns{i}", "tier": ("gold", "silver", "bronze")[i % 3]}
        for i in range(SIZES["dr_schedules"])
    ]
    values = {
        "phase": ("Completed", "Failed", "PartiallyFailed"),
        "objective": ("rpo", "rto"),
        "service": tuple(f"svc{i}" for i in range(SIZES["dr_services"])),
        "location": ("default", "offsite"),
        "job": ("backup", "drill"),
        "event": ("executed", "error", "missed"),
        "operation": ("velero", "karmada", "kubernetes"),
    }
    for metric in metrics.registry._names_to_collectors.values():
        names = tuple(metric._labelnames)
        if not names:
            metric.inc() if hasattr(metric, "inc") else metric.set(1)
            continue
        rows: list[dict[str, str]] = [{}]
        for label in names:
            if label in ("site", "primary_site", "lease_site"):
                rows = [{**row, label: site} for row in rows for site in sites]
            elif label in ("schedule", "namespace", "tier", "lease_namespace"):
                rows = (
                    [{**row, **s} for row in rows for s in schedules]
                    if label not in rows[0]
                    else rows
                )
            elif label in values:
                rows = [{**row, label: v} for row in rows for v in values[label]]
            else:
                rows = [{**row, label: label} for row in rows]
        for row in rows:
            child = metric.labels(*(row.get(name, name) for name in names))
            child.inc() if hasattr(child, "inc") else child.set(1)
    return metrics.render()


def webhook() -> str:
    """The webhook's families, one series for every runbook, action and result it can
    record, every status code it answers and both alert states."""
    from gotthard.runbooks import engine as engine_module
    from gotthard.runbooks.registry import RUNBOOKS
    from gotthard.runbooks.settings import RunbooksConfig

    root = _tmp()
    try:
        settings = RunbooksConfig(audit_log=str(root / "audit.jsonl"))
        engine = engine_module.Engine(settings, audit=engine_module.AuditLog(settings.audit_log))
        metrics = engine.metrics
        results = sorted(engine_module.FINAL_RESULTS | {"failed", "refused", "not-repaired"})
        for book in RUNBOOKS:
            for step in book.steps:
                for result in results:
                    metrics.actions.labels(book.alertname, step.action, result).inc()
                    if step.on_resolve:
                        metrics.actions.labels(book.alertname, step.on_resolve, result).inc()
                metrics.duration.labels(step.action).observe(0.1)
        for code in ("200", "400", "401", "403", "413", "429", "500"):
            metrics.requests.labels(code).inc()
        for status in ("firing", "resolved"):
            metrics.alerts.labels(status).inc()
        from gotthard.exposition import render_registry

        return render_registry(metrics.registry)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def exporter_self(collectors: int) -> int:
    """The exporter's own series with *collectors* collectors (its declared families)."""
    from gotthard.exporters import families, runtime

    return sum(collectors if "collector" in d.labels else 1 for d in families.declared(runtime))


# --- the table ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Role:
    name: str
    what: str
    #: unit -> how many of it the input has (series per unit are shown)
    per: dict[str, int]
    make: Callable[[], str]
    #: the option that turns it on, for opt-in rows
    option: str = ""
    bound: str = ""


ROLES: tuple[Role, ...] = (
    Role("gpu", "GPU node, 4 GH200, MIG off, 18 NVLinks each", {"gpu": 4}, lambda: gpu(False)),
    Role(
        "gpu-nvlink-per-link",
        "the same with NVLink errors and bytes per link",
        {"gpu": 4},
        lambda: gpu(False, per_link=True),
        "--gpu.nvlink-per-link",
        "7 series per NVLink: 126 per GH200",
    ),
    Role(
        "gpu-mig",
        "GPU node, 4 GH200, MIG on (7 instances each)",
        {"gpu": 4, "instance": 28},
        lambda: gpu(True),
    ),
    Role("slingshot", "Slingshot node, 4 Cassini-1 NICs", {"nic": 4}, lambda: slingshot(1)),
    Role("slingshot-c2", "Slingshot node, 4 Cassini-2 NICs", {"nic": 4}, lambda: slingshot(2)),
    Role(
        "lustre-client",
        "Lustre client, 1 file system of 400 OSTs and 4 MDTs",
        {"ost": 400},
        lambda: lustre("client"),
    ),
    Role(
        "lustre-client-no-space",
        "the same without the clients' view of each target's space and inodes",
        {"ost": 400},
        lambda: lustre("client", client_target_space=False),
        "--lustre.client-target-space=false",
        "the servers export each target's space once",
    ),
    Role(
        "lustre-client-lean",
        "the same, and each target's import only while disconnected or deactivated",
        {"ost": 400},
        lambda: lustre("client", client_target_space=False, client_target_imports=False),
        "--lustre.client-target-space=false --lustre.client-target-imports=false",
        "each file system's imports counted by state instead",
    ),
    Role(
        "lustre-oss",
        "OSS with 10 OSTs (export stats of 4 clients)",
        {"ost": 10},
        lambda: lustre("oss"),
    ),
    Role(
        "lustre-oss-jobs",
        "OSS with 10 OSTs, job stats: 10,000 jobs per OST",
        {"ost": 10},
        lambda: lustre("oss", job_stats=True),
        "--lustre.job-stats",
        "at most 1,000 jobs per target: --lustre.job-stats-limit",
    ),
    Role("lustre-mds", "MDS+MGS, 1 MDT, OSCs to 400 OSTs", {"mdt": 1}, lambda: lustre("mds")),
    Role(
        "lustre-mds-jobs",
        "MDS+MGS, 1 MDT, job stats: 10,000 jobs",
        {"mdt": 1},
        lambda: lustre("mds", job_stats=True),
        "--lustre.job-stats",
        "at most 1,000 jobs per target: --lustre.job-stats-limit",
    ),
    Role(
        "slurm",
        "Slurm controller, 100,000 jobs, 10,000 nodes (gotthard_slurm_job_info off)",
        {"node": 10_000},
        lambda: slurm(job_info=False),
    ),
    Role(
        "slurm-job-info",
        "the same with gotthard_slurm_job_info (default on)",
        {"node": 10_000},
        lambda: slurm(job_info=True),
        "--slurm.job-info (default true)",
        "one series per running job",
    ),
    Role(
        "slurm-per-user",
        "the same with a user label (and gotthard_slurm_job_info)",
        {"node": 10_000},
        lambda: slurm(per_user=True),
        "--slurm.per-user",
        "users x partitions x states x accounts",
    ),
    Role(
        "dr-daemon",
        "DR daemon, 2 sites, 20 schedules, 10 services",
        {"schedule": 20},
        dr_daemon,
    ),
    Role("webhook", "runbook webhook, every runbook x action x result", {}, webhook),
)

#: node kind -> the roles its exporter runs (exporter's own series added)
NODES: dict[str, tuple[str, ...]] = {
    "gpu-node": ("gpu", "slingshot", "lustre-client"),
    "oss": ("lustre-oss", "slingshot"),
    "mds": ("lustre-mds", "slingshot"),
    "slurm-controller": ("slurm-job-info",),
}


def measure(names: set[str] | None = None) -> list[dict[str, Any]]:
    budget = json.loads(BUDGET_FILE.read_text()) if BUDGET_FILE.exists() else {}
    rows = []
    for role in ROLES:
        if names is not None and role.name not in names:
            continue
        series, families = series_of(role.make())
        rows.append(
            {
                "role": role.name,
                "what": role.what,
                "series": series,
                "families": families,
                "per": {unit: round(series / n, 1) for unit, n in role.per.items()},
                "option": role.option,
                "bound": role.bound,
                "budget": budget.get(role.name),
            }
        )
    return rows


def node_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    series = {row["role"]: row["series"] for row in rows}
    out = []
    for node, roles in NODES.items():
        if all(r in series for r in roles):
            total = sum(series[r] for r in roles) + exporter_self(len(roles))
            out.append({"node": node, "roles": list(roles), "series": total})
    return out


def over_budget(rows: list[dict[str, Any]]) -> list[str]:
    return [
        f"{row['role']}: {row['series']} series, budget {row['budget']}"
        for row in rows
        if row["budget"] is None or row["series"] > row["budget"]
    ]


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| role | at this size | series | per | budget | opt-in (bound) |",
        "|---|---|---:|---|---:|---|",
    ]
    for row in rows:
        per = ", ".join(f"{v:g} per {unit}" for unit, v in row["per"].items())
        opt = f"`{row['option']}` ({row['bound']})" if row["option"] else ""
        lines.append(
            f"| {row['role']} | {row['what']} | {row['series']:,} | {per} | "
            f"{row['budget']:,} | {opt} |"
        )
    lines += ["", "| node | roles (plus the exporter's own series) | series |", "|---|---|---:|"]
    for node in node_rows(rows):
        lines.append(f"| {node['node']} | {', '.join(node['roles'])} | {node['series']:,} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when over budget")
    parser.add_argument("--markdown", action="store_true", help="print the docs table")
    parser.add_argument("--role", action="append", help="only these roles")
    args = parser.parse_args(argv)
    rows = measure(set(args.role) if args.role else None)
    if args.markdown:
        print(markdown(rows), end="")
        return 0
    for row in rows:
        print(json.dumps(row))
    for node in node_rows(rows):
        print(json.dumps(node))
    if args.check:
        problems = over_budget(rows)
        for problem in problems:
            print(f"over budget: {problem}", file=sys.stderr)
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
