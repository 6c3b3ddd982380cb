"""Credentials as mounts: every file path the rendered site file names is provided, at
that path, by a volume of the pod whose role reads it.

The test walks the site file as the pods get it (the ``gotthard-site`` ConfigMap), with
every default, and classifies each absolute path by the role that reads it; a path it
cannot classify fails the test, so a new file setting cannot slip through unmounted."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gotthard import config as configuration
from gotthard.deploy.roles import KUBERNETES_ROLES
from tests.deploy.rendering import SITE, attempt_render, manifests, render
from tests.support.cli import ROOT

EXAMPLE = ROOT / "docs" / "site.example.toml"
ROLES = tuple(role.name for role in KUBERNETES_ROLES)
EVERY = frozenset(ROLES)
#: The roles that run ``gotthard exporter`` (the audit's metrics are served by one).
EXPORTERS = frozenset({"node-exporter", "slurm-exporter", "audit-metrics"})
#: A site file naming every kind of credential file, in several directories.
FULL = """
site = "zurich"
cluster = "alps"

[sites.zurich]
kubernetes_cluster = "alps-k8s"
[sites.zurich.clusters.alps]
slurmrestd_url = "http://slurmrestd:6820"
slurm_conf = "/etc/slurm-alps/slurm.conf"
slurm_jwt_file = "/var/run/secrets/gotthard-slurm/alps"
[sites.zurich.clusters.eiger]
slurm_conf = "/etc/slurm-eiger/slurm.conf"
slurm_jwt_file = "/var/run/secrets/gotthard-slurm/eiger"
[sites.zurich.clusters.alps-k8s.kubernetes]
in_cluster = true
[sites.zurich.clusters.alps-gpu.kubernetes]
kubeconfig = "/etc/gotthard/kube/alps-gpu/config"
[sites.lugano]
kubernetes_cluster = "todi-k8s"
[sites.lugano.clusters.todi-k8s.kubernetes]
kubeconfig = "/etc/gotthard/lugano.kubeconfig"
context = "lugano"
[sites.lugano.clusters.todi-gpu.kubernetes]
kubeconfig = "/etc/gotthard/lugano.kubeconfig"
context = "lugano-gpu"
[sites.lugano.clusters.todi-extra.kubernetes]
kubeconfig = "/etc/gotthard/kube/todi-extra/config"
[sites.lugano.clusters.todi]
slurm_conf = "/etc/slurm-todi/slurm.conf"
slurm_jwt_file = "/var/run/secrets/gotthard-slurm/todi"

