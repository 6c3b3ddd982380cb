"""``gotthard audit cluster``: the admission and mesh policies over live cluster objects.

Lists Pods (all namespaces), Namespaces, StorageClasses and Istio PeerAuthentications
(``security.istio.io/v1``, else ``v1beta1``; a missing CRD is reported as not installed)
with the official ``kubernetes`` client, then evaluates them with the shipped policies:

* each Pod with ``pod``; the labels of the live Namespace objects replace
  ``data.gotthard.inventory.namespaces[ns].labels`` (hostNetwork rule), the rest of the
  inventory (GPU quotas, ``gpus_used``) comes from the shipped data and ``--data``;
* each StorageClass with ``storageclass``;
* ``mesh`` per Namespace (the Namespace and the PeerAuthentications in it: MESH-MTLS-001)
  and per PeerAuthentication (alone: MESH-MTLS-002), so each violation names its object.

Exit codes: 0 clean, 1 violations, 2 kubeconfig/API/connection or policy-engine errors.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gotthard import kube
from gotthard.config import Config, ConfigError
from gotthard.policies import constraints, kube_bench, metrics
from gotthard.policies import engine as eng
from gotthard.site import KubeAccess

EXIT_CLEAN, EXIT_VIOLATIONS, EXIT_ERROR = 0, 1, 2
#: The rule a pod that cannot be read is reported under (the pod policy's input rule).
INPUT_RULE = "POD-INPUT-001"

ISTIO_GROUP = "security.istio.io"
ISTIO_VERSIONS = ("v1", "v1beta1")
REQUEST_TIMEOUT = (10.0, 60.0)  # connect, read (seconds)
PAGE_SIZE = 500


class ClusterError(Exception):
    """Bad kubeconfig, unreachable API or a failed API call (exit code 2)."""


@dataclass
class ClusterObjects:
    pods: list[dict[str, Any]] = field(default_factory=list)
    namespaces: list[dict[str, Any]] = field(default_factory=list)
    storage_classes: list[dict[str, Any]] = field(default_factory=list)
    peer_authentications: list[dict[str, Any]] = field(default_factory=list)
    #: ``security.istio.io/<version>`` served, or None when the CRD is not installed.
    peer_authentication_api: str | None = None


@dataclass(frozen=True)
class ObjectResult:
    kind: str
    namespace: str | None
    name: str
    violations: tuple[eng.Violation, ...]
    #: Violations of rules in warn mode: reported, not failing.
    warnings: tuple[eng.Violation, ...] = ()
    #: Why the object could not be evaluated (a malformed object), else None.
    error: str | None = None

    @property
    def failing(self) -> bool:
        return bool(self.violations) or self.error is not None

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @property
    def rules(self) -> list[str]:
        return sorted({v.rule for v in self.violations})

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "ref": self.ref,
            "rules": self.rules,
            "violations": [v.as_dict() for v in self.violations],
        }
        if self.warnings:
            out["warnings"] = [v.as_dict() for v in self.warnings]
        if self.error is not None:
            out["error"] = self.error
        return out


# --- the API -------------------------------------------------------------------------


def api_client(args: argparse.Namespace, cfg: Config) -> Any:
    """The client of the audited cluster: ``--kubeconfig``/``--context`` when given, else
    the site model's access of ``--site``/``--cluster`` (default: this installation's)."""
    if args.kubeconfig or args.context:
        access = KubeAccess(kubeconfig=args.kubeconfig or "", context=args.context or "")
        return kube.client_for(access, "--kubeconfig/--context")
    site = args.site or cfg.site
    conf = cfg.site_config(site)
    cluster = args.cluster
    if cluster is None and site == cfg.site:
        own = conf.clusters.get(cfg.cluster)
        cluster = cfg.cluster if own is not None and own.kubernetes is not None else None
    if cluster is not None and cluster not in conf.clusters:
        known = ", ".join(conf.clusters) or "none"
        raise ClusterError(f"site {site}: no cluster {cluster!r} (configured: {known})")
    return kube.site_client(site, conf, cluster)


def _call(api: Any, what: str, fn: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """One API call returning the raw JSON body; errors become ClusterError."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    host = api.configuration.host
    try:
        response = fn(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs)
        body = eng.as_json_value(json.loads(response.data), f"{what} from {host}")
    except eng.PolicyError as err:
        raise ClusterError(str(err)) from err
    except RecursionError as err:
        raise ClusterError(f"{what}: the API at {host} answered JSON nested too deep") from err
    except ApiException:
        raise  # callers decide (404 = CRD not installed)
    except HTTPError as err:
        reason = getattr(err, "reason", None) or err
        raise ClusterError(f"cannot reach the Kubernetes API at {host}: {reason}") from err
    except OSError as err:
        raise ClusterError(f"cannot reach the Kubernetes API at {host}: {err}") from err
    except ValueError as err:
        raise ClusterError(f"{what}: the API at {host} answered no JSON: {err}") from err
    if not isinstance(body, Mapping) or not isinstance(body.get("items", []), list):
        raise ClusterError(f"{what}: the API at {host} answered no list")
    return dict(body)


