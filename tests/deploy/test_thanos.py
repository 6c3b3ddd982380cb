"""``gotthard deploy render --target thanos``: the global view's configuration, from the
site model. Thanos does not run here; what can be checked is: the Prometheus fragments
with ``promtool check config``, the Kubernetes manifests with the strict schema, the
Alertmanager peer list with two real clustered Alertmanagers, the addresses and labels
against the site model."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gotthard.monitoring import rules
from gotthard.sandbox import free_ports
from tests.deploy.rendering import SITE, manifests, promtool_check_config, render
from tests.deploy.test_kubernetes import KUBERNETES_VERSION
from tests.support.cli import ROOT, gotthard, run
from tests.support.monitoring import Processes, binary, get_json, load_yaml
from tests.support.wait import wait_until

#: Two sites: Zurich's Slurm cluster on the site's Prometheus, its Kubernetes cluster on a
#: Prometheus of its own; Lugano's two clusters on one site Prometheus, its Alertmanagers
#: named explicitly.
TWO_SITES = """\
site = "zurich"
cluster = "alps"

[sites.zurich]
prometheus_url = "http://prometheus.zurich.example:9090"

[sites.zurich.clusters.alps]

[sites.zurich.clusters.alps-k8s]
prometheus_url = "https://prometheus.alps-k8s.zurich.example"

[sites.zurich.clusters.alps-k8s.kubernetes]
in_cluster = true

[sites.lugano]
prometheus_url = "http://prometheus.lugano.example:9090"

[sites.lugano.clusters.todi]

[sites.lugano.clusters.todi-k8s]

[sites.lugano.clusters.todi-k8s.kubernetes]
kubeconfig = "/etc/gotthard/lugano.kubeconfig"

[deploy.alertmanager.hosts]
lugano = ["am-0.lugano.example", "am-1.lugano.example"]
"""
#: Prometheus name -> its external labels (without the replica).
EXPECTED_LABELS = {
    "zurich": {"site": "zurich", "cluster": "alps"},
    "zurich-alps-k8s": {"site": "zurich", "cluster": "alps-k8s"},
    "lugano": {"site": "lugano"},
}
ALERTMANAGERS = [
    "prometheus.zurich.example:9093",
    "am-0.lugano.example:9093",
    "am-1.lugano.example:9093",
]


def _site_file(directory: Path, text: str) -> Path:
    path = directory / "site.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = _site_file(tmp_path_factory.mktemp("thanos-site"), TWO_SITES)
    return render("thanos", tmp_path_factory.mktemp("thanos"), site)


def _args(default_file: Path) -> list[str]:
    """The ``ARGS="..."`` of an /etc/default file, split as the unit's shell would."""
    (line,) = [x for x in default_file.read_text().splitlines() if x.startswith("ARGS=")]
    (value,) = shlex.split(line.removeprefix("ARGS="))
    return shlex.split(value)


def test_one_fragment_per_prometheus_replica_with_unique_external_labels(out: Path) -> None:
    fragments = {p.stem: load_yaml(p) for p in sorted((out / "plain").glob("prometheus-*.yml"))}
    expected = {f"prometheus-{name}-{r}" for name in EXPECTED_LABELS for r in (0, 1)}
    assert set(fragments) == expected
    seen = set()
    for stem, fragment in fragments.items():
        name, replica = stem.removeprefix("prometheus-").rsplit("-", 1)
        labels = fragment["global"]["external_labels"]
        assert labels == {**EXPECTED_LABELS[name], "replica": replica}
        seen.add(tuple(sorted(labels.items())))
        alerting = fragment["alerting"]
        # every Prometheus sends to every site's Alertmanagers, without the replica label
        assert alerting["alertmanagers"] == [{"static_configs": [{"targets": ALERTMANAGERS}]}]
        assert alerting["alert_relabel_configs"] == [{"action": "labeldrop", "regex": "replica"}]
    assert len(seen) == len(fragments), "Thanos needs unique external labels per Prometheus"


