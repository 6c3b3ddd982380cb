"""Constraints as data: the rule catalogue, profiles and ``[policies]`` as policy data.

Python only turns settings into data; ``rego/constraints.rego`` applies them, so that the
CLI, the OPA REST path, the OPA bundle and the Gatekeeper output share one semantics.

* A profile (``profiles/<name>.yml``) enables the rules of its ``levels`` (enforced) and
  may set rules individually (``rules``, the keys of ``[policies.rules.ID]``).
* ``[policies.rules.ID]`` (site file) and ``policies.rules.ID`` of a ``--data`` file set a
  rule over the profile: ``enabled``, ``mode`` (enforce | warn), ``params`` (values of the
  site keys the rule declares in rules.yml ``params``; they replace those keys of
  ``data.gotthard.site``), ``include_namespaces`` (the rule applies only there),
  ``exempt_namespaces``, ``exempt_namespace_labels`` (key=value)
  and ``exempt_images`` (globs).
* The result is ``data.gotthard.constraints`` (see constraints.rego) plus the parameters
  merged into ``data.gotthard.site``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml
from pydantic import ValidationError

from gotthard.base import format_validation_error
from gotthard.policies import params
from gotthard.policies.engine import PolicyError, build_data, deep_merge, load_file
from gotthard.policies.settings import PROFILES, PoliciesConfig, RuleSettings
from gotthard.policies.testing import load_rules

#: The section of ``data.gotthard.site`` a policy's rule parameters live in.
SITE_SECTIONS = {
    "pod": "admission",
    "storageclass": "storage",
    "mesh": "mesh",
    "slurm-quota": "slurm_quota",
    "kube-bench": "kube_bench",
}
#: Level of a rule that rules.yml gives none.
DEFAULT_LEVEL = "site"


@dataclass(frozen=True)
class Rule:
    """One entry of rules.yml."""

    id: str
    policy: str
    title: str
    level: str = DEFAULT_LEVEL
    pss: str | None = None
    params: tuple[str, ...] = ()

    @property
    def section(self) -> str:
        return SITE_SECTIONS.get(self.policy, self.policy)


@dataclass
class RuleState:
    """A rule as the current settings make it."""

    rule: Rule
    enabled: bool
    mode: str
    params: dict[str, Any] = field(default_factory=dict)
    include_namespaces: list[str] = field(default_factory=list)
    exempt_namespaces: list[str] = field(default_factory=list)
    exempt_namespace_labels: list[str] = field(default_factory=list)
    exempt_images: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.rule.id,
            "policy": self.rule.policy,
            "title": self.rule.title,
            "level": self.rule.level,
            "pss": self.rule.pss,
            "enabled": self.enabled,
            "mode": self.mode,
            "params": self.params,
            "include": {"namespaces": self.include_namespaces},
            "exempt": {
                "namespaces": self.exempt_namespaces,
                "namespace_labels": self.exempt_namespace_labels,
                "images": self.exempt_images,
            },
        }


def catalogue() -> dict[str, Rule]:
    """rules.yml by id; ``level``, ``pss`` and ``params`` are optional there."""
    rules = {}
    for entry in load_rules():
        params = entry.get("params") or []
        rules[entry["id"]] = Rule(
            id=entry["id"],
            policy=entry["policy"],
            title=entry.get("title", ""),
            level=entry.get("level") or DEFAULT_LEVEL,
            pss=entry.get("pss") or None,
            params=tuple(params),
        )
    return rules


def load_profile(name: str, rules: Mapping[str, Rule]) -> PoliciesConfig:
    """A shipped profile as settings (its ``levels`` resolved to per-rule ``enabled`` over
    *rules*, the :func:`catalogue`)."""
    if name not in PROFILES:
        raise PolicyError(f"policies.profile: unknown profile {name!r}; known: {PROFILES}")
    path = resources.files("gotthard.policies").joinpath("profiles", f"{name}.yml")
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    levels = set(raw.get("levels") or [])
    states: dict[str, Any] = {rid: {"enabled": rule.level in levels} for rid, rule in rules.items()}
    for rid, settings in (raw.get("rules") or {}).items():
        states[rid] = {**states.get(rid, {}), **settings}
    return _validated({"profile": name, "rules": states}, f"profile {name}")


def _validated(raw: Any, source: str) -> PoliciesConfig:
    """*raw* as policy settings; a bad one is a :class:`PolicyError` naming *source* and
    each key (``policies.rules.POD-PRIV-001.mode: ...``)."""
    try:
        return PoliciesConfig.model_validate(raw)
    except ValidationError as err:
        raise PolicyError(format_validation_error(source, err, prefix="policies")) from err


def settings_from_data(override: Mapping[str, Any] | None, where: str) -> PoliciesConfig | None:
    """The ``policies`` mapping of a ``--data`` file, validated (None when absent)."""
    if not override or "policies" not in override:
        return None
    return _validated(override["policies"], where)


def combine(base: PoliciesConfig, over: PoliciesConfig | None) -> PoliciesConfig:
    """*over* (a data file) over *base* (the site file): its profile if it sets one, and its
    rule settings field by field."""
    if over is None:
        return base
    profile = over.profile if "profile" in over.model_fields_set else base.profile
    rules = {rid: s.model_dump(exclude_unset=True) for rid, s in base.rules.items()}
    for rid, settings in over.rules.items():
        rules[rid] = {**rules.get(rid, {}), **settings.model_dump(exclude_unset=True)}
    return _validated({"profile": profile, "rules": rules}, "policies")


def _check_ids(settings: PoliciesConfig, rules: Mapping[str, Rule], where: str) -> None:
    for rid, rule_settings in settings.rules.items():
        key = f"{where}.rules.{rid}"
        if rid not in rules:
            raise PolicyError(f"{key}: unknown rule; known: {', '.join(sorted(rules))}")
        declared = rules[rid].params
        for name in rule_settings.params:
            if name not in declared:
                allowed = ", ".join(declared) or "none"
                raise PolicyError(
                    f"{key}.params.{name}: {rid} has no parameter {name!r} (declared: {allowed})"
                )


def resolve(
    settings: PoliciesConfig, data: Mapping[str, Any], where: str = "policies"
) -> tuple[dict[str, Any], list[RuleState]]:
    """*data* (``data.gotthard``) with the parameters and ``constraints`` of *settings*
    over its profile, and every rule's resulting state."""
    rules = catalogue()
    _check_ids(settings, rules, where)
    profile = load_profile(settings.profile, rules)
    _check_ids(profile, rules, f"profile {settings.profile}")
    out = deep_merge(data, {})
    site = out.setdefault("site", {})
    set_by: dict[tuple[str, str], str] = {}
    states = []
    for rid, rule in rules.items():
        merged = _merge(profile.rules.get(rid), settings.rules.get(rid))
        for name, value in merged.params.items():
            key = (rule.section, name)
            if key in set_by and site[rule.section][name] != value:
                raise PolicyError(
                    f"{where}.rules.{rid}.params.{name}: conflicts with"
                    f" {set_by[key]} (both set site.{rule.section}.{name})"
                )
            site.setdefault(rule.section, {})[name] = value
            set_by[key] = f"{where}.rules.{rid}.params.{name}"
        states.append(
            RuleState(
                rule=rule,
                enabled=merged.enabled is not False,
                mode=merged.mode or "enforce",
                include_namespaces=list(merged.include_namespaces),
                exempt_namespaces=list(merged.exempt_namespaces),
                exempt_namespace_labels=list(merged.exempt_namespace_labels),
                exempt_images=list(merged.exempt_images),
            )
        )
    params.check_site(
        site, {name: source for (section, name), source in set_by.items() if section == "admission"}
    )
    for state in states:
        section = site.get(state.rule.section, {})
        state.params = {name: section.get(name) for name in state.rule.params}
    out["constraints"] = {state.rule.id: constraint_doc(state) for state in states}
    return out, states


