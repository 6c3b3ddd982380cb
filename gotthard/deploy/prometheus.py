"""``gotthard deploy render --target prometheus``: scrape configs of every role.

One job per role and cluster of the site model (``gotthard-<role>-<site>-<cluster>``),
so that every series carries the ``site`` and ``cluster`` labels of the cluster it came
from. Targets are the ``[deploy.prometheus] targets`` of that cluster, else a file_sd
file ``FILE_SD_DIR/<role>/<site>-<cluster>.yml`` that the site's inventory fills.
"""

from __future__ import annotations

from typing import Any

from gotthard.config import Config
from gotthard.deploy.manifest import dump
from gotthard.deploy.roles import SCRAPED
from gotthard.deploy.settings import PrometheusDeploy

#: The rendered file: a ``scrape_configs`` list.
SCRAPE_FILE = "gotthard-scrape-configs.yml"


def clusters(cfg: Config) -> list[tuple[str, str]]:
    """(site, cluster) of every cluster of the site model."""
    found = [
        (site_name, cluster_name)
        for site_name, site in cfg.site_model.items()
        for cluster_name in site.clusters
    ]
    return found or [(cfg.site, cfg.cluster)]


def scrape_configs(cfg: Config, settings: PrometheusDeploy) -> list[dict[str, Any]]:
    jobs = []
    for site, cluster in clusters(cfg):
        for role in SCRAPED:
            job: dict[str, Any] = {
                "job_name": f"{role.full_name}-{site}-{cluster}",
                "scrape_interval": settings.scrape_interval,
                "metrics_path": "/metrics",
            }
            static = settings.targets.get(cluster, {}).get(role.name)
            if static:
                job["static_configs"] = [{"targets": list(static)}]
            else:
                path = f"{settings.file_sd_dir}/{role.name}/{site}-{cluster}.yml"
                job["file_sd_configs"] = [{"files": [path]}]
            # the site model names the cluster, not the target's own labels
            job["relabel_configs"] = [
                {"target_label": "site", "replacement": site},
                {"target_label": "cluster", "replacement": cluster},
            ]
            jobs.append(job)
    return jobs


def render(cfg: Config, settings: PrometheusDeploy) -> dict[str, str]:
    """``gotthard-scrape-configs.yml``: the jobs to add to prometheus.yml."""
    header = (
        "# Rendered by `gotthard deploy render --target prometheus`: add these jobs to the\n"
        "# scrape_configs of prometheus.yml (Prometheus >= 2.43 can include this file\n"
        "# as it is with scrape_config_files).\n"
    )
    return {SCRAPE_FILE: header + dump({"scrape_configs": scrape_configs(cfg, settings)})}
