"""The docs say what the code does: every derived file (runbook pages, the tables of
docs/alerts.md and docs/exporter.md, fixture copies) is what ``make generate`` writes,
each synopsis lists exactly the flags of the command's ``--help``, docs/runbooks.md lists
every ``[runbooks]`` key with its default, and docs/exporter.md joins GPU metrics to jobs
the way the dashboards do."""

from __future__ import annotations

import re
import runpy
import tomllib
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from gotthard.monitoring.shared import GPU_KEY
from gotthard.runbooks.settings import RunbooksConfig
from tests.support.cli import ROOT, gotthard

DOCS = ROOT / "docs"
GENERATE = ROOT / "scripts" / "generate.py"
#: ``[--flag]``, ``[--flag VALUE]`` or ``[--flag {a,b}]`` in a usage line or a synopsis.
_OPTION = re.compile(r"\[(--[A-Za-z][\w.-]*)(?: ([^\]]+))?\]")
_FENCE = re.compile(r"^```[a-z]*\n(.*?)^```", re.MULTILINE | re.DOTALL)

#: An option's value as a synopsis shows it: None (a switch), its choices, or "a value".
Shape = None | frozenset[str] | str


def code_block(page: Path, first_line: str) -> str:
    """The first fenced code block of *page* whose text starts with *first_line*."""
    for block in _FENCE.findall(page.read_text(encoding="utf-8")):
        if block.startswith(first_line):
            return str(block)
    pytest.fail(f"{page.name} has no code block starting with {first_line!r}", pytrace=False)


def _shape(value: str) -> Shape:
    """``""`` (a switch), ``{a,b}`` (--help's choices), ``a|b`` (a synopsis' choices) or
    another value."""
    if not value:
        return None
    if value.startswith("{"):
        return frozenset(value.strip("{}").split(","))
    if "|" in value:
        return frozenset(value.split("|"))
    return "a value"


def options(text: str) -> dict[str, Shape]:
    """Each ``[--flag ...]`` of *text* with the shape of its value."""
    return {flag: _shape(value) for flag, value in _OPTION.findall(text)}


def help_options(*command: str) -> dict[str, Shape]:
    """The options in the usage of ``gotthard COMMAND --help`` (``-h`` aside)."""
    result = gotthard(*command, "--help", timeout=60)
    assert result.returncode == 0, result.stderr
    usage = result.stdout.split("\n\n", 1)[0]
    return options(usage)


@pytest.fixture(scope="module")
def generate() -> dict[str, Any]:
    """scripts/generate.py, the generator ``make generate`` runs."""
    return runpy.run_path(str(GENERATE))


def test_derived_files_are_what_make_generate_writes(
    generate: dict[str, Any], tmp_path: Path
) -> None:
    assert generate["main"](["--out", str(tmp_path)]) == 0
    made = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert any(name.startswith("docs/runbooks/") for name in made)
    differ = [
        name
        for name in made
        if not (ROOT / name).is_file()
        or (ROOT / name).read_bytes() != (tmp_path / name).read_bytes()
    ]
    stale = generate["stale"](ROOT, dict.fromkeys(made))
    assert differ + stale == [], f"out of date: {', '.join(differ + stale)}; run make generate"


def test_a_page_without_its_region_markers_is_an_error(generate: dict[str, Any]) -> None:
    page = "# Alerts\n\n| Alert | Severity |\n"
    with pytest.raises(generate["GenerateError"], match=r"docs/alerts\.md: needs one region"):
        generate["fill_regions"]("docs/alerts.md", page, generate["REGIONS"]["docs/alerts.md"])


@pytest.mark.parametrize(
    ("page", "command", "synopsis"),
    [
        ("exporter.md", ("exporter",), "gotthard exporter "),
        ("runbooks.md", ("runbooks", "serve"), "gotthard [--config FILE] runbooks serve "),
        ("job.md", ("job", "report"), "gotthard job report "),
        ("job.md", ("job", "epilog"), "gotthard job epilog "),
        ("job.md", ("job", "digest"), "gotthard job digest "),
    ],
)
def test_each_synopsis_lists_exactly_the_flags_of_help(
    page: str, command: tuple[str, ...], synopsis: str
) -> None:
    documented = options(code_block(DOCS / page, synopsis).removeprefix(synopsis))
    actual = help_options(*command)
    assert sorted(set(actual) - set(documented)) == [], f"{page}: flags missing in the synopsis"
    assert sorted(set(documented) - set(actual)) == [], f"{page}: flags --help does not know"
    for flag, shape in actual.items():
        if isinstance(shape, frozenset):
            assert documented[flag] == shape, f"{page}: {flag} takes one of {sorted(shape)}"
        else:
            assert (documented[flag] is None) == (shape is None), f"{page}: {flag} {shape}"


def _model_keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    keys = set()
    for name, field in model.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            keys |= _model_keys(field.annotation, f"{prefix}{name}.")
        else:
            keys.add(prefix + name)
    return keys


def _doc_keys(table: dict[str, Any], prefix: str = "") -> set[str]:
    keys = set()
    for name, value in table.items():
        if isinstance(value, dict):
            keys |= _doc_keys(value, f"{prefix}{name}.")
        else:
            keys.add(prefix + name)
    return keys


def test_runbooks_md_lists_every_key_with_its_default() -> None:
    block = tomllib.loads(code_block(DOCS / "runbooks.md", "[runbooks]\n"))["runbooks"]
    assert sorted(_model_keys(RunbooksConfig) - _doc_keys(block)) == [], "keys not documented"
    assert sorted(_doc_keys(block) - _model_keys(RunbooksConfig)) == [], "unknown keys"
    assert RunbooksConfig.model_validate(block) == RunbooksConfig(), "a default differs"


def test_exporter_md_joins_gpu_metrics_to_jobs_as_the_dashboards_do() -> None:
    text = " ".join((DOCS / "exporter.md").read_text(encoding="utf-8").split())
    # gotthard_gpu_job_info is the "many" side; the reverse form fails on a GPU shared by two jobs
    assert (
        f"gotthard_gpu_job_info * on({GPU_KEY}) group_left gotthard_gpu_utilization_ratio" in text
    )
    assert not re.search(r"group_left\(job_id\) gotthard_gpu_job_info", text)