def _list(api: Any, what: str, kind: str, api_version: str, fn: Any, *args: Any) -> list[Any]:
    """All items of a LIST (paged), each with ``kind``/``apiVersion`` set (LISTs omit them)."""
    from kubernetes.client.exceptions import ApiException

    items: list[dict[str, Any]] = []
    token: str | None = None
    tokens: set[str] = set()
    while True:
        kwargs: dict[str, Any] = {"limit": PAGE_SIZE}
        if token:
            kwargs["_continue"] = token
        try:
            body = _call(api, what, fn, *args, **kwargs)
        except ApiException as err:
            if err.status == 404 and kind == "PeerAuthentication":
                raise
            reason = f"HTTP {err.status} {err.reason}".strip()
            raise ClusterError(
                f"listing {what} at {api.configuration.host} failed: {reason}"
                + (" (RBAC: the audit needs get/list on it)" if err.status in (401, 403) else "")
            ) from err
        for item in body.get("items") or []:
            # a malformed item is kept: the evaluation reports it and checks the rest
            fields = item if isinstance(item, Mapping) else {"gotthard.malformed": item}
            items.append({**fields, "kind": kind, "apiVersion": api_version})
        token = eng.mapping_at(body, "metadata", f"{what} list").get("continue")
        if not token:
            return items
        if not isinstance(token, str) or token in tokens:
            raise ClusterError(f"{what}: the API answered a bad or repeated continue token")
        tokens.add(token)


def fetch(api: Any) -> ClusterObjects:
    """Pods, Namespaces, StorageClasses and PeerAuthentications of the cluster."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core, storage = client.CoreV1Api(api), client.StorageV1Api(api)
    custom = client.CustomObjectsApi(api)
    out = ClusterObjects(
        pods=_list(api, "pods", "Pod", "v1", core.list_pod_for_all_namespaces),
        namespaces=_list(api, "namespaces", "Namespace", "v1", core.list_namespace),
        storage_classes=_list(
            api,
            "storageclasses",
            "StorageClass",
            "storage.k8s.io/v1",
            storage.list_storage_class,
        ),
    )
    for version in ISTIO_VERSIONS:
        api_version = f"{ISTIO_GROUP}/{version}"
        try:
            out.peer_authentications = _list(
                api,
                f"peerauthentications.{ISTIO_GROUP}/{version}",
                "PeerAuthentication",
                api_version,
                custom.list_cluster_custom_object,
                ISTIO_GROUP,
                version,
                "peerauthentications",
            )
        except ApiException:  # 404: this version (or the CRD) is not served
            continue
        out.peer_authentication_api = api_version
        break
    return out


# --- evaluation ----------------------------------------------------------------------


def _meta(obj: Mapping[str, Any]) -> tuple[str | None, str]:
    """(namespace, name) of an object; a malformed metadata reads as unnamed."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    namespace = meta.get("namespace")
    return (str(namespace)[:253] if namespace else None), str(meta.get("name", "<unnamed>"))[:253]


def _malformed(obj: Mapping[str, Any]) -> str | None:
    """Why *obj* cannot be evaluated at all, else None."""
    if "gotthard.malformed" in obj:
        return f"the API answered a {obj.get('kind')} that is not an object"
    meta = obj.get("metadata")
    if meta is not None and not isinstance(meta, Mapping):
        return f"'metadata' must be an object, got {type(meta).__name__}"
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    if labels is not None and not isinstance(labels, Mapping):
        return f"'metadata.labels' must be an object, got {type(labels).__name__}"
    return None


