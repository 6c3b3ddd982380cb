"""``gotthard deploy render --target local``: every site of the site model as processes on
this machine, from the one generator of runtime files. Checked here without starting
anything: the files pass ``promtool check config`` and ``amtool check-config``, each
role's command line is the systemd unit's, each cluster's site file loads with its own
site, cluster and state; the sandbox starts exactly these (tests/sandbox)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from gotthard import config
from gotthard.deploy.manifest import dump_toml
from gotthard.deploy.roles import ROLES
from gotthard.deploy.settings import DeployConfig
from gotthard.monitoring import rules
from gotthard.monitoring.dashboards import lint
from tests.deploy.rendering import FIXTURES, render
from tests.support.cli import ROOT, gotthard, run
from tests.support.monitoring import binary, load_yaml

LOCAL = FIXTURES / "local.toml"
#: name -> (site, cluster, kind) of every process the fixture's site model runs here:
#: each site's Prometheus and Alertmanager, the global view, each role at its targets.
PROCESSES = {
    **{
        f"{site}-{kind}": (site, "", kind)
        for site in ("zurich", "lugano")
        for kind in ("alertmanager", "prometheus")
    },
    "global-prometheus": ("", "", "global-prometheus"),
    **{
        f"{cluster}-{role}": (site, cluster, role)
        for site, cluster, roles in (
            ("zurich", "alps", ("node-exporter", "slurm-exporter")),
            ("zurich", "alps-k8s", ("dr", "runbooks")),
            ("lugano", "todi", ("slurm-exporter", "dr", "runbooks")),
        )
        for role in roles
    },
}


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return render("local", tmp_path_factory.mktemp("local"), LOCAL)


@pytest.fixture(scope="module")
def processes(out: Path) -> dict[str, dict[str, Any]]:
    listed = json.loads((out / "processes.json").read_text())["processes"]
    return {p["name"]: p for p in listed}


def _jobs(path: Path) -> dict[str, dict[str, Any]]:
    return {job["job_name"]: job for job in load_yaml(path)["scrape_configs"]}


def test_every_process_of_the_site_model_is_listed(processes: dict[str, dict[str, Any]]) -> None:
    assert {n: (p["site"], p["cluster"], p["kind"]) for n, p in processes.items()} == PROCESSES
    prometheus = processes["zurich-prometheus"]
    assert prometheus["url"] == "http://127.0.0.1:19190"
    assert prometheus["ready_url"] == "http://127.0.0.1:19190/-/ready"
    assert "--web.listen-address=127.0.0.1:19190" in prometheus["argv"]
    assert processes["todi-dr"]["ready_url"] == "http://127.0.0.1:20079/metrics"
    assert processes["todi-runbooks"]["ready_url"] == "http://127.0.0.1:20078/healthz"


def test_the_alertmanagers_of_both_sites_gossip_as_one_cluster(
    processes: dict[str, dict[str, Any]], out: Path
) -> None:
    for site, own in (("zurich", 19194), ("lugano", 19294)):
        argv = processes[f"{site}-alertmanager"]["argv"]
        assert f"--config.file={out / 'alertmanager.yml'}" in argv
        assert f"--cluster.listen-address=127.0.0.1:{own}" in argv
        peers = [a.removeprefix("--cluster.peer=") for a in argv if a.startswith("--cluster.peer")]
        assert peers == ["127.0.0.1:19194", "127.0.0.1:19294"]


def _unit_args(units: Path, role: str) -> list[str]:
    """The arguments of the unit's ExecStart after ``gotthard --config FILE``."""
    text = (units / f"gotthard-{role}.service").read_text()
    (line,) = [x for x in text.splitlines() if x.startswith("ExecStart=")]
    return shlex.split(line.removeprefix("ExecStart="))[3:]


