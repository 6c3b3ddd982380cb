"""The Kubernetes API emulator behaves like an API server where Gotthard depends on it.

Each test drives the emulator with the official ``kubernetes`` client, as the code under
test does, and checks what a real API server answers: 201 on create, 409 AlreadyExists,
resourceVersion bumped on every write, PUT with optimistic concurrency (409 Conflict),
label selectors on list, namespace deletion taking its objects along, and Leases. It is
strict where a real API server is: an invalid object is a 422 ``Invalid`` naming the
field (built-in kinds against Kubernetes' OpenAPI schemas, custom resources against
their CRD's), and ``status`` is written only where the kind lets it be (the ``/status``
subresource; on create only for Nodes; anywhere for a CRD without the subresource). The
health switch makes it look down to monitoring while its API keeps answering, and the
standalone process (``python -m gotthard_testing.kubeapi``) serves one as the sandbox does.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import stat
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from gotthard.sandbox import free_ports
from tests.support.kube import (
    CRD_DIR,
    DEPLOYMENTS,
    KUBEAPI,
    LEASES,
    NODES,
    PODS,
    EmulatorThread,
    assert_stops_cleanly,
    assert_usage_error,
    crd_resources,
    deployment_manifest,
    label_selector,
    pod_manifest,
    start_kubeapi,
)
from tests.support.monitoring import Processes, promtool_check_metrics


@pytest.fixture
def k8s(kube_emulator: Callable[..., EmulatorThread]) -> EmulatorThread:
    return kube_emulator(PODS, DEPLOYMENTS, LEASES)


def lease(name: str, holder: str) -> client.V1Lease:
    return client.V1Lease(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1LeaseSpec(holder_identity=holder, lease_duration_seconds=15),
    )


def api_error(call: Callable[[], object]) -> tuple[int, dict[str, object]]:
    with pytest.raises(client.ApiException) as info:
        call()
    return info.value.status, json.loads(info.value.body)


def test_create_answers_201_and_a_second_create_409_already_exists(k8s: EmulatorThread) -> None:
    core = client.CoreV1Api(k8s.api())
    _, status, _ = core.create_namespaced_pod_with_http_info("app", pod_manifest("web"))
    assert status == 201
    code, body = api_error(lambda: core.create_namespaced_pod("app", pod_manifest("web")))
    assert code == 409
    assert body["kind"] == "Status" and body["reason"] == "AlreadyExists"
    # the same name in another namespace is another object
    assert core.create_namespaced_pod("other", pod_manifest("web", "other")).metadata.name == "web"


def test_resource_version_is_set_and_bumped_on_every_write(k8s: EmulatorThread) -> None:
    core = client.CoreV1Api(k8s.api())
    created = core.create_namespaced_pod("app", pod_manifest("web"))
    v1 = created.metadata.resource_version
    assert v1 and created.metadata.uid and created.metadata.creation_timestamp
    patched = core.patch_namespaced_pod("web", "app", {"metadata": {"labels": {"a": "b"}}})
    v2 = patched.metadata.resource_version
    assert int(v2) > int(v1)
    status = core.patch_namespaced_pod_status("web", "app", {"status": {"phase": "Running"}})
    assert int(status.metadata.resource_version) > int(v2)
    read = core.read_namespaced_pod("web", "app")
    assert read.metadata.resource_version == status.metadata.resource_version
    assert read.metadata.uid == created.metadata.uid
    assert read.status.phase == "Running"


def test_put_replaces_and_a_stale_resource_version_is_a_conflict(k8s: EmulatorThread) -> None:
    core = client.CoreV1Api(k8s.api())
    created = core.create_namespaced_pod("app", pod_manifest("web", tier="a"))
    body = core.read_namespaced_pod("web", "app")
    body.metadata.labels = {"tier": "b"}
    replaced = core.replace_namespaced_pod("web", "app", body)
    assert replaced.metadata.labels == {"tier": "b"}  # replaced, not merged
    assert int(replaced.metadata.resource_version) > int(created.metadata.resource_version)
    assert replaced.metadata.uid == created.metadata.uid

    body.metadata.labels = {"tier": "c"}  # still carries the old resourceVersion
    code, status = api_error(lambda: core.replace_namespaced_pod("web", "app", body))
    assert code == 409 and status["reason"] == "Conflict"
    stale = {"metadata": {"resourceVersion": created.metadata.resource_version, "labels": {}}}
    code, status = api_error(lambda: core.patch_namespaced_pod("web", "app", stale))
    assert code == 409 and status["reason"] == "Conflict"
    assert core.read_namespaced_pod("web", "app").metadata.labels == {"tier": "b"}

    fresh = {"metadata": {"resourceVersion": replaced.metadata.resource_version}}
    assert core.patch_namespaced_pod("web", "app", fresh).metadata.labels == {"tier": "b"}
    code, _ = api_error(lambda: core.replace_namespaced_pod("gone", "app", body))
    assert code == 404


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("tier=web", ["a"]),
        ("tier==web", ["a"]),
        ("tier!=web", ["b", "c"]),
        ("tier in (web, db)", ["a", "b"]),
        ("tier notin (web,db)", ["c"]),
        ("tier", ["a", "b"]),
        ("!tier", ["c"]),
        ("tier in (web,db),env=prod", ["b"]),
    ],
)
def test_list_honours_label_selectors(
    k8s: EmulatorThread, selector: str, expected: list[str]
) -> None:
    core = client.CoreV1Api(k8s.api())
    core.create_namespaced_pod("app", pod_manifest("a", tier="web"))
    core.create_namespaced_pod("app", pod_manifest("b", tier="db", env="prod"))
    core.create_namespaced_pod("app", pod_manifest("c", env="prod"))
    found = core.list_namespaced_pod("app", label_selector=selector)
    assert sorted(p.metadata.name for p in found.items) == expected
    assert found.metadata.resource_version


def test_a_malformed_label_selector_is_a_bad_request(k8s: EmulatorThread) -> None:
    core = client.CoreV1Api(k8s.api())
    code, status = api_error(lambda: core.list_namespaced_pod("app", label_selector="a in b"))
    assert code == 400 and status["reason"] == "BadRequest"
    with pytest.raises(ValueError):
        label_selector("!a=b")


def test_namespaces_are_selected_by_label_and_deleting_one_deletes_its_objects(
    k8s: EmulatorThread,
) -> None:
    core = client.CoreV1Api(k8s.api())
    custom = client.CustomObjectsApi(k8s.api())
    for name, labels in (("app", {"scratch": "true"}), ("keep", {})):
        meta = client.V1ObjectMeta(name=name, labels=labels)
        assert core.create_namespace(client.V1Namespace(metadata=meta)).metadata.resource_version
    code, status = api_error(
        lambda: core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="app")))
    )
    assert code == 409 and status["reason"] == "AlreadyExists"
    listed = core.list_namespace(label_selector="scratch=true")
    assert [n.metadata.name for n in listed.items] == ["app"]

    core.create_namespaced_pod("app", pod_manifest("web"))
    core.create_namespaced_pod("keep", pod_manifest("web", "keep"))
    deployment = deployment_manifest("d", "app")
    custom.create_namespaced_custom_object("apps", "v1", "app", "deployments", deployment)
    core.delete_namespace("app")
    assert core.list_namespaced_pod("app").items == []
    assert custom.list_namespaced_custom_object("apps", "v1", "app", "deployments")["items"] == []
    assert [p.metadata.name for p in core.list_namespaced_pod("keep").items] == ["web"]
    code, _ = api_error(lambda: core.read_namespaced_pod("web", "app"))
    assert code == 404
    code, _ = api_error(lambda: core.read_namespace("app"))
    assert code == 404


def test_lease_api_create_replace_and_conflict(k8s: EmulatorThread) -> None:
    leases = client.CoordinationV1Api(k8s.api())
    _, status, _ = leases.create_namespaced_lease_with_http_info("gotthard", lease("l", "a"))
    assert status == 201
    code, body = api_error(lambda: leases.create_namespaced_lease("gotthard", lease("l", "b")))
    assert code == 409 and body["reason"] == "AlreadyExists"

    seen_by_a = leases.read_namespaced_lease("l", "gotthard")
    seen_by_b = leases.read_namespaced_lease("l", "gotthard")
    seen_by_b.spec.holder_identity = "b"
    assert leases.replace_namespaced_lease("l", "gotthard", seen_by_b).spec.holder_identity == "b"
    seen_by_a.spec.holder_identity = "a"  # a read before b wrote: it lost the race
    code, body = api_error(lambda: leases.replace_namespaced_lease("l", "gotthard", seen_by_a))
    assert code == 409 and body["reason"] == "Conflict"
    assert leases.read_namespaced_lease("l", "gotthard").spec.holder_identity == "b"


def test_writes_with_an_injected_delay_keep_their_order(k8s: EmulatorThread) -> None:
    """A delayed request is delayed before it is served: the version check happens at
    serving time, so a write that waited behind a faster one conflicts."""
    leases = client.CoordinationV1Api(k8s.api())
    leases.create_namespaced_lease("gotthard", lease("l", "a"))
    slow = leases.read_namespaced_lease("l", "gotthard")
    fast = leases.read_namespaced_lease("l", "gotthard")
    k8s.fault("PUT", "/apis/coordination.k8s.io/v1/namespaces/gotthard/leases", 0, 0.3)
    slow.spec.holder_identity = "slow"
    thread = leases.replace_namespaced_lease("l", "gotthard", slow, async_req=True)
    time.sleep(0.05)
    fast.spec.holder_identity = "fast"
    leases.replace_namespaced_lease("l", "gotthard", fast)
    with pytest.raises(client.ApiException) as info:
        thread.get(5)
    assert info.value.status == 409
    assert leases.read_namespaced_lease("l", "gotthard").spec.holder_identity == "fast"


# -- a strict API server: validation ----------------------------------------------------------


def send(url: str, method: str, body: object) -> tuple[int, dict[str, Any]]:
    """Status and JSON answer of a raw request: the ``kubernetes`` client checks bodies of
    the built-in kinds itself (pydantic) and would not send an invalid one."""
    code, text = http(url, method, body)
    return code, json.loads(text)


def causes(body: dict[str, object]) -> list[tuple[str, str]]:
    """(field, reason) of each cause of a Status."""
    listed = body["details"]["causes"]  # type: ignore[index]
    return [(c["field"], c["reason"]) for c in listed]  # type: ignore[union-attr]


def without(body: dict[str, Any], field: str) -> dict[str, Any]:
    """*body* without *field* (``spec.containers[0].name``)."""
    *path, last = [int(p) if p.isdigit() else p for p in re.split(r"[.\[\]]+", field) if p]
    inner: Any = body
    for key in path:
        inner = inner[key]
    del inner[last]
    return body


DEPLOYMENTS_PATH = "/apis/apps/v1/namespaces/app/deployments"


def test_a_deployment_without_a_pod_template_is_invalid(k8s: EmulatorThread) -> None:
    apps = client.AppsV1Api(k8s.api())
    body = without(deployment_manifest("web"), "spec.template")
    code, status = send(f"{k8s.url}{DEPLOYMENTS_PATH}", "POST", body)
    assert code == 422 and status["kind"] == "Status" and status["reason"] == "Invalid"
    assert causes(status) == [("spec.template", "FieldValueRequired")]
    assert status["message"] == 'Deployment.apps "web" is invalid: spec.template: Required value'
    assert status["details"]["name"] == "web" and status["details"]["kind"] == "Deployment"
    assert apps.list_namespaced_deployment("app").items == []


def _mismatched_labels(body: dict[str, Any]) -> dict[str, Any]:
    body["spec"]["template"]["metadata"]["labels"] = {"app": "other"}
    return body


@pytest.mark.parametrize(
    ("resource", "body", "field", "reason"),
    [
        *(
            (resource, without(manifest("web"), field), field, "FieldValueRequired")
            for resource, manifest, field in [
                ("pods", pod_manifest, "spec.containers"),
                ("pods", pod_manifest, "spec.containers[0].name"),
                ("pods", pod_manifest, "spec.containers[0].image"),
                ("pods", pod_manifest, "metadata.name"),
                ("deployments", deployment_manifest, "spec.selector"),
            ]
        ),
        (
            "deployments",
            _mismatched_labels(deployment_manifest("web")),
            "spec.template.metadata.labels",
            "FieldValueInvalid",
        ),
    ],
    ids=["no-containers", "no-container-name", "no-image", "no-name", "no-selector", "selector"],
)
def test_invalid_built_in_objects_are_refused_naming_the_field(
    k8s: EmulatorThread, resource: str, body: dict[str, object], field: str, reason: str
) -> None:
    path = "/api/v1/namespaces/app/pods" if resource == "pods" else DEPLOYMENTS_PATH
    code, status = send(f"{k8s.url}{path}", "POST", body)
    assert (code, status["reason"]) == (422, "Invalid")
    assert (field, reason) in causes(status)
    assert f"{field}: " in status["message"]


def test_a_value_of_the_wrong_type_in_a_built_in_kind_is_a_bad_request(k8s: EmulatorThread) -> None:
    body = {"metadata": {"name": "l"}, "spec": {"leaseDurationSeconds": "15"}}
    path = "/apis/coordination.k8s.io/v1/namespaces/gotthard/leases"
    code, status = send(f"{k8s.url}{path}", "POST", body)
    assert (code, status["reason"]) == (400, "BadRequest")
    assert "spec.leaseDurationSeconds" in status["message"]


def test_replace_and_patch_are_validated_and_leave_the_object_as_it_was(
    k8s: EmulatorThread,
) -> None:
    apps = client.AppsV1Api(k8s.api())
    created = apps.create_namespaced_deployment("app", deployment_manifest("web"))
    patch = {"spec": {"template": None}}
    code, status = api_error(lambda: apps.patch_namespaced_deployment("web", "app", patch))
    assert code == 422 and causes(status) == [("spec.template", "FieldValueRequired")]
    body = without(deployment_manifest("web"), "spec.selector")
    code, status = send(f"{k8s.url}{DEPLOYMENTS_PATH}/web", "PUT", body)
    assert code == 422 and ("spec.selector", "FieldValueRequired") in causes(status)
    read = apps.read_namespaced_deployment("web", "app")
    assert read.spec.template.spec.containers[0].image == "busybox"
    assert read.metadata.resource_version == created.metadata.resource_version


def test_unknown_fields_are_kept_by_default_and_refused_with_strict_field_validation(
    k8s: EmulatorThread,
) -> None:
    body = pod_manifest("web")
    body["spec"]["containerz"] = []
    pods = f"{k8s.url}/api/v1/namespaces/app/pods"
    code, status = send(f"{pods}?fieldValidation=Strict", "POST", body)
    assert (code, status["reason"]) == (400, "BadRequest")
    assert status["message"] == 'strict decoding error: unknown field "spec.containerz"'
    code, created = send(pods, "POST", body)
    assert code == 201 and created["spec"]["containerz"] == []


@pytest.fixture
def velero_k8s(kube_emulator: Callable[..., EmulatorThread]) -> EmulatorThread:
    crds = [
        CRD_DIR / f"velero.io_{plural}.yaml" for plural in ("backups", "backupstoragelocations")
    ]
    return kube_emulator(*crd_resources(*crds))


def velero_object(
    kind: str, name: str, spec: dict[str, object], **more: object
) -> dict[str, object]:
    meta = {"name": name, "namespace": "velero"}
    return {"apiVersion": "velero.io/v1", "kind": kind, "metadata": meta, "spec": spec, **more}


@pytest.mark.parametrize(
    ("plural", "body", "field", "reason"),
    [
        (
            "backups",
            velero_object("Backup", "b", {"includedNamespaces": "prod"}),
            "spec.includedNamespaces",
            "FieldValueTypeInvalid",
        ),
        (
            "backups",
            velero_object("Backup", "b", {}, status={"phase": "Done"}),
            "status.phase",
            "FieldValueNotSupported",
        ),
        (
            "backupstoragelocations",
            velero_object("BackupStorageLocation", "l", {"objectStorage": {"bucket": "b"}}),
            "spec.provider",
            "FieldValueRequired",
        ),
    ],
    ids=["type", "enum", "required"],
)
def test_custom_resources_are_validated_against_their_crd(
    velero_k8s: EmulatorThread, plural: str, body: dict[str, object], field: str, reason: str
) -> None:
    custom = client.CustomObjectsApi(velero_k8s.api())
    code, status = api_error(
        lambda: custom.create_namespaced_custom_object("velero.io", "v1", "velero", plural, body)
    )
    assert (code, status["reason"]) == (422, "Invalid")
    assert causes(status) == [(field, reason)]
    assert status["details"]["group"] == "velero.io"


# -- a strict API server: status ----------------------------------------------------------------


def test_status_given_on_create_or_update_is_dropped_and_only_status_writes_it(
    k8s: EmulatorThread,
) -> None:
    apps, core = client.AppsV1Api(k8s.api()), client.CoreV1Api(k8s.api())
    body = {**deployment_manifest("web", replicas=2), "status": {"readyReplicas": 2}}
    created = apps.create_namespaced_deployment("app", body)
    assert created.status is None or created.status.ready_replicas is None
    assert created.metadata.generation == 1
    pod = core.create_namespaced_pod("app", {**pod_manifest("p"), "status": {"phase": "Running"}})
    assert pod.status.phase == "Pending"  # as podStrategy.PrepareForCreate sets it

    patched = apps.patch_namespaced_deployment(
        "web", "app", {"spec": {"replicas": 3}, "status": {"readyReplicas": 3}}
    )
    assert patched.spec.replicas == 3 and patched.metadata.generation == 2
    assert patched.status is None or patched.status.ready_replicas is None
    replaced = apps.read_namespaced_deployment("web", "app")
    replaced.status = client.V1DeploymentStatus(ready_replicas=3)
    replaced = apps.replace_namespaced_deployment("web", "app", replaced)
    assert replaced.status is None or replaced.status.ready_replicas is None

    # /status writes status, and nothing else: the spec stays, generation too
    change = {"spec": {"replicas": 9}, "status": {"readyReplicas": 3, "replicas": 3}}
    written = apps.patch_namespaced_deployment_status("web", "app", change)
    assert written.status.ready_replicas == 3 and written.spec.replicas == 3
    assert written.metadata.generation == 2
    assert int(written.metadata.resource_version) > int(replaced.metadata.resource_version)
    labelled = apps.patch_namespaced_deployment("web", "app", {"metadata": {"labels": {"a": "b"}}})
    assert labelled.status.ready_replicas == 3 and labelled.metadata.generation == 2


def test_a_node_keeps_the_status_it_is_created_with(
    kube_emulator: Callable[..., EmulatorThread],
) -> None:
    core = client.CoreV1Api(kube_emulator(NODES).api())
    ready = {"conditions": [{"type": "Ready", "status": "True"}]}
    node = {"metadata": {"name": "nid001"}, "status": ready}
    assert core.create_node(node).status.conditions[0].status == "True"
    core.patch_node("nid001", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    assert core.read_node("nid001").status.conditions[0].status == "True"
    core.patch_node_status(
        "nid001", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    )
    assert core.read_node("nid001").status.conditions[0].status == "False"


def test_a_crd_without_the_status_subresource_has_status_as_a_plain_field(
    velero_k8s: EmulatorThread,
) -> None:
    """Velero's CRDs declare no status subresource: create and patch write status, and
    ``/status`` does not exist."""
    custom = client.CustomObjectsApi(velero_k8s.api())
    args = ("velero.io", "v1", "velero", "backups")
    body = velero_object("Backup", "b", {}, status={"phase": "New"})
    assert custom.create_namespaced_custom_object(*args, body)["status"] == {"phase": "New"}
    patched = custom.patch_namespaced_custom_object(*args, "b", {"status": {"phase": "InProgress"}})
    assert patched["status"] == {"phase": "InProgress"}
    code, _ = api_error(
        lambda: custom.patch_namespaced_custom_object_status(*args, "b", {"status": {}})
    )
    assert code == 404


def test_a_namespace_starts_active_and_needs_a_name(k8s: EmulatorThread) -> None:
    core = client.CoreV1Api(k8s.api())
    body = {"metadata": {"name": "app"}, "status": {"phase": "Terminating"}}
    assert core.create_namespace(body).status.phase == "Active"
    code, status = api_error(lambda: core.create_namespace({"metadata": {}}))
    assert code == 422 and causes(status) == [("metadata.name", "FieldValueRequired")]


# -- the health switch, /metrics and the standalone process ------------------------------------


def http(url: str, method: str = "GET", body: object = None) -> tuple[int, str]:
    """Status and body of one request (an HTTP error status is an answer, not a raise)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_health_switch_turns_probes_and_metrics_into_503_and_the_api_keeps_answering(
    k8s: EmulatorThread,
) -> None:
    core = client.CoreV1Api(k8s.api())
    core.create_namespaced_pod("app", pod_manifest("web"))
    core.create_namespaced_pod("app", pod_manifest("db"))
    assert http(f"{k8s.url}/livez") == (200, "ok")
    assert http(f"{k8s.url}/readyz") == (200, "ok")
    code, text = http(f"{k8s.url}/metrics")
    assert code == 200
    promtool_check_metrics(text)
    assert 'apiserver_emulated_objects{resource="pods",version="v1"} 2' in text
    assert 'apiserver_emulated_objects{resource="deployments.apps",version="v1"} 0' in text
    assert 'apiserver_emulated_objects{resource="leases.coordination.k8s.io",' in text

    k8s.set_healthy(False)
    for path in ("/livez", "/readyz", "/metrics"):
        assert http(f"{k8s.url}{path}")[0] == 503, path
    assert sorted(p.metadata.name for p in core.list_namespaced_pod("app").items) == ["db", "web"]

    assert http(f"{k8s.url}/_emulator/health", "PUT", {"healthy": True}) == (
        200,
        '{"healthy": true}',
    )
    assert http(f"{k8s.url}/metrics")[0] == 200
    assert http(f"{k8s.url}/_emulator/health", "PUT", {"healthy": "no"})[0] == 400
    assert http(f"{k8s.url}/_emulator/health", "PUT", {"healthy": False})[0] == 200
    assert http(f"{k8s.url}/readyz")[0] == 503


