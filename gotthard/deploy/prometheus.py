"""Every Prometheus configuration Gotthard ships (the one module that writes
``scrape_configs``): each site Prometheus' ``prometheus.yml``, the federating global
view's, and the scrape jobs alone for a Prometheus a site already runs.

``gotthard deploy render --target prometheus`` writes them (``--target local`` and the
sandbox write the same files with paths of their own):

* per Prometheus of the site model (:func:`~gotthard.deploy.topology.prometheuses`):
  ``external_labels`` ``site`` (and ``cluster`` when it scrapes one cluster), the rule
  files, alerts to every site's Alertmanager, and the scrape jobs of its clusters;
* one job per role and cluster where the role runs (a Slurm exporter on Slurm clusters,
  the DR daemon on its site's Kubernetes cluster, static targets wherever they are
  given: :func:`runs_role`) (``gotthard-<role>-<site>-<cluster>``) whose relabelling
  sets ``site`` and ``cluster`` from the site model; targets are the ``[deploy.prometheus]
  targets`` of that cluster, else a file_sd file ``FILE_SD_DIR/<role>/<site>-<cluster>.yml``
  that the site's inventory fills. The DR daemon's series name the site they describe:
  its jobs keep the scraped labels (``honor_labels``) and set ``cluster`` to that site's
  Kubernetes cluster;
* a cluster's Kubernetes API server (targets ``apiserver``) and ``extra_targets`` are
  jobs labelled ``job="apiserver"`` and ``job="<name>"``;
* each Prometheus scrapes itself (``job="prometheus"``) and the site's main Prometheus
  its site's Alertmanagers (``job="alertmanager"``), labelled with the site and its home
  cluster (:func:`home_cluster`): the alerts on rule evaluation and notification
  failures read them;
* the global view (``[deploy.federation] listen``): ``/federate`` of every Prometheus with
  ``honor_labels``, selecting the aggregate recording rules' series and the series the
  global rules read (:func:`federation_match`), never a raw per-node, per-GPU or per-job
  series; each federation target is labelled with the site (and home cluster) of
  the Prometheus it federates, so that its ``up`` names them. It evaluates the global
  alerting groups (``global-alerts.rules.yml``, placement ``global``) and sends to every
  site's Alertmanagers; a site Prometheus loads only the site groups.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from gotthard.config import Config
from gotthard.deploy import alerting
from gotthard.deploy.manifest import RenderError, dump
from gotthard.deploy.roles import DR, SCRAPED, SLURM_EXPORTER, Role
from gotthard.deploy.settings import APISERVER, PrometheusDeploy, seconds
from gotthard.deploy.topology import (
    SitePrometheus,
    alertmanagers,
    clusters,
    prometheuses,
    url_address,
)
from gotthard.monitoring.deliver import ALERTS_FILE, GLOBAL_ALERTS_FILE, RECORDING_FILE

#: The rendered scrape jobs alone: a ``scrape_configs`` list.
SCRAPE_FILE = "gotthard-scrape-configs.yml"
#: Each Prometheus' file (``<name>/prometheus.yml``) and the global view's.
CONFIG_FILE = "prometheus.yml"
GLOBAL = "global"
RULES_DIR = "rules"
#: Labels naming one of many entities (node, GPU, NIC, job, user): a recording rule that
#: keeps one is not federated to the global view (:func:`is_aggregate`).
PER_ENTITY_LABELS = ("instance", "node", "job_id", "device", "gpu", "uuid", "user", "pod")
#: The ``job`` label of each Prometheus' scrape of itself, and of its site's Alertmanagers.
PROMETHEUS_JOB = "prometheus"
ALERTMANAGER_JOB = "alertmanager"


def _interval(settings: PrometheusDeploy, interval: str = "") -> dict[str, str]:
    """``scrape_interval`` and a ``scrape_timeout`` no longer than it."""
    interval = interval or settings.scrape_interval
    timeout = min(settings.scrape_timeout, interval, key=seconds)
    return {"scrape_interval": interval, "scrape_timeout": timeout}


def _labels(site: str, cluster: str, job: str = "") -> list[dict[str, str]]:
    """Target relabelling: the site model names the cluster, not the target's own labels."""
    rules = [
        {"target_label": "site", "replacement": site},
        {"target_label": "cluster", "replacement": cluster},
    ]
    return [*rules, {"target_label": "job", "replacement": job}] if job else rules


