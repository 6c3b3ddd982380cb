"""The pod policy fails closed on every field it reads.

The fields come from the policy itself (``data.gotthard.admission.pod.input_fields``, the
table next to the rules), asked through the engine under test, so a field added to the table
is covered here without editing this file. Each field is found in a pod that sets every
field, then set to null, to a value of the wrong type and removed: null and the wrong type
are always denied (POD-INPUT-001); removal is denied unless the field is optional and its
absence compliant. Runs on the embedded engine (regopy) and through the OPA REST path
(``OpaServerEngine`` against the embedded-backed test server).

The policy is queried with Pod-shaped documents directly (as an admission controller or OPA
sidecar receives them), not through ``evaluate``: that way the Rego, not Python's input
handling, has to catch every malformed field. ``deny`` of the pod package holds every rule
(site rules and every Pod Security Standards control), unfiltered by profiles.

A field of the pod spec is mutated in the base pod less the containers it does not lie in
(the first app container stays: ``spec.containers`` is required); the cost of a decision
grows with the pod, and the other containers play no part in how the policy judges the
field. Containers that differ from an earlier sibling of their
list only in their name are not mutated again: the policy reads no container by its index,
so it cannot tell such siblings apart (``containers[1]``, "worker", repeats
``containers[0]``, "app", and is still part of every pod-level case).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gotthard.policies import engine as eng

PACKAGE = eng.POLICIES["pod"].package
INPUT_RULE = "POD-INPUT-001"
GPU = "nvidia.com/gpu"

# Namespace "default" with a GPU quota, so that removing metadata or the namespace keeps the
# pod compliant; the base pod charges 3 GPUs (2 app containers + 1 sidecar) of 8.
DATA = eng.build_data({"inventory": {"namespaces": {"default": {"gpu_quota": 8, "gpus_used": 4}}}})


SECURITY: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "runAsGroup": 1000,
    "windowsOptions": {"hostProcess": False},
    "seLinuxOptions": {"type": "container_t", "user": "", "role": ""},
    "seccompProfile": {"type": "RuntimeDefault", "localhostProfile": "profiles/app.json"},
    "appArmorProfile": {"type": "RuntimeDefault", "localhostProfile": "k8s-app"},
}
# A probe or lifecycle hook with both actions (Kubernetes allows one; the policy reads both).
HANDLER: dict[str, Any] = {
    "httpGet": {"path": "/healthz", "port": 8080, "host": ""},
    "tcpSocket": {"port": 8080, "host": ""},
}


def _container(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "image": "registry.gotthard.example.org/web/app:1.2.3",
        "securityContext": {
            **copy.deepcopy(SECURITY),
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "procMount": "Default",
            "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
        },
        "resources": {
            "limits": {"cpu": "500m", "memory": "1Gi", GPU: 1},
            "requests": {"cpu": "250m", "memory": "512Mi", GPU: 1},
        },
        "ports": [{"containerPort": 8080, "hostPort": 0}],
        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch", "readOnly": True}],
        "livenessProbe": copy.deepcopy(HANDLER),
        "readinessProbe": copy.deepcopy(HANDLER),
        "startupProbe": copy.deepcopy(HANDLER),
        "lifecycle": {"postStart": copy.deepcopy(HANDLER), "preStop": copy.deepcopy(HANDLER)},
        **extra,
    }


# A pod that sets every field in the table (a field it lacked could not be tested). It is
# Restricted-compliant except for its hostPath volume, which the table's hostPath fields
# need and which the Pod Security Standards forbid outright: BASE_RULES.
BASE_POD: dict[str, Any] = {
    "kind": "Pod",
    "metadata": {
        "name": "full",
        "namespace": "default",
        "annotations": {"container.apparmor.security.beta.kubernetes.io/app": "runtime/default"},
    },
    "spec": {
        "securityContext": {
            **copy.deepcopy(SECURITY),
            "sysctls": [{"name": "net.ipv4.tcp_syncookies", "value": "1"}],
            "fsGroup": 2000,
            "supplementalGroups": [3000],
        },
        "hostNetwork": False,
        "hostPID": False,
        "hostIPC": False,
        "hostUsers": True,
        "os": {"name": "linux"},
        "volumes": [
            {"name": "scratch", "hostPath": {"path": "/capstor/scratch"}},
            {"name": "tmp", "emptyDir": {}},
            {"name": "lvm", "flexVolume": {"driver": "example/lvm"}},
        ],
        "initContainers": [_container("sidecar", restartPolicy="Always")],
        "containers": [_container("app"), _container("worker")],
        "ephemeralContainers": [_container("debug")],
    },
}
BASE_RULES = {"POD-PSS-B-HOSTPATH-001", "POD-PSS-R-VOLUMES-001"}

Path = tuple[Any, ...]


def _expand(
    pattern: list[str], node: Any, names: dict[str, list[str]], prefix: Path = ()
) -> Iterator[Path]:
    """The concrete paths in ``node`` that a table pattern names: "*" is any list index or
    object key, "$containers" and "$gpu" any of their names."""
    if not pattern:
        yield prefix
        return
    head, rest = pattern[0], pattern[1:]
    if head == "*":
        keys: list[Any] = list(range(len(node))) if isinstance(node, list) else list(node)
    elif head in names:
        keys = names[head]
    else:
        keys = [head]
    for key in keys:
        if (isinstance(node, dict) and key in node) or (isinstance(node, list) and head == "*"):
            yield from _expand(rest, node[key], names, (*prefix, key))


CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def _in_container(path: Path) -> bool:
    """Whether *path* lies inside one container (spec.<list>.<index>.<key>...)."""
    return len(path) > 3 and path[0] == "spec" and path[1] in CONTAINER_LISTS


def _carrier(path: Path) -> tuple[dict[str, Any], Path]:
    """The pod a case mutates, and the field's path in it: the base pod less the containers
    the field does not lie in (the first app container stays: spec.containers is required);
    a container list itself, or one of its items, is mutated with the whole list."""
    if len(path) < 2 or path[0] != "spec":
        return BASE_POD, path
    spec = {k: v for k, v in BASE_POD["spec"].items() if k not in CONTAINER_LISTS}
    spec["containers"] = BASE_POD["spec"]["containers"][:1]
    group = path[1]
    if group in CONTAINER_LISTS and _in_container(path):
        spec[group] = [BASE_POD["spec"][group][path[2]]]
        path = (*path[:2], 0, *path[3:])
    elif group in CONTAINER_LISTS:
        spec[group] = BASE_POD["spec"][group]
    return {**BASE_POD, "spec": spec}, path


def _repeats_a_sibling(path: Path) -> bool:
    """Whether the container *path* lies in equals an earlier one of its list but for
    its name."""
    if not _in_container(path):
        return False
    siblings = BASE_POD["spec"][path[1]]

    def unnamed(c: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in c.items() if k != "name"}

    return any(unnamed(c) == unnamed(siblings[path[2]]) for c in siblings[: path[2]])


def _mutated(path: Path, mutation: str, value: Any = None) -> Any:
    if not path:
        return value
    base, path = _carrier(path)
    doc = copy.deepcopy(base)
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if mutation == "missing":
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


def _rule_ids(engine: eng.Engine, doc: Any) -> set[str]:
    return {v.rule for v in eng.violations_of(engine.query(PACKAGE, "deny", doc))}


# Values of the wrong type for each field type (null is tested on its own).
_JSON_SCALARS = st.one_of(st.integers(-5, 5), st.booleans(), st.text(max_size=5))
WRONG: dict[str, st.SearchStrategy[Any]] = {
    "object": st.one_of(_JSON_SCALARS, st.lists(st.integers(), max_size=2)),
    "array": st.one_of(
        _JSON_SCALARS, st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)
    ),
    "string": st.one_of(st.integers(), st.booleans(), st.lists(st.text(max_size=2), max_size=2)),
    "boolean": st.one_of(
        st.integers(), st.sampled_from(["true", "false", "yes", ""]), st.just([True]), st.just({})
    ),
    "integer": st.one_of(
        st.booleans(),
        st.sampled_from([0.5, -1.5, "1000", "0", ""]),
        st.just([1000]),
        st.just({"uid": 0}),
    ),
    "quantity": st.one_of(
        st.booleans(),
        st.integers(max_value=-1),
        st.sampled_from(["lots", "1 Gi", "", "-1", "1Gb", "0x10"]),
        st.just(["1"]),
        st.just({"value": "1"}),
    ),
    "count": st.one_of(
        st.booleans(),
        st.integers(max_value=-1),
        st.sampled_from([0.5, 1.5, "1Gi", "one", "", "-1", "2.0"]),
        st.just([1]),
        st.just({"count": 1}),
    ),
}
# One fixed wrong value per type for the exhaustive sweep.
WRONG_EXAMPLE = {
    "object": "text",
    "array": {"not": "a list"},
    "string": 7,
    "boolean": "true",
    "integer": "1000",
    "quantity": "lots",
    "count": "1Gi",
}


class FieldCase:
    """One concrete occurrence of a table field in the base pod."""

    def __init__(self, field: dict[str, Any], path: Path) -> None:
        self.pattern = field["path"]
        self.type: str = field["type"]
        self.required: bool = field["required"]
        self.absent_rule: str | None = field.get("absent_rule")
        self.path = path

    def __repr__(self) -> str:
        return ".".join(str(p) for p in self.path) or "<input>"

    def check_missing(self, engine: eng.Engine) -> None:
        if not self.path:
            return  # the input itself cannot be absent
        ids = _rule_ids(engine, _mutated(self.path, "missing"))
        if self.required:
            assert INPUT_RULE in ids, f"{self!r} removed: {sorted(ids)}"
        elif self.absent_rule:
            assert self.absent_rule in ids, f"{self!r} removed: {sorted(ids)}"
        else:
            assert ids <= BASE_RULES, f"{self!r} is optional, removed: {sorted(ids)}"

    def check_value(self, engine: eng.Engine, value: Any) -> None:
        ids = _rule_ids(engine, _mutated(self.path, "set", value))
        assert INPUT_RULE in ids, f"{self!r} = {value!r}: {sorted(ids)}"


def _field_cases(engine: eng.Engine) -> list[FieldCase]:
    table = engine.query(PACKAGE, "input_fields", {})
    assert table, "the pod policy publishes no input_fields table"
    names = {
        "$containers": engine.query(PACKAGE, "container_lists", {}),
        "$gpu": DATA["site"]["admission"]["gpu_resources"],
    }
    # A key a pattern names outright (volumes[*].name) is not also one of its object's
    # other keys (volumes[*].* : the volume sources).
    named = {
        path
        for field in table
        if field["path"] and field["path"][-1] != "*"
        for path in _expand(field["path"], BASE_POD, names)
    }
    cases = []
    for field in table:
        paths = list(_expand(field["path"], BASE_POD, names))
        if field["path"] and field["path"][-1] == "*":
            paths = [p for p in paths if p not in named]
        assert paths, f"the base pod lacks table field {field['path']}: add it to BASE_POD"
        assert field["type"] in WRONG, f"no wrong values for type {field['type']!r}"
        cases.extend(FieldCase(field, path) for path in paths if not _repeats_a_sibling(path))
    return cases


@pytest.fixture(scope="module")
def embedded() -> eng.EmbeddedEngine:
    return eng.EmbeddedEngine(DATA)


@pytest.fixture(scope="module")
def opa(opa_server) -> Iterator[eng.OpaServerEngine]:  # type: ignore[no-untyped-def]
    engine = eng.OpaServerEngine(opa_server.url, DATA)
    yield engine
    engine.close()


@pytest.fixture(params=["embedded", "opa"])
def engine(request: pytest.FixtureRequest) -> eng.Engine:
    return request.getfixturevalue(request.param)


def test_base_pod_is_compliant(engine: eng.Engine) -> None:
    assert _rule_ids(engine, BASE_POD) == BASE_RULES


def test_every_field_null_wrong_type_and_missing(engine: eng.Engine) -> None:
    for case in _field_cases(engine):
        case.check_value(engine, None)
        case.check_value(engine, WRONG_EXAMPLE[case.type])
        case.check_missing(engine)


@st.composite
def _field_and_wrong_value(draw: st.DrawFn, cases: list[FieldCase]) -> tuple[FieldCase, Any]:
    case = draw(st.sampled_from(cases))
    return case, draw(st.one_of(st.none(), WRONG[case.type]))


_EXAMPLES = {"embedded": 100, "opa": 30}


@pytest.mark.parametrize("engine_name", sorted(_EXAMPLES))
def test_random_malformed_field_is_denied(engine_name: str, request: pytest.FixtureRequest) -> None:
    engine: eng.Engine = request.getfixturevalue(engine_name)
    cases = _field_cases(engine)

    @settings(
        max_examples=_EXAMPLES[engine_name],
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(_field_and_wrong_value(cases))
    def check(drawn: tuple[FieldCase, Any]) -> None:
        case, value = drawn
        case.check_value(engine, value)

    check()


def test_deployment_with_blank_security_context_and_resources_is_denied(
    engine: eng.Engine,
) -> None:
    """The reported hole: YAML ``securityContext:`` / ``resources:`` left blank (null)."""
    deployment = {
        "kind": "Deployment",
        "metadata": {"name": "blank", "namespace": "default"},
        "spec": {
            "template": {
                "spec": {
                    "securityContext": None,
                    "containers": [
                        {
                            "name": "app",
                            "image": "registry.gotthard.example.org/web/app:1.2.3",
                            "resources": None,
                        }
                    ],
                }
            }
        },
    }
    got = eng.evaluate(engine, deployment)
    assert not eng.decision(got)["allowed"]
    messages = [v.message for v in got if v.rule == INPUT_RULE]
    assert any("spec.securityContext" in m for m in messages), messages
    assert any("spec.containers[0].resources" in m for m in messages), messages
