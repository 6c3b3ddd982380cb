"""The embedded engine's compiled shape check (``gotthard.policies.shape``) finds exactly the
POD-INPUT-001 violations of the Rego it replaces (``rego/pod_shape.rego``).

The oracle is the full pod policy compiled by regopy as the OPA server and the bundle run
it; the inputs are the rich pod of the fail-closed sweep with every field of the table set
to values of every JSON type, removed, and containers and lists given as objects, plus
seeded random mutations at any depth. Messages are compared, not only rule ids.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest
import regopy

from gotthard.policies import engine as eng
from gotthard.policies import shape
from tests.policies.test_fail_closed import BASE_POD, DATA

PACKAGE = eng.POLICIES["pod"].package
ENTRYPOINT = f"{PACKAGE.replace('.', '/')}/deny"
VALUES: list[Any] = [None, "", "-1", 1.5, True, ["x"], [{}], {}, {"a": 1}]


class RegoShape:
    """POD-INPUT-001 of the full Rego policy (what the OPA server and bundle evaluate)."""

    def __init__(self) -> None:
        builder = regopy.Interpreter()
        for name, src in eng.rego_modules().items():
            builder.add_module(name, src)
        builder.add_data_json(json.dumps({"gotthard": eng.ready_data(DATA)}))
        self.bundle = builder.build(None, [ENTRYPOINT])
        self.interp = regopy.Interpreter()

    def messages(self, doc: Any) -> list[str] | str:
        """The messages, or "error" where regopy cannot give the result (a rule that
        builds a message from a malformed name: the engine then fails, exit 2)."""
        self.interp.set_input_term(json.dumps(doc))
        try:
            out = self.interp.query_bundle_entrypoint(self.bundle, ENTRYPOINT)
            if not out.ok():
                return "error"
            result = json.loads(out.expressions().json())[0] if len(out) else []
        except ValueError:
            return "error"
        return sorted(v["message"] for v in result if v["rule"] == shape.RULE)


@pytest.fixture(scope="module")
def rego() -> RegoShape:
    return RegoShape()


@pytest.fixture(scope="module")
def embedded() -> eng.EmbeddedEngine:
    return eng.EmbeddedEngine(DATA)


def _embedded_messages(engine: eng.EmbeddedEngine, doc: Any) -> list[str] | str:
    try:
        result = engine.query(PACKAGE, "deny", doc) or []
    except eng.PolicyError:
        return "error"
    return sorted(v["message"] for v in result if v["rule"] == shape.RULE)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out.extend(_paths(value, (*prefix, key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out.extend(_paths(value, (*prefix, index)))
    return out


def _set(doc: Any, path: tuple[Any, ...], value: Any, remove: bool = False) -> Any:
    if not path:
        return value
    doc = copy.deepcopy(doc)
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if remove:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


SMALL_POD = {
    **BASE_POD,
    "spec": {
        **{k: v for k, v in BASE_POD["spec"].items() if k not in shape.CONTAINER_LISTS},
        "containers": BASE_POD["spec"]["containers"][:1],
    },
}


def _cases() -> dict[str, list[Any]]:
    """Case name -> the documents it compares: each field of the small pod removed and set
    to each of VALUES; lists given as objects; a few odd documents."""
    cases: dict[str, list[Any]] = {"base": [BASE_POD], "not an object": [["x"], "pod", None]}
    for path in _paths(SMALL_POD)[1:]:
        where = ".".join(map(str, path))
        docs = [_set(SMALL_POD, path, None, remove=True)]
        docs.extend(_set(SMALL_POD, path, value) for value in VALUES)
        cases[where] = docs
    as_object = {"a": SMALL_POD["spec"]["containers"][0], "b": 5}
    cases["odd"] = [
        _set(SMALL_POD, ("spec", "containers"), as_object),
        _set(SMALL_POD, ("spec", "volumes"), {"a": {"x": 1}}),
        _set(SMALL_POD, ("spec", "containers"), []),
        _set(SMALL_POD, ("metadata", "annotations"), {"a b": 1, "0": 2}),
    ]
    return cases


CASES = _cases()


@pytest.mark.parametrize("name", list(CASES))
def test_compiled_shape_equals_rego(
    rego: RegoShape, embedded: eng.EmbeddedEngine, name: str
) -> None:
    for doc in CASES[name]:
        assert _embedded_messages(embedded, doc) == rego.messages(doc), json.dumps(doc)[:2000]


def _mutate(rng: random.Random, doc: Any) -> Any:
    for _ in range(rng.randint(1, 4)):
        paths = _paths(doc)[1:]
        if not paths:
            break
        path = rng.choice(paths)
        if rng.random() < 0.2:
            doc = _set(doc, path, None, remove=True)
        else:
            doc = _set(doc, path, copy.deepcopy(rng.choice(VALUES)))
    return doc


@pytest.mark.parametrize("seed", range(2))
def test_random_mutations_agree(rego: RegoShape, embedded: eng.EmbeddedEngine, seed: int) -> None:
    rng = random.Random(seed)
    for n in range(75):
        doc = _mutate(rng, BASE_POD)
        assert _embedded_messages(embedded, doc) == rego.messages(doc), f"seed {seed}, case {n}"


def test_a_forged_input_key_is_overwritten(embedded: eng.EmbeddedEngine) -> None:
    """The key that carries the violations cannot be set by the input."""
    doc = copy.deepcopy(SMALL_POD)
    doc["spec"]["hostNetwork"] = "yes"
    doc[shape.INPUT_KEY] = []
    assert _embedded_messages(embedded, doc) == ["pod full: spec.hostNetwork must be true or false"]
    clean = copy.deepcopy(SMALL_POD)
    clean[shape.INPUT_KEY] = [{"rule": "POD-INPUT-001", "message": "forged"}]
    assert _embedded_messages(embedded, clean) == []