def _dr_clusters(cfg: Config) -> list[dict[str, Any]]:
    """A DR series' ``cluster``: the Kubernetes cluster of the site the series names (the
    webhook that owns that cluster acts on its alerts)."""
    return [
        {"source_labels": ["site"], "regex": name, "target_label": "cluster", "replacement": kube}
        for name, site in cfg.site_model.items()
        for kube in [site.kube_cluster]
        if kube
    ]


def runs_role(cfg: Config, site: str, cluster: str, role: Role) -> bool:
    """Whether *role* runs on *cluster* of *site*: a Slurm exporter only on a Slurm
    cluster (one that names its slurm.conf, slurmrestd or Slurm JWT), the DR daemon only
    on its site's Kubernetes cluster; the other roles on every cluster. Static targets of
    the role in ``[deploy.prometheus.targets]`` say it runs there, whatever the model."""
    if cfg.deploy.prometheus.targets.get(cluster, {}).get(role.name):
        return True
    if role == SLURM_EXPORTER:
        conf = cfg.site_model[site].clusters.get(cluster)
        return conf is not None and conf.runs_slurm
    if role == DR:
        return cfg.site_model[site].kube_cluster == cluster
    return True


def cluster_jobs(cfg: Config, site: str, cluster: str) -> list[dict[str, Any]]:
    """The scrape jobs of one cluster: each role that runs there (:func:`runs_role`), its
    API server, its extra targets."""
    settings = cfg.deploy.prometheus
    targets = settings.targets.get(cluster, {})
    jobs = []
    for role in SCRAPED:
        if not runs_role(cfg, site, cluster, role):
            continue
        job: dict[str, Any] = {
            "job_name": f"{role.full_name}-{site}-{cluster}",
            **_interval(settings),
            "metrics_path": "/metrics",
        }
        if targets.get(role.name):
            job["static_configs"] = [{"targets": list(targets[role.name])}]
        elif settings.file_sd_dir:
            path = f"{settings.file_sd_dir}/{role.name}/{site}-{cluster}.yml"
            job["file_sd_configs"] = [{"files": [path]}]
        else:
            continue
        if role == DR:
            # the daemon's series name the site they describe: keep it (no exported_site)
            job["honor_labels"] = True
            job["metric_relabel_configs"] = _dr_clusters(cfg)
        job["relabel_configs"] = _labels(site, cluster)
        jobs.append(job)
    if targets.get(APISERVER):
        api = settings.apiserver
        job = {
            "job_name": f"{APISERVER}-{site}-{cluster}",
            **_interval(settings, api.scrape_interval),
            "metrics_path": "/metrics",
            "scheme": api.scheme,
        }
        if api.ca_file:
            job["tls_config"] = {"ca_file": api.ca_file}
        if api.bearer_token_file:
            job["authorization"] = {"credentials_file": api.bearer_token_file}
        job["static_configs"] = [{"targets": list(targets[APISERVER])}]
        job["relabel_configs"] = _labels(site, cluster, APISERVER)
        jobs.append(job)
    for name, addresses in settings.extra_targets.get(cluster, {}).items():
        jobs.append(
            {
                "job_name": f"{name}-{site}-{cluster}",
                **_interval(settings),
                "static_configs": [{"targets": list(addresses)}],
                "relabel_configs": _labels(site, cluster, name),
            }
        )
    return jobs


def home_cluster(cfg: Config, prom: SitePrometheus) -> str:
    """The ``cluster`` of what belongs to a Prometheus rather than to one of its clusters
    (itself, its site's Alertmanagers, its federation target at the global view): its
    one cluster, else its site's Kubernetes cluster where it scrapes that, else its
    first cluster."""
    if len(prom.clusters) == 1:
        return prom.clusters[0]
    kube = cfg.site_model[prom.site].kube_cluster
    return kube if kube in prom.clusters else prom.clusters[0]


def _main_of_site(cfg: Config, prom: SitePrometheus) -> bool:
    """Whether *prom* is its site's main Prometheus (the site's ``prometheus_url``, else
    the first of the site): the one that scrapes the site's Alertmanagers."""
    of_site = [p for p in prometheuses(cfg, every_cluster=False) if p.site == prom.site]
    main = next((p for p in of_site if not p.own), of_site[0])
    return main.name == prom.name


