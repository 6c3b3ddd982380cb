"""``gotthard deploy render --target local --out DIR``: every site of the site model on
this machine, as processes.

It writes what ``--target prometheus`` writes, with the paths of DIR, plus what it takes
to run it here (layout in docs/deploy.md):

* ``processes.json``: every process to start, with its name, site, cluster, kind, argv,
  readiness URL and URL: each site Prometheus (its ``prometheus_url``), the global view
  (``[deploy.federation] listen``), each site's Alertmanagers (``[deploy.alertmanager]``,
  one gossip cluster), and each role at each address of ``[deploy.prometheus.targets]``
  (:func:`gotthard.deploy.roles.command`, the systemd units' command line);
* ``SITE/CLUSTER/gotthard.toml``: the site file with ``site`` and ``cluster`` set for the
  processes of that cluster. Several sites share this machine, so each cluster's state is
  put in that directory too: the DR job store (when SQLite), the placement state, the
  webhook's audit log and kill switch file;
* ``dashboards/``: the Grafana dashboards.

Nothing is started: ``gotthard sandbox up`` starts what this writes.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gotthard import config as configuration
from gotthard.config import Config
from gotthard.deploy import alerting, prometheus
from gotthard.deploy.manifest import RenderError, dump_toml
from gotthard.deploy.roles import SCRAPED, command
from gotthard.deploy.topology import alertmanagers, clusters, prometheuses, url_address

PROCESSES_FILE = "processes.json"
SITE_FILE = "gotthard.toml"
DASHBOARDS_DIR = "dashboards"
#: What each cluster keeps in its own directory.
DR_JOBS = "dr-jobs.sqlite"
PLACEMENT_STATE = "dr-placement.json"
AUDIT_LOG = "runbooks-audit.jsonl"
KILL_SWITCH = "runbooks.disabled"
#: Kinds of the processes that are not a role's.
PROMETHEUS = "prometheus"
GLOBAL_VIEW = "global-prometheus"
ALERTMANAGER = "alertmanager"


@dataclass(frozen=True)
class Process:
    """One process of ``processes.json``."""

    name: str
    site: str
    cluster: str
    #: A role's name, or ``prometheus``, ``global-prometheus``, ``alertmanager``.
    kind: str
    argv: list[str]
    #: Answers 200 once the process serves.
    ready_url: str
    url: str

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Process:
        return cls(**{key: data[key] for key in cls.__dataclass_fields__})


def cluster_dir(out: Path, site: str, cluster: str) -> Path:
    """Where the processes of *cluster* keep their site file and state."""
    return out / site / cluster


def load_processes(out: Path) -> list[Process]:
    """The processes a local render into *out* lists; OSError or ValueError if unreadable."""
    data = json.loads((out / PROCESSES_FILE).read_text(encoding="utf-8"))
    return [Process.from_json(item) for item in data["processes"]]


def site_document(document: Mapping[str, Any], site: str, cluster: str, where: Path) -> Any:
    """The site file *document* for the processes of *cluster*, their state under *where*."""
    doc = copy.deepcopy(dict(document))
    doc["site"], doc["cluster"] = site, cluster
    runbooks = doc.setdefault("runbooks", {})
    runbooks["audit_log"] = str(where / AUDIT_LOG)
    runbooks["kill_switch_file"] = str(where / KILL_SWITCH)
    dr = doc.setdefault("dr", {})
    if str(dr.get("jobstore_url", "sqlite:")).startswith("sqlite:"):
        dr["jobstore_url"] = f"sqlite:///{where / DR_JOBS}"
    dr.setdefault("placement", {})["state_file"] = str(where / PLACEMENT_STATE)
    return doc


def _server(program: str, config: Path, storage: str, listen: str, *flags: str) -> list[str]:
    """argv of Prometheus or Alertmanager: both take ``--config.file``, a storage flag
    (``FLAG=DIR``) and ``--web.listen-address``."""
    return [
        program,
        f"--config.file={config}",
        f"--{storage}",
        f"--web.listen-address={listen}",
        *flags,
    ]


def _monitoring(cfg: Config, out: Path) -> list[Process]:
    """Every site's Alertmanagers, every Prometheus and the global view."""
    local = cfg.deploy.local
    found = []
    managers = alertmanagers(cfg)
    for site, hosts in managers.hosts.items():
        for index, host in enumerate(hosts):
            suffix = f"-{index}" if len(hosts) > 1 else ""
            listen = f"{host}:{managers.ports[site]}"
            flags = alerting.cluster_flags(cfg, managers, f"{host}:{managers.cluster_ports[site]}")
            data = out / site / f"alertmanager{suffix}"
            argv = _server(
                local.alertmanager,
                out / alerting.CONFIG_FILE,
                f"storage.path={data}",
                listen,
                *flags,
            )
            url = f"http://{listen}"
            name = f"{site}-alertmanager{suffix}"
            found.append(Process(name, site, "", ALERTMANAGER, argv, f"{url}/-/ready", url))
    settings = cfg.deploy.prometheus
    flags = (
        f"--storage.tsdb.retention.time={settings.retention}",
        f"--rules.alert.resend-delay={settings.alert_resend_delay}",
    )
    servers = [
        (prom.name, prom.site, prom.clusters[0] if prom.own else "", PROMETHEUS, prom.url)
        for prom in prometheuses(cfg, every_cluster=False)
    ]
    if cfg.deploy.federation.listen:
        url = f"http://{cfg.deploy.federation.listen}"
        servers.append((prometheus.GLOBAL, "", "", GLOBAL_VIEW, url))
    for name, site, cluster, kind, url in servers:
        config = out / name / prometheus.CONFIG_FILE
        data = f"storage.tsdb.path={out / name / 'data'}"
        argv = _server(local.prometheus, config, data, url_address(url), *flags)
        base = url.rstrip("/")
        found.append(
            Process(f"{name}-prometheus", site, cluster, kind, argv, f"{base}/-/ready", url)
        )
    return found


