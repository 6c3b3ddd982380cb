"""Zurich/Lugano placement: health in, placement out, Karmada PropagationPolicy applied.

:func:`decide` is a pure function of typed health inputs, the previous per-service
state and the clock. Each placed service has a mode:

* ``failover`` (active-passive): the service runs on one site, its primary while that is
  healthy. ``failover_after`` consecutive bad evaluations of the current site move it to
  a healthy one (one blip never moves a service); it fails back once it has spent the
  cool-down on the fallback and the primary has been healthy, without a break, for the
  cool-down.
* ``spread`` (active-active): the service runs on every healthy site, its replicas
  divided among their member clusters. A site leaves after ``failover_after`` bad
  evaluations (never the last healthy one) and rejoins after the cool-down of unbroken
  health.

A manual override always wins.

Output is a Karmada ``policy.karmada.io/v1alpha1`` PropagationPolicy per service:
``multicluster.x-k8s.io`` has no PlacementPolicy kind (SIG-Multicluster only defines
ServiceExport/ServiceImport and ClusterProfile there), KubeFed is archived, and OCM's
Placement has no min/max group counts; Karmada is a real, maintained API with
clusterAffinity and spreadConstraints. It is written with get and replace carrying the
resourceVersion, so a placement never overwrites a change it has not seen, and fields
that a placement no longer sets are removed (a merge patch would keep them).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from kubernetes import client

from gotthard.dr.settings import HealthQueries, PlacedService, PlacementConfig
from gotthard.files import write_private_atomically
from gotthard.kube import CustomObjects, KubeError, Retry
from gotthard.prometheus import Prometheus, PrometheusError
from gotthard.site import SiteConfig

KARMADA_GROUP, KARMADA_VERSION = "policy.karmada.io", "v1alpha1"
#: PropagationPolicy's plural, and its name in retry logs and metrics.
_PLURAL, _KIND = "propagationpolicies", "propagationpolicy"


#: What one evaluation knows of a site: ``healthy`` (every signal answered and good),
#: ``unhealthy`` (a signal answered and is bad: positive evidence) or ``unknown`` (no
#: signal is bad, but one did not answer: its Prometheus is unreachable or has no data).
HealthState = Literal["healthy", "unhealthy", "unknown"]


@dataclass(frozen=True)
class SiteHealth:
    """A site's signals; ``None`` where the query had no answer (unreachable Prometheus,
    empty result): absence of data is a monitoring problem, not a failed site."""

    site: str
    api_up: bool | None
    ingress_up: bool | None
    gpu_capacity: float | None
    slurm_up: bool | None
    drill_ok: bool | None

    def state(self, min_gpu_capacity: float = 0.0) -> HealthState:
        """``unhealthy`` only on positive evidence: a signal that answered bad."""
        capacity = None if self.gpu_capacity is None else self.gpu_capacity >= min_gpu_capacity
        signals = (self.api_up, self.ingress_up, self.slurm_up, self.drill_ok, capacity)
        if any(signal is False for signal in signals):
            return "unhealthy"
        if any(signal is None for signal in signals):
            return "unknown"
        return "healthy"

    def healthy(self, min_gpu_capacity: float = 0.0) -> bool:
        return self.state(min_gpu_capacity) == "healthy"


#: How a service is placed: on one site at a time, or over every healthy site.
Mode = Literal["failover", "spread"]


@dataclass(frozen=True)
class ServiceState:
    """What the controller remembers per service between evaluations.

    A state file of an older version has only ``site``, ``bad_streak`` and ``moved_at``;
    it loads with no per-site history, and a site's health is then counted from the last
    move, as that version did."""

    site: str
    #: Consecutive bad evaluations of ``site``.
    bad_streak: int = 0
    #: When the placement last changed (Unix seconds).
    moved_at: float | None = None
    #: spread mode: the sites the service runs on; empty in failover mode (``site`` only).
    sites: tuple[str, ...] = ()
    #: Consecutive bad evaluations, per site.
    bad_streaks: Mapping[str, int] = field(default_factory=dict)
    #: Per site, since when it has been healthy without a break; None: bad at the last
    #: evaluation. Failback and rejoining need this continuous health for the cool-down.
    healthy_since: Mapping[str, float | None] = field(default_factory=dict)

    @property
    def placed(self) -> tuple[str, ...]:
        """The sites the service runs on."""
        return self.sites or (self.site,)


@dataclass(frozen=True)
class Decision:
    service: str
    site: str
    previous: str
    reason: str
    mode: Mode = "failover"
    #: spread mode: the sites the service runs on, and ran on before.
    sites: tuple[str, ...] = ()
    previous_sites: tuple[str, ...] = ()

    @property
    def placed(self) -> tuple[str, ...]:
        return self.sites or (self.site,)

    @property
    def changed(self) -> bool:
        return self.placed != (self.previous_sites or (self.previous,))


@dataclass(frozen=True)
class _Health:
    """One evaluation's view of the sites: their states, bad streaks, continuous health."""

    states: Mapping[str, HealthState]
    streaks: Mapping[str, int]
    since: Mapping[str, float | None]
    now: float

    def healthy_for(self, site: str) -> float:
        """Seconds *site* has been healthy without a break (-1: not healthy now)."""
        since = self.since.get(site)
        return -1.0 if since is None else self.now - since

    def bad(self, site: str) -> bool:
        """Positive evidence that *site* fails (a site no longer configured is bad)."""
        return self.states.get(site, "unhealthy") == "unhealthy"

    def good(self, site: str) -> bool:
        return self.states.get(site) == "healthy"

    def unknown(self, site: str) -> bool:
        return self.states.get(site) == "unknown"

    @property
    def sites(self) -> list[str]:
        return sorted(self.states)