def test_the_standalone_api_server_serves_the_kubernetes_client_until_sigterm(
    tmp_path: Path,
) -> None:
    with Processes(tmp_path / "logs") as procs:
        proc, url, kubeconfig = start_kubeapi(procs, tmp_path, "zurich")
        assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
        api = config.new_client_from_config(config_file=str(kubeconfig), context="zurich")
        assert api.configuration.host == url
        apps = client.AppsV1Api(api)
        _, status, _ = apps.create_namespaced_deployment_with_http_info(
            "app", deployment_manifest("web")
        )
        assert status == 201
        assert [d.metadata.name for d in apps.list_namespaced_deployment("app").items] == ["web"]
        velero = client.CustomObjectsApi(api).list_namespaced_custom_object(
            "velero.io", "v1", "velero", "backups"
        )
        assert velero["items"] == []

        assert http(f"{url}/_emulator/health", "PUT", {"healthy": False})[0] == 200
        assert http(f"{url}/metrics")[0] == 503
        assert apps.read_namespaced_deployment("web", "app").spec.replicas == 1
        assert http(f"{url}/_emulator/health", "PUT", {"healthy": True})[0] == 200
        code, text = http(f"{url}/metrics")
        assert code == 200
        assert 'apiserver_emulated_objects{resource="deployments.apps",version="v1"} 1' in text

        assert_stops_cleanly(proc)


