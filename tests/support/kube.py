"""The tests' side of the emulated Kubernetes API (:mod:`gotthard_testing.kubeapi`, of the
``gotthard-testing`` distribution in ``testing/``): the ``kube_emulator`` fixture, helpers
that create objects as a real cluster holds them, and the recording of every API call an
emulator serves.

The emulator's public names are re-exported here so the tests import them from one place.

Every API call an emulator serves is recorded as an :class:`ApiCall` (verb, API group,
resource, namespace, which code made it, in which test file), so that the deployment's
RBAC can be checked against what the code really asks for. Recording only observes: the
answers are unchanged; it is attached through ``kubeapi.REQUEST_HOOKS`` when pytest
loads this plugin. Calls are kept, without repeats, in :data:`RECORDED` and, when
``$GOTTHARD_KUBE_CALLS`` names a file, appended to it as JSON lines (a child pytest hands
its calls to its parent that way). The ``kubernetes`` client of this process names the
module that made each call in the ``X-Gotthard-Caller`` header (the first frame outside
the client and ``gotthard.kube``): ``gotthard.dr.lease`` for the DR daemon's code,
``tests.dr.test_cli`` for a test seeding objects. The test doubles' own calls (the
simulated Velero and Deployment controller) are harness, not code a deployment runs:
they are named ``harness:MODULE``.
A call without that header came from another process (a ``gotthard`` child) and is
attributed by its test file.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp.web
import pytest
from kubernetes import client

from gotthard.sandbox import free_ports
from gotthard_testing import kubeapi
from gotthard_testing.kubeapi import (
    CONFIGMAPS,
    CRD_DIR,
    DEPLOYMENTS,
    LEASES,
    NODES,
    PODS,
    SECRETS,
    SERVICES,
    STORAGE_CLASSES,
    EmulatorThread,
    Fault,
    KubeEmulator,
    Resource,
    crd_resources,
    label_selector,
    sandbox_resources,
)
from tests.support.cli import run
from tests.support.wait import wait_until

if TYPE_CHECKING:
    from tests.support.monitoring import Processes

__all__ = [
    "CONFIGMAPS",
    "CRD_DIR",
    "DEPLOYMENTS",
    "KUBEAPI",
    "LEASES",
    "NODES",
    "PODS",
    "RECORDED",
    "SECRETS",
    "SERVICES",
    "STORAGE_CLASSES",
    "ApiCall",
    "EmulatorThread",
    "Fault",
    "KubeEmulator",
    "Resource",
    "assert_stops_cleanly",
    "assert_usage_error",
    "crd_resources",
    "create_pod",
    "deployment_manifest",
    "kube_emulator",
    "label_selector",
    "pod_manifest",
    "sandbox_resources",
    "start_kubeapi",
]

#: File (JSON lines) the recorded API calls are appended to, when set.
CALLS_FILE_ENV = "GOTTHARD_KUBE_CALLS"
#: File of calls recorded by an earlier pytest run that ran the recorded suites to the end
#: (``scripts/run-tests``: parallel workers first, then the RBAC proof on their calls).
RECORDED_FILE_ENV = "GOTTHARD_KUBE_CALLS_RECORDED"
#: Request header naming the module that made a call (set by this process' client).
CALLER_HEADER = "X-Gotthard-Caller"


@dataclass(frozen=True)
class ApiCall:
    """One kind of API call as RBAC sees it, and where it came from.

    ``group`` is ``""`` for the core group; ``resource`` carries a subresource as
    ``backups/status``; ``namespace`` is ``""`` for cluster-scoped and all-namespace
    calls. ``caller`` is the module that made the call (``""``: another process) and
    ``test`` the test file that was running."""

    verb: str
    group: str
    resource: str
    namespace: str
    caller: str
    test: str


#: The distinct calls the emulators of this process have served.
RECORDED: set[ApiCall] = set()
_record_lock = threading.Lock()

#: Subresources of a Namespace (``/api/v1/namespaces/NAME/status``), not resources in it.
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})


def api_call(
    method: str, path: str, query: dict[str, str], caller: str, test: str
) -> ApiCall | None:
    """The RBAC view of one request, or None for a non-resource path (discovery)."""
    parts = [part for part in path.split("/") if part]
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    else:
        return None
    namespace = ""
    if rest[0] == "namespaces" and (
        len(rest) >= 4 or (len(rest) == 3 and rest[2] not in _NAMESPACE_SUBRESOURCES)
    ):
        namespace, rest = rest[1], rest[2:]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) >= 3 else "")
    item = len(rest) >= 2
    verb = {
        "GET": "get" if item else ("watch" if query.get("watch") in ("1", "true") else "list"),
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if item else "deletecollection",
    }.get(method, method.lower())
    return ApiCall(verb, group, resource, namespace, caller, test)


def record(raw: aiohttp.web.BaseRequest) -> None:
    """Add the call *raw* makes to :data:`RECORDED` (and the calls file), once."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split("::")[0]
    call = api_call(raw.method, raw.path, dict(raw.query), raw.headers.get(CALLER_HEADER, ""), test)
    if call is None:
        return
    with _record_lock:
        if call in RECORDED:
            return
        RECORDED.add(call)
        path = os.environ.get(CALLS_FILE_ENV)
        if path:
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(asdict(call)) + "\n")


