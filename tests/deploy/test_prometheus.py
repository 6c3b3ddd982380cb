"""``gotthard deploy render --target prometheus``: scrape jobs per role and cluster,
labelled from the site model (the DR daemon's keeping the site it exports), and each
Prometheus' complete configuration, accepted by ``promtool check config``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gotthard.deploy.roles import SCRAPED
from tests.deploy.rendering import SITE, promtool_check_config, render

SITE_CLUSTERS = [("zurich", "alps"), ("zurich", "alps-k8s"), ("lugano", "lugano-k8s")]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = render("prometheus", tmp_path_factory.mktemp("prometheus"))
    return yaml.safe_load((out / "gotthard-scrape-configs.yml").read_text())["scrape_configs"]


#: The roles that run on each cluster of the test site: a Slurm exporter only on the Slurm
#: cluster, the DR daemon only on each site's Kubernetes cluster.
RUNNING = {
    ("zurich", "alps"): {"node-exporter", "slurm-exporter", "runbooks"},
    ("zurich", "alps-k8s"): {"node-exporter", "dr", "runbooks"},
    ("lugano", "lugano-k8s"): {"node-exporter", "dr", "runbooks"},
}


def test_one_job_per_role_where_it_runs_with_site_and_cluster_labels(jobs: list[dict]) -> None:
    assert len(jobs) == sum(len(roles) for roles in RUNNING.values())
    for site, cluster in SITE_CLUSTERS:
        for role in SCRAPED:
            name = f"gotthard-{role.name}-{site}-{cluster}"
            found = [j for j in jobs if j["job_name"] == name]
            if role.name not in RUNNING[site, cluster]:
                assert not found, f"{name}: {role.name} does not run on {cluster}"
                continue
            (job,) = found
            assert job["relabel_configs"] == [
                {"target_label": "site", "replacement": site},
                {"target_label": "cluster", "replacement": cluster},
            ]
    (slurm,) = [j for j in jobs if j["job_name"] == "gotthard-slurm-exporter-zurich-alps"]
    assert slurm["static_configs"] == [{"targets": ["slurm-ctl.zurich.example:9880"]}]


def test_static_targets_put_a_role_where_the_model_does_not(tmp_path: Path) -> None:
    site = tmp_path / "site.toml"
    site.write_text(
        SITE.read_text() + "\n[deploy.prometheus.targets.lugano-k8s]\n"
        'slurm-exporter = ["lugano-slurm:9880"]\n'
    )
    out = render("prometheus", tmp_path / "out", site)
    names = {
        j["job_name"]
        for j in yaml.safe_load((out / "gotthard-scrape-configs.yml").read_text())["scrape_configs"]
    }
    assert "gotthard-slurm-exporter-lugano-lugano-k8s" in names
    assert "gotthard-dr-zurich-alps" not in names


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


def test_the_dr_jobs_keep_the_site_label_the_daemon_exports(jobs: list[dict]) -> None:
    """The DR daemon's series name the site they describe; without honor_labels that site
    would become ``exported_site`` and every DR alert would name the scraping site."""
    kube_clusters = [
        {"source_labels": ["site"], "regex": site, "target_label": "cluster", "replacement": kube}
        for site, kube in (("zurich", "alps-k8s"), ("lugano", "lugano-k8s"))
    ]
    for site, cluster in SITE_CLUSTERS:
        if "dr" not in RUNNING[site, cluster]:
            continue
        (dr,) = [j for j in jobs if j["job_name"] == f"gotthard-dr-{site}-{cluster}"]
        assert dr["honor_labels"] is True
        assert dr["metric_relabel_configs"] == kube_clusters
    others = [j for j in jobs if not j["job_name"].startswith("gotthard-dr-")]
    assert not any(j.get("honor_labels") for j in others)


def test_each_prometheus_gets_a_complete_configuration(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    out = render("prometheus", tmp_path_factory.mktemp("prometheus-full"))
    # only Zurich names a Prometheus in the test site
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["rules", "zurich"]
    config = yaml.safe_load((out / "zurich" / "prometheus.yml").read_text())
    assert config["global"]["external_labels"] == {"site": "zurich"}
    assert config["rule_files"] == [
        "/etc/prometheus/rules/gotthard/recording.rules.yml",
        "/etc/prometheus/rules/gotthard/alerts.rules.yml",
    ]
    alerting = config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert alerting == ["prometheus.zurich.example:9093"]
    assert {j["job_name"] for j in config["scrape_configs"]} == {
        f"gotthard-{role}-zurich-{cluster}"
        for cluster in ("alps", "alps-k8s")
        for role in RUNNING["zurich", cluster]
    } | {"prometheus-zurich", "alertmanager-zurich"}
    # itself and its site's Alertmanagers, labelled like every job: the alerts on rule
    # evaluation and notification failures read them (job "prometheus", "alertmanager");
    # the Prometheus of two clusters names the site's Kubernetes cluster
    own = {j["job_name"]: j for j in config["scrape_configs"]}
    assert own["prometheus-zurich"]["static_configs"] == [
        {"targets": ["prometheus.zurich.example:9090"]}
    ]
    assert own["alertmanager-zurich"]["static_configs"] == [
        {"targets": ["prometheus.zurich.example:9093"]}
    ]
    for job in ("prometheus", "alertmanager"):
        assert own[f"{job}-zurich"]["relabel_configs"] == [
            {"target_label": "site", "replacement": "zurich"},
            {"target_label": "cluster", "replacement": "alps-k8s"},
            {"target_label": "job", "replacement": job},
        ]
    # as installed: the rule files where rules_dir says
    config["rule_files"] = [str(out / "rules" / Path(f).name) for f in config["rule_files"]]
    code, output = promtool_check_config(config, tmp_path / "prometheus.yml")
    assert code == 0, output
