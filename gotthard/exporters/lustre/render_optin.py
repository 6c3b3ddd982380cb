"""Metric families of the opt-in readings: LNet NI health, quota usage and brw_stats.

``brw_stats`` buckets are exported as one counter per bucket, not as Prometheus histograms:
a bucket counts the values from its lower bound up to the next power of two, so the sum of
the values (a histogram's ``_sum``) cannot be derived without making it up, and the bucket
bounds are lower bounds where ``le`` wants upper ones.
"""

from __future__ import annotations

import heapq

from gotthard.exporters.families import MetricFamily, counter, gauge
from gotthard.exporters.lustre.render import TARGET
from gotthard.exporters.lustre.snapshot import (
    LnetNi,
    LustreSnapshot,
    TargetBrwStats,
    TargetQuota,
)

NI = ("net", "nid")


def render_lnet_nis(nis: list[LnetNi]) -> list[MetricFamily]:
    """Health value and up/down status of each local LNet interface."""
    health = gauge(
        "gotthard_lustre_lnet_ni_health",
        "LNet health value of the local interface (lnetctl net show -v 4 health value): 1000 "
        "when healthy, lower after send failures, recovering over time.",
        *NI,
    )
    status = gauge(
        "gotthard_lustre_lnet_ni_status",
        "1 if the local LNet interface is up, 0 otherwise (lnetctl net show status).",
        *NI,
    )
    for ni in nis:
        if ni.health_value is not None:
            health.add((ni.net, ni.nid), ni.health_value)
        if ni.status:
            status.add((ni.net, ni.nid), 1 if ni.status == "up" else 0)
    return [health, status]


def render_quota(targets: list[TargetQuota], limit: int) -> list[MetricFamily]:
    """Space and inodes per user, group and project of each target, at most *limit* ids."""
    labels = (*TARGET, "type", "id")
    used = gauge(
        "gotthard_lustre_quota_used_bytes",
        "Bytes one user, group or project uses on the target (quota_slave.acct_user, "
        "acct_group, acct_project kbytes).",
        *labels,
    )
    inodes = gauge(
        "gotthard_lustre_quota_used_inodes",
        "Inodes (objects on an OST) one user, group or project uses on the target "
        "(quota_slave.acct_* inodes).",
        *labels,
    )
    listed = gauge(
        "gotthard_lustre_quota_ids",
        "Ids of the quota type the target's quota_slave.acct_* listed this poll, before "
        "--lustre.quota-limit.",
        *TARGET,
        "type",
    )
    truncated = gauge(
        "gotthard_lustre_quota_truncated",
        "Ids dropped from the target's quota series by --lustre.quota-limit (least space "
        "first); 0 when none were.",
        *TARGET,
        "type",
    )
    for entry in targets:
        key = (*entry.key, entry.type)
        kept = entry.usage
        if len(kept) > limit:
            kept = heapq.nlargest(limit, kept, key=lambda usage: (usage.used_bytes, usage.inodes))
        listed.add(key, len(entry.usage))
        truncated.add(key, len(entry.usage) - len(kept))
        for usage in kept:
            used.add((*key, usage.id), usage.used_bytes)
            inodes.add((*key, usage.id), usage.inodes)
    return [used, inodes, listed, truncated]


#: brw_stats table -> (metric, help, the label holding a bucket's lower bound)
BRW_FAMILIES = {
    "pages per bulk r/w": (
        "gotthard_lustre_target_brw_rpcs_total",
        "Bulk read/write RPCs by pages per RPC (brw_stats pages per bulk r/w); the bucket "
        "pages=N counts RPCs of N up to 2N-1 pages.",
        "pages",
    ),
    "disk I/O size": (
        "gotthard_lustre_target_brw_disk_ios_total",
        "Disk I/Os by size (brw_stats disk I/O size); the bucket size_bytes=N counts I/Os of "
        "N up to 2N-1 bytes.",
        "size_bytes",
    ),
}


def render_brw_stats(targets: list[TargetBrwStats]) -> list[MetricFamily]:
    """One counter per brw_stats bucket, operation and target."""
    families = []
    for title, (name, help_text, bound) in BRW_FAMILIES.items():
        family = counter(name, help_text, *TARGET, "op", bound)
        for entry in targets:
            for lower, reads, writes in entry.tables.get(title, []):
                family.add((*entry.key, "read", str(lower)), reads)
                family.add((*entry.key, "write", str(lower)), writes)
        families.append(family)
    return families


def render_optin(snapshot: LustreSnapshot, *, quota_limit: int = 1000) -> list[MetricFamily]:
    """The families of the opt-in readings the snapshot holds (none when all are off)."""
    families: list[MetricFamily] = []
    if snapshot.lnet_nis is not None:
        families += render_lnet_nis(snapshot.lnet_nis)
    if snapshot.quota is not None:
        families += render_quota(snapshot.quota, quota_limit)
    if snapshot.brw_stats is not None:
        families += render_brw_stats(snapshot.brw_stats)
    return families
