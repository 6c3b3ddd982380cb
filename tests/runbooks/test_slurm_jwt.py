"""Slurm from a pod: the webhook drains and resumes the real sandbox node with a Slurm JWT
and no munge socket, as in Kubernetes.

Slurm 22.05's REST API (``openapi/v0.0.38``) cannot update a node: ``/node/{node_name}``
has only ``GET``. Its client commands, though, authenticate with ``auth/jwt`` when
``SLURM_JWT`` is set. These tests give the webhook a ``slurm.conf`` whose munge socket
does not exist (a pod has none) and the cluster's ``slurm_jwt_file``, and check that the
real slurmctld drains and resumes its node through them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from gotthard.config import Config
from gotthard.deploy.kubernetes import SLURM_JWT_DIR
from gotthard.runbooks.actions import ActionError, SlurmActions, read_jwt
from gotthard.runbooks.clusters import from_config, shared
from gotthard.sandbox import Sandbox
from tests.runbooks.conftest import (
    RecordingKubernetes,
    RepairFeed,
    alert_payload,
    sandbox_node,
    sandbox_settings,
    with_repair_query,
)


def _pod_slurm_conf(sandbox: Sandbox, directory: Path) -> Path:
    """The sandbox's slurm.conf with a munge socket that does not exist, as in a pod."""
    text = Path(sandbox.slurm_conf).read_text(encoding="utf-8")
    missing = f"AuthInfo=socket={directory}/no-munge/munge.socket.2"
    text = re.sub(r"(?m)^AuthInfo=.*$", missing, text)
    if missing not in text:
        text += f"\n{missing}\n"
    conf = directory / "slurm.conf"
    conf.write_text(text, encoding="utf-8")
    return conf


@pytest.fixture
def pod_slurm(node_restored: Sandbox, tmp_path: Path) -> tuple[Sandbox, Path, Path]:
    """(sandbox, client slurm.conf without munge, JWT file 0600 as a Secret mount)."""
    if "AuthAltTypes=auth/jwt" not in Path(node_restored.slurm_conf).read_text():
        pytest.fail("the sandbox's slurmctld does not accept JWTs (slurm-wlm-jwt-plugin)")
    conf = _pod_slurm_conf(node_restored, tmp_path)
    token = tmp_path / "token"
    token.write_text(node_restored.token("root") + "\n", encoding="ascii")
    token.chmod(0o600)
    return node_restored, conf, token


def test_without_a_jwt_the_pod_has_no_way_to_slurm(
    pod_slurm: tuple[Sandbox, Path, Path], tmp_path: Path
) -> None:
    sandbox, conf, _ = pod_slurm
    slurm = SlurmActions(sandbox_settings(tmp_path, mode="enforce"), slurm_conf=str(conf))
    with pytest.raises(ActionError, match="authentication error"):
        slurm.drain(sandbox.node_name, "GPULost")
    assert sandbox_node(sandbox) == ("idle", "none")


def test_webhook_drains_and_resumes_the_real_node_with_a_jwt(
    pod_slurm: tuple[Sandbox, Path, Path],
    tmp_path: Path,
    start_server: Any,
    repair_feed: RepairFeed,
) -> None:
    sandbox, conf, token = pod_slurm
    settings = sandbox_settings(tmp_path, mode="enforce", prometheus_url=repair_feed.url)
    kubernetes = RecordingKubernetes()
    slurm = SlurmActions(settings, slurm_conf=str(conf), jwt_file=str(token))
    clusters = shared(settings, ["sandbox"], slurm=slurm, kubernetes=kubernetes)
    running = start_server(settings, clusters=clusters)
    labels = {"cluster": "sandbox", "node": sandbox.node_name}

    repair_feed.health(sandbox.node_name, 0)
    code, answer = running.post(alert_payload(**labels))
    assert code == 200, answer
    drains = [r for r in running.audit() if r.get("action") == "slurm.drain_node"]
    assert [r["result"] for r in drains] == ["ok"], drains
    state, reason = sandbox_node(sandbox)
    assert state in ("drained", "draining") and reason == "gotthard: GPULost"
    assert kubernetes.calls == [("cordon", sandbox.node_name)]

    repair_feed.health(sandbox.node_name, 1)
    resolved = with_repair_query(alert_payload(status="resolved", **labels))
    code, answer = running.post(resolved)
    assert code == 200, answer
    resumes = [r for r in running.audit() if r.get("action") == "slurm.resume_node"]
    assert [r["result"] for r in resumes] == ["ok"], resumes
    assert sandbox_node(sandbox) == ("idle", "none")


