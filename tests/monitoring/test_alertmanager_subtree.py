"""``gotthard alertmanager build``: the complete file and the subtree, checked by amtool.

* ``--mode full`` writes the same bytes as ``rules build``'s ``alertmanager.yml``;
* ``--mode subtree`` passes ``amtool check-config`` alone and merged into a site's own
  configuration (tests/fixtures/alertmanager/site-existing.yml), where
  ``amtool config routes test`` proves that Gotthard's alerts reach Gotthard's receivers
  and the site's alerts keep their routes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gotthard.monitoring import alertmanager, rules
from tests.support.cli import run, run_in_process
from tests.support.monitoring import binary, load_yaml

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "alertmanager"
SITE_CONFIG = FIXTURES / "site-existing.yml"


def amtool_check(path: Path) -> str:
    result = run([binary("amtool"), "check-config", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
    return result.stdout


def amtool_route(config: Path, labels: list[str]) -> str:
    """The receivers ``amtool config routes test`` picks for an alert with *labels*."""
    result = run([binary("amtool"), "config", "routes", "test", f"--config.file={config}", *labels])
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.strip()


@pytest.fixture(scope="module")
def merged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site's configuration with the subtree merged in."""
    out = tmp_path_factory.mktemp("merged")
    argv = ["alertmanager", "build", "--out", str(out), "--mode", "subtree"]
    assert run_in_process(*argv, "--merge-into", str(SITE_CONFIG)) == 0
    return out / "alertmanager.yml"


def test_full_mode_is_the_file_rules_build_writes(tmp_path: Path) -> None:
    assert run_in_process("alertmanager", "build", "--out", str(tmp_path / "am")) == 0
    assert run_in_process("rules", "build", "--out", str(tmp_path / "rules")) == 0
    full = (tmp_path / "am" / "alertmanager.yml").read_bytes()
    assert full == (tmp_path / "rules" / "alertmanager.yml").read_bytes()
    assert sorted(p.name for p in (tmp_path / "am").iterdir()) == ["alertmanager.yml"]
    amtool_check(tmp_path / "am" / "alertmanager.yml")


def test_subtree_alone_passes_amtool_and_names_everything_gotthard(tmp_path: Path) -> None:
    argv = ["alertmanager", "build", "--out", str(tmp_path), "--mode", "subtree"]
    assert run_in_process(*argv, "--pager-url", "zurich=https://pager.example/zh") == 0
    path = tmp_path / "alertmanager-subtree.yml"
    out = amtool_check(path)
    assert f"{len(alertmanager.INHIBITIONS)} inhibit rules" in out
    tree = load_yaml(path)
    names = [r["name"] for r in tree["receivers"]]
    assert names and all(name.startswith("gotthard-") for name in names)
    (route,) = tree["route"]["routes"]
    assert route["matchers"] == [alertmanager.gotthard_matcher(rules.alert_names())]
    assert "continue" not in route
    hooks = {r["name"]: r.get("webhook_configs") for r in tree["receivers"]}
    assert hooks["gotthard-pager-zurich"][0]["url"] == "https://pager.example/zh"
    # inhibitions name Gotthard's alerts on both sides: no prefix regex is left
    for rule in tree["inhibit_rules"]:
        for matcher in [*rule["source_matchers"], *rule["target_matchers"]]:
            assert ".+" not in matcher, matcher
            listed = matcher.split('"')[1].split("|")
            assert set(listed) <= set(rules.alert_names()), matcher


def test_subtree_routes_gotthard_alerts_to_gotthard_receivers(tmp_path: Path) -> None:
    assert run_in_process("alertmanager", "build", "--out", str(tmp_path), "--mode", "subtree") == 0
    path = tmp_path / "alertmanager-subtree.yml"
    got = amtool_route(path, ["alertname=SlurmControllerDown", "severity=critical", "site=zurich"])
    assert got == "gotthard-runbook-webhook,gotthard-pager-zurich"


def test_merged_config_passes_amtool_and_keeps_the_site_parts(merged: Path) -> None:
    out = amtool_check(merged)
    site = load_yaml(SITE_CONFIG)
    config = load_yaml(merged)
    assert f"{len(site['inhibit_rules']) + len(alertmanager.INHIBITIONS)} inhibit rules" in out
    assert config["global"] == site["global"] and config["templates"] == site["templates"]
    assert config["route"]["receiver"] == site["route"]["receiver"]
    assert config["route"]["routes"][1:] == site["route"]["routes"]
    assert config["receivers"][: len(site["receivers"])] == site["receivers"]


@pytest.mark.parametrize(
    ("labels", "receivers"),
    [
        # Gotthard's alerts go to Gotthard's receivers, whatever else they carry
        (
            ["alertname=SlurmControllerDown", "severity=critical", "site=zurich"],
            "gotthard-runbook-webhook,gotthard-pager-zurich",
        ),
        (
            ["alertname=GPULost", "severity=critical", "site=lugano", "service=foo1"],
            "gotthard-runbook-webhook,gotthard-pager-lugano",
        ),
        (
            ["alertname=LustreOSTFillHigh", "severity=warning", "site=zurich"],
            "gotthard-runbook-webhook,gotthard-ticket",
        ),
        (["alertname=GPUPowerThrottling", "severity=info", "site=zurich"], "gotthard-null"),
        # the site's own alerts keep their routes
        (["alertname=FooDown", "service=foo1", "severity=critical"], "team-x-pager"),
        (["alertname=FilesSlow", "service=files", "severity=warning"], "team-y-mails"),
        (["alertname=ReplicaLag", "service=db-main"], "team-db-pager"),
        (["alertname=NodeFilesystemAlmostOutOfSpace", "severity=critical"], "team-ops-mails"),
        # a site alert that only looks like Gotthard's is not taken
        (["alertname=SlurmJobStuck", "severity=critical", "site=zurich"], "team-ops-mails"),
    ],
)
def test_merged_routes(merged: Path, labels: list[str], receivers: str) -> None:
    assert amtool_route(merged, labels) == receivers


def test_merging_again_gives_the_same_file(merged: Path, tmp_path: Path) -> None:
    argv = ["alertmanager", "build", "--out", str(tmp_path), "--mode", "subtree"]
    assert run_in_process(*argv, "--merge-into", str(merged)) == 0
    again: Any = load_yaml(tmp_path / "alertmanager.yml")
    assert again == load_yaml(merged)


def test_bad_input_is_exit_2_with_a_message(tmp_path: Path, capsys: Any) -> None:
    argv = ["alertmanager", "build", "--out", str(tmp_path / "out"), "--mode", "subtree"]
    assert run_in_process(*argv, "--merge-into", str(tmp_path / "missing.yml")) == 2
    assert "cannot read" in capsys.readouterr().err
    (tmp_path / "broken.yml").write_text("route: [unclosed\n")
    assert run_in_process(*argv, "--merge-into", str(tmp_path / "broken.yml")) == 2
    assert "not valid YAML" in capsys.readouterr().err
    (tmp_path / "noroute.yml").write_text("receivers: []\n")
    assert run_in_process(*argv, "--merge-into", str(tmp_path / "noroute.yml")) == 2
    assert "no top-level route" in capsys.readouterr().err
    full = ["alertmanager", "build", "--out", str(tmp_path / "out")]
    assert run_in_process(*full, "--merge-into", str(SITE_CONFIG)) == 2
    assert "needs --mode subtree" in capsys.readouterr().err
