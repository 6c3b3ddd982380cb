#!/usr/bin/env python3
"""``make generate``: write every file of the repository that is derived from the code.

* ``docs/runbooks/<Alert>.md``: the page templates (gotthard/monitoring/runbooks/) at
  the default thresholds, each with its ``Automated steps:`` line from the runbook
  webhook's action registry (gotthard/runbooks/registry.py); pages of alerts that no
  longer exist are removed;
* docs/alerts.md: the threshold table, the alert index and the recording-rule table;
* docs/exporter.md: a metric table per collector, from the families each declares
  (:class:`gotthard.exporters.families.Desc`; the collectors come from the registry of
  areas, :mod:`gotthard.areas`), one of the exporter's own families, and the cardinality
  budget (series per role, measured by benchmarks/cardinality.py, against its budget),
  and the rename table of before 1.0 (:mod:`gotthard.exporters.names`);
* README.md: the exit statuses of every leaf command (:data:`gotthard.cli.FINDINGS`,
  over the commands the real parser has);
* docs/install.md: what each extra installs (pyproject.toml's optional dependencies) and
  which commands need which extra (:data:`gotthard.extras.NEEDS`);
* docs/deploy.md: the objects of each role's ``<role>.yaml``, from ``deploy render
  --target kubernetes`` of docs/site.example.toml;
* copies of package data that the tests read as fixtures (:data:`COPIES`).

A generated region of a hand-written page lies between two marker comments,
``<!-- generated: NAME (make generate; do not edit) -->`` and ``<!-- end generated: NAME
-->``; only what lies between them is rewritten. The tests run this into a temporary
directory (``--out DIR``) and compare the result with the tree.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gotthard import areas, cli, extras  # noqa: E402
from gotthard.exporters import families, names  # noqa: E402
from gotthard.monitoring import rules, runbook_pages, thresholds_cli  # noqa: E402

RUNBOOKS = "docs/runbooks"


class GenerateError(Exception):
    """A hand-written page lacks a region's markers."""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def metric_table(module: str) -> str:
    """The metric table of the families *module* declares, in declaration order."""
    lines = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    for desc in families.declared(areas.load(module)):
        labels = ", ".join(desc.labels)
        if desc.optional:
            optional = ", ".join(desc.optional)
            labels = f"{labels} [, {optional}]" if labels else f"[{optional}]"
        lines.append(f"| `{desc.name}` | {desc.kind} | {labels} | {_cell(desc.help)} |")
    return "\n".join(lines) + "\n"


def _cardinality_table() -> str:
    """The series of every role at the stated size (benchmarks/cardinality.py) and its budget."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "gotthard_cardinality", ROOT / "benchmarks" / "cardinality.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module.markdown(module.measure())


def _thresholds_table() -> str:
    return thresholds_cli.markdown_table(thresholds_cli.usage(rules.values_for(None)))


def exit_codes_table() -> str:
    """One row per leaf command of the real parser: what exit status 1 means for it."""
    lines = ["| command | 0 | 1 | 2 |", "|---|---|---|---|"]
    for path, _ in cli.leaves(cli.build_parser()):
        command = " ".join(path)
        finding = cli.FINDINGS.get(command, "never")
        lines.append(
            f"| `gotthard {command}` | success | {_cell(finding)} | usage, input, environment |"
        )
    return "\n".join(lines) + "\n"


def extras_table() -> str:
    """What each extra of pyproject.toml installs: its libraries, the extras it includes
    (named, not expanded) and the commands that need it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    own = project["project"]["name"]
    base = ", ".join(_requirement_name(r) for r in project["project"]["dependencies"])
    needed: dict[str, list[str]] = {}
    for command, (extra, _) in extras.NEEDS.items():
        needed.setdefault(extra, []).append(f"`gotthard {command}`")
    lines = [
        "| extra | installs | needed by |",
        "|---|---|---|",
        f"| (base) | {base} | the exporter, and every command not listed here |",
    ]
    for extra, requirements in project["project"]["optional-dependencies"].items():
        parts = []
        for requirement in requirements:
            if requirement.startswith(f"{own}["):
                included = requirement[len(own) + 1 :].split("]")[0].split(",")
                parts.append("the extras " + ", ".join(f"`{e}`" for e in included))
            else:
                parts.append(_requirement_name(requirement))
        commands = ", ".join(needed.get(extra, [])) or "-"
        lines.append(f"| `{extra}` | {', '.join(parts)} | {commands} |")
    return "\n".join(lines) + "\n"