def test_each_role_runs_the_systemd_units_command_line(
    processes: dict[str, dict[str, Any]], out: Path, tmp_path: Path
) -> None:
    units = render("systemd", tmp_path / "units", LOCAL)
    for name, (site, cluster, kind) in PROCESSES.items():
        if kind not in {role.name for role in ROLES}:
            continue
        argv = processes[name]["argv"]
        site_file = out / site / cluster / "gotthard.toml"
        assert argv[1:5] == ["-m", "gotthard", "--config", str(site_file)], name
        listen = f"--listen={processes[name]['url'].removeprefix('http://')}"
        unit = [listen if a.startswith("--listen=") else a for a in _unit_args(units, kind)]
        # the unit adds where systemd keeps the webhook's token and audit log
        assert argv[5:] == unit[: len(argv) - 5], name
        assert listen in argv


def test_each_clusters_site_file_names_it_and_keeps_its_state_apart(out: Path) -> None:
    source = tomllib.loads(LOCAL.read_text())
    for site, cluster in (("zurich", "alps"), ("zurich", "alps-k8s"), ("lugano", "todi")):
        where = out / site / cluster
        cfg = config.load(where / "gotthard.toml")
        assert (cfg.site, cfg.cluster) == (site, cluster)
        assert cfg.sites == config.load(LOCAL).sites  # the whole site model, unchanged
        assert cfg.deploy == config.load(LOCAL).deploy
        assert cfg.runbooks.token_file == source["runbooks"]["token_file"]
        assert cfg.runbooks.audit_log == str(where / "runbooks-audit.jsonl")
        assert cfg.runbooks.kill_switch_file == str(where / "runbooks.disabled")
        assert cfg.dr.jobstore_url == f"sqlite:///{where / 'dr-jobs.sqlite'}"
        assert cfg.dr.placement.state_file == str(where / "dr-placement.json")


