"""Fuzzing the policy entry points: random and mutated inputs end in exit 0, 1 or 2, never
in a traceback.

A seeded generator (reproducible: the failing case's seed is in the assertion message)
feeds ``policy eval``, ``policy/audit kube-bench`` and ``audit cluster`` (whose API answers
are replaced by fuzzed bodies) through ``gotthard.cli.main`` in this process. Inputs are
random JSON/YAML values, and real samples with type swaps, nulls, deep nesting, huge
strings, dropped keys and re-cased keys; some files are cut short or get stray bytes.

``GOTTHARD_FUZZ_EXAMPLES`` sets the number of inputs per entry point (default 100;
the full run is 10000).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gotthard.policies import audit
from gotthard.policies import engine as eng
from tests.policies.conftest import FIXTURES
from tests.support.cli import run_in_process

EXAMPLES = int(os.environ.get("GOTTHARD_FUZZ_EXAMPLES", "100"))
KB = FIXTURES / "kube-bench"

_POD: dict[str, Any] = {
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "web", "labels": {"app": "x"}},
    "spec": {
        "hostNetwork": False,
        "securityContext": {"runAsNonRoot": True},
        "volumes": [{"name": "v", "hostPath": {"path": "/capstor/x"}}],
        "containers": [
            {
                "name": "main",
                "image": "registry.gotthard.example.org/train:1.4.2",
                "securityContext": {"privileged": False},
                "resources": {
                    "limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": 1},
                    "requests": {"nvidia.com/gpu": 1},
                },
            }
        ],
    },
}
_NAMESPACE = {"kind": "Namespace", "metadata": {"name": "web", "labels": {"a": "b"}}}
_PEER_AUTH = {
    "kind": "PeerAuthentication",
    "metadata": {"name": "default", "namespace": "web"},
    "spec": {"mtls": {"mode": "STRICT"}},
}
_STORAGE_CLASS = {
    "kind": "StorageClass",
    "metadata": {"name": "lustre"},
    "provisioner": "lustre.csi.hpe.com",
    "parameters": {"rootSquash": "true"},
    "reclaimPolicy": "Retain",
}


def _eval_samples() -> list[Any]:
    pod = copy.deepcopy(_POD)
    template = {"metadata": {"labels": {}}, "spec": pod["spec"]}
    return [
        pod,
        {"kind": "Deployment", "metadata": {"name": "d"}, "spec": {"template": template}},
        {
            "kind": "CronJob",
            "metadata": {"name": "c"},
            "spec": {"jobTemplate": {"spec": {"template": template}}},
        },
        {"kind": "AdmissionReview", "request": {"namespace": "web", "object": pod}},
        _STORAGE_CLASS,
        {"kind": "List", "items": [_NAMESPACE, _PEER_AUTH, pod]},
        {
            "kind": "SlurmJob",
            "user": "alice",
            "account": "climate",
            "nodes": 4,
            "gpus": 16,
        },
        {
            "kind": "KubeBenchResults",
            "today": "2026-01-01",
            "checks": [{"id": "1.1.7", "status": "PASS", "node_type": "master", "scored": True}],
        },
        json.loads((KB / "rke2-1.1.7-1.1.9-mixedcase.json").read_text()),
    ]


def _kube_bench_samples() -> list[Any]:
    return [json.loads(p.read_text()) for p in sorted(KB.glob("*.json"))]


# --- the generator -------------------------------------------------------------------


def _scalar(rng: random.Random) -> Any:
    return rng.choice(
        [
            None,
            True,
            False,
            0,
            -1,
            rng.randint(-(2**70), 2**70),
            rng.random() * 1e6,
            "",
            "PASS",
            "Pod",
            "scored",
            "x" * rng.choice([1, 100, 200_000]),
            "\u00e9\u2603\x00",
            "2026-02-30",
        ]
    )


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 4 or roll < 0.4:
        return _scalar(rng)
    if roll < 0.7:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    keys = ["kind", "metadata", "spec", "items", "Controls", "controls", "tests", "results"]
    keys += ["status", "test_number", "Totals", "name", "containers", "scored", "request"]
    return {rng.choice(keys): _random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def _nest(value: Any, depth: int) -> Any:
    for _ in range(depth):
        value = {"n": value} if depth % 2 else [value]
    return value


def _containers(doc: Any) -> list[Any]:
    """Every mapping and list in *doc* (iteratively)."""
    out, stack = [], [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            out.append(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            out.append(node)
            stack.extend(node)
    return out


def _mutate(doc: Any, rng: random.Random) -> Any:
    doc = copy.deepcopy(doc)
    for _ in range(rng.randint(1, 4)):
        nodes = _containers(doc)
        if not nodes:
            return _random_value(rng)
        node = rng.choice(nodes)
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        if not keys:
            continue
        key = rng.choice(keys)
        op = rng.randrange(7)
        if op == 0:  # type swap
            node[key] = rng.choice([_scalar(rng), [], {}, [node[key]], str(node[key])])
        elif op == 1:
            node[key] = None
        elif op == 2:  # deep nesting around the limit (far past it: see _text)
            node[key] = _nest(node[key], rng.choice([10, eng.MAX_DEPTH - 2, eng.MAX_DEPTH + 5]))
        elif op == 3:
            node[key] = "A" * rng.choice([10_000, 100_000, 100_000, 1_000_000])
        elif op == 4:
            del node[key]
        elif op == 5 and isinstance(key, str):  # same key, other casing
            node[key.upper() if key != key.upper() else key.lower()] = node[key]
        else:
            node[key] = _random_value(rng)
    return doc


#: libyaml's safe dumper where PyYAML has it (the pure-Python one dominates the run time).
_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _text(doc: Any, rng: random.Random) -> str:
    roll = rng.random()
    try:
        text = yaml.dump(doc, Dumper=_DUMPER) if roll < 0.3 else json.dumps(doc)
    except (ValueError, RecursionError, yaml.YAMLError):
        text = repr(doc)[:10_000]
    if roll > 0.97:  # nesting far deeper than any parser's recursion limit
        depth = rng.choice([500, 5000, 100_000])
        text = '{"kind": "Pod", "x": ' + "[" * depth + text + "]" * depth + "}"
    elif roll > 0.93:  # cut short
        text = text[: rng.randint(0, len(text))]
    elif roll > 0.88:  # stray bytes
        pos = rng.randint(0, len(text))
        text = text[:pos] + rng.choice(["\x00", "{", "]", ": &a *a", "\n- ", "\ufeff"]) + text[pos:]
    return text


def _inputs(samples: list[Any], seed: int) -> Iterator[tuple[int, Any]]:
    for i in range(EXAMPLES):
        rng = random.Random(seed * 1_000_003 + i)
        doc = _random_value(rng) if rng.random() < 0.2 else _mutate(rng.choice(samples), rng)
        yield i, (doc, rng)


# --- the harness ---------------------------------------------------------------------


@pytest.fixture
def shared_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    """One engine per distinct data document: building one per input would take minutes."""
    cache: dict[str, eng.Engine] = {}
    make = eng.make_engine

    def cached(kind: str, data: Any = None, opa_url: str | None = None) -> eng.Engine:
        key = json.dumps(data, sort_keys=True)
        if key not in cache:
            cache[key] = make(kind, data, opa_url)
        return cache[key]

    monkeypatch.setattr(eng, "make_engine", cached)


def _run(
    capsys: pytest.CaptureFixture[str], seed: int, doc: Any, argv: Callable[[], list[str]]
) -> int:
    """The exit status of one run; a traceback or another status fails the test."""
    try:
        rc = run_in_process(*argv())
    except SystemExit as exit_:  # argparse
        rc = exit_.code if isinstance(exit_.code, int) else 2
    except BaseException:
        shown = repr(doc)[:300]
        pytest.fail(f"seed {seed}: traceback for {shown}\n{traceback.format_exc()}")
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err, f"seed {seed}: {captured.err[-2000:]}"
    assert rc in (0, 1, 2), f"seed {seed}: exit {rc} for {repr(doc)[:300]}"
    return rc


@pytest.mark.usefixtures("shared_engines")
@pytest.mark.parametrize(
    ("command", "samples", "seed"),
    [
        (("policy", "eval", "--input"), _eval_samples, 1),
        (("policy", "kube-bench", "--report"), _kube_bench_samples, 2),
        (("audit", "kube-bench", "--report"), _kube_bench_samples, 3),
    ],
    ids=["policy-eval", "policy-kube-bench", "audit-kube-bench"],
)
def test_file_entry_points(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: tuple[str, ...],
    samples: Callable[[], list[Any]],
    seed: int,
) -> None:
    f = tmp_path / "input"
    codes: set[int] = set()
    for i, (doc, rng) in _inputs(samples(), seed):
        f.write_text(_text(doc, rng), encoding="utf-8", errors="replace")
        codes.add(_run(capsys, seed * 1_000_003 + i, doc, lambda: [*command, str(f)]))
    assert 2 in codes  # the fuzzer did reach the input checks


class _FakeApi:
    """Stands in for the Kubernetes ``ApiClient`` (the typed APIs below are fakes too)."""

    class configuration:  # mirrors kubernetes.client.Configuration
        host = "https://fuzz.invalid"

    def close(self) -> None:
        pass


class _Response:
    def __init__(self, data: bytes) -> None:
        self.data = data


def _fake_apis(answers: dict[str, Any]) -> dict[str, type]:
    """``CoreV1Api``, ``StorageV1Api`` and ``CustomObjectsApi`` answering LISTs with the
    text in *answers* (by resource), or HTTP 404 where the answer is ``404``."""
    from kubernetes.client.exceptions import ApiException

    def lister(resource: str) -> Callable[..., _Response]:
        def call(*args: Any, **kwargs: Any) -> _Response:
            resource_ = args[2] if len(args) == 3 else resource
            if answers[resource_] == 404:
                raise ApiException(status=404, reason="Not Found")
            return _Response(answers[resource_].encode("utf-8", errors="replace"))

        return call

    def api(**methods: Callable[..., _Response]) -> type:
        return type("FakeApi", (), {"__init__": lambda self, client: None, **methods})

    return {
        "CoreV1Api": api(
            list_pod_for_all_namespaces=lister("pods"), list_namespace=lister("namespaces")
        ),
        "StorageV1Api": api(list_storage_class=lister("storageclasses")),
        "CustomObjectsApi": api(list_cluster_custom_object=lister("peerauthentications")),
    }


def test_audit_cluster(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], shared_engines: None
) -> None:
    """``audit cluster`` with fuzzed LIST answers from the API."""
    from kubernetes import client

    lists = {
        "pods": [_POD],
        "namespaces": [_NAMESPACE],
        "storageclasses": [_STORAGE_CLASS],
        "peerauthentications": [_PEER_AUTH],
    }
    answers: dict[str, Any] = {}
    monkeypatch.setattr(audit, "api_client", lambda args, cfg: _FakeApi())
    for name, fake in _fake_apis(answers).items():
        monkeypatch.setattr(client, name, fake)
    codes: set[int] = set()
    seed = 4
    for i in range(EXAMPLES):
        rng = random.Random(seed * 1_000_003 + i)
        bodies = {what: {"items": items, "metadata": {}} for what, items in lists.items()}
        answers.update({what: json.dumps(body) for what, body in bodies.items()})
        fuzzed = rng.choice(list(bodies))
        if rng.random() < 0.1:
            answers["peerauthentications"] = 404
        else:
            answers[fuzzed] = _text(_mutate(bodies[fuzzed], rng), rng)
        argv = ["audit", "cluster", "--format", rng.choice(["json", "text"])]
        codes.add(_run(capsys, seed * 1_000_003 + i, answers, lambda argv=argv: argv))
    assert {1, 2} <= codes


def test_harness_notices_a_crash(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The harness itself fails on a traceback (so the fuzz tests can fail)."""

    def boom(args: argparse.Namespace, cfg: Any) -> int:
        raise KeyError("x")

    monkeypatch.setattr(audit, "cmd_cluster", boom)
    with pytest.raises(pytest.fail.Exception, match="traceback"):
        _run(capsys, 0, {}, lambda: ["audit", "cluster"])


