"""Policy evaluation: the shipped Rego, site data, input dispatch and two engines.

* :class:`EmbeddedEngine` runs the policies in-process on regopy (rego-cpp).
* :class:`OpaServerEngine` uploads them to an OPA server with opa-python-client and
  queries ``POST /v1/data/<package>/deny``.

Both return the same :class:`Violation` lists. Policies never use ``with input as``
(regopy errors on ``sprintf`` under ``with``), and callers compare rule ids, not messages.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import functools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import yaml

from gotthard.extras import install_hint

REGO_PACKAGE = "gotthard.policies.rego"


class PolicyError(Exception):
    """Bad input, unknown kind or policy, or an engine failure (exit code 2)."""


@dataclass(frozen=True)
class Policy:
    name: str
    package: str  # Rego package, e.g. "gotthard.admission.pod"
    modules: tuple[str, ...]  # its files under gotthard/policies/rego/
    kinds: tuple[str, ...]

    @property
    def verdict_rule(self) -> str:
        """The rule of :data:`CONSTRAINTS_PACKAGE` with this policy's constrained verdict."""
        return f"verdict_{self.name.replace('-', '_')}"


#: constraints.rego: the violations the constraints keep, as ``deny`` and ``warn``;
#: constrain.rego: the constraint semantics it applies.
CONSTRAINTS_PACKAGE = "gotthard.decision"
CONSTRAINTS_MODULES = ("constrain.rego", "constraints.rego")


POLICIES: dict[str, Policy] = {
    p.name: p
    for p in (
        Policy(
            "pod",
            "gotthard.admission.pod",
            (
                "pod.rego",
                "pod_input.rego",
                "pod_shape.rego",
                "pod_fields.rego",
                "pod_site.rego",
                "pod_pss.rego",
                "pod_tunable.rego",
            ),
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
            ("storageclass.rego",),
            ("StorageClass",),
        ),
        Policy("mesh", "gotthard.mesh", ("mesh.rego",), ("PeerAuthentication", "Namespace")),
        Policy("slurm-quota", "gotthard.slurm.quota", ("slurm_quota.rego",), ("SlurmJob",)),
        Policy("kube-bench", "gotthard.kube_bench", ("kube_bench.rego",), ("KubeBenchResults",)),
    )
}

KIND_TO_POLICY = {kind: p.name for p in POLICIES.values() for kind in p.kinds}


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"rule": self.rule, "message": self.message}


@dataclass(frozen=True)
class Verdict:
    """Violations the constraints enforce (``deny``) and those they only report (``warn``)."""

    deny: list[Violation]
    warn: list[Violation]


# --- shipped files -------------------------------------------------------------------


def rego_dir() -> Any:
    return resources.files(REGO_PACKAGE)


def rego_modules() -> dict[str, str]:
    """File name -> Rego source of every shipped policy."""
    root = rego_dir()
    names = [*(m for p in POLICIES.values() for m in p.modules), *CONSTRAINTS_MODULES]
    return {name: root.joinpath(name).read_text(encoding="utf-8") for name in names}


#: Deepest nesting of mappings and lists an input may have (Kubernetes objects need ~15).
MAX_DEPTH = 64
#: Most values (scalars, mappings, lists) one input may hold: YAML aliases may not expand
#: a small file into a huge document.
MAX_VALUES = 2_000_000


def check_shape(doc: Any, what: str = "input") -> None:
    """Refuse nesting deeper than :data:`MAX_DEPTH` or more than :data:`MAX_VALUES` values.

    Iterative, so a deep or self-referencing (YAML alias) document cannot exhaust the stack.
    """
    stack: list[tuple[Any, int]] = [(doc, 0)]
    seen = 0
    while stack:
        value, depth = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise PolicyError(f"{what}: more than {MAX_VALUES} values (YAML alias expansion?)")
        if isinstance(value, Mapping):
            children: Iterable[Any] = value.values()
        elif isinstance(value, (list, tuple)):
            children = value
        else:
            continue
        if depth >= MAX_DEPTH:
            raise PolicyError(f"{what}: nested deeper than {MAX_DEPTH} levels")
        stack.extend((child, depth + 1) for child in children)


