"""DR operations shared by the daemon, the CLI and the public API: backups and drills."""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from kubernetes import client

from gotthard.dr import velero as v
from gotthard.dr.hooks import BackupHook, restore_hooks_spec
from gotthard.dr.metrics import DrMetrics
from gotthard.dr.settings import (
    LABEL_SCRATCH,
    BackupSchedule,
    DrConfig,
    DrillSpec,
    ResourceCheck,
)
from gotthard.kube import Retry, call, call_unless, list_objects, site_client

if TYPE_CHECKING:
    from gotthard.config import Config

log = logging.getLogger(__name__)

LABEL_SOURCE_NS = "gotthard.io/drill-source-namespace"
LABEL_SOURCE_SITE = "gotthard.io/drill-source-site"


class Context:
    """What DR acts with: its settings (``[dr]``) and the site model of one Config,
    metrics, and lazily built API clients for each site."""

    def __init__(
        self,
        cfg: Config,
        metrics: DrMetrics | None = None,
        api_clients: Mapping[str, client.ApiClient] | None = None,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        settings = cfg.dr
        self.settings = settings
        #: The site model (site -> its clusters) and the installation's own site.
        self.sites = cfg.site_model
        self.site = cfg.site
        self.metrics = metrics or DrMetrics()
        self._clients: dict[str, client.ApiClient] = dict(api_clients or {})
        self.clock = clock
        self.retry = Retry(
            attempts=settings.api_attempts,
            backoff_seconds=settings.api_backoff_seconds,
            backoff_max_seconds=settings.api_backoff_max_seconds,
            timeout_seconds=settings.api_timeout_seconds,
            sleep=sleep,
            on_retry=lambda op: self.metrics.api_retries.labels(op).inc(),
        )

    def api(self, site: str) -> client.ApiClient:
        if site not in self._clients:
            self._clients[site] = site_client(site, self.sites[site])
        return self._clients[site]

    def velero(self, site: str) -> v.Velero:
        return v.Velero(
            self.api(site),
            self.sites[site].velero_namespace,
            self.retry,
            poll_seconds=self.settings.poll_interval_seconds,
            clock=self.clock,
        )


def now_utc(ctx: Context) -> dt.datetime:
    return dt.datetime.fromtimestamp(ctx.clock(), dt.UTC)


# -- backups ---------------------------------------------------------------------------


def trigger_backup(ctx: Context, site: str, schedule: BackupSchedule, slot: dt.datetime) -> str:
    """Create the Backup of *slot* (idempotent: 409 = already done); return its name."""
    name = v.slot_name(f"{schedule.name}-{site}", slot)
    labels = {v.LABEL_SCHEDULE: schedule.name, v.LABEL_SLOT: slot.strftime("%Y%m%d%H%M%S")}
    created = ctx.velero(site).create_backup(name, v.backup_spec(schedule), labels)
    log.info("backup %s on %s: %s", name, site, "created" if created else "already exists")
    return name


def record_backup(ctx: Context, site: str, schedule: str, outcome: v.Outcome) -> None:
    m = ctx.metrics
    m.backups.labels(site, schedule, outcome.phase).inc()
    if outcome.duration is not None:
        m.backup_duration.labels(site, schedule).set(outcome.duration)
    if not outcome.usable:
        m.backup_last_failure.labels(site, schedule).set(outcome.completed or ctx.clock())
    elif outcome.completed is not None:
        m.backup_last_success.labels(site, schedule).set(outcome.completed)
        for ns in (outcome.obj.get("spec") or {}).get("includedNamespaces") or []:
            record_rpo(ctx, site, ns, max(0.0, ctx.clock() - outcome.completed))


def record_backup_timeout(ctx: Context, site: str, schedule: str) -> None:
    """A Backup of *schedule* still unfinished after ``backup_timeout_seconds``."""
    ctx.metrics.backups.labels(site, schedule, "Timeout").inc()
    ctx.metrics.backup_last_failure.labels(site, schedule).set(ctx.clock())


def run_backup(ctx: Context, site: str, schedule: BackupSchedule, slot: dt.datetime) -> v.Outcome:
    """Trigger the slot's Backup and wait, in this thread, for a terminal phase (or the
    timeout). The daemon's scheduled jobs do not wait: they create, and
    :mod:`gotthard.dr.follow` follows all of a site's Backups with one LIST."""
    name = trigger_backup(ctx, site, schedule, slot)
    try:
        outcome = ctx.velero(site).wait("backups", name, ctx.settings.backup_timeout_seconds)
    except v.PhaseTimeout:
        record_backup_timeout(ctx, site, schedule.name)
        raise
    record_backup(ctx, site, schedule.name, outcome)
    if not outcome.usable:
        raise RuntimeError(f"backup {name} on {site} ended {outcome.detail}")
    return outcome


def refresh_rpo(
    ctx: Context, site: str, namespaces: list[str], velero_schedules: Sequence[str] = ()
) -> None:
    """Set ``gotthard_dr_rpo_seconds`` for *namespaces* from one LIST of the site's
    Backups; for the Velero-fired *velero_schedules* (config names) also set
    ``gotthard_dr_backup_last_success_timestamp_seconds`` and
    ``gotthard_dr_backup_last_failure_timestamp_seconds`` from the Backups Velero made."""
    vel = ctx.velero(site)
    backups = vel.list("backups")
    for ns, latest in vel.latest_completed_backups(namespaces, backups).items():
        done = v.parse_time((latest.get("status") or {}).get("completionTimestamp"))
        if done is not None:
            record_rpo(ctx, site, ns, max(0.0, ctx.clock() - done))
    for name in velero_schedules:
        owner = velero_schedule_name(name, site)
        finished: dict[bool, list[float]] = {True: [], False: []}
        for b in backups:
            labels = (b.get("metadata") or {}).get("labels") or {}
            phase = v.phase_of(b)
            if labels.get(v.LABEL_VELERO_SCHEDULE) != owner or phase not in v.TERMINAL_PHASES:
                continue
            status = b.get("status") or {}
            done = v.parse_time(status.get("completionTimestamp"))
            if done is None and phase != "Completed":  # FailedValidation never started
                done = v.parse_time((b.get("metadata") or {}).get("creationTimestamp"))
            finished[phase == "Completed"].append(done or 0.0)
        if finished[True]:
            ctx.metrics.backup_last_success.labels(site, name).set(max(finished[True]))
        if finished[False]:
            ctx.metrics.backup_last_failure.labels(site, name).set(max(finished[False]))


# -- recovery tiers --------------------------------------------------------------------


def judge(objective: str, target: float, measured: float | None) -> dict[str, Any]:
    """One objective of a tier: target, measured and whether it is met (None = unmeasured)."""
    met = None if measured is None else measured <= target
    return {
        "objective": objective,
        "target_seconds": target,
        "measured_seconds": measured,
        "met": met,
    }


def _set_breach(ctx: Context, site: str, ns: str, tier: str, judged: dict[str, Any]) -> None:
    breached = judged["met"] is False
    ctx.metrics.tier_breach.labels(site, ns, tier, judged["objective"]).set(1 if breached else 0)


def record_rpo(ctx: Context, site: str, ns: str, age: float, tier: str | None = None) -> None:
    """Set ``gotthard_dr_rpo_seconds`` and, for a tiered namespace, its RPO breach flag.
    *tier* defaults to the tier of the schedule backing the namespace up."""
    tier = ctx.settings.namespace_tier(site, ns) if tier is None else tier
    ctx.metrics.rpo.labels(site, ns, tier).set(age)
    if tier:
        _set_breach(ctx, site, ns, tier, judge("rpo", ctx.settings.tiers[tier].rpo_seconds, age))


def tier_compliance(ctx: Context, site: str) -> list[dict[str, Any]]:
    """RPO of each tiered namespace backed up at *site*, judged against its tier, from the
    newest Completed Backup; the RTO is measured only by drills, so it is unmeasured here."""
    s = ctx.settings
    namespaces = {
        ns for sch in s.schedules if sch.tier and sch.covers(site) for ns in sch.namespaces
    }
    namespaces |= {d.namespace for d in s.drills if d.site == site and s.drill_tier(d)}
    if not namespaces:
        return []
    vel = ctx.velero(site)
    latest = vel.latest_completed_backups(sorted(namespaces), vel.list("backups"))
    rows: list[dict[str, Any]] = []
    for ns in sorted(namespaces):
        drill = next((d for d in s.drills if d.site == site and d.namespace == ns), None)
        tier = s.drill_tier(drill) if drill else s.namespace_tier(site, ns)
        done = v.parse_time(((latest.get(ns) or {}).get("status") or {}).get("completionTimestamp"))
        age = None if done is None else max(0.0, ctx.clock() - done)
        targets = s.tiers[tier]
        for judged in (
            judge("rpo", targets.rpo_seconds, age),
            judge("rto", targets.rto_seconds, None),
        ):
            rows.append({"namespace": ns, "tier": tier, **judged})
    return rows


def velero_schedule_name(schedule: str, site: str) -> str:
    """Name of the Velero Schedule object for a config schedule on a site. Velero names
    the Backups it fires ``<this>-<YYYYMMDDhhmmss>``, like the daemon's own slot names."""
    return f"{schedule}-{site}"[:50].rstrip("-")


def sync_velero_schedules(ctx: Context, site: str) -> dict[str, str]:
    """Create/patch a ``velero.io/v1`` Schedule for each ``velero_schedule = true`` entry
    of ``[[dr.schedules]]`` covering *site*; delete the Gotthard-managed Schedules that
    left the configuration. Returns Schedule name -> created/updated/deleted."""
    s, vel = ctx.settings, ctx.velero(site)
    done: dict[str, str] = {}
    wanted = set()
    for sched in s.schedules:
        if not sched.velero_schedule or not sched.covers(site):
            continue
        name = velero_schedule_name(sched.name, site)
        wanted.add(name)
        cron = sched.cron if s.timezone == "UTC" else f"CRON_TZ={s.timezone} {sched.cron}"
        done[name] = vel.apply_schedule(
            name, cron, v.backup_spec(sched), {v.LABEL_SCHEDULE: sched.name, v.LABEL_SITE: site}
        )
    for name in vel.managed_schedules(site):
        if name not in wanted and vel.delete("schedules", name):
            done[name] = "deleted"
    for name, what in sorted(done.items()):
        log.info("velero schedule %s on %s: %s", name, site, what)
    return done


def check_storage_locations(ctx: Context, site: str) -> dict[str, bool]:
    result = ctx.velero(site).storage_locations()
    for name, ok in result.items():
        ctx.metrics.bsl_available.labels(site, name).set(1 if ok else 0)
    return result


# -- drills ----------------------------------------------------------------------------


@dataclass
class DrillReport:
    site: str
    namespace: str
    target_site: str
    scratch_namespace: str
    backup: str = ""
    restore: str = ""
    verified: bool = False
    rto_seconds: float | None = None
    rpo_seconds: float | None = None
    #: Recovery tier the drill is judged against ("" = none) and, per objective (rpo, rto),
    #: its target, measurement and whether it was met.
    tier: str = ""
    objectives: list[dict[str, Any]] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)
    cleaned: bool = False
    error: str = ""
    #: The phases that ran, in order (backup, restore, verify, cleanup): ``name``,
    #: ``started`` (UTC ISO 8601), ``duration_seconds``, ``ok`` and ``detail``.
    phases: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    def to_markdown(self) -> str:
        lines = [
            f"# DR drill: {self.namespace} ({self.site} → {self.target_site})",
            "",
            f"* result: **{'verified' if self.verified else 'FAILED'}**"
            + (f" ({self.error})" if self.error else ""),
            f"* backup: `{self.backup}`, restore: `{self.restore}`",
            f"* scratch namespace: `{self.scratch_namespace}` (cleaned: {self.cleaned})",
            f"* RTO: {_fmt(self.rto_seconds)}, RPO: {_fmt(self.rpo_seconds)}",
            "",
        ]
        if self.tier:
            lines += [
                f"Recovery tier `{self.tier}`:",
                "",
                "| objective | target | measured | result |",
                "|---|---|---|---|",
            ]
            lines += [
                f"| {o['objective'].upper()} | {_fmt(o['target_seconds'])} "
                f"| {_fmt(o['measured_seconds'])} | {verdict(o['met'])} |"
                for o in self.objectives
            ]
            lines.append("")
        lines += [
            "| phase | started | duration | ok | detail |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {p['name']} | {p['started']} | {p['duration_seconds']:.2f} s "
            f"| {_yes(p['ok'])} | {p['detail']} |"
            for p in self.phases
        ]
        lines += [
            "",
            "| check | ok | detail |",
            "|---|---|---|",
        ]
        lines += [f"| {c['name']} | {_yes(c['ok'])} | {c['detail']} |" for c in self.checks]
        return "\n".join(lines) + "\n"