@pytest.mark.parametrize(
    "pods",
    [
        '{"items": [' + "[" * 100_000 + "]" * 100_000 + "]}",  # past the parser's recursion
        json.dumps({"items": [{"kind": "Pod", "metadata": {"x": _nest(1, eng.MAX_DEPTH)}}]}),
        '{"items": [], "metadata": {"continue": 7}}',
    ],
)
def test_audit_cluster_bad_api_answer_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], pods: str
) -> None:
    from kubernetes import client

    empty = json.dumps({"items": []})
    answers = dict.fromkeys(("namespaces", "storageclasses", "peerauthentications"), empty)
    monkeypatch.setattr(audit, "api_client", lambda args, cfg: _FakeApi())
    for name, fake in _fake_apis({**answers, "pods": pods}).items():
        monkeypatch.setattr(client, name, fake)
    assert run_in_process("audit", "cluster") == 2
    err = capsys.readouterr().err
    assert err.startswith("gotthard audit cluster: ") and "Traceback" not in err


@pytest.mark.parametrize("pods", ['{"items": [{"metadata": "p"}]}', '{"items": [7]}'])
def test_audit_cluster_malformed_item_is_reported(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], pods: str
) -> None:
    """A malformed object in an otherwise good answer is a finding about that object (exit
    1, listed with its error), not an error of the whole audit."""
    from kubernetes import client

    empty = json.dumps({"items": []})
    answers = dict.fromkeys(("namespaces", "storageclasses", "peerauthentications"), empty)
    monkeypatch.setattr(audit, "api_client", lambda args, cfg: _FakeApi())
    for name, fake in _fake_apis({**answers, "pods": pods}).items():
        monkeypatch.setattr(client, name, fake)
    assert run_in_process("audit", "cluster", "--format", "json") == 1
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    doc = json.loads(out.out)
    assert doc["malformed"] == 1
    (obj,) = doc["objects"]
    assert obj["kind"] == "Pod" and obj["rules"] == ["POD-INPUT-001"] and obj["error"]