def _json_scalar(value: Any) -> Any:
    """YAML-only scalars (dates, timestamps, binary, sets) as JSON values."""
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=str)
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def as_json_value(doc: Any, what: str = "input") -> Any:
    """*doc* checked (:func:`check_shape`) and converted to plain JSON values.

    Mapping keys become strings; NaN/Infinity and values JSON cannot hold are refused.
    """
    check_shape(doc, what)
    try:
        return json.loads(json.dumps(doc, default=_json_scalar, allow_nan=False))
    except (TypeError, ValueError, RecursionError) as err:
        raise PolicyError(f"{what}: not representable as JSON: {err}") from err


def _load_yaml_text(text: str, what: str) -> Any:
    try:
        return yaml.safe_load(text)
    except (yaml.YAMLError, ValueError, RecursionError) as err:
        raise PolicyError(f"{what}: not valid YAML/JSON: {_short(err)}") from err


def _short(err: BaseException) -> str:
    if isinstance(err, RecursionError):
        return f"nested deeper than {MAX_DEPTH} levels"
    return str(err)[:500]


#: libyaml's parser where PyYAML has it (the same safe constructors; inputs parse many
#: times faster, which matters for large multi-document files).
_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _parse(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError as err:
        raise PolicyError(f"{where}: {_short(err)}") from err
    except ValueError:
        pass
    try:
        docs = [d for d in yaml.load_all(text, Loader=_YAML_LOADER) if d is not None]
    except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError) as err:
        # constructors raise ValueError/TypeError for e.g. a 5000-digit int or a bad date
        raise PolicyError(f"{where}: neither JSON nor YAML: {_short(err)}") from err
    if not docs:
        raise PolicyError(f"{where}: empty document")
    if len(docs) == 1:
        return docs[0]
    return {"kind": "List", "apiVersion": "v1", "items": docs}


def load_file(path: str | Path, what: str = "input") -> Any:
    """Read a JSON or YAML file as plain JSON values; several YAML documents become a
    ``List``. Anything unreadable, too deep or too large is a :class:`PolicyError`."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise PolicyError(f"{what} {path}: cannot read: {err}") from err
    return as_json_value(_parse(text, f"{what} {path}"), f"{what} {path}")


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Merge mappings recursively; any other value (lists included) replaces."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _shipped_data(name: str, what: str) -> Any:
    text = rego_dir().joinpath("data", name).read_text(encoding="utf-8")
    return _load_yaml_text(text, what)


def shipped_site() -> dict[str, Any]:
    """``data.gotthard.site`` as the policies ship it (``rego/data/site.yml``)."""
    return dict(_shipped_data("site.yml", "site.yml") or {})


def default_data() -> dict[str, Any]:
    """The ``data.gotthard`` document: shipped site values, waivers, empty inventory."""
    waivers = _shipped_data("waivers.yml", "waivers")
    return {"site": shipped_site(), "waivers": waivers or [], "inventory": {"namespaces": {}}}


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


def mapping_at(obj: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    """``obj[key]`` as a mapping: absent or null is empty, any other type is an input error."""
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PolicyError(f"{where}: '{key}' must be an object, got {type(value).__name__}")
    return value


# The pod spec of each workload kind: the path of mappings from the object to it.
POD_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
TEMPLATE_SPEC_PATH = ("spec", "template", "spec")


def _pod_from_workload(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A Pod-shaped object from a Pod or a workload's pod template."""
    kind = obj.get("kind")
    meta = mapping_at(obj, "metadata", f"{kind}")
    where = f"{str(kind)[:100]} {str(meta.get('name', ''))[:100]}".rstrip()
    spec: Mapping[str, Any] = obj
    template: Mapping[str, Any] = obj
    path = POD_SPEC_PATHS.get(str(kind), TEMPLATE_SPEC_PATH)
    for depth, key in enumerate(path):
        template = spec
        spec = mapping_at(spec, key, f"{where}: {'.'.join(path[:depth]) or 'object'}")
    if not isinstance(spec.get("containers"), list):
        raise PolicyError(f"{where}: no pod spec with containers ({'.'.join(path)})")
    pod_meta = {
        "name": meta.get("name", "<unnamed>"),
        "namespace": meta.get("namespace", "default"),
    }
    # the pod's own annotations (AppArmor profiles) are those of the template
    template_meta = template.get("metadata")
    if isinstance(template_meta, Mapping) and "annotations" in template_meta:
        pod_meta["annotations"] = template_meta["annotations"]
    return {"kind": "Pod", "metadata": pod_meta, "spec": dict(spec)}