def test_each_site_prometheus_scrapes_its_clusters_and_alerts_every_site(out: Path) -> None:
    zurich = load_yaml(out / "zurich" / "prometheus.yml")
    assert zurich["global"]["external_labels"] == {"site": "zurich"}
    assert zurich["global"]["scrape_interval"] == "15s"
    assert zurich["rule_files"] == [
        str(out / "rules" / "recording.rules.yml"),
        str(out / "rules" / "alerts.rules.yml"),
    ]
    targets = zurich["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert targets == ["127.0.0.1:19193", "127.0.0.1:19293"]
    assert set(_jobs(out / "zurich" / "prometheus.yml")) == {
        "gotthard-node-exporter-zurich-alps",
        "gotthard-slurm-exporter-zurich-alps",
        "gotthard-dr-zurich-alps-k8s",
        "gotthard-runbooks-zurich-alps-k8s",
        "apiserver-zurich-alps-k8s",
        "prometheus-zurich",
        "alertmanager-zurich",
    }
    own = _jobs(out / "lugano" / "prometheus.yml")
    assert own["prometheus-lugano"]["static_configs"] == [{"targets": ["127.0.0.1:19290"]}]
    assert own["alertmanager-lugano"]["static_configs"] == [{"targets": ["127.0.0.1:19293"]}]
    assert own["alertmanager-lugano"]["relabel_configs"] == [
        {"target_label": "site", "replacement": "lugano"},
        {"target_label": "cluster", "replacement": "todi"},
        {"target_label": "job", "replacement": "alertmanager"},
    ]
    lugano = _jobs(out / "lugano" / "prometheus.yml")
    assert lugano["lustre-oss-lugano-todi"]["relabel_configs"] == [
        {"target_label": "site", "replacement": "lugano"},
        {"target_label": "cluster", "replacement": "todi"},
        {"target_label": "job", "replacement": "lustre-oss"},
    ]
    api = _jobs(out / "zurich" / "prometheus.yml")["apiserver-zurich-alps-k8s"]
    assert api["scheme"] == "https"
    assert api["relabel_configs"][-1] == {"target_label": "job", "replacement": "apiserver"}


def test_the_dr_jobs_keep_the_site_the_daemon_exports(out: Path) -> None:
    """The daemon's series name the site they describe: honor_labels keeps that site (no
    ``exported_site``), and ``cluster`` becomes that site's Kubernetes cluster, whose
    webhook acts on the alert."""
    for site, cluster in (("zurich", "alps-k8s"), ("lugano", "todi")):
        job = _jobs(out / site / "prometheus.yml")[f"gotthard-dr-{site}-{cluster}"]
        assert job["honor_labels"] is True
        assert job["metric_relabel_configs"] == [
            {
                "source_labels": ["site"],
                "regex": "zurich",
                "target_label": "cluster",
                "replacement": "alps-k8s",
            },
            {
                "source_labels": ["site"],
                "regex": "lugano",
                "target_label": "cluster",
                "replacement": "todi",
            },
        ]


def test_the_global_view_federates_aggregates_and_what_global_alerts_read(out: Path) -> None:
    """The global view gets the recording rules' aggregates (one series per site, cluster,
    partition, file system or target) and the global alerts' selectors; never a raw
    series, nor a recorded series per node, NIC or job."""
    jobs = _jobs(out / "global" / "prometheus.yml")
    assert set(jobs) == {"federate-zurich", "federate-lugano"}
    job = jobs["federate-zurich"]
    assert job["honor_labels"] is True and job["metrics_path"] == "/federate"
    assert job["static_configs"] == [{"targets": ["127.0.0.1:19190"]}]
    recorded, *selectors = job["params"]["match[]"]
    names = set(recorded.removeprefix('{__name__=~"').removesuffix('"}').split("|"))
    recording = {
        rule["record"]
        for group in load_yaml(out / "rules" / "recording.rules.yml")["groups"]
        for rule in group["rules"]
    }
    assert names <= recording
    per_entity = {r for r in recording if re.match(r"[a-z_]*_(instance|node|job_id)[_:]", r)}
    assert per_entity and not names & per_entity
    assert {r for r in recording if r.startswith(("site_cluster:", "site_cluster_partition:"))} <= (
        names
    )
    # what the global alerts read, with their matchers; no raw series beyond them
    groups = load_yaml(out / "rules" / "global-alerts.rules.yml")["groups"]
    read = {n for g in groups for r in g["rules"] for n in lint.metric_names(r["expr"])}
    assert {lint.analyse(s).metric_names.pop() for s in selectors} == read
    assert 'up{job=~"federate-.+"}' in selectors
    for raw in (
        "gotthard_slurm_up",
        "gotthard_gpu_utilization_ratio",
        "gotthard_gpu_info",
        "gotthard_slurm_job_info",
    ):
        assert raw not in names and not any(s.startswith(raw) for s in selectors), raw
    # a federation target's up names the site (and home cluster) it federates
    assert jobs["federate-lugano"]["relabel_configs"] == [
        {"target_label": "site", "replacement": "lugano"},
        {"target_label": "cluster", "replacement": "todi"},
    ]
    assert jobs["federate-zurich"]["relabel_configs"][1]["replacement"] == "alps-k8s"


def test_the_global_view_evaluates_the_global_rules_on_what_it_federates(out: Path) -> None:
    """The global view loads the global groups only, alerts every site's Alertmanagers,
    and federates every series those rules read; a site Prometheus never loads them."""
    config = load_yaml(out / "global" / "prometheus.yml")
    assert config["rule_files"] == [str(out / "rules" / "global-alerts.rules.yml")]
    targets = config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert targets == ["127.0.0.1:19193", "127.0.0.1:19293"]
    groups = load_yaml(out / "rules" / "global-alerts.rules.yml")["groups"]
    placed = {rule["alert"] for group in groups for rule in group["rules"]}
    assert placed == {r.name for r in rules.ALERTS if r.placement == "global"} != set()
    match = _jobs(out / "global" / "prometheus.yml")["federate-zurich"]["params"]["match[]"]
    federated = {n for selector in match for n in lint.analyse(selector).metric_names}
    read = {n for g in groups for r in g["rules"] for n in lint.metric_names(r["expr"])}
    assert "gotthard_dr_leader" in read and read <= federated
    for site in ("zurich", "lugano"):
        site_rules = load_yaml(out / site / "prometheus.yml")["rule_files"]
        assert not any("global" in path for path in site_rules), site


@pytest.mark.parametrize("name", [r.name for r in rules.ALERTS if r.placement == "site"])
def test_a_site_rule_reads_nothing_only_the_global_view_has(name: str) -> None:
    """The federation jobs (``federate-*``) exist only at the global view: a rule about
    them (a site that stopped sending) must be placed ``global``, else it never fires."""
    selects = re.findall(r'job=~?"([^"]*)"', rules.alert(name).expr)
    assert not [s for s in selects if "federate" in s], f"{name}: place it at the global view"


def test_promtool_and_amtool_accept_the_rendered_files(out: Path, tmp_path: Path) -> None:
    for name in ("zurich", "lugano", "global"):
        check = run([binary("promtool"), "check", "config", str(out / name / "prometheus.yml")])
        assert check.returncode == 0, check.stdout + check.stderr
    check = run([binary("amtool"), "check-config", str(out / "alertmanager.yml")])
    assert check.returncode == 0, check.stdout + check.stderr
    # the checks can fail: two jobs of one name, a route to a receiver that is not there
    broken = load_yaml(out / "zurich" / "prometheus.yml")
    broken["scrape_configs"].append(broken["scrape_configs"][0])
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(broken))
    assert run([binary("promtool"), "check", "config", str(tmp_path / "prometheus.yml")]).returncode
    manager = load_yaml(out / "alertmanager.yml")
    manager["route"]["receiver"] = "nobody"
    (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(manager))
    assert run([binary("amtool"), "check-config", str(tmp_path / "alertmanager.yml")]).returncode