def _full_config(fragment: dict[str, Any]) -> dict[str, Any]:
    return {
        "global": {"scrape_interval": "30s", **fragment["global"]},
        "alerting": fragment["alerting"],
        "scrape_configs": [
            {"job_name": "prometheus", "static_configs": [{"targets": ["localhost:9090"]}]}
        ],
    }


def test_promtool_accepts_each_fragment_in_a_full_config(out: Path, tmp_path: Path) -> None:
    for path in sorted((out / "plain").glob("prometheus-*.yml")):
        code, output = promtool_check_config(_full_config(load_yaml(path)), tmp_path / path.name)
        assert code == 0, f"{path.name}: {output}"
    # the check can fail: an external label name Prometheus refuses
    broken = _full_config(load_yaml(out / "plain" / "prometheus-lugano-0.yml"))
    broken["global"]["external_labels"]["bad-name"] = "x"
    assert promtool_check_config(broken, tmp_path / "broken.yml")[0] != 0


def test_the_manifests_validate_against_the_kubernetes_schema(out: Path) -> None:
    objects = [doc for _, doc in manifests(out)]
    assert sorted(o["kind"] for o in objects) == [
        "ConfigMap",
        "Deployment",  # query
        "Deployment",  # ruler
        "Deployment",  # store gateway
        "Deployment",  # compactor
        "Secret",
        "Service",
        "Service",
        "Service",
    ]
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']}: {err.message} at {err.path}")
        assert obj["metadata"]["namespace"] == "monitoring"


