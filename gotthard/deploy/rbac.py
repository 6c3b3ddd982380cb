"""Least-privilege RBAC: what each role may ask the Kubernetes API, and why.

:func:`grants` lists every permission as a :class:`Grant` (role, namespace or cluster
scope, API group, resources, verbs, reason); :func:`documents` renders them as one
ServiceAccount per role with Roles, ClusterRoles and their bindings. No grant uses ``*``.

:func:`allowed_by` evaluates rendered objects the way the API server's RBAC authorizer
does (a RoleBinding grants in its own namespace, a ClusterRoleBinding everywhere), so a
test can prove the RBAC sufficient (every call the code makes is allowed) and minimal
(every rule is used). ``resourceNames`` are not rendered: the calls that create an
object cannot be restricted by name, and the rest name objects the site configures.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gotthard.config import Config
from gotthard.deploy.roles import (
    API_CLIENTS,
    AUDIT,
    AUDIT_METRICS,
    AUDIT_METRICS_CONFIGMAP,
    DR,
    NODE_EXPORTER,
    ROLES,
    RUNBOOKS,
    SLURM_EXPORTER,
    Role,
)
from gotthard.deploy.settings import KubernetesDeploy
from gotthard.dr.settings import LABEL_SCRATCH

#: The RBAC API version of every object written here.
RBAC_API = "rbac.authorization.k8s.io/v1"
#: ValidatingAdmissionPolicy: GA (v1) since Kubernetes 1.30.
ADMISSION_API = "admissionregistration.k8s.io/v1"
#: The policy (and its binding) that narrows the DR role's namespace grant.
SCRATCH_POLICY = "gotthard-dr-scratch-namespaces"


@dataclass(frozen=True)
class Grant:
    """Verbs on resources of one API group, for one role, in one namespace ("": all)."""

    role: Role
    namespace: str
    group: str
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    why: str
    #: Only these objects (``resourceNames``); empty: every object of the resources.
    names: tuple[str, ...] = ()


def _group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def velero_namespace(cfg: Config) -> str:
    """Velero's namespace on this installation's Kubernetes cluster (site model)."""
    return cfg.site_config().velero_namespace


def _dr_grants(cfg: Config) -> list[Grant]:
    dr = cfg.dr
    velero_ns = velero_namespace(cfg)
    grants = [
        Grant(
            DR,
            dr.lease.namespace,
            "coordination.k8s.io",
            ("leases",),
            ("get", "create", "update"),
            "leader election between the two replicas (gotthard.dr.lease)",
        ),
        Grant(
            DR,
            velero_ns,
            "velero.io",
            ("backups",),
            ("get", "list", "create"),
            "scheduled backups: create, follow their phase, find the latest Completed one",
        ),
        Grant(
            DR,
            velero_ns,
            "velero.io",
            ("restores",),
            ("get", "create"),
            "restore drills: create a Restore, then follow its phase",
        ),
        Grant(
            DR,
            velero_ns,
            "velero.io",
            ("schedules",),
            ("list", "create", "patch", "delete"),
            "Velero Schedules kept in step with the backup schedules (stale ones deleted)",
        ),
        Grant(
            DR,
            velero_ns,
            "velero.io",
            ("backupstoragelocations",),
            ("list",),
            "`gotthard dr status` and the storage-location metrics",
        ),
        Grant(
            DR,
            "",
            "",
            ("namespaces",),
            ("list", "create", "delete"),
            "restore drills restore into a scratch namespace, then delete it (only labelled"
            f" ones: ValidatingAdmissionPolicy {SCRATCH_POLICY})",
        ),
    ]
    checks: dict[str, set[str]] = {}
    for drill in dr.drills or []:
        for check in drill.checks:
            checks.setdefault(_group_of(check.api_version), set()).add(check.plural)
    if not checks:
        checks = {"apps": {"deployments"}}  # the default check of a drill
    for group, plurals in sorted(checks.items()):
        grants.append(
            Grant(
                DR,
                "",
                group,
                tuple(sorted(plurals)),
                ("list",),
                "a drill checks the restored objects in its scratch namespace (named per run)",
            )
        )
    for namespace in sorted({svc.namespace for svc in dr.placement.services}):
        grants.append(
            Grant(
                DR,
                namespace,
                "policy.karmada.io",
                ("propagationpolicies",),
                ("get", "create", "update"),
                "placement: the PropagationPolicy of each placed service (Karmada API)",
            )
        )
    return grants


def grants(cfg: Config) -> list[Grant]:
    """Every permission of every role, from the site model and the areas' settings."""
    velero_ns = velero_namespace(cfg)
    return [
        *_dr_grants(cfg),
        Grant(
            RUNBOOKS,
            "",
            "",
            ("nodes",),
            ("get", "patch"),
            "k8s.cordon_node / k8s.uncordon_node runbook steps",
        ),
        Grant(
            RUNBOOKS,
            velero_ns,
            "velero.io",
            ("backups",),
            ("create",),
            "the dr.backup runbook step requests an ad-hoc Velero Backup",
        ),
        Grant(
            AUDIT,
            "",
            "",
            ("pods", "namespaces"),
            ("list",),
            "`gotthard audit cluster` evaluates every pod with its namespace's labels",
        ),
        Grant(
            AUDIT,
            "",
            "storage.k8s.io",
            ("storageclasses",),
            ("list",),
            "StorageClass policy (Lustre parameters, reclaim policy)",
        ),
        Grant(
            AUDIT,
            "",
            "security.istio.io",
            ("peerauthentications",),
            ("list",),
            "mesh policy (mTLS mode of PeerAuthentications)",
        ),
        Grant(
            AUDIT,
            cfg.deploy.kubernetes.namespace,
            "",
            ("configmaps",),
            ("patch",),
            "the audit CronJob leaves its metrics in this one ConfigMap, served by"
            f" {AUDIT_METRICS.full_name}",
            (AUDIT_METRICS_CONFIGMAP,),
        ),
    ]


