#!/usr/bin/env python3
"""Compare ``policy eval`` with the Gatekeeper library's own test suites (a dev tool).

For each pod template of a checkout of open-policy-agent/gatekeeper-library (``--library
DIR``: its ``library/`` tree, read at run time; nothing of it is copied here) the
Constraint's parameters are expressed as ``[policies]`` settings, with only the rules
that express it enabled (and POD-INPUT-001, which every profile keeps), and each case of
the template's ``suite.yaml`` is judged by ``policy eval`` (``engine.judge``):

* agree: denied exactly when the suite expects violations;
* wrong: the suite expects violations and ``policy eval`` allows;
* stricter: the suite expects none and ``policy eval`` denies;
* unexpressible: no settings express the Constraint (a template with no mapping here, or
  parameters it cannot hold), or ``policy eval`` refuses the input (exit 2: a Pod without
  containers, rejected by contract).

Prints one JSON object: the counts, and every case that is not "agree" with its reason.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gotthard.policies import constraints
from gotthard.policies import engine as eng
from gotthard.policies.settings import PoliciesConfig

Rules = dict[str, dict[str, Any]]
#: Template kind -> parameters -> {rule id: settings}, or None when unexpressible.
Mapper = Callable[[dict[str, Any]], Rules | None]


def _ids(p: dict[str, Any]) -> Rules:
    names = {
        "runAsUser": "run_as_user",
        "runAsGroup": "run_as_group",
        "supplementalGroups": "supplemental_groups",
        "fsGroup": "fs_group",
    }
    params = {}
    for key, name in names.items():
        if key in p:
            value = p[key]
            params[name] = {
                "rule": value.get("rule", "RunAsAny"),
                "ranges": value.get("ranges", []),
            }
    return {"POD-IDS-001": {"params": params}}


def _fs_group(p: dict[str, Any]) -> Rules:
    return {
        "POD-IDS-001": {
            "params": {
                "fs_group": {"rule": p.get("rule", "RunAsAny"), "ranges": p.get("ranges", [])}
            }
        }
    }


def _sysctls(p: dict[str, Any]) -> Rules:
    allowed = p.get("allowedSysctls", ["*"])
    forbidden = p.get("forbiddenSysctls", [])
    params = {"allowed_sysctls": allowed, "forbidden_sysctls": forbidden}
    return {"POD-PSS-B-SYSCTLS-001": {"params": params}}


def _seccomp(p: dict[str, Any]) -> Rules | None:
    profiles = p.get("allowedProfiles", [])
    files = p.get("allowedLocalhostFiles", [])
    types: set[str] = set()
    localhost: list[str] = list(files)
    for profile in profiles:
        if profile == "*":
            return {}
        if profile in ("runtime/default", "docker/default", "RuntimeDefault"):
            types.add("RuntimeDefault")
        elif profile in ("unconfined", "Unconfined"):
            types.add("Unconfined")
        elif profile == "Localhost" or profile == "localhost/*":
            types.add("Localhost")
            localhost.append("*")
        elif profile.startswith("localhost/"):
            types.add("Localhost")
            localhost.append(profile.removeprefix("localhost/"))
        else:
            return None
    params = {
        "allowed_seccomp_types": sorted(types),
        "allowed_seccomp_localhost_profiles": localhost,
    }
    rules: Rules = {"POD-PSS-B-SECCOMP-001": {"params": params}}
    if "Unconfined" not in types:  # a profile must be set
        rules["POD-PSS-R-SECCOMP-001"] = {}
    return rules


def _apparmor(p: dict[str, Any]) -> Rules | None:
    profiles = p.get("allowedProfiles", [])
    if "runtime/default" not in profiles:
        return None
    names = [x.removeprefix("localhost/") for x in profiles if x.startswith("localhost/")]
    return {"POD-PSS-B-APPARMOR-001": {"params": {"allowed_apparmor_localhost_profiles": names}}}


def _flex(p: dict[str, Any]) -> Rules:
    drivers = [d["driver"] for d in p.get("allowedFlexVolumes", [])]
    return {"POD-FLEXVOL-001": {"params": {"allowed_flexvolume_drivers": drivers}}}


def _resources(kind: str) -> Mapper:
    def mapper(p: dict[str, Any]) -> Rules:
        required = [r for r in ("cpu", "memory") if str(p.get(r, "")) != "-1"]
        maxima = {r: str(p[r]) for r in required if r in p}
        params = {f"required_{kind}": required, f"max_{kind}": maxima}
        if kind == "requests":
            params["required_limits"] = []
        return {"POD-RES-001": {"params": params, **_exempt(p)}}

    return mapper


def _required_resources(p: dict[str, Any]) -> Rules:
    params = {"required_limits": p.get("limits", []), "required_requests": p.get("requests", [])}
    return {"POD-RES-001": {"params": params, **_exempt(p)}}


def _ephemeral(p: dict[str, Any]) -> Rules:
    limit = p.get("ephemeral-storage")
    params: dict[str, Any] = {"required_limits": ["ephemeral-storage"]}
    if limit:
        params["max_limits"] = {"ephemeral-storage": str(limit)}
    return {"POD-RES-001": {"params": params, **_exempt(p)}}


def _exempt(p: dict[str, Any]) -> dict[str, Any]:
    images = p.get("exemptImages", [])
    return {"exempt_images": images} if images else {}


def _tags(p: dict[str, Any]) -> Rules:
    return {"POD-IMG-002": {"params": {"denied_tags": p.get("tags", [])}, **_exempt(p)}}


def _allowed_repos(p: dict[str, Any]) -> Rules:
    params = {"allowed_registries": [], "allowed_repos": p.get("repos", [])}
    return {"POD-IMG-001": {"params": params}}


def _disallowed_repos(p: dict[str, Any]) -> Rules:
    params = {"allowed_registries": [], "allowed_repos": [""], "denied_repos": p.get("repos", [])}
    return {"POD-IMG-001": {"params": params}}


def _host_filesystem(p: dict[str, Any]) -> Rules:
    entries = [
        {"path": e["pathPrefix"], "read_only": bool(e.get("readOnly", False))}
        for e in p.get("allowedHostPaths", [])
    ]
    rules: Rules = {"POD-HOSTPATH-001": {"params": {"hostpath_allowlist": entries}}}
    return rules


def _capabilities(p: dict[str, Any]) -> Rules:
    rules: Rules = {}
    allowed = p.get("allowedCapabilities", [])
    if "*" not in allowed:
        rules["POD-PSS-B-CAPS-001"] = {"params": {"allowed_capabilities": allowed}}
    drops = p.get("requiredDropCapabilities", [])
    if drops:
        rules["POD-CAPS-001"] = {"params": {"required_drop_capabilities": drops}}
    return rules


def _host_network(p: dict[str, Any]) -> Rules:
    rules: Rules = {}
    if not p.get("hostNetwork", False):
        rules["POD-PSS-B-HOSTNS-001"] = {"params": {"pss_hostnetwork_by_label": False}}
    if "min" in p or "max" in p:
        ports = [f"{p.get('min', 0)}-{p.get('max', 65535)}"]
        rules["POD-PSS-B-HOSTPORTS-001"] = {"params": {"allowed_host_ports": ports}}
    return rules


def _volumes(p: dict[str, Any]) -> Rules | None:
    volumes = p.get("volumes", [])
    if "*" in volumes:
        return {}
    return {"POD-PSS-R-VOLUMES-001": {"params": {"allowed_volume_types": volumes}}}


def _proc_mount(p: dict[str, Any]) -> Rules | None:
    # Default also in a user namespace: the Restricted control
    return {"POD-PSS-R-PROCMOUNT-001": {}} if p.get("procMount", "Default") == "Default" else {}


def _plain(*rules: str) -> Mapper:
    return lambda p: {rule: {} for rule in rules}


MAPPERS: dict[str, Mapper] = {
    "K8sPSPAllowedUsers": _ids,
    "K8sPSPFSGroup": _fs_group,
    "K8sPSPForbiddenSysctls": _sysctls,
    "K8sPSPSeccomp": _seccomp,
    "K8sPSPSeccompV2": _seccomp,
    "K8sPSPAppArmor": _apparmor,
    "K8sPSPFlexVolumes": _flex,
    "K8sPSPReadOnlyRootFilesystem": lambda p: {
        "POD-ROFS-001": {"params": {"require_read_only_root_filesystem": True}}
    },
    "K8sContainerLimits": _resources("limits"),
    "K8sContainerRequests": _resources("requests"),
    "K8sRequiredResources": _required_resources,
    "K8sContainerEphemeralStorageLimit": _ephemeral,
    "K8sDisallowedTags": _tags,
    "K8sAllowedRepos": _allowed_repos,
    "K8sDisallowedRepos": _disallowed_repos,
    "K8sPSPHostFilesystem": _host_filesystem,
    "K8sPSPCapabilities": _capabilities,
    "K8sPSPHostNetworkingPorts": _host_network,
    "K8sPSPVolumeTypes": _volumes,
    "K8sPSPProcMount": _proc_mount,
    "K8sPSPPrivilegedContainer": _plain("POD-PRIV-001"),
    "K8sPSPHostNamespace": lambda p: {
        "POD-PSS-B-HOSTNS-001": {"params": {"pss_hostnetwork_by_label": False}}
    },
    "K8sPSPAllowPrivilegeEscalationContainer": _plain("POD-PSS-R-ESCALATION-001"),
    "K8sPSPHostProcess": _plain("POD-PSS-B-HOSTPROCESS-001"),
    "K8sPSPHostProbesLifecycle": _plain("POD-PSS-B-PROBEHOST-001"),
    "K8sImageDigests": lambda p: {
        "POD-IMG-003": {"params": {"require_image_digest": True}, **_exempt(p)}
    },
}
#: Kinds the pod policy judges.
POD_KINDS = set(eng.POLICIES["pod"].kinds)


def settings_for(rules: Rules) -> PoliciesConfig:
    every = {rid: {"enabled": False} for rid in constraints.catalogue()}
    every["POD-INPUT-001"] = {"enabled": True}
    for rid, setting in rules.items():
        every[rid] = {"enabled": True, **setting}
    return PoliciesConfig.model_validate({"profile": "baseline", "rules": every})


def expects_violations(assertions: list[dict[str, Any]]) -> bool:
    for assertion in assertions:
        value = assertion.get("violations")
        if value in ("yes", True) or (isinstance(value, int) and value > 0):
            return True
    return False


def judge(rules: Rules, obj: Any) -> tuple[str, list[str]]:
    try:
        data, _ = constraints.resolve(settings_for(rules), eng.build_data())
        verdict = eng.judge(eng.EmbeddedEngine(data), obj)
    except eng.PolicyError as err:
        return "error", [str(err)[:200]]
    return ("denied" if verdict.deny else "allowed"), sorted({v.rule for v in verdict.deny})


def compare(library: Path) -> dict[str, Any]:
    counts = {"agree": 0, "wrong": 0, "stricter": 0, "unexpressible": 0}
    notes: list[dict[str, Any]] = []
    for suite_path in sorted(library.glob("library/*/*/suite.yaml")):
        suite = yaml.safe_load(suite_path.read_text(encoding="utf-8"))
        base = suite_path.parent
        template = yaml.safe_load((base / "template.yaml").read_text(encoding="utf-8"))
        kind = template["spec"]["crd"]["spec"]["names"]["kind"]
        for test in suite.get("tests") or []:
            constraint = yaml.safe_load((base / test["constraint"]).read_text(encoding="utf-8"))
            spec = (constraint or {}).get("spec") or {}
            match = spec.get("match") or {}
            match_kinds = {k for group in match.get("kinds", []) for k in group.get("kinds", [])}
            if not match_kinds & POD_KINDS:
                continue  # not a pod template (Services, Ingresses, ...)
            mapper = MAPPERS.get(kind)
            params = spec.get("parameters") or {}
            try:
                rules = mapper(params) if mapper else None
            except (KeyError, TypeError, AttributeError):
                rules = None
            if rules and params.get("exemptImages"):
                for setting in rules.values():
                    setting.setdefault("exempt_images", list(params["exemptImages"]))
            for case in test.get("cases") or []:
                where = f"{base.name}/{test['name']}/{case['name']}"
                expected = expects_violations(case.get("assertions") or [])
                if rules is None:
                    counts["unexpressible"] += 1
                    notes.append({"case": where, "class": "unexpressible", "why": f"{kind}"})
                    continue
                obj = yaml.safe_load((base / case["object"]).read_text(encoding="utf-8"))
                if isinstance(obj, dict) and obj.get("kind") == "AdmissionReview":
                    obj = {**obj, "apiVersion": "admission.k8s.io/v1"}
                outcome, ids = judge(rules, obj)
                if outcome == "error":
                    cls = "unexpressible"
                elif (outcome == "denied") == expected:
                    cls = "agree"
                elif expected:
                    cls = "wrong"
                else:
                    cls = "stricter"
                counts[cls] += 1
                if cls != "agree":
                    notes.append({"case": where, "class": cls, "denied_by": ids})
    return {"counts": counts, "total": sum(counts.values()), "cases": notes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--library", required=True, type=Path, help="gatekeeper-library checkout")
    args = parser.parse_args(argv)
    if not (args.library / "library").is_dir():
        print(f"--library {args.library}: no library/ directory", file=sys.stderr)
        return 2
    print(json.dumps(compare(args.library), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