def test_the_karmada_kind_serves_propagation_policies_and_not_deployments(
    tmp_path: Path,
) -> None:
    with Processes(tmp_path / "logs") as procs:
        proc, _, kubeconfig = start_kubeapi(procs, tmp_path, "karmada", "karmada")
        custom = client.CustomObjectsApi(config.new_client_from_config(str(kubeconfig)))
        listed = custom.list_namespaced_custom_object(
            "policy.karmada.io", "v1alpha1", "default", "propagationpolicies"
        )
        assert listed["items"] == []
        with pytest.raises(client.ApiException) as info:
            custom.list_namespaced_custom_object("apps", "v1", "app", "deployments")
        assert info.value.status == 404
        assert_stops_cleanly(proc, signal.SIGINT)


@pytest.mark.parametrize(
    "args",
    [
        ["--listen", "127.0.0.1", "--name", "x"],
        ["--listen", "127.0.0.1:99999", "--name", "x"],
        ["--listen", "127.0.0.1:1234", "--name", "x", "--kind", "openshift"],
        ["--name", "x"],
    ],
    ids=["no-port", "bad-port", "bad-kind", "no-listen"],
)
def test_bad_arguments_exit_2_with_one_line(tmp_path: Path, args: list[str]) -> None:
    assert_usage_error([*KUBEAPI, *args, "--kubeconfig", str(tmp_path / "k")])
    assert not (tmp_path / "k").exists()


def test_a_port_in_use_exits_2_with_one_line(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = tmp_path / "k"
        line = assert_usage_error(
            [*KUBEAPI, "--listen", f"127.0.0.1:{port}", "--name", "x", "--kubeconfig", str(out)]
        )
    assert f"127.0.0.1:{port}" in line
    assert not out.exists()


def test_an_unwritable_kubeconfig_exits_2_naming_it(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    out = tmp_path / "missing" / "k"
    argv = [*KUBEAPI, "--listen", f"127.0.0.1:{port}", "--name", "x", "--kubeconfig", str(out)]
    assert str(out) in assert_usage_error(argv)
