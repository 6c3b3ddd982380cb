"""``gotthard sandbox up --sites ... --site-file FILE``: a site whose Kubernetes the site file
gives by kubeconfig is used as it is, a real cluster the sandbox neither starts nor stops.

An API server emulator of this test process stands in for Lugano's real cluster (the
sandbox cannot tell it from one: it only gets a kubeconfig); a site file that cannot be
used is a one-line usage error before anything starts."""

from __future__ import annotations

import tomllib
import urllib.request
from pathlib import Path

import aiohttp.web
import pytest
import yaml
from kubernetes import client

from gotthard.cli import main
from gotthard.sandbox.external import EXTERNAL_API_UP, read_site_file
from gotthard.sandbox.sites import VELERO_KIND, MultiSiteSandbox
from gotthard_testing import kubeapi
from gotthard_testing.kubeapi import EmulatorThread, sandbox_resources
from tests.support.wait import wait_until

SITES = ("zurich", "lugano")
#: The context of the "real" Lugano cluster's kubeconfig (not its current context).
CONTEXT = "lugano-prod"


def write_site_file(path: Path, kubeconfig: Path, context: str = CONTEXT) -> Path:
    """A site file giving Lugano's Kubernetes (cluster ``alps``) by kubeconfig and context."""
    path.write_text(
        'site = "lugano"\n'
        'cluster = "alps"\n'
        "[sites.lugano.clusters.alps.kubernetes]\n"
        f'kubeconfig = "{kubeconfig}"\n'
        f'context = "{context}"\n'
    )
    return path


def real_kubeconfig(real: EmulatorThread, path: Path) -> Path:
    """A kubeconfig whose current context is a decoy; *CONTEXT* points at *real*."""
    real.kubeconfig(path, name=CONTEXT)
    doc = yaml.safe_load(path.read_text())
    doc["clusters"].append({"name": "decoy", "cluster": {"server": "http://127.0.0.1:9"}})
    doc["contexts"].append({"name": "decoy", "context": {"cluster": "decoy", "user": CONTEXT}})
    doc["current-context"] = "decoy"
    path.write_text(yaml.safe_dump(doc))
    return path


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


@pytest.mark.slurm
def test_a_kubeconfig_in_the_site_file_makes_lugano_a_real_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    requests: list[tuple[str, str]] = []

    def seen(raw: aiohttp.web.BaseRequest) -> None:
        requests.append((raw.method, raw.path))

    kubeapi.REQUEST_HOOKS.append(seen)
    real = EmulatorThread(*sandbox_resources("kubernetes")).start()
    try:
        kubeconfig = real_kubeconfig(real, tmp_path / "lugano.kubeconfig")
        external = read_site_file(write_site_file(tmp_path / "site.toml", kubeconfig), SITES)
        sandbox = MultiSiteSandbox.with_free_ports(tmp_path / "sandbox", SITES, external=external)
        try:
            sandbox.up(verbose=False)
            rows = {(row["site"], row["kind"]): row for row in sandbox.status()}
            # no emulated API server for Lugano: its real one, with its server and no pid
            assert ("lugano", "kube-api (emulated)") not in rows
            assert ("zurich", "kube-api (emulated)") in rows
            row = rows[("lugano", "kube-api (external)")]
            assert (row["state"], row["url"], row["pid"]) == ("external", real.url, None)
            assert sandbox.is_up()
            assert sandbox.kubeapi_url("lugano") == real.url
            capsys.readouterr()
            assert main(["sandbox", "status", "--dir", str(sandbox.directory)]) == 0
            table = capsys.readouterr().out.splitlines()
            assert f"lugano   kube-api (external)        external       - {real.url}" in table
            # the simulated Velero serves Zurich only: a real cluster runs its own Velero
            velero = cmdline(rows[("", VELERO_KIND)]["pid"])
            assert any(arg.startswith("zurich=") for arg in velero)
            assert not any(arg.startswith("lugano=") for arg in velero)
            # every site's configuration reaches Lugano through the site file's kubeconfig
            for site in SITES:
                config = tomllib.loads(sandbox.config_file(site).read_text())
                access = config["sites"]["lugano"]["clusters"]["lugano"]["kubernetes"]
                assert access == {"kubeconfig": str(kubeconfig), "context": CONTEXT}
                assert config["dr"]["placement"]["queries"]["api_up"] == EXTERNAL_API_UP
            assert f"export KUBECONFIG={kubeconfig}\n" in sandbox.env_file("lugano").read_text()
            # Lugano's Prometheus does not scrape the real API server (it needs credentials)
            jobs = {
                site: {
                    job["job_name"]
                    for job in yaml.safe_load(
                        (sandbox.site(site).directory / "prometheus.yml").read_text()
                    )["scrape_configs"]
                }
                for site in SITES
            }
            assert "apiserver-zurich-zurich" in jobs["zurich"]
            assert not any(job.startswith("apiserver") for job in jobs["lugano"])
            # the placed applications were created on the real cluster
            with real.api() as api:
                client.CoreV1Api(api).read_namespace("shop")
                client.AppsV1Api(api).read_namespaced_deployment("web", "shop")
                client.AppsV1Api(api).read_namespaced_deployment("inference", "inference")
            # the leading DR daemon checks Lugano's Velero storage locations on the real API
            wait_until(
                lambda: any("backupstoragelocations" in path for _, path in requests),
                30,
                lambda: f"requests to the real Lugano API: {sorted(set(requests))}",
            )
        finally:
            sandbox.down(verbose=False)
        # down left the real cluster, and what the sandbox created there, as they were
        with urllib.request.urlopen(f"{real.url}/readyz", timeout=5) as answer:
            assert answer.status == 200
        with real.api() as api:
            client.AppsV1Api(api).read_namespaced_deployment("web", "shop")
        assert not (tmp_path / "sandbox" / "sites.json").exists()
    finally:
        real.stop()
        kubeapi.REQUEST_HOOKS.remove(seen)


