"""One way to reach Kubernetes: explicit access per cluster, one-line errors, no fallback.

The site model says how each cluster is reached. A kubeconfig that cannot be loaded,
a context it lacks, or an API that does not answer must end the command with one line
naming the site and cluster and exit status 2, and must never reach another cluster:
in particular not the in-cluster API a pod would see (``KUBERNETES_SERVICE_HOST``).
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gotthard import kube
from gotthard.site import KubeAccess, SiteConfig
from tests.dr.emulator import dr_resources
from tests.support.cli import gotthard
from tests.support.kube import EmulatorThread


@pytest.fixture
def k8s(kube_emulator: Callable[..., EmulatorThread]) -> EmulatorThread:
    """A Kubernetes API with the Velero and Karmada resources DR uses."""
    return kube_emulator(*dr_resources())


@pytest.fixture
def listener() -> Iterator[tuple[int, list[str]]]:
    """A TCP port that records every connection made to it (and then closes it)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.settimeout(0.2)
    seen: list[str] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, peer = sock.accept()
            except OSError:
                continue
            seen.append(f"{peer[0]}:{peer[1]}")
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield sock.getsockname()[1], seen
    finally:
        stop.set()
        thread.join(2)
        sock.close()


def site_toml(tmp_path: Path, kubernetes: str, dr: str = "") -> Path:
    """Zurich with a Slurm cluster and a Kubernetes cluster reached as *kubernetes* says."""
    path = tmp_path / "site.toml"
    path.write_text(
        'site = "zurich"\ncluster = "alps"\n'
        "[sites.zurich.clusters.alps]\n"
        "[sites.zurich.clusters.alps-k8s]\n"
        f"[sites.zurich.clusters.alps-k8s.kubernetes]\n{kubernetes}\n"
        "[dr]\napi_attempts = 1\napi_timeout_seconds = 2\n"
        '[[dr.schedules]]\nname = "nightly"\nnamespaces = ["prod"]\n' + dr
    )
    return path


def in_cluster_env(port: int) -> dict[str, str]:
    """The environment of a pod whose own API server is the *port* listener."""
    env = {k: v for k, v in os.environ.items() if k not in ("GOTTHARD_CONFIG", "KUBECONFIG")}
    env.update(KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=str(port))
    return env


def one_line_error(stderr: str) -> str:
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


# --- the factory ------------------------------------------------------------------------


def test_a_missing_kubeconfig_names_the_site_and_cluster(tmp_path: Path) -> None:
    access = KubeAccess(kubeconfig=str(tmp_path / "absent.yaml"))
    with pytest.raises(kube.KubeError) as error:
        kube.client_for(access, "site zurich cluster alps-k8s")
    assert str(error.value).startswith("site zurich cluster alps-k8s: kubeconfig ")
    assert "no such file" in str(error.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("clusters: [unclosed\n", "not valid YAML"),
        ("apiVersion: v1\nkind: Config\n", "kubeconfig"),
        ("- just\n- a list\n", "kubeconfig"),
    ],
)
def test_an_unusable_kubeconfig_is_one_line(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "kubeconfig.yaml"
    path.write_text(text)
    with pytest.raises(kube.KubeError) as error:
        kube.client_for(KubeAccess(kubeconfig=str(path)), "site lugano cluster todi-k8s")
    message = str(error.value)
    assert message.startswith("site lugano cluster todi-k8s: ") and expected in message
    assert "\n" not in message


def test_an_unknown_context_is_an_error_not_the_current_one(
    tmp_path: Path, k8s: EmulatorThread
) -> None:
    path = k8s.kubeconfig(tmp_path / "kubeconfig.yaml")
    assert kube.client_for(KubeAccess(kubeconfig=str(path)), "here") is not None
    with pytest.raises(kube.KubeError, match=r"here: kubeconfig .*lugano"):
        kube.client_for(KubeAccess(kubeconfig=str(path), context="lugano"), "here")


def test_in_cluster_only_when_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    # no service account here: the configured in-cluster access fails, and says why
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "1")
    with pytest.raises(kube.KubeError, match=r"^site a cluster b: in_cluster = true but"):
        kube.client_for(KubeAccess(in_cluster=True), "site a cluster b")


def test_a_cluster_without_kubernetes_access_says_where_to_add_it() -> None:
    site = SiteConfig.model_validate({"clusters": {"alps": {}}})
    with pytest.raises(kube.KubeError) as error:
        kube.site_client("zurich", site)
    assert "site zurich: no Kubernetes access configured" in str(error.value)
    with pytest.raises(kube.KubeError, match=r"\[sites.zurich.clusters.alps.kubernetes\]"):
        kube.site_client("zurich", site, "alps")


# --- the commands -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ("dr", "backup", "now", "--namespace", "prod"),
        ("dr", "drill", "--site", "zurich", "--namespace", "prod"),
        ("dr", "status"),
        ("audit", "cluster", "--site", "zurich"),
    ],
)
def test_a_bad_kubeconfig_never_reaches_the_in_cluster_api(
    tmp_path: Path, listener: tuple[int, list[str]], argv: tuple[str, ...]
) -> None:
    port, seen = listener
    bad = tmp_path / "broken.kubeconfig"
    bad.write_text("clusters: [unclosed\n")
    site = site_toml(tmp_path, f'kubeconfig = "{bad}"')
    result = gotthard("--config", str(site), *argv, env=in_cluster_env(port))
    assert result.returncode == 2, result.stdout + result.stderr
    line = one_line_error(result.stderr)
    assert "site zurich cluster alps-k8s: kubeconfig" in line and "not valid YAML" in line
    assert seen == []  # the pod's own API server was never contacted


def test_an_unreachable_cluster_is_one_line_exit_2(tmp_path: Path, k8s: EmulatorThread) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]  # closed again: nothing listens there
    path = k8s.kubeconfig(tmp_path / "kubeconfig.yaml", server=f"http://127.0.0.1:{dead}")
    site = site_toml(tmp_path, f'kubeconfig = "{path}"')
    result = gotthard("--config", str(site), "dr", "backup", "now", "--namespace", "prod")
    assert result.returncode == 2
    line = one_line_error(result.stderr)
    assert line.startswith("gotthard: site zurich cluster alps-k8s: API unreachable")


def test_the_configured_cluster_is_the_one_reached(tmp_path: Path, k8s: EmulatorThread) -> None:
    """The same command reaches the cluster the site model names, through its kubeconfig."""
    path = k8s.kubeconfig(tmp_path / "kubeconfig.yaml")
    site = site_toml(tmp_path, f'kubeconfig = "{path}"')
    result = gotthard("--config", str(site), "dr", "backup", "now", "--namespace", "prod")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("manual-prod-zurich-")
