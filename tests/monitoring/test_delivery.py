"""Delivery formats of ``rules build`` and ``dashboards build``.

* ``--format prometheus-operator``: every PrometheusRule validates against the real CRD's
  ``openAPIV3Schema`` (tests/fixtures/prometheus-operator-crds, prometheus-operator
  0.93.0) and together the objects hold exactly the groups of ``--format files``;
* ``--format provisioning``: a Grafana file provider (apiVersion 1) whose folder tree
  holds every dashboard;
* ``--format configmaps``: one ConfigMap per dashboard, valid for Kubernetes
  (``kubernetes-validate``, strict, offline schemas), with the sidecar's label and the
  folder annotation.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from gotthard.monitoring import deliver, rules
from gotthard.monitoring.dashboards import build
from tests.monitoring import promtool
from tests.support.cli import run_in_process
from tests.support.monitoring import load_yaml

CRD = (
    Path(__file__).resolve().parents[1]
    / "fixtures"
    / "prometheus-operator-crds"
    / "monitoring.coreos.com_prometheusrules.yaml"
)
KUBERNETES_VERSION = "1.30.0"


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    crd = load_yaml(CRD)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return jsonschema.Draft202012Validator(version["schema"]["openAPIV3Schema"])


@pytest.fixture(scope="module")
def operator_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("operator")
    argv = ["rules", "build", "--out", str(out), "--format", "prometheus-operator"]
    assert run_in_process(*argv, "--namespace", "obs", "--label", "release=kps") == 0
    return out


def prometheus_rules(out: Path) -> list[dict[str, Any]]:
    return [load_yaml(path) for path in sorted(out.glob("*.prometheusrule.yaml"))]


def test_prometheus_rules_validate_against_the_crd_schema(operator_dir: Path, validator) -> None:
    objects = prometheus_rules(operator_dir)
    assert len(objects) >= 7
    for obj in objects:
        errors = [e.message for e in validator.iter_errors(obj)]
        assert errors == [], obj["metadata"]["name"]
        assert obj["apiVersion"] == "monitoring.coreos.com/v1" and obj["kind"] == "PrometheusRule"
        meta = obj["metadata"]
        assert meta["namespace"] == "obs" and meta["labels"]["release"] == "kps"
        assert meta["labels"]["app.kubernetes.io/part-of"] == "gotthard"
        assert all(g["name"].startswith(meta["name"] + ".") for g in obj["spec"]["groups"])


def test_the_schema_catches_a_broken_rule(operator_dir: Path, validator) -> None:
    """The validation can fail: a rule with neither record nor alert, a bad ``for``."""
    obj = prometheus_rules(operator_dir)[0]
    obj["spec"]["groups"][0]["rules"][0]["for"] = "five minutes"
    obj["spec"]["groups"][0]["rules"].append({"expr": 1})
    assert list(validator.iter_errors(obj))


def test_prometheus_rules_hold_exactly_the_groups_of_the_files(
    operator_dir: Path, tmp_path: Path
) -> None:
    assert run_in_process("rules", "build", "--out", str(tmp_path)) == 0
    files = [
        *load_yaml(tmp_path / "recording.rules.yml")["groups"],
        *load_yaml(tmp_path / "alerts.rules.yml")["groups"],
    ]
    groups = [g for obj in prometheus_rules(operator_dir) for g in obj["spec"]["groups"]]
    assert sorted(groups, key=lambda g: g["name"]) == sorted(files, key=lambda g: g["name"])
    assert (operator_dir / "alertmanager.yml").is_file()


def test_the_groups_pass_promtool_as_written_by_the_operator(
    operator_dir: Path, tmp_path: Path
) -> None:
    """The operator writes ``spec`` as a rule file; promtool checks it as such."""
    for obj in prometheus_rules(operator_dir):
        path = tmp_path / f"{obj['metadata']['name']}.yml"
        path.write_text(rules.dump_yaml(obj["spec"]))
        promtool.check_rules(path)


def test_files_format_is_the_default_and_unchanged(tmp_path: Path) -> None:
    argv = ["rules", "build", "--out", str(tmp_path), "--format", "files"]
    assert run_in_process(*argv) == 0
    assert (tmp_path / "recording.rules.yml").read_text() == rules.render_recording_rules()
    assert (tmp_path / "alerts.rules.yml").read_text() == rules.render_alerting_rules()


def test_a_malformed_label_is_exit_2(tmp_path: Path, capsys: Any) -> None:
    argv = ["rules", "build", "--out", str(tmp_path), "--format", "prometheus-operator"]
    assert run_in_process(*argv, "--label", "release") == 2
    assert "--label wants KEY=VALUE" in capsys.readouterr().err


# --- dashboards ----------------------------------------------------------------------------


def test_provisioning_writes_a_file_provider_and_the_folder_tree(tmp_path: Path) -> None:
    argv = ["dashboards", "build", "--out", str(tmp_path), "--format", "provisioning"]
    assert run_in_process(*argv, "--folder", "HPC", "--path", "/srv/grafana/gotthard") == 0
    provider = load_yaml(tmp_path / "provisioning" / "dashboards" / "gotthard.yaml")
    assert provider["apiVersion"] == 1
    (entry,) = provider["providers"]
    assert entry["type"] == "file" and entry["name"] == "gotthard"
    assert entry["options"] == {"path": "/srv/grafana/gotthard", "foldersFromFilesStructure": True}
    # foldersFromFilesStructure needs folder and folderUid absent
    assert "folder" not in entry and "folderUid" not in entry
    tree = tmp_path / "dashboards"
    assert [p.name for p in tree.iterdir()] == ["HPC"]
    dashboards = build.build_dashboards()
    written = {p.name: json.loads(p.read_text()) for p in (tree / "HPC").iterdir()}
    assert written == {f"{d['uid']}.json": d for d in dashboards}


def test_configmaps_validate_for_kubernetes_and_carry_the_sidecar_label(tmp_path: Path) -> None:
    argv = ["dashboards", "build", "--out", str(tmp_path), "--format", "configmaps"]
    assert run_in_process(*argv, "--namespace", "grafana", "--folder", "HPC") == 0
    dashboards = {d["uid"]: d for d in build.build_dashboards()}
    paths = sorted(tmp_path.glob("*.configmap.yaml"))
    assert len(paths) == len(dashboards)
    for path in paths:
        configmap = load_yaml(path)
        kubernetes_validate.validate(configmap, KUBERNETES_VERSION, strict=True)
        meta = configmap["metadata"]
        assert meta["labels"][deliver.SIDECAR_LABEL] == "1"
        assert meta["annotations"] == {"grafana_folder": "HPC"}
        assert meta["namespace"] == "grafana"
        ((key, text),) = configmap["data"].items()
        assert key == f"{meta['name']}.json"
        assert json.loads(text) == dashboards[meta["name"]]
    # one over the 1 MiB a ConfigMap may hold would be refused by the API server
    assert max(p.stat().st_size for p in paths) < 1 << 20


def test_kubernetes_validate_catches_a_broken_configmap(tmp_path: Path) -> None:
    dash = build.build_dashboards()[0]
    configmap = deliver.dashboard_configmap(
        dash, namespace="ns", folder="F", folder_annotation="grafana_folder", labels={}
    )
    kubernetes_validate.validate(configmap, KUBERNETES_VERSION, strict=True)
    configmap["data"] = {"x.json": 1}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(configmap, KUBERNETES_VERSION, strict=True)


def test_a_folder_that_is_a_path_is_exit_2(tmp_path: Path, capsys: Any) -> None:
    argv = ["dashboards", "build", "--out", str(tmp_path), "--format", "provisioning"]
    assert run_in_process(*argv, "--folder", "../etc") == 2
    assert "not a folder name" in capsys.readouterr().err
