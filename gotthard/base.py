"""Building blocks of every settings model: the strict base, names, listen addresses.

Each area keeps its own settings models in its own folder and builds them from these,
so that "unknown key", "not a HOST:PORT" and "not a DNS label" read the same everywhere.
This module imports pydantic and the standard library only: every role loads it.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

#: A Prometheus duration: ``30s``, ``1m30s``, ``500ms``, ``2d``.
Duration = Annotated[str, Field(pattern=r"^([0-9]+(ms|s|m|h|d|w|y))+$")]


class Strict(BaseModel):
    """Unknown keys are errors (a typo must not silently disable a backup); immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def parse_listen(value: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[::1]:PORT`` for IPv6); raise ValueError when unusable."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{value!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def _listen(value: str) -> str:
    parse_listen(value)
    return value


def _name(value: str) -> str:
    if not value or not value.replace("-", "").replace("_", "").isalnum() or not value.isascii():
        raise ValueError("must be a non-empty name of letters, digits, '-' or '_'")
    return value


#: ``HOST:PORT`` a server listens on.
ListenAddress = Annotated[str, AfterValidator(_listen)]
#: A site or cluster name: it becomes a Prometheus label value and part of file names.
Name = Annotated[str, AfterValidator(_name)]
#: An RFC 1123 label as Kubernetes object names need it (kept short: names get suffixes).
DnsLabel = Annotated[
    str, Field(min_length=1, max_length=40, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
]
#: Durations in seconds, bounded so that a typo (``3600000``) is caught.
Seconds = Annotated[float, Field(gt=0, le=86400)]
LongSeconds = Annotated[float, Field(gt=0, le=7 * 86400)]


_LEADING_KEY = re.compile(r"([A-Za-z_][\w\[\].-]*): ")


def format_validation_error(source: str, err: ValidationError, prefix: str = "") -> str:
    """One line per problem, each naming its dotted key: ``  dr.drills[0].site: ...``."""
    lines = [f"{source}: invalid configuration"]
    for item in err.errors():
        parts = [prefix] if prefix else []
        for part in item["loc"]:
            # list positions read as in the site file's terms: ``dr.drills[0].site``
            if isinstance(part, int) and parts:
                parts[-1] += f"[{part}]"
            else:
                parts.append(str(part))
        key = ".".join(parts) or "(top level)"
        reason = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            reason = "unknown key"
        # a model-level check names its own key first: ``drills[0].site: unknown site``
        inner = _LEADING_KEY.match(reason)
        if inner and item["type"] == "value_error":
            key = f"{key}.{inner.group(1)}" if parts else inner.group(1)
            reason = reason[inner.end() :]
        lines.append(f"  {key}: {reason}")
    return "\n".join(lines)