def _observe(prev: ServiceState, states: Mapping[str, HealthState], now: float) -> _Health:
    """Advance *prev*'s per-site history by one evaluation: a bad evaluation adds to the
    site's streak and ends its healthy period; a good one resets the streak; an unknown
    one (no data) neither adds to the streak nor counts as health."""
    streaks: dict[str, int] = {}
    since: dict[str, float | None] = {}
    for site in sorted({*states, *prev.placed}):
        state = states.get(site, "unhealthy")
        default = prev.bad_streak if site == prev.site else 0
        streak = prev.bad_streaks.get(site, default)
        if state == "healthy":
            streaks[site] = 0
            if site in prev.healthy_since:
                last = prev.healthy_since[site]
                since[site] = now if last is None else last
            else:  # no history (an older state file): healthy since the last move
                since[site] = now if prev.moved_at is None else min(prev.moved_at, now)
        else:
            streaks[site] = streak + 1 if state == "unhealthy" else streak
            since[site] = None
    return _Health(states, streaks, since, now)


def _failover(
    svc: PlacedService, prev: ServiceState, h: _Health, policy: PlacementConfig
) -> tuple[str, str]:
    """Active-passive: the site the service runs on next, and why."""
    site = prev.site
    fallback = next((s for s in h.sites if s != site and h.good(s)), None)
    if h.unknown(site):
        return site, f"{site} health unknown (no data): stays"
    if h.bad(site):
        streak = h.streaks[site]
        if streak >= policy.failover_after and fallback is not None:
            return fallback, f"failover: {site} unhealthy for {streak} evaluations"
        return site, f"{site} unhealthy ({streak}/{policy.failover_after})" + (
            "" if fallback else ", no healthy fallback"
        )
    primary = svc.primary_site
    if site != primary and h.good(primary):
        # on the fallback for the cool-down, and the primary healthy all that time
        away = h.now - prev.moved_at if prev.moved_at is not None else 0.0
        since = min(away, h.healthy_for(primary))
        cool = policy.failback_cooldown_seconds
        if since >= cool:
            return primary, "failback to primary"
        return site, f"primary healthy, cool-down {since:.0f}/{cool:.0f}s"
    return site, "healthy"


def _spread(prev: ServiceState, h: _Health, policy: PlacementConfig) -> tuple[tuple[str, ...], str]:
    """Active-active: the sites the service runs on next, and why."""
    everywhere = h.sites
    current = list(prev.sites or everywhere)
    notes: list[str] = []
    leaving = [s for s in current if h.bad(s) and h.streaks[s] >= policy.failover_after]
    staying = [s for s in current if s not in leaving]
    if leaving:
        spare = [s for s in everywhere if s not in current and h.good(s)]
        if any(h.good(s) for s in staying):
            current = staying
            notes.append(
                f"{', '.join(leaving)} left: unhealthy for {policy.failover_after} evaluations"
            )
        elif spare:
            # the last healthy sites are outside the set: they take over at once, as a
            # failover target does
            current = staying + spare
            notes.append(f"{', '.join(leaving)} left, {', '.join(spare)} joined: no other healthy")
        else:
            notes.append(f"no healthy site: stays on {', '.join(current)}")
    cool = policy.failback_cooldown_seconds
    for site in everywhere:
        if site in current or not h.good(site):
            continue
        if h.healthy_for(site) >= cool:
            current.append(site)
            notes.append(f"{site} rejoined: healthy for {h.healthy_for(site):.0f}s")
        else:
            notes.append(f"{site} healthy, cool-down {h.healthy_for(site):.0f}/{cool:.0f}s")
    for site in current:
        if h.bad(site) and site not in leaving:
            notes.append(f"{site} unhealthy ({h.streaks[site]}/{policy.failover_after})")
        elif h.unknown(site):
            notes.append(f"{site} health unknown (no data): stays")
    return tuple(sorted(set(current))), "; ".join(notes) or "healthy"


