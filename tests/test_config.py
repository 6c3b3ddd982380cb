"""The site configuration file: defaults, the shipped example, and precise errors."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, get_args, get_origin

import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from gotthard import config
from gotthard.site import ClusterConfig, KubeAccess, SiteConfig

EXAMPLE = Path(__file__).parent.parent / "docs" / "site.example.toml"
FIXTURES = Path(__file__).parent / "fixtures"


def test_defaults_need_no_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(config.ENV_VAR, raising=False)
    cfg = config.load()
    assert cfg.exporter.listen == "127.0.0.1:9877"
    assert cfg.exporter.collectors == ["slurm"]
    assert cfg.exporter.slurm.backend == "cli"
    assert cfg.sites == {}
    # with no [sites], the site model is this installation's site and cluster, reached
    # through the default kubeconfig
    assert cfg.site_model == {
        "local": SiteConfig(clusters={"sandbox": ClusterConfig(kubernetes=KubeAccess())})
    }
    assert cfg.site_config() == cfg.site_model["local"]


def test_the_shipped_example_is_valid_and_sites_are_data() -> None:
    cfg = config.load(EXAMPLE)
    assert set(cfg.sites) == {"zurich", "lugano"}
    assert cfg.site == "zurich"
    assert set(cfg.sites["lugano"].clusters) == {"todi", "todi-k8s"}
    # every area reads the one site model: [dr] holds no copy of it
    assert cfg.site_model is cfg.sites
    assert cfg.site_config("lugano") is cfg.sites["lugano"]
    assert not {"site", "sites"} & set(type(cfg.dr).model_fields)
    assert cfg.cluster_config().slurm_conf == "/etc/slurm/slurm.conf"
    assert cfg.sites["zurich"].kube_cluster == "alps-k8s"
    assert cfg.sites["lugano"].kube_cluster == "todi-k8s"
    assert cfg.sites["lugano"].karmada_members == ["lug-a"]


def _check_field(
    name: str, field: FieldInfo, raw: dict[str, Any], where: str, defaults: bool
) -> None:
    """*raw* lists the field *name*; with *defaults*, set to its default (recursively)."""
    key = f"{where}.{name}"
    if tuple(key.split(".")) in config.MOVED_KEYS:
        return  # set from the site model; the file must not say it
    if field.default is None and name not in raw:
        return  # optional: unset means "not set" (the example says so in a comment)
    assert name in raw, f"docs/site.example.toml does not list {key}"
    value, default = raw[name], field.get_default(call_default_factory=True)
    annotation = field.annotation
    item = get_args(annotation)[0] if get_origin(annotation) is list else None
    named = get_args(annotation)[1] if get_origin(annotation) is dict else None
    if isinstance(default, BaseModel):
        _check_model(type(default), value, key, defaults)
    elif isinstance(item, type) and issubclass(item, BaseModel):
        assert value, f"{key}: the example shows one entry"
        for entry in value:  # example data: every key listed, values free
            _check_model(item, entry, key, defaults=False)
    elif isinstance(named, type) and issubclass(named, BaseModel):
        for entry in value.values():  # [TABLE.NAME] example data: every key listed, values free
            _check_model(named, entry, f"{key}.NAME", defaults=False)
    elif defaults:
        assert value == default, f"{key}: example says {value!r}, the default is {default!r}"


def _check_model(model: type[BaseModel], raw: dict[str, Any], where: str, defaults: bool) -> None:
    assert set(raw) <= set(model.model_fields), f"{where}: unknown keys in the example"
    for name, field in model.model_fields.items():
        _check_field(name, field, raw, where, defaults)


@pytest.mark.parametrize("table", ["exporter", "runbooks", "dr", "monitoring", "policies"])
def test_the_example_lists_every_key_with_its_real_default(table: str) -> None:
    raw = tomllib.loads(EXAMPLE.read_text())[table]
    model = type(getattr(config.Config(), table))
    for name, field in model.model_fields.items():
        _check_field(name, field, raw, table, defaults=True)
    assert set(raw) <= set(model.model_fields)


def test_the_example_site_model_lists_every_cluster_key() -> None:
    raw = tomllib.loads(EXAMPLE.read_text())
    alps_k8s = raw["sites"]["zurich"]["clusters"]["alps-k8s"]
    keys = set(raw["sites"]["zurich"]["clusters"]["alps"]) | set(alps_k8s)
    assert keys >= set(ClusterConfig.model_fields)
    assert set(alps_k8s["kubernetes"]) == set(KubeAccess.model_fields)
    assert set(raw["sites"]["zurich"]) == set(SiteConfig.model_fields)


def test_environment_variable_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "site.toml"
    path.write_text('site = "lugano"\n[sites.lugano]\n')
    monkeypatch.setenv(config.ENV_VAR, str(path))
    assert config.load().site == "lugano"


#: (site file, the key its error names, a part of the reason on that key's line)
INVALID = [
    (case["body"], case["key"], case["reason"])
    for case in tomllib.loads((FIXTURES / "config" / "invalid.toml").read_text())["case"]
]


@pytest.mark.parametrize(("body", "key", "reason"), INVALID, ids=[key for _, key, _ in INVALID])
def test_errors_name_the_key_and_the_reason(
    tmp_path: Path, body: str, key: str, reason: str
) -> None:
    path = tmp_path / "site.toml"
    path.write_text(body)
    with pytest.raises(config.ConfigError) as error:
        config.load(path)
    message = str(error.value)
    assert str(path) in message
    line = next(line for line in message.splitlines() if line.strip().startswith(key + ":"))
    assert reason in line


def test_unreadable_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(config.ConfigError, match="cannot read"):
        config.load(tmp_path / "absent.toml")
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"\xff\xfe")
    with pytest.raises(config.ConfigError, match="not UTF-8"):
        config.load(bad)


def test_every_default_is_itself_valid() -> None:
    # the exporter re-validates the whole configuration after applying its flags
    defaults = config.Config()
    dumped = defaults.model_dump(exclude={"exporter": {"slurm": {"rest_url"}}})
    assert config.from_mapping(dumped) == defaults