[exporter]
web_config = "/etc/gotthard-tls/web-config.yml"
[exporter.slurm]
backend = "rest"
rest_token_file = "/var/run/slurm-jwt/token"
[runbooks]
web_config = "/etc/gotthard/runbooks-web.yml"
[dr]
web_config = "/etc/gotthard-tls/web-config.yml"
[dr.placement.karmada]
kubeconfig = "/etc/karmada/karmada.kubeconfig"
[spiffe]
cert_file = "/run/spiffe/svid.pem"
key_file = "/run/spiffe/svid_key.pem"
bundle_file = "/run/spiffe/svid_bundle.pem"
"""


# --- who reads what (this test's own table, not the renderer's) -----------------------------


def readers(key: str, cfg: Any) -> frozenset[str] | str:
    """The roles that read the file *key* names, or why no pod needs it mounted."""
    kube = re.fullmatch(r"sites\.([^.]+)\.clusters\.([^.]+)\.kubernetes\.kubeconfig", key)
    if kube:
        site, cluster = kube.groups()
        roles = {"dr"}  # drills, backups and placement at every site
        if site == cfg.site:
            roles.add("runbooks")  # cordons on its own site's clusters
            if cluster == cfg.site_model[site].kube_cluster:
                roles.add("audit")  # audits its own site's Kubernetes
        return frozenset(roles)
    fixed: dict[str, frozenset[str] | str] = {
        "dr.placement.karmada.kubeconfig": frozenset({"dr"}),
        "exporter.web_config": EXPORTERS,
        "exporter.slurm.rest_token_file": frozenset({"slurm-exporter"}),
        "runbooks.web_config": frozenset({"runbooks"}),
        "dr.web_config": frozenset({"dr"}),
        "spiffe.cert_file": EVERY,
        "spiffe.key_file": EVERY,
        "spiffe.bundle_file": EVERY,
        "runbooks.token_file": "flag",  # the container's --token-file names the Secret
        "runbooks.audit_log": "state",
        "dr.placement.state_file": "state",
        "exporter.path_sysfs": "host: --path.sysfs names the hostPath mount",
        "exporter.path_procfs": "host: --path.procfs names the hostPath mount",
        "exporter.gpu.kubelet_socket": "host: the kubelet's pod-resources hostPath",
        "runbooks.kill_switch_file": "absent by design: its presence stops the webhook",
        "spiffe.svid_directory": "a directory; Gotthard reads cert_file, key_file, bundle_file",
    }
    if key in fixed:
        return fixed[key]
    slurm = re.fullmatch(r"sites\.([^.]+)\.clusters\.([^.]+)\.(slurm_conf|slurm_jwt_file)", key)
    if slurm:
        site, cluster, setting = slurm.groups()
        if site != cfg.site:
            return "another site's Slurm: that site's webhook reads it"
        owned = cfg.runbooks.owned_clusters(site, list(cfg.site_model[site].clusters))
        if cluster not in owned:
            return "a cluster another webhook acts on"
        # the webhook's scontrol and sinfo: SLURM_CONF, and SLURM_JWT read from the file
        return "slurm.conf" if setting == "slurm_conf" else frozenset({"runbooks"})
    if re.fullmatch(r"dr\.(schedules|drills)\[\d+\]\..*command\[\d+\]", key):
        return "a Velero hook's command, run in the backed-up pods"
    raise AssertionError(f"{key}: a path no role is known to read; classify it here")


def paths(document: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(dotted key, value) of every absolute path in *document*, [deploy] left out (the
    render reads it, no pod does)."""
    if isinstance(document, dict):
        for key, value in document.items():
            if not (prefix == "" and key == "deploy"):
                yield from paths(value, f"{prefix}.{key}" if prefix else key)
    elif isinstance(document, list):
        for index, value in enumerate(document):
            yield from paths(value, f"{prefix}[{index}]")
    elif isinstance(document, str) and document.startswith("/"):
        yield prefix, document


# --- what the pods mount ---------------------------------------------------------------------


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return obj["spec"]["template"]["spec"]


def provider(
    spec: dict[str, Any], path: str, keys: dict[str, set[str]]
) -> tuple[str, str, str] | None:
    """(kind, name, key) of the Secret or ConfigMap that puts a file at *path* in the pod;
    *keys* are those of each ConfigMap rendered and each Secret ``credentials.txt`` lists
    (a volume projecting every key of one holds those)."""
    (container,) = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    for mount in container["volumeMounts"]:
        root = mount["mountPath"].rstrip("/") + "/"
        if not path.startswith(root):
            continue
        relative = path[len(root) :]
        volume = volumes[mount["name"]]
        for source in volume.get("projected", {}).get("sources") or [volume]:
            for kind in ("secret", "configMap"):
                found = source.get(kind)
                if found is None:
                    continue
                name = found.get("name") or found.get("secretName")
                items = found.get("items")
                # items None: every key of the object, by its name
                if items is None and relative in keys.get(name, set()):
                    return kind, name, relative
                for item in items or []:
                    if item["path"] == relative:
                        return kind, name, item["key"]
    return None


def writable(spec: dict[str, Any], path: str) -> bool:
    (container,) = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    return any(
        path.startswith(m["mountPath"].rstrip("/") + "/")
        and not m.get("readOnly")
        and "emptyDir" in volumes[m["name"]]
        for m in container["volumeMounts"]
    )