# --- kube-bench reports ------------------------------------------------------------
#
# Parsing tolerates the report variants seen in the wild: a top-level list of controls
# (``--json`` per target) or ``{"Controls": [...], "Totals": {...}}``, a missing Totals
# section, and mixed key casing (``Controls``/``controls``, ``Totals``/``totals``).

STATUSES = ("pass", "fail", "warn", "info")


@dataclass
class Check:
    id: str
    status: str  # upper case: PASS, FAIL, WARN, INFO
    node_type: str
    desc: str = ""
    scored: bool = False


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)
    totals: dict[str, int] = field(default_factory=dict)


#: ``site.kube_bench.required`` value meaning "every scored check in the report".
SCORED = "scored"


def get_key(obj: Mapping[str, Any], *keys: str, default: Any = None, where: str = "") -> Any:
    """The first key present, compared case-insensitively; two spellings of one wanted key
    in the same object (``Controls`` and ``controls``) are ambiguous and refused."""
    for key in keys:
        found = [k for k in obj if str(k).lower() == key.lower()]
        if len(found) > 1:
            spellings = ", ".join(map(repr, found))
            raise PolicyError(f"kube-bench report: {where or 'object'} has {spellings}")
        if found:
            return obj[found[0]]
    return default


def _typed(obj: Mapping[str, Any], key: str, types: Any, where: str, default: Any) -> Any:
    """``obj[key]`` (any casing) if of *types*; absent or null is *default*."""
    value = get_key(obj, key, where=where)
    if value is None:
        return default
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in _tuple(types)):
        names = "/".join(t.__name__ for t in _tuple(types))
        got = type(value).__name__
        raise PolicyError(f"kube-bench report: {where}: {key} must be {names}, got {got}")
    return value


def _tuple(types: Any) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


def _count(obj: Mapping[str, Any], key: str, where: str) -> int:
    value = _typed(obj, key, int, where, 0)
    if value < 0:
        raise PolicyError(f"kube-bench report: {where}: {key} is negative")
    return int(value)


def _list_of_objects(obj: Mapping[str, Any], key: str, where: str) -> list[Mapping[str, Any]]:
    items = _typed(obj, key, list, where, [])
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            got = type(item).__name__
            raise PolicyError(f"kube-bench report: {where}: {key}[{i}] is {got}, not an object")
    return items


def _check(result: Mapping[str, Any], node_type: str, where: str) -> Check:
    check_id = _typed(result, "test_number", str, where, "")
    if not check_id.strip():
        raise PolicyError(f"kube-bench report: {where}: test_number missing or empty")
    where = f"{where} ({check_id})"
    status = _typed(result, "status", str, where, "").upper()
    if status.lower() not in STATUSES:
        known = "/".join(s.upper() for s in STATUSES)
        raise PolicyError(f"kube-bench report: {where}: status {status!r} is not {known}")
    return Check(
        id=check_id,
        status=status,
        node_type=node_type,
        desc=_typed(result, "test_desc", str, where, ""),
        scored=_typed(result, "scored", bool, where, False),
    )