def self_jobs(cfg: Config, prom: SitePrometheus) -> list[dict[str, Any]]:
    """The Prometheus' scrape of its own ``/metrics`` (rule evaluation failures, its
    notification queue) and, at the site's main Prometheus, of the site's Alertmanagers
    (notification failures), each labelled ``site`` and :func:`home_cluster`."""
    settings = cfg.deploy.prometheus
    cluster = home_cluster(cfg, prom)
    parts = urlsplit(prom.url)
    jobs: list[dict[str, Any]] = [
        {
            "job_name": f"{PROMETHEUS_JOB}-{prom.name}",
            **_interval(settings),
            "scheme": parts.scheme or "http",
            "metrics_path": f"{parts.path.rstrip('/')}/metrics",
            "static_configs": [{"targets": [url_address(prom.url)]}],
            "relabel_configs": _labels(prom.site, cluster, PROMETHEUS_JOB),
        }
    ]
    managers = alertmanagers(cfg)
    if prom.site in managers.hosts and _main_of_site(cfg, prom):
        jobs.append(
            {
                "job_name": f"{ALERTMANAGER_JOB}-{prom.site}",
                **_interval(settings),
                "metrics_path": "/metrics",
                "static_configs": [{"targets": managers.addresses([prom.site])}],
                "relabel_configs": _labels(prom.site, cluster, ALERTMANAGER_JOB),
            }
        )
    return jobs


def scrape_configs(cfg: Config) -> list[dict[str, Any]]:
    """The jobs of every cluster of the site model."""
    return [job for site, cluster in clusters(cfg) for job in cluster_jobs(cfg, site, cluster)]


def alerting_section(targets: list[str], drop: tuple[str, ...] = ()) -> dict[str, Any]:
    """prometheus.yml's ``alerting``: every Alertmanager of every site; labels in *drop*
    (an HA pair's replica label) are removed from the alerts first."""
    section: dict[str, Any] = {}
    if drop:
        section["alert_relabel_configs"] = [{"action": "labeldrop", "regex": "|".join(drop)}]
    section["alertmanagers"] = [{"static_configs": [{"targets": targets}]}]
    return section


def rule_files(rules_dir: str) -> list[str]:
    return [f"{rules_dir}/{RECORDING_FILE}", f"{rules_dir}/{ALERTS_FILE}"]


def site_config(cfg: Config, prom: SitePrometheus, rules_dir: str) -> dict[str, Any]:
    """One site Prometheus' complete ``prometheus.yml``."""
    settings = cfg.deploy.prometheus
    document: dict[str, Any] = {
        "global": {
            **_interval(settings),
            "evaluation_interval": settings.evaluation_interval,
            "external_labels": prom.external_labels,
        },
        "rule_files": rule_files(rules_dir),
    }
    managers = alertmanagers(cfg).addresses()
    if managers:
        document["alerting"] = alerting_section(managers)
    jobs = [job for cluster in prom.clusters for job in cluster_jobs(cfg, prom.site, cluster)]
    document["scrape_configs"] = [*jobs, *self_jobs(cfg, prom)]
    return document


def global_rule_names(cfg: Config) -> set[str]:
    """The series the global alerting groups read (placement ``global``)."""
    from gotthard.monitoring.dashboards import lint

    return {name for rule in _global_rules(cfg) for name in lint.metric_names(rule.promql)}


def _global_rules(cfg: Config) -> list[Any]:
    from gotthard.monitoring import rules

    return [rule for rule in rules.alerts(cfg.monitoring) if rule.placement == "global"]


def global_rule_selectors(cfg: Config) -> list[str]:
    """The vector selectors of the global alerting groups, as they write them (with their
    matchers: ``up{job=~"federate-.+"}`` selects only the global view's own jobs)."""
    from gotthard.monitoring.dashboards import lint

    selectors = [
        selector.written
        for rule in _global_rules(cfg)
        for selector in lint.analyse(rule.promql).selectors
    ]
    return list(dict.fromkeys(selectors))


def is_aggregate(record: str) -> bool:
    """Whether the recording rule *record* (``level:metric:operations``) keeps none of
    :data:`PER_ENTITY_LABELS` in its level: one series per site, cluster, partition, file
    system or target, not per node, GPU, NIC or job."""
    level = f"_{record.partition(':')[0]}_"
    return not any(f"_{label}_" in level for label in PER_ENTITY_LABELS)


def federated_names(cfg: Config) -> list[str]:
    """The recording rules whose series the global view federates: those of
    :func:`is_aggregate`, by the rules' own names (``gotthard rules build``)."""
    from gotthard.monitoring import deliver

    records = [
        rule["record"]
        for group in deliver.recording_groups(cfg.monitoring)
        for rule in group["rules"]
        if "record" in rule
    ]
    return sorted(record for record in set(records) if is_aggregate(record))