def check(out: Path) -> list[tuple[str, str, str, str]]:
    """Walk the rendered site file and check every path in every pod that reads it;
    return (role, key, Secret, Secret key) of each credential file found."""
    objects = [doc for _, doc in manifests(out)]
    (site_map,) = [
        o
        for o in objects
        if o["kind"] == "ConfigMap"
        and o["metadata"]["name"] == "gotthard-site"
        and o["metadata"]["namespace"] == "gotthard"
    ]
    text = site_map["data"]["site.toml"]
    cfg = configuration.from_mapping(tomllib.loads(text))
    pods = {
        o["metadata"]["labels"]["app.kubernetes.io/component"]: o
        for o in objects
        if o["kind"] in ("DaemonSet", "Deployment", "CronJob")
    }
    assert set(pods) == set(ROLES)
    listing = (out / "credentials.txt").read_text()
    config_maps = {
        o["metadata"]["name"]: set(o.get("data", {})) for o in objects if o["kind"] == "ConfigMap"
    }
    secret = ""
    for line in listing.splitlines():  # "Secret NS/NAME:" then "  key KEY: ..."
        if line.startswith("Secret "):
            secret = line.split("/", 1)[1].rstrip(":")
        elif line.startswith("  key "):
            config_maps.setdefault(secret, set()).add(line.split()[1].rstrip(":"))
    # a file named by several keys (one web config for two roles) is read by all their roles
    named = list(paths(cfg.model_dump()))
    by_path: dict[str, set[str]] = {}
    for key, path in named:
        roles = readers(key, cfg)
        if not isinstance(roles, str):
            by_path.setdefault(path, set()).update(roles)
    found = []
    for key, path in named:
        roles = readers(key, cfg)
        roles = roles if isinstance(roles, str) else frozenset(by_path[path])
        if roles == "state":
            for role in ("runbooks",) if key.startswith("runbooks") else ("dr",):
                assert writable(pod_spec(pods[role]), path), f"{role}: {key} = {path} not writable"
            continue
        if roles == "slurm.conf":  # the cluster's own, from a ConfigMap the site makes
            provided = provider(pod_spec(pods["runbooks"]), path, config_maps)
            assert provided is not None, f"runbooks: {key} = {path} is not mounted"
            assert provided[0] == "configMap", (key, provided)
            for role in ROLES:
                if role != "runbooks":
                    assert provider(pod_spec(pods[role]), path, config_maps) is None, role
            continue
        if roles == "flag":
            spec = pod_spec(pods["runbooks"])
            (flag,) = [a for a in spec["containers"][0]["args"] if a.startswith("--token-file=")]
            assert provider(spec, flag.partition("=")[2], config_maps) is not None, flag
            continue
        if isinstance(roles, str):
            continue  # not a file a pod needs from a volume (the reason is in readers())
        for role in ROLES:
            spec = pod_spec(pods[role])
            provided = provider(spec, path, config_maps)
            if role not in roles:
                # least privilege: a credential is mounted only where it is read
                assert provided is None, (role, key, provided)
                continue
            assert provided is not None, f"{role}: {key} = {path} is not mounted"
            kind, name, secret_key = provided
            assert kind == "secret", (role, key, provided)
            assert f"Secret {pods[role]['metadata']['namespace']}/{name}:" in listing
            assert f"key {secret_key}: " in listing, (secret_key, listing)
            found.append((role, key, name, secret_key))
    return found


def test_the_example_site_file_mounts_dr_and_audit_kubeconfigs(tmp_path: Path) -> None:
    found = check(render("kubernetes", tmp_path, EXAMPLE))
    mounted = {(role, key) for role, key, _, _ in found}
    zurich = "sites.zurich.clusters.alps-k8s.kubernetes.kubeconfig"
    lugano = "sites.lugano.clusters.todi-k8s.kubernetes.kubeconfig"
    # without these, DR and the audit exit 2 on a missing kubeconfig
    assert {("dr", zurich), ("dr", lugano), ("audit", zurich), ("runbooks", zurich)} <= mounted
    assert ("audit", lugano) not in mounted and ("runbooks", lugano) not in mounted
    # the webhook's Slurm JWT of its own site's cluster, not Lugano's
    assert ("runbooks", "sites.zurich.clusters.alps.slurm_jwt_file") in mounted
    assert ("runbooks", "sites.lugano.clusters.todi.slurm_jwt_file") not in mounted
    assert {secret for _, _, secret, _ in found} == {
        "gotthard-kubeconfigs",
        "gotthard-slurmrestd-token",
    }


def test_the_deploy_test_site_file(tmp_path: Path) -> None:
    found = check(render("kubernetes", tmp_path, SITE))
    assert {(r, k, s, i) for r, k, s, i in found} == {
        ("dr", "sites.lugano.clusters.lugano-k8s.kubernetes.kubeconfig", "gotthard-kubeconfigs",
         "lugano.kubeconfig"),
        ("runbooks", "sites.zurich.clusters.alps.slurm_jwt_file", "gotthard-slurmrestd-token",
         "alps"),
    }  # fmt: skip