def parse_report(doc: Any) -> Report:
    """The checks and totals of a ``kube-bench --json`` report (0.6-0.10 shapes).

    Anything else (wrong types, unknown statuses, no results) is a :class:`PolicyError`
    naming the offending part: a report that cannot be read must not look compliant.
    """
    if isinstance(doc, Mapping):
        controls = get_key(doc, "Controls", where="report")
        totals_doc = get_key(doc, "Totals", where="report")
        if controls is None:
            raise PolicyError("kube-bench report: no Controls list")
        doc = {"Controls": controls, "Totals": totals_doc}
    elif isinstance(doc, list):
        doc = {"Controls": doc, "Totals": None}
    else:
        got = type(doc).__name__
        raise PolicyError(f"kube-bench report: expected an object or a list, got {got}")
    report = Report()
    sums = dict.fromkeys(STATUSES, 0)
    for c, control in enumerate(_list_of_objects(doc, "Controls", "report")):
        where = f"Controls[{c}]"
        node_type = _typed(control, "node_type", str, where, "") or "unknown"
        for status in STATUSES:
            sums[status] += _count(control, f"total_{status}", where)
        for t, test in enumerate(_list_of_objects(control, "tests", where)):
            test_where = f"{where}.tests[{t}]"
            for r, result in enumerate(_list_of_objects(test, "results", test_where)):
                report.checks.append(_check(result, node_type, f"{test_where}.results[{r}]"))
    if not report.checks:
        raise PolicyError("kube-bench report: no check results (did kube-bench run?)")
    totals_doc = _typed(doc, "Totals", Mapping, "report", None)
    if totals_doc is not None:
        report.totals = {s: _count(totals_doc, f"total_{s}", "Totals") for s in STATUSES}
    elif any(sums.values()):
        report.totals = sums
    else:  # neither Totals nor per-control totals: count the results
        report.totals = {s: sum(c.status == s.upper() for c in report.checks) for s in STATUSES}
    return report


def baseline(data: Mapping[str, Any]) -> list[str] | str:
    """``site.kube_bench.required``: a list of check ids, or ``"scored"``."""
    site = data.get("site")
    kb = site.get("kube_bench") if isinstance(site, Mapping) else None
    required = kb.get("required") if isinstance(kb, Mapping) else None
    if required == SCORED:
        return SCORED
    if isinstance(required, list) and all(isinstance(i, str) for i in required):
        return list(required)
    raise PolicyError(
        f"site.kube_bench.required must be a list of check ids or {SCORED!r}, got {required!r}"
    )


def to_input(
    report: Report, today: str | None = None, only: Sequence[str] | None = None
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "kind": "KubeBenchResults",
        "today": today or dt.date.today().isoformat(),
        "checks": [
            {"id": c.id, "status": c.status, "node_type": c.node_type, "scored": c.scored}
            for c in report.checks
        ],
    }
    if only:
        doc["only"] = list(only)
    return doc