def test_query_reaches_every_sidecar_and_deduplicates_on_the_replica_label(out: Path) -> None:
    deployment, service = yaml.safe_load_all((out / "thanos-query.yaml").read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[0] == "query"
    assert "--query.replica-label=replica" in args
    assert [a for a in args if a.startswith("--endpoint=")] == [
        "--endpoint=prometheus.zurich.example:10901",
        "--endpoint=prometheus.alps-k8s.zurich.example:10901",
        "--endpoint=prometheus.lugano.example:10901",
        "--endpoint=thanos-store.monitoring.svc:10901",
    ]
    assert deployment["spec"]["replicas"] == 2
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {
        "http": 10902,
        "grpc": 10901,
    }
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["selector"] == selector
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


def test_the_ruler_evaluates_the_global_groups_against_query_for_every_alertmanager(
    out: Path, tmp_path: Path
) -> None:
    """Thanos Ruler is the production global evaluator: the global groups only (which
    promtool accepts), Query as its data source, every site's Alertmanagers, and a
    replica label that each replica sets and drops before sending (one alert per pair)."""
    rules_map, deployment, service = yaml.safe_load_all((out / "thanos-ruler.yaml").read_text())
    ((name, text),) = rules_map["data"].items()
    groups = yaml.safe_load(text)["groups"]
    assert name == "global-alerts.rules.yml"
    assert "gotthard-dr.global-alerts" in [g["name"] for g in groups]
    assert all(g["name"].endswith(".global-alerts") for g in groups)
    placed = [rule["alert"] for group in groups for rule in group["rules"]]
    assert placed == [r.name for r in rules.ALERTS if r.placement == "global"]
    (tmp_path / name).write_text(text)
    check = run([binary("promtool"), "check", "rules", str(tmp_path / name)])
    assert check.returncode == 0, check.stdout + check.stderr

    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[0] == "rule"
    assert "--query=thanos-query.monitoring.svc:10902" in args
    assert "--rule-file=/etc/thanos/rules/*.yml" in args
    assert "--eval-interval=30s" in args
    assert [a for a in args if a.startswith("--alertmanagers.url=")] == [
        f"--alertmanagers.url=http://{address}" for address in ALERTMANAGERS
    ]
    assert '--label=replica="$(POD_NAME)"' in args and "--alert.label-drop=replica" in args
    assert container["env"][0]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert {"name": "rules", "configMap": {"name": rules_map["metadata"]["name"]}} in volumes
    assert deployment["spec"]["replicas"] == 2
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["selector"] == selector
    assert selector["app.kubernetes.io/component"] == "ruler"


def test_operator_patches_set_the_labels_the_pair_and_the_sidecar(out: Path) -> None:
    for name, labels in EXPECTED_LABELS.items():
        path = out / "patches" / f"prometheus-{name}.yaml"
        assert "kubectl -n monitoring patch prometheus k8s --type merge" in path.read_text()
        spec = load_yaml(path)["spec"]
        assert spec["externalLabels"] == labels  # the operator adds the replica itself
        assert spec["replicaExternalLabelName"] == "replica"
        assert spec["replicas"] == 2
        assert spec["thanos"] == {
            "objectStorageConfig": {"name": "thanos-objstore", "key": "objstore.yml"},
            "grpcServerTlsConfig": {
                "cert": {"secret": {"name": "thanos-grpc-tls", "key": "tls.crt"}},
                "keySecret": {"name": "thanos-grpc-tls", "key": "tls.key"},
                "ca": {"secret": {"name": "thanos-grpc-tls", "key": "ca.crt"}},
            },
        }
        assert spec["additionalAlertManagerConfigs"] == {
            "name": "thanos-additional-alertmanagers",
            "key": "alertmanager-configs.yaml",
        }


def test_the_alertmanagers_secret_is_what_prometheus_accepts(out: Path, tmp_path: Path) -> None:
    (secret,) = [doc for _, doc in manifests(out) if doc["kind"] == "Secret"]
    assert secret["metadata"]["name"] == "thanos-additional-alertmanagers"
    configs = yaml.safe_load(secret["stringData"]["alertmanager-configs.yaml"])
    assert configs == [{"static_configs": [{"targets": ALERTMANAGERS}]}]
    fragment = load_yaml(out / "plain" / "prometheus-zurich-0.yml")
    fragment["alerting"]["alertmanagers"] = configs
    code, output = promtool_check_config(_full_config(fragment), tmp_path / "prometheus.yml")
    assert code == 0, output


def test_the_object_store_is_a_template_without_secrets(out: Path) -> None:
    text = (out / "objstore.yml").read_text()
    store = yaml.safe_load(text)
    assert store["type"] == "S3"
    # every value is a placeholder to fill in outside the rendered files
    assert all(str(value).startswith("REPLACE_") for value in store["config"].values())
    assert "kubectl -n monitoring create secret generic thanos-objstore" in text


def test_plain_prometheus_and_sidecar_flags(out: Path) -> None:
    assert _args(out / "plain" / "prometheus.default") == [
        "--storage.tsdb.min-block-duration=2h",
        "--storage.tsdb.max-block-duration=2h",
    ]
    lines = (out / "plain" / "thanos-sidecar.args").read_text().splitlines()
    args = [line for line in lines if not line.startswith("#")]
    assert args[0] == "sidecar"
    assert "--grpc-address=0.0.0.0:10901" in args
    assert "--objstore.config-file=/etc/thanos/objstore.yml" in args


def test_alertmanager_peers_span_the_sites(out: Path) -> None:
    for site in ("zurich", "lugano"):
        assert _args(out / "plain" / f"prometheus-alertmanager-{site}.default") == [
            "--cluster.listen-address=0.0.0.0:9094",
            "--cluster.peer=prometheus.zurich.example:9094",
            "--cluster.peer=am-0.lugano.example:9094",
            "--cluster.peer=am-1.lugano.example:9094",
            "--cluster.gossip-interval=200ms",
            "--cluster.pushpull-interval=1m",
        ]
    # the operator peers its own replicas: each site's resource adds the other site's
    zurich = load_yaml(out / "patches" / "alertmanager-zurich.yaml")["spec"]["additionalPeers"]
    lugano = load_yaml(out / "patches" / "alertmanager-lugano.yaml")["spec"]["additionalPeers"]
    assert zurich == ["am-0.lugano.example:9094", "am-1.lugano.example:9094"]
    assert lugano == ["prometheus.zurich.example:9094"]


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Processes]:
    with Processes(tmp_path / "logs") as started:
        yield started


