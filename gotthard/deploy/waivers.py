"""The policy waivers the rendered manifests need, as data with their reasons.

Gotthard's own pod policies (``gotthard policy eval``) deny hostPath volumes outside an
allow-list, images from registries the site does not list, and (Pod Security Standards
rules) hostPath and hostPID at all. The node exporter reads the host, and the image
comes from the registry ``[deploy.kubernetes]`` names, so the Kubernetes output carries
``waivers/policy-data.yml``: a ``--data`` file that admits exactly those paths and that
registry on top of the shipped site values (lists replace, so the shipped entries are
repeated), exempts the host-access namespace from the PSS rules its host access breaks,
and switches the restricted rules on for everything else; each waiver with its reason.
It sits in a sub-directory, out of the way of ``kubectl apply -f DIR``.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from gotthard.deploy import kubernetes as k8s
from gotthard.deploy.settings import KubernetesDeploy
from gotthard.policies.engine import shipped_site

WAIVERS_FILE = "waivers/policy-data.yml"


@dataclass(frozen=True)
class Waiver:
    """One value admitted beyond the site's policy data, and why."""

    key: str
    value: str
    workload: str
    reason: str


def waivers(settings: KubernetesDeploy) -> list[Waiver]:
    node = k8s.NODE_EXPORTER.full_name
    found = [
        Waiver(
            "hostpath_allowlist",
            "/proc",
            node,
            "read-only: GPU process PIDs -> Slurm jobs (/proc/<pid>/cgroup), node counters",
        ),
        Waiver(
            "hostpath_allowlist",
            "/sys",
            node,
            "read-only: Slingshot and Lustre counters, GPU topology",
        ),
        Waiver(
            "hostpath_allowlist",
            k8s.POD_RESOURCES_DIR,
            node,
            "read-only: the kubelet pod-resources socket names the pod holding each GPU",
        ),
    ]
    if settings.slurm_auth == "munge":
        slurm = f"{k8s.SLURM_EXPORTER.full_name}, {k8s.RUNBOOKS.full_name}"
        found += [
            Waiver(
                "hostpath_allowlist",
                k8s.MUNGE_DIR,
                slurm,
                "read-only: munged's socket authenticates squeue/sinfo/scontrol",
            ),
            Waiver(
                "hostpath_allowlist",
                k8s.SLURM_CONF_DIR,
                slurm,
                "read-only: slurm.conf names the controller",
            ),
        ]
    found.append(
        Waiver(
            "allowed_registries",
            settings.image_registry,
            "every workload",
            "the registry [deploy.kubernetes] image_registry names for the Gotthard image",
        )
    )
    slurm_registry = k8s.slurm_image(settings).rpartition("/")[0]
    if slurm_registry and slurm_registry != settings.image_registry:
        found.append(
            Waiver(
                "allowed_registries",
                slurm_registry,
                "the workloads that run Slurm commands",
                "the registry of [deploy.kubernetes] slurm_image (the -slurm variant)",
            )
        )
    return found


def render(settings: KubernetesDeploy) -> dict[str, str]:
    """``waivers/policy-data.yml``: pass it to ``gotthard policy eval --data``."""
    shipped = shipped_site().get("admission", {})
    found = waivers(settings)
    lines = [
        "# Waivers of Gotthard's pod policies for the rendered manifests, as policy data:",
        f"#   gotthard policy eval --data {WAIVERS_FILE} --input <manifest>",
        "# Lists replace the shipped ones, so these repeat the shipped entries first.",
        "site:",
        "  admission:",
    ]
    for key in ("hostpath_allowlist", "allowed_registries"):
        lines.append(f"    {key}:")
        mine = [w for w in found if w.key == key]
        waived = {w.value for w in mine}
        for value in shipped.get(key, []):
            if value not in waived:
                lines.append(f"      - {yaml.safe_dump(value).splitlines()[0]}")
        for waiver in mine:
            lines.append(f"      # {waiver.workload}: {waiver.reason}")
            lines.append(f"      - {yaml.safe_dump(waiver.value).splitlines()[0]}")
    lines += _rule_lines(settings)
    return {WAIVERS_FILE: "\n".join(lines) + "\n"}


#: Pod Security Standards rules of Gotthard's policies and why the host-access namespace
#: is exempt from them (None: no exemption). The restricted ones are switched on: the
#: manifests are held to the restricted profile wherever they can meet it.
PSS_RULES: dict[str, str | None] = {
    "POD-PSS-B-HOSTPATH-001": "the node exporter reads /proc, /sys and the kubelet socket",
    "POD-PSS-R-VOLUMES-001": "hostPath is not a restricted volume type (same volumes)",
    "POD-PSS-R-ESCALATION-001": None,
    "POD-PSS-R-NONROOT-001": None,
    "POD-PSS-R-NONROOTUSER-001": None,
    "POD-PSS-R-SECCOMP-001": None,
    "POD-PSS-R-CAPS-001": None,
}
HOST_PID_RULE = "POD-PSS-B-HOSTNS-001"


def _rule_lines(settings: KubernetesDeploy) -> list[str]:
    """``policies.rules``: the restricted rules on, the host-access namespace exempt
    from the rules its host access breaks."""
    rules = dict(PSS_RULES)
    if settings.host_pid:
        rules[HOST_PID_RULE] = "hostPID: GPU process PIDs -> Slurm jobs ([deploy.kubernetes])"
    lines = ["policies:", "  rules:"]
    for rule, reason in rules.items():
        lines.append(f"    {rule}:")
        if rule.startswith("POD-PSS-R-"):
            lines.append("      enabled: true")
        if reason:
            lines.append(f"      # {settings.node_namespace}: {reason}")
            lines.append(f"      exempt_namespaces: [{settings.node_namespace}]")
    return lines
