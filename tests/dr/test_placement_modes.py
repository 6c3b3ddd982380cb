"""Placement modes: failover (active-passive) and spread (active-active), their
hysteresis, the state file, and the PropagationPolicies they produce."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gotthard.config import Config
from gotthard.dr.placement import (
    Decision,
    ServiceState,
    SiteHealth,
    decide,
    load_state,
    propagation_policy,
    save_state,
)
from gotthard_testing.resources import CRD_DIR

from .conftest import GOOD, make_config

CRD = CRD_DIR / "policy.karmada.io_propagationpolicies.yaml"
INTERVAL = 60.0
BAD = dict(GOOD, slurm_up=False)
#: Zurich's Prometheus cannot be reached (or has no gotthard_slurm_up): no evidence either way.
UNKNOWN = dict(GOOD, slurm_up=None)


def placed_config(
    tmp_path: Path, mode: str, *, failover_after: int = 3, cooldown: float = 600.0
) -> Config:
    """Two sites, zurich with two member clusters and lugano with one, and one service
    ``api`` (primary zurich) placed in *mode*."""
    service = {
        "name": "api",
        "namespace": "prod",
        "primary_site": "zurich",
        "mode": mode,
        "resources": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"}],
    }
    return make_config(
        tmp_path,
        sites={
            "zurich": {
                "clusters": {"zrh": {"kubernetes": {}, "karmada_members": ["zrh-a", "zrh-b"]}}
            },
            "lugano": {"clusters": {"lug": {"kubernetes": {}, "karmada_members": ["lug-a"]}}},
        },
        placement={
            "services": [service],
            "failover_after": failover_after,
            "failback_cooldown_seconds": cooldown,
            "state_file": str(tmp_path / "placement.json"),
        },
    )


def health(zurich: bool | None, lugano: bool | None = True) -> dict[str, SiteHealth]:
    """Each site healthy (True), failing on evidence (False) or without data (None)."""
    signals = {True: GOOD, False: BAD, None: UNKNOWN}
    return {
        site: SiteHealth(site, **signals[ok])
        for site, ok in (("zurich", zurich), ("lugano", lugano))
    }


class Run:
    """Evaluations of one configuration, one :data:`INTERVAL` apart."""

    def __init__(self, config: Config, state: Mapping[str, ServiceState] | None = None) -> None:
        self.config = config
        self.state: dict[str, ServiceState] = dict(state or {})
        self.now = 0.0
        self.decisions: list[Decision] = []

    def step(self, zurich: bool | None, lugano: bool | None = True) -> Decision:
        p = self.config.dr.placement
        self.state, decisions = decide(p.services, health(zurich, lugano), self.state, self.now, p)
        self.now += INTERVAL
        self.decisions.append(decisions[0])
        return decisions[0]

    def steps(
        self, rounds: Iterable[bool | tuple[bool | None, bool | None] | None]
    ) -> list[tuple[str, ...]]:
        placed = []
        for r in rounds:
            z, lu = r if isinstance(r, tuple) else (r, True)
            placed.append(self.step(z, lu).placed)
        return placed

    @property
    def moves(self) -> int:
        return sum(d.changed for d in self.decisions)


BOTH, ZURICH, LUGANO = ("lugano", "zurich"), ("zurich",), ("lugano",)


# -- spread ---------------------------------------------------------------------------


def test_spread_degrades_after_failover_after_and_restores_after_the_cooldown(
    tmp_path: Path,
) -> None:
    run = Run(placed_config(tmp_path, "spread", failover_after=3, cooldown=300))
    assert run.steps([True]) == [BOTH] and not run.decisions[0].changed
    # zurich lost: it stays in the set for two bad evaluations, leaves on the third
    assert run.steps([False] * 4) == [BOTH, BOTH, LUGANO, LUGANO]
    left = run.decisions[3]
    assert left.changed and left.reason == "zurich left: unhealthy for 3 evaluations"
    assert run.state["api"].moved_at == 3 * INTERVAL
    # zurich back: it rejoins once healthy without a break for the cool-down (5 x 60 s)
    back = run.steps([True] * 7)
    assert back == [LUGANO] * 5 + [BOTH] * 2
    assert run.decisions[-2].reason == "zurich rejoined: healthy for 300s"
    assert "cool-down 240/300s" in run.decisions[-3].reason


def test_spread_rejoin_needs_unbroken_health(tmp_path: Path) -> None:
    run = Run(placed_config(tmp_path, "spread", failover_after=2, cooldown=180))
    run.steps([False, False])
    assert run.state["api"].placed == LUGANO
    moved_at = run.state["api"].moved_at
    # healthy twice, one bad evaluation (not enough to matter for a site outside the
    # set), then healthy: the cool-down counts from the last good streak's start only
    assert run.steps([True, True, False, True, True, True, True]) == [LUGANO] * 6 + [BOTH]
    assert run.state["api"].moved_at == run.now - INTERVAL
    assert moved_at is not None and moved_at < run.state["api"].moved_at


def test_spread_never_gives_up_the_last_healthy_site(tmp_path: Path) -> None:
    run = Run(placed_config(tmp_path, "spread", failover_after=2))
    # both bad: zurich reaches its limit first, but lugano is not healthy either
    placed = run.steps([(False, True), (False, False), (False, False), (False, False)])
    assert placed == [BOTH, BOTH, BOTH, BOTH]
    assert run.decisions[-1].reason == "no healthy site: stays on lugano, zurich"
    assert run.moves == 0


def test_spread_takes_a_healthy_site_at_once_when_the_set_has_none_left(
    tmp_path: Path,
) -> None:
    run = Run(placed_config(tmp_path, "spread", failover_after=2, cooldown=3600))
    run.steps([False, False])  # zurich leaves
    # zurich healthy again but within its cool-down, then lugano is lost: zurich takes
    # the service at once rather than leave it on no healthy site
    placed = run.steps([(True, False), (True, False)])
    assert placed == [LUGANO, ZURICH]
    assert run.decisions[-1].reason.startswith("lugano left, zurich joined")


def test_override_wins_in_spread_mode(tmp_path: Path) -> None:
    config = placed_config(tmp_path, "spread")
    config.dr.placement.overrides["api"] = "lugano"
    decision = Run(config).step(True)
    assert decision.placed == LUGANO and decision.reason == "manual override"


# -- failover ---------------------------------------------------------------------------


def test_failback_needs_the_primary_healthy_without_a_break(tmp_path: Path) -> None:
    run = Run(placed_config(tmp_path, "failover", failover_after=2, cooldown=180))
    assert run.steps([False, False]) == [ZURICH, LUGANO]
    moved_at = run.state["api"].moved_at
    # zurich: good, good, bad, then good: a bad evaluation restarts the primary's clock;
    # the bad one does not count towards a failover back either (lugano is healthy)
    placed = run.steps([True, True, False, True, True, True, True])
    assert placed == [LUGANO] * 6 + [ZURICH]
    assert run.decisions[-1].reason == "failback to primary"
    # the move away was never reset by the healthy evaluations in between
    assert [d.changed for d in run.decisions].count(True) == 2
    assert moved_at == INTERVAL


def test_a_single_good_evaluation_mid_outage_keeps_the_time_of_the_move(tmp_path: Path) -> None:
    for mode in ("failover", "spread"):
        run = Run(placed_config(tmp_path, mode, failover_after=2, cooldown=600))
        run.steps([False, False])
        moved_at = run.state["api"].moved_at
        run.steps([False, True, False, False])
        assert run.state["api"].placed == LUGANO, mode
        assert run.state["api"].moved_at == moved_at, mode


# -- anti-flap ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["failover", "spread"])
@pytest.mark.parametrize("start", ["home", "moved"])
def test_alternating_health_for_100_evaluations_never_moves(
    tmp_path: Path, mode: str, start: str
) -> None:
    """A signal alternating every evaluation neither moves a service away (the bad
    streak resets) nor back (the cool-down needs unbroken health)."""
    run = Run(placed_config(tmp_path, mode, failover_after=2, cooldown=2 * INTERVAL))
    if start == "moved":
        run.steps([False, False])
        run.decisions.clear()
    before = run.state.get("api")
    run.steps([i % 2 == 1 for i in range(100)])
    assert run.moves == 0, [d.reason for d in run.decisions if d.changed]
    if before is not None:
        assert run.state["api"].placed == before.placed
        assert run.state["api"].moved_at == before.moved_at


@settings(max_examples=60, deadline=None)
@given(
    mode=st.sampled_from(["failover", "spread"]),
    failover_after=st.integers(2, 6),
    cooldown_intervals=st.integers(2, 10),
    bad_first=st.booleans(),
    outage_first=st.booleans(),
    flapping=st.sampled_from(["zurich", "lugano"]),
)
def test_property_alternating_health_never_moves(
    tmp_path_factory: pytest.TempPathFactory,
    mode: str,
    failover_after: int,
    cooldown_intervals: int,
    bad_first: bool,
    outage_first: bool,
    flapping: str,
) -> None:
    tmp = tmp_path_factory.mktemp("flap")
    config = placed_config(
        tmp, mode, failover_after=failover_after, cooldown=cooldown_intervals * INTERVAL
    )
    run = Run(config)
    if outage_first:  # start from a failover/degraded placement
        run.steps([False] * failover_after)
        run.decisions.clear()
    for i in range(100):
        up = (i % 2 == 1) == bad_first
        run.step(*((up, True) if flapping == "zurich" else (not outage_first, up)))
    assert run.moves == 0


# -- state file -----------------------------------------------------------------------------


def test_an_old_state_file_loads_and_keeps_its_cooldown(tmp_path: Path) -> None:
    path = tmp_path / "placement.json"
    path.write_text(json.dumps({"api": {"bad_streak": 0, "moved_at": 1000.0, "site": "lugano"}}))
    state = load_state(str(path))
    assert state == {"api": ServiceState("lugano", 0, 1000.0)}
    p = placed_config(tmp_path, "failover", cooldown=600).dr.placement
    # no health history: the primary's health counts from the move, as before
    state, d = decide(p.services, health(True), state, 1300.0, p)
    assert d[0].site == "lugano" and "cool-down 300/600s" in d[0].reason
    _, d = decide(p.services, health(True), state, 1600.0, p)
    assert d[0].site == "zurich" and d[0].changed


def test_state_round_trips_through_the_file(tmp_path: Path) -> None:
    run = Run(placed_config(tmp_path, "spread", failover_after=2))
    run.steps([False, False, True])
    path = str(tmp_path / "state.json")
    save_state(path, run.state)
    assert load_state(path) == run.state
    assert json.loads(Path(path).read_text())["api"]["sites"] == ["lugano"]
    # unknown keys (a newer version's) are ignored; garbage is no state at all
    Path(path).write_text(json.dumps({"api": {"site": "zurich", "future": 1}}))
    assert load_state(path) == {"api": ServiceState("zurich")}
    Path(path).write_text("[1, 2]")
    assert load_state(path) == {}


# -- PropagationPolicy -------------------------------------------------------------------------


def _crd_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text(encoding="utf-8"))
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1")
    return version["schema"]["openAPIV3Schema"]


def _undeclared(obj: Any, schema: Mapping[str, Any], where: str = "") -> list[str]:
    """Fields of *obj* its structural schema does not declare (the API server would prune
    them silently, so a typo would go unnoticed)."""
    found = []
    if isinstance(obj, dict) and "properties" in schema:
        for key, value in obj.items():
            if key not in schema["properties"]:
                found.append(f"{where}.{key}")
            else:
                found += _undeclared(value, schema["properties"][key], f"{where}.{key}")
    elif isinstance(obj, list) and "items" in schema:
        for i, item in enumerate(obj):
            found += _undeclared(item, schema["items"], f"{where}[{i}]")
    return found


def _check_against_crd(policy: dict[str, Any]) -> None:
    schema = _crd_schema()
    jsonschema.validators.validator_for(schema)(schema).validate(policy)
    assert _undeclared(policy["spec"], schema["properties"]["spec"]) == []


@pytest.mark.parametrize(
    ("mode", "sites", "clusters", "spread"),
    [
        ("spread", BOTH, ["lug-a", "zrh-a", "zrh-b"], (3, 3)),
        ("spread", LUGANO, ["lug-a"], (1, 1)),
        ("spread", ZURICH, ["zrh-a", "zrh-b"], (2, 2)),
        ("failover", ZURICH, ["zrh-a", "zrh-b"], (1, 2)),
        ("failover", LUGANO, ["lug-a"], (1, 1)),
    ],
)
def test_policies_match_the_karmada_crd(
    tmp_path: Path, mode: str, sites: tuple[str, ...], clusters: list[str], spread: tuple[int, int]
) -> None:
    config = placed_config(tmp_path, mode)
    policy = propagation_policy(config.site_model, config.dr.placement.services[0], *sites)
    _check_against_crd(policy)
    placement = policy["spec"]["placement"]
    assert placement["clusterAffinity"] == {"clusterNames": clusters}
    assert placement["spreadConstraints"] == [
        {"spreadByField": "cluster", "minGroups": spread[0], "maxGroups": spread[1]}
    ]
    if mode == "spread":
        assert placement["replicaScheduling"] == {
            "replicaSchedulingType": "Divided",
            "replicaDivisionPreference": "Weighted",
        }
    else:
        assert "replicaScheduling" not in placement
    labels = policy["metadata"]["labels"]
    assert labels["gotthard.io/placement-mode"] == mode
    assert labels.get("gotthard.io/site") == (sites[0] if len(sites) == 1 else None)
    assert policy["metadata"]["annotations"] == {"gotthard.io/sites": ",".join(sites)}


def test_the_crd_check_catches_a_misspelt_field(tmp_path: Path) -> None:
    config = placed_config(tmp_path, "spread")
    policy = propagation_policy(config.site_model, config.dr.placement.services[0], *BOTH)
    policy["spec"]["placement"]["replicaScheduling"]["replicaSchedulingType"] = "Split"
    with pytest.raises(jsonschema.ValidationError):
        _check_against_crd(policy)
    policy = propagation_policy(config.site_model, config.dr.placement.services[0], *BOTH)
    policy["spec"]["placement"]["spreadConstraint"] = []
    with pytest.raises(AssertionError):
        _check_against_crd(policy)


# -- positive evidence only -----------------------------------------------------------


def test_a_site_without_data_is_unknown_not_unhealthy() -> None:
    """An unreachable Prometheus or an empty answer is no evidence; a 0 is."""
    from gotthard.dr.placement import site_health
    from gotthard.dr.settings import HealthQueries

    def answers(values: Mapping[str, float | None]) -> SiteHealth:
        return site_health("zurich", "http://prom", HealthQueries(), lambda _u, e: values.get(e))

    queries = HealthQueries()
    every = [queries.api_up, queries.ingress_up, queries.gpu_capacity, queries.slurm_up]
    drill = queries.drill_ok.replace("$site", "zurich")
    good = {expr: 1.0 for expr in [*every, drill]}
    assert answers(good).state() == "healthy"
    assert answers({}).state() == "unknown"
    assert answers(dict(good, **{queries.slurm_up: None})).state() == "unknown"
    assert answers(dict(good, **{queries.slurm_up: 0.0})).state() == "unhealthy"
    # evidence of a failure wins over another signal's missing data
    assert answers({queries.api_up: 0.0}).state() == "unhealthy"
    assert site_health("zurich", "", queries).state() == "unknown"


@pytest.mark.parametrize("mode", ["failover", "spread"])
def test_no_data_never_moves_a_service_and_evidence_still_does(tmp_path: Path, mode: str) -> None:
    """Zurich's data missing for ten evaluations (its Prometheus restarting, a gap): the
    service stays; a real failure (gotthard_slurm_up 0) still moves it after failover_after."""
    run = Run(placed_config(tmp_path, mode, failover_after=3, cooldown=300))
    home = ZURICH if mode == "failover" else BOTH
    assert run.steps([None] * 10) == [home] * 10 and run.moves == 0
    assert "unknown" in run.decisions[-1].reason
    assert run.steps([False] * 3)[-1] == LUGANO


def test_unknown_interrupts_neither_a_bad_streak_nor_counts_as_health(tmp_path: Path) -> None:
    """Gaps between bad evaluations neither reset the streak nor add to it; a failback
    needs the cool-down of evidence of health, which no data does not give."""
    run = Run(placed_config(tmp_path, "failover", failover_after=3, cooldown=120))
    assert run.steps([False, None, False, None])[-1] == ZURICH
    assert run.step(False).placed == LUGANO
    # 10 minutes without data from Zurich: no failback
    assert run.steps([None] * 10)[-1] == LUGANO
    assert run.steps([True] * 4)[-1] == ZURICH


def test_no_fallback_to_a_site_without_data(tmp_path: Path) -> None:
    """Zurich fails on evidence while Lugano has no data: nowhere known-good to go."""
    run = Run(placed_config(tmp_path, "failover", failover_after=2))
    assert run.steps([(False, None)] * 4)[-1] == ZURICH
    assert "no healthy fallback" in run.decisions[-1].reason