def _fmt(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds:.1f} s"


def _yes(ok: bool) -> str:
    return "yes" if ok else "no"


def verdict(met: bool | None) -> str:
    return {True: "met", False: "breached", None: "unmeasured"}[met]


def scratch_name(namespace: str, when: dt.datetime) -> str:
    stamp = when.strftime("%Y%m%d%H%M%S")
    return f"drill-{namespace[: 63 - len(stamp) - 7]}-{stamp}"


def create_scratch_namespace(
    ctx: Context, site: str, name: str, source: str, source_site: str
) -> None:
    """Create the scratch namespace up front so that it carries our labels (Velero then
    restores into the existing namespace); a crash leaves it findable by label."""
    body = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": {
                LABEL_SCRATCH: "true",
                LABEL_SOURCE_NS: source,
                LABEL_SOURCE_SITE: source_site,
            },
        },
    }
    core = client.CoreV1Api(ctx.api(site))
    call_unless(409, ctx.retry, "create namespace", core.create_namespace, body)


def delete_namespace(ctx: Context, site: str, name: str) -> bool:
    core = client.CoreV1Api(ctx.api(site))
    call_unless(404, ctx.retry, "delete namespace", core.delete_namespace, name)
    return True


def cleanup_orphans(ctx: Context, site: str) -> list[str]:
    """Delete scratch namespaces left by crashed drills; mark those drills failed."""
    core = client.CoreV1Api(ctx.api(site))
    found = call(
        ctx.retry, "list namespaces", core.list_namespace, label_selector=f"{LABEL_SCRATCH}=true"
    )
    cleaned = []
    for ns in found.items:
        labels = ns.metadata.labels or {}
        if labels.get(LABEL_SCRATCH) != "true":  # selector may be ignored: check here too
            continue
        delete_namespace(ctx, site, ns.metadata.name)
        ctx.metrics.orphans_cleaned.labels(site).inc()
        source_site = labels.get(LABEL_SOURCE_SITE, site)
        source_ns = labels.get(LABEL_SOURCE_NS, "")
        if source_ns:
            ctx.metrics.drill_last_success.labels(source_site, source_ns).set(0)
            ctx.metrics.drill_last_timestamp.labels(source_site, source_ns).set(ctx.clock())
        cleaned.append(ns.metadata.name)
        log.warning("deleted orphan drill namespace %s on %s", ns.metadata.name, site)
    return cleaned


