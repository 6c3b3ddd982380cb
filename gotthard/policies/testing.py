"""The policy test tables shipped with the package: input -> expected rule ids.

A table (``rego/tests/*.yml``) has ``policy``, optional ``data`` (deep-merged over the
shipped site data) and ``cases``: ``{name, rule, input, expect: [rule ids]}``. ``rule`` names
the rule a case exercises; every rule in ``rules.yml`` needs a deny case (its id in
``expect``) and an allow case (its id not in ``expect``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from gotthard.policies.engine import (
    EmbeddedEngine,
    Engine,
    PolicyError,
    build_data,
    evaluate,
    rego_dir,
)


@dataclass
class CaseResult:
    table: str
    name: str
    expected: list[str]
    got: list[str]
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and self.expected == self.got


def load_rules() -> list[dict[str, Any]]:
    return yaml.safe_load(rego_dir().joinpath("rules.yml").read_text(encoding="utf-8"))


def load_tables() -> dict[str, dict[str, Any]]:
    root = rego_dir().joinpath("tests")
    return {
        entry.name: yaml.safe_load(entry.read_text(encoding="utf-8"))
        for entry in sorted(root.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".yml")
    }


def coverage_problems(tables: dict[str, dict[str, Any]] | None = None) -> list[str]:
    tables = tables if tables is not None else load_tables()
    deny: set[str] = set()
    allow: set[str] = set()
    for table in tables.values():
        for case in table["cases"]:
            rule = case.get("rule")
            (deny if rule in case.get("expect", []) else allow).add(rule)
    problems = []
    for rule in load_rules():
        rid = rule["id"]
        if rid not in deny:
            problems.append(f"{rid}: no deny case")
        if rid not in allow:
            problems.append(f"{rid}: no allow case")
    return problems


def run_table(
    table_name: str, table: dict[str, Any], engine: Engine | None = None
) -> list[CaseResult]:
    engine = engine or EmbeddedEngine(build_data(table.get("data")))
    results = []
    for case in table["cases"]:
        expected = sorted(set(case.get("expect", [])))
        try:
            got = evaluate(engine, case["input"], policy=table["policy"], today=case.get("today"))
            ids = sorted({v.rule for v in got})
            results.append(CaseResult(table_name, case["name"], expected, ids))
        except PolicyError as err:
            results.append(CaseResult(table_name, case["name"], expected, [], str(err)))
    return results


def run_all() -> tuple[list[CaseResult], list[str]]:
    tables = load_tables()
    results: list[CaseResult] = []
    for name, table in tables.items():
        results.extend(run_table(name, table))
    return results, coverage_problems(tables)
