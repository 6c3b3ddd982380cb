"""``gotthard deploy render --target spiffe``: a ClusterSPIFFEID per role that selects the
pods the Kubernetes target renders, federation with the other site, and web configs
that a server loads and enforces: the site's Prometheus gets in, Alertmanager only at
the webhook."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from gotthard.deploy.roles import ROLES
from gotthard.serve import Server, load_web_config, text
from tests.deploy.rendering import SITE, attempt_render, manifests, render
from tests.support.svid import make_ca

PROMETHEUS = "spiffe://zurich.example/ns/monitoring/sa/prometheus-k8s"
ALERTMANAGER = "spiffe://zurich.example/ns/monitoring/sa/alertmanager-main"


def site_file(tmp_path: Path, svids: Path, *, lugano: bool = True) -> Path:
    domains = 'zurich = "zurich.example"' + (', lugano = "lugano.example"' if lugano else "")
    path = tmp_path / "site.toml"
    path.write_text(
        SITE.read_text()
        + f"""
[spiffe]
trust_domains = {{ {domains} }}
bundle_endpoints = {{ lugano = "https://spire.lugano.example:8443" }}
svid_directory = "{svids}"
"""
    )
    return path


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def test_every_role_gets_an_identity_for_the_pods_it_runs(tmp_path: Path) -> None:
    site = site_file(tmp_path, tmp_path / "svids")
    out = render("spiffe", tmp_path / "s", site)
    ids = {
        doc["metadata"]["name"]: doc
        for _, doc in manifests(out)
        if doc["kind"] == "ClusterSPIFFEID"
    }
    pods = {}
    for _, doc in manifests(render("kubernetes", tmp_path / "k", site)):
        spec = doc.get("spec", {})
        template = spec.get("template") or spec.get("jobTemplate", {}).get("spec", {}).get(
            "template"
        )
        if template:
            pods[doc["metadata"]["name"]] = (
                doc["metadata"]["namespace"],
                template["metadata"]["labels"],
            )
    checked = []
    for role in ROLES:
        if role.full_name not in pods:
            continue  # not a pod in this site's Kubernetes (e.g. a systemd role)
        checked.append(role.name)
        entry = ids[role.full_name]
        assert (
            entry["apiVersion"] == "spire.spiffe.io/v1alpha1" and entry["kind"] == "ClusterSPIFFEID"
        )
        namespace, labels = pods[role.full_name]
        spec = entry["spec"]
        assert spec["namespaceSelector"]["matchLabels"] == {
            "kubernetes.io/metadata.name": namespace
        }
        assert selects(spec["podSelector"], labels), role.name
        # no other role's identity selects these pods
        others = [
            n
            for n, e in ids.items()
            if n != role.full_name and selects(e["spec"]["podSelector"], labels)
        ]
        assert not [
            n for n in others if ids[n]["spec"]["namespaceSelector"] == spec["namespaceSelector"]
        ]
    assert {"node-exporter", "dr", "runbooks", "audit"} <= set(checked), checked
    assert ids["gotthard-dr"]["spec"]["federatesWith"] == ["lugano.example"]
    assert ids["gotthard-prometheus"]["spec"]["federatesWith"] == ["lugano.example"]
    assert "federatesWith" not in ids["gotthard-node-exporter"]["spec"]
    [federation] = [
        d for _, d in manifests(tmp_path / "s") if d["kind"] == "ClusterFederatedTrustDomain"
    ]
    assert federation["spec"] == {
        "trustDomain": "lugano.example",
        "bundleEndpointURL": "https://spire.lugano.example:8443",
        "bundleEndpointProfile": {
            "type": "https_spiffe",
            "endpointSPIFFEID": "spiffe://lugano.example/spire/server",
        },
    }


def test_the_rendered_web_configs_let_in_prometheus_and_at_the_webhook_alertmanager(
    tmp_path: Path,
) -> None:
    svids = tmp_path / "svids"
    ca = make_ca(tmp_path / "ca", "zurich.example")
    cert, key = ca.issue(
        svids, "server", "spiffe://zurich.example/ns/gotthard/sa/gotthard-dr", server=True
    )
    cert.rename(svids / "svid.pem")
    key.rename(svids / "svid_key.pem")
    (svids / "svid_bundle.pem").write_bytes(ca.bundle.read_bytes())
    out = render("spiffe", tmp_path / "s", site_file(tmp_path, svids))
    clients = {
        name: ca.issue(tmp_path / "clients", name.rsplit("/", 1)[1], name)
        for name in (PROMETHEUS, ALERTMANAGER)
    }
    for role, allowed in (("dr", {PROMETHEUS}), ("runbooks", {PROMETHEUS, ALERTMANAGER})):
        web_file = out / f"web-config-{role}.yml"
        assert (
            set(yaml.safe_load(web_file.read_text())["tls_server_config"]["allowed_spiffe_ids"])
            == allowed
        )
        server = Server(
            ("127.0.0.1", 0),
            {"GET /metrics": lambda _: text(200, "up 1\n")},
            web=load_web_config(web_file),
        )
        server.start()
        try:
            for name, (client_cert, client_key) in clients.items():
                context = ssl.create_default_context(cafile=str(ca.bundle))
                context.load_cert_chain(str(client_cert), str(client_key))
                try:
                    with urllib.request.urlopen(
                        server.url + "/metrics", timeout=5, context=context
                    ) as reply:
                        status = reply.status
                except urllib.error.HTTPError as err:
                    status = err.code
                assert status == (200 if name in allowed else 403), (role, name)
        finally:
            server.close()


def test_a_site_without_a_trust_domain_is_one_line_exit_2(tmp_path: Path) -> None:
    site = site_file(tmp_path, tmp_path / "svids", lugano=False)
    result = attempt_render("spiffe", tmp_path / "o", site)
    assert result.returncode == 2
    assert (
        result.stderr
        == "gotthard deploy: [spiffe] trust_domains: no trust domain for site 'lugano'\n"
    )