def _ready(obj: Mapping[str, Any], plural: str) -> bool:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    if plural in ("deployments", "statefulsets", "replicasets"):
        return int(status.get("readyReplicas") or 0) >= int(spec.get("replicas", 1))
    if plural == "jobs":
        return int(status.get("succeeded") or 0) > 0
    if plural == "pods":
        return status.get("phase") in ("Running", "Succeeded")
    return True


def _check_objects(
    ctx: Context, site: str, scratch: str, checks: list[ResourceCheck]
) -> list[dict[str, Any]]:
    """One look at the restored objects: enough of each, and ready where required."""
    results: list[dict[str, Any]] = []
    api = ctx.api(site)
    for check in checks:
        objs = list_objects(api, ctx.retry, check.api_version, check.plural, scratch)
        ready = [o for o in objs if not check.require_ready or _ready(o, check.plural)]
        ok = len(objs) >= check.min_count and len(ready) == len(objs)
        results.append(
            {
                "name": f"{check.plural}.{check.api_version}",
                "ok": ok,
                "detail": f"{len(objs)} found (min {check.min_count}), {len(ready)} ready",
            }
        )
    return results


def verify(
    ctx: Context,
    site: str,
    scratch: str,
    checks: list[ResourceCheck],
    probe: str,
    wait_seconds: float = 0.0,
) -> list[dict[str, Any]]:
    """The drill's checks of the restored *scratch* namespace at *site*. A restore that
    Velero reports Completed has created the objects; their controllers still have to
    make them ready: the object checks are repeated until they all pass or
    *wait_seconds* have gone by (the last look is the result). Then the HTTP probe."""
    deadline = ctx.clock() + wait_seconds
    while True:
        results = _check_objects(ctx, site, scratch, checks)
        left = deadline - ctx.clock()
        if all(r["ok"] for r in results) or left <= 0:
            break
        time.sleep(min(ctx.settings.poll_interval_seconds, left))
    if probe:
        url = probe.replace("$namespace", scratch)
        try:
            with urllib.request.urlopen(url, timeout=ctx.settings.api_timeout_seconds) as resp:
                ok, detail = 200 <= resp.status < 300, f"HTTP {resp.status}"
        except Exception as err:
            ok, detail = False, str(err)
        results.append({"name": "http-probe", "ok": ok, "detail": detail})
    return results


