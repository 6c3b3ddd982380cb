"""``gotthard policy bundle``: loaded as OPA loads a bundle, into the embedded engine, its
admission decision equals ``policy eval`` on AdmissionReviews."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
import regopy

from gotthard.policies import bundle
from gotthard.policies import engine as eng
from tests.policies.admission_cases import (
    SETTINGS,
    compared_cases,
    constrained,
    eval_verdict,
    reviews,
)
from tests.policies.conftest import GOOD_POD
from tests.support.cli import run_in_process

REVIEWS = list(reviews())
CASES = compared_cases(REVIEWS)
ENTRYPOINTS = (
    "system/main",
    "gotthard/webhook/main",
    "gotthard/webhook/deny",
    "gotthard/webhook/warn",
    "test/webhook/decisions",
)
#: Added beside the bundle (not part of it): the four webhook decisions in one query, so
#: that the rules they share are evaluated once per review.
DECISIONS_MODULE = """package test.webhook

decisions := {
	"main": data.gotthard.webhook.main,
	"default": data.system.main,
	"deny": data.gotthard.webhook.deny,
	"warn": data.gotthard.webhook.warn,
}
"""


class OpaBundle:
    """A bundle loaded the way OPA loads one: the ``.manifest`` read, every ``.rego`` file a
    module whose package lies under a root, every ``data.json`` at its directory's path."""

    def __init__(self, path: Path) -> None:
        self.interp = regopy.Interpreter()
        with tarfile.open(path, "r:gz") as tar:
            files = {
                m.name.removeprefix("./"): tar.extractfile(m).read()  # type: ignore[union-attr]
                for m in tar
                if m.isfile()
            }
        self.manifest = json.loads(files.pop(".manifest"))
        roots = self.manifest["roots"]
        self.packages = []
        for name, content in sorted(files.items()):
            text = content.decode("utf-8")
            if name.endswith(".rego"):
                package = next(
                    line.split()[1] for line in text.splitlines() if line.startswith("package ")
                )
                assert any(package == r or package.startswith(f"{r}.") for r in roots), name
                self.packages.append(package)
                self.interp.add_module(name, text)
            elif Path(name).name == "data.json":
                path = [p for p in Path(name).parent.parts if p]
                assert path and path[0] in roots, name
                doc: Any = json.loads(text)
                for part in reversed(path):
                    doc = {part: doc}
                self.interp.add_data_json(json.dumps(doc))
            else:
                raise AssertionError(f"unexpected file in the bundle: {name}")

        self.interp.add_module("test_decisions.rego", DECISIONS_MODULE)
        # compiled once for the decisions a webhook queries (plain queries recompile)
        self.compiled = self.interp.build(None, list(ENTRYPOINTS))
        self.runner = regopy.Interpreter()

    def query(self, ref: str, input_doc: Any) -> Any:
        """*ref* (``data.a.b``) on *input_doc*; entry points from the compiled bundle."""
        entrypoint = ref.removeprefix("data.").replace(".", "/")
        if entrypoint in ENTRYPOINTS:
            self.runner.set_input_term(json.dumps(input_doc))
            out = self.runner.query_bundle_entrypoint(self.compiled, entrypoint)
        else:
            self.interp.set_input_term(json.dumps(input_doc))
            out = self.interp.query(ref)
        assert out.ok(), ref
        return json.loads(out.expressions().json())[0]


def build(tmp_path: Path, data: dict[str, Any], name: str = "bundle.tar.gz") -> OpaBundle:
    path = tmp_path / name
    bundle.write_bundle(path, data)
    return OpaBundle(path)


@pytest.fixture(scope="module", params=sorted(SETTINGS))
def loaded(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[OpaBundle, eng.EmbeddedEngine]:
    data, _ = constrained(SETTINGS[request.param])
    tmp = tmp_path_factory.mktemp("bundle")
    return build(tmp, data), eng.EmbeddedEngine(data)


def test_manifest_and_layout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bundle.tar.gz"
    assert run_in_process("policy", "bundle", "--out", str(out), "--revision", "r1") == 0
    assert "revision r1" in capsys.readouterr().out
    loaded = OpaBundle(out)
    assert loaded.manifest == {"revision": "r1", "roots": ["gotthard", "system"]}
    assert {"gotthard.admission.pod", "gotthard.decision", "gotthard.webhook", "system"} <= set(
        loaded.packages
    )
    # the data is what policy eval uses: shipped site values and the constraints
    data = loaded.query("data.gotthard", GOOD_POD)
    assert data["site"]["admission"]["allowed_registries"]
    assert (
        data["constraints"]["POD-PRIV-001"]
        == {
            "enabled": True,
            "mode": "enforce",
            "pss": False,
            "exempt": {"namespaces": [], "namespace_labels": [], "images": []},
        }
        or data["constraints"]["POD-PRIV-001"]["pss"] is True
    )


def test_revision_is_reproducible(tmp_path: Path) -> None:
    data, _ = constrained(SETTINGS["hybrid-hpc"])
    first = bundle.write_bundle(tmp_path / "a.tar.gz", data)
    assert bundle.write_bundle(tmp_path / "b.tar.gz", data) == first
    assert (tmp_path / "a.tar.gz").read_bytes() == (tmp_path / "b.tar.gz").read_bytes()


def test_site_file_settings_reach_the_bundle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "site.toml"
    config.write_text('[policies.rules.POD-IMG-002]\nmode = "warn"\n', encoding="utf-8")
    out = tmp_path / "bundle.tar.gz"
    assert run_in_process("--config", str(config), "policy", "bundle", "--out", str(out)) == 0
    loaded = OpaBundle(out)
    assert loaded.query("data.gotthard.constraints", GOOD_POD)["POD-IMG-002"]["mode"] == "warn"


def test_bundle_errors_are_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_in_process("policy", "bundle", "--out", str(tmp_path / "no" / "b.tgz")) == 2
    assert "cannot write" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("loaded", "name", "review"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
    indirect=["loaded"],
    scope="module",
)
def test_webhook_decision_equals_policy_eval(
    loaded: tuple[OpaBundle, eng.EmbeddedEngine],
    name: str,
    review: dict[str, Any],
) -> None:
    opa, engine = loaded
    denied, warned = eval_verdict(engine, review)
    decisions = opa.query("data.test.webhook.decisions", review)
    main, default = decisions["main"], decisions["default"]
    deny, warn = decisions["deny"] or [], decisions["warn"] or []
    assert default == main
    assert main["apiVersion"] == "admission.k8s.io/v1" and main["kind"] == "AdmissionReview"
    response = main["response"]
    assert response["uid"] == "test-uid"
    assert response["allowed"] is (not denied)
    assert sorted({v["rule"] for v in deny}) == denied
    assert sorted({v["rule"] for v in warn}) == warned
    if denied:
        assert response["status"]["code"] == 403
        for rule in denied:
            assert f"{rule}: " in response["status"]["message"]
    assert sorted({w.split(":")[0] for w in response["warnings"]}) == warned
