"""The two-site sandbox as a user sees it: up in a minute, every process listed with its
site and URL, a Slurm cluster per site behind its env.sh, exactly the files and command
lines ``gotthard deploy render`` writes for its site file, DR series that keep the site
they name, a global view the dashboards pass on, Alertmanagers that notify once, webhooks
that act only on their own cluster, and a ``down`` that stops exactly what ``up`` started,
also after ``up`` was killed."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from gotthard.cli import main
from gotthard.config import Config
from gotthard.deploy import prometheus as deploy_prometheus
from gotthard.monitoring.components import ALERTS
from gotthard.monitoring.dashboards import build, lint
from gotthard.monitoring.dashboards import check as live
from gotthard.monitoring.rule_model import group_name
from gotthard.sandbox.processes import process_start_time
from gotthard.sandbox.sites import MARKER, NOTIFICATIONS_KIND, VELERO_KIND, MultiSiteSandbox
from tests.sandbox.conftest import TWO_SITES
from tests.support.cli import gotthard
from tests.support.monitoring import get_json, instant
from tests.support.wait import wait_until

pytestmark = [pytest.mark.slurm, TWO_SITES]

SITES = ("zurich", "lugano")
PER_SITE_KINDS = {
    "munged",
    "slurmctld",
    "slurmd",
    "slurm-exporter",
    "node-exporter",
    "kube-api (emulated)",
    "prometheus",
    "alertmanager",
    "runbooks",
    "dr",
}
SHARED_KINDS = {"karmada-api (emulated)", VELERO_KIND, NOTIFICATIONS_KIND, "global-prometheus"}
#: What each site's Prometheus scrapes: job label -> what it is.
JOBS = {
    "gotthard-slurm-exporter-{site}-{site}": "the Slurm exporter",
    "gotthard-dr-{site}-{site}": "the DR replica",
    "apiserver": "the emulated Kubernetes API server",
    "prometheus": "the site Prometheus itself",
    "alertmanager": "the site's Alertmanager",
}
#: The files the sandbox runs that `deploy render --target local` writes.
RENDERED = (
    "zurich/prometheus.yml",
    "lugano/prometheus.yml",
    "global/prometheus.yml",
    "alertmanager.yml",
    "rules/alerts.rules.yml",
    "rules/global-alerts.rules.yml",
    "zurich/zurich/gotthard.toml",
    "lugano/lugano/gotthard.toml",
    "processes.json",
)


def say(what: str) -> None:
    print(f"[two-site sandbox] {what}", flush=True)


def cli(*argv: str) -> int:
    return main(list(argv))


def shell(env_sh: Path, script: str) -> subprocess.CompletedProcess[str]:
    """*script* in bash after ``source env.sh``, from an environment without Slurm's."""
    clean = {k: v for k, v in os.environ.items() if k not in ("SLURM_CONF", "KUBECONFIG")}
    return subprocess.run(
        ["bash", "-c", f"source {env_sh} && {script}"],
        capture_output=True,
        text=True,
        env=clean,
        timeout=30,
        check=False,
    )


def node(sandbox: MultiSiteSandbox, site: str, name: str = "nid001") -> dict[str, str]:
    """``scontrol show node`` of *name* in *site*'s Slurm."""
    out = sandbox.site(site).run_command(["scontrol", "-o", "show", "node", name]).stdout
    fields = dict(item.split("=", 1) for item in out.split() if "=" in item)
    reason = out.split("Reason=", 1)[1].split(" [", 1)[0] if "Reason=" in out else ""
    return {**fields, "Reason": reason}


def audit(sandbox: MultiSiteSandbox, site: str) -> list[dict[str, Any]]:
    path = sandbox.audit_log(site)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def post(url: str, body: Any, token: str = "") -> int:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        return int(response.status)


