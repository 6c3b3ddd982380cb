"""``gotthard deploy render --target kubernetes``: the manifests of every role.

Two namespaces: the node exporter DaemonSet reads the host (hostPath ``/proc``, ``/sys``,
the kubelet's pod-resources socket, optionally hostPID), which only the Pod Security
Standards' *privileged* level admits, so it has a namespace of its own; every other
role only talks to APIs and runs in a namespace that enforces *restricted*. Each
container runs as a non-root user, drops every capability, cannot escalate, uses the
runtime's seccomp profile and a read-only root file system (writable paths are
emptyDirs).

Every object carries the ``gotthard.io/site`` and ``gotthard.io/cluster`` labels of the
site model, and the ServiceMonitors/PodMonitor add ``site`` and ``cluster`` to every
scraped series.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from gotthard import __version__
from gotthard.config import Config
from gotthard.deploy import alerting, credentials, podaccess, rbac
from gotthard.deploy.manifest import RenderError, dump, dump_all
from gotthard.deploy.objects import CONFIG_DIR, MUNGE_DIR, SLURM_CONF_DIR, labels, selector
from gotthard.deploy.objects import host_path as _host_path
from gotthard.deploy.objects import meta as _meta
from gotthard.deploy.objects import mount as _mount
from gotthard.deploy.roles import (
    AUDIT,
    AUDIT_METRICS,
    AUDIT_METRICS_CONFIGMAP,
    DR,
    KUBERNETES_ROLES,
    NODE_EXPORTER,
    RUNBOOKS,
    SLURM_EXPORTER,
    Role,
    command,
)
from gotthard.deploy.settings import KubernetesDeploy, Toleration

#: The ConfigMap holding the site file (mounted at :data:`CONFIG_DIR`), and its key.
CONFIG_MAP = "gotthard-site"
SITE_FILE = "site.toml"
#: The Secrets to create before applying, and their keys (not a manifest).
CREDENTIALS_FILE = "credentials.txt"
#: Pod template annotation: the SHA-256 of the site file the pods read.
SITE_FILE_ANNOTATION = "gotthard.io/site-file-sha256"
TOKEN_DIR = "/var/run/secrets/gotthard"
#: Where Kubernetes mounts a pod's service account token.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
POD_RESOURCES_DIR = "/var/lib/kubelet/pod-resources"
#: Where the webhook finds each Slurm cluster's JWT (the site file's ``slurm_jwt_file``).
SLURM_JWT_DIR = credentials.SLURM_JWT_DIR
#: Tag suffix of the image variant with slurm-client (scontrol, sinfo, squeue, sdiag).
SLURM_IMAGE_SUFFIX = "-slurm"

HOST_PID_WHY = (
    "hostPID: NVML lists the processes on a GPU by their PID in the host's PID namespace;\n"
    "the exporter maps each PID to its Slurm job through /proc/<pid>/cgroup, which only\n"
    "works when it sees the host's processes. [deploy.kubernetes] host_pid = false turns\n"
    "it off: GPUs are then attributed to pods only (kubelet pod-resources socket)."
)
TOKEN_FILE_WHY = (
    "Secret files are owned by root: the non-root user reads the token through fsGroup\n"
    "(mode 0440), which the webhook refuses unless --insecure-token-file is given."
)


def image(settings: KubernetesDeploy) -> str:
    """``REGISTRY/gotthard:TAG``, pinned ``@sha256:...`` where ``image_digest`` is set."""
    name = f"{settings.image_registry}/gotthard:{settings.image_tag or __version__}"
    return f"{name}@{settings.image_digest}" if settings.image_digest else name


def slurm_image(settings: KubernetesDeploy) -> str:
    """The image variant with Slurm's client commands (``make image`` builds both). Its
    digest is not the main image's: with ``image_digest`` set, ``slurm_image`` must be set
    too (a tag appended to a digest is no image reference; falling back to the tag would
    leave the webhook unpinned)."""
    if settings.slurm_image:
        return settings.slurm_image
    if settings.image_digest:
        name = f"{settings.image_registry}/gotthard:{settings.image_tag or __version__}"
        raise RenderError(
            "deploy.kubernetes.slurm_image: empty, but image_digest pins the image by"
            f" digest; set it to the {SLURM_IMAGE_SUFFIX} variant by digest, as `make image`"
            f" prints it: {name}{SLURM_IMAGE_SUFFIX}@sha256:..."
        )
    return f"{image(settings)}{SLURM_IMAGE_SUFFIX}"


def pod_security(settings: KubernetesDeploy) -> dict[str, Any]:
    """Pod securityContext of the restricted profile."""
    uid = settings.run_as_user
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "fsGroup": uid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


CONTAINER_SECURITY: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
}


def container(
    role: Role,
    settings: KubernetesDeploy,
    args: list[str],
    *,
    mounts: Sequence[dict[str, Any]] = (),
    env: Sequence[dict[str, Any]] = (),
    image_ref: str = "",
) -> dict[str, Any]:
    """The role's one container: ``gotthard ARGS`` with the site file and /tmp mounted,
    its requests and limits from ``[deploy.kubernetes] resources`` (*image_ref*: another
    image than the default, e.g. :func:`slurm_image`)."""
    given = settings.resources[role.name]
    out: dict[str, Any] = {
        "name": role.name,
        "image": image_ref or image(settings),
        "imagePullPolicy": settings.image_pull_policy,
        "command": ["gotthard"],
        "args": args,
        "env": [{"name": "GOTTHARD_CONFIG", "value": f"{CONFIG_DIR}/{SITE_FILE}"}, *env],
        "securityContext": CONTAINER_SECURITY,
        "resources": {
            "requests": {"cpu": given.cpu_request, "memory": given.memory_request},
            "limits": {"cpu": given.cpu_limit, "memory": given.memory_limit},
        },
        # the site file and the credential files it names: :func:`pod_spec`
        "volumeMounts": [_mount("tmp", "/tmp", False), *mounts],
    }
    if role.port:
        out["ports"] = [{"name": "metrics", "containerPort": role.port, "protocol": "TCP"}]
        probe = {"httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": 20}
        out["livenessProbe"] = {**probe, "initialDelaySeconds": 10}
        out["readinessProbe"] = probe
    return out


def pod_spec(
    cfg: Config,
    role: Role,
    settings: KubernetesDeploy,
    main: dict[str, Any],
    volumes: Sequence[dict[str, Any]] = (),
    **extra: Any,
) -> dict[str, Any]:
    """The pod of *role*: *main* with the site file mounted at :data:`CONFIG_DIR` and
    every credential file the site file names at its path (:mod:`credentials`)."""
    taken = [m["mountPath"] for m in main["volumeMounts"]]
    if role.kube_api:
        taken.append(SERVICE_ACCOUNT_DIR)
    site_volumes, site_mounts = credentials.volumes(
        role,
        credentials.files(cfg, settings),
        CONFIG_DIR,
        {"configMap": {"name": CONFIG_MAP}},
        taken,
    )
    main["volumeMounts"] = [*site_mounts, *main["volumeMounts"]]
    return {
        "serviceAccountName": role.full_name,
        "automountServiceAccountToken": role.kube_api,
        **scheduling(role, settings),
        **extra,
        "securityContext": pod_security(settings),
        "containers": [main],
        "volumes": [
            *site_volumes,
            {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
            *volumes,
        ],
    }


def _tolerations(given: Sequence[Toleration]) -> list[dict[str, Any]]:
    return [{k: v for k, v in t.model_dump().items() if v} for t in given]


def scheduling(role: Role, settings: KubernetesDeploy) -> dict[str, Any]:
    """The site's priority class, runtime class, pull Secrets and (for the API-only
    roles) tolerations; the node DaemonSet has its own class settings and tolerations."""
    node = role == NODE_EXPORTER
    out: dict[str, Any] = {}
    priority = (node and settings.node_priority_class_name) or settings.priority_class_name
    runtime = settings.node_runtime_class_name if node else settings.runtime_class_name
    if priority:
        out["priorityClassName"] = priority
    if runtime:
        out["runtimeClassName"] = runtime
    if settings.image_pull_secrets:
        out["imagePullSecrets"] = [{"name": name} for name in settings.image_pull_secrets]
    if not node and settings.api_tolerations:
        out["tolerations"] = _tolerations(settings.api_tolerations)
    return out


def pod_template(workload: dict[str, Any]) -> dict[str, Any]:
    """The pod template of a DaemonSet, Deployment or CronJob."""
    if workload["kind"] == "CronJob":
        return workload["spec"]["jobTemplate"]["spec"]["template"]
    return workload["spec"]["template"]


def _template(cfg: Config, role: Role, spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"labels": labels(cfg, role)}, "spec": spec}


def spread_over_nodes(match_labels: Mapping[str, str]) -> dict[str, Any]:
    """Pod affinity that prefers the replicas matching *match_labels* on different nodes."""
    term = {
        "labelSelector": {"matchLabels": dict(match_labels)},
        "topologyKey": "kubernetes.io/hostname",
    }
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": term}
            ]
        }
    }


def listen(role: Role) -> str:
    return f"0.0.0.0:{role.port}"


# --- workloads -------------------------------------------------------------------------------


def node_exporter(cfg: Config, settings: KubernetesDeploy) -> dict[str, Any]:
    """The GPU/node exporter DaemonSet (its hostPID is explained by :data:`HOST_PID_WHY`)."""
    args = [
        *command(NODE_EXPORTER, listen(NODE_EXPORTER), settings.node_collectors),
        "--path.procfs=/host/proc",
        "--path.sysfs=/host/sys",
    ]
    mounts = [
        _mount("proc", "/host/proc"),
        _mount("sys", "/host/sys"),
        _mount("pod-resources", POD_RESOURCES_DIR),
    ]
    main = container(
        NODE_EXPORTER,
        settings,
        args,
        mounts=mounts,
        # the NVIDIA container runtime exposes every GPU to a pod that asks for none
        env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
    )
    extra: dict[str, Any] = {}
    if settings.host_pid:
        extra["hostPID"] = True
    extra["nodeSelector"] = dict(settings.node_selector)
    extra["tolerations"] = _tolerations(settings.tolerations)
    spec = pod_spec(
        cfg,
        NODE_EXPORTER,
        settings,
        main,
        [
            _host_path("proc", "/proc"),
            _host_path("sys", "/sys"),
            _host_path("pod-resources", POD_RESOURCES_DIR),
        ],
        **extra,
    )
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(cfg, NODE_EXPORTER.full_name, settings.node_namespace, NODE_EXPORTER),
        "spec": {
            "selector": {"matchLabels": selector(NODE_EXPORTER)},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": _template(cfg, NODE_EXPORTER, spec),
        },
    }


def slurm_namespace(settings: KubernetesDeploy) -> str:
    """The munge socket is a hostPath: the pods that use it (Slurm exporter, webhook) need
    the privileged namespace."""
    return settings.node_namespace if settings.slurm_auth == "munge" else settings.namespace


def slurm_exporter(cfg: Config, settings: KubernetesDeploy) -> dict[str, Any]:
    args = command(SLURM_EXPORTER, listen(SLURM_EXPORTER))
    env: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    extra: dict[str, Any] = {}
    image_ref = ""
    if settings.slurm_auth == "munge":
        # squeue/sinfo/sdiag of the -slurm image authenticate through the node's munged,
        # on the nodes that run it with the cluster's key (not the GPU nodes)
        args.append("--slurm.backend=cli")
        mounts = [_mount("munge", MUNGE_DIR), _mount("slurm-conf", SLURM_CONF_DIR)]
        volumes = [_host_path("munge", MUNGE_DIR), _host_path("slurm-conf", SLURM_CONF_DIR)]
        extra["nodeSelector"] = dict(settings.slurm_node_selector)
        image_ref = slurm_image(settings)
    else:
        args.append("--slurm.backend=rest")
        secret = {"name": settings.slurm_token_secret, "key": "token"}
        env = [{"name": "SLURM_JWT", "valueFrom": {"secretKeyRef": secret}}]
    main = container(SLURM_EXPORTER, settings, args, mounts=mounts, env=env, image_ref=image_ref)
    spec = pod_spec(cfg, SLURM_EXPORTER, settings, main, volumes, **extra)
    return _deployment(cfg, SLURM_EXPORTER, slurm_namespace(settings), spec, 1)


def dr_daemon(cfg: Config, settings: KubernetesDeploy) -> dict[str, Any]:
    args = command(DR, listen(DR))
    # the job store and placement state (/var/lib/gotthard by default) live per pod: the
    # leader rebuilds its jobs from the site file; use a PostgreSQL jobstore_url to share
    main = container(DR, settings, args, mounts=[_mount("state", "/var/lib/gotthard", False)])
    spec = pod_spec(
        cfg,
        DR,
        settings,
        main,
        [{"name": "state", "emptyDir": {"sizeLimit": "256Mi"}}],
        affinity=spread_over_nodes(selector(DR)),
    )
    return _deployment(cfg, DR, settings.namespace, spec, 2)


def runbooks(cfg: Config, settings: KubernetesDeploy) -> dict[str, Any]:
    args = [
        *command(RUNBOOKS, listen(RUNBOOKS)),
        f"--token-file={TOKEN_DIR}/token",
        "--insecure-token-file",
        "--audit-log=/var/log/gotthard/runbooks-audit.jsonl",
    ]
    slurm_mounts, slurm_volumes = podaccess.webhook_slurm_access(cfg, settings)
    mounts = [
        _mount("token", TOKEN_DIR),
        _mount("audit", "/var/log/gotthard", False),
        *slurm_mounts,
    ]
    # scontrol and sinfo come with the -slurm image
    main = container(RUNBOOKS, settings, args, mounts=mounts, image_ref=slurm_image(settings))
    volumes = [
        {
            "name": "token",
            "secret": {"secretName": settings.runbooks_token_secret, "defaultMode": 0o440},
        },
        {"name": "audit", "emptyDir": {"sizeLimit": "256Mi"}},
        *slurm_volumes,
    ]
    extra: dict[str, Any] = {}
    if settings.slurm_auth == "munge":
        extra["nodeSelector"] = dict(settings.slurm_node_selector)
    spec = pod_spec(cfg, RUNBOOKS, settings, main, volumes, **extra)
    return _deployment(cfg, RUNBOOKS, slurm_namespace(settings), spec, 1)


#: Where the audit metrics exporter mounts the ConfigMap the audit CronJob writes.
AUDIT_METRICS_DIR = "/var/lib/gotthard/audit"


def audit(cfg: Config, settings: KubernetesDeploy) -> dict[str, Any]:
    """The ``audit cluster`` CronJob: its findings go to the ConfigMap that
    :func:`audit_metrics` serves, and a finding does not fail the Job (``--report-only``);
    an audit that cannot run still does (exit 2)."""
    args = [
        *command(AUDIT, ""),
        "--report-only",
        f"--textfile-configmap={settings.namespace}/{AUDIT_METRICS_CONFIGMAP}",
    ]
    main = container(AUDIT, settings, args)
    spec = pod_spec(cfg, AUDIT, settings, main, restartPolicy="Never")
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": _meta(cfg, AUDIT.full_name, settings.namespace, AUDIT),
        "spec": {
            "schedule": settings.audit_schedule,
            "concurrencyPolicy": "Forbid",
            "jobTemplate": {"spec": {"backoffLimit": 1, "template": _template(cfg, AUDIT, spec)}},
        },
    }


def audit_metrics_configmap(cfg: Config, settings: KubernetesDeploy) -> dict[str, Any]:
    """The ConfigMap the audit CronJob patches; rendered without data, so that applying
    the manifests again keeps the last audit's metrics."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(cfg, AUDIT_METRICS_CONFIGMAP, settings.namespace, AUDIT),
    }


