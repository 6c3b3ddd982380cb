"""What rules, alerts and dashboards share: dashboard names and uids, PromQL selectors and
the join keys of the job-attribution series.

Pure strings, no grafanalib: the rule components and the site settings import this
module, and neither may pay for a dashboard library.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from gotthard import areas

UID_PREFIX = "gotthard-"
UID_MAX_LENGTH = 40
TITLE_PREFIX = "Gotthard / "

#: Every dashboard (:data:`gotthard.areas.DASHBOARDS`), keyed by the slug of its name,
#: in the order docs/dashboards.md lists them. The uid is ``gotthard-<key>``; alerts
#: name their dashboard by key.
DASHBOARD_NAMES: Mapping[str, str] = {d.key: d.title for d in areas.DASHBOARDS}


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def uid_for(name: str) -> str:
    uid = UID_PREFIX + slug(name)
    if len(uid) > UID_MAX_LENGTH:
        raise ValueError(f"dashboard uid {uid!r} is longer than {UID_MAX_LENGTH} characters")
    return uid


#: Stable uids, for links from alerts (``dashboard_url``) and runbooks.
DASHBOARD_UIDS: Mapping[str, str] = {key: uid_for(name) for key, name in DASHBOARD_NAMES.items()}

# --- selectors ------------------------------------------------------------------------

#: The filter every dashboard selector carries. Both labels are scrape-time target labels.
SITE_CLUSTER = 'site=~"$site", cluster=~"$cluster"'
RATE = "[$__rate_interval]"
#: The labels every rule aggregation keeps.
SC = "site, cluster"


def eq(label: str, value: str) -> str:
    return f'{label}="{value}"'


def rx(label: str, value: str) -> str:
    return f'{label}=~"{value}"'


def sel(metric: str, *matchers: str) -> str:
    """``metric{site=~"$site", cluster=~"$cluster", <matchers>}``."""
    return metric + "{" + ", ".join((SITE_CLUSTER, *matchers)) + "}"


def rate(metric: str, *matchers: str, fn: str = "rate") -> str:
    """``rate(metric{...}[$__rate_interval])`` (or ``increase``/``irate`` with *fn*)."""
    return f"{fn}({sel(metric, *matchers)}{RATE})"


def zero_if_none(counted: str, by: str, base: str) -> str:
    """``count by (by) (counted) or 0 * count by (by) (base)``.

    A count of bad things is empty, not 0, when there are none; ``or vector(0)`` would
    hide a typo'd metric name. This keeps the labels and still needs *base* to exist.
    """
    grouping = f" by ({by})" if by else ""
    return f"count{grouping} ({counted}) or 0 * count{grouping} ({base})"


def count_zero(metric: str, *matchers: str) -> str:
    """How many series of a 0/1 gauge (up, healthy) are 0, and 0 when none is."""
    selector = sel(metric, *matchers)
    return zero_if_none(selector + " == 0", "", selector)


def agg(fn: str, labels: str, expr: str) -> str:
    """``fn by (labels) (expr)``, or ``fn(expr)`` when *labels* is empty."""
    return f"{fn} by ({labels}) ({expr})" if labels else f"{fn}({expr})"


def ratio(fn: str, labels: str, numerator: str, denominator: str) -> str:
    """``agg(numerator) / agg(denominator)``, both aggregated the same way."""
    return f"{agg(fn, labels, numerator)} / {agg(fn, labels, denominator)}"


# --- job attribution ------------------------------------------------------------------

#: Labels that identify one whole GPU across the fleet (``instance`` is the node's
#: exporter, ``gpu`` the NVML index, ``uuid`` the board): the key of every GPU join.
GPU_KEY = "site, cluster, instance, gpu, uuid"
#: The Slurm exporter's one series per running job (``job_id``, ``user``, ``account``,
#: ``partition``): the join key of every per-job view.
SLURM_JOB_INFO = "gotthard_slurm_job_info"
#: ``gotthard_gpu_job_info`` reduced to one series per (GPU, job), for rules (no dashboard filter).
GPU_JOB_INFO = f"max by ({GPU_KEY}, job_id) (gotthard_gpu_job_info)"


def gpu_jobs(metric: str, *, mig: bool = False) -> str:
    """For rules: *metric* of every GPU a job holds, one series per (GPU, job).

    ``gotthard_gpu_job_info`` is the "many" side: a GPU shared by two jobs (or two MIG
    instances) has two info series but one ``gotthard_gpu_utilization_ratio``. The reverse,
    ``metric * on(...) group_left(job_id) gotthard_gpu_job_info``, fails with "many-to-many
    matching" as soon as a GPU holds two jobs. With *mig*, per (GPU or MIG instance, job):
    MIG-aware metrics also match on ``gpu_instance`` (empty, i.e. absent, for a whole
    GPU), so that a job on one MIG instance gets that instance's reading.
    """
    key = GPU_KEY + (", gpu_instance" if mig else "")
    return f"max by ({key}, job_id) (gotthard_gpu_job_info) * on ({key}) group_left () {metric}"


def owner_join(expr: str, owners: str = SLURM_JOB_INFO) -> str:
    """Add ``user``, ``account`` and ``partition`` of the Slurm job to a ``job_id`` result.

    ``gotthard_slurm_job_info`` comes from the controller's exporter (another ``instance``), so the
    match is on ``cluster`` and ``job_id`` only; ``max by`` first collapses duplicates
    from redundant exporters so that the right-hand side is unique per job. *owners* is
    ``gotthard_slurm_job_info`` or a record of some of its series with the same labels (the
    GPU jobs' owners: fewer series to read at every step than every job's).
    """
    right = f"max by (cluster, job_id, user, account, partition) ({sel(owners)})"
    return f"({expr}) * on(cluster, job_id) group_left(user, account, partition) {right}"
