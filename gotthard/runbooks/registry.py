"""The runbook registry: alertname (plus label matchers) -> ordered steps.

A step names the action run while the alert fires and, optionally, the action run when
it resolves (``slurm.drain_node`` -> ``slurm.resume_node``). Targets come from the
alert's labels (``node``, ``namespace``, ``service``, ``target_site``) and are validated
before any action runs. Each runbook page in docs/runbooks/ states which steps are
automated (``Automated steps:``), generated from :func:`automated_steps_line`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

ActionName = Literal[
    "notify",
    "slurm.drain_node",
    "slurm.resume_node",
    "k8s.cordon_node",
    "k8s.uncordon_node",
    "dr.backup_now",
    "dr.failover",
]
ACTIONS: tuple[ActionName, ...] = (
    "notify",
    "slurm.drain_node",
    "slurm.resume_node",
    "k8s.cordon_node",
    "k8s.uncordon_node",
    "dr.backup_now",
    "dr.failover",
)
#: Actions that take a node out of service: subject to the rate and blast-radius limits.
NODE_REMOVING: frozenset[str] = frozenset({"slurm.drain_node", "k8s.cordon_node"})
#: Labels each action reads its targets from.
TARGET_LABELS: Mapping[str, tuple[str, ...]] = {
    "notify": (),
    "slurm.drain_node": ("node",),
    "slurm.resume_node": ("node",),
    "k8s.cordon_node": ("node",),
    "k8s.uncordon_node": ("node",),
    "dr.backup_now": ("namespace",),
    "dr.failover": ("service", "target_site"),
}


@dataclass(frozen=True)
class Step:
    action: ActionName
    #: Run when the alert resolves (only for the event that ran ``action``'s kind).
    on_resolve: ActionName | None = None


@dataclass(frozen=True)
class Runbook:
    alertname: str
    steps: tuple[Step, ...]
    #: label -> regular expression that the label's value must match in full
    matchers: Mapping[str, str] = field(default_factory=dict)

    def matches(self, labels: Mapping[str, str]) -> bool:
        if labels.get("alertname") != self.alertname:
            return False
        return all(
            re.fullmatch(pattern, labels.get(label, "")) is not None
            for label, pattern in self.matchers.items()
        )


_NOTIFY = Step("notify")
_DRAIN_RESUME = Step("slurm.drain_node", on_resolve="slurm.resume_node")
_CORDON_UNCORDON = Step("k8s.cordon_node", on_resolve="k8s.uncordon_node")
_DRAIN = Step("slurm.drain_node")
_CORDON = Step("k8s.cordon_node")

#: First match wins. Alerts without a runbook are audited as such and otherwise ignored.
RUNBOOKS: tuple[Runbook, ...] = (
    # A lost GPU: take the node out of service; the alert resolves only when the GPU is
    # back with readings, so the node is put back then.
    Runbook("GPULost", (_NOTIFY, _DRAIN_RESUME, _CORDON_UNCORDON)),
    # Fatal XIDs and row-remap failures need a reset or an RMA: drain and cordon, and let
    # a human resume (the XID alert resolves after 10 minutes whether or not it is fixed).
    Runbook("GPUFatalXid", (_NOTIFY, _DRAIN, _CORDON)),
    Runbook("GPURowRemapFailure", (_NOTIFY, _DRAIN, _CORDON)),
    # A node without its high-speed link cannot run multi-node jobs.
    Runbook("SlingshotLinkDown", (_NOTIFY, _DRAIN_RESUME)),
    # Backups late for a namespace: take one now.
    Runbook("DRBackupTooOld", (_NOTIFY, Step("dr.backup_now")), {"namespace": ".+"}),
    Runbook("DRBackupTooOld", (_NOTIFY,)),
    # A failover only where the alert names the service and the target site, and only
    # when the configuration allows it (``allow_failover``).
    Runbook(
        "DRSiteUnhealthy",
        (_NOTIFY, Step("dr.failover")),
        {"service": ".+", "target_site": ".+"},
    ),
    Runbook("DRSiteUnhealthy", (_NOTIFY,)),
    Runbook("SlurmControllerDown", (_NOTIFY,)),
    Runbook("SlurmNodesUnavailable", (_NOTIFY,)),
    Runbook("GPUUncorrectableECCErrors", (_NOTIFY,)),
    Runbook("LustreOSTFillCritical", (_NOTIFY,)),
)


def find(labels: Mapping[str, str], runbooks: tuple[Runbook, ...] = RUNBOOKS) -> Runbook | None:
    for runbook in runbooks:
        if runbook.matches(labels):
            return runbook
    return None


_STEP_TEXT: Mapping[str, str] = {
    "notify": "log the alert to the audit log",
    "slurm.drain_node": "drain the node in Slurm",
    "slurm.resume_node": "resume it",
    "k8s.cordon_node": "cordon the Kubernetes node",
    "k8s.uncordon_node": "uncordon it",
    "dr.backup_now": "start a Velero backup of the alert's namespace",
    "dr.failover": "request a failover of the alert's service",
}


def automated_steps_line(alertname: str) -> str:
    """The ``Automated steps:`` line of docs/runbooks/<alertname>.md."""
    books = [book for book in RUNBOOKS if book.alertname == alertname]
    if not books:
        return "Automated steps: none (no runbook in `gotthard/runbooks/registry.py`)."
    main = books[0]
    parts = []
    for step in main.steps:
        text = _STEP_TEXT[step.action]
        if step.on_resolve:
            text += f" (and {_STEP_TEXT[step.on_resolve]} when the alert resolves)"
        parts.append(text)
    line = "Automated steps: " + "; ".join(parts)
    if main.matchers:
        line += f", when the alert has the label(s) {', '.join(sorted(main.matchers))}"
    if any(step.action == "dr.failover" for step in main.steps):
        line += " and `allow_failover` is set"
    if any(step.action in NODE_REMOVING for step in main.steps):
        line += "; node actions respect the rate and blast-radius limits"
    return line + " (`gotthard runbooks serve`; dry-run unless enforced)."
