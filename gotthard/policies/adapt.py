"""Re-targeting the shipped Rego for engines that call it differently.

The policies read a Pod-shaped ``input`` and ``data.gotthard``. An OPA admission webhook
gets an AdmissionReview, and Gatekeeper gives ``input.review`` and ``input.parameters``
and forbids ``data`` other than ``data.inventory`` and ``data.lib``. OPA's ``with input
as`` would adapt the input, but the embedded engine (regopy) cannot evaluate builtins under
``with``, and the adapted policies must be testable here; so the sources are re-targeted
instead: the package is renamed and references are replaced, token by token (strings and
comments are left alone). The rules themselves are never copied by hand, so every rule
added to the shipped policies flows through.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from gotthard.policies.engine import PolicyError

_TOKEN = re.compile(
    r'(?P<string>"(?:\\.|[^"\\\n])*"|`[^`]*`)'
    r"|(?P<comment>#[^\n]*)"
    r"|(?P<ref>(?<![\w.])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)"
)
_PACKAGE = re.compile(r"^package[ \t]+[\w.]+[ \t]*$", re.MULTILINE)


def rewrite(source: str, package: str, refs: Mapping[str, str]) -> str:
    """*source* as package *package*, each reference that starts with a key of *refs*
    (``input``, ``data.gotthard.site.admission``, ...) starting with its value instead."""
    if not _PACKAGE.search(source):
        raise PolicyError("Rego source without a package line")
    body = _PACKAGE.sub(f"package {package}", source, count=1)
    prefixes = sorted(refs, key=len, reverse=True)

    def replace(match: re.Match[str]) -> str:
        ref = match.group("ref")
        if ref is None:
            return match.group(0)
        for prefix in prefixes:
            if ref == prefix or ref.startswith(f"{prefix}."):
                return refs[prefix] + ref[len(prefix) :]
        return ref

    head, sep, rest = body.partition(f"package {package}")
    return head + sep + _TOKEN.sub(replace, rest)


def data_refs(source: str) -> set[str]:
    """The ``data.`` references of *source* (outside strings and comments)."""
    found = set()
    for match in _TOKEN.finditer(source):
        ref = match.group("ref")
        if ref and (ref == "data" or ref.startswith("data.")):
            found.add(ref)
    return found
