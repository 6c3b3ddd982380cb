"""Delivery formats: the rules and dashboards the way sites load them.

Rules (``gotthard rules build --format``):

* ``files``: ``recording.rules.yml`` and ``alerts.rules.yml`` for each site Prometheus'
  ``rule_files``, and ``global-alerts.rules.yml``, the groups of the global evaluator
  (placement ``global``: the sandbox's global view, Thanos Ruler), which a site
  Prometheus never loads;
* ``prometheus-operator``: one ``PrometheusRule`` object (monitoring.coreos.com/v1) per
  component, holding that component's recording and site alerting groups, one file
  each (the global groups go to the global evaluator: ``deploy render --target thanos``).

Dashboards (``gotthard dashboards build --format``):

* ``json``: one ``<uid>.json`` per dashboard;
* ``provisioning``: a Grafana file-provider ``provisioning/dashboards/gotthard.yaml``
  (``foldersFromFilesStructure``) and ``dashboards/<folder>/<uid>.json``;
* ``configmaps``: one ConfigMap per dashboard with the Grafana sidecar's label
  ``grafana_dashboard: "1"`` and a folder annotation.

With ``[monitoring] gpu_source = "dcgm"`` the recording rules also hold the DCGM mapping
group (:mod:`gotthard.monitoring.dcgm`); with ``[monitoring] legacy_names = true`` the
group ``gotthard-legacy.recording``, which records each metric name of before the 1.0
renames from its new name (:mod:`gotthard.exporters.names`).

Delivery sits above the rules and the dashboards: it imports them, never the reverse. The
dashboard functions import :mod:`gotthard.monitoring.dashboards.build` (grafanalib, the
``dashboards`` extra) when called, so that delivering rules never needs it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from gotthard.exporters import names
from gotthard.monitoring import dcgm, rules
from gotthard.monitoring.documents import dump_yaml, write_files

if TYPE_CHECKING:
    from gotthard.monitoring.settings import MonitoringConfig

RuleFormat = Literal["files", "prometheus-operator"]
RULE_FORMATS: tuple[RuleFormat, ...] = ("files", "prometheus-operator")
DashboardFormat = Literal["json", "provisioning", "configmaps"]
DASHBOARD_FORMATS: tuple[DashboardFormat, ...] = ("json", "provisioning", "configmaps")

RECORDING_FILE = "recording.rules.yml"
ALERTS_FILE = "alerts.rules.yml"
#: The alerting groups of the global evaluator (placement ``global``).
GLOBAL_ALERTS_FILE = "global-alerts.rules.yml"

#: Labels on every Kubernetes object written here.
PART_OF = {"app.kubernetes.io/part-of": "gotthard", "app.kubernetes.io/managed-by": "gotthard"}
#: Namespace of the Kubernetes objects (PrometheusRules, ConfigMaps).
DEFAULT_NAMESPACE = "monitoring"
#: The Grafana folder every dashboard goes to.
DEFAULT_FOLDER = "Gotthard"
#: The annotation the Grafana sidecar reads a ConfigMap's folder from (the chart's
#: ``sidecar.dashboards.folderAnnotation``, which sites set to this name).
DEFAULT_FOLDER_ANNOTATION = "grafana_folder"
#: Where Grafana finds the dashboards of the provisioning output (the provider's path).
DEFAULT_DASHBOARDS_PATH = "/var/lib/grafana/dashboards/gotthard"
SIDECAR_LABEL = "grafana_dashboard"


def recording_groups(monitoring: MonitoringConfig | None = None) -> list[dict[str, Any]]:
    """The recording groups, with the DCGM mapping group first when it is selected, and
    the legacy-names group last with ``legacy_names = true``."""
    groups = rules.recording_groups(monitoring)["groups"]
    if monitoring is not None and monitoring.gpu_source == "dcgm":
        groups = [dcgm.recording_group(), *groups]
    if monitoring is not None and monitoring.legacy_names:
        groups = [*groups, legacy_group()]
    return groups


def legacy_group() -> dict[str, Any]:
    """``[monitoring] legacy_names = true``: each pre-1.0 name recorded from its new name
    (:mod:`gotthard.exporters.names`), so a previous release's dashboards keep working."""
    return {"name": names.LEGACY_GROUP, "rules": names.legacy_rules()}


def alerting_groups(
    runbook_base_url: str,
    dashboard_base_url: str,
    monitoring: MonitoringConfig | None = None,
    placement: rules.Placement = "site",
) -> list[dict[str, Any]]:
    """The alerting groups evaluated at *placement*."""
    groups = rules.alerting_groups(
        runbook_base_url, dashboard_base_url, monitoring=monitoring, placement=placement
    )
    return groups["groups"]


def _header(command: str) -> str:
    return rules.HEADER.replace("`gotthard rules build`", f"`{command}`")


def rule_files(
    recording: Sequence[dict[str, Any]],
    alerting: Sequence[dict[str, Any]],
    global_alerting: Sequence[dict[str, Any]] = (),
) -> dict[str, str]:
    """``--format files``: file name -> text."""
    return {
        RECORDING_FILE: rules.HEADER + dump_yaml({"groups": list(recording)}),
        ALERTS_FILE: rules.HEADER + dump_yaml({"groups": list(alerting)}),
        GLOBAL_ALERTS_FILE: rules.HEADER + dump_yaml({"groups": list(global_alerting)}),
    }


