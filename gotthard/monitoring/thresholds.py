"""Thresholds: what an alert compares against and a panel colours at, tunable per site.

Each component (:mod:`gotthard.monitoring.components`) declares its thresholds with a
name, a default, a unit and a description. ``[monitoring.thresholds]`` in the site file
overrides any of them by name (:class:`ThresholdValues`); rules, panels and runbook pages
are all built from the same values, so they cannot disagree.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

#: ``ratio``: a fraction between 0 and 1; ``count``: a whole number of things;
#: ``seconds``: a time compared with a series; ``duration``: how long a condition must
#: hold (an alert's ``for``), in whole minutes; ``per_second``: a rate.
Unit = Literal["ratio", "count", "seconds", "duration", "per_second"]


@dataclass(frozen=True)
class Threshold:
    name: str
    default: float
    unit: Unit
    description: str

    def check(self, value: object) -> float:
        """*value* as this threshold's number; ValueError saying why it does not fit."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"must be a number ({self.unit}), got {value!r}")
        number = float(value)
        if not math.isfinite(number) or number < 0:
            raise ValueError(f"must be a finite number >= 0 ({self.unit}), got {value!r}")
        if self.unit == "ratio" and number > 1:
            raise ValueError(f"is a ratio: must be between 0 and 1, got {value!r}")
        if self.unit == "count" and not number.is_integer():
            raise ValueError(f"is a count: must be a whole number, got {value!r}")
        if self.unit in ("seconds", "duration") and number == 0:
            raise ValueError(f"is in seconds: must be > 0, got {value!r}")
        if self.unit == "duration" and number % 60:
            raise ValueError(f"is a duration: must be whole minutes (seconds), got {value!r}")
        return number

    def perturbed(self, current: float) -> float:
        """A valid value other than *current*: changing to it shows who uses this one."""
        if self.unit == "count":
            return current + 1
        if self.unit == "duration":
            return current + 60
        return current / 2 if current else 0.5


def ratio(name: str, default: float, description: str) -> Threshold:
    return Threshold(name, default, "ratio", description)


def count(name: str, default: float, description: str) -> Threshold:
    return Threshold(name, default, "count", description)


def seconds(name: str, default: float, description: str) -> Threshold:
    return Threshold(name, default, "seconds", description)


def lasting(name: str, default: float, description: str) -> Threshold:
    """How long a condition must hold (an alert's ``for``), in seconds."""
    return Threshold(name, default, "duration", description)


def per_second(name: str, default: float, description: str) -> Threshold:
    return Threshold(name, default, "per_second", description)


class ThresholdValues(Mapping[str, float]):
    """The current value of every threshold: the defaults with the site's overrides."""

    def __init__(self, known: Iterable[Threshold], overrides: Mapping[str, object] = ()) -> None:
        self.known: dict[str, Threshold] = {t.name: t for t in known}
        self._values = {name: _plain(t.default) for name, t in self.known.items()}
        for name, value in dict(overrides).items():
            if name not in self.known:
                raise ValueError(
                    f"{name}: unknown threshold (known: {', '.join(sorted(self.known))})"
                )
            try:
                self._values[name] = _plain(self.known[name].check(value))
            except ValueError as err:
                raise ValueError(f"{name}: {err}") from None

    def __getitem__(self, key: str | Threshold) -> float:
        """The value of a threshold, by name or by its :class:`Threshold`."""
        return self._values[key.name if isinstance(key, Threshold) else key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def overridden(self, name: str, value: float) -> ThresholdValues:
        """These values with *name* set to *value*."""
        return ThresholdValues(self.known.values(), {**self._values, name: value})


def _plain(value: float) -> float:
    """A whole number as an int (``5``, not ``5.0``, in the JSON of a panel)."""
    return int(value) if float(value).is_integer() else float(value)


def num(value: float) -> str:
    """A threshold as PromQL and people write it: 0.1, 100, 1e-6, 93600."""
    if float(value).is_integer():
        return str(int(value))
    text = f"{value:g}"
    return text.replace("e-0", "e-").replace("e+0", "e+")


def pct(value: float) -> str:
    """A ratio as a percentage: 0.85 -> ``85%``, 0.125 -> ``12.5%``."""
    return f"{num(round(value * 100, 6))}%"


def duration(seconds: float) -> str:
    """Whole seconds as a Prometheus duration: ``30m``, ``26h``, ``90s``."""
    whole = int(seconds)
    for unit, size in (("h", 3600), ("m", 60)):
        if whole % size == 0:
            return f"{whole // size}{unit}"
    return f"{whole}s"