@contextmanager
def _phase(ctx: Context, report: DrillReport, name: str) -> Iterator[dict[str, Any]]:
    """Record one phase of a drill in ``report.phases``: when it started, how long it took,
    whether it succeeded and why. The body sets ``ok`` and ``detail``; an exception marks
    the phase failed with the error as its detail and is raised again."""
    begun = ctx.clock()
    entry: dict[str, Any] = {
        "name": name,
        "started": iso_time(begun),
        "duration_seconds": 0.0,
        "ok": False,
        "detail": "",
    }
    report.phases.append(entry)
    try:
        yield entry
    except Exception as err:
        entry["ok"] = False
        entry["detail"] = entry["detail"] or f"{type(err).__name__}: {err}"
        raise
    finally:
        entry["duration_seconds"] = round(max(0.0, ctx.clock() - begun), 3)


def iso_time(ts: float) -> str:
    """UTC ISO 8601 with milliseconds (``2026-03-01T02:00:00.125Z``): drill phases can be
    shorter than the whole seconds of Velero's timestamps."""
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def schedule_hooks(settings: DrConfig, site: str, namespace: str) -> list[BackupHook]:
    """The backup hooks of the schedules backing up *namespace* at *site*: a drill's fresh
    backup and an ad-hoc one are taken as consistently as the scheduled ones."""
    return [hook for sched in settings.schedules_of(site, namespace) for hook in sched.hooks]


