"""Values of the pod policy's site parameters, checked before the policies see them.

A parameter of the wrong shape would read as "not set" in Rego and switch its check off
(``run_as_user = "MustRunAs"`` instead of a table): the values of ``data.gotthard.site.
admission`` (shipped, ``--data``, ``[policies.rules.ID.params]``) are checked here, and a bad
one is an input error naming the key. Parameters not listed keep their shipped type.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gotthard.policies.engine import PolicyError

ID_RULES = {
    "run_as_user": ("RunAsAny", "MustRunAs", "MustRunAsNonRoot"),
    "run_as_group": ("RunAsAny", "MustRunAs", "MayRunAs"),
    "supplemental_groups": ("RunAsAny", "MustRunAs", "MayRunAs"),
    "fs_group": ("RunAsAny", "MustRunAs", "MayRunAs"),
}
STRING_LISTS = (
    "allowed_repos",
    "denied_repos",
    "denied_tags",
    "required_limits",
    "required_requests",
    "required_drop_capabilities",
    "allowed_flexvolume_drivers",
    "allowed_sysctls",
    "forbidden_sysctls",
    "allowed_seccomp_types",
    "allowed_seccomp_localhost_profiles",
    "allowed_apparmor_localhost_profiles",
)
SECCOMP_TYPES = ("RuntimeDefault", "Localhost", "Unconfined")
_QUANTITY = re.compile(r"([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?")


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _problem(name: str, value: Any) -> str | None:
    """Why *value* is no value of parameter *name*, else None."""
    if name in ID_RULES:
        if not isinstance(value, Mapping) or value.get("rule") not in ID_RULES[name]:
            return f"must be a table with rule one of {', '.join(ID_RULES[name])}"
        ranges = value.get("ranges", [])
        if not isinstance(ranges, list) or not all(
            isinstance(r, Mapping) and _whole(r.get("min")) and _whole(r.get("max")) for r in ranges
        ):
            return "ranges must be a list of {min, max} whole numbers"
        return None
    if name in STRING_LISTS:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return "must be a list of strings"
        if name == "allowed_seccomp_types" and set(value) - set(SECCOMP_TYPES):
            return f"types must be among {', '.join(SECCOMP_TYPES)}"
        return None
    if name in ("max_limits", "max_requests"):
        if not isinstance(value, Mapping) or not all(
            (isinstance(v, str) and _QUANTITY.fullmatch(v))
            or (isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0)
            for v in value.values()
        ):
            return 'must map resource names to quantities (e.g. {cpu = "4", memory = "16Gi"})'
        return None
    if name == "require_read_only_root_filesystem" and not isinstance(value, bool):
        return "must be true or false"
    if name == "hostpath_allowlist":
        ok = isinstance(value, list) and all(
            isinstance(e, str)
            or (
                isinstance(e, Mapping)
                and isinstance(e.get("path"), str)
                and isinstance(e.get("read_only", False), bool)
                and set(e) <= {"path", "read_only"}
            )
            for e in value
        )
        return None if ok else "entries must be paths or {path, read_only}"
    return None


def check_site(site: Mapping[str, Any], sources: Mapping[str, str] | None = None) -> None:
    """Refuse a pod policy parameter of the wrong shape: a :class:`PolicyError` naming the
    key that set it (*sources*: parameter name -> ``policies.rules.ID.params.NAME``)."""
    admission = site.get("admission", {})
    if not isinstance(admission, Mapping):
        raise PolicyError("site.admission: must be a table")
    for name, value in admission.items():
        problem = _problem(str(name), value)
        if problem:
            where = (sources or {}).get(str(name), f"site.admission.{name}")
            raise PolicyError(f"{where}: {problem}")
