"""One job's efficiency report: what it asked Slurm for against what it used, per GPU and
for the whole job, its Lustre I/O and its nodes' Slingshot traffic, and the findings.

The report's series are the Job dashboard's (:mod:`gotthard.monitoring.components.job`),
folded over the job's run and evaluated at its end at the Prometheus of the job's site
(the site model names it). Its JSON form is documented in docs/job.md (``SCHEMA``).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from gotthard.job import slurm
from gotthard.monitoring.components import job as queries
from gotthard.monitoring.components import threshold_values
from gotthard.monitoring.thresholds import Threshold, ThresholdValues, num, pct
from gotthard.prometheus import Prometheus, PrometheusError

if TYPE_CHECKING:
    from gotthard.config import Config

SCHEMA = "gotthard.job.report/v1"
#: A time limit this long or longer is no limit for the time-limit finding.
NO_LIMIT_SECONDS = 365 * 86400
#: How far back a job's series are looked for, by default (seconds): a week.
DEFAULT_LOOKBACK = 7 * 86400


class JobError(Exception):
    """The job is unknown, or no Prometheus that could know it answered."""


@dataclass(frozen=True)
class Where:
    site: str
    cluster: str
    prometheus: str


@dataclass
class GpuUse:
    """One GPU the job had a process on, its measures folded over the run."""

    instance: str
    gpu: str
    uuid: str
    #: measure key -> value (ratio, bytes or joules), None where not reported
    values: dict[str, float | None] = field(default_factory=dict)


@dataclass
class Finding:
    """Something the job wasted, naming the metric and the threshold that raised it."""

    kind: str
    message: str
    metric: str
    threshold: str
    threshold_value: float
    value: float


@dataclass
class Report:
    job_id: str
    site: str
    cluster: str
    prometheus: str
    schema: str = SCHEMA
    state: str = ""
    user: str = ""
    account: str = ""
    start: float | None = None
    end: float | None = None
    run_seconds: float | None = None
    #: what the job asked Slurm for: nodes, gpus, cpus, memory_bytes, time_limit_seconds
    request: dict[str, float | None] = field(default_factory=dict)
    #: what it used, whole job: gpus (seen with a process), the GPU measures (averages
    #: of the per-GPU averages, sums of peaks and totals), max_rss_bytes
    used: dict[str, float | None] = field(default_factory=dict)
    gpus: list[GpuUse] = field(default_factory=list)
    lustre: dict[str, float | None] = field(default_factory=dict)
    slingshot: dict[str, float | None] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    #: what could not be read (Slurm not reachable, a measure no exporter reports)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# --- finding the job ---------------------------------------------------------------------


def places(cfg: Config, cluster: str | None) -> list[Where]:
    """Every (site, cluster) whose Prometheus may know the job; with *cluster*, only it."""
    found = []
    for site_name, site in cfg.site_model.items():
        for name in site.clusters or {cfg.cluster: None}:
            if cluster is None or name == cluster:
                found.append(Where(site_name, name, site.prometheus_of(name)))
    if cluster is not None and not found:
        sites = ", ".join(cfg.site_model)
        raise JobError(f"cluster {cluster!r} is in no configured site ({sites}): see [sites]")
    return found


def locate(cfg: Config, job_id: str, cluster: str | None, lookback: int) -> Where:
    """The one site and cluster whose Prometheus has series of *job_id* in *lookback*."""
    found_places = places(cfg, cluster)
    hits: list[Where] = []
    failed: list[str] = []
    asked: dict[tuple[str, str], list[Any]] = {}
    for place in found_places:
        if not place.prometheus:
            failed.append(f"site {place.site} cluster {place.cluster}: no prometheus_url")
            continue
        key = (place.site, place.prometheus)
        if key not in asked:
            scope = queries.Scope(site=place.site, cluster=".+", job_id=job_id)
            try:
                asked[key] = Prometheus(place.prometheus).query(queries.seen(scope, lookback))[1]
            except PrometheusError as err:
                failed.append(f"site {place.site}: Prometheus {err}")
                asked[key] = []
                continue
        clusters = {s["metric"].get("cluster") for s in asked[key]}
        if place.cluster in clusters:
            hits.append(place)
    if len(hits) == 1:
        return hits[0]
    if len(hits) > 1:
        names = ", ".join(f"{h.site}/{h.cluster}" for h in hits)
        raise JobError(
            f"job {job_id} is known at several clusters ({names}): name one with --cluster"
        )
    if failed:
        raise JobError(f"job {job_id}: cannot ask " + "; ".join(failed))
    where = ", ".join(sorted({f"{p.site}/{p.cluster}" for p in found_places}))
    raise JobError(f"job {job_id}: unknown (no series of it in the last {lookback}s at {where})")


# --- gathering ---------------------------------------------------------------------------


def _step(seconds: float) -> int:
    """The subqueries' resolution: about 500 samples over the run, 1 s to 60 s."""
    return int(min(60, max(1, seconds // 500)))


def _value(sample: dict[str, Any]) -> float:
    return float(sample["value"][1])


def gather(
    cfg: Config,
    job_id: str,
    *,
    cluster: str | None = None,
    lookback: int = DEFAULT_LOOKBACK,
    slurm_timeout: float = 10.0,
    prometheus_timeout: float = 10.0,
    now: float | None = None,
) -> Report:
    """The report of *job_id* (:class:`JobError` when unknown or nowhere to ask)."""
    where = locate(cfg, job_id, cluster, lookback)
    now = time.time() if now is None else now
    report = Report(job_id, where.site, where.cluster, where.prometheus)
    prometheus = Prometheus(where.prometheus, timeout=prometheus_timeout)
    scope = queries.Scope(site=where.site, cluster=where.cluster, job_id=job_id)
    job = _slurm_job(cfg, report, slurm_timeout)
    start: float | None = None
    end: float | None = None
    if job is not None and job.start is not None and job.start <= now:
        # a running job's EndTime is its time limit (or Unknown): it runs until now
        start, end = job.start, (job.end if job.ended and job.end else now)
        end = min(end, now)
    try:
        if start is None or end is None:
            # sampled every lookback/10000 s (1 s to 60 s); timestamp() keeps each
            # sample's own time, so the run is not rounded to the step
            step = int(min(60, max(1, lookback // 10000)))
            first, last = queries.first_last(scope, lookback, step)
            start, end = prometheus.scalar(first, now), prometheus.scalar(last, now)
            report.notes.append("run: first and last series of the job in Prometheus")
        if start is None or end is None:
            raise JobError(f"job {job_id}: no series of it at {where.site}/{where.cluster}")
        report.start, report.end = start, end
        report.run_seconds = max(end - start, 0.0)
        _measure(prometheus, scope, report, job)
    except PrometheusError as err:
        raise JobError(f"job {job_id}: Prometheus of {where.site}: {err}") from None
    report.findings = findings(report, threshold_values(cfg.monitoring.thresholds))
    return report


def _slurm_job(cfg: Config, report: Report, timeout: float) -> slurm.SlurmJob | None:
    try:
        slurm_conf = cfg.site_model[report.site].clusters[report.cluster].slurm_conf
    except KeyError:
        slurm_conf = ""
    try:
        job = slurm.read_job(report.job_id, slurm_conf, timeout=timeout)
    except slurm.SlurmError as err:
        report.notes.append(f"Slurm: {err}")
        return None
    report.state = job.state
    report.user, report.account = job.user, job.account
    report.request = {
        "nodes": job.nodes,
        "gpus": job.gpus,
        "cpus": job.cpus,
        "memory_bytes": job.memory_bytes,
        "time_limit_seconds": job.time_limit_seconds,
    }
    return job


def _measure(
    prometheus: Prometheus, scope: queries.Scope, report: Report, job: slurm.SlurmJob | None
) -> None:
    seconds = max(int(report.run_seconds or 0), 1)
    step = _step(seconds)
    at = report.end
    gpus: dict[tuple[str, str, str], GpuUse] = {}
    for measure in queries.MEASURES:
        _, samples = prometheus.query(measure.over(scope, seconds, step), at)
        if measure.per == "gpu":
            for sample in samples:
                labels = sample["metric"]
                key = (labels.get("instance", ""), labels.get("gpu", ""), labels.get("uuid", ""))
                gpus.setdefault(key, GpuUse(*key)).values[measure.key] = _value(sample)
        elif measure.by:
            target = report.slingshot
            for sample in samples:
                target[f"{sample['metric'].get(measure.by, '')}_bytes"] = _value(sample)
        else:
            name = measure.key.removeprefix("lustre_")
            unit = "operations" if measure.report_unit == "operations" else "bytes"
            report.lustre[f"{name}_{unit}"] = _value(samples[0]) if samples else None
    report.gpus = [gpus[k] for k in sorted(gpus)]
    report.used = _whole_job(report.gpus)
    if job is not None:
        report.used["max_rss_bytes"] = job.max_rss_bytes


def _whole_job(gpus: list[GpuUse]) -> dict[str, float | None]:
    used: dict[str, float | None] = {"gpus": len(gpus)}
    for measure in queries.MEASURES:
        if measure.per != "gpu":
            continue
        values = [v for g in gpus if (v := g.values.get(measure.key)) is not None]
        name = "energy_joules" if measure.key == "power" else measure.key
        if not values:
            used[name] = None
        elif measure.fold == "average":
            used[name] = sum(values) / len(values)
        else:
            used[name] = sum(values)
    return used


# --- findings ----------------------------------------------------------------------------


def _finding(
    kind: str, message: str, metric: str, threshold: Threshold, t: ThresholdValues, value: float
) -> Finding:
    return Finding(kind, message, metric, threshold.name, t[threshold], value)


def findings(report: Report, t: ThresholdValues) -> list[Finding]:
    """The findings of *report* under the thresholds *t*."""
    found = []
    idle, busy = t[queries.IDLE_GPU], t[queries.BUSY_GPU]
    idle_gpus = [
        g for g in report.gpus if (u := g.values.get("gpu_utilization")) is not None and u < idle
    ]
    if idle_gpus:
        worst = min(g.values["gpu_utilization"] or 0.0 for g in idle_gpus)
        names = ", ".join(f"{g.instance} GPU {g.gpu}" for g in idle_gpus)
        found.append(
            _finding(
                "idle_gpus",
                f"{len(idle_gpus)} of {len(report.gpus)} GPUs idle ({names}): utilisation "
                f"averaged down to {pct(worst)} over the run, under {pct(idle)}",
                "gotthard_gpu_utilization_ratio",
                queries.IDLE_GPU,
                t,
                worst,
            )
        )
    requested = report.request.get("gpus")
    if requested and len(report.gpus) < requested:
        unused = int(requested) - len(report.gpus)
        found.append(
            _finding(
                "unused_gpus",
                f"{unused} of {int(requested)} allocated GPUs ran no process of the job",
                "gotthard_gpu_job_info",
                queries.IDLE_GPU,
                t,
                0.0,
            )
        )
    util, tensor = report.used.get("gpu_utilization"), report.used.get("tensor_active")
    limit = t[queries.TENSOR_UNUSED]
    if util is not None and util >= busy and tensor is not None and tensor < limit:
        found.append(
            _finding(
                "tensor_unused",
                f"GPU-heavy job (utilisation {pct(util)} >= {pct(busy)}) with tensor cores "
                f"active {pct(tensor)} of the time, under {pct(limit)}",
                "gotthard_gpu_tensor_active_ratio",
                queries.TENSOR_UNUSED,
                t,
                tensor,
            )
        )
    run = report.run_seconds or 0.0
    moved = [report.lustre.get(k) for k in ("read_bytes", "write_bytes")]
    io_limit = t[queries.IO_BOUND_BYTES]
    if util is not None and util < idle and run > 0 and any(v is not None for v in moved):
        rate = sum(v or 0.0 for v in moved) / run
        if rate > io_limit:
            found.append(
                _finding(
                    "io_bound",
                    f"GPUs idle ({pct(util)}) while Lustre moved {num(round(rate))} B/s on "
                    f"average, over {num(io_limit)} B/s",
                    "gotthard_lustre_job_read_bytes_total + gotthard_lustre_job_write_bytes_total",
                    queries.IO_BOUND_BYTES,
                    t,
                    rate,
                )
            )
    rss, asked = report.used.get("max_rss_bytes"), report.request.get("memory_bytes")
    mem_limit = t[queries.MEMORY_USED]
    if rss is not None and asked:
        share = rss / asked
        if share < mem_limit:
            found.append(
                _finding(
                    "memory_unused",
                    f"peak memory {pct(share)} of the {num(asked)} bytes requested, "
                    f"under {pct(mem_limit)}",
                    "sacct MaxRSS",
                    queries.MEMORY_USED,
                    t,
                    share,
                )
            )
    limit_s = report.request.get("time_limit_seconds")
    time_limit = t[queries.TIME_USED]
    ended = report.state.split()[0] in slurm.ENDED if report.state else False
    # a limit of a year or more is none (a partition without MaxTime gives jobs 365 days)
    limited = bool(limit_s) and (limit_s or 0) < NO_LIMIT_SECONDS
    if ended and limited and run > 0 and run / (limit_s or 1) < time_limit:
        share = run / limit_s
        found.append(
            _finding(
                "time_limit_unused",
                f"ran {num(round(run))} s, {pct(share)} of its {num(limit_s)} s time limit, "
                f"under {pct(time_limit)}",
                "Slurm TimeLimit",
                queries.TIME_USED,
                t,
                share,
            )
        )
    return found
