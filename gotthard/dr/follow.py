"""Following the Backups that the scheduled backup jobs create.

A backup job only creates its slot's Backup and returns. Waiting for the Backup in the
job would hold one of the scheduler's worker threads (10) for the whole backup, minutes
to hours, while Velero works through its Backups one after another. With many
schedules due together, the runs would queue behind each other, the later ones would
create their Backups hours late, and a run queued past ``misfire_grace_seconds`` would
be counted missed and never run. Velero's own Schedule controller works the same way:
it creates, and the outcome is observed.

:class:`BackupFollower` keeps, per site, the Backups created and not yet finished. Each
site's ``follow:`` job (every ``follow_interval_seconds``) reads them with one LIST of
the Backups Gotthard made, while any is unfinished, and records each one's outcome once
(:func:`gotthard.dr.ops.record_backup`): the counter by phase, the duration, the last
success or failure, the RPO. A Backup still unfinished (or not found) after
``backup_timeout_seconds`` is recorded as ``Timeout``.

When a replica takes the lead, its first round adopts the unfinished Backups of the
configured schedules that a former leader (or this one, before a restart) created: they
are followed to their end as well. Backups that had already finished are not counted
again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from gotthard.dr import ops
from gotthard.dr import velero as v

__all__ = ["BackupFollower"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Followed:
    schedule: str
    #: When the Backup was created (or found), for the timeout.
    since: float


class BackupFollower:
    """The unfinished Backups of each site, and the round that records their outcomes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, dict[str, _Followed]] = {}
        self._adopted: set[str] = set()

    def reset(self) -> None:
        """Forget everything: the next round of each site adopts what is unfinished."""
        with self._lock:
            self._pending.clear()
            self._adopted.clear()

    def track(self, site: str, name: str, schedule: str, since: float) -> None:
        """Follow the Backup *name* of *schedule* at *site*, created at *since*."""
        with self._lock:
            self._pending.setdefault(site, {}).setdefault(name, _Followed(schedule, since))

    def poll(
        self, ctx: ops.Context, site: str, schedules: Collection[str]
    ) -> dict[str, v.Outcome | None]:
        """One round at *site*: record the outcome of each followed Backup that finished
        (None for one that timed out) and return them by name. *schedules* are the names
        of the schedules whose unfinished Backups a first round adopts. No API call while
        nothing is followed."""
        with self._lock:
            adopt = site not in self._adopted
            if not adopt and not self._pending.get(site):
                ctx.metrics.backups_in_progress.labels(site).set(0)
                return {}
        items = ctx.velero(site).list("backups", {v.LABEL_MANAGED: "gotthard"})
        now = ctx.clock()
        seen = {(item.get("metadata") or {}).get("name"): item for item in items}
        finished: dict[str, tuple[str, v.Outcome | None]] = {}
        with self._lock:
            pending = self._pending.setdefault(site, {})
            if adopt:
                self._adopt(pending, items, schedules, now)
                self._adopted.add(site)
            for name, followed in list(pending.items()):
                obj = seen.get(name)
                if obj is not None and v.phase_of(obj) in v.TERMINAL_PHASES:
                    finished[name] = (followed.schedule, v.outcome_of(obj))
                elif now - followed.since >= ctx.settings.backup_timeout_seconds:
                    finished[name] = (followed.schedule, None)
                else:
                    continue
                del pending[name]
            left = len(pending)
        for name, (schedule, outcome) in finished.items():
            if outcome is None:
                log.warning("backup %s on %s: unfinished after its timeout", name, site)
                ops.record_backup_timeout(ctx, site, schedule)
                continue
            if not outcome.usable:
                log.warning("backup %s on %s ended %s", name, site, outcome.detail)
            ops.record_backup(ctx, site, schedule, outcome)
        ctx.metrics.backups_in_progress.labels(site).set(left)
        return {name: outcome for name, (_, outcome) in finished.items()}

    @staticmethod
    def _adopt(
        pending: dict[str, _Followed],
        items: list[dict[str, Any]],
        schedules: Collection[str],
        now: float,
    ) -> None:
        for item in items:
            meta = item.get("metadata") or {}
            schedule = (meta.get("labels") or {}).get(v.LABEL_SCHEDULE)
            if schedule not in schedules or v.phase_of(item) in v.TERMINAL_PHASES:
                continue
            created = v.parse_time(meta.get("creationTimestamp"))
            pending.setdefault(meta["name"], _Followed(schedule, created or now))
