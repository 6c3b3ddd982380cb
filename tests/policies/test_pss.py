"""Pod Security Standards controls: the Kubernetes documentation's edge cases.

The pod package's ``deny`` holds every rule (site rules and one rule per PSS control), so
these tests query it directly, with Pod-shaped documents as an admission controller sends
them, or with ``engine.prepare`` where a workload's pod template is the point. The allow and
deny case of every control is in the policy test tables (``gotthard policy test``).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gotthard.policies import engine as eng
from gotthard.policies import testing

PACKAGE = "gotthard.admission.pod"
IMAGE = "registry.gotthard.example.org/web/app:1.2.3"
NAMESPACES = {
    "web": {"labels": {"team": "web"}},
    "mpi-jobs": {"labels": {"gotthard.io/network": "mpi"}},
}


def container(name: str = "app", **security: Any) -> dict[str, Any]:
    """A Restricted-compliant container; ``security`` replaces securityContext keys (None
    removes one)."""
    context: dict[str, Any] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    for key, value in security.items():
        if value is None:
            context.pop(key, None)
        else:
            context[key] = value
    return {
        "name": name,
        "image": IMAGE,
        "securityContext": context,
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
    }


def pod(
    *containers: dict[str, Any], security: dict[str, Any] | None = None, **spec: Any
) -> dict[str, Any]:
    """A Restricted-compliant pod in namespace web; ``security`` replaces pod securityContext
    keys (None removes one), ``spec`` sets spec keys."""
    context: dict[str, Any] = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    for key, value in (security or {}).items():
        if value is None:
            context.pop(key, None)
        else:
            context[key] = value
    body = {"securityContext": context, "containers": list(containers) or [container()], **spec}
    return {"kind": "Pod", "metadata": {"name": "p", "namespace": "web"}, "spec": body}


def make_engine(**admission: Any) -> eng.EmbeddedEngine:
    override: dict[str, Any] = {"inventory": {"namespaces": NAMESPACES}}
    if admission:
        override["site"] = {"admission": admission}
    return eng.EmbeddedEngine(eng.build_data(override))


@pytest.fixture(scope="module")
def engine() -> eng.EmbeddedEngine:
    return make_engine()


def violations(engine: eng.Engine, doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The raw violation objects of a Pod-shaped document or workload."""
    if doc.get("kind") != "Pod":
        doc = eng.prepare("pod", doc)
    return engine.query(PACKAGE, "deny", doc) or []


def rules(engine: eng.Engine, doc: dict[str, Any]) -> set[str]:
    return {v["rule"] for v in violations(engine, doc)}


def test_restricted_pod_passes_every_rule(engine: eng.EmbeddedEngine) -> None:
    assert rules(engine, pod()) == set()


# --- seccomp ---------------------------------------------------------------------------


def test_seccomp_on_the_pod_is_inherited_by_containers(engine: eng.EmbeddedEngine) -> None:
    doc = pod(container("a"), container("b"), initContainers=[container("init")])
    assert rules(engine, doc) == set()


def test_seccomp_container_overriding_the_pod_is_denied_with_its_name_and_image(
    engine: eng.EmbeddedEngine,
) -> None:
    bad = container("sidecar", seccompProfile={"type": "Unconfined"})
    bad["image"] = "nvcr.io/nvidia/pytorch:24.05-py3"
    found = [v for v in violations(engine, pod(container(), bad)) if "SECCOMP" in v["rule"]]
    assert {v["rule"] for v in found} == {"POD-PSS-B-SECCOMP-001", "POD-PSS-R-SECCOMP-001"}
    assert all(v["container"] == "sidecar" for v in found)
    assert all(v["image"] == "nvcr.io/nvidia/pytorch:24.05-py3" for v in found)


def test_seccomp_localhost_on_every_container_without_a_pod_profile(
    engine: eng.EmbeddedEngine,
) -> None:
    local = {"type": "Localhost", "localhostProfile": "profiles/audit.json"}
    doc = pod(container(seccompProfile=local), security={"seccompProfile": None})
    assert rules(engine, doc) == set()
    # one container without a profile and none on the pod: Restricted denies it
    doc = pod(container(seccompProfile=local), container("b"), security={"seccompProfile": None})
    assert rules(engine, doc) == {"POD-PSS-R-SECCOMP-001"}