def _peers(url: str) -> int:
    try:
        return len(get_json(f"{url}/api/v2/status", timeout=2)["cluster"]["peers"])
    except (OSError, KeyError, TypeError):
        return 0


def test_two_real_alertmanagers_form_one_cluster_from_the_rendered_peers(
    tmp_path: Path, procs: Processes
) -> None:
    """Each site's Alertmanager on its own loopback address, the rendered ARGS otherwise
    unchanged: both see two members."""
    cluster_port, *web = free_ports(3)
    site = TWO_SITES.replace(
        'lugano = ["am-0.lugano.example", "am-1.lugano.example"]',
        f'zurich = ["127.0.0.1"]\nlugano = ["127.0.0.2"]\n\n[deploy.alertmanager]\n'
        f"cluster_port = {cluster_port}",
    )
    rendered = render("thanos", tmp_path / "out", _site_file(tmp_path, site))
    config = tmp_path / "alertmanager.yml"
    config.write_text("route: {receiver: none}\nreceivers: [{name: none}]\n")
    urls = []
    hosts = {"zurich": "127.0.0.1", "lugano": "127.0.0.2"}
    for (name, host), port in zip(hosts.items(), web, strict=True):
        args = _args(rendered / "plain" / f"prometheus-alertmanager-{name}.default")
        own = [
            f"--cluster.listen-address={host}:{cluster_port}" if a.startswith("--cluster.listen-")
            else a
            for a in args
        ]  # fmt: skip
        argv = [
            binary("prometheus-alertmanager"),
            *own,
            f"--config.file={config}",
            f"--storage.path={tmp_path / host}",
            f"--web.listen-address=127.0.0.1:{port}",
        ]
        procs.start(f"alertmanager-{host}", argv)
        urls.append(f"http://127.0.0.1:{port}")
    for url in urls:
        wait_until(lambda url=url: _peers(url) == 2, 30, f"{url} sees both members")
    # one at a time: a member leaving waits for the other's acknowledgement (up to 10 s)
    for proc in procs.started:
        proc.terminate()
        proc.wait(timeout=15)


def test_a_site_without_prometheus_is_refused_with_the_key_to_set(tmp_path: Path) -> None:
    result = gotthard(
        "--config", str(SITE), "deploy", "render", "--target", "thanos", "--out", str(tmp_path)
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "gotthard deploy: sites.lugano.clusters.lugano-k8s: no prometheus_url, and the site has"
        " none; the global view needs every cluster's Prometheus"
        " (set sites.lugano.prometheus_url)"
    ]
    assert not list(tmp_path.iterdir()), "nothing is written"


