"""Dashboards: deterministic build, offline lint, known metric names, live check.

The live test runs a real Prometheus (1 s scrape and rule interval, Gotthard's recording
rules loaded) that scrapes real sources only:

* the real ``gotthard exporter`` with the ``slurm`` collector on the recorded Slurm
  22.05 output (``tests/fixtures/recorded-slurm-bin``), the ``gpu`` collector on the
  FAKE ``libnvidia-ml.so.1`` (``tests/fakenvml``) with a fake procfs that puts Slurm jobs
  1 and 2 and one Kubernetes pod on the GPUs, and the ``textfile`` collector on the files
  ``gotthard policy eval --textfile`` and ``gotthard audit kube-bench --textfile`` write;
* three more real ``gotthard exporter`` processes on trees built with
  ``tests/exporters/slingshot_tree.py`` and ``tests/exporters/lustre_tree.py``
  (:class:`~tests.monitoring.live_sources.LiveTrees`): a compute node (``slingshot`` +
  Lustre client), a Lustre OSS and a Lustre MDS (``lustre --lustre.job-stats``, job ids =
  the recorded Slurm jobs), whose counters move once a second;
* the real DR daemon's ``/metrics`` (:class:`~tests.monitoring.live_sources.LiveDr`: the
  daemon on the Kubernetes emulator with the simulated Velero, after a backup, a drill
  and a placement round).

Each exporter is scraped twice, once labelled ``site=zurich, cluster=alps`` and once
``site=lugano, cluster=todi``, so both sites of the overview have data; the DR daemon,
whose series name the site they describe, once with ``honor_labels``.
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from gotthard.dr.metrics import DrMetrics
from gotthard.monitoring import deliver, shared
from gotthard.monitoring.components import lustre as lustre_rules
from gotthard.monitoring.dashboards import build, lint
from gotthard.monitoring.dashboards import check as live
from gotthard.policies.metrics import FAMILIES as SECURITY_FAMILIES
from gotthard.sandbox import free_ports
from tests.monitoring.gpu_sample import gpu_family_names
from tests.monitoring.live_sources import (
    LUSTRE_VERSION,
    LiveDr,
    LiveTrees,
    write_security_textfiles,
)
from tests.support.cli import gotthard, gotthard_argv, run, run_in_process
from tests.support.monitoring import Processes, instant, start_prometheus
from tests.support.wait import wait_until

#: This module's tests run on one worker (make test: --dist loadgroup), so that
#: the live Prometheus and its exporters (a module fixture) are started once, not once per worker.
pytestmark = pytest.mark.xdist_group("dashboards-live")

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
RECORDED_BIN = FIXTURES / "recorded-slurm-bin"

EXPECTED_TITLES = {
    "Gotthard / Site overview",
    "Gotthard / Slurm cluster",
    "Gotthard / GPU fleet",
    "Gotthard / Slingshot network health",
    "Gotthard / Lustre storage",
    "Gotthard / DR",
    "Gotthard / Security compliance",
    "Gotthard / Exporters",
    "Gotthard / Job",
}
SITES = (("zurich", "alps"), ("lugano", "todi"))


@pytest.fixture(scope="module")
def dashboards() -> list[dict[str, Any]]:
    return build.build_dashboards()


def by_uid(dashboards: list[dict[str, Any]], uid: str) -> dict[str, Any]:
    return next(d for d in dashboards if d["uid"] == uid)


def all_exprs(dash: dict[str, Any]) -> Iterator[str]:
    for panel in lint.iter_panels(dash):
        for target in panel.get("targets") or []:
            yield target["expr"]


def variable_selectors(dash: dict[str, Any]) -> Iterator[str]:
    for variable in dash["templating"]["list"]:
        if variable["type"] == "query":
            inner = variable["query"].removeprefix("label_values(").rsplit(",", 1)[0]
            yield inner


def used_metric_names(dashboards: list[dict[str, Any]]) -> set[str]:
    names: set[str] = set()
    for dash in dashboards:
        for expr in [*all_exprs(dash), *variable_selectors(dash)]:
            names |= lint.metric_names(expr)
    return names


def repo_module(name: str) -> ModuleType:
    """Import a helper module of the test tree (``tests.exporters.slingshot_tree``)."""
    sys.path.insert(0, str(REPO))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(REPO))


# --------------------------------------------------------------------------------------
# Build
# --------------------------------------------------------------------------------------


def test_two_builds_give_identical_bytes(tmp_path: Path) -> None:
    """Two builds in fresh interpreters with different hash seeds write the same bytes."""
    outputs = []
    for seed in ("1", "2"):
        out = tmp_path / f"build-{seed}"
        result = run(
            [
                sys.executable,
                "-c",
                "import sys; from gotthard.monitoring import deliver; "
                "deliver.write_dashboards(sys.argv[1])",
                str(out),
            ],
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        assert result.returncode == 0, result.stderr
        outputs.append({p.name: p.read_bytes() for p in sorted(out.iterdir())})
    assert outputs[0] == outputs[1]
    assert len(outputs[0]) == len(build.BUILDERS)


def test_cli_build_writes_one_file_per_dashboard_named_by_uid(tmp_path: Path) -> None:
    assert run_in_process("dashboards", "build", "--out", str(tmp_path / "out")) == 0
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    dashboards = build.build_dashboards()
    assert files == sorted(f"{d['uid']}.json" for d in dashboards)
    for dash in dashboards:
        text = (tmp_path / "out" / f"{dash['uid']}.json").read_text()
        assert json.loads(text) == dash
        assert text == build.render(dash)


def test_at_least_seven_dashboards_with_the_expected_titles(dashboards) -> None:
    assert len(dashboards) >= 7
    assert {d["title"] for d in dashboards} == EXPECTED_TITLES
    assert set(shared.DASHBOARD_UIDS.values()) == {d["uid"] for d in dashboards}


def test_alert_dashboard_links_point_at_built_dashboards(dashboards) -> None:
    """The rules area links alerts to these uids (``dashboard_url``)."""
    from gotthard.monitoring import rules

    built = {d["uid"] for d in dashboards}
    assert set(rules.DASHBOARD_UIDS.values()) <= built


def test_uids_are_stable_slugs_of_the_names(dashboards) -> None:
    for dash in dashboards:
        name = dash["title"].removeprefix(shared.TITLE_PREFIX)
        assert dash["uid"] == "gotthard-" + shared.slug(name)
        assert len(dash["uid"]) <= 40
    assert shared.uid_for("GPU fleet") == "gotthard-gpu-fleet"
    with pytest.raises(ValueError, match="longer than 40"):
        shared.uid_for("a name far too long to fit in a grafana dashboard uid")


def test_output_is_current_grafana_json_not_schema_12(dashboards) -> None:
    for dash in dashboards:
        assert dash["schemaVersion"] == build.SCHEMA_VERSION
        for key in ("rows", "style", "hideControls", "sharedCrosshair", "__inputs", "gnetId"):
            assert key not in dash
        for panel in lint.iter_panels(dash):
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert set(panel["gridPos"]) == {"h", "w", "x", "y"}
            assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
            for key in ("span", "height", "minSpan", "error", "cacheTimeout", "maxDataPoints"):
                assert key not in panel
            for target in panel["targets"]:
                assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
                assert "step" not in target and "intervalFactor" not in target
            if panel["type"] == "bargauge":
                assert "fieldOptions" not in panel["options"]
                assert panel["options"]["reduceOptions"]["calcs"] == ["lastNotNull"]


def test_site_overview_repeats_its_site_panels_side_by_side(dashboards) -> None:
    overview = by_uid(dashboards, "gotthard-site-overview")
    repeated = [p for p in overview["panels"] if p.get("repeat")]
    assert {p["title"].split(" — ")[0] for p in repeated} == {
        "Slurm",
        "GPUs",
        "Slingshot",
        "Lustre",
        "DR",
        "Compliance",
    }
    for panel in repeated:
        assert (panel["repeat"], panel["repeatDirection"], panel["maxPerRow"]) == ("site", "h", 2)
        assert panel["gridPos"]["x"] == 0 and panel["gridPos"]["w"] == 12
    site = next(v for v in overview["templating"]["list"] if v["name"] == "site")
    assert site["multi"] and site["includeAll"]


def test_every_query_filters_site_and_cluster_and_uses_the_rate_interval(dashboards) -> None:
    for dash in dashboards:
        for expr in all_exprs(dash):
            analysis = lint.analyse(expr)
            assert analysis.selectors, expr
            for selector in analysis.selectors:
                assert selector.matcher("site") == lint.Matcher("site", "=~", "$site"), expr
                assert selector.matcher("cluster") == lint.Matcher("cluster", "=~", "$cluster"), (
                    expr
                )
            for use in analysis.ranges:
                if use.function in ("rate", "irate", "increase"):
                    assert use.range == "$__rate_interval", expr


def test_gpu_job_views_join_info_as_the_many_side_and_slurm_by_cluster_and_job(
    dashboards,
) -> None:
    """The per-job records join gotthard_gpu_job_info as the many side (MIG-aware for
    tensor activity and memory); the panels add the owner by cluster and job_id."""
    records = {rule["record"]: rule["expr"] for rule in recording_rules()}
    utilisation = records["site_cluster_job_id:gotthard_gpu_utilization_ratio:sum"]
    assert "(gotthard_gpu_job_info) * on (site, cluster, instance, gpu, uuid) group_left ()" in (
        utilisation
    )
    memory = records["site_cluster_job_id:gotthard_gpu_memory_used_bytes:sum"]
    assert "on (site, cluster, instance, gpu, uuid, gpu_instance) group_left ()" in memory
    gpu = by_uid(dashboards, "gotthard-gpu-fleet")
    jobs = next(p for p in lint.iter_panels(gpu) if p["title"] == "GPU jobs")
    for target in jobs["targets"]:
        assert "on(cluster, job_id) group_left(user, account, partition)" in target["expr"]
    assert "site_cluster_job_id:gotthard_gpu_memory_used_bytes:sum{" in jobs["targets"][3]["expr"]


# --------------------------------------------------------------------------------------
# Lint
# --------------------------------------------------------------------------------------


def test_lint_passes_on_the_built_dashboards(dashboards) -> None:
    assert lint.lint_dashboards(dashboards) == []


def test_cli_lint_on_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deliver.write_dashboards(tmp_path)
    lint_argv = ("dashboards", "lint", "--dashboards", str(tmp_path))
    assert run_in_process(*lint_argv) == 0
    assert "0 lint problem(s)" in capsys.readouterr().out
    broken = json.loads((tmp_path / "gotthard-gpu-fleet.json").read_text())
    broken["panels"][0]["fieldConfig"]["defaults"].pop("unit")
    (tmp_path / "gotthard-gpu-fleet.json").write_text(json.dumps(broken))
    assert run_in_process(*lint_argv) == 1
    assert "[panel-unit]" in capsys.readouterr().out
    assert run_in_process("dashboards", "lint", "--dashboards", str(tmp_path / "missing")) == 2


def first_panel_with(dash: dict[str, Any], needle: str) -> dict[str, Any]:
    return next(p for p in lint.iter_panels(dash) if any(needle in e for e in exprs_of(p)))


def exprs_of(panel: dict[str, Any]) -> list[str]:
    return [t["expr"] for t in panel["targets"]]


def _remove_unit(dashes: list[dict[str, Any]]) -> None:
    dashes[1]["panels"][3]["fieldConfig"]["defaults"].pop("unit")


def _remove_site_filter(dashes: list[dict[str, Any]]) -> None:
    target = dashes[1]["panels"][2]["targets"][0]
    target["expr"] = target["expr"].replace('site=~"$site", ', "", 1)


def _fixed_rate_range(dashes: list[dict[str, Any]]) -> None:
    panel = first_panel_with(dashes[1], "rate(")
    panel["targets"][0]["expr"] = panel["targets"][0]["expr"].replace("[$__rate_interval]", "[5m]")


def _duplicate_panel_id(dashes: list[dict[str, Any]]) -> None:
    dashes[2]["panels"][1]["id"] = dashes[2]["panels"][0]["id"]


def _duplicate_uid(dashes: list[dict[str, Any]]) -> None:
    dashes[3]["uid"] = dashes[2]["uid"]


def _drop_datasource_variable(dashes: list[dict[str, Any]]) -> None:
    templating = dashes[4]["templating"]
    templating["list"] = [v for v in templating["list"] if v["name"] != "datasource"]


def _legacy_panel_type(dashes: list[dict[str, Any]]) -> None:
    dashes[5]["panels"][0]["type"] = "graph"


def _hard_coded_datasource(dashes: list[dict[str, Any]]) -> None:
    dashes[6]["panels"][0]["targets"][0]["datasource"] = "Prometheus"


def _bad_uid(dashes: list[dict[str, Any]]) -> None:
    dashes[0]["uid"] = "Site Overview!"


def _empty_panel_title(dashes: list[dict[str, Any]]) -> None:
    dashes[0]["panels"][-1]["title"] = " "


def _legacy_rows(dashes: list[dict[str, Any]]) -> None:
    dashes[7]["rows"] = []


def _legacy_panel_keys(dashes: list[dict[str, Any]]) -> None:
    dashes[3]["panels"][0].update({"span": 6, "legend": {"show": True}})


def _unfiltered_variable(dashes: list[dict[str, Any]]) -> None:
    variable = dashes[2]["templating"]["list"][-1]
    variable["query"] = "label_values(gotthard_gpu_info, instance)"


@pytest.mark.parametrize(
    ("mutate", "rule"),
    [
        (_remove_unit, "panel-unit"),
        (_remove_site_filter, "target-site-cluster"),
        (_fixed_rate_range, "target-rate-interval"),
        (_duplicate_panel_id, "panel-id"),
        (_duplicate_uid, "uid"),
        (_drop_datasource_variable, "template-datasource"),
        (_legacy_panel_type, "panel-type"),
        (_hard_coded_datasource, "panel-datasource"),
        (_bad_uid, "uid"),
        (_empty_panel_title, "title"),
        (_legacy_rows, "schema"),
        (_legacy_panel_keys, "schema"),
        (_unfiltered_variable, "template-site-cluster"),
    ],
)
def test_each_lint_rule_catches_a_broken_dashboard(dashboards, mutate: Any, rule: str) -> None:
    broken = copy.deepcopy(dashboards)
    mutate(broken)
    problems = lint.lint_dashboards(broken)
    assert problems, f"{mutate.__name__} was not caught"
    assert {p.rule for p in problems} == {rule}, [str(p) for p in problems]


def test_promql_tokenizer_finds_selectors_ranges_and_functions() -> None:
    expr = (
        'sum by (site) (rate(a_total{x="1", y=~"$y"}[5m])) / on(site) group_left(u) '
        "max by (u) (b) or 0 * count(c offset 5m) > bool 1 + time()"
    )
    analysis = lint.analyse(expr)
    assert [s.name for s in analysis.selectors] == ["a_total", "b", "c"]
    assert analysis.ranges == [lint.RangeUse("rate", "5m")]
    assert analysis.selectors[0].written == 'a_total{x="1", y=~"$y"}'
    assert lint.metric_names("topk(5, sum(increase(x[$__rate_interval])) by (a))") == {"x"}
    for bad in ("sum(x", 'x{a="1"', "x)"):
        with pytest.raises(lint.PromQLSyntaxError):
            lint.analyse(bad)


# --------------------------------------------------------------------------------------
# Metric names
# --------------------------------------------------------------------------------------


def exposition_names(text: str) -> set[str]:
    names = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            names.add(line.split("{", 1)[0].split(" ", 1)[0])
    return names


def test_every_metric_a_dashboard_uses_is_known(tmp_path: Path, dashboards) -> None:
    """Slurm, Slingshot, Lustre and exporter names against ``gotthard exporter --once``
    (recorded Slurm output; a Slingshot tree and a Lustre node with every role and job
    stats), GPU names against a full GPU snapshot, DR names against the DR daemon's
    families, security names against the policy textfiles' families, recorded names
    against the recording rules."""
    slingshot = repo_module("tests.exporters.slingshot_tree")
    lustre = repo_module("tests.exporters.lustre_tree")
    slingshot.build(tmp_path / "node" / "sys", slingshot.STATIC_NICS)
    lustre.write_tree(tmp_path / "node", lustre.NODES["combined"], LUSTRE_VERSION)
    config = tmp_path / "site.toml"
    config.write_text(f'[exporter.slurm]\nbin_dir = "{RECORDED_BIN}"\nfairshare = true\n')
    result = gotthard(
        "--config", str(config), "exporter", "--once", "--collectors=slurm,slingshot,lustre",
        "--lustre.job-stats", f"--path.sysfs={tmp_path / 'node' / 'sys'}",
        f"--path.procfs={tmp_path / 'node' / 'proc'}",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    exporter_names = exposition_names(result.stdout)
    assert "gotthard_slurm_job_info" in exporter_names and "gotthard_collector_up" in exporter_names
    assert "gotthard_slurm_account_fairshare" in exporter_names
    assert {
        "gotthard_slingshot_link_restarts_recent",
        "gotthard_lustre_job_write_bytes_total",
    } <= exporter_names
    gpu_names = gpu_family_names()
    assert "gotthard_gpu_job_info" in gpu_names and "gotthard_gpu_tensor_active_ratio" in gpu_names

    dr_names = {
        family.name + ("_total" if family.type == "counter" else "")
        for family in DrMetrics().registry.collect()
    }
    assert "gotthard_dr_backups_total" in dr_names
    recorded = {rule["record"] for rule in recording_rules()}

    unknown = {}
    real = (
        "gotthard_slurm_",
        "gotthard_slingshot_",
        "gotthard_lustre_",
        "gotthard_collector_",
        "gotthard_build_",
    )
    for name in sorted(used_metric_names(dashboards)):
        if name.startswith(real):
            known = name in exporter_names
        elif name.startswith("gotthard_gpu_"):
            known = name in gpu_names
        elif name.startswith("gotthard_dr_"):
            known = name in dr_names
        elif ":" in name:
            known = name in recorded
        else:
            known = name in SECURITY_FAMILIES or name in build.PROMETHEUS_BUILTIN_METRICS
        if not known:
            unknown[name] = "no real source emits or records it"
    assert unknown == {}


def recording_rules() -> list[dict[str, str]]:
    from gotthard.monitoring import rules

    return [rule for group in rules.recording_groups()["groups"] for rule in group["rules"]]


# --------------------------------------------------------------------------------------
# Live check against a real Prometheus
# --------------------------------------------------------------------------------------


def prometheus_config(ports: dict[str, int], dr: int, rule_file: Path) -> str:
    def job(name: str, port: int, *, honor: bool = False, sites=SITES) -> str:
        text = f"  - job_name: {name}\n"
        if honor:
            text += "    honor_labels: true\n"
        text += "    static_configs:\n"
        for site, cluster in sites:
            text += (
                f"      - targets: ['127.0.0.1:{port}']\n"
                f"        labels: {{site: {site}, cluster: {cluster}}}\n"
            )
        return text

    return (
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
        f"rule_files:\n  - {rule_file}\n"
        "scrape_configs:\n"
        + "".join(job(name, port) for name, port in ports.items())
        # the daemon's series carry the site they describe (zurich or lugano)
        + job("gotthard-dr", dr, honor=True, sites=SITES[:1])
    )


def recording_rule_file(root: Path) -> Path:
    """``recording.rules.yml`` as ``gotthard rules build`` writes it (no alerts: a healthy
    test site fires none, and the overview's alert table is allowed to be empty), with
    ``[monitoring] legacy_names = true``: the old names too, for the previous release's
    dashboards (:func:`test_legacy_names_keep_a_previous_release_dashboards_working`), and
    the slow records at this test's 1 s evaluation interval."""
    site = root / "legacy.toml"
    site.write_text('[monitoring]\nlegacy_names = true\nslow_rule_interval = "1s"\n')
    argv = ("--config", str(site), "rules", "build", "--out", str(root / "rules"))
    assert run_in_process(*argv) == 0
    return root / "rules" / "recording.rules.yml"


def fake_gpu_node(root: Path) -> tuple[dict[str, str], Path]:
    """Env for the exporter (fake NVML through LD_LIBRARY_PATH) and the fake procfs."""
    fakenvml = repo_module("tests.fakenvml.fakenvml")
    try:
        so = fakenvml.build(root / "fakenvml")
    except (fakenvml.BuildError, FileNotFoundError) as exc:
        pytest.fail(f"cannot build the fake NVML library: {exc}", pytrace=False)
    procfs = root / "proc"
    cgroups = {
        4201: "0::/system.slice/slurmstepd.scope/job_1/step_0/user/task_0\n",
        4202: "0::/system.slice/slurmstepd.scope/job_1/step_0/user/task_1\n",
        4203: "0::/system.slice/slurmstepd.scope/job_2/step_0/user/task_0\n",
        4204: "0::/kubepods/burstable/pod2c2a4f3e-9d1b-4c55-8a8e-0123456789ab/" + "cd" * 32 + "\n",
    }
    for pid, cgroup in cgroups.items():
        (procfs / str(pid)).mkdir(parents=True)
        (procfs / str(pid) / "cgroup").write_text(cgroup)
    lines = fakenvml.h200_node(4)
    lines["0.procs"] = fakenvml.procs_value([(4201, 1 << 30)])
    # GPU 1 is shared by jobs 1 and 2: the join must keep gotthard_gpu_job_info on the many side
    lines["1.procs"] = fakenvml.procs_value([(4202, 1 << 30), (4203, 1 << 30)])
    lines["2.procs"] = fakenvml.procs_value([(4204, 1 << 30)])
    lines["event.1"] = "3:79"
    for gpu in range(4):  # h200_node() leaves SM occupancy out; Hopper GPM has it
        lines[f"{gpu}.gpm.{fakenvml.pynvml.NVML_GPM_METRIC_SM_OCCUPANCY}"] = 41.5
    fixture = root / "nvml.txt"
    fakenvml.Fixture(fixture).write(lines)
    return fakenvml.subprocess_env(so, fixture, base=dict(os.environ)), procfs


def exporter_argv(port: int, *flags: str) -> list[str]:
    return gotthard_argv("exporter", "--listen", f"127.0.0.1:{port}", *flags)


@pytest.fixture(scope="module")
def live_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("dash-live")
    names = ("gotthard", "compute-node", "lustre-oss", "lustre-mds")
    ports = dict(zip(names, free_ports(len(names)), strict=True))
    env, procfs = fake_gpu_node(root)
    config = root / "site.toml"
    config.write_text(
        "[exporter]\n"
        'collectors = ["slurm", "gpu", "textfile"]\n'
        f'listen = "127.0.0.1:{ports["gotthard"]}"\n'
        f'path_procfs = "{procfs}"\n'
        "[exporter.textfile]\n"
        f'directory = "{root / "textfile"}"\n'
        "[exporter.slurm]\n"
        f'bin_dir = "{RECORDED_BIN}"\n'
        "poll_interval_seconds = 1\n"
        "fairshare = true\n"
        "[exporter.gpu]\n"
        "poll_interval_seconds = 1\n"
        f'kubelet_socket = "{root / "no-kubelet.sock"}"\n'
    )
    write_security_textfiles(root / "textfile")
    trees = LiveTrees(root / "nodes")
    trees.build()
    # the Slingshot and Lustre exporters get everything from flags, nothing from a site file
    plain_env = {k: v for k, v in os.environ.items() if k != "GOTTHARD_CONFIG"}
    commands = {
        "gotthard": (gotthard_argv("--config", str(config), "exporter"), env),
        "compute-node": (
            exporter_argv(
                ports["compute-node"],
                "--collectors=slingshot,lustre",
                f"--path.sysfs={trees.compute / 'sys'}",
                f"--path.procfs={trees.compute / 'proc'}",
            ),
            plain_env,
        ),
        **{
            f"lustre-{server}": (
                exporter_argv(
                    ports[f"lustre-{server}"],
                    "--collectors=lustre",
                    "--lustre.job-stats",
                    f"--path.sysfs={trees.root / server / 'sys'}",
                    f"--path.procfs={trees.root / server / 'proc'}",
                ),
                plain_env,
            )
            for server in trees.servers
        },
    }
    dr = LiveDr(root / "dr")
    try:
        dr_port = dr.start()
        config_text = prometheus_config(ports, dr_port, recording_rule_file(root))
        (root / "prometheus.yml").write_text(config_text)
        with Processes(root / "logs") as procs:
            trees.start()
            for name, (argv, process_env) in commands.items():
                procs.start(name, argv, process_env)
            url = start_prometheus(procs, root / "prometheus.yml", root, "--log.level=warn")
            wait_for_data(url, procs, targets=2 * len(ports) + 1)
            yield url
    finally:
        trees.stop()
        dr.stop()


#: Counters that move in the live trees: the wait ends once they have a rate.
MOVING = (
    "gotthard_slingshot_bytes_total",
    'gotthard_lustre_operations_total{component="mdt"}',
    'gotthard_lustre_operations_total{component="ost"}',
    "gotthard_lustre_job_write_bytes_total",
    "gotthard_lustre_job_operations_total",
)
#: Their recorded rates the panels read: every series of them must be positive too (a
#: rule evaluated before the counter moved between two scrapes records a rate of 0, and
#: the raw rate can be positive a second before the record is).
MOVING_RECORDS = (lustre_rules.JOB_READ, lustre_rules.JOB_WRITE, lustre_rules.JOB_MDT_OPERATIONS)


def wait_for_data(url: str, procs: Processes, *, targets: int) -> None:
    """Until every target was scraped 3+ times, GPM ratios (second poll on) are in and
    the moving Slingshot/Lustre counters have a rate.

    Prometheus' first scrape comes ~5.5 s after start (discovery tick)."""
    deadline = time.monotonic() + 30
    missing = ["Prometheus"]
    while time.monotonic() < deadline:
        for process in procs.exited():
            pytest.fail(f"{process.args[0]} exited: {procs.read_logs()}", pytrace=False)
        try:
            up = instant(url, "count_over_time(up[1m]) >= 3 and up == 1")
            missing = [] if len(up) == targets else [f"{len(up)}/{targets} targets up"]
            if not instant(url, "gotthard_gpu_sm_active_ratio"):
                missing.append("gotthard_gpu_sm_active_ratio")
            missing += [c for c in MOVING if not instant(url, f"rate({c}[1m]) > 0")]
            missing += [
                r for r in MOVING_RECORDS if not instant(url, r) or instant(url, f"{r} == 0")
            ]
        except OSError:
            missing = ["Prometheus"]
        if not missing:
            return
        time.sleep(0.5)
    pytest.fail(f"no data after 30 s: {', '.join(missing)}\n{procs.read_logs()}", pytrace=False)


def test_check_passes_against_real_prometheus(
    live_prometheus: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deliver.write_dashboards(tmp_path)
    code = run_in_process(
        "dashboards", "check", "--prometheus", live_prometheus, "--dashboards", str(tmp_path)
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.splitlines()[0].split() == [
        "DASHBOARD",
        "PANEL",
        "REF",
        "STATUS",
        "SERIES",
        "DETAIL",
    ]
    assert " FAIL " not in out
    total = sum(len(exprs_of(p)) for d in build.build_dashboards() for p in lint.iter_panels(d))
    assert f"{total} queries:" in out and " 0 failed" in out
    # no alert rules are loaded: the firing-alerts table is empty, and allowed to be
    assert "empty (allowed)" in out and "ALERTS has series only while" in out


def test_every_panel_of_both_sites_has_data(live_prometheus: str, dashboards) -> None:
    prometheus = live.Prometheus(live_prometheus)
    results = live.check(prometheus, dashboards)
    statuses = {(r.dashboard, r.panel, r.ref): r for r in results}
    assert all(r.status != live.FAIL for r in results), [r for r in results if r.status == "FAIL"]
    allowed = {key for key, r in statuses.items() if r.status == live.ALLOWED}
    assert allowed <= set(live.ALLOWED_EMPTY)
    # the overview's per-site panels see both sites
    overview = by_uid(dashboards, "gotthard-site-overview")
    by_site = next(p for p in overview["panels"] if p["title"] == "GPU utilisation by site")
    values, _ = live.resolve_variables(prometheus, overview, "1m")
    assert values["site"] == "(lugano|zurich)" and values["cluster"] == "(alps|todi)"
    series = instant(live_prometheus, live.substitute(by_site["targets"][0]["expr"], values))
    assert sorted(s["metric"]["site"] for s in series) == ["lugano", "zurich"]
    # the per-job table joins GPUs to Slurm jobs 1 and 2 (GPU 1 is shared by both)
    gpu = by_uid(dashboards, "gotthard-gpu-fleet")
    jobs = next(p for p in gpu["panels"] if p["title"] == "GPU jobs")
    values, _ = live.resolve_variables(prometheus, gpu, "1m")
    rows = instant(live_prometheus, live.substitute(jobs["targets"][0]["expr"], values))
    per_job = {(r["metric"]["site"], r["metric"]["job_id"]): r["value"][1] for r in rows}
    assert per_job == {
        ("zurich", "1"): "2",
        ("zurich", "2"): "1",
        ("lugano", "1"): "2",
        ("lugano", "2"): "1",
    }
    assert {r["metric"]["user"] for r in rows} == {"root"}


def test_slingshot_and_lustre_panels_read_the_real_exporters(
    live_prometheus: str, dashboards
) -> None:
    # every Slingshot and Lustre series comes from a real exporter, none is synthetic
    families = 'count by (job) ({__name__=~"gotthard_slingshot_.+|gotthard_lustre_.+"})'
    jobs = {s["metric"]["job"] for s in instant(live_prometheus, families)}
    assert jobs == {"compute-node", "lustre-oss", "lustre-mds"}
    # both sites see the collectors up; the counter rewrites never gave a bad read
    selector = '{collector=~"slingshot|lustre"}'
    up = instant(live_prometheus, f"gotthard_collector_up{selector}")
    errors = instant(live_prometheus, f"gotthard_collector_errors_total{selector}")
    assert len(up) == len(errors) == 2 * 4
    assert {s["value"][1] for s in up} == {"1"} and {s["value"][1] for s in errors} == {"0"}
    prometheus = live.Prometheus(live_prometheus)
    # per site: cxi0's restart 10 minutes ago is the one restart of the last hour
    overview = by_uid(dashboards, "gotthard-site-overview")
    slingshot = next(p for p in overview["panels"] if p["title"] == "Slingshot — $site")
    values, _ = live.resolve_variables(prometheus, overview, "1m")
    for site, cluster in SITES:
        one = {**values, "site": site, "cluster": cluster}
        restarts = instant(live_prometheus, live.substitute(slingshot["targets"][2]["expr"], one))
        assert [s["value"][1] for s in restarts] == ["1"], site
    # Lustre job_stats (job ids = Slurm job ids) join the recorded Slurm jobs 1 and 2;
    # rsync.1000 (IO outside a job) drops out, and only job 1 reads
    storage = by_uid(dashboards, "gotthard-lustre-storage")
    job_io = next(p for p in storage["panels"] if p["title"] == "Job IO by Slurm user")
    values, _ = live.resolve_variables(prometheus, storage, "1m")
    assert values["fs"] == "(lustre|scratch)"
    rows = {}
    for target in job_io["targets"]:
        found = instant(live_prometheus, live.substitute(target["expr"], values))
        assert all(float(r["value"][1]) > 0 and r["metric"]["user"] == "root" for r in found), found
        rows[target["refId"]] = {(r["metric"]["site"], r["metric"]["job_id"]) for r in found}
    sites = [site for site, _ in SITES]
    assert rows == {
        "A": {(site, "1") for site in sites},
        "B": {(site, job) for site in sites for job in ("1", "2")},
    }


def test_slingshot_cluster_panels_add_up_every_nic_and_top_nic_panels_ignore_the_node(
    live_prometheus: str, dashboards
) -> None:
    """A cluster panel (per-cluster record) shows the sum of the per-NIC records; a
    busiest-NICs panel, each cluster's busiest of them (its top-10 record, here every
    NIC), whatever the node."""
    board = by_uid(dashboards, "gotthard-slingshot-network-health")
    prometheus = live.Prometheus(live_prometheus)
    values, _ = live.resolve_variables(prometheus, board, "1m")  # "All" nodes: .*
    exprs = {p["title"]: p["targets"][0]["expr"] for p in lint.iter_panels(board)}
    top, cluster = "Throughput: top 10 NICs", "Throughput (cluster)"
    at = [0.0]  # a finished evaluation of the slow group (1 s here), for every record

    def shown(title: str, **chosen: str) -> list[Any]:
        query = live.substitute(exprs[title], {**values, **chosen})
        return prometheus.query(query, at=at[0])[1]

    def recorded() -> bool:
        # four NICs with traffic: the first evaluations may see a counter between two of
        # the tree's once-a-second steps (two equal samples, a rate of 0)
        at[0] = time.time() - 2
        for site, _ in SITES:
            nics = shown(top, site=site)
            if len(nics) != 4 or sum(float(s["value"][1]) for s in nics) <= 0:
                return False
        return True

    wait_until(recorded, 10, "both sites' per-NIC byte rates")
    for site, _ in SITES:
        nics, total = shown(top, site=site), shown(cluster, site=site)
        assert {(s["metric"]["device"], s["metric"]["direction"]) for s in nics} == {
            (device, direction) for device in ("cxi0", "cxi1") for direction in ("rx", "tx")
        }
        rate = sum(float(s["value"][1]) for s in nics)
        assert rate > 0 and sum(float(s["value"][1]) for s in total) == pytest.approx(rate)
        assert shown(top, site=site, instance="no-such-node") == nics
        assert shown(cluster, site=site, instance="no-such-node") == total


def test_dr_and_security_panels_read_the_real_daemon_and_textfiles(live_prometheus: str) -> None:
    # every DR series comes from the daemon, every security series from the textfiles
    # (the scheduler's own series have a job label of their own, kept by honor_labels)
    selector = '{__name__=~"gotthard_dr_.+", __name__!~"gotthard_dr_scheduler_.+"}'
    dr = instant(live_prometheus, f"count by (job) ({selector})")
    assert {s["metric"]["job"] for s in dr} == {"gotthard-dr"}
    families = "gotthard_policy_violations|gotthard_kube_bench_.+"
    security = instant(live_prometheus, f'count by (job) ({{__name__=~"{families}"}})')
    assert {s["metric"]["job"] for s in security} == {"gotthard"}
    files = instant(live_prometheus, "gotthard_textfile_mtime_seconds")
    assert {s["metric"]["file"] for s in files} == {"policy.prom", "kube-bench.prom"}
    # the daemon ran a backup and a verified drill of prod in zurich, and placed inference
    drill = instant(live_prometheus, "gotthard_dr_drill_last_success")
    assert [(s["metric"]["site"], s["value"][1]) for s in drill] == [("zurich", "1")]
    placed = instant(live_prometheus, "gotthard_dr_placement == 1")
    assert [s["metric"]["site"] for s in placed] == ["zurich"]
    denied = instant(live_prometheus, 'gotthard_policy_violations{rule="POD-PRIV-001"}')
    assert {s["value"][1] for s in denied} == {"1"} and len(denied) == len(SITES)


def test_the_naive_join_fails_on_a_shared_gpu(live_prometheus: str) -> None:
    """``metric * on(...) group_left(job_id) gotthard_gpu_job_info`` breaks once a GPU holds two
    jobs; the per-job records keep gotthard_gpu_job_info on the many side instead."""
    naive = (
        "avg by (job_id) (gotthard_gpu_utilization_ratio * on(site, cluster, instance, gpu, uuid) "
        "group_left(job_id) gotthard_gpu_job_info)"
    )
    with pytest.raises(live.PrometheusError) as error:
        live.Prometheus(live_prometheus).query(naive)
    assert error.value.status == 422 and error.value.error_type == "execution"
    assert "many-to-many" in str(error.value) or "duplicate series" in str(error.value)


def test_a_typo_in_a_metric_name_fails_with_a_clear_message(
    live_prometheus: str, dashboards
) -> None:
    gpu = copy.deepcopy(by_uid(dashboards, "gotthard-gpu-fleet"))
    panel = next(p for p in gpu["panels"] if p["title"] == "Mean utilisation")
    panel["targets"][0]["expr"] = panel["targets"][0]["expr"].replace(
        "gotthard_gpu_utilization_ratio", "gpu_utilisation_ratio"
    )
    broken_parse = next(p for p in gpu["panels"] if p["title"] == "Power draw")
    broken_parse["targets"][0]["expr"] = (
        'sum by (instance (gotthard_gpu_power_watts{site=~"$site"})'
    )
    results = live.check(live.Prometheus(live_prometheus), [gpu])
    failed = {r.panel: r for r in results if r.status == live.FAIL}
    assert set(failed) == {"Mean utilisation", "Power draw"}
    typo = failed["Mean utilisation"]
    assert typo.detail.startswith("no series; nothing matches gpu_utilisation_ratio{")
    assert "parse error (HTTP 400 bad_data)" in failed["Power draw"].detail
    table = live.format_table(results)
    assert "Mean utilisation" in table and "FAIL" in table


def test_check_exits_1_on_a_broken_dashboard_and_2_without_prometheus(
    live_prometheus: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deliver.write_dashboards(tmp_path)
    path = tmp_path / "gotthard-slurm-cluster.json"
    dash = json.loads(path.read_text())
    dash["panels"][0]["targets"][0]["expr"] = 'slurm_upp{site=~"$site", cluster=~"$cluster"}'
    path.write_text(json.dumps(dash))
    code = run_in_process(
        "dashboards", "check", "--prometheus", live_prometheus, "--dashboards", str(tmp_path)
    )
    assert code == 1
    out = capsys.readouterr().out
    assert "Failed queries:" in out and "nothing matches slurm_upp{" in out
    (port,) = free_ports(1)
    assert run_in_process("dashboards", "check", "--prometheus", f"http://127.0.0.1:{port}") == 2
    assert "cannot reach" in capsys.readouterr().err


def test_check_json_is_machine_readable(
    live_prometheus: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deliver.write_dashboards(tmp_path)
    argv = ("dashboards", "check", "--prometheus", live_prometheus, "--dashboards", str(tmp_path))
    assert run_in_process(*argv, "--format", "json") == 0
    report = json.loads(capsys.readouterr().out)
    total = sum(len(exprs_of(p)) for d in build.build_dashboards() for p in lint.iter_panels(d))
    assert report["ok"] is True and report["lint"] == []
    assert report["summary"]["queries"] == total == len(report["queries"])
    assert report["summary"]["failed"] == 0
    statuses = {q["status"] for q in report["queries"]}
    assert statuses == {"ok", "allowed_empty"}
    first = report["queries"][0]
    assert set(first) == {"dashboard", "panel", "ref", "status", "series", "detail", "query"}
    # a broken query and a lint problem: exit 1, both in the report, nothing else printed
    path = tmp_path / "gotthard-slurm-cluster.json"
    dash = json.loads(path.read_text())
    dash["panels"][0]["targets"][0]["expr"] = 'slurm_upp{site=~"$site", cluster=~"$cluster"}'
    dash["panels"][1]["fieldConfig"]["defaults"].pop("unit")
    path.write_text(json.dumps(dash))
    assert run_in_process(*argv, "--format", "json") == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["summary"]["failed"] == 1
    assert len(report["lint"]) == 1 and "[panel-unit]" in report["lint"][0]
    (failed,) = [q for q in report["queries"] if q["status"] == "failed"]
    assert failed["dashboard"] == "gotthard-slurm-cluster"
    assert "nothing matches slurm_upp{" in failed["detail"]


def test_legacy_names_keep_a_previous_release_dashboards_working(live_prometheus: str) -> None:
    """Every query of the dashboards of before the renames that reads an old name
    (tests/fixtures/legacy-dashboards/) finds, through the legacy recording rules, the
    series its migrated query finds, and most find some."""
    from gotthard.monitoring.migrate_names import Migrator

    migrate = Migrator().migrate_text
    fixture = json.loads((FIXTURES / "legacy-dashboards" / "queries.json").read_text())
    prometheus = live.Prometheus(live_prometheus)
    boards = {dash["uid"]: dash for dash in build.build_dashboards()}
    values = {
        uid: live.resolve_variables(prometheus, dash, "1m")[0] for uid, dash in boards.items()
    }

    def series(expr: str, uid: str) -> set[frozenset[tuple[str, str]]]:
        found = instant(live_prometheus, live.substitute(expr, values[uid]))
        return {frozenset((k, v) for k, v in s["metric"].items() if k != "__name__") for s in found}

    differ, with_data = [], 0
    for query in fixture["queries"]:
        new, replaced = migrate(query["expr"])
        assert replaced and new != query["expr"], query  # it reads an old name
        old_series, new_series = (
            series(query["expr"], query["dashboard"]),
            series(new, query["dashboard"]),
        )
        with_data += bool(old_series)
        if old_series != new_series:
            differ.append((query["dashboard"], query["panel"], query["ref"]))
    assert differ == []
    assert with_data >= 0.9 * len(fixture["queries"]) >= 100
