"""``gotthard deploy render --target prometheus``: per role and cluster, labelled from the
site model, accepted by ``promtool check config`` inside a full Prometheus config."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gotthard.deploy.roles import SCRAPED
from tests.deploy.rendering import promtool_check_config, render

SITE_CLUSTERS = [("zurich", "alps"), ("zurich", "alps-k8s"), ("lugano", "lugano-k8s")]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = render("prometheus", tmp_path_factory.mktemp("prometheus"))
    return yaml.safe_load((out / "gotthard-scrape-configs.yml").read_text())["scrape_configs"]


def test_one_job_per_role_and_cluster_with_site_and_cluster_labels(jobs: list[dict]) -> None:
    assert len(jobs) == len(SCRAPED) * len(SITE_CLUSTERS)
    for site, cluster in SITE_CLUSTERS:
        for role in SCRAPED:
            (job,) = [j for j in jobs if j["job_name"] == f"gotthard-{role.name}-{site}-{cluster}"]
            assert job["relabel_configs"] == [
                {"target_label": "site", "replacement": site},
                {"target_label": "cluster", "replacement": cluster},
            ]
    (slurm,) = [j for j in jobs if j["job_name"] == "gotthard-slurm-exporter-zurich-alps"]
    assert slurm["static_configs"] == [{"targets": ["slurm-ctl.zurich.example:9880"]}]


def test_promtool_accepts_them_in_a_full_config(jobs: list[dict], tmp_path: Path) -> None:
    config = {
        "global": {"scrape_interval": "30s", "evaluation_interval": "30s"},
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": ["localhost:9093"]}]}]},
        "scrape_configs": [
            {"job_name": "prometheus", "static_configs": [{"targets": ["localhost:9090"]}]},
            *jobs,
        ],
    }
    path = tmp_path / "prometheus.yml"
    code, output = promtool_check_config(config, path)
    assert code == 0, output
    # the check can fail: a duplicate job name is refused
    config["scrape_configs"].append(jobs[0])
    assert promtool_check_config(config, path)[0] != 0
