"""Policy evaluation: the shipped Rego, site data, input dispatch and two engines.

* :class:`EmbeddedEngine` runs the policies in-process on regopy (rego-cpp).
* :class:`OpaServerEngine` uploads them to an OPA server with opa-python-client and
  queries ``POST /v1/data/<package>/deny``.

Both return the same :class:`Violation` lists. Policies never use ``with input as``
(regopy errors on ``sprintf`` under ``with``), and callers compare rule ids, not messages.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import yaml

REGO_PACKAGE = "gotthard.policies.rego"


class PolicyError(Exception):
    """Bad input, unknown kind or policy, or an engine failure (exit code 2)."""


@dataclass(frozen=True)
class Policy:
    name: str
    package: str  # Rego package, e.g. "gotthard.admission.pod"
    module: str  # file under gotthard/policies/rego/
    kinds: tuple[str, ...]


POLICIES: dict[str, Policy] = {
    p.name: p
    for p in (
        Policy(
            "pod",
            "gotthard.admission.pod",
            "pod.rego",
            (
                "Pod",
                "Deployment",
                "StatefulSet",
                "DaemonSet",
                "ReplicaSet",
                "Job",
                "CronJob",
            ),
        ),
        Policy(
            "storageclass",
            "gotthard.admission.storageclass",
            "storageclass.rego",
            ("StorageClass",),
        ),
        Policy("mesh", "gotthard.mesh", "mesh.rego", ("PeerAuthentication", "Namespace")),
        Policy("slurm-quota", "gotthard.slurm.quota", "slurm_quota.rego", ("SlurmJob",)),
        Policy("kube-bench", "gotthard.kube_bench", "kube_bench.rego", ("KubeBenchResults",)),
    )
}

KIND_TO_POLICY = {kind: p.name for p in POLICIES.values() for kind in p.kinds}


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"rule": self.rule, "message": self.message}


# --- shipped files -------------------------------------------------------------------


def rego_dir() -> Any:
    return resources.files(REGO_PACKAGE)


def rego_modules() -> dict[str, str]:
    """File name -> Rego source of every shipped policy."""
    root = rego_dir()
    return {
        p.module: root.joinpath(p.module).read_text(encoding="utf-8") for p in POLICIES.values()
    }


def _load_yaml_text(text: str, what: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise PolicyError(f"{what}: not valid YAML/JSON: {err}") from err


def load_file(path: str | Path, what: str = "input") -> Any:
    """Read a JSON or YAML file; several YAML documents become a ``List``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise PolicyError(f"{what} {path}: cannot read: {err}") from err
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        raise PolicyError(f"{what} {path}: neither JSON nor YAML: {err}") from err
    if not docs:
        raise PolicyError(f"{what} {path}: empty document")
    if len(docs) == 1:
        return docs[0]
    return {"kind": "List", "apiVersion": "v1", "items": docs}


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Merge mappings recursively; any other value (lists included) replaces."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def default_data() -> dict[str, Any]:
    """The ``data.gotthard`` document: shipped site values, waivers, empty inventory."""
    root = rego_dir().joinpath("data")
    site = _load_yaml_text(root.joinpath("site.yml").read_text(encoding="utf-8"), "site.yml")
    waivers = _load_yaml_text(root.joinpath("waivers.yml").read_text(encoding="utf-8"), "waivers")
    return {"site": site, "waivers": waivers or [], "inventory": {"namespaces": {}}}


