#!/usr/bin/env python3
"""Admission latency of the embedded policy engine on 10,000 varied pod specs.

Builds ``--count`` pod specs (Pods and the pod templates of Deployments, Jobs and CronJobs;
1-3 containers, init containers, GPU and hostNetwork pods; Restricted-compliant security
contexts; about 85 % compliant with the site rules, the rest breaking one rule each; the
MPI/NCCL pods' hostNetwork and hostPath also violate the Pod Security Standards controls
that forbid them), then admits each one on the path ``gotthard policy eval`` uses:
``engine.judge`` (dispatch by kind, pod-template extraction, the constrained verdict of
the default profile, ``data.gotthard.decision.verdict_<policy>``) and ``engine.decision``,
with the engine and its policies and data loaded once (``--raw``: ``engine.evaluate``,
every rule's violations, no profile). Prints one JSON line::

    {"engine":…, "path":…, "decisions":…, "seconds":…, "decisions_per_second":…,
     "p50_ms":…, "p99_ms":…, "max_ms":…, "cpu_p50_ms":…, "cpu_p99_ms":…, "denied":…,
     "target_p99_ms": 5.0, "target_met":…}

Target: p99 <= 5 ms per decision. ``p50_ms``/``p99_ms`` are wall-clock latencies, which
other work on a shared machine inflates; ``cpu_*`` is the CPU time of the deciding thread.

``--engine embedded`` (default) measures the shipped :class:`EmbeddedEngine` (regopy,
policies and data compiled once into a bundle); ``--engine opa --opa-url URL`` the same
decisions through an OPA server (the policies are uploaded first); ``--opa-url test``
starts the repository's OPA-REST-compatible test server (regopy behind OPA's REST API,
``tests/policies/opa_rest_server.py``; not OPA) for the figure of that path where no OPA
can be run.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gotthard.policies import constraints
from gotthard.policies import engine as eng
from gotthard.policies.settings import PoliciesConfig

NAMESPACES = {
    "team-a": {"labels": {}, "gpu_quota": 64, "gpus_used": 8},
    "team-b": {"labels": {}, "gpu_quota": 16, "gpus_used": 0},
    "mpi-jobs": {"labels": {"gotthard.io/network": "mpi"}, "gpu_quota": 512, "gpus_used": 64},
    "nccl-tests": {"labels": {"gotthard.io/network": "nccl"}, "gpu_quota": 128, "gpus_used": 0},
}
REGISTRIES = ("registry.gotthard.example.org/ml", "nvcr.io/nvidia", "registry.k8s.io")
IMAGES = ("pytorch", "tensorflow", "triton", "jax", "pause", "busybox", "web")


def _container(rng: random.Random, i: int, gpus: int = 0) -> dict[str, Any]:
    limits: dict[str, Any] = {"cpu": str(rng.choice((1, 2, 4, 16))), "memory": "8Gi"}
    resources: dict[str, Any] = {"limits": limits}
    if gpus:
        limits["nvidia.com/gpu"] = gpus
        resources["requests"] = {"nvidia.com/gpu": gpus}
    image = (
        f"{rng.choice(REGISTRIES)}/{rng.choice(IMAGES)}:{rng.randint(1, 30)}.{rng.randint(0, 9)}"
    )
    if rng.random() < 0.1:
        image = f"{image.split(':')[0]}@sha256:{rng.getrandbits(256):064x}"
    security = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    return {"name": f"c{i}", "image": image, "securityContext": security, "resources": resources}


def _violate(rng: random.Random, spec: dict[str, Any]) -> None:
    c = spec["containers"][0]
    kind = rng.randrange(8)
    if kind == 0:
        c["securityContext"]["privileged"] = True
    elif kind == 1:
        spec["volumes"] = [{"name": "host", "hostPath": {"path": "/var/run/docker.sock"}}]
    elif kind == 2:
        c["image"] = f"{c['image'].rsplit(':', 1)[0].split('@')[0]}:latest"
    elif kind == 3:
        c["image"] = "docker.io/library/nginx:1.27"
    elif kind == 4:
        del c["resources"]["limits"]["memory"]
    elif kind == 5:
        c["securityContext"]["runAsNonRoot"] = False
    elif kind == 6:
        spec["hostNetwork"] = True  # in a namespace not labelled for MPI/NCCL
    else:
        c["resources"]["requests"] = {"nvidia.com/gpu": 2}
        c["resources"]["limits"]["nvidia.com/gpu"] = 4


def pod_specs(count: int, seed: int = 8, violating: float = 0.15) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for n in range(count):
        ns = rng.choice(list(NAMESPACES))
        hpc = ns in ("mpi-jobs", "nccl-tests")
        gpus = rng.choice((0, 0, 1, 4, 8)) if hpc or rng.random() < 0.2 else 0
        spec: dict[str, Any] = {
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [_container(rng, 0, gpus)]
            + [_container(rng, i) for i in range(1, rng.randint(1, 3))],
        }
        if rng.random() < 0.3:
            spec["initContainers"] = [_container(rng, 9)]
        if hpc:
            spec["hostNetwork"] = True
            spec["volumes"] = [{"name": "scratch", "hostPath": {"path": "/capstor/scratch"}}]
        if rng.random() < violating:
            _violate(rng, spec)
            if spec.get("hostNetwork") and hpc:
                spec["hostNetwork"] = False  # keep the single intended violation
        meta = {"name": f"job-{n}", "namespace": ns, "labels": {"app": f"app-{n % 97}"}}
        kind = rng.choices(("Pod", "Deployment", "Job", "CronJob"), (70, 15, 10, 5))[0]
        template = {"metadata": {"labels": meta["labels"]}, "spec": spec}
        if kind == "Pod":
            doc = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
        elif kind == "CronJob":
            doc = {
                "apiVersion": "batch/v1",
                "kind": "CronJob",
                "metadata": meta,
                "spec": {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": template}}},
            }
        else:
            api = "apps/v1" if kind == "Deployment" else "batch/v1"
            doc = {
                "apiVersion": api,
                "kind": kind,
                "metadata": meta,
                "spec": {"template": template},
            }
        out.append(doc)
    return out


def percentile(sorted_values: list[float], q: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(q * len(sorted_values)) - 1))
    return sorted_values[index]


def run(
    count: int, engine_kind: str, seed: int, opa_url: str | None = None, raw: bool = False
) -> dict[str, Any]:
    specs = pod_specs(count, seed=seed)
    data = eng.build_data({"inventory": {"namespaces": NAMESPACES}})
    if not raw:  # what `policy eval` evaluates without a site file: the default profile
        data, _ = constraints.resolve(PoliciesConfig(), data)
    server = None
    if engine_kind == "opa" and opa_url == "test":
        from tests.policies.opa_rest_server import EmbeddedBackedOpaServer

        server = EmbeddedBackedOpaServer().start()
        opa_url = server.url
    try:
        engine = eng.make_engine(engine_kind, data, opa_url=opa_url)

        def decide(doc: dict[str, Any]) -> dict[str, Any]:
            if raw:
                return eng.decision(eng.evaluate(engine, doc))
            verdict = eng.judge(engine, doc)
            return eng.decision(verdict.deny, verdict.warn)

        for doc in specs[:20]:  # warm-up, not measured
            decide(doc)
        latencies: list[float] = []
        cpu: list[float] = []
        denied = 0
        start = time.perf_counter()
        for doc in specs:
            t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            result = decide(doc)
            cpu.append((time.thread_time_ns() - c0) / 1e6)
            latencies.append((time.perf_counter_ns() - t0) / 1e6)
            denied += not result["allowed"]
        seconds = time.perf_counter() - start
    finally:
        if server is not None:
            server.stop()
    latencies.sort()
    cpu.sort()
    p99 = percentile(latencies, 0.99)
    return {
        "engine": engine_kind,
        "path": "evaluate" if raw else "judge",
        "decisions": count,
        "seconds": round(seconds, 3),
        "decisions_per_second": round(count / seconds, 1),
        "p50_ms": round(statistics.median(latencies), 3),
        "p99_ms": round(p99, 3),
        "max_ms": round(latencies[-1], 3),
        "cpu_p50_ms": round(statistics.median(cpu), 3),
        "cpu_p99_ms": round(percentile(cpu, 0.99), 3),
        "denied": denied,
        "target_p99_ms": 5.0,
        "target_met": p99 <= 5.0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument(
        "--engine",
        choices=("embedded", "opa"),
        default="embedded",
        help="embedded: the shipped EmbeddedEngine (default); opa: an OPA server (--opa-url)",
    )
    parser.add_argument(
        "--opa-url",
        default="http://localhost:8181",
        metavar="URL",
        help="the OPA server (--engine opa); 'test': start the OPA-REST test server",
    )
    parser.add_argument(
        "--raw",
        action="store_true",
        help="every rule's violations (engine.evaluate), no profile, instead of the verdict",
    )
    args = parser.parse_args(argv)
    print(json.dumps(run(args.count, args.engine, args.seed, args.opa_url, args.raw)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
