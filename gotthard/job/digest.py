"""``gotthard job digest --since 24h``: the findings of every job that had a GPU process
in the period, by account, at every site (or one ``--cluster``): the users' daily view
of efficiency, in place of alerts to the operators."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from gotthard.job.report import JobError, Where, gather, places
from gotthard.monitoring.components import job as queries
from gotthard.prometheus import Prometheus, PrometheusError

if TYPE_CHECKING:
    from gotthard.config import Config

SCHEMA = "gotthard.job.digest/v1"


@dataclass
class JobLine:
    job_id: str
    site: str
    cluster: str
    user: str
    #: finding kinds
    findings: list[str] = field(default_factory=list)


@dataclass
class Account:
    account: str
    jobs: int = 0
    with_findings: int = 0
    #: finding kind -> jobs
    kinds: dict[str, int] = field(default_factory=dict)
    findings: list[JobLine] = field(default_factory=list)


def _jobs(where: Where, since: int) -> list[dict[str, str]]:
    """(job_id, user, account) of the jobs of *where* with a GPU process in *since*."""
    scope = queries.Scope(site=where.site, cluster=where.cluster, job_id=".+")
    expr = queries.jobs_with_gpus(scope, since)
    _, samples = Prometheus(where.prometheus).query(expr)
    return [s["metric"] for s in samples]


def digest(cfg: Config, since: int, cluster: str | None = None) -> tuple[list[Account], list[str]]:
    """The accounts with their jobs and findings, and what could not be asked."""
    accounts: dict[str, Account] = {}
    problems: list[str] = []
    kinds: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for where in places(cfg, cluster):
        if not where.prometheus:
            problems.append(f"{where.site}/{where.cluster}: no prometheus_url")
            continue
        try:
            jobs = _jobs(where, since)
        except PrometheusError as err:
            problems.append(f"{where.site}/{where.cluster}: Prometheus {err}")
            continue
        for labels in jobs:
            name = labels.get("account") or "(unknown)"
            account = accounts.setdefault(name, Account(name))
            account.jobs += 1
            try:
                report = gather(cfg, labels["job_id"], cluster=where.cluster, lookback=since)
            except JobError as err:
                problems.append(str(err))
                continue
            if report.findings:
                account.with_findings += 1
                found = [f.kind for f in report.findings]
                for kind in found:
                    kinds[name][kind] += 1
                line = JobLine(report.job_id, where.site, where.cluster, labels.get("user", ""))
                line.findings = found
                account.findings.append(line)
    for name, account in accounts.items():
        account.kinds = dict(sorted(kinds[name].items()))
    return [accounts[name] for name in sorted(accounts)], problems


def as_json(accounts: list[Account], problems: list[str], since: int) -> str:
    data: dict[str, Any] = {
        "schema": SCHEMA,
        "since_seconds": since,
        "accounts": [asdict(a) for a in accounts],
        "problems": problems,
    }
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def table(accounts: list[Account], problems: list[str]) -> str:
    lines = ["ACCOUNT  JOBS  WITH_FINDINGS  FINDINGS"]
    for a in accounts:
        kinds = ", ".join(f"{k} {n}" for k, n in a.kinds.items()) or "-"
        lines.append(f"{a.account}  {a.jobs}  {a.with_findings}  {kinds}")
        for job in a.findings:
            where = f"{job.site}/{job.cluster}"
            lines.append(f"  job {job.job_id} ({where}, {job.user}): {', '.join(job.findings)}")
    lines += [f"note: {p}" for p in problems]
    return "\n".join(lines) + "\n"