def check_input(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    """A ``KubeBenchResults`` input given directly (the shape :func:`to_input` writes)."""
    where = "KubeBenchResults"
    if not isinstance(doc.get("today"), str):
        raise PolicyError(f"{where}: 'today' must be a YYYY-MM-DD string")
    checks = doc.get("checks")
    if not isinstance(checks, list) or not checks:
        raise PolicyError(f"{where}: 'checks' must be a non-empty list")
    for i, c in enumerate(checks):
        if not (
            isinstance(c, Mapping)
            and isinstance(c.get("id"), str)
            and isinstance(c.get("status"), str)
            and isinstance(c.get("scored", False), bool)
        ):
            raise PolicyError(f"{where}: checks[{i}] needs a string id and status")
    only = doc.get("only")
    if only is not None and not (isinstance(only, list) and all(isinstance(i, str) for i in only)):
        raise PolicyError(f"{where}: 'only' must be a list of check ids")
    return doc


def is_kube_bench_report(obj: Any) -> bool:
    if isinstance(obj, Mapping):
        return any(k in obj for k in ("Controls", "controls"))
    return (
        isinstance(obj, list)
        and bool(obj)
        and all(isinstance(c, Mapping) and "tests" in c for c in obj)
    )


#: Operations of an AdmissionReview that have no object to judge: always allowed.
SKIPPED_OPERATIONS = ("DELETE", "CONNECT")


def operation_of(request: Mapping[str, Any]) -> str:
    return str(request.get("operation") or "CREATE").upper()


def unwrap(obj: Any) -> Any:
    """An AdmissionReview yields its ``request.object`` (with the request's namespace); a
    DELETE or CONNECT review, which has nothing to judge, an empty ``List``."""
    if isinstance(obj, Mapping) and obj.get("kind") == "AdmissionReview":
        request = mapping_at(obj, "request", "AdmissionReview")
        if operation_of(request) in SKIPPED_OPERATIONS:
            return {"kind": "List", "apiVersion": "v1", "items": []}
        inner = request.get("object")
        if not isinstance(inner, Mapping):
            raise PolicyError("AdmissionReview without request.object")
        inner = copy.deepcopy(dict(inner))
        namespace = request.get("namespace")
        if namespace:
            meta = dict(mapping_at(inner, "metadata", "AdmissionReview request.object"))
            meta.setdefault("namespace", namespace)
            inner["metadata"] = meta
        return inner
    return obj


def policy_for(obj: Any) -> str:
    if is_kube_bench_report(obj):
        return "kube-bench"
    if not isinstance(obj, Mapping):
        raise PolicyError(f"input must be an object with a 'kind', got {type(obj).__name__}")
    kind = obj.get("kind")
    if not isinstance(kind, str) or kind not in KIND_TO_POLICY:
        known = ", ".join(sorted([*KIND_TO_POLICY, "AdmissionReview", "List"]))
        raise PolicyError(f"unknown kind {kind!r:.100}: use --policy NAME, or one of: {known}")
    return KIND_TO_POLICY[kind]


def prepare(policy: str, obj: Any, today: str | None = None) -> Any:
    """The input document the named policy expects."""
    if policy not in POLICIES:
        raise PolicyError(f"unknown policy {policy!r}; known: {', '.join(POLICIES)}")
    if policy == "kube-bench":
        if isinstance(obj, Mapping) and obj.get("kind") == "KubeBenchResults":
            return check_input(obj)
        return to_input(parse_report(obj), today=today)
    if not isinstance(obj, Mapping):
        raise PolicyError(f"policy {policy}: input must be an object")
    if policy == "pod":
        return _pod_from_workload(obj)
    return obj


def ready_data(data: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``data.gotthard`` an engine loads; the kube-bench baseline must be a list of ids
    (``"scored"`` is resolved against a report first), else the Rego would pass anything."""
    out = dict(data or build_data())
    if baseline(out) == SCORED:
        raise PolicyError("the 'scored' kube-bench baseline needs a report to resolve against")
    return out


# --- engines -------------------------------------------------------------------------


class Engine(Protocol):
    def query(self, package: str, rule: str, input_doc: Any) -> Any: ...


def violations_of(result: Any) -> list[Violation]:
    """The engine's ``deny`` set; any other shape is an engine error, never "allowed"."""
    if result is None:
        return []
    if not isinstance(result, list) or not all(isinstance(v, Mapping) for v in result):
        raise PolicyError(f"policy returned {type(result).__name__}, expected a set of violations")
    out = [Violation(str(v.get("rule", "")), str(v.get("message", ""))) for v in result]
    return sorted(out, key=lambda v: (v.rule, v.message))


#: Entry points compiled into the embedded engine's bundle: every policy's ``deny`` and
#: constrained verdict.
ENTRYPOINTS = frozenset(
    {f"{policy.package.replace('.', '/')}/deny" for policy in POLICIES.values()}
    | {f"{CONSTRAINTS_PACKAGE.replace('.', '/')}/{p.verdict_rule}" for p in POLICIES.values()}
)


@functools.lru_cache(maxsize=8)
def _compiled(modules: tuple[tuple[str, str], ...], data_json: str) -> tuple[Any, Any, Any]:
    """(interpreter with the modules and data, bundle of :data:`ENTRYPOINTS`, the pod
    policy's compiled input shape), made once per modules and data: an engine made again
    for the same data in one process (a long-running caller, a test suite) reuses them
    instead of compiling again (~0.2 s). The bundle leaves out the Rego shape checks
    (:data:`shape.REPLACED_MODULES`): the engine runs them compiled, in one pass over the
    input. Each build uses a fresh interpreter: regopy answers a second build of one
    interpreter with the plans of the first."""
    import regopy

    from gotthard.policies import shape

    interp = regopy.Interpreter()
    for name, src in modules:
        interp.add_module(name, src)
    interp.add_data_json(data_json)
    builder = regopy.Interpreter()
    for name, src in modules:
        if name not in shape.REPLACED_MODULES:
            builder.add_module(name, src)
    builder.add_module(shape.EMBEDDED_MODULE_NAME, shape.EMBEDDED_MODULE)
    builder.add_data_json(data_json)
    bundle = builder.build(None, sorted(ENTRYPOINTS))
    out = interp.query(f"data.{POLICIES['pod'].package}.input_fields")
    if not out.ok() or len(out) == 0:
        raise PolicyError("embedded engine: the pod policy's input_fields table is missing")
    fields = json.loads(out.expressions().json())[0]
    site = json.loads(data_json).get("gotthard", {}).get("site", {})
    gpus = site.get("admission", {}).get("gpu_resources") if isinstance(site, Mapping) else None
    return interp, bundle, shape.ShapeCheck(shape.compile_shape(fields, gpus))


class EmbeddedEngine:
    """regopy (rego-cpp) in-process. Modules and data compiled once into a bundle.

    ``Interpreter.query`` recompiles every module on every call (about 12 ms); the
    entry points in :data:`ENTRYPOINTS` are therefore compiled once with
    ``Interpreter.build`` and evaluated with ``query_bundle_entrypoint``, with the pod
    policy's fail-closed shape checks (POD-INPUT-001) done in one compiled pass over the
    input (:mod:`gotthard.policies.shape`) instead of in Rego. Other rules, and inputs
    that are not objects, fall back to a plain query of the full policies. What a decision
    costs, and how the policies are written for regopy, is in docs/policies.md (Benchmark).
    """

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        try:
            import regopy
        except ImportError as err:  # pragma: no cover - regopy is in the policy extra
            raise PolicyError(
                f"the embedded engine needs regopy: {install_hint('policy')}"
                " (hosts with glibc < 2.34: --engine opa)"
            ) from err
        modules = tuple(rego_modules().items())
        data_json = json.dumps({"gotthard": ready_data(data)})
        self._interp, self._bundle, self._shape = _compiled(modules, data_json)
        self._entrypoints = ENTRYPOINTS
        self._bundle_interp = regopy.Interpreter()

    def query(self, package: str, rule: str, input_doc: Any) -> Any:
        from gotthard.policies.shape import INPUT_KEY

        entrypoint = f"{package.replace('.', '/')}/{rule}"
        failed = PolicyError(f"embedded engine: evaluation of data.{package}.{rule} failed")
        try:
            text = json.dumps(input_doc)
            value = json.loads(text) if entrypoint in self._entrypoints else None
            if isinstance(value, dict):
                # the input exactly as the policy reads it, with its shape violations
                value[INPUT_KEY] = self._shape.violations(value)
                self._bundle_interp.set_input_term(json.dumps(value))
                out = self._bundle_interp.query_bundle_entrypoint(self._bundle, entrypoint)
            else:
                self._interp.set_input_term(text)
                out = self._interp.query(f"data.{package}.{rule}")
            # Do not print/inspect a failed output: regopy can crash doing so.
            if not out.ok():
                raise failed
            if len(out) == 0:
                return None
            return json.loads(out.expressions().json())[0]
        except PolicyError:
            raise
        except Exception as err:  # regopy's own errors (e.g. output it cannot parse)
            raise failed from err


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
                self._client.update_or_create_data(ready_data(data), "gotthard")
            except PolicyError:
                raise
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
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    ns = meta.get("namespace")
    name = meta.get("name", "<unnamed>")
    return f"{obj.get('kind')} {ns}/{name}" if ns else f"{obj.get('kind')} {name}"


def list_items(obj: Mapping[str, Any]) -> list[Any]:
    items = obj.get("items")
    if items is None:
        return []
    if not isinstance(items, list):
        raise PolicyError(f"List: 'items' must be a list, got {type(items).__name__}")
    return items


Query = Callable[[Engine, str, Any], Verdict]


def admission_request(obj: Any) -> Mapping[str, Any] | None:
    """The ``request`` of an AdmissionReview, else None."""
    if isinstance(obj, Mapping) and obj.get("kind") == "AdmissionReview":
        return mapping_at(obj, "request", "AdmissionReview")
    return None


def review_doc(request: Mapping[str, Any], obj: Mapping[str, Any]) -> dict[str, Any]:
    """What constraints.rego reads about the review: operation, the object's kind and the
    old pod (an UPDATE's ``oldObject`` as a Pod-shaped document, when it has one)."""
    review: dict[str, Any] = {"operation": operation_of(request), "kind": obj.get("kind")}
    old = request.get("oldObject")
    if isinstance(old, Mapping):
        # an unreadable old object is left out: the update is then judged in full
        with contextlib.suppress(PolicyError):
            review["old"] = _pod_from_workload(old)
    return review


def query_deny(engine: Engine, policy: str, doc: Any) -> Verdict:
    """The policy's own ``deny``: every violation, no constraints applied."""
    return Verdict(violations_of(engine.query(POLICIES[policy].package, "deny", doc)), [])


def query_verdict(engine: Engine, policy: str, doc: Any) -> Verdict:
    """The policy's violations as the constraints keep them (constraints.rego)."""
    result = engine.query(CONSTRAINTS_PACKAGE, POLICIES[policy].verdict_rule, doc)
    if result is None:
        return Verdict([], [])
    if not isinstance(result, Mapping):
        raise PolicyError(f"constraints returned {type(result).__name__}, expected an object")
    return Verdict(violations_of(result.get("deny")), violations_of(result.get("warn")))


def _judge(
    engine: Engine, obj: Any, policy: str | None, today: str | None, query: Query
) -> Verdict:
    request = admission_request(obj)
    if request is not None and operation_of(request) in SKIPPED_OPERATIONS:
        return Verdict([], [])
    obj = unwrap(obj)
    if policy is None and isinstance(obj, Mapping) and obj.get("kind") == "List":
        return _judge_list(engine, list_items(obj), today, query)
    name = policy or policy_for(obj)
    doc = prepare(name, obj, today=today)
    if request is not None and name == "pod":
        doc["review"] = review_doc(request, obj)
    return query(engine, name, doc)


def _judge_list(engine: Engine, items: Iterable[Any], today: str | None, query: Query) -> Verdict:
    deny: list[Violation] = []
    warn: list[Violation] = []
    mesh_items = []
    for item in items:
        request = admission_request(item)
        if request is not None and operation_of(request) in SKIPPED_OPERATIONS:
            continue
        inner = unwrap(item)
        name = policy_for(inner)
        if name == "mesh":
            mesh_items.append(inner)
            continue
        where = _describe(inner) if isinstance(inner, Mapping) else "item"
        verdict = _judge(engine, item, name, today, query)
        deny.extend(Violation(v.rule, f"{where}: {v.message}") for v in verdict.deny)
        warn.extend(Violation(v.rule, f"{where}: {v.message}") for v in verdict.warn)
    if mesh_items:
        verdict = _judge(engine, {"kind": "List", "items": mesh_items}, "mesh", today, query)
        deny.extend(verdict.deny)
        warn.extend(verdict.warn)

    def ordered(vs: list[Violation]) -> list[Violation]:
        return sorted(vs, key=lambda v: (v.rule, v.message))

    return Verdict(ordered(deny), ordered(warn))


def evaluate(
    engine: Engine, obj: Any, policy: str | None = None, today: str | None = None
) -> list[Violation]:
    """Every violation of one input, no constraints applied (a List: each item by its
    kind, plus the mesh over all; an AdmissionReview DELETE or CONNECT: none)."""
    return _judge(engine, obj, policy, today, query_deny).deny


def evaluate_list(
    engine: Engine, items: Iterable[Any], today: str | None = None
) -> list[Violation]:
    return _judge_list(engine, items, today, query_deny).deny


def judge(engine: Engine, obj: Any, policy: str | None = None, today: str | None = None) -> Verdict:
    """The verdict on one input with the constraints of the engine's data applied."""
    return _judge(engine, obj, policy, today, query_verdict)


def decision(violations: Iterable[Violation], warnings: Iterable[Violation] = ()) -> dict[str, Any]:
    """``allowed``/``violations``, and ``warnings`` when there are any (warn-mode rules)."""
    vs, ws = list(violations), list(warnings)
    out: dict[str, Any] = {"allowed": not vs, "violations": [v.as_dict() for v in vs]}
    if ws:
        out["warnings"] = [w.as_dict() for w in ws]
    return out
