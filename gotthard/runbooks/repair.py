"""Repair confirmation: a node goes back into service only when its failure is fixed.

An alert whose runbook puts a node back into service when it resolves (``resume``,
``uncordon``) carries the annotation ``repair_query``: PromQL that returns a series only
while the failed thing is healthy again, with ``$labels.NAME`` placeholders for the
alert's labels, e.g. ``gotthard_gpu_health{instance="$labels.instance"} == 1``. A
resolved alert alone proves nothing: it also resolves when the failing series merely
went stale (an exporter restart, a node reboot, a device that vanished).

:meth:`RepairCheck.unconfirmed` fills in the labels and asks Prometheus. Every answer
other than "at least one series" means "not confirmed": no query, a label the alert
lacks, an empty result (not repaired, or only stale), an error, or an unreachable or
slow Prometheus. Label values are escaped for the PromQL string literal that encloses
the placeholder; a placeholder outside a string literal makes the query invalid. The
query travels as an HTTP form field, never through a shell.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from gotthard.prometheus import Prometheus, PrometheusError
from gotthard.runbooks.validate import Alert, shown

#: The annotation holding the repair query.
REPAIR_ANNOTATION = "repair_query"
#: ``$labels.NAME``: replaced by the value of the alert's label NAME.
PLACEHOLDER = re.compile(r"\$labels\.([A-Za-z_][A-Za-z0-9_]*)")
_QUOTES = "\"'`"
#: Characters written as an escape inside a PromQL string literal.
_NAMED_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


class RepairError(ValueError):
    """The repair query cannot be filled in; the message says why."""


def escape(value: str, quote: str) -> str:
    """*value* as the inside of a PromQL string literal delimited by *quote*."""
    out = []
    for char in value:
        if char in _NAMED_ESCAPES:
            out.append(_NAMED_ESCAPES[char])
        elif char == quote:
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    return "".join(out)


def render(template: str, labels: Mapping[str, str]) -> str:
    """*template* with every ``$labels.NAME`` replaced by the escaped label value.

    A placeholder must sit inside a ``"..."`` or ``'...'`` string literal (a raw
    backtick string cannot escape its delimiter)."""
    out: list[str] = []
    quote = ""  # the delimiter of the string literal being read, "" outside one
    index = 0
    while index < len(template):
        char = template[index]
        match = PLACEHOLDER.match(template, index) if char == "$" else None
        if match is not None:
            if quote not in ('"', "'"):
                where = "a raw string" if quote else "a string literal"
                raise RepairError(f"placeholder {match[0]} is not inside {where} in quotes")
            value = labels.get(match[1])
            if value is None:
                raise RepairError(f"the alert has no {match[1]!r} label for {match[0]}")
            out.append(escape(value, quote))
            index = match.end()
            continue
        if quote and quote != "`" and char == "\\":
            out.append(template[index : index + 2])  # an escape: the next character is data
            index += 2
            continue
        if not quote and char in _QUOTES:
            quote = char
        elif char == quote:
            quote = ""
        out.append(char)
        index += 1
    return "".join(out)


class RepairCheck:
    """Confirms repairs against the Prometheus at *url* (empty: never confirmed)."""

    def __init__(self, url: str, timeout: float) -> None:
        self.url = url
        self._query = Prometheus(url, timeout).query

    def unconfirmed(self, alert: Alert) -> str | None:
        """None when *alert*'s ``repair_query`` returns a series; otherwise why not."""
        template = alert.annotations.get(REPAIR_ANNOTATION, "").strip()
        if not template:
            return f"the alert has no {REPAIR_ANNOTATION} annotation: the repair is unconfirmed"
        if not self.url:
            return "no Prometheus configured to confirm the repair"
        try:
            expr = render(template, alert.labels)
        except RepairError as err:
            return f"invalid {REPAIR_ANNOTATION}: {err}"
        try:
            kind, result = self._query(expr)
        except PrometheusError as err:
            return f"repair not confirmed: Prometheus {self.url}: {shown(str(err))}"
        except Exception as err:  # any other failure of the answer also confirms nothing
            return f"repair not confirmed: Prometheus {self.url}: {type(err).__name__}"
        if kind != "vector":
            return f"invalid {REPAIR_ANNOTATION}: it returns a {kind}, not an instant vector"
        if not result:
            return (
                f"repair not confirmed: {shown(expr)} returns no series"
                " (still failing, or its series only went stale)"
            )
        return None