# --- rendering -------------------------------------------------------------------------------


def _labels(role: Role, extra: Mapping[str, str]) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "gotthard",
        "app.kubernetes.io/component": role.name,
        "app.kubernetes.io/part-of": "gotthard",
        "app.kubernetes.io/managed-by": "gotthard",
        **extra,
    }


def service_account(role: Role, namespace: str, labels: Mapping[str, str]) -> dict[str, Any]:
    """The role's ServiceAccount; only roles that call the API get a token mounted."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": role.full_name,
            "namespace": namespace,
            "labels": _labels(role, labels),
        },
        "automountServiceAccountToken": role in API_CLIENTS,
    }


def _rules(items: Iterable[Grant]) -> list[dict[str, Any]]:
    out = []
    for g in items:
        rule: dict[str, Any] = {"apiGroups": [g.group], "resources": list(g.resources)}
        if g.names:
            rule["resourceNames"] = list(g.names)
        out.append({**rule, "verbs": list(g.verbs)})
    return out


def documents(
    cfg: Config, settings: KubernetesDeploy, labels: Mapping[str, str]
) -> dict[str, list[dict[str, Any]]]:
    """Role name -> its ServiceAccount, Roles, ClusterRoles and bindings."""
    namespace_of = {role.name: settings.namespace for role in ROLES}
    namespace_of[NODE_EXPORTER.name] = settings.node_namespace
    if settings.slurm_auth == "munge":
        # the pods with the host's munge socket run in the privileged namespace
        namespace_of[SLURM_EXPORTER.name] = namespace_of[RUNBOOKS.name] = settings.node_namespace
    all_grants = grants(cfg)
    out: dict[str, list[dict[str, Any]]] = {}
    for role in ROLES:
        sa_ns = namespace_of[role.name]
        docs = [service_account(role, sa_ns, labels)]
        mine = [g for g in all_grants if g.role == role]
        subject = [{"kind": "ServiceAccount", "name": role.full_name, "namespace": sa_ns}]
        by_scope: dict[str, list[Grant]] = {}
        for g in mine:
            by_scope.setdefault(g.namespace, []).append(g)
        for scope, items in sorted(by_scope.items()):
            kind = "Role" if scope else "ClusterRole"
            meta: dict[str, Any] = {"name": role.full_name, "labels": _labels(role, labels)}
            if scope:
                meta["namespace"] = scope
            meta["annotations"] = {
                "gotthard.io/why": "; ".join(dict.fromkeys(g.why for g in items))
            }
            docs.append(
                {"apiVersion": RBAC_API, "kind": kind, "metadata": meta, "rules": _rules(items)}
            )
            binding_meta = {k: v for k, v in meta.items() if k != "annotations"}
            docs.append(
                {
                    "apiVersion": RBAC_API,
                    "kind": f"{kind}Binding",
                    "metadata": binding_meta,
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": kind,
                        "name": role.full_name,
                    },
                    "subjects": subject,
                }
            )
        out[role.name] = docs
    out[DR.name] += scratch_namespace_policy(namespace_of[DR.name], labels)
    return out


def scratch_namespace_policy(namespace: str, labels: Mapping[str, str]) -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy and its binding: RBAC cannot select namespaces by label,
    so the DR ServiceAccount's ``create`` and ``delete`` on namespaces (restore drills) are
    denied for every namespace that lacks the scratch label :data:`LABEL_SCRATCH` (DR has
    no ``update``/``patch`` on namespaces, so it cannot label one either)."""
    account = f"system:serviceaccount:{namespace}:{DR.full_name}"
    meta = {"name": SCRATCH_POLICY, "labels": _labels(DR, labels)}
    # DELETE admits the namespace as oldObject, CREATE as object
    target = "(request.operation == 'DELETE' ? oldObject : object)"
    scratch = (
        f"has({target}.metadata.labels) && '{LABEL_SCRATCH}' in {target}.metadata.labels"
        f" && {target}.metadata.labels['{LABEL_SCRATCH}'] == 'true'"
    )
    policy = {
        "apiVersion": ADMISSION_API,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {
            **meta,
            "annotations": {
                "gotthard.io/why": "the DR role creates and deletes only its drills' scratch"
                f" namespaces (label {LABEL_SCRATCH}=true)"
            },
        },
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "DELETE"],
                        "resources": ["namespaces"],
                    }
                ]
            },
            "matchConditions": [
                {
                    "name": "dr-service-account",
                    "expression": f"request.userInfo.username == '{account}'",
                }
            ],
            "validations": [
                {
                    "expression": scratch,
                    "messageExpression": f"'{DR.full_name} may only create and delete namespaces"
                    f" labelled {LABEL_SCRATCH}=true, not ' + request.name",
                    "reason": "Forbidden",
                }
            ],
        },
    }
    binding = {
        "apiVersion": ADMISSION_API,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": meta,
        "spec": {"policyName": SCRATCH_POLICY, "validationActions": ["Deny"]},
    }
    return [policy, binding]