def test_the_webhook_of_each_site_comes_from_its_runbooks_target(out: Path) -> None:
    manager = load_yaml(out / "alertmanager.yml")
    hooks = {
        r["name"]: r["webhook_configs"][0]
        for r in manager["receivers"]
        if r["name"].startswith("runbook-webhook-")
    }
    assert {name: hook["url"] for name, hook in hooks.items()} == {
        "runbook-webhook-zurich": "http://127.0.0.1:19978/alerts",
        "runbook-webhook-lugano": "http://127.0.0.1:20078/alerts",
    }
    token = hooks["runbook-webhook-zurich"]["http_config"]["authorization"]["credentials_file"]
    assert token == "/etc/gotthard/runbooks-webhook.token"  # [runbooks] token_file


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            '[deploy.prometheus]\nscrape_interval = "5s"\nscrape_timeout = "10s"\n',
            "deploy.prometheus.scrape_timeout: longer than scrape_interval",
        ),
        ('[deploy.prometheus]\nscrape_interval = "5 s"\n', "deploy.prometheus.scrape_interval"),
        ('[deploy.alertmanager.webhook_urls]\nbern = "http://x/alerts"\n', "bern is not a site"),
        ("[deploy.alertmanager.ports]\nbern = 9093\n", "deploy.alertmanager.ports: bern"),
        ('[deploy.prometheus.targets.alps]\nexporter = ["x:1"]\n', "unknown role(s) exporter"),
    ],
)
def test_a_bad_setting_is_refused_naming_its_key(tmp_path: Path, table: str, message: str) -> None:
    text = LOCAL.read_text().split("[deploy.prometheus]")[0] + table
    site = tmp_path / "site.toml"
    site.write_text(text)
    result = gotthard(
        "--config", str(site), "deploy", "render", "--target", "local", "--out", str(tmp_path / "o")
    )
    assert result.returncode == 2, result.stdout
    assert message in result.stderr, result.stderr
    assert not (tmp_path / "o").exists()


def test_the_example_site_file_lists_every_deploy_key_with_its_default() -> None:
    raw = tomllib.loads((ROOT / "docs" / "site.example.toml").read_text())["deploy"]
    assert set(raw) == set(DeployConfig.model_fields)
    for table, model in ((name, type(getattr(DeployConfig(), name))) for name in raw):
        assert set(raw[table]) == set(model.model_fields), table
        assert model.model_validate(raw[table]) == model(), table


def test_site_files_are_written_back_as_read() -> None:
    for path in (ROOT / "docs" / "site.example.toml", LOCAL):
        document = tomllib.loads(path.read_text())
        assert tomllib.loads(dump_toml(document)) == document, path


def test_one_module_writes_scrape_configs_and_none_federates_everything() -> None:
    def grep(text: str) -> list[str]:
        found = subprocess.run(
            ["git", "grep", "-l", "-F", text, "--", "gotthard/*.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        return found.stdout.split()

    assert grep("scrape_configs") == ["gotthard/deploy/prometheus.py"]
    assert grep('__name__=~".+"') == []
