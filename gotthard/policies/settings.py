"""``[policies]`` of the site file: the profile and per-rule constraints (pydantic only).

Rule ids and parameter names are checked against the shipped rule catalogue when the
settings are turned into policy data (:mod:`gotthard.policies.constraints`), so that this
model stays free of file reads.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from gotthard.base import Strict

PROFILES = ("baseline", "restricted", "hybrid-hpc")
Mode = Literal["enforce", "warn"]


class RuleSettings(Strict):
    """One rule's constraint; unset values come from the profile."""

    enabled: bool | None = None
    mode: Mode | None = None
    #: Values of the site keys the rule declares in ``params`` (rules.yml).
    params: dict[str, Any] = Field(default_factory=dict)
    #: When not empty, the rule applies only in these namespaces (Gatekeeper's
    #: ``match.namespaces``); exemptions still apply within them.
    include_namespaces: list[str] = Field(default_factory=list)
    exempt_namespaces: list[str] = Field(default_factory=list)
    #: ``key=value``: namespaces carrying that label (inventory or live labels).
    exempt_namespace_labels: list[str] = Field(default_factory=list)
    #: Image globs: ``*`` is any run of characters (``/`` included), ``?`` one character.
    exempt_images: list[str] = Field(default_factory=list)

    @field_validator("exempt_namespace_labels")
    @classmethod
    def _key_value(cls, labels: list[str]) -> list[str]:
        for label in labels:
            key, sep, _ = label.partition("=")
            if not sep or not key:
                raise ValueError(f"{label!r} is not key=value")
        return labels


class PoliciesConfig(Strict):
    #: baseline (PSS Baseline), restricted (Baseline + Restricted) or hybrid-hpc (site rules).
    profile: Literal["baseline", "restricted", "hybrid-hpc"] = "hybrid-hpc"
    #: Rule id -> constraint, applied over the profile.
    rules: dict[str, RuleSettings] = Field(default_factory=dict)