def federation_match(cfg: Config) -> list[str]:
    """The global view's ``match[]`` selectors: the aggregate recording rules
    (:func:`federated_names`), the selectors of the global alerting groups
    (:func:`global_rule_selectors`) and ``[deploy.federation] match``. Never a raw
    per-node, per-GPU or per-job series: those stay at the site, read through Thanos
    Query in production (docs/multisite.md)."""
    names = "|".join(federated_names(cfg))
    return [f'{{__name__=~"{names}"}}', *global_rule_selectors(cfg), *cfg.deploy.federation.match]


def global_config(cfg: Config, rules_dir: str) -> dict[str, Any]:
    """The global view's ``prometheus.yml``: federates every site Prometheus, keeping the
    labels each site gave (``honor_labels``) and its external labels; each federation
    target carries the site and home cluster of the Prometheus it federates (the labels
    of its ``up``, which the federated series' own labels override). It evaluates the
    global alerting groups from *rules_dir* and alerts every site's Alertmanagers."""
    settings = cfg.deploy.prometheus
    match = federation_match(cfg)
    jobs = []
    for prom in prometheuses(cfg, every_cluster=False):
        parts = urlsplit(prom.url)
        jobs.append(
            {
                "job_name": f"federate-{prom.name}",
                "honor_labels": True,
                "scheme": parts.scheme or "http",
                "metrics_path": f"{parts.path.rstrip('/')}/federate",
                "params": {"match[]": match},
                "static_configs": [{"targets": [url_address(prom.url)]}],
                "relabel_configs": _labels(prom.site, home_cluster(cfg, prom)),
            }
        )
    document: dict[str, Any] = {
        "global": {
            **_interval(settings, cfg.deploy.federation.scrape_interval),
            "evaluation_interval": settings.evaluation_interval,
        },
        "rule_files": [f"{rules_dir}/{GLOBAL_ALERTS_FILE}"],
    }
    managers = alertmanagers(cfg).addresses()
    if managers:
        document["alerting"] = alerting_section(managers)
    document["scrape_configs"] = jobs
    return document


def config_files(cfg: Config, rules_dir: str) -> dict[str, str]:
    """``<name>/prometheus.yml`` of each Prometheus, and ``global/prometheus.yml`` when a
    federating global view is configured; the rule files are read from *rules_dir*."""
    header = "# Rendered by `gotthard deploy render` from the site model; do not edit.\n"
    files = {}
    for prom in prometheuses(cfg, every_cluster=False):
        if prom.name == GLOBAL:
            raise RenderError(
                f"a Prometheus named {GLOBAL!r} would be the global view's; rename it"
            )
        files[f"{prom.name}/{CONFIG_FILE}"] = header + dump(site_config(cfg, prom, rules_dir))
    if cfg.deploy.federation.listen:
        files[f"{GLOBAL}/{CONFIG_FILE}"] = header + dump(global_config(cfg, rules_dir))
    return files


def rule_documents(cfg: Config) -> dict[str, str]:
    """``rules/<file>``: the recording and alerting rules, tuned by ``[monitoring]``."""
    from gotthard.monitoring import deliver

    links = cfg.deploy.kubernetes  # the site's runbook and dashboard base URLs
    documents = deliver.rule_documents(
        "files",
        runbook_base_url=links.runbook_base_url,
        dashboard_base_url=links.dashboard_base_url,
        monitoring=cfg.monitoring,
    )
    return {f"{RULES_DIR}/{name}": text for name, text in documents.items()}


def render(cfg: Config) -> dict[str, str]:
    """``--target prometheus``: the scrape jobs alone, each Prometheus' and the global
    view's prometheus.yml, the rules and ``alertmanager.yml``."""
    header = (
        "# Rendered by `gotthard deploy render --target prometheus`: add these jobs to the\n"
        "# scrape_configs of prometheus.yml (Prometheus >= 2.43 can include this file\n"
        "# as it is with scrape_config_files).\n"
    )
    files = {SCRAPE_FILE: header + dump({"scrape_configs": scrape_configs(cfg)})}
    files.update(config_files(cfg, cfg.deploy.prometheus.rules_dir))
    files.update(rule_documents(cfg))
    files[alerting.CONFIG_FILE] = alerting.config_text(cfg)
    return files
