"""The site configuration file: defaults, the shipped example, and precise errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from gotthard import config

EXAMPLE = Path(__file__).parent.parent / "docs" / "site.example.toml"


def test_defaults_need_no_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(config.ENV_VAR, raising=False)
    cfg = config.load()
    assert cfg.exporter.listen == "127.0.0.1:9877"
    assert cfg.exporter.collectors == ["slurm"]
    assert cfg.exporter.slurm.backend == "cli"
    assert cfg.sites == {}


def test_the_shipped_example_is_valid_and_sites_are_data() -> None:
    cfg = config.load(EXAMPLE)
    assert set(cfg.sites) == {"zurich", "lugano"}
    assert cfg.site == "zurich"
    assert cfg.sites["lugano"].clusters == ["todi"]


def test_environment_variable_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "site.toml"
    path.write_text('site = "lugano"\n[sites.lugano]\n')
    monkeypatch.setenv(config.ENV_VAR, str(path))
    assert config.load().site == "lugano"


@pytest.mark.parametrize(
    ("body", "key", "reason"),
    [
        (
            "[exporter.slurm]\npoll_interval_seconds = 0\n",
            "exporter.slurm.poll_interval_seconds",
            "greater than 0",
        ),
        ("[exporter]\nlisten = 'everywhere'\n", "exporter.listen", "HOST:PORT"),
        ("[exporter]\ncollectors = ['slurm', 'nvidia']\n", "exporter.collectors", "nvidia"),
        ("[exporter.slurm]\nbackend = 'sacct'\n", "exporter.slurm.backend", "'cli'"),
        ("colour = 'red'\n", "colour", "unknown key"),
        ("site = 'geneva'\n[sites.zurich]\n", "(top level)", "geneva"),
        ("site = 'a b'\n", "site", "letters, digits"),
    ],
)
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
    assert config.from_mapping(defaults.model_dump()) == defaults