# --- evaluation ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RuleRef:
    """One rule of one rendered Role or ClusterRole."""

    kind: str
    namespace: str
    name: str
    index: int


def _matches(rule: Mapping[str, Any], verb: str, group: str, resource: str) -> bool:
    return (
        group in rule.get("apiGroups", ())
        and resource in rule.get("resources", ())
        and verb in rule.get("verbs", ())
    )


def all_rules(objects: Sequence[Mapping[str, Any]]) -> list[RuleRef]:
    """Every rule of every Role and ClusterRole in *objects*."""
    return [
        RuleRef(obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"], i)
        for obj in objects
        if obj.get("kind") in ("Role", "ClusterRole")
        for i in range(len(obj.get("rules", [])))
    ]


def allowed_by(
    objects: Sequence[Mapping[str, Any]],
    account: tuple[str, str],
    verb: str,
    group: str,
    resource: str,
    namespace: str,
) -> list[RuleRef]:
    """The rules that let ServiceAccount *account* (namespace, name) make the call; empty:
    the API server would answer 403. *namespace* "" is a cluster-scoped or all-namespaces
    call, which only a ClusterRoleBinding can allow."""
    roles = {
        (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]): obj
        for obj in objects
        if obj.get("kind") in ("Role", "ClusterRole")
    }
    found: list[RuleRef] = []
    for binding in objects:
        kind = binding.get("kind")
        if kind not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        bound_ns = binding["metadata"].get("namespace", "")
        if kind == "RoleBinding" and bound_ns != namespace:
            continue
        subjects = binding.get("subjects", [])
        if not any(
            s.get("kind") == "ServiceAccount" and (s.get("namespace"), s.get("name")) == account
            for s in subjects
        ):
            continue
        ref = binding["roleRef"]
        role_ns = bound_ns if ref["kind"] == "Role" else ""
        role = roles.get((ref["kind"], role_ns, ref["name"]))
        for i, rule in enumerate((role or {}).get("rules", [])):
            if _matches(rule, verb, group, resource):
                found.append(RuleRef(ref["kind"], role_ns, ref["name"], i))
    return found