def test_two_prometheus_on_one_host_need_explicit_endpoints(tmp_path: Path) -> None:
    one_host = TWO_SITES.replace("prometheus.lugano.example", "prometheus.zurich.example")
    result = gotthard(
        "--config", str(_site_file(tmp_path, one_host)),
        "deploy", "render", "--target", "thanos", "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert result.returncode == 2
    assert "set [deploy.thanos.endpoints]" in result.stderr, result.stderr
    explicit = one_host + (
        '\n[deploy.thanos.endpoints]\nlugano = ["sidecar-0.lugano.example:10901",'
        ' "sidecar-1.lugano.example:10901"]\n'
    )
    out = render("thanos", tmp_path / "explicit", _site_file(tmp_path, explicit))
    deployment, _ = yaml.safe_load_all((out / "thanos-query.yaml").read_text())
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--endpoint=sidecar-0.lugano.example:10901" in args
    assert "--endpoint=sidecar-1.lugano.example:10901" in args


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('[deploy.thanos.endpoints]\nbern = ["x:1"]', "deploy.thanos.endpoints: no Prometheus"),
        ('[deploy.alertmanager.hosts]\nbern = ["x"]', "bern is not a site"),
    ],
)
def test_overrides_must_name_what_the_site_model_has(
    tmp_path: Path, table: str, message: str
) -> None:
    text = TWO_SITES.split("[deploy.alertmanager.hosts]")[0] + table + "\n"
    result = gotthard(
        "--config", str(_site_file(tmp_path, text)),
        "deploy", "render", "--target", "thanos", "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert result.returncode == 2
    assert message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_multisite_md_lists_exactly_the_rendered_files(out: Path) -> None:
    text = (ROOT / "docs" / "multisite.md").read_text()
    table = text.split("### `gotthard deploy render --target thanos`")[1].split("\n\n")
    (rows,) = [part for part in table if part.startswith("| File |")]
    documented = {line.split("`")[1] for line in rows.splitlines()[2:]}
    generic = {
        re.sub(
            r"-(\d)\.yml$",
            "-<replica>.yml",
            re.sub(r"(prometheus|alertmanager)-(zurich-alps-k8s|zurich|lugano)", r"\1-<n>", path),
        )
        for path in (str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    }
    documented = {re.sub(r"<(name|site)>", "<n>", name) for name in documented}
    assert generic == documented


def _deployments(out: Path) -> dict[str, dict[str, Any]]:
    return {
        doc["metadata"]["name"]: doc for _, doc in manifests(out) if doc["kind"] == "Deployment"
    }


def _mounted(deployment: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Mount path -> the volume mounted there, of the one container."""
    pod = deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    (container,) = pod["containers"]
    return {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}


def test_every_store_api_serves_mutual_tls_and_query_dials_with_it(out: Path) -> None:
    deployments = _deployments(out)
    tls = {"name": "grpc-tls", "secret": {"secretName": "thanos-grpc-tls"}}
    server = [
        "--grpc-server-tls-cert=/etc/thanos/tls/tls.crt",
        "--grpc-server-tls-key=/etc/thanos/tls/tls.key",
        "--grpc-server-tls-client-ca=/etc/thanos/tls/ca.crt",
    ]
    for name in ("thanos-query", "thanos-ruler", "thanos-store"):
        (container,) = deployments[name]["spec"]["template"]["spec"]["containers"]
        assert all(flag in container["args"] for flag in server), name
        assert _mounted(deployments[name])["/etc/thanos/tls"] == tls, name
    (query,) = deployments["thanos-query"]["spec"]["template"]["spec"]["containers"]
    assert "--grpc-client-tls-secure" in query["args"]
    assert "--grpc-client-tls-ca=/etc/thanos/tls/ca.crt" in query["args"]
    assert "--grpc-client-tls-cert=/etc/thanos/tls/tls.crt" in query["args"]
    sidecar = (out / "plain" / "thanos-sidecar.args").read_text().splitlines()
    assert all(flag in sidecar for flag in server)


def test_store_gateway_and_compactor_read_the_bucket_from_the_secret(out: Path) -> None:
    deployments = _deployments(out)
    objstore = {
        "name": "objstore",
        "secret": {
            "secretName": "thanos-objstore",
            "items": [{"key": "objstore.yml", "path": "objstore.yml"}],
        },
    }
    for name, verb in (("thanos-store", "store"), ("thanos-compactor", "compact")):
        (container,) = deployments[name]["spec"]["template"]["spec"]["containers"]
        assert container["args"][0] == verb
        assert "--objstore.config-file=/etc/thanos/objstore/objstore.yml" in container["args"]
        assert _mounted(deployments[name])["/etc/thanos/objstore"] == objstore
    compactor = deployments["thanos-compactor"]
    assert compactor["spec"]["replicas"] == 1
    assert compactor["spec"]["strategy"] == {"type": "Recreate"}  # never two per bucket
    assert "--wait" in compactor["spec"]["template"]["spec"]["containers"][0]["args"]