def test_an_unreadable_or_bad_token_fails_closed_naming_the_file(
    pod_slurm: tuple[Sandbox, Path, Path], tmp_path: Path
) -> None:
    sandbox, conf, token = pod_slurm
    settings = sandbox_settings(tmp_path, mode="enforce")
    secret = token.read_text().strip()
    for content, why in ((None, "cannot read"), ("", "empty"), ("not a token", "not a JWT")):
        path = tmp_path / "bad-token"
        path.unlink(missing_ok=True)
        if content is not None:
            path.write_text(content)
        slurm = SlurmActions(settings, slurm_conf=str(conf), jwt_file=str(path))
        with pytest.raises(ActionError, match=f"{re.escape(str(path))}: {why}") as caught:
            slurm.drain(sandbox.node_name, "GPULost")
        assert secret not in str(caught.value)
    assert sandbox_node(sandbox) == ("idle", "none")


def test_scontrol_token_output_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("SLURM_JWT=aaa.bbb.ccc\n")
    assert read_jwt(str(path)) == "aaa.bbb.ccc"


def test_the_site_model_gives_each_cluster_its_jwt_file(tmp_path: Path) -> None:
    cfg = Config.model_validate(
        {
            "site": "zurich",
            "cluster": "alps",
            "sites": {
                "zurich": {
                    "clusters": {
                        "alps": {
                            "slurm_conf": "/etc/slurm/slurm.conf",
                            "slurm_jwt_file": "/var/run/secrets/gotthard-slurm/token",
                        },
                        "eiger": {"slurm_conf": "/etc/slurm-eiger/slurm.conf"},
                    }
                }
            },
        }
    )
    clusters = from_config(cfg, sandbox_settings(tmp_path))
    alps = clusters.owned["alps"].backends.slurm
    eiger = clusters.owned["eiger"].backends.slurm
    assert (alps.slurm_conf, alps.jwt_file) == (
        "/etc/slurm/slurm.conf",
        "/var/run/secrets/gotthard-slurm/token",
    )
    assert (eiger.slurm_conf, eiger.jwt_file) == ("/etc/slurm-eiger/slurm.conf", "")


def _slurm_image() -> str:
    """The ``-slurm`` image scripts/build-image just built (it sets GOTTHARD_SLURM_IMAGE)."""
    from gotthard import __version__

    return os.environ.get("GOTTHARD_SLURM_IMAGE", f"localhost/gotthard:{__version__}-slurm")


@pytest.mark.image
def test_the_slurm_image_drains_and_resumes_as_the_webhook_pod(
    pod_slurm: tuple[Sandbox, Path, Path],
) -> None:
    """Inside the image ``make image`` builds: read-only root, uid 10001, no munge socket,
    the slurm.conf and JWT mounted read-only where the render mounts them. Run by
    scripts/build-image after the build, not by ``make test``."""
    image = _slurm_image()
    exists = shutil.which("podman") and subprocess.run(
        ["podman", "image", "exists", image], capture_output=True, check=False
    )
    if not exists or exists.returncode != 0:
        pytest.fail(f"no image {image}: build it with `make image`, which runs this test")
    sandbox, conf, token = pod_slurm
    mounts = Path(tempfile.mkdtemp(prefix="gtt-pod-", dir="/tmp"))
    try:
        for name, source in (("etc-slurm/slurm.conf", conf), ("secret/sandbox", token)):
            target = mounts / name
            target.parent.mkdir(mode=0o755)
            target.write_bytes(source.read_bytes())
            target.chmod(0o444)
        mounts.chmod(0o755)
        code = (
            "from gotthard.runbooks.actions import SlurmActions\n"
            "from gotthard.runbooks.settings import RunbooksConfig\n"
            "s = SlurmActions(RunbooksConfig(), '/etc/slurm/slurm.conf',"
            f" jwt_file='{SLURM_JWT_DIR}/sandbox')\n"
            "import sys\n"
            "node = sys.argv[1]\n"
            "print(s.drain(node, 'GPULost').result, s.node(node).reason)\n"
            "print(s.resume(node, 'GPULost').result, s.node(node).effective_state)\n"
        )
        conf_file = build_dir() / "containers.conf"
        env = {**os.environ, **({"CONTAINERS_CONF": str(conf_file)} if conf_file.exists() else {})}
        argv = ["podman", "run", "--rm", "--runtime", "runc", "--network", "host", "--read-only",
                "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=4096:4096",
                "-v", f"{mounts / 'etc-slurm'}:/etc/slurm:ro",
                "-v", f"{mounts / 'secret'}:{SLURM_JWT_DIR}:ro",
                "--entrypoint", "/opt/gotthard/bin/python", image,
                "-c", code, sandbox.node_name]  # fmt: skip
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.stdout.splitlines() == ["ok gotthard: GPULost", "ok idle"]
        assert sandbox_node(sandbox) == ("idle", "none")
    finally:
        shutil.rmtree(mounts)


def build_dir() -> Path:
    """``scripts/build-image``'s work directory (its containers.conf: runc, rlimits)."""
    return Path(__file__).resolve().parents[2] / "build" / "image"