def audit_data(objects: ClusterObjects, data: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """*data* (default: the shipped data); live Namespace labels replace the inventory's
    labels (a Namespace whose labels are malformed is left as the inventory says)."""
    # no kube-bench report here: a 'scored' baseline resolves to nothing
    data = kube_bench.resolve_baseline(dict(data or eng.build_data()), [])
    inventory = data.get("inventory")
    if not isinstance(inventory, dict):
        inventory = data["inventory"] = {}
    namespaces = inventory.get("namespaces")
    if not isinstance(namespaces, dict):
        namespaces = inventory["namespaces"] = {}
    for ns in objects.namespaces:
        if _malformed(ns):
            continue
        _, name = _meta(ns)
        entry = namespaces.get(name)
        entry = dict(entry) if isinstance(entry, Mapping) else {}
        entry["labels"] = dict(eng.mapping_at(ns.get("metadata") or {}, "labels", name))
        namespaces[name] = entry
    return data


def evaluate(engine: eng.Engine, objects: ClusterObjects) -> list[ObjectResult]:
    """Every object with its violations (clean objects included, empty tuple)."""
    results: list[ObjectResult] = []

    def add(
        doc: Mapping[str, Any],
        policy: str,
        of: Mapping[str, Any],
        keep: str | None = None,
    ) -> None:
        namespace, name = _meta(of)
        kind = str(of.get("kind"))
        error = _malformed(of)
        verdict = eng.Verdict([], [])
        if error is None:
            try:
                verdict = eng.judge(engine, doc, policy=policy)
            except eng.PolicyError as err:  # this object only; the others are still checked
                error = str(err)
        if error is not None:
            # a pod that cannot be read is denied as the pod policy denies it
            found = [eng.Violation(INPUT_RULE, error)] if policy == "pod" else []
            results.append(ObjectResult(kind, namespace, name, tuple(found), error=error))
            return
        deny, warn = verdict.deny, verdict.warn
        if keep:
            deny, warn = ([v for v in vs if v.rule == keep] for vs in (deny, warn))
        results.append(ObjectResult(kind, namespace, name, tuple(deny), tuple(warn)))

    for pod in objects.pods:
        add(pod, "pod", pod)
    for sc in objects.storage_classes:
        add(sc, "storageclass", sc)
    by_namespace: dict[str, list[dict[str, Any]]] = {}
    for pa in objects.peer_authentications:
        if not _malformed(pa):
            by_namespace.setdefault(_meta(pa)[0] or "default", []).append(pa)
    for ns in objects.namespaces:
        name = _meta(ns)[1]
        items = [ns, *by_namespace.get(name, [])]
        add({"kind": "List", "items": items}, "mesh", ns, keep="MESH-MTLS-001")
    for pa in objects.peer_authentications:
        add(pa, "mesh", pa, keep="MESH-MTLS-002")
    return results


def violation_counts(results: Iterable[ObjectResult]) -> dict[tuple[str, str], int]:
    """(policy, rule) -> violations (warn-mode ones included), every known rule present
    (zeros included)."""
    return metrics.violation_counts(v for r in results for v in (*r.violations, *r.warnings))


def report(objects: ClusterObjects, results: list[ObjectResult]) -> dict[str, Any]:
    """The ``--format json`` document."""
    failing = [r for r in results if r.failing]
    by_rule = Counter(v.rule for r in failing for v in r.violations)
    warned = [r for r in results if r.warnings and not r.failing]
    extra: dict[str, Any] = {}
    if any(r.warnings for r in results):
        extra["warnings_by_rule"] = dict(
            sorted(Counter(v.rule for r in results for v in r.warnings).items())
        )
    if any(r.error is not None for r in results):
        extra["malformed"] = sum(r.error is not None for r in results)
    return {
        "compliant": not failing,
        "scanned": {
            "Pod": len(objects.pods),
            "Namespace": len(objects.namespaces),
            "StorageClass": len(objects.storage_classes),
            "PeerAuthentication": len(objects.peer_authentications),
        },
        "peer_authentication": {
            "installed": objects.peer_authentication_api is not None,
            "api_version": objects.peer_authentication_api,
        },
        "objects": [
            r.as_dict()
            for r in sorted(failing + warned, key=lambda r: (r.kind, r.namespace or "", r.name))
        ],
        "violations_by_rule": dict(sorted(by_rule.items())),
        **extra,
    }


def format_text(doc: Mapping[str, Any]) -> str:
    scanned = doc["scanned"]
    pa = doc["peer_authentication"]
    pa_text = (
        f"{scanned['PeerAuthentication']} peerauthentications ({pa['api_version']})"
        if pa["installed"]
        else "peerauthentications: not installed (security.istio.io CRD absent)"
    )
    header = (
        f"cluster audit: {scanned['Pod']} pods, {scanned['Namespace']} namespaces, "
        f"{scanned['StorageClass']} storageclasses, {pa_text}"
    )
    lines = [header]
    width = max((len(o["kind"]) for o in doc["objects"]), default=0)
    failing = 0
    for obj in doc["objects"]:
        text = ", ".join(obj["rules"])
        if "error" in obj:
            text = f"{text} (input error: {obj['error']})".lstrip()
        if obj.get("warnings"):
            warned = ", ".join(sorted({w["rule"] for w in obj["warnings"]}))
            text = f"{text} (warn: {warned})".lstrip()
        failing += bool(obj["rules"] or "error" in obj)
        lines.append(f"  {obj['kind']:<{width}}  {obj['ref']}: {text}")
    total = sum(doc["violations_by_rule"].values())
    if doc["compliant"]:
        lines.append("compliant: no violations")
    else:
        lines.append(f"NOT compliant: {failing} objects, {total} violations")
    return "\n".join(lines)


# --- command -------------------------------------------------------------------------


#: The key of the ConfigMap ``--textfile-configmap`` writes (a ``*.prom`` file name, as
#: the textfile collector serving the mounted ConfigMap reads it).
CONFIGMAP_KEY = "audit-cluster.prom"


def parse_configmap_ref(value: str) -> tuple[str, str]:
    """``NAMESPACE/NAME`` -> (namespace, name); ValueError naming the flag otherwise."""
    namespace, _, name = value.partition("/")
    label = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    if not (label.match(namespace) and label.match(name)):
        raise ValueError(f"--textfile-configmap {value!r}: want NAMESPACE/NAME (DNS labels)")
    return namespace, name


def write_configmap(api: Any, ref: tuple[str, str], text: str) -> None:
    """Put *text* under :data:`CONFIGMAP_KEY` of the existing ConfigMap *ref* (a merge
    patch: the other keys stay); :class:`ClusterError` naming it when the API refuses."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    namespace, name = ref
    core = client.CoreV1Api(api)
    try:
        core.patch_namespaced_config_map(
            name, namespace, {"data": {CONFIGMAP_KEY: text}}, _request_timeout=REQUEST_TIMEOUT
        )
    except ApiException as err:
        raise ClusterError(
            f"--textfile-configmap {namespace}/{name}: HTTP {err.status} {err.reason}"
        ) from None
    except (HTTPError, OSError) as err:
        raise ClusterError(f"--textfile-configmap {namespace}/{name}: {err}") from None


def _err(msg: str) -> int:
    print(f"gotthard audit cluster: {msg}", file=sys.stderr)
    return EXIT_ERROR


def cmd_cluster(args: argparse.Namespace, cfg: Config) -> int:
    target = getattr(args, "textfile_configmap", None)
    try:
        ref = parse_configmap_ref(target) if target else None
        data = constraints.constrained_data(cfg.policies, args.data).data
        api = api_client(args, cfg)
        try:
            objects = fetch(api)
            engine = eng.make_engine(args.engine, audit_data(objects, data), opa_url=args.opa_url)
            results = evaluate(engine, objects)
            families = metrics.violations_families(violation_counts(results))
            if ref is not None:
                write_configmap(api, ref, metrics.textfile_text(CONFIGMAP_KEY, families))
        finally:
            api.close()
    except (ClusterError, kube.KubeError, ConfigError, eng.PolicyError, ValueError) as err:
        return _err(str(err))
    doc = report(objects, results)
    print(json.dumps(doc, indent=2) if args.format == "json" else format_text(doc))
    if args.textfile:
        try:
            metrics.write_textfile(args.textfile, families)
        except eng.PolicyError as err:
            return _err(str(err))
    if getattr(args, "report_only", False):
        # a CronJob: the findings are metrics (and the output), not a failed Job
        return EXIT_CLEAN
    return EXIT_CLEAN if doc["compliant"] else EXIT_VIOLATIONS