def test_every_kind_of_credential_file(tmp_path: Path) -> None:
    site = tmp_path / "site.toml"
    site.write_text(FULL)
    out = render("kubernetes", tmp_path / "out", site)
    found = check(out)
    by_key = {(role, key): (secret, item) for role, key, secret, item in found}
    assert by_key["slurm-exporter", "exporter.slurm.rest_token_file"] == (
        "gotthard-slurmrestd-token",
        "token",
    )
    assert by_key["node-exporter", "exporter.web_config"] == (
        "gotthard-web-config",
        "web-config.yml",
    )
    assert by_key["dr", "dr.placement.karmada.kubeconfig"] == (
        "gotthard-kubeconfigs",
        "karmada.kubeconfig",
    )
    # two files named "config": each its own key
    assert by_key["dr", "sites.zurich.clusters.alps-gpu.kubernetes.kubeconfig"][1] == (
        "etc_gotthard_kube_alps-gpu_config"
    )
    assert (
        by_key["audit-metrics", "exporter.web_config"]
        == by_key["node-exporter", "exporter.web_config"]
    )
    for role in ROLES:
        assert by_key[role, "spiffe.cert_file"] == ("gotthard-spiffe-svid", "svid.pem")
    # the webhook's JWT of each Slurm cluster it acts on: one key per cluster in the Secret
    # the exporter's token is in, mounted once; Lugano's is its own webhook's
    for cluster in ("alps", "eiger"):
        key = f"sites.zurich.clusters.{cluster}.slurm_jwt_file"
        assert by_key["runbooks", key] == ("gotthard-slurmrestd-token", cluster)
    assert not [k for _, k in by_key if "todi." in k]
    # one projected volume per directory; /etc/gotthard/kube/... are items of /etc/gotthard's
    objects = {(o["kind"], o["metadata"]["name"]): o for _, o in manifests(out)}
    dr = pod_spec(objects["Deployment", "gotthard-dr"])
    roots = sorted(m["mountPath"] for m in dr["containers"][0]["volumeMounts"] if m["readOnly"])
    assert roots == ["/etc/gotthard", "/etc/gotthard-tls", "/etc/karmada", "/run/spiffe"]
    runbooks = pod_spec(objects["Deployment", "gotthard-runbooks"])
    mounts = [m["mountPath"] for m in runbooks["containers"][0]["volumeMounts"]]
    assert len(mounts) == len(set(mounts))
    assert mounts.count("/var/run/secrets/gotthard-slurm") == 1
    assert {"/etc/slurm-alps", "/etc/slurm-eiger"} <= set(mounts)
    # the node exporter's namespace gets its own copies of the Secrets it mounts
    listing = (out / "credentials.txt").read_text()
    assert "Secret gotthard-node/gotthard-web-config:" in listing
    assert "Secret gotthard-node/gotthard-kubeconfigs:" not in listing
    assert "key eiger: the webhook's Slurm JWT" in listing
    assert "key todi:" not in listing


def test_the_check_catches_a_missing_mount(tmp_path: Path) -> None:
    out = render("kubernetes", tmp_path, EXAMPLE)
    dr = out / "dr.yaml"
    text = dr.read_text()
    assert "key: lugano.kubeconfig" in text
    dr.write_text(text.replace("path: lugano.kubeconfig", "path: other.kubeconfig"))
    with pytest.raises(AssertionError, match=r"lugano.*is not mounted"):
        check(out)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        (
            '[dr.placement.karmada]\nkubeconfig = "karmada.kubeconfig"\n',
            "dr.placement.karmada.kubeconfig: 'karmada.kubeconfig' is relative",
        ),
        (
            '[dr.placement.karmada]\nkubeconfig = "/tmp/karmada.kubeconfig"\n',
            "dr.placement.karmada.kubeconfig: /tmp/karmada.kubeconfig cannot be mounted in the"
            " dr pod: /tmp is mounted there already",
        ),
        (
            '[runbooks]\nweb_config = "/etc/gotthard/tls/web.yml"\n',
            "runbooks.web_config: /etc/gotthard/tls/web.yml must lie directly in a mounted"
            " directory",
        ),
    ],
)
def test_unmountable_paths_are_exit_2_naming_the_key(
    setting: str, message: str, tmp_path: Path
) -> None:
    site = tmp_path / "site.toml"
    site.write_text(SITE.read_text().replace("[[dr.drills]]", setting + "\n[[dr.drills]]", 1))
    result = attempt_render("kubernetes", tmp_path / "o", site)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"gotthard deploy: {message}"), line