def audit_metrics(cfg: Config, settings: KubernetesDeploy) -> dict[str, Any]:
    """A textfile exporter serving the audit's ConfigMap (``gotthard_policy_violations``,
    ``gotthard_audit_last_run_timestamp_seconds``); no API access, the audit's
    ServiceAccount without a token."""
    args = [
        *command(AUDIT_METRICS, listen(AUDIT_METRICS)),
        f"--textfile.directory={AUDIT_METRICS_DIR}",
    ]
    main = container(
        AUDIT_METRICS, settings, args, mounts=[_mount("audit-metrics", AUDIT_METRICS_DIR)]
    )
    volume = {"name": "audit-metrics", "configMap": {"name": AUDIT_METRICS_CONFIGMAP}}
    spec = pod_spec(cfg, AUDIT_METRICS, settings, main, [volume])
    spec["serviceAccountName"] = AUDIT.full_name
    return _deployment(cfg, AUDIT_METRICS, settings.namespace, spec, 1)


def _deployment(
    cfg: Config, role: Role, namespace: str, spec: dict[str, Any], replicas: int
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(cfg, role.full_name, namespace, role),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector(role)},
            "template": _template(cfg, role, spec),
        },
    }


# --- services, monitors, policies ------------------------------------------------------------


def service(cfg: Config, role: Role, namespace: str) -> dict[str, Any]:
    port = {"name": "metrics", "port": role.port, "targetPort": "metrics", "protocol": "TCP"}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(cfg, role.full_name, namespace, role),
        "spec": {"type": "ClusterIP", "selector": selector(role), "ports": [port]},
    }