@pytest.mark.parametrize(
    ("problem", "expected"),
    [
        ("missing", "no-such.kubeconfig: cannot read"),
        ("context", "no context 'lugano-prod' (it has: emu)"),
    ],
)
def test_an_unusable_kubeconfig_is_a_usage_error_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], problem: str, expected: str
) -> None:
    kubeconfig = tmp_path / "no-such.kubeconfig"
    if problem == "context":
        kubeconfig = kubeapi.write_kubeconfig(tmp_path / "emu.kubeconfig", "http://127.0.0.1:9")
    site_file = write_site_file(tmp_path / "site.toml", kubeconfig)
    directory = tmp_path / "sandbox"
    argv = ["sandbox", "up", "--dir", str(directory), "--sites", "zurich,lugano"]
    assert main([*argv, "--site-file", str(site_file)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert f"site file {site_file}: site lugano (cluster alps)" in err
    assert expected in err
    assert not directory.exists()


def test_the_site_file_gives_karmada_and_leaves_unnamed_sites_emulated(tmp_path: Path) -> None:
    karmada = kubeapi.write_kubeconfig(tmp_path / "karmada.kubeconfig", "https://karmada:5443")
    site_file = tmp_path / "site.toml"
    site_file.write_text(
        '[sites.zurich.clusters.alps]\nslurm_conf = "/etc/slurm/slurm.conf"\n'
        "[dr.placement.karmada]\n"
        f'kubeconfig = "{karmada}"\n'
        "[dr.placement.queries]\n"
        "api_up = 'min(probe_success{job=\"apiserver\"})'\n"
    )
    external = read_site_file(site_file, SITES)
    assert external.sites == {}  # zurich's one cluster has no Kubernetes; lugano is not named
    assert external.karmada is not None
    assert (external.karmada.server, external.karmada.context) == ("https://karmada:5443", "emu")
    assert external.api_up == 'min(probe_success{job="apiserver"})'
    sandbox = MultiSiteSandbox(tmp_path / "sandbox", SITES, external=external)
    assert sandbox.karmada_url == "https://karmada:5443"
    assert sandbox.karmada_kubeconfig == karmada
    assert sandbox.kubeapi_url("lugano") == f"http://127.0.0.1:{sandbox.port('lugano', 'kubeapi')}"
