"""``gotthard dr ...`` run as child processes against the emulator through a kubeconfig."""

from __future__ import annotations

import json
import signal
import tomllib
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from gotthard.dr import velero as v
from tests.support.kube import EmulatorThread
from tests.support.monitoring import QuietHandler, serve_http
from tests.support.wait import wait_until

from .emulator import SimulatedVeleroController
from .sitefiles import background, gotthard, site_entry, site_file, wait_http
from .test_velero_drill import seed_prod

#: The drill report's keys named by the issue.
ISSUE_KEYS = {
    "site",
    "namespace",
    "backup",
    "restore",
    "verified",
    "rto_seconds",
    "rpo_seconds",
    "checks",
    "cleaned",
}


def test_backup_now_drill_and_status(
    k8s: EmulatorThread, velero: SimulatedVeleroController, tmp_path: Path
) -> None:
    seed_prod(k8s)
    custom = client.CustomObjectsApi(k8s.api())
    custom.create_namespaced_custom_object(
        "velero.io",
        "v1",
        "velero",
        "backupstoragelocations",
        {
            "apiVersion": "velero.io/v1",
            "kind": "BackupStorageLocation",
            "metadata": {"name": "default", "namespace": "velero"},
            "spec": {"provider": "aws", "objectStorage": {"bucket": "b"}},
            "status": {"phase": "Available"},
        },
    )
    site = str(site_file(tmp_path, k8s))

    r = gotthard(
        "--config", site, "dr", "backup", "now", "--site", "zurich", "--namespace", "prod",
        "--reason", "cli test",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    name = r.stdout.strip()
    assert name.startswith("manual-prod-zurich-")
    vel = v.Velero(k8s.api())
    wait_until(lambda: v.phase_of(vel.get("backups", name)) == "Completed")
    assert vel.get("backups", name)["metadata"]["labels"]["gotthard.io/reason"] == "cli-test"

    md = tmp_path / "drill.md"
    r = gotthard(
        "--config", site, "dr", "drill", "--site", "zurich", "--namespace", "prod", "--once",
        "--wait", "--report", str(md),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert set(report) >= ISSUE_KEYS
    assert report["site"] == "zurich" and report["namespace"] == "prod"
    assert report["verified"] is True and report["cleaned"] is True
    assert report["backup"] == name and report["restore"].startswith("drill-prod-")
    assert report["rto_seconds"] > 0 and report["rpo_seconds"] >= 0
    assert all({"name", "ok", "detail"} <= set(c) for c in report["checks"])
    assert [c["name"] for c in report["checks"]] == [
        "backup-completed",
        "restore-completed",
        "deployments.apps/v1",
    ]
    text = md.read_text()
    assert text.startswith("# DR drill: prod (zurich → zurich)")
    assert "**verified**" in text and f"`{name}`" in text
    assert "| deployments.apps/v1 | yes | 2 found (min 1), 2 ready |" in text
    assert report["restore"] not in k8s.emulator.namespaces

    # a report that cannot be written: the drill ran, the command says where it failed
    unwritable = md / "drill.json"  # below a regular file: unwritable even for root
    r = gotthard(
        "--config", site, "dr", "drill", "--site", "zurich", "--namespace", "prod",
        "--report", str(unwritable),
    )  # fmt: skip
    assert r.returncode == 2
    assert r.stderr == f"gotthard: {unwritable}: Not a directory\n"

    r = gotthard("--config", site, "dr", "status")
    assert r.returncode == 0, r.stderr
    status = json.loads(r.stdout)
    assert status["zurich"] == {
        "latest_completed": {"prod": name},
        "storage_locations": {"default": True},
    }


def test_failed_drill_exits_1_with_json_report(
    k8s: EmulatorThread, velero: SimulatedVeleroController, tmp_path: Path
) -> None:
    site = str(site_file(tmp_path, k8s))
    out = tmp_path / "drill.json"
    r = gotthard(
        "--config", site, "dr", "drill", "--site", "zurich", "--namespace", "empty",
        "--report", str(out),
    )  # fmt: skip
    assert r.returncode == 1
    report = json.loads(r.stdout)
    assert report["verified"] is False and "no Completed backup" in report["error"]
    assert json.loads(out.read_text()) == report


class _Prometheus(QuietHandler):
    """``/<site>/api/v1/query``: every query answers 1, Zurich's API server answers 0."""

    def do_GET(self) -> None:
        self._answer(urllib.parse.urlparse(self.path).query)

    def do_POST(self) -> None:
        # the real API takes the form-encoded query in the body as well
        length = int(self.headers.get("Content-Length") or 0)
        self._answer(self.rfile.read(length).decode())

    def _answer(self, form: str) -> None:
        site = urllib.parse.urlparse(self.path).path.strip("/").split("/")[0]
        query = urllib.parse.parse_qs(form)["query"][0]
        value = "0" if site == "zurich" and "apiserver" in query else "8"
        body = json.dumps(
            {
                "status": "success",
                "data": {"resultType": "vector", "result": [{"metric": {}, "value": [0, value]}]},
            }
        ).encode()
        self.send_body(body, "application/json")


@pytest.fixture
def prometheus() -> Iterator[str]:
    httpd = serve_http(_Prometheus)
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_placement_plan_and_apply(k8s: EmulatorThread, prometheus: str, tmp_path: Path) -> None:
    kubeconfig = str(tmp_path / "kubeconfig.yaml")
    site = str(
        site_file(
            tmp_path,
            k8s,
            sites={
                name: site_entry(kubeconfig, member, prometheus_url=f"{prometheus}/{name}")
                for name, member in (("zurich", "zrh-a"), ("lugano", "lug-a"))
            },
            placement={
                "failover_after": 1,
                "karmada": {"kubeconfig": kubeconfig},
                "state_file": str(tmp_path / "placement.json"),
                "services": [
                    {
                        "name": "api",
                        "namespace": "prod",
                        "primary_site": "zurich",
                        "resources": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
                    }
                ],
            },
        )
    )
    r = gotthard("--config", site, "dr", "placement", "plan")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert (
        lines[0]
        == "# api [failover]: zurich -> lugano (failover: zurich unhealthy for 1 evaluations)"
    )
    assert "+++ prod/gotthard-dr-api" in lines and '+    "lug-a"' in lines
    assert not (tmp_path / "placement.json").exists()  # plan changes nothing

    r = gotthard("--config", site, "dr", "placement", "apply")
    assert r.returncode == 0, r.stderr
    policy = client.CustomObjectsApi(k8s.api()).get_namespaced_custom_object(
        "policy.karmada.io", "v1alpha1", "prod", "propagationpolicies", "gotthard-dr-api"
    )
    assert policy["spec"]["placement"]["clusterAffinity"] == {"clusterNames": ["lug-a"]}
    assert json.loads((tmp_path / "placement.json").read_text())["api"]["site"] == "lugano"

    r = gotthard("--config", site, "dr", "placement", "plan")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["# api [failover]: lugano -> lugano (healthy)", ""]


@pytest.mark.parametrize("form", ["top-level", "daemon"])
def test_daemon_config_flag_both_forms(k8s: EmulatorThread, tmp_path: Path, form: str) -> None:
    """``gotthard --config FILE dr daemon`` and ``gotthard dr daemon --config
    FILE`` both run the daemon on FILE (its listen address proves which file was read)."""
    site = site_file(tmp_path, k8s, lease={"enabled": False})
    listen = tomllib.loads(site.read_text())["dr"]["listen"]
    argv = (
        ["-m", "gotthard", "--config", str(site), "dr", "daemon"]
        if form == "top-level"
        else ["-m", "gotthard", "dr", "daemon", "--config", str(site)]
    )
    with background(*argv, log=tmp_path / "daemon.log") as proc:
        health = wait_http(f"http://{listen}/healthz", lambda h: h["leader"], timeout=15)
        assert health["ok"] is True
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0


def test_daemon_config_flag_reports_a_bad_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[dr]\nno_such_key = 1\n")
    r = gotthard("dr", "daemon", "--config", str(bad))
    assert r.returncode == 2
    assert "bad.toml" in r.stderr and "no_such_key" in r.stderr
    assert "Traceback" not in r.stderr