def _site_relabelings(cfg: Config) -> list[dict[str, Any]]:
    """``site`` and ``cluster`` on every series scraped, from the site model."""
    return [
        {"action": "replace", "targetLabel": "site", "replacement": cfg.site},
        {"action": "replace", "targetLabel": "cluster", "replacement": cfg.cluster},
    ]


#: Monitor kind -> the key of its list of scrape endpoints.
ENDPOINTS = {"ServiceMonitor": "endpoints", "PodMonitor": "podMetricsEndpoints"}


def monitor(
    cfg: Config, role: Role, namespace: str, settings: KubernetesDeploy, kind: str
) -> dict[str, Any]:
    """A ServiceMonitor (of the role's Service) or PodMonitor (of its pods): the
    ``metrics`` port, with ``site`` and ``cluster`` set from the site model."""
    meta = _meta(cfg, role.full_name, namespace, role)
    meta["labels"].update(settings.monitor_labels)
    endpoint = {
        "port": "metrics",
        "path": "/metrics",
        "interval": "30s",
        "scrapeTimeout": "10s",
        "relabelings": _site_relabelings(cfg),
    }
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": kind,
        "metadata": meta,
        "spec": {
            "selector": {"matchLabels": selector(role)},
            "namespaceSelector": {"matchNames": [namespace]},
            ENDPOINTS[kind]: [endpoint],
        },
    }