def listeners() -> dict[int, set[int]]:
    """Ports some socket listens on (``/proc/net/tcp*``, state 0A), whoever owns it, each
    with the pids holding that socket (empty when no readable ``/proc/PID/fd`` holds it);
    a bind test would also fail on a port an outgoing connection happens to use."""
    inodes: dict[str, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":
                inodes[f"socket:[{fields[9]}]"] = int(fields[1].rsplit(":", 1)[1], 16)
    owners: dict[int, set[int]] = {port: set() for port in inodes.values()}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            links = [os.readlink(fd) for fd in (proc / "fd").iterdir()]
        except OSError:
            continue
        for link in links:
            if link in inodes:
                owners[inodes[link]].add(int(proc.name))
    return owners


def names_sandbox(pid: int, directory: Path) -> bool:
    """Whether process *pid* belongs to the sandbox in *directory*: its command line names
    the directory or its environment carries the sandbox's marker. True when unreadable."""
    proc = Path(f"/proc/{pid}")
    try:
        cmdline = (proc / "cmdline").read_bytes()
        environ = (proc / "environ").read_bytes().split(b"\0")
    except OSError:
        return process_start_time(pid) is not None
    return str(directory).encode() in cmdline or f"{MARKER}={directory}".encode() in environ


def leftovers(directory: Path) -> list[str]:
    """Command lines of live processes that name *directory* (none after ``down``)."""
    found = []
    marker = str(directory).encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or process_start_time(int(proc.name)) is None:
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if marker in cmdline and int(proc.name) != os.getpid():
            found.append(cmdline.replace(b"\0", b" ").decode(errors="replace"))
    return found


def resume(sandbox: MultiSiteSandbox, site: str) -> None:
    slurm = sandbox.site(site)
    slurm.run_command(["scontrol", "update", f"nodename={slurm.node_name}", "state=resume"])


# --------------------------------------------------------------------------- up, status


def test_up_takes_at_most_a_minute(two_sites: MultiSiteSandbox) -> None:
    assert two_sites.up_seconds is not None
    say(f"up took {two_sites.up_seconds:.1f}s on {os.cpu_count()} CPUs")
    assert two_sites.up_seconds <= 60


def test_status_json_lists_every_process_with_site_and_url(
    two_sites: MultiSiteSandbox, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli("sandbox", "status", "--dir", str(two_sites.directory), "--format", "json") == 0
    document = json.loads(capsys.readouterr().out)
    assert document["running"] is True and document["sites"] == list(SITES)
    assert document["global_url"] == two_sites.global_url
    rows = document["processes"]
    for row in rows:
        assert row["state"] == "running", row
        assert row["url"] and isinstance(row["pid"], int), row
        assert process_start_time(row["pid"]) is not None, row
    for site in SITES:
        assert {r["kind"] for r in rows if r["site"] == site} == PER_SITE_KINDS, site
    assert {r["kind"] for r in rows if r["site"] == ""} == SHARED_KINDS
    urls = {r["kind"]: r["url"] for r in rows if not r["site"]}
    assert urls["global-prometheus"] == two_sites.global_url
    assert urls["karmada-api (emulated)"] == two_sites.karmada_url
    by_site = {(r["site"], r["kind"]): r["url"] for r in rows}
    assert by_site[("lugano", "prometheus")] == two_sites.prometheus_url("lugano")
    assert by_site[("zurich", "kube-api (emulated)")] == two_sites.kubeapi_url("zurich")
    # the table says the same in words
    assert cli("sandbox", "status", "--dir", str(two_sites.directory)) == 0
    table = capsys.readouterr().out
    assert VELERO_KIND in table and f"global view: {two_sites.global_url}" in table


def test_the_sandbox_runs_what_deploy_render_writes_for_its_site_file(
    two_sites: MultiSiteSandbox, tmp_path: Path
) -> None:
    out = tmp_path / "rendered"
    result = gotthard(
        "--config", str(two_sites.site_file), "deploy", "render", "--target", "local",
        "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    for name in RENDERED:  # the same files, paths aside
        rendered = (out / name).read_text().replace(str(out), str(two_sites.directory))
        assert rendered == (two_sites.directory / name).read_text(), name
    # and every rendered process runs with the rendered command line
    listed = json.loads((two_sites.directory / "processes.json").read_text())["processes"]
    pids = {row["name"].split("/")[-1]: row["pid"] for row in two_sites.status()}
    for process in listed:
        running = Path(f"/proc/{pids[process['name']]}/cmdline").read_bytes().split(b"\0")[:-1]
        assert [arg.decode() for arg in running[1:]] == process["argv"][1:], process["name"]
        assert Path(running[0].decode()).name == Path(process["argv"][0]).name


def test_each_env_sh_points_at_its_own_cluster(two_sites: MultiSiteSandbox) -> None:
    for site in SITES:
        env_sh = two_sites.site(site).directory / "env.sh"
        result = shell(
            env_sh,
            "sinfo -h -N -o '%N %T' && scontrol show config | grep ClusterName"
            " && echo kube=$KUBECONFIG config=$GOTTHARD_CONFIG && command -v gotthard",
        )
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert {line.split()[0] for line in lines[:-3]} == {"nid001", "nid002"}, lines
        assert lines[-3].split("=", 1)[1].strip() == site
        assert lines[-2] == (
            f"kube={two_sites.kubeconfig(site)} config={two_sites.config_file(site)}"
        )
        assert lines[-1] == str(Path(sys.executable).parent / "gotthard")


def test_each_site_prometheus_labels_its_data_and_the_global_view_has_both(
    two_sites: MultiSiteSandbox,
) -> None:
    for site in SITES:
        config = get_json(f"{two_sites.prometheus_url(site)}/api/v1/status/config")
        assert f"site: {site}" in config["data"]["yaml"]
        targets = get_json(f"{two_sites.prometheus_url(site)}/api/v1/targets")["data"]
        jobs = {t["labels"]["job"] for t in targets["activeTargets"]}
        assert {job.format(site=site) for job in JOBS} <= jobs
        managers = get_json(f"{two_sites.prometheus_url(site)}/api/v1/alertmanagers")["data"]
        assert len(managers["activeAlertmanagers"]) == len(SITES)

    def scraped() -> set[tuple[str, str]]:
        up = 'up{job=~"gotthard-.*|apiserver|prometheus|alertmanager"} == 1'
        found = [s for site in SITES for s in instant(two_sites.prometheus_url(site), up)]
        return {(s["metric"]["site"], s["metric"]["job"]) for s in found}

    want = {(site, job.format(site=site)) for site in SITES for job in JOBS}
    wait_until(lambda: scraped() >= want, 30, lambda: f"the sites scrape {scraped()}")

    # the global view has both sites' aggregates, and nothing raw
    def aggregated() -> set[tuple[str, str]]:
        found = instant(two_sites.global_url, 'count by (site, cluster) ({__name__=~".+:.+"})')
        return {(s["metric"]["site"], s["metric"]["cluster"]) for s in found}

    both = {(site, site) for site in SITES}
    wait_until(lambda: aggregated() == both, 60, lambda: f"global view has {aggregated()}")
    cfg = Config()
    allowed = set(deploy_prometheus.federated_names(cfg)) | deploy_prometheus.global_rule_names(cfg)
    found = instant(two_sites.global_url, 'count by (__name__) ({__name__=~".+"})')
    names = {s["metric"]["__name__"] for s in found}
    # what the global view makes itself: its federation jobs' scrape health, its alerts
    own = {n for n in names if n.startswith("scrape_") or n in ("up", "ALERTS", "ALERTS_FOR_STATE")}
    assert names - own <= allowed, sorted(names - own - allowed)
    # the global view evaluates the global groups only, each site Prometheus none of them
    groups = get_json(f"{two_sites.global_url}/api/v1/rules")["data"]["groups"]
    placed = {
        group_name(r.component, "alerts", "global") for r in ALERTS if r.placement == "global"
    }
    assert {g["name"] for g in groups} == placed != set()
    for site in SITES:
        groups = get_json(f"{two_sites.prometheus_url(site)}/api/v1/rules")["data"]["groups"]
        assert groups and not any(".global-" in g["name"] for g in groups), site
    # a federation target's up names the site it federates
    federated = instant(two_sites.global_url, 'up{job=~"federate-.*"}')
    assert {(s["metric"]["site"], s["metric"]["cluster"]) for s in federated} == {
        (site, site) for site in SITES
    }


def label_values(prometheus: str, query: str, label: str) -> set[str]:
    return {series["metric"][label] for series in instant(prometheus, query)}


def test_a_dr_series_keeps_the_site_the_daemon_exports(two_sites: MultiSiteSandbox) -> None:
    """Each DR replica exports series of both sites; the site Prometheus that scrapes it
    keeps their ``site`` (no ``exported_site``), and labels only the series that name no
    site with its own."""
    for site in SITES:
        prometheus = two_sites.prometheus_url(site)
        with urllib.request.urlopen(f"{two_sites.dr_url(site)}/metrics", timeout=5) as answer:
            exposition = answer.read().decode()
        exported = set(re.findall(r'[{,]site="([^"]+)"', exposition))
        assert exported == set(SITES), exported
        query = f'group by (site) ({{instance="127.0.0.1:{two_sites.port(site, "dr")}"}})'
        seen = partial(label_values, prometheus, query, "site")
        wait_until(lambda seen=seen: seen() == set(SITES), 30, lambda seen=seen: str(seen()))
        assert instant(prometheus, 'group by (exported_site) ({exported_site!=""})') == []


# --------------------------------------------------------------------------- alerts, webhooks


def test_a_node_drained_for_maintenance_with_slurmd_stopped_does_not_page(
    two_sites: MultiSiteSandbox,
) -> None:
    """nid002 is drained by an operator and its slurmd is stopped, so Slurm flags it
    NOT_RESPONDING: each site's rules see it in maintenance, and SlurmNodeNotResponding
    does not even go pending (it would, at the first evaluation, without the exception)."""
    not_responding = 'gotthard_slurm_node_info{node="nid002", state=~".*not_responding.*"}'
    maintenance = 'site_cluster_node:gotthard_slurm_node_maintenance:group{node="nid002"}'
    for site in SITES:
        prometheus = two_sites.prometheus_url(site)
        wait_until(lambda p=prometheus: instant(p, not_responding), 120, "nid002 flagged")
        wait_until(lambda p=prometheus: instant(p, maintenance), 30, "nid002 in maintenance")
        # a few more evaluations (every 2 s) of the alerting group
        time.sleep(5)
        assert instant(prometheus, 'ALERTS{alertname="SlurmNodeNotResponding"}') == [], site


def test_gpu_lost_in_lugano_drains_lugano_only_and_notifies_once(
    two_sites: MultiSiteSandbox,
) -> None:
    """The alert reaches both Alertmanagers; the clustered pair notifies Lugano's webhook
    once, which drains Lugano's nid001; Zurich's nid001 of the same name is untouched."""
    labels = {
        "alertname": "GPULost",
        "severity": "critical",
        "site": "lugano",
        "cluster": "lugano",
        "instance": "nid001:9877",
        "node": "nid001",
        "gpu": "0",
    }
    starts = datetime.now(UTC)
    alert = {
        "labels": labels,
        "annotations": {"summary": "A GPU has fallen off the bus."},
        "startsAt": starts.isoformat(),
        "endsAt": (starts + timedelta(minutes=2)).isoformat(),
    }
    before = {site: len(audit(two_sites, site)) for site in SITES}
    try:
        for site in SITES:
            assert post(f"{two_sites.alertmanager_url(site)}/api/v2/alerts", [alert]) == 200
        for site in SITES:  # each Alertmanager has the alert: both would notify alone
            seen = get_json(f"{two_sites.alertmanager_url(site)}/api/v2/alerts")
            assert any(a["labels"].get("alertname") == "GPULost" for a in seen), site

        def ours(site: str) -> list[dict[str, Any]]:
            new = audit(two_sites, site)[before[site] :]
            return [r for r in new if r.get("alertname") == "GPULost"]

        def drained() -> list[dict[str, Any]]:
            return [r for r in ours("lugano") if r.get("action") == "slurm.drain_node"]

        records = wait_until(drained, 30, "Lugano's webhook to drain nid001")
        assert records[0]["result"] == "ok", records[0]
        lugano = node(two_sites, "lugano")
        assert "DRAIN" in lugano["State"], lugano
        assert lugano["Reason"] == "gotthard: GPULost"
        zurich = node(two_sites, "zurich")
        assert "DRAIN" not in zurich["State"], zurich
        # longer than the peer timeout (15 s) and a group interval: a second Alertmanager
        # that did not know of the first one's notification would have sent by now
        time.sleep(18)
        results = [r["result"] for r in ours("lugano")]
        assert "duplicate" not in results, results
        assert len(drained()) == 1
        assert ours("zurich") == []
        say(f"GPULost in Lugano: one notification, audit {results}")
    finally:
        resume(two_sites, "lugano")


def test_a_foreign_cluster_alert_at_zurich_is_audited_and_not_acted_on(
    two_sites: MultiSiteSandbox,
) -> None:
    labels = {
        "alertname": "GPULost",
        "severity": "critical",
        "site": "lugano",
        "cluster": "lugano",
        "node": "nid001",
        "gpu": "1",
    }
    now = datetime.now(UTC).isoformat()
    payload = {
        "version": "4",
        "groupKey": '{}:{alertname="GPULost"}',
        "status": "firing",
        "receiver": "runbook-webhook-zurich",
        "groupLabels": {"alertname": "GPULost"},
        "commonLabels": labels,
        "commonAnnotations": {},
        "externalURL": two_sites.alertmanager_url("zurich"),
        "truncatedAlerts": 0,
        "alerts": [
            {
                "status": "firing",
                "labels": labels,
                "annotations": {},
                "startsAt": now,
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "",
                "fingerprint": "f0f0f0f0f0f0f0f0",
            }
        ],
    }
    token = (two_sites.directory / "webhook.token").read_text().strip()
    before = len(audit(two_sites, "zurich"))
    assert post(f"{two_sites.runbooks_url('zurich')}/alerts", payload, token) == 200
    records = [r for r in audit(two_sites, "zurich")[before:] if r.get("alertname") == "GPULost"]
    assert records and {r["result"] for r in records} == {"foreign-cluster"}, records
    for site in SITES:
        assert "DRAIN" not in node(two_sites, site)["State"], site


# --------------------------------------------------------------------------- dashboards


def test_dashboards_check_passes_on_the_global_view_with_both_sites(
    two_sites: MultiSiteSandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The overview's panels that read only what the global view federates (its
    cross-site panels) answer there, with both sites; the other panels read raw series,
    at the sites (Thanos Query in production)."""
    cfg = Config()
    federated = set(deploy_prometheus.federated_names(cfg))
    federated |= deploy_prometheus.global_rule_names(cfg)
    dashboards = []
    for dash in build.build_dashboards():
        if dash["uid"] != "gotthard-site-overview":
            continue
        panels = [
            panel
            for panel in dash.get("panels") or []
            if panel.get("targets")
            and all(
                lint.metric_names(t["expr"]) and lint.metric_names(t["expr"]) <= federated
                for t in panel["targets"]
            )
        ]
        if panels:
            dashboards.append({**dash, "panels": panels})
    overview = next(d for d in dashboards if d["uid"] == "gotthard-site-overview")
    titles = {p["title"] for p in overview["panels"]}
    assert {
        "Slurm allocation by site",
        "GPU utilisation by site",
        "Slingshot errors by site",
        "Lustre fullest OST by site",
    } <= titles, titles
    prometheus = live.Prometheus(two_sites.global_url)

    def failures() -> list[str]:
        return [
            f"{r.dashboard}/{r.panel}/{r.ref}: {r.detail}"
            for r in live.check(prometheus, dashboards)
            if r.status == live.FAIL
        ]

    wait_until(lambda: not failures(), 180, lambda: "\n".join(failures()), interval=2)
    for dash in dashboards:
        (tmp_path / f"{dash['uid']}.json").write_text(json.dumps(dash))
    code = cli(
        "dashboards", "check", "--prometheus", two_sites.global_url, "--dashboards", str(tmp_path)
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert " 0 failed" in out
    # the overview's per-site panels see both sites
    by_site = next(p for p in overview["panels"] if p["title"] == "GPU utilisation by site")
    values, _ = live.resolve_variables(prometheus, overview, "1m")
    series = instant(two_sites.global_url, live.substitute(by_site["targets"][0]["expr"], values))
    assert sorted(s["metric"]["site"] for s in series) == sorted(SITES)


# --------------------------------------------------------------------------- down, CLI


def test_down_after_a_killed_up_stops_exactly_what_was_started(
    two_sites: MultiSiteSandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``up`` killed with SIGKILL halfway, then ``gotthard sandbox down``: every process
    it had started is gone and every port free; the session's sandbox runs on."""
    directory = tmp_path / "crashed"
    script = (
        "import sys; from pathlib import Path;"
        "from gotthard.sandbox.sites import MultiSiteSandbox;"
        "MultiSiteSandbox.with_free_ports(Path(sys.argv[1])).up(verbose=False)"
    )
    bystander = subprocess.Popen(["sleep", "120"])
    up = subprocess.Popen([sys.executable, "-c", script, str(directory)])
    try:

        def started() -> int:
            try:
                data = json.loads((directory / "state.json").read_text())
            except (OSError, ValueError):
                return 0
            return len(data["processes"])

        wait_until(lambda: started() >= 6, 60, "up to start half of its processes")
        up.send_signal(signal.SIGKILL)
        up.wait()
        manifest = json.loads((directory / "sites.json").read_text())
        states = [directory / "state.json"] + [directory / s / "state.json" for s in SITES]
        records = [
            r for path in states if path.exists() for r in json.loads(path.read_text())["processes"]
        ]
        assert len(records) >= 6

        assert cli("sandbox", "down", "--dir", str(directory)) == 0
        capsys.readouterr()
        for record in records:
            assert process_start_time(record["pid"]) != record["start_time"], record["name"]
        assert leftovers(directory) == []
        # a port another test took since ``down`` freed it is not a leftover: only a
        # listener that is the crashed sandbox's own, or whose owner cannot be told, counts
        owners = listeners()
        busy = [
            name
            for name, port in manifest["ports"].items()
            if port in owners
            and (not owners[port] or any(names_sandbox(pid, directory) for pid in owners[port]))
        ]
        assert busy == [], {name: owners[manifest["ports"][name]] for name in busy}
        assert not (directory / "state.json").exists() and not (directory / "sites.json").exists()
        assert cli("sandbox", "status", "--dir", str(directory)) == 1
        assert bystander.poll() is None
        assert two_sites.is_up()
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
        if MultiSiteSandbox.load(directory) is not None:
            cli("sandbox", "down", "--dir", str(directory))
        bystander.kill()
        bystander.wait()


@pytest.mark.parametrize("sites", ["zurich", "zurich,zurich", "zurich,Lugano", "zurich,"])
def test_a_bad_site_list_is_a_one_line_usage_error(
    sites: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli("sandbox", "up", "--sites", sites, "--dir", str(tmp_path / "sb")) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: --sites") and captured.err.count("\n") == 1
    assert not (tmp_path / "sb").exists()