def decide(
    services: list[PlacedService],
    health: Mapping[str, SiteHealth],
    state: Mapping[str, ServiceState],
    now: float,
    policy: PlacementConfig,
) -> tuple[dict[str, ServiceState], list[Decision]]:
    """One evaluation: new per-service state and one decision per service.

    Hysteresis for both modes: a site is given up only after ``failover_after``
    consecutive bad evaluations (a good one resets the count), and taken back only after
    ``failback_cooldown_seconds`` of unbroken health, so a signal that alternates every
    evaluation never moves a service. A manual override always wins."""
    states = {site: h.state(policy.min_gpu_capacity) for site, h in health.items()}
    new_state: dict[str, ServiceState] = {}
    decisions: list[Decision] = []
    for svc in services:
        spread = svc.mode == "spread"
        fresh = ServiceState(svc.primary_site, sites=tuple(sorted(states)) if spread else ())
        prev = state.get(svc.name) or fresh
        h = _observe(prev, states, now)
        override = policy.overrides.get(svc.name)
        sites: tuple[str, ...]
        if override:
            sites, reason = (override,), "manual override"
        elif spread:
            sites, reason = _spread(prev, h, policy)
        else:
            site, reason = _failover(svc, prev, h, policy)
            sites = (site,)
        sites = sites or prev.placed  # no site configured at all: nothing to decide
        site = svc.primary_site if svc.primary_site in sites else sites[0]
        cur = ServiceState(
            site=site,
            bad_streak=h.streaks.get(site, 0),
            moved_at=prev.moved_at if sites == prev.placed else now,
            sites=sites if spread else (),
            bad_streaks=h.streaks,
            healthy_since=h.since,
        )
        new_state[svc.name] = cur
        decisions.append(
            Decision(svc.name, cur.site, prev.site, reason, svc.mode, cur.sites, prev.sites)
        )
    return new_state, decisions


# -- health from Prometheus --------------------------------------------------------------


def prometheus_scalar(url: str, expr: str, timeout: float = 10.0) -> float | None:
    """Evaluate *expr*; the first sample's value, or None if empty or unreachable."""
    try:
        return Prometheus(url, timeout=timeout).scalar(expr)
    except (PrometheusError, ValueError, TypeError, IndexError, KeyError):
        return None


def site_health(
    site: str,
    url: str,
    queries: HealthQueries,
    scalar: Callable[[str, str], float | None] = prometheus_scalar,
) -> SiteHealth:
    """Judge a site from what its Prometheus answers; a signal it cannot answer
    (unreachable, or no data) is unknown, never bad."""

    def q(expr: str) -> float | None:
        return scalar(url, expr.replace("$site", site)) if url else None

    def up(expr: str) -> bool | None:
        value = q(expr)
        return None if value is None else value >= 1

    return SiteHealth(
        site=site,
        api_up=up(queries.api_up),
        ingress_up=up(queries.ingress_up),
        gpu_capacity=q(queries.gpu_capacity),
        slurm_up=up(queries.slurm_up),
        drill_ok=up(queries.drill_ok),
    )


# -- Karmada output ---------------------------------------------------------------------


def policy_name(service: str) -> str:
    return f"gotthard-dr-{service}"


def propagation_policy(
    site_model: Mapping[str, SiteConfig], svc: PlacedService, *sites: str
) -> dict[str, Any]:
    """The PropagationPolicy placing *svc* on *sites* (their Karmada member clusters in
    *site_model*, ``Config.site_model``).

    failover mode: one site's clusters, any of them (``minGroups`` 1). spread mode: every
    member cluster of *sites* (``minGroups`` = ``maxGroups`` = their number), the
    replicas divided among them with equal weights, so that the sites left carry all of
    them when one is lost."""
    clusters = [m for site in sites for m in site_model[site].karmada_members or [site]]
    labels = {"gotthard.io/managed-by": "gotthard", "gotthard.io/placement-mode": svc.mode}
    if len(sites) == 1:
        labels["gotthard.io/site"] = sites[0]
    placement: dict[str, Any] = {"clusterAffinity": {"clusterNames": clusters}}
    if svc.mode == "spread":
        placement["spreadConstraints"] = [
            {"spreadByField": "cluster", "minGroups": len(clusters), "maxGroups": len(clusters)}
        ]
        placement["replicaScheduling"] = {
            "replicaSchedulingType": "Divided",
            "replicaDivisionPreference": "Weighted",
        }
    else:
        placement["spreadConstraints"] = [
            {"spreadByField": "cluster", "minGroups": 1, "maxGroups": len(clusters)}
        ]
    return {
        "apiVersion": f"{KARMADA_GROUP}/{KARMADA_VERSION}",
        "kind": "PropagationPolicy",
        "metadata": {
            "name": policy_name(svc.name),
            "namespace": svc.namespace,
            "labels": labels,
            "annotations": {"gotthard.io/sites": ",".join(sites)},
        },
        "spec": {
            "resourceSelectors": [dict(r) for r in svc.resources],
            "placement": placement,
        },
    }