def _merge(profile: RuleSettings | None, site: RuleSettings | None) -> RuleSettings:
    values: dict[str, Any] = {}
    for settings in (profile, site):
        if settings is not None:
            values.update(settings.model_dump(exclude_unset=True))
    return RuleSettings.model_validate(values)


def label_pairs(labels: list[str]) -> list[dict[str, str]]:
    pairs = []
    for label in labels:
        key, _, value = label.partition("=")
        pairs.append({"key": key, "value": value})
    return pairs


def constraint_doc(state: RuleState) -> dict[str, Any]:
    """One rule's entry of ``data.gotthard.constraints``."""
    return {
        "enabled": state.enabled,
        "mode": state.mode,
        "pss": state.rule.pss is not None,
        "include": {"namespaces": state.include_namespaces},
        "exempt": {
            "namespaces": state.exempt_namespaces,
            "namespace_labels": label_pairs(state.exempt_namespace_labels),
            "images": state.exempt_images,
        },
    }


def policy_data(
    data_path: str | None, extra: Mapping[str, Any] | None = None
) -> tuple[dict[str, Any], PoliciesConfig | None]:
    """``data.gotthard`` from the shipped data, a ``--data`` file and *extra*, and the
    file's ``policies`` settings (taken out of the data)."""
    override = load_file(data_path, what="data") if data_path else None
    settings = None
    if isinstance(override, Mapping):
        settings = settings_from_data(override, f"data {data_path}")
        override = {key: value for key, value in override.items() if key != "policies"}
    return build_data(override, extra), settings


@dataclass
class Constrained:
    """``data.gotthard`` with the constraints applied, the profile and every rule's state."""

    data: dict[str, Any]
    profile: str
    states: list[RuleState]


def constrained_data(
    site: PoliciesConfig, data_path: str | None, extra: Mapping[str, Any] | None = None
) -> Constrained:
    """The constraints of *site* (``[policies]``) and of the ``--data`` file over them."""
    data, from_file = policy_data(data_path, extra)
    settings = combine(site, from_file)
    constrained, states = resolve(settings, data)
    return Constrained(constrained, settings.profile, states)


def format_rules(profile: str, states: list[RuleState]) -> str:
    """``policy rules`` as text: one line per rule, then its parameters and exemptions."""
    lines = [f"profile {profile}"]
    width = max((len(state.rule.id) for state in states), default=0)
    pss_width = max((len(state.rule.pss or "-") for state in states), default=0)
    for state in states:
        rule = state.rule
        status = state.mode if state.enabled else "disabled"
        pss = rule.pss or "-"
        lines.append(
            f"{rule.id:<{width}}  {rule.level:<10} {status:<8} {pss:<{pss_width}}  {rule.title}"
        )
        for name, value in state.params.items():
            lines.append(f"{'':<{width}}  param {name} = {json.dumps(value)}")
        if state.include_namespaces:
            only = ", ".join(state.include_namespaces)
            lines.append(f"{'':<{width}}  only in namespaces: {only}")
        for key, values in state.as_dict()["exempt"].items():
            if values:
                lines.append(f"{'':<{width}}  exempt {key}: {', '.join(values)}")
    return "\n".join(lines)