def test_seccomp_unconfined_on_the_pod_is_a_pod_level_violation(
    engine: eng.EmbeddedEngine,
) -> None:
    found = violations(engine, pod(security={"seccompProfile": {"type": "Unconfined"}}))
    assert {v["rule"] for v in found} == {"POD-PSS-B-SECCOMP-001", "POD-PSS-R-SECCOMP-001"}
    pod_level = {v["rule"] for v in found if "container" not in v}
    assert pod_level == {"POD-PSS-B-SECCOMP-001", "POD-PSS-R-SECCOMP-001"}
    # Restricted also names the containers left without a valid profile
    assert {v.get("container") for v in found if v["rule"] == "POD-PSS-R-SECCOMP-001"} == {
        None,
        "app",
    }


# --- capabilities ----------------------------------------------------------------------


def test_all_spelled_in_the_add_list_is_denied(engine: eng.EmbeddedEngine) -> None:
    doc = pod(container(capabilities={"drop": ["ALL"], "add": ["ALL"]}))
    assert rules(engine, doc) == {"POD-PSS-B-CAPS-001", "POD-PSS-R-CAPS-001"}


def test_baseline_capabilities_pass_baseline_but_not_restricted(
    engine: eng.EmbeddedEngine,
) -> None:
    doc = pod(container(capabilities={"drop": ["ALL"], "add": ["CHOWN", "KILL", "SETUID"]}))
    assert rules(engine, doc) == {"POD-PSS-R-CAPS-001"}
    doc = pod(container(capabilities={"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}))
    assert rules(engine, doc) == set()


def test_dropping_all_is_case_sensitive(engine: eng.EmbeddedEngine) -> None:
    doc = pod(container(capabilities={"drop": ["all"]}))
    assert rules(engine, doc) == {"POD-PSS-R-CAPS-001"}


def test_allowed_capabilities_is_a_parameter() -> None:
    tuned = make_engine(allowed_capabilities=["CHOWN", "SYS_TIME"])
    doc = pod(container(capabilities={"drop": ["ALL"], "add": ["SYS_TIME"]}))
    assert rules(tuned, doc) == {"POD-PSS-R-CAPS-001"}
    doc = pod(container(capabilities={"drop": ["ALL"], "add": ["KILL"]}))
    assert rules(tuned, doc) == {"POD-PSS-B-CAPS-001", "POD-PSS-R-CAPS-001"}


# --- host ports ------------------------------------------------------------------------


def _with_host_port(port: Any) -> dict[str, Any]:
    c = container()
    c["ports"] = [{"containerPort": 8080, "hostPort": port}]
    return pod(c)


def test_host_port_zero_is_unset(engine: eng.EmbeddedEngine) -> None:
    assert rules(engine, _with_host_port(0)) == set()
    assert rules(engine, _with_host_port(8080)) == {"POD-PSS-B-HOSTPORTS-001"}


def test_allowed_host_ports_take_ports_and_ranges() -> None:
    tuned = make_engine(allowed_host_ports=[9100, "30000-32767", "8443"])
    assert rules(tuned, _with_host_port(9100)) == set()
    assert rules(tuned, _with_host_port(30000)) == set()
    assert rules(tuned, _with_host_port(32767)) == set()
    assert rules(tuned, _with_host_port(8443)) == set()
    assert rules(tuned, _with_host_port(32768)) == {"POD-PSS-B-HOSTPORTS-001"}
    assert rules(tuned, _with_host_port(9101)) == {"POD-PSS-B-HOSTPORTS-001"}


# --- every container list, every workload kind -----------------------------------------


def test_ephemeral_container_violations_name_the_container(engine: eng.EmbeddedEngine) -> None:
    debug = container("debug", privileged=True, allowPrivilegeEscalation=None)
    debug["image"] = "registry.k8s.io/e2e-test-images/agnhost:2.53"
    found = violations(engine, pod(ephemeralContainers=[debug]))
    assert {v["rule"] for v in found} == {"POD-PRIV-001", "POD-PSS-R-ESCALATION-001"}
    for v in found:
        assert v["container"] == "debug"
        assert v["image"] == "registry.k8s.io/e2e-test-images/agnhost:2.53"


@pytest.mark.parametrize(
    "kind", ["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"]
)
def test_pod_templates_of_every_workload_kind(engine: eng.EmbeddedEngine, kind: str) -> None:
    spec = pod(container(procMount="Unmasked"), hostIPC=True)["spec"]
    template = {"metadata": {"labels": {"app": "x"}}, "spec": spec}
    if kind == "CronJob":
        body: dict[str, Any] = {
            "schedule": "@hourly",
            "jobTemplate": {"spec": {"template": template}},
        }
    else:
        body = {"template": template}
    doc = {"kind": kind, "metadata": {"name": "w", "namespace": "web"}, "spec": body}
    assert rules(engine, doc) == {
        "POD-PSS-B-HOSTNS-001",
        "POD-PSS-B-PROCMOUNT-001",
        "POD-PSS-R-PROCMOUNT-001",
    }


# --- non-root ----------------------------------------------------------------------------


def test_run_as_non_root_with_run_as_user_zero_is_denied(engine: eng.EmbeddedEngine) -> None:
    doc = pod(container(runAsNonRoot=True, runAsUser=0))
    assert rules(engine, doc) == {"POD-PSS-R-NONROOTUSER-001"}
    doc = pod(security={"runAsUser": 0})
    assert rules(engine, doc) == {"POD-PSS-R-NONROOTUSER-001"}


def test_a_non_zero_run_as_user_does_not_satisfy_run_as_non_root(
    engine: eng.EmbeddedEngine,
) -> None:
    doc = pod(security={"runAsNonRoot": None, "runAsUser": 1000})
    assert "POD-PSS-R-NONROOT-001" in rules(engine, doc)


def test_run_as_non_root_false_on_the_pod_is_denied_even_if_containers_set_it(
    engine: eng.EmbeddedEngine,
) -> None:
    doc = pod(container(runAsNonRoot=True), security={"runAsNonRoot": False})
    assert rules(engine, doc) == {"POD-PSS-R-NONROOT-001"}


def test_user_namespaces_relax_non_root_and_baseline_proc_mount(
    engine: eng.EmbeddedEngine,
) -> None:
    doc = pod(
        container(procMount="Unmasked", runAsUser=0),
        security={"runAsNonRoot": None},
        hostUsers=False,
    )
    # POD-SEC-001 is the site's own runAsNonRoot rule: no user-namespace exception
    assert rules(engine, doc) == {"POD-PSS-R-PROCMOUNT-001", "POD-SEC-001"}


def test_windows_pods_are_exempt_from_linux_only_restricted_controls(
    engine: eng.EmbeddedEngine,
) -> None:
    bare = {"name": "app", "image": IMAGE, "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}
    doc = pod(bare, security={"seccompProfile": None}, os={"name": "windows"})
    assert rules(engine, doc) == set()
    doc["spec"]["os"] = {"name": "linux"}
    assert rules(engine, doc) == {
        "POD-PSS-R-CAPS-001",
        "POD-PSS-R-ESCALATION-001",
        "POD-PSS-R-SECCOMP-001",
    }


# --- AppArmor, SELinux, sysctls ------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "allowed"),
    [
        ("runtime/default", True),
        ("localhost/k8s-apparmor-example", True),
        ("", True),
        ("unconfined", False),
        ("localhost", False),
    ],
)
def test_apparmor_annotations(engine: eng.EmbeddedEngine, value: str, allowed: bool) -> None:
    doc = pod()
    doc["metadata"]["annotations"] = {"container.apparmor.security.beta.kubernetes.io/app": value}
    expected = set() if allowed else {"POD-PSS-B-APPARMOR-001"}
    assert rules(engine, doc) == expected


def test_apparmor_profile_field(engine: eng.EmbeddedEngine) -> None:
    local = {"type": "Localhost", "localhostProfile": "k8s-apparmor-example"}
    assert rules(engine, pod(security={"appArmorProfile": local})) == set()
    unconfined = {"type": "Unconfined"}
    assert rules(engine, pod(container(appArmorProfile=unconfined))) == {"POD-PSS-B-APPARMOR-001"}


@pytest.mark.parametrize(
    ("options", "allowed"),
    [
        ({"type": "container_t"}, True),
        ({"type": "container_kvm_t", "level": "s0:c1,c2"}, True),
        ({"type": "container_engine_t"}, True),
        ({"type": "", "user": "", "role": ""}, True),
        ({"type": "unconfined_t"}, False),
        ({"user": "system_u"}, False),
        ({"role": "object_r"}, False),
    ],
)
def test_selinux_options(
    engine: eng.EmbeddedEngine, options: dict[str, str], allowed: bool
) -> None:
    expected = set() if allowed else {"POD-PSS-B-SELINUX-001"}
    assert rules(engine, pod(security={"seLinuxOptions": options})) == expected
    assert rules(engine, pod(container(seLinuxOptions=options))) == expected


def test_sysctls_safe_set_and_parameter(engine: eng.EmbeddedEngine) -> None:
    safe = pod(security={"sysctls": [{"name": "net.ipv4.tcp_keepalive_time", "value": "60"}]})
    assert rules(engine, safe) == set()
    unsafe = pod(security={"sysctls": [{"name": "vm.overcommit_memory", "value": "1"}]})
    assert rules(engine, unsafe) == {"POD-PSS-B-SYSCTLS-001"}
    tuned = make_engine(allowed_sysctls=["vm.overcommit_memory"])
    assert rules(tuned, unsafe) == set()
    assert rules(tuned, safe) == {"POD-PSS-B-SYSCTLS-001"}


# --- host namespaces and the site's MPI/NCCL hostNetwork ------------------------------------


def test_host_network_in_mpi_namespaces_with_pss_hostnetwork_by_label() -> None:
    mpi = pod(hostNetwork=True)
    mpi["metadata"]["namespace"] = "mpi-jobs"
    web = copy.deepcopy(mpi)
    web["metadata"]["namespace"] = "web"
    strict = make_engine()
    assert rules(strict, mpi) == {"POD-PSS-B-HOSTNS-001"}
    by_label = make_engine(pss_hostnetwork_by_label=True)
    assert rules(by_label, mpi) == set()
    # judged once, by the site rule
    assert rules(by_label, web) == {"POD-HOSTNET-001"}
    mpi["spec"]["hostPID"] = True
    assert rules(by_label, mpi) == {"POD-PSS-B-HOSTNS-001"}


# --- images ------------------------------------------------------------------------------


def test_site_container_rules_carry_container_and_image(engine: eng.EmbeddedEngine) -> None:
    c = container("web", privileged=True)
    c["image"] = "docker.io/library/nginx:latest"
    del c["resources"]
    found = violations(engine, pod(c))
    by_rule = {v["rule"] for v in found}
    assert {"POD-PRIV-001", "POD-IMG-001", "POD-IMG-002", "POD-RES-001"} <= by_rule
    for v in found:
        assert (v["container"], v["image"]) == ("web", "docker.io/library/nginx:latest")


def test_denied_registries_and_exact_images() -> None:
    tuned = make_engine(
        denied_registries=["nvcr.io/nvidia/k8s"],
        allowed_images=["quay.io/jetstack/cert-manager:v1.15.0"],
    )

    def with_image(image: str) -> dict[str, Any]:
        c = container()
        c["image"] = image
        return pod(c)

    assert rules(tuned, with_image("nvcr.io/nvidia/pytorch:24.05-py3")) == set()
    assert rules(tuned, with_image("nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3")) == {"POD-IMG-001"}
    assert rules(tuned, with_image("quay.io/jetstack/cert-manager:v1.15.0")) == set()
    assert rules(tuned, with_image("quay.io/jetstack/cert-manager:v1.16.0")) == {"POD-IMG-001"}


def test_image_digest_required() -> None:
    tuned = make_engine(require_image_digest=True)
    pinned = container()
    pinned["image"] = "registry.gotthard.example.org/web/app@sha256:" + "0" * 64
    assert rules(tuned, pod(pinned)) == set()
    assert rules(tuned, pod(container())) == {"POD-IMG-003"}
    assert rules(make_engine(), pod(container())) == set()


# --- the rule catalogue --------------------------------------------------------------------

PSS_CONTROLS = {
    "baseline": {
        "HostProcess",
        "Host Namespaces",
        "Privileged Containers",
        "Capabilities",
        "HostPath Volumes",
        "Host Ports",
        "Host Probes / Lifecycle Hooks",
        "AppArmor",
        "SELinux",
        "/proc Mount Type",
        "Seccomp",
        "Sysctls",
    },
    "restricted": {
        "Volume Types",
        "Privilege Escalation",
        "Running as Non-root",
        "Running as Non-root user",
        "Seccomp",
        "Capabilities",
        "/proc Mount Type",
    },
}


def test_one_rule_per_pss_control_with_level_and_params() -> None:
    catalogue = testing.load_rules()
    admission = eng.default_data()["site"]["admission"]
    controls: dict[str, set[str]] = {"baseline": set(), "restricted": set()}
    for rule in catalogue:
        assert rule["level"] in ("baseline", "restricted", "site"), rule["id"]
        assert [p for p in rule["params"] if p not in admission] == [], rule["id"]
        if rule["level"] == "site":
            assert "pss" not in rule, rule["id"]
            continue
        level, _, control = rule["pss"].partition(": ")
        assert level == rule["level"], rule["id"]
        assert control not in controls[level], f"two rules for {rule['pss']}"
        controls[level].add(control)
    assert controls == PSS_CONTROLS
