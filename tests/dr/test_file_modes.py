"""The DR daemon's files are private: the SQLite job store and the placement state."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from gotthard.dr.daemon import DrDaemon
from gotthard.dr.placement import SiteHealth

from .conftest import GOOD, make_config


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_sqlite_jobstore_is_created_0600_and_a_loose_one_tightened(k8s, tmp_path) -> None:
    cfg = make_config(tmp_path)
    apis = {"zurich": k8s.api(), "lugano": k8s.api()}
    old = os.umask(0o022)
    try:
        daemon = DrDaemon(cfg, api_clients=apis, identity="a")
        sched = daemon.start_scheduler()
        assert len(sched.get_jobs()) == 5  # the store is a working database
        daemon.stop_scheduler()
    finally:
        os.umask(old)
    store = tmp_path / "jobs.sqlite"
    assert _mode(store) == 0o600
    assert _mode(tmp_path / "jobs.sqlite.lock") == 0o600

    store.chmod(0o644)
    again = DrDaemon(cfg, api_clients=apis, identity="a")
    assert len(again.start_scheduler().get_jobs()) == 5  # jobs kept
    again.stop_scheduler()
    assert _mode(store) == 0o600


def test_placement_state_is_written_0600(k8s, tmp_path) -> None:
    service = {
        "name": "api",
        "primary_site": "zurich",
        "namespace": "prod",
        "resources": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"}],
    }
    cfg = make_config(
        tmp_path, placement={"services": [service], "state_file": f"{tmp_path}/placement.json"}
    )
    state_file = tmp_path / "placement.json"
    state_file.write_text("{}")
    state_file.chmod(0o644)  # an older state file, readable by everyone
    daemon = DrDaemon(
        cfg,
        karmada_api=k8s.api(),
        identity="a",
        health_source=lambda site: SiteHealth(site, **GOOD),
    )
    old = os.umask(0o022)
    try:
        decisions = daemon.evaluate_placement(apply=True)
    finally:
        os.umask(old)
    assert [d.site for d in decisions] == ["zurich"]
    assert _mode(state_file) == 0o600
    assert json.loads(state_file.read_text())["api"]["site"] == "zurich"
    assert not Path(f"{state_file}.tmp").exists()