def build_data(*overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    data = default_data()
    for override in overrides:
        if override:
            if not isinstance(override, Mapping):
                raise PolicyError(
                    "data override must be a mapping (keys: site, inventory, waivers)"
                )
            data = deep_merge(data, override)
    return data


# --- input dispatch ------------------------------------------------------------------


def _pod_from_workload(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A Pod-shaped object from a Pod or a workload's pod template."""
    kind = obj.get("kind")
    meta = dict(obj.get("metadata") or {})
    spec = obj.get("spec") or {}
    if kind == "CronJob":
        spec = ((spec.get("jobTemplate") or {}).get("spec") or {}).get("template", {}).get("spec")
    elif kind != "Pod":
        spec = (spec.get("template") or {}).get("spec")
    if not isinstance(spec, Mapping) or not isinstance(spec.get("containers"), list):
        raise PolicyError(f"{kind} {meta.get('name', '')}: no pod spec with containers")
    pod_meta = {
        "name": meta.get("name", "<unnamed>"),
        "namespace": meta.get("namespace", "default"),
    }
    return {"kind": "Pod", "metadata": pod_meta, "spec": dict(spec)}


def is_kube_bench_report(obj: Any) -> bool:
    if isinstance(obj, Mapping):
        return any(k in obj for k in ("Controls", "controls"))
    return (
        isinstance(obj, list)
        and bool(obj)
        and all(isinstance(c, Mapping) and "tests" in c for c in obj)
    )


def unwrap(obj: Any) -> Any:
    """An AdmissionReview yields its ``request.object`` (with the request's namespace)."""
    if isinstance(obj, Mapping) and obj.get("kind") == "AdmissionReview":
        request = obj.get("request") or {}
        inner = request.get("object")
        if not isinstance(inner, Mapping):
            raise PolicyError("AdmissionReview without request.object")
        inner = copy.deepcopy(dict(inner))
        if request.get("namespace"):
            inner.setdefault("metadata", {}).setdefault("namespace", request["namespace"])
        return inner
    return obj


def policy_for(obj: Any) -> str:
    if is_kube_bench_report(obj):
        return "kube-bench"
    if not isinstance(obj, Mapping):
        raise PolicyError(f"input must be an object with a 'kind', got {type(obj).__name__}")
    kind = obj.get("kind")
    if kind not in KIND_TO_POLICY:
        known = ", ".join(sorted([*KIND_TO_POLICY, "AdmissionReview", "List"]))
        raise PolicyError(f"unknown kind {kind!r}: use --policy NAME, or one of: {known}")
    return KIND_TO_POLICY[kind]


def prepare(policy: str, obj: Any, today: str | None = None) -> Any:
    """The input document the named policy expects."""
    if policy not in POLICIES:
        raise PolicyError(f"unknown policy {policy!r}; known: {', '.join(POLICIES)}")
    if policy == "kube-bench":
        from gotthard.policies import kube_bench

        if isinstance(obj, Mapping) and obj.get("kind") == "KubeBenchResults":
            return obj
        return kube_bench.to_input(kube_bench.parse_report(obj), today=today)
    if not isinstance(obj, Mapping):
        raise PolicyError(f"policy {policy}: input must be an object")
    if policy == "pod":
        return _pod_from_workload(obj)
    return obj


# --- engines -------------------------------------------------------------------------


class Engine(Protocol):
    def query(self, package: str, rule: str, input_doc: Any) -> Any: ...


def violations_of(result: Any) -> list[Violation]:
    if result is None:
        return []
    if not isinstance(result, list):
        raise PolicyError(f"policy returned {type(result).__name__}, expected a set of violations")
    out = [Violation(str(v.get("rule", "")), str(v.get("message", ""))) for v in result]
    return sorted(out, key=lambda v: (v.rule, v.message))


class EmbeddedEngine:
    """regopy (rego-cpp) in-process. Modules and data compiled once into a bundle.

    ``Interpreter.query`` recompiles every module on every call (about 12 ms); the
    ``deny`` entry points of every policy are therefore compiled once with
    ``Interpreter.build`` and evaluated with ``query_bundle_entrypoint``. Other rules
    fall back to a plain query.
    """

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        try:
            import regopy
        except ImportError as err:  # pragma: no cover - regopy is a runtime dependency
            raise PolicyError("the embedded engine needs regopy (pip install regopy)") from err
        self._interp = regopy.Interpreter()
        for name, src in rego_modules().items():
            self._interp.add_module(name, src)
        self._interp.add_data_json(json.dumps({"gotthard": dict(data or build_data())}))
        self._entrypoints = {
            f"{policy.package.replace('.', '/')}/deny" for policy in POLICIES.values()
        }
        self._bundle = self._interp.build(None, sorted(self._entrypoints))
        self._bundle_interp = regopy.Interpreter()

    def query(self, package: str, rule: str, input_doc: Any) -> Any:
        entrypoint = f"{package.replace('.', '/')}/{rule}"
        if entrypoint in self._entrypoints:
            self._bundle_interp.set_input_term(json.dumps(input_doc))
            out = self._bundle_interp.query_bundle_entrypoint(self._bundle, entrypoint)
        else:
            self._interp.set_input_term(json.dumps(input_doc))
            out = self._interp.query(f"data.{package}.{rule}")
        # Do not print/inspect a failed output: regopy can crash doing so.
        if not out.ok():
            raise PolicyError(f"embedded engine: evaluation of data.{package}.{rule} failed")
        if len(out) == 0:
            return None
        return json.loads(out.expressions().json())[0]


class OpaServerEngine:
    """An OPA server through opa-python-client: policies and data uploaded on creation."""

    def __init__(
        self,
        url: str,
        data: Mapping[str, Any] | None = None,
        upload: bool = True,
        timeout: float = 5.0,
    ) -> None:
        from urllib.parse import urlsplit

        from opa_client import OpaClient

        parts = urlsplit(url if "://" in url else f"http://{url}")
        if not parts.hostname:
            raise PolicyError(f"bad --opa-url {url!r}")
        ssl = parts.scheme == "https"
        self._client = OpaClient(
            host=parts.hostname, port=parts.port or (443 if ssl else 8181), ssl=ssl, timeout=timeout
        )
        if upload:
            try:
                for name, src in rego_modules().items():
                    self._client.update_policy_from_string(src, f"gotthard/{name}")
                self._client.update_or_create_data(dict(data or build_data()), "gotthard")
            except Exception as err:
                raise PolicyError(f"OPA server {url}: upload failed: {err}") from err

    def query(self, package: str, rule: str, input_doc: Any) -> Any:
        try:
            response = self._client.query_rule(
                input_data=input_doc, package_path=package.replace(".", "/"), rule_name=rule
            )
        except Exception as err:
            raise PolicyError(f"OPA server query data.{package}.{rule} failed: {err}") from err
        return response.get("result")

    def close(self) -> None:
        self._client.close_connection()


def make_engine(
    kind: str, data: Mapping[str, Any] | None = None, opa_url: str | None = None
) -> Engine:
    if kind == "embedded":
        return EmbeddedEngine(data)
    if kind == "opa":
        return OpaServerEngine(opa_url or "http://localhost:8181", data)
    raise PolicyError(f"unknown engine {kind!r}")


# --- evaluation ----------------------------------------------------------------------


def _describe(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    name = meta.get("name", "<unnamed>")
    return f"{obj.get('kind')} {ns}/{name}" if ns else f"{obj.get('kind')} {name}"


def evaluate(
    engine: Engine, obj: Any, policy: str | None = None, today: str | None = None
) -> list[Violation]:
    """Violations of one input (a List: each item by its kind, plus the mesh over all)."""
    obj = unwrap(obj)
    if policy is None and isinstance(obj, Mapping) and obj.get("kind") == "List":
        return evaluate_list(engine, obj.get("items") or [], today=today)
    name = policy or policy_for(obj)
    doc = prepare(name, obj, today=today)
    return violations_of(engine.query(POLICIES[name].package, "deny", doc))


def evaluate_list(
    engine: Engine, items: Iterable[Any], today: str | None = None
) -> list[Violation]:
    items = [unwrap(i) for i in items]
    out: list[Violation] = []
    mesh_items = []
    for item in items:
        name = policy_for(item)
        if name == "mesh":
            mesh_items.append(item)
            continue
        where = _describe(item) if isinstance(item, Mapping) else "item"
        for v in evaluate(engine, item, policy=name, today=today):
            out.append(Violation(v.rule, f"{where}: {v.message}"))
    if mesh_items:
        out.extend(evaluate(engine, {"kind": "List", "items": mesh_items}, policy="mesh"))
    return sorted(out, key=lambda v: (v.rule, v.message))


def decision(violations: Iterable[Violation]) -> dict[str, Any]:
    vs = list(violations)
    return {"allowed": not vs, "violations": [v.as_dict() for v in vs]}
