"""Slurm from pods in the Kubernetes render: the webhook and the Slurm
exporter get the image with Slurm's client commands where they run them, every path the
site file names for Slurm is mounted, and munge pods run on the Slurm client nodes, not
on the GPU nodes. (tests/runbooks/test_slurm_jwt.py drains and resumes the real sandbox
node the way the rendered webhook does: a JWT file and no munge socket.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gotthard.deploy.kubernetes import SLURM_JWT_DIR
from tests.deploy.rendering import SITE, manifests, render
from tests.support.cli import gotthard


def _objects(out: Path) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for _, o in manifests(out)}


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]["spec"]


def _mounted_files(pod: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    """File path -> (volume kind, source name, key) of every ConfigMap/Secret item."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    out = {}
    for mount in pod["containers"][0]["volumeMounts"]:
        volume = volumes[mount["name"]]
        # a plain volume, or the sources of a projected one (the credential files)
        for source in volume.get("projected", {}).get("sources") or [volume]:
            for kind in ("configMap", "secret"):
                if kind in source:
                    name = source[kind].get("name") or source[kind].get("secretName")
                    for item in source[kind].get("items", []):
                        path = f"{mount['mountPath']}/{item['path']}"
                        assert path not in out, path  # one file, one mount
                        out[path] = (kind, name, item["key"])
    return out


def _site(tmp_path: Path, extra: str) -> Path:
    site = tmp_path / "site.toml"
    site.write_text(SITE.read_text() + extra)
    return site


def test_webhook_reaches_slurm_with_the_jwt_and_slurm_conf_the_site_file_names(
    kubernetes_dir: Path,
) -> None:
    objects = _objects(kubernetes_dir)
    pod = _pod(objects["Deployment", "gotthard-runbooks"])
    (main,) = pod["containers"]
    assert main["image"].endswith("-slurm")
    files = _mounted_files(pod)
    # the site file: alps names slurm_jwt_file and the default slurm.conf; alps-k8s runs
    # no Slurm and gets nothing
    assert files[f"{SLURM_JWT_DIR}/alps"] == ("secret", "gotthard-slurmrestd-token", "alps")
    assert files["/etc/slurm/slurm.conf"] == ("configMap", "gotthard-slurm-conf", "alps")
    assert not [p for p in files if "alps-k8s" in p]
    assert not [v for v in pod["volumes"] if "hostPath" in v]
    assert objects["Deployment", "gotthard-runbooks"]["metadata"]["namespace"] == "gotthard"
    # the exporter reads slurmrestd with the default image: no squeue needed
    exporter = _pod(objects["Deployment", "gotthard-slurm-exporter"])["containers"][0]
    assert "--slurm.backend=rest" in exporter["args"]
    assert not exporter["image"].endswith("-slurm")


def test_munge_pods_use_the_slurm_image_on_the_slurm_client_nodes(tmp_path: Path) -> None:
    site = _site(
        tmp_path,
        '\n[deploy.kubernetes]\nslurm_auth = "munge"\n'
        'slurm_image = "registry.example/gotthard@sha256:' + "a" * 64 + '"\n'
        'slurm_node_selector = { "node-role.example/slurm-login" = "true" }\n',
    )
    out = render("kubernetes", tmp_path / "out", site)
    objects = _objects(out)
    for name in ("gotthard-slurm-exporter", "gotthard-runbooks"):
        deployment = objects["Deployment", name]
        pod = _pod(deployment)
        assert deployment["metadata"]["namespace"] == "gotthard-node"
        assert pod["containers"][0]["image"] == "registry.example/gotthard@sha256:" + "a" * 64
        # never the GPU nodes' selector
        assert pod["nodeSelector"] == {"node-role.example/slurm-login": "true"}
        paths = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
        assert paths == {"/run/munge", "/etc/slurm"}, name
        account = objects["ServiceAccount", name]
        assert account["metadata"]["namespace"] == "gotthard-node"
        # Gotthard's own pod policies admit them with the rendered waivers (host paths,
        # the -slurm image's registry)
        manifest = tmp_path / f"{name}.yaml"
        manifest.write_text(yaml.safe_dump(deployment))
        waivers = out / "waivers" / "policy-data.yml"
        result = gotthard("policy", "eval", "--input", str(manifest), "--data", str(waivers))
        assert result.returncode == 0, result.stdout + result.stderr
    exporter = _pod(objects["Deployment", "gotthard-slurm-exporter"])["containers"][0]
    assert "--slurm.backend=cli" in exporter["args"]


def test_a_slurm_cluster_without_a_jwt_file_is_refused_naming_the_key(tmp_path: Path) -> None:
    text = SITE.read_text().replace('slurm_jwt_file = "/var/run/secrets/gotthard-slurm/alps"\n', "")
    site = tmp_path / "site.toml"
    site.write_text(text)
    result = gotthard("--config", str(site), "deploy", "render", "--target", "kubernetes",
                      "--out", str(tmp_path / "out"))  # fmt: skip
    assert result.returncode == 2
    assert "sites.zurich.clusters.alps.slurm_jwt_file: empty" in result.stderr
    assert "Traceback" not in result.stderr


JWT = 'slurm_jwt_file = "/var/run/secrets/gotthard-slurm/alps"\n'


@pytest.mark.parametrize(
    ("before", "after", "message"),
    [
        # the JWT (a Secret) cannot share the directory of a slurm.conf (a ConfigMap)
        (
            JWT,
            'slurm_jwt_file = "/etc/slurm/alps.jwt"\n',
            "sites.zurich.clusters.alps.slurm_jwt_file: /etc/slurm/alps.jwt cannot be mounted"
            " in the runbooks pod: /etc/slurm is mounted there already",
        ),
        # nor can a slurm.conf lie where the site file is mounted
        (
            JWT,
            JWT + 'slurm_conf = "/etc/gotthard/slurm.conf"\n',
            "sites.zurich.clusters.alps.slurm_conf: /etc/gotthard/slurm.conf cannot be mounted"
            " in the runbooks pod: /etc/gotthard holds the site file",
        ),
        # two Slurm clusters cannot share one slurm.conf path (the default, here)
        (
            "[[dr.drills]]",
            '[sites.zurich.clusters.eiger]\nslurm_jwt_file = "/var/run/secrets/s/eiger"\n'
            "[[dr.drills]]",
            "sites.zurich.clusters.eiger.slurm_conf: /etc/slurm/slurm.conf is cluster alps's"
            " slurm.conf too",
        ),
        # a cluster named "token" would take the Slurm exporter's key of the Secret
        (
            "[[dr.drills]]",
            '[sites.zurich.clusters.token]\nslurm_jwt_file = "/var/run/secrets/s/token"\n'
            '[exporter.slurm]\nrest_token_file = "/var/run/slurm-jwt/token"\n[[dr.drills]]',
            "sites.zurich.clusters.token.slurm_jwt_file: key 'token' of the Secret"
            " gotthard-slurmrestd-token holds exporter.slurm.rest_token_file already",
        ),
    ],
)
def test_slurm_files_no_volume_can_provide_are_exit_2_naming_the_key(
    before: str, after: str, message: str, tmp_path: Path
) -> None:
    text = SITE.read_text()
    assert before in text
    site = tmp_path / "site.toml"
    site.write_text(text.replace(before, after, 1))
    result = gotthard("--config", str(site), "deploy", "render", "--target", "kubernetes",
                      "--out", str(tmp_path / "out"))  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"gotthard deploy: {message}"), line
