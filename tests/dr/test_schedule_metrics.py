"""Each backup schedule's and drill's period and load time, for the alerts that judge a
backup or drill late against its own cron (also when it never succeeded)."""

from __future__ import annotations

from pathlib import Path

from gotthard.dr.daemon import DrDaemon
from gotthard.dr.metrics import cron_period_seconds

from .conftest import make_config
from .test_velero_drill import samples


def _samples(daemon: DrDaemon, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples of metric *name*: sorted labels -> value."""
    return {labels: value for (n, labels), value in samples(daemon.ctx).items() if n == name}


def test_the_period_is_the_longest_gap_of_the_cron() -> None:
    assert cron_period_seconds("0 2 * * *") == 86400
    assert cron_period_seconds("*/15 * * * *") == 900
    # weekdays only: Friday to Monday is the longest gap
    assert cron_period_seconds("0 2 * * 1-5") == 3 * 86400
    # crontab Sunday (0) once a week
    assert cron_period_seconds("0 4 * * 0") == 7 * 86400


def test_the_daemon_exports_periods_and_load_times_before_any_success(tmp_path: Path) -> None:
    cfg = make_config(
        tmp_path,
        schedules=[
            {"name": "daily", "namespaces": ["prod", "web"], "cron": "0 2 * * *"},
            {"name": "hourly", "namespaces": ["ci"], "cron": "0 * * * *", "sites": ["lugano"]},
        ],
        drills=[{"site": "zurich", "namespace": "prod", "cron": "0 4 * * 0"}],
    )
    daemon = DrDaemon(cfg, identity="a", clock=lambda: 1_700_000_000.0)
    periods = _samples(daemon, "gotthard_dr_schedule_period_seconds")
    assert periods == {
        (("namespace", ns), ("schedule", "daily"), ("site", site)): 86400.0
        for site in ("lugano", "zurich")
        for ns in ("prod", "web")
    } | {(("namespace", "ci"), ("schedule", "hourly"), ("site", "lugano")): 3600.0}
    loaded = _samples(daemon, "gotthard_dr_schedule_loaded_timestamp_seconds")
    assert set(loaded.values()) == {1_700_000_000.0}
    assert len(loaded) == 3
    assert _samples(daemon, "gotthard_dr_drill_period_seconds") == {
        (("namespace", "prod"), ("site", "zurich")): 604800.0
    }
    assert _samples(daemon, "gotthard_dr_drill_loaded_timestamp_seconds") == {
        (("namespace", "prod"), ("site", "zurich")): 1_700_000_000.0
    }
    # no success yet: the last-success series the alert falls back from is absent
    assert _samples(daemon, "gotthard_dr_backup_last_success_timestamp_seconds") == {}