def _requirement_name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0]


def objects_per_role_table() -> str:
    """The kinds of objects in each ``<role>.yaml`` that ``deploy render --target
    kubernetes`` writes for docs/site.example.toml."""
    import yaml

    from gotthard import config as configuration
    from gotthard.deploy.cli import render_files

    example = ROOT / "docs" / "site.example.toml"
    files = render_files("kubernetes", configuration.load(example), str(example), ROOT)
    from gotthard.deploy.roles import ROLES

    roles = sorted(role.name for role in ROLES if f"{role.name}.yaml" in files)
    lines = ["| role | objects in `<role>.yaml` |", "|---|---|"]
    for role in roles:
        kinds: dict[str, int] = {}
        for document in yaml.safe_load_all(files[f"{role}.yaml"]):
            if document:
                kinds[document["kind"]] = kinds.get(document["kind"], 0) + 1
        listed = ", ".join(f"{kind} (x{n})" if n > 1 else kind for kind, n in kinds.items())
        lines.append(f"| `{role}` | {listed} |")
    return "\n".join(lines) + "\n"


#: Page -> region name -> what fills it.
REGIONS: Mapping[str, Mapping[str, Callable[[], str]]] = {
    "README.md": {"exit-codes": exit_codes_table},
    "docs/install.md": {"extras": extras_table},
    "docs/deploy.md": {"objects-per-role": objects_per_role_table},
    "docs/alerts.md": {
        "thresholds": _thresholds_table,
        "alert-index": rules.alerts_markdown_table,
        "recording-rules": rules.recording_rules_markdown_table,
    },
    "docs/exporter.md": {
        "renames": names.markdown_table,
        "metrics-exporter": lambda: metric_table("gotthard.exporters.runtime"),
        "cardinality": _cardinality_table,
        **{
            f"metrics-{c.name}": lambda ref=c.metrics: metric_table(ref)
            for c in areas.COLLECTORS
            if c.metrics
        },
    },
}


def begin_marker(name: str) -> str:
    return f"<!-- generated: {name} (make generate; do not edit) -->"


def end_marker(name: str) -> str:
    return f"<!-- end generated: {name} -->"


def fill_regions(page: str, text: str, regions: Mapping[str, Callable[[], str]]) -> str:
    """*text* (the page *page*) with each region's body made again."""
    for name, make in regions.items():
        pattern = re.compile(
            rf"^({re.escape(begin_marker(name))}\n).*?^({re.escape(end_marker(name))})$",
            re.MULTILINE | re.DOTALL,
        )
        if len(pattern.findall(text)) != 1:
            raise GenerateError(
                f"{page}: needs one region {begin_marker(name)} ... {end_marker(name)}"
            )
        body = make()
        text = pattern.sub(lambda m, body=body: m.group(1) + body + m.group(2), text)
    return text


def derived(root: Path = ROOT) -> dict[str, bytes]:
    """Relative path -> content of every derived file, made from the code and the
    hand-written parts of the pages under *root*."""
    files: dict[str, bytes] = {
        f"{RUNBOOKS}/{name}": text.encode() for name, text in runbook_pages.render_pages().items()
    }
    for page, regions in REGIONS.items():
        text = (root / page).read_text(encoding="utf-8")
        files[page] = fill_regions(page, text, regions).encode()
    return files


def stale(root: Path, made: Mapping[str, bytes]) -> list[str]:
    """Generated files under *root* that nothing generates any more (runbook pages of
    alerts that are gone)."""
    pages = sorted(p.relative_to(root).as_posix() for p in (root / RUNBOOKS).glob("*.md"))
    return [page for page in pages if page not in made]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=ROOT, metavar="DIR", help="write here (default: the repository)"
    )
    args = parser.parse_args(argv)
    try:
        made = derived()
    except (GenerateError, OSError) as err:
        print(f"generate: {err}", file=sys.stderr)
        return 2
    for relative, content in made.items():
        path = args.out / relative
        if path.exists() and path.read_bytes() == content:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        print(f"wrote {relative}")
    if args.out.resolve() == ROOT:
        for relative in stale(ROOT, made):
            (ROOT / relative).unlink()
            print(f"removed {relative}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