def _roles(
    cfg: Config, document: Mapping[str, Any], out: Path
) -> tuple[dict[str, str], list[Process]]:
    """Each role at each of its targets, and the site file of each cluster that runs one."""
    files: dict[str, str] = {}
    found = []
    collectors = cfg.deploy.kubernetes.node_collectors
    for site, cluster in clusters(cfg):
        targets = cfg.deploy.prometheus.targets.get(cluster, {})
        roles = [(role, targets[role.name]) for role in SCRAPED if targets.get(role.name)]
        if not roles:
            continue
        where = cluster_dir(out, site, cluster)
        site_file = where / SITE_FILE
        own = site_document(document, site, cluster, where)
        try:  # what each process will load
            configuration.from_mapping(own, f"{site_file}")
        except configuration.ConfigError as err:
            raise RenderError(" ".join(line.strip() for line in str(err).splitlines())) from None
        files[str(site_file.relative_to(out))] = (
            "# Rendered by `gotthard deploy render --target local`: the site file of the\n"
            f"# processes of cluster {cluster} (site {site}); regenerated on every render.\n"
            + dump_toml(own)
        )
        gotthard = [sys.executable, "-m", "gotthard", "--config", str(site_file)]
        files.update(_epilog(cfg, site, cluster, where, out, gotthard))
        for role, addresses in roles:
            for index, address in enumerate(addresses):
                suffix = f"-{index}" if len(addresses) > 1 else ""
                argv = [*gotthard, *command(role, address, collectors)]
                url = f"http://{address}"
                name = f"{cluster}-{role.name}{suffix}"
                ready = f"{url}{role.ready_path}"
                found.append(Process(name, site, cluster, role.name, argv, ready, url))
    return files, found


def _epilog(
    cfg: Config, site: str, cluster: str, where: Path, out: Path, gotthard: list[str]
) -> dict[str, str]:
    """The cluster's EpilogSlurmctld script (``gotthard job epilog``), for a local Slurm
    that wants the job summaries (the sandbox's tests point slurm.conf at it)."""
    from gotthard.job import deploy as job

    slurm_conf = cfg.site_model[site].clusters[cluster].slurm_conf
    log = str(where / "epilog-slurmctld.log")
    script = job.epilog_script(gotthard, cluster, slurm_conf, log, how="--target local")
    return {str((where / job.SCRIPT).relative_to(out)): script}


def render(cfg: Config, document: Mapping[str, Any], out: Path) -> dict[str, str]:
    """Relative path -> text of the local target under *out* (an absolute directory);
    *document* is the site file as :func:`gotthard.config.read_toml` reads it."""
    from gotthard.monitoring import deliver

    files = prometheus.config_files(cfg, str(out / prometheus.RULES_DIR))
    files.update(prometheus.rule_documents(cfg))
    files[alerting.CONFIG_FILE] = alerting.config_text(cfg)
    dashboards = deliver.dashboard_documents("json", monitoring=cfg.monitoring)
    files.update({f"{DASHBOARDS_DIR}/{name}": text for name, text in dashboards.items()})
    own, processes = _roles(cfg, document, out)
    files.update(own)
    processes = [*_monitoring(cfg, out), *processes]
    names = [p.name for p in processes]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise RenderError(f"two processes would both be named {', '.join(twice)}; rename a cluster")
    listing = {"processes": [asdict(p) for p in processes]}
    files[PROCESSES_FILE] = json.dumps(listing, indent=2) + "\n"
    return files