def _drill_backup(
    ctx: Context, spec: DrillSpec, report: DrillReport, fresh: bool, when: dt.datetime
) -> dict[str, Any]:
    """The Backup the drill restores: a fresh one (named after *when*), or the newest
    Completed one of the namespace at the drill's site."""
    source = ctx.velero(spec.site)
    if not fresh:
        found = source.latest_completed_backup(spec.namespace)
        if found is None:
            raise RuntimeError(f"no Completed backup of {spec.namespace} on {spec.site}")
        report.backup = found["metadata"]["name"]
        return found
    sched = BackupSchedule(
        name="drill",
        namespaces=[spec.namespace],
        hooks=schedule_hooks(ctx.settings, spec.site, spec.namespace),
    )
    report.backup = v.slot_name(f"drill-{spec.namespace}-{spec.site}", when)
    source.create_backup(
        report.backup,
        v.backup_spec(sched),
        {
            v.LABEL_SCHEDULE: "drill",
            v.LABEL_NAMESPACE: spec.namespace,
            v.LABEL_SLOT: when.astimezone(dt.UTC).strftime("%Y%m%d%H%M%S"),
        },
    )
    outcome = source.wait("backups", report.backup, ctx.settings.backup_timeout_seconds)
    record_backup(ctx, spec.site, "drill", outcome)
    return outcome.obj


def _drill_restore(ctx: Context, spec: DrillSpec, report: DrillReport) -> v.Outcome:
    """Restore the drill's Backup into its scratch namespace at the target site. Across
    sites the Backup is first awaited there: Velero's backup sync copies it from the
    shared storage location."""
    target = report.target_site
    vel = ctx.velero(target)
    if target != spec.site:
        vel.wait("backups", report.backup, ctx.settings.restore_timeout_seconds)
    create_scratch_namespace(ctx, target, report.scratch_namespace, spec.namespace, spec.site)
    report.restore = report.scratch_namespace
    mapping = {spec.namespace: report.scratch_namespace}
    vel.create_restore(
        report.restore,
        report.backup,
        mapping,
        {LABEL_SCRATCH: "true", LABEL_SOURCE_NS: spec.namespace},
        hooks=restore_hooks_spec(spec.restore_hooks, mapping) if spec.restore_hooks else None,
    )
    return vel.wait("restores", report.restore, ctx.settings.restore_timeout_seconds)


