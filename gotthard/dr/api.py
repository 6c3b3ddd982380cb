"""Public API of the DR control plane (stable; the runbook webhook calls it).

Both functions act through the Kubernetes API, retry transient failures with back-off
and return a name the caller can log or link to. ``api_client`` lets a caller pass its
own ``kubernetes.client.ApiClient``; by default one is built from the site's
Kubernetes cluster in the site model (``[sites.NAME.clusters.CLUSTER.kubernetes]``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from kubernetes import client

from gotthard.dr import ops, placement
from gotthard.dr import velero as v
from gotthard.dr.settings import BackupSchedule

if TYPE_CHECKING:
    from gotthard.config import Config

LABEL_REASON = "gotthard.io/reason"


def _label_value(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:63].strip("-_.") or "none"


def backup_now(
    cfg: Config,
    namespace: str,
    *,
    reason: str,
    api_client: client.ApiClient | None = None,
    site: str | None = None,
) -> str:
    """Create an ad-hoc Velero Backup of *namespace* on *site* (default: the
    installation's, ``cfg.site``).

    Returns the Backup name, ``manual-<namespace>-<site>-<YYYYMMDDhhmmss>``. Calling it
    twice within one second is a no-op the second time (same name, 409). Does not wait
    for the backup to finish; follow it with ``gotthard dr status``.
    """
    site = site or cfg.site
    ctx = ops.Context(cfg, api_clients={site: api_client} if api_client else None)
    when = ops.now_utc(ctx).replace(microsecond=0)
    name = v.slot_name(f"manual-{namespace}-{site}", when)
    # the hooks of the schedules backing the namespace up: as consistent as those backups
    hooks = ops.schedule_hooks(cfg.dr, site, namespace)
    sched = BackupSchedule(name="manual", namespaces=[namespace], hooks=hooks)
    ctx.velero(site).create_backup(
        name,
        v.backup_spec(sched),
        {
            v.LABEL_SCHEDULE: "manual",
            v.LABEL_NAMESPACE: namespace,
            LABEL_REASON: _label_value(reason),
        },
    )
    return name


def request_failover(
    cfg: Config,
    service: str,
    target_site: str,
    *,
    reason: str,
    api_client: client.ApiClient | None = None,
) -> str:
    """Place *service* on *target_site* now by applying its Karmada PropagationPolicy.

    *api_client* talks to the Karmada control plane. Returns ``<namespace>/<policy>``.
    This is a one-off action: to keep the service there, also set
    ``[dr.placement.overrides]``, or the controller fails back after its cool-down.
    """
    by_name = {s.name: s for s in cfg.dr.placement.services}
    if service not in by_name:
        raise KeyError(f"unknown service {service!r}; configured: {', '.join(sorted(by_name))}")
    ctx = ops.Context(cfg)
    if target_site not in ctx.sites:
        raise KeyError(f"unknown site {target_site!r}; configured: {', '.join(sorted(ctx.sites))}")
    if api_client is None:
        from gotthard.dr.daemon import karmada_client

        api_client = karmada_client(cfg.dr)
    policy = placement.propagation_policy(ctx.sites, by_name[service], target_site)
    policy["metadata"].setdefault("annotations", {})["gotthard.io/reason"] = reason
    placement.Karmada(api_client, ctx.retry).apply(policy)
    return f"{policy['metadata']['namespace']}/{policy['metadata']['name']}"


__all__ = ["backup_now", "request_failover"]