_FIELDS = frozenset(f.name for f in fields(ServiceState))


def load_state(path: str) -> dict[str, ServiceState]:
    """The saved state; {} when the file is missing or unreadable. Keys this version does
    not know are ignored, and missing ones take their defaults (older files load)."""
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
        return {
            name: ServiceState(
                **{k: v for k, v in item.items() if k in _FIELDS and k != "sites"},
                sites=tuple(item.get("sites") or ()),
            )
            for name, item in raw.items()
        }
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def save_state(path: str, state: Mapping[str, ServiceState]) -> None:
    """Replace the state file atomically; it is always 0600 afterwards."""
    data = json.dumps({k: asdict(s) for k, s in state.items()}, indent=1, sort_keys=True)
    write_private_atomically(path, data)


#: Our keys in a PropagationPolicy's labels and annotations (others' are kept).
_OURS = "gotthard.io/"
#: Reads and replaces of one apply before giving up on a policy that keeps changing.
CONFLICT_ATTEMPTS = 5


def _contains(current: Any, desired: Any) -> bool:
    """*current* has everything *desired* has (the API server may add defaults)."""
    if isinstance(desired, dict):
        return isinstance(current, dict) and all(
            k in current and _contains(current[k], v) for k, v in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(current, list)
            and len(current) == len(desired)
            and all(_contains(c, d) for c, d in zip(current, desired, strict=True))
        )
    return bool(current == desired)


def _ours(mapping: Mapping[str, str] | None) -> dict[str, str]:
    return {k: v for k, v in (mapping or {}).items() if k.startswith(_OURS)}


def _replacement(current: dict[str, Any], desired: dict[str, Any]) -> dict[str, Any]:
    """*current* with *desired*'s spec, and our labels and annotations replaced by
    *desired*'s; its resourceVersion stays, so a concurrent change makes the PUT fail."""
    meta = dict(current.get("metadata") or {})
    for key in ("labels", "annotations"):
        theirs = {k: v for k, v in (meta.get(key) or {}).items() if not k.startswith(_OURS)}
        meta[key] = {**theirs, **(desired["metadata"].get(key) or {})}
    return {**current, "metadata": meta, "spec": desired["spec"]}


class Karmada:
    """PropagationPolicies on the Karmada control plane."""

    def __init__(self, api: client.ApiClient, retry: Retry | None = None) -> None:
        self.objects = CustomObjects(api, KARMADA_GROUP, KARMADA_VERSION, retry or Retry())

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.call_unless(404, "get", namespace, _PLURAL, name, kind=_KIND)[1]

    def plan(self, desired: dict[str, Any]) -> str:
        """A unified diff of the placement (empty when nothing changes)."""
        meta = desired["metadata"]
        current = self.get(meta["namespace"], meta["name"])
        before = json.dumps((current or {}).get("spec", {}), indent=1, sort_keys=True).splitlines()
        after = json.dumps(desired["spec"], indent=1, sort_keys=True).splitlines()
        name = f"{meta['namespace']}/{meta['name']}"
        return "\n".join(difflib.unified_diff(before, after, name, name, lineterm=""))

    def apply(self, desired: dict[str, Any]) -> str:
        """Create the policy, or replace its spec (get, then PUT with the resourceVersion
        read; a 409 Conflict reads it again). Returns created, updated or unchanged."""
        meta = desired["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        for _ in range(CONFLICT_ATTEMPTS):
            current = self.get(namespace, name)
            if current is None:
                created, _ = self.objects.call_unless(
                    409, "create", namespace, _PLURAL, desired, kind=_KIND
                )
                if created:
                    return "created"
                continue  # created meanwhile: read it and replace it
            have = current.get("metadata") or {}
            same_meta = all(
                _ours(have.get(key)) == _ours(meta.get(key)) for key in ("labels", "annotations")
            )
            if same_meta and _contains(current.get("spec"), desired["spec"]):
                return "unchanged"
            body = _replacement(current, desired)
            replaced, _ = self.objects.call_unless(
                409, "replace", namespace, _PLURAL, name, body, kind=_KIND
            )
            if replaced:
                return "updated"
        raise KubeError(
            f"propagationpolicy {namespace}/{name}: still changed by someone else after "
            f"{CONFLICT_ATTEMPTS} attempts (409 Conflict)"
        )