def metadata(
    name: str, namespace: str, labels: Mapping[str, str], component: str
) -> dict[str, Any]:
    """Kubernetes object metadata with Gotthard's labels, then the site's *labels*."""
    return {
        "name": name,
        "namespace": namespace,
        "labels": {
            "app.kubernetes.io/name": "gotthard",
            "app.kubernetes.io/component": component,
            **PART_OF,
            **labels,
        },
    }


def prometheus_rules(
    groups: Sequence[dict[str, Any]], *, namespace: str, labels: Mapping[str, str]
) -> dict[str, dict[str, Any]]:
    """``--format prometheus-operator``: object name -> PrometheusRule.

    Groups are named ``gotthard-<component>.<kind>``; each component's groups go into one
    object named ``gotthard-<component>``, in the order the groups come.
    """
    by_object: dict[str, list[dict[str, Any]]] = {}
    for group in groups:
        by_object.setdefault(group["name"].split(".", 1)[0], []).append(group)
    return {
        name: {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PrometheusRule",
            "metadata": metadata(name, namespace, labels, name.removeprefix("gotthard-")),
            "spec": {"groups": members},
        }
        for name, members in by_object.items()
    }


def rule_documents(
    fmt: RuleFormat,
    *,
    runbook_base_url: str = rules.DEFAULT_RUNBOOK_BASE_URL,
    dashboard_base_url: str = rules.DEFAULT_DASHBOARD_BASE_URL,
    monitoring: MonitoringConfig | None = None,
    namespace: str = DEFAULT_NAMESPACE,
    labels: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """File name -> text of the rules in format *fmt*."""
    recording = recording_groups(monitoring)
    alerting = alerting_groups(runbook_base_url, dashboard_base_url, monitoring)
    if fmt == "files":
        placed = alerting_groups(runbook_base_url, dashboard_base_url, monitoring, "global")
        return rule_files(recording, alerting, placed)
    objects = prometheus_rules(
        [*recording, *alerting], namespace=namespace, labels=dict(labels or {})
    )
    header = _header("gotthard rules build --format prometheus-operator")
    return {f"{name}.prometheusrule.yaml": header + dump_yaml(obj) for name, obj in objects.items()}


# --- dashboards -----------------------------------------------------------------------------


def dashboard_file(dash: dict[str, Any]) -> str:
    return f"{dash['uid']}.json"


def provisioning_provider(path: str) -> dict[str, Any]:
    """The Grafana file provider: sub-directories of *path* become folders."""
    return {
        "apiVersion": 1,
        "providers": [
            {
                "name": "gotthard",
                "orgId": 1,
                "type": "file",
                "disableDeletion": False,
                "updateIntervalSeconds": 30,
                "allowUiUpdates": False,
                "options": {"path": path, "foldersFromFilesStructure": True},
            }
        ],
    }


def dashboard_configmap(
    dash: dict[str, Any],
    *,
    namespace: str,
    folder: str,
    folder_annotation: str,
    labels: Mapping[str, str],
) -> dict[str, Any]:
    """One dashboard as a ConfigMap the Grafana sidecar picks up."""
    from gotthard.monitoring.dashboards import build

    meta = metadata(dash["uid"], namespace, {SIDECAR_LABEL: "1", **labels}, "dashboards")
    meta["annotations"] = {folder_annotation: folder}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {dashboard_file(dash): build.render(dash)},
    }


def dashboard_documents(
    fmt: DashboardFormat,
    *,
    folder: str = DEFAULT_FOLDER,
    path: str = DEFAULT_DASHBOARDS_PATH,
    namespace: str = DEFAULT_NAMESPACE,
    folder_annotation: str = DEFAULT_FOLDER_ANNOTATION,
    labels: Mapping[str, str] | None = None,
    monitoring: MonitoringConfig | None = None,
) -> dict[str, str]:
    """Relative file path -> text of the dashboards in format *fmt*."""
    from gotthard.monitoring.dashboards import build

    built = build.build_dashboards(monitoring=monitoring)
    if fmt == "json":
        return {dashboard_file(dash): build.render(dash) for dash in built}
    if fmt == "provisioning":
        header = _header("gotthard dashboards build --format provisioning")
        documents = {
            "provisioning/dashboards/gotthard.yaml": header + dump_yaml(provisioning_provider(path))
        }
        for dash in built:
            documents[f"dashboards/{folder}/{dashboard_file(dash)}"] = build.render(dash)
        return documents
    header = _header("gotthard dashboards build --format configmaps")
    return {
        f"{dash['uid']}.configmap.yaml": header
        + dump_yaml(
            dashboard_configmap(
                dash,
                namespace=namespace,
                folder=folder,
                folder_annotation=folder_annotation,
                labels=dict(labels or {}),
            )
        )
        for dash in built
    }


def write_dashboards(
    out_dir: Path | str, *, monitoring: MonitoringConfig | None = None
) -> list[Path]:
    """Write ``<uid>.json`` for every dashboard into *out_dir* (created if missing)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return write_files(out, dashboard_documents("json", monitoring=monitoring))
