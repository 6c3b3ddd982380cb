"""Zurich/Lugano placement: health in, placement out, Karmada PropagationPolicy applied.

:func:`decide` is a pure function of typed health inputs, the previous per-service
state and the clock. Hysteresis: ``failover_after`` consecutive bad evaluations of the
current site before a failover (one blip never moves a service), and a cool-down on
the fallback site before a failback. A manual override always wins.

Output is a Karmada ``policy.karmada.io/v1alpha1`` PropagationPolicy per service:
``multicluster.x-k8s.io`` has no PlacementPolicy kind (SIG-Multicluster only defines
ServiceExport/ServiceImport and ClusterProfile there), KubeFed is archived, and OCM's
Placement has no min/max group counts; Karmada is a real, maintained API with
clusterAffinity and spreadConstraints.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from kubernetes import client

from gotthard.dr.settings import DrConfig, HealthQueries, PlacedService, PlacementConfig
from gotthard.files import write_private_atomically
from gotthard.kube import CustomObjects, Retry
from gotthard.prometheus import Prometheus, PrometheusError

KARMADA_GROUP, KARMADA_VERSION = "policy.karmada.io", "v1alpha1"
#: PropagationPolicy's plural, and its name in retry logs and metrics.
_PLURAL, _KIND = "propagationpolicies", "propagationpolicy"


@dataclass(frozen=True)
class SiteHealth:
    site: str
    api_up: bool
    ingress_up: bool
    gpu_capacity: float
    slurm_up: bool
    drill_ok: bool

    def healthy(self, min_gpu_capacity: float = 0.0) -> bool:
        return (
            self.api_up
            and self.ingress_up
            and self.slurm_up
            and self.drill_ok
            and self.gpu_capacity >= min_gpu_capacity
        )


@dataclass(frozen=True)
class ServiceState:
    """What the controller remembers per service between evaluations."""

    site: str
    bad_streak: int = 0
    #: When the service last moved (Unix seconds); starts the failback cool-down.
    moved_at: float | None = None


@dataclass(frozen=True)
class Decision:
    service: str
    site: str
    previous: str
    reason: str

    @property
    def changed(self) -> bool:
        return self.site != self.previous


def decide(
    services: list[PlacedService],
    health: Mapping[str, SiteHealth],
    state: Mapping[str, ServiceState],
    now: float,
    policy: PlacementConfig,
) -> tuple[dict[str, ServiceState], list[Decision]]:
    """One evaluation: new per-service state and one decision per service."""
    ok = {site: h.healthy(policy.min_gpu_capacity) for site, h in health.items()}
    new_state: dict[str, ServiceState] = {}
    decisions: list[Decision] = []
    for svc in services:
        prev = state.get(svc.name) or ServiceState(site=svc.primary_site)
        others = sorted(s for s in health if s != prev.site)
        fallback = next((s for s in others if ok.get(s)), None)
        override = policy.overrides.get(svc.name)
        if override:
            moved = prev.moved_at if override == prev.site else now
            cur, reason = ServiceState(override, 0, moved), "manual override"
        elif not ok.get(prev.site, False):
            streak = prev.bad_streak + 1
            if streak >= policy.failover_after and fallback is not None:
                cur = ServiceState(fallback, 0, now)
                reason = f"failover: {prev.site} unhealthy for {streak} evaluations"
            else:
                cur = replace(prev, bad_streak=streak)
                reason = f"{prev.site} unhealthy ({streak}/{policy.failover_after})" + (
                    "" if fallback else ", no healthy fallback"
                )
        elif prev.site != svc.primary_site and ok.get(svc.primary_site, False):
            since = now - (prev.moved_at if prev.moved_at is not None else now)
            if since >= policy.failback_cooldown_seconds:
                cur, reason = ServiceState(svc.primary_site, 0, now), "failback to primary"
            else:
                cur = replace(prev, bad_streak=0)
                cool = policy.failback_cooldown_seconds
                reason = f"primary healthy, cool-down {since:.0f}/{cool:.0f}s"
        else:
            cur, reason = replace(prev, bad_streak=0), "healthy"
        new_state[svc.name] = cur
        decisions.append(Decision(svc.name, cur.site, prev.site, reason))
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
    """Judge a site; an unreachable Prometheus or an empty answer counts as bad."""

    def q(expr: str) -> float | None:
        return scalar(url, expr.replace("$site", site)) if url else None

    def up(expr: str) -> bool:
        value = q(expr)
        return value is not None and value >= 1

    return SiteHealth(
        site=site,
        api_up=up(queries.api_up),
        ingress_up=up(queries.ingress_up),
        gpu_capacity=q(queries.gpu_capacity) or 0.0,
        slurm_up=up(queries.slurm_up),
        drill_ok=up(queries.drill_ok),
    )


# -- Karmada output ---------------------------------------------------------------------


def policy_name(service: str) -> str:
    return f"gotthard-dr-{service}"


def propagation_policy(settings: DrConfig, svc: PlacedService, site: str) -> dict[str, Any]:
    clusters = settings.sites[site].karmada_members or [site]
    return {
        "apiVersion": f"{KARMADA_GROUP}/{KARMADA_VERSION}",
        "kind": "PropagationPolicy",
        "metadata": {
            "name": policy_name(svc.name),
            "namespace": svc.namespace,
            "labels": {"gotthard.io/managed-by": "gotthard", "gotthard.io/site": site},
        },
        "spec": {
            "resourceSelectors": [dict(r) for r in svc.resources],
            "placement": {
                "clusterAffinity": {"clusterNames": clusters},
                "spreadConstraints": [
                    {"spreadByField": "cluster", "minGroups": 1, "maxGroups": len(clusters)}
                ],
            },
        },
    }


def load_state(path: str) -> dict[str, ServiceState]:
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, ValueError):
        return {}
    return {name: ServiceState(**item) for name, item in raw.items()}


def save_state(path: str, state: Mapping[str, ServiceState]) -> None:
    """Replace the state file atomically; it is always 0600 afterwards."""
    data = json.dumps({k: asdict(s) for k, s in state.items()}, indent=1, sort_keys=True)
    write_private_atomically(path, data)


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
        meta = desired["metadata"]
        namespace = meta["namespace"]
        if self.objects.call_unless(409, "create", namespace, _PLURAL, desired, kind=_KIND)[0]:
            return "created"
        # A JSON merge patch replaces lists, so clusterNames is set, never appended to.
        patch = {
            "metadata": {k: meta[k] for k in ("labels", "annotations") if k in meta},
            "spec": desired["spec"],
        }
        self.objects.call("patch", namespace, _PLURAL, meta["name"], patch, kind=_KIND)
        return "updated"