#: Modules skipped when looking for the caller of an API call.
_PLUMBING = ("kubernetes.", "urllib3.", "pydantic.", "gotthard.kube", __name__)
#: The test doubles that stand in for other software (test harness, not Gotthard).
_HARNESS = ("gotthard_testing.",)


def _caller() -> str:
    """The module of the innermost frame outside the client and ``gotthard.kube``."""
    frame = sys._getframe(2)
    while frame is not None:
        name = str(frame.f_globals.get("__name__", ""))
        if name.startswith(_HARNESS):
            return f"harness:{name}"
        if not name.startswith(_PLUMBING):
            return name
        frame = frame.f_back
    return ""


def _naming_caller(call_api: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(call_api)
    def wrapper(
        self: Any, method: str, url: str, header_params: Any = None, *args: Any, **kwargs: Any
    ) -> Any:
        headers = {**(header_params or {}), CALLER_HEADER: _caller()}
        return call_api(self, method, url, headers, *args, **kwargs)

    wrapper.names_caller = True  # type: ignore[attr-defined]
    return wrapper


def pytest_configure(config: pytest.Config) -> None:
    """Make this process' kubernetes client name the caller of each API call, and record
    every call the emulators of this process serve."""
    if not getattr(client.ApiClient.call_api, "names_caller", False):
        client.ApiClient.call_api = _naming_caller(client.ApiClient.call_api)  # type: ignore[method-assign]
    if record not in kubeapi.REQUEST_HOOKS:
        kubeapi.REQUEST_HOOKS.append(record)


def pod_manifest(
    name: str,
    namespace: str = "app",
    containers: tuple[str, ...] = ("c",),
    image: str = "busybox",
    **labels: str,
) -> dict[str, Any]:
    """A Pod with *containers* (of *image*) and *labels*."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"containers": [{"name": c, "image": image} for c in containers]},
    }


def create_pod(api: client.ApiClient, body: dict[str, Any], phase: str = "") -> None:
    """Create the Pod *body*; with *phase*, then report it in that phase through
    ``/status``, as its kubelet would (the API server starts every Pod Pending)."""
    meta = body["metadata"]
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(meta["namespace"], body)
    if phase:
        core.patch_namespaced_pod_status(
            meta["name"], meta["namespace"], {"status": {"phase": phase}}
        )


def deployment_manifest(
    name: str, namespace: str = "app", replicas: int = 1, image: str = "busybox"
) -> dict[str, Any]:
    """A valid Deployment (selector and pod template) of *replicas* pods of *image*."""
    labels = {"app": name}
    pod = pod_manifest(name, image=image)
    template = {"metadata": {"labels": labels}, "spec": pod["spec"]}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": template},
    }


#: ``python -m gotthard_testing.kubeapi`` with this interpreter.
KUBEAPI = (sys.executable, "-m", "gotthard_testing.kubeapi")


def start_kubeapi(
    procs: Processes, directory: Path, name: str, kind: str = "kubernetes"
) -> tuple[subprocess.Popen[bytes], str, Path]:
    """A standalone emulated API server *name* of *kind* on a free port, started by
    *procs*, once ``/readyz`` answers: its process, URL and kubeconfig."""
    from tests.support.monitoring import http_ok  # a plugin of its own: loaded after this one

    (port,) = free_ports(1)
    url, kubeconfig = f"http://127.0.0.1:{port}", directory / f"{name}.kubeconfig"
    argv = [*KUBEAPI, "--listen", f"127.0.0.1:{port}", "--kind", kind, "--name", name]
    proc = procs.start(name, [*argv, "--kubeconfig", str(kubeconfig)])
    wait_until(functools.partial(http_ok, f"{url}/readyz"), 20, procs.read_logs)
    return proc, url, kubeconfig


def assert_stops_cleanly(proc: subprocess.Popen[bytes], signum: int = signal.SIGTERM) -> None:
    """*proc* (a standalone sandbox part) exits 0 on *signum*."""
    proc.send_signal(signum)
    assert proc.wait(10) == 0


def assert_usage_error(argv: Sequence[str]) -> str:
    """*argv* exits 2 with one line on stderr and no traceback; that line."""
    result = run(argv, timeout=30)
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "error:" in result.stderr and "Traceback" not in result.stderr
    return result.stderr.strip()


@pytest.fixture
def kube_emulator() -> Iterator[Callable[..., EmulatorThread]]:
    """Start emulators serving the given resources; all are stopped after the test."""
    started: list[EmulatorThread] = []

    def start(*resources: Resource) -> EmulatorThread:
        started.append(EmulatorThread(*resources).start())
        return started[-1]

    yield start
    # last started, first stopped: kmock's resolver chain expects that order
    for emulator in reversed(started):
        emulator.stop()