def _from_pods(namespace: str, pod_labels: Mapping[str, str]) -> dict[str, Any]:
    return {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "podSelector": {"matchLabels": dict(pod_labels)},
    }


def network_policy(
    cfg: Config, role: Role, namespace: str, settings: KubernetesDeploy
) -> dict[str, Any]:
    """Ingress to the role's port from Prometheus only (and Alertmanager, for the webhook)."""
    peers = [_from_pods(settings.prometheus_namespace, settings.prometheus_pod_labels)]
    if role == RUNBOOKS:
        peers.append(_from_pods(settings.prometheus_namespace, settings.alertmanager_pod_labels))
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(cfg, role.full_name, namespace, role),
        "spec": {
            "podSelector": {"matchLabels": selector(role)},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": peers, "ports": [{"protocol": "TCP", "port": role.port}]}],
        },
    }


def default_deny(cfg: Config, namespace: str) -> dict[str, Any]:
    """No ingress to any pod of the namespace unless a policy above allows it."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(cfg, "gotthard-default-deny-ingress", namespace),
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
    }


def disruption_budget(cfg: Config, role: Role, namespace: str, **budget: int) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(cfg, role.full_name, namespace, role),
        "spec": {"selector": {"matchLabels": selector(role)}, **budget},
    }


def namespace(cfg: Config, name: str, level: str) -> dict[str, Any]:
    """A namespace enforcing Pod Security Standards level *level*, auditing restricted."""
    meta = _meta(cfg, name, "", None)
    del meta["namespace"]
    meta["labels"].update(
        {
            "pod-security.kubernetes.io/enforce": level,
            "pod-security.kubernetes.io/enforce-version": "latest",
            "pod-security.kubernetes.io/audit": "restricted",
            "pod-security.kubernetes.io/audit-version": "latest",
        }
    )
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def site_config_map(cfg: Config, namespace: str, site_toml: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(cfg, CONFIG_MAP, namespace),
        "data": {SITE_FILE: site_toml},
    }


# --- the whole output ------------------------------------------------------------------------


def workloads(cfg: Config, settings: KubernetesDeploy) -> dict[str, list[dict[str, Any]]]:
    """Role name -> its workload, Service, monitor, NetworkPolicy and PodDisruptionBudget."""
    node_ns, slurm_ns = settings.node_namespace, slurm_namespace(settings)
    # one DR replica keeps the Lease through a node drain
    served = (
        (SLURM_EXPORTER, slurm_exporter(cfg, settings), slurm_ns, {"maxUnavailable": 1}),
        (DR, dr_daemon(cfg, settings), settings.namespace, {"minAvailable": 1}),
        (RUNBOOKS, runbooks(cfg, settings), slurm_ns, {"maxUnavailable": 1}),
    )
    out = {
        NODE_EXPORTER.name: [
            node_exporter(cfg, settings),
            monitor(cfg, NODE_EXPORTER, node_ns, settings, "PodMonitor"),
            network_policy(cfg, NODE_EXPORTER, node_ns, settings),
            podaccess.egress_policy(cfg, NODE_EXPORTER, node_ns, settings),
        ],
        AUDIT.name: [
            audit(cfg, settings),
            audit_metrics_configmap(cfg, settings),
            audit_metrics(cfg, settings),
            service(cfg, AUDIT_METRICS, settings.namespace),
            monitor(cfg, AUDIT_METRICS, settings.namespace, settings, "ServiceMonitor"),
            network_policy(cfg, AUDIT_METRICS, settings.namespace, settings),
            podaccess.egress_policy(cfg, AUDIT, settings.namespace, settings),
            podaccess.egress_policy(cfg, AUDIT_METRICS, settings.namespace, settings),
        ],
    }
    for role, workload, ns, budget in served:
        out[role.name] = [
            workload,
            service(cfg, role, ns),
            monitor(cfg, role, ns, settings, "ServiceMonitor"),
            network_policy(cfg, role, ns, settings),
            podaccess.egress_policy(cfg, role, ns, settings),
            disruption_budget(cfg, role, ns, **budget),
        ]
    return out


def rule_objects(cfg: Config, settings: KubernetesDeploy) -> list[dict[str, Any]]:
    """The recording and alerting rules as PrometheusRules (one per component)."""
    from gotthard.monitoring import deliver

    monitoring = getattr(cfg, "monitoring", None)
    groups = [
        *deliver.recording_groups(monitoring),
        *deliver.alerting_groups(
            settings.runbook_base_url, settings.dashboard_base_url, monitoring
        ),
    ]
    objects = deliver.prometheus_rules(
        groups, namespace=settings.namespace, labels={**labels(cfg), **settings.rule_labels}
    )
    return list(objects.values())


def dashboard_objects(cfg: Config, settings: KubernetesDeploy) -> list[dict[str, Any]]:
    """The Grafana dashboards as ConfigMaps the Grafana sidecar loads (label
    ``grafana_dashboard: "1"``, folder annotation)."""
    from gotthard.monitoring import deliver
    from gotthard.monitoring.dashboards import build

    return [
        deliver.dashboard_configmap(
            dash,
            namespace=settings.namespace,
            folder=deliver.DEFAULT_FOLDER,
            folder_annotation=deliver.DEFAULT_FOLDER_ANNOTATION,
            labels=labels(cfg),
        )
        for dash in build.build_dashboards(getattr(cfg, "monitoring", None))
    ]


def credentials_listing(cfg: Config, settings: KubernetesDeploy) -> str:
    """``credentials.txt``: every Secret the pods (and the AlertmanagerConfig) read."""
    namespace_of = {role.name: settings.namespace for role in KUBERNETES_ROLES}
    namespace_of[NODE_EXPORTER.name] = settings.node_namespace
    namespace_of[SLURM_EXPORTER.name] = slurm_namespace(settings)
    namespace_of[RUNBOOKS.name] = slurm_namespace(settings)
    namespace_of["alertmanager"] = settings.prometheus_namespace
    token = credentials.CredentialFile(
        "runbooks.token_file",
        f"{TOKEN_DIR}/token",
        settings.runbooks_token_secret,
        "token",
        (RUNBOOKS.name, "alertmanager"),
        "the bearer token Alertmanager sends (--token-file; AlertmanagerConfig)",
    )
    given = [*credentials.files(cfg, settings), token]
    if settings.slurm_auth == "slurmrestd-token":
        jwt = credentials.CredentialFile(
            "[deploy.kubernetes] slurm_token_secret",
            "$SLURM_JWT",
            settings.slurm_token_secret,
            "token",
            (SLURM_EXPORTER.name,),
            "slurmrestd JWT",
        )
        given.append(jwt)
    return credentials.describe(given, namespace_of)


def file_comments(settings: KubernetesDeploy) -> dict[str, dict[str, str]]:
    """File name -> the comments its manifests carry (key -> comment above it)."""
    return {
        f"{NODE_EXPORTER.name}.yaml": {"hostPID": HOST_PID_WHY} if settings.host_pid else {},
        f"{RUNBOOKS.name}.yaml": {"secret": TOKEN_FILE_WHY},
    }


def render(cfg: Config, settings: KubernetesDeploy, site_toml: str) -> dict[str, str]:
    """File name -> text of every manifest (``kubectl apply -f DIR``)."""
    ns, node_ns = settings.namespace, settings.node_namespace
    files = {
        "00-namespaces.yaml": dump_all(
            [
                namespace(cfg, ns, "restricted"),
                namespace(cfg, node_ns, "privileged"),
                default_deny(cfg, ns),
                default_deny(cfg, node_ns),
                site_config_map(cfg, ns, site_toml),
                site_config_map(cfg, node_ns, site_toml),
            ]
        )
    }
    access = rbac.documents(cfg, settings, labels(cfg))
    pods = workloads(cfg, settings)
    checksum = hashlib.sha256(site_toml.encode()).hexdigest()
    for objects in pods.values():
        for obj in objects:
            if obj["kind"] in ("DaemonSet", "Deployment", "CronJob"):
                # a changed site file rolls the pods on the next apply
                template = pod_template(obj)
                template["metadata"]["annotations"] = {SITE_FILE_ANNOTATION: checksum}
    comments = file_comments(settings)
    for role_name, objects in pods.items():
        files[f"{role_name}.yaml"] = dump_all(
            [*access[role_name], *objects], comments.get(f"{role_name}.yaml")
        )
    for obj in rule_objects(cfg, settings):
        files[f"rules-{obj['metadata']['name']}.yaml"] = dump(obj)
    for obj in dashboard_objects(cfg, settings):
        files[f"dashboard-{obj['metadata']['name']}.yaml"] = dump(obj)
    files[alerting.ALERTMANAGER_CONFIG_FILE] = dump(alerting.alertmanager_config(cfg, labels(cfg)))
    files[CREDENTIALS_FILE] = credentials_listing(cfg, settings)
    return files
