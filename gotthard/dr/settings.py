"""Typed settings of the DR control plane: the ``[dr]`` table of the site file.

:class:`DrConfig` is strict (unknown keys are errors) so a typo in the site file fails
at start-up instead of silently disabling a backup. It is mounted as ``Config.dr`` and
holds no sites: DR reads the site model from the Config (``Config.site_model``, the
installation's ``Config.site``), which checks every site named here against it
(:meth:`DrConfig.check_sites`).

APScheduler is imported only to validate a cron expression or build a trigger, so that
loading the configuration stays cheap for the exporter.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from gotthard.base import DnsLabel, ListenAddress, Strict
from gotthard.base import LongSeconds as Seconds
from gotthard.dr.hooks import BackupHook, RestoreHook
from gotthard.site import KubeAccess

#: The label every drill's scratch namespace is created with, and the only namespaces the
#: DR ServiceAccount may delete (the ValidatingAdmissionPolicy ``deploy render`` writes).
LABEL_SCRATCH = "gotthard.io/drill-scratch"

if TYPE_CHECKING:
    from apscheduler.triggers.cron import CronTrigger

_DOW = ("sun", "mon", "tue", "wed", "thu", "fri", "sat", "sun")


def cron_trigger(expr: str, timezone: str = "UTC") -> CronTrigger:
    """A CronTrigger with crontab semantics: day-of-week 0 and 7 are Sunday.

    APScheduler 3.x ``from_crontab`` counts 0 as Monday; numeric days are translated
    to names here so ``0 4 * * 0`` runs on Sundays as in crontab(5)."""
    from apscheduler.triggers.cron import CronTrigger

    fields = expr.split()
    if len(fields) == 5:
        fields[4] = re.sub(r"(?<![/\d])[0-7](?!\d)", lambda m: _DOW[int(m.group())], fields[4])
    return CronTrigger.from_crontab(" ".join(fields), timezone=timezone)


def _check_cron(value: str) -> str:
    try:
        cron_trigger(value)
    except ModuleNotFoundError:
        # a host without the [dr] extra (a node exporter sharing the site file) does not
        # run schedules; the DR daemon, which has APScheduler, checks them when it loads
        return value
    except ValueError as err:
        raise ValueError(f"not a 5-field crontab expression: {err}") from None
    return value


#: A 5-field crontab expression (day-of-week 0 and 7 are Sunday, see :func:`cron_trigger`).
Cron = Annotated[str, AfterValidator(_check_cron)]


class RecoveryTier(Strict):
    """A recovery tier (``[dr.tiers.NAME]``): the RPO and RTO its namespaces promise."""

    #: Largest acceptable age of the newest usable backup.
    rpo_seconds: Seconds
    #: Largest acceptable time from the start of a restore to a verified service.
    rto_seconds: Seconds


class BackupSchedule(Strict):
    """One backup schedule: a Velero Backup per cron slot and site, named deterministically."""

    name: DnsLabel
    #: Recovery tier of the namespaces it covers (a key of ``[dr.tiers]``); "" = none.
    tier: str = ""
    namespaces: list[str] = Field(min_length=1)
    cron: Cron = "0 2 * * *"
    #: Sites to back up; empty = every configured site.
    sites: list[str] = Field(default_factory=list)
    ttl: str = "720h0m0s"
    storage_location: str = ""
    snapshot_volumes: bool | None = None
    default_volumes_to_fs_backup: bool | None = None
    #: Also manage a Velero ``Schedule`` object with the same cron (Velero fires it itself).
    velero_schedule: bool = False
    #: Velero exec hooks run in the backed-up pods (pre: quiesce, post: release).
    hooks: list[BackupHook] = Field(default_factory=list)

    def covers(self, site: str) -> bool:
        """Whether the schedule backs up *site* (no ``sites``: every site)."""
        return not self.sites or site in self.sites

    def sites_in(self, known: Iterable[str]) -> list[str]:
        """The sites of *known* (the site model's) the schedule backs up."""
        return list(self.sites) or sorted(known)


class ResourceCheck(Strict):
    """Objects that must exist (and be ready, where a readiness rule is known) after restore."""

    api_version: str = "apps/v1"
    plural: str = "deployments"
    min_count: Annotated[int, Field(ge=0)] = 1
    require_ready: bool = True


class DrillSpec(Strict):
    """A scheduled restore drill of one namespace of one site."""

    site: str
    namespace: str
    #: Recovery tier whose targets the drill checks; "" = the tier of a schedule covering
    #: the namespace, if any.
    tier: str = ""
    #: Restore on this site's cluster instead (cross-site drill); empty = same site.
    target_site: str = ""
    cron: Cron = "0 4 * * 0"
    #: Take a fresh backup first instead of using the latest Completed one.
    fresh_backup: bool = False
    checks: list[ResourceCheck] = Field(default_factory=lambda: [ResourceCheck()])
    #: Optional HTTP probe (2xx expected) run after the restore.
    http_probe: str = ""
    #: Velero exec hooks run in the restored pods (matched in the scratch namespace).
    restore_hooks: list[RestoreHook] = Field(default_factory=list)


class PlacedService(Strict):
    """A service whose placement (Zurich or Lugano) the placement controller decides."""

    name: DnsLabel
    namespace: str = "default"
    primary_site: str
    #: Recovery tier of the service (a key of ``[dr.tiers]``); "" = none.
    tier: str = ""
    #: resourceSelectors of the PropagationPolicy: ``{apiVersion, kind, name?}``.
    resources: list[dict[str, str]] = Field(min_length=1)
    #: ``failover``: active-passive, on one site at a time (the primary while it is healthy);
    #: ``spread``: active-active over every healthy site (Karmada spreadConstraints).
    mode: Literal["failover", "spread"] = "failover"


class HealthQueries(Strict):
    """PromQL per health signal, evaluated on each site's Prometheus; ``$site`` is replaced."""

    api_up: str = 'min(up{job="apiserver"})'
    ingress_up: str = 'min(up{job="ingress"})'
    gpu_capacity: str = 'sum(kube_node_status_allocatable{resource="nvidia_com_gpu"})'
    slurm_up: str = "min(gotthard_slurm_up)"
    drill_ok: str = 'min(gotthard_dr_drill_last_success{site="$site"})'


class PlacementConfig(Strict):
    enabled: bool = False
    interval_seconds: Seconds = 60.0
    #: Consecutive bad evaluations of the current site before failing over.
    failover_after: Annotated[int, Field(ge=1, le=1000)] = 3
    #: Minimum time on the fallback site before failing back to the primary.
    failback_cooldown_seconds: Seconds = 1800.0
    min_gpu_capacity: Annotated[float, Field(ge=0)] = 0.0
    #: The Karmada control plane's API (kubeconfig + context, or in_cluster).
    karmada: KubeAccess = KubeAccess()
    #: service -> site: a manual override always wins.
    overrides: dict[str, str] = Field(default_factory=dict)
    services: list[PlacedService] = Field(default_factory=list)
    queries: HealthQueries = HealthQueries()
    #: JSON file keeping the hysteresis state across restarts.
    state_file: str = "/var/lib/gotthard/dr-placement.json"


class LeaseSettings(Strict):
    enabled: bool = True
    #: Site whose cluster holds the Lease; empty = the installation's own ``site``.
    site: str = ""
    namespace: str = "gotthard"
    name: str = "gotthard-dr-daemon"
    duration_seconds: Seconds = 30.0
    renew_seconds: Seconds = 10.0


class DrConfig(Strict):
    """The ``[dr]`` table."""

    #: APScheduler job store: a SQLite file by default, ``postgresql+psycopg://...`` in production.
    jobstore_url: str = "sqlite:////var/lib/gotthard/dr-jobs.sqlite"
    listen: ListenAddress = "127.0.0.1:9879"
    #: exporter-toolkit web configuration (TLS, basic auth, headers); empty = plain HTTP.
    web_config: str = ""
    timezone: str = "UTC"
    misfire_grace_seconds: Seconds = 600.0
    backup_timeout_seconds: Seconds = 4 * 3600.0
    restore_timeout_seconds: Seconds = 2 * 3600.0
    poll_interval_seconds: Seconds = 5.0
    #: How often each site's ``follow:`` job reads the Backups the scheduled jobs created
    #: (one LIST per site, only while some are unfinished).
    follow_interval_seconds: Seconds = 30.0
    #: Kubernetes API calls: attempts, first back-off (doubling, capped), request timeout.
    api_attempts: Annotated[int, Field(ge=1, le=20)] = 5
    api_backoff_seconds: Annotated[float, Field(ge=0, le=60)] = 1.0
    api_backoff_max_seconds: Annotated[float, Field(ge=0, le=600)] = 30.0
    api_timeout_seconds: Seconds = 30.0
    lease: LeaseSettings = LeaseSettings()
    #: Recovery tiers by name: ``[dr.tiers.NAME]`` with ``rpo_seconds`` and ``rto_seconds``.
    tiers: dict[str, RecoveryTier] = Field(default_factory=dict)
    schedules: list[BackupSchedule] = Field(default_factory=list)
    drills: list[DrillSpec] = Field(default_factory=list)
    placement: PlacementConfig = PlacementConfig()

    @model_validator(mode="after")
    def _consistent(self) -> DrConfig:
        self._tiers_known()
        names = [s.name for s in self.schedules]
        if len(names) != len(set(names)):
            raise ValueError("schedules: names must be unique (they are part of job ids)")
        return self

    def check_sites(self, known: Collection[str]) -> None:
        """Every site named in ``[dr]`` is one of *known* (the site model's); a
        ValueError names the first key that is not."""

        def check(where: str, site: str) -> None:
            if site and site not in known:
                raise ValueError(
                    f"{where}: unknown site {site!r} (known: {', '.join(sorted(known))})"
                )

        check("lease.site", self.lease.site)
        for sched in self.schedules:
            for site in sched.sites:
                check(f"schedules[{sched.name}].sites", site)
        for i, drill in enumerate(self.drills):
            check(f"drills[{i}].site", drill.site)
            check(f"drills[{i}].target_site", drill.target_site)
        for svc in self.placement.services:
            check(f"placement.services[{svc.name}].primary_site", svc.primary_site)
        for svc, site in self.placement.overrides.items():
            check(f"placement.overrides.{svc}", site)

    def _tiers_known(self) -> None:
        """Every ``tier`` names a key of ``[dr.tiers]``."""
        named = [(f"schedules[{i}].tier", s.tier) for i, s in enumerate(self.schedules)]
        named += [(f"drills[{i}].tier", d.tier) for i, d in enumerate(self.drills)]
        named += [
            (f"placement.services[{i}].tier", s.tier) for i, s in enumerate(self.placement.services)
        ]
        for where, tier in named:
            if tier and tier not in self.tiers:
                known = ", ".join(sorted(self.tiers)) or "none configured"
                raise ValueError(f"{where}: unknown tier {tier!r} (known: {known})")

    def schedules_of(self, site: str, namespace: str) -> list[BackupSchedule]:
        """The schedules backing up *namespace* at *site*, in configuration order."""
        return [s for s in self._schedules_by_namespace.get(namespace, ()) if s.covers(site)]

    @functools.cached_property
    def _schedules_by_namespace(self) -> dict[str, list[BackupSchedule]]:
        # every backup run asks for its namespaces' schedules: an index, not a scan of
        # (say) 500 schedules per run
        index: dict[str, list[BackupSchedule]] = {}
        for sched in self.schedules:
            for namespace in dict.fromkeys(sched.namespaces):
                index.setdefault(namespace, []).append(sched)
        return index

    def namespace_tier(self, site: str, namespace: str) -> str:
        """The tier of the first tiered schedule backing up *namespace* at *site*; "" = none."""
        return next((s.tier for s in self.schedules_of(site, namespace) if s.tier), "")

    def drill_tier(self, drill: DrillSpec) -> str:
        """The drill's own tier, else that of the schedule backing up its namespace."""
        return drill.tier or self.namespace_tier(drill.site, drill.namespace)


__all__ = [
    "BackupSchedule",
    "DrConfig",
    "DrillSpec",
    "HealthQueries",
    "LeaseSettings",
    "PlacedService",
    "PlacementConfig",
    "RecoveryTier",
    "ResourceCheck",
    "cron_trigger",
]