def run_drill(
    ctx: Context,
    spec: DrillSpec,
    *,
    fresh_backup: bool | None = None,
    slot: dt.datetime | None = None,
) -> DrillReport:
    """Backup (fresh or latest Completed) → Restore into a scratch namespace (at the target
    site) → verify → RTO/RPO → always clean up; each phase is timed in ``report.phases``.
    Never raises for a failed drill: the report says why.

    *slot* (scheduled drills: the cron slot) names the fresh Backup, so a drill of the
    same slot run again (restart, misfire) reuses it (409) instead of taking another."""
    start = ctx.clock()
    started = now_utc(ctx)
    target = spec.target_site or spec.site
    report = DrillReport(spec.site, spec.namespace, target, scratch_name(spec.namespace, started))
    report.tier = ctx.settings.drill_tier(spec)
    fresh = spec.fresh_backup if fresh_backup is None else fresh_backup
    try:
        with _phase(ctx, report, "backup") as phase:
            backup = _drill_backup(ctx, spec, report, fresh, slot or started)
            completed = v.phase_of(backup) == "Completed"
            detail = v.describe_phase(backup)
            report.checks.append({"name": "backup-completed", "ok": completed, "detail": detail})
            phase.update(ok=completed, detail=f"{report.backup}: {detail}")
            if not completed:
                raise RuntimeError(f"backup {report.backup} is {detail}, not Completed")
        backup_done = v.parse_time((backup.get("status") or {}).get("completionTimestamp"))
        if backup_done is not None:
            report.rpo_seconds = max(0.0, start - backup_done)

        with _phase(ctx, report, "restore") as phase:
            restored = _drill_restore(ctx, spec, report)
            report.checks.append(
                {"name": "restore-completed", "ok": restored.usable, "detail": restored.detail}
            )
            phase.update(ok=restored.usable, detail=f"{report.restore}: {restored.detail}")
        if restored.usable:
            with _phase(ctx, report, "verify") as phase:
                checks = verify(
                    ctx,
                    target,
                    report.scratch_namespace,
                    spec.checks,
                    spec.http_probe,
                    ctx.settings.restore_timeout_seconds,
                )
                report.checks += checks
                failed = [c["name"] for c in checks if not c["ok"]]
                passed = [c["name"] for c in checks if c["ok"]]
                detail = (
                    f"failed: {', '.join(failed)}" if failed else f"passed: {', '.join(passed)}"
                )
                phase.update(ok=not failed, detail=detail)
        report.verified = all(c["ok"] for c in report.checks)
        if report.verified:
            report.rto_seconds = ctx.clock() - start
        else:
            report.error = "; ".join(
                f"{c['name']}: {c['detail']}" for c in report.checks if not c["ok"]
            )
    except Exception as err:
        log.exception("drill of %s on %s failed", spec.namespace, spec.site)
        report.error = report.error or f"{type(err).__name__}: {err}"
    finally:
        try:
            with _phase(ctx, report, "cleanup") as phase:
                report.cleaned = delete_namespace(ctx, target, report.scratch_namespace)
                phase.update(ok=True, detail=f"deleted {report.scratch_namespace} on {target}")
        except Exception as err:
            log.error("could not delete scratch namespace %s: %s", report.scratch_namespace, err)
        _record_drill(ctx, report)
    return report


def _judge_drill(ctx: Context, report: DrillReport) -> None:
    """Compare the drill's RPO and RTO with its tier's; a drill that did not verify has
    not recovered the service, so its RTO counts as breached."""
    if not report.tier:
        return
    targets = ctx.settings.tiers[report.tier]
    rto = judge("rto", targets.rto_seconds, report.rto_seconds)
    if not report.verified:
        rto["met"] = False
    report.objectives = [judge("rpo", targets.rpo_seconds, report.rpo_seconds), rto]


def _record_drill(ctx: Context, report: DrillReport) -> None:
    _judge_drill(ctx, report)
    m, labels = ctx.metrics, (report.site, report.namespace)
    m.drill_last_success.labels(*labels).set(1 if report.verified else 0)
    m.drill_last_timestamp.labels(*labels).set(ctx.clock())
    if report.rto_seconds is not None:
        m.drill_rto.labels(*labels).set(report.rto_seconds)
        m.rto.labels(*labels, report.tier).set(report.rto_seconds)
    if report.rpo_seconds is not None:
        m.drill_rpo.labels(*labels).set(report.rpo_seconds)
        record_rpo(ctx, report.site, report.namespace, report.rpo_seconds, report.tier)
    for judged in report.objectives:
        if judged["met"] is not None:
            _set_breach(ctx, report.site, report.namespace, report.tier, judged)
