"""Fixtures: one emulated API server per test, the simulated Velero, fast settings."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gotthard.config import Config, from_mapping
from tests.support.kube import EmulatorThread

from .emulator import SimulatedVeleroController, dr_resources

#: A healthy site: the fields of :class:`~gotthard.dr.placement.SiteHealth` but its name.
GOOD = dict(api_up=True, ingress_up=True, gpu_capacity=8, slurm_up=True, drill_ok=True)


@pytest.fixture
def k8s(kube_emulator: Callable[..., EmulatorThread]) -> EmulatorThread:
    return kube_emulator(*dr_resources())


@pytest.fixture
def velero(k8s: EmulatorThread) -> Iterator[SimulatedVeleroController]:
    ctl = SimulatedVeleroController(k8s.api()).start()
    try:
        yield ctl
    finally:
        ctl.stop()


def make_config(
    tmp_path: Path, *, sites: dict[str, object] | None = None, **overrides: object
) -> Config:
    """The site model (*sites*, default Zurich and Lugano with one Kubernetes cluster
    each; the installation at Zurich) and fast ``[dr]`` settings; *overrides* replace
    keys of ``[dr]``."""
    dr: dict[str, object] = {
        "jobstore_url": f"sqlite:///{tmp_path}/jobs.sqlite",
        "poll_interval_seconds": 0.02,
        "follow_interval_seconds": 0.05,
        "api_backoff_seconds": 0.01,
        "api_backoff_max_seconds": 0.05,
        "api_timeout_seconds": 2,
        "backup_timeout_seconds": 5,
        "restore_timeout_seconds": 5,
        "schedules": [
            {"name": "daily", "namespaces": ["prod"], "cron": "0 2 * * *", "sites": ["zurich"]}
        ],
        "drills": [{"site": "zurich", "namespace": "prod"}],
        "placement": {"state_file": f"{tmp_path}/placement.json"},
    }
    dr.update(overrides)
    sites = sites or {
        "zurich": {"clusters": {"zrh": {"kubernetes": {}, "karmada_members": ["zrh-a"]}}},
        "lugano": {"clusters": {"lug": {"kubernetes": {}, "karmada_members": ["lug-a"]}}},
    }
    return from_mapping({"site": "zurich", "cluster": "zrh", "sites": sites, "dr": dr})


def with_dr(cfg: Config, **updates: object) -> Config:
    """*cfg* with keys of ``[dr]`` replaced (not validated again)."""
    return cfg.model_copy(update={"dr": cfg.dr.model_copy(update=updates)})


@pytest.fixture
def cfg(tmp_path: Path) -> Config:
    return make_config(tmp_path)
