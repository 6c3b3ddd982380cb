"""The runbook registry: the actions, and alertname (plus label matchers) -> ordered steps.

:data:`ACTIONS` is the one table of actions: each :class:`ActionSpec` says which alert
labels the action reads its targets from (and how each is validated), what it does (the
text of the ``Automated steps:`` lines), how it runs, and which safety rules apply to it.
The engine dispatches through it; adding an action is one entry plus its run function.

A step names the action run while the alert fires and, optionally, the action run when
it resolves (``slurm.drain_node`` -> ``slurm.resume_node``). Targets come from the
alert's labels (``node``, ``namespace``, ``service``, ``target_site``, ``primary_site``,
``site``) and are validated before any action runs. Each runbook page in docs/runbooks/
states which steps are automated (``Automated steps:``), generated from
:func:`automated_steps_line`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from gotthard.runbooks import validate
from gotthard.runbooks.actions import Backends, Outcome
from gotthard.runbooks.validate import Alert

if TYPE_CHECKING:
    from gotthard.runbooks.settings import RunbooksConfig

log = logging.getLogger("gotthard.runbooks")

#: Checks one label value and returns the target (or raises :class:`validate.TargetError`).
Validator = Callable[[str, "RunbooksConfig"], str]
#: Runs an action on validated targets: (backends, targets by label, alert) -> outcome.
RunFunc = Callable[[Backends, Mapping[str, str], Alert], Outcome]


@dataclass(frozen=True)
class ActionSpec:
    """One runbook action: its targets, documentation, run function and safety rules."""

    name: str
    #: (label, validator) for each target the action reads from the alert's labels.
    targets: tuple[tuple[str, Validator], ...]
    #: What the action does, as it reads in an ``Automated steps:`` line.
    doc: str
    run: RunFunc
    #: Takes a node out of service: subject to the rate and blast-radius limits.
    removes_node: bool = False
    #: Puts a node back into service: runs only once the alert's ``repair_query`` confirms
    #: the repair (see :mod:`gotthard.runbooks.repair`).
    restores_node: bool = False
    #: How the action changes Slurm capacity: a drain is checked against the partition
    #: blast radius and remembered until the matching resume.
    slurm: Literal["drain", "resume"] | None = None
    #: A boolean ``[runbooks]`` setting that must be true for the action to run.
    needs_setting: str | None = None


def _plain(check: Callable[[str], str]) -> Validator:
    """A validator that needs no settings."""
    return lambda value, _settings: check(value)


def _slurm_node(value: str, settings: RunbooksConfig) -> str:
    return validate.slurm_node(value, strip_domain=settings.slurm_strip_domain)


_SLURM_NODE = ("node", _slurm_node)
_K8S_NODE = ("node", _plain(validate.k8s_node))


def _reason(alert: Alert) -> str:
    return f"gotthard runbook {alert.name} (fingerprint {alert.fingerprint})"


def _notify(backends: Backends, targets: Mapping[str, str], alert: Alert) -> Outcome:
    summary = alert.annotations.get("summary", "")
    log.warning("alert %s %s: %s", alert.name, alert.status, validate.shown(summary))
    return Outcome("ok", "logged")


def _node_pair(
    target: tuple[str, Validator],
    take: tuple[str, str, RunFunc],
    put_back: tuple[str, str, RunFunc],
    *,
    slurm: bool = False,
) -> tuple[ActionSpec, ActionSpec]:
    """An action that takes a node out of service (rate and blast-radius limits apply) and
    the one that puts it back (only on a confirmed repair); each given as (name, doc, run).
    With *slurm*, they change Slurm capacity (partition blast radius, drained nodes)."""
    name, doc, run = take
    out = ActionSpec(name, (target,), doc, run, removes_node=True, slurm="drain" if slurm else None)
    name, doc, run = put_back
    back = ActionSpec(
        name, (target,), doc, run, restores_node=True, slurm="resume" if slurm else None
    )
    return out, back


_ACTION_LIST: tuple[ActionSpec, ...] = (
    ActionSpec("notify", (), "log the alert to the audit log", _notify),
    *_node_pair(
        _SLURM_NODE,
        (
            "slurm.drain_node",
            "drain the node in Slurm",
            lambda b, t, a: b.slurm.drain(t["node"], a.name),
        ),
        ("slurm.resume_node", "resume it", lambda b, t, a: b.slurm.resume(t["node"], a.name)),
        slurm=True,
    ),
    *_node_pair(
        _K8S_NODE,
        (
            "k8s.cordon_node",
            "cordon the Kubernetes node",
            lambda b, t, a: b.kubernetes.cordon(t["node"], a.name),
        ),
        (
            "k8s.uncordon_node",
            "uncordon it",
            lambda b, t, a: b.kubernetes.uncordon(t["node"], a.name),
        ),
    ),
    ActionSpec(
        "dr.backup_now",
        (("namespace", _plain(validate.namespace)),),
        "start a Velero backup of the alert's namespace",
        lambda b, t, alert: b.dr.backup_now(t["namespace"], _reason(alert)),
    ),
    ActionSpec(
        "dr.failover",
        (("service", _plain(validate.service)), ("target_site", _plain(validate.site))),
        "request a failover of the alert's service",
        lambda b, t, alert: b.dr.failover(t["service"], t["target_site"], _reason(alert)),
        needs_setting="allow_failover",
    ),
    ActionSpec(
        "dr.record_placement",
        (
            ("service", _plain(validate.service)),
            ("primary_site", _plain(validate.site)),
            ("site", _plain(validate.site)),
        ),
        "record the placement decision (service, primary site, site) in the audit log",
        lambda b, t, alert: b.dr.record_placement(t["service"], t["primary_site"], t["site"]),
    ),
)
#: Every action by name.
ACTIONS: Mapping[str, ActionSpec] = {spec.name: spec for spec in _ACTION_LIST}


def action(name: str) -> ActionSpec:
    """The action called ``name``; ValueError for a name not in :data:`ACTIONS`."""
    try:
        return ACTIONS[name]
    except KeyError:
        raise ValueError(f"unknown runbook action {name!r}") from None


@dataclass(frozen=True)
class Step:
    action: str
    #: Run when the alert resolves (only for the event that ran ``action``'s kind).
    on_resolve: str | None = None

    def __post_init__(self) -> None:
        # Checked as RUNBOOKS is built, i.e. when this module is imported.
        action(self.action)
        if self.on_resolve is not None:
            action(self.on_resolve)


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
#: Only alerts that fire on what their series say (never on missing data) take nodes out
#: of service (tests/monitoring/test_alert_labels.py), and never a node in maintenance
#: (the engine skips an operator's drain or MAINT).
RUNBOOKS: tuple[Runbook, ...] = (
    # A lost GPU (the exporter's gotthard_gpu_lost 1, NVML's word): take the node out of service;
    # put it back when the alert resolves and its repair query confirms the GPU is healthy
    # again (not merely gone stale).
    Runbook("GPULost", (_NOTIFY, _DRAIN_RESUME, _CORDON_UNCORDON)),
    # Fatal XIDs and row-remap failures need a reset or an RMA: drain and cordon, and let
    # a human resume (the XID alert, new by the XID's own timestamp, resolves 10 minutes
    # after the event whether or not it is fixed).
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
    # The placement controller moved a service: the decision goes to the audit log.
    Runbook("DRServiceFailedOver", (_NOTIFY, Step("dr.record_placement"))),
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


def automated_steps_line(alertname: str) -> str:
    """The ``Automated steps:`` line of docs/runbooks/<alertname>.md."""
    books = [book for book in RUNBOOKS if book.alertname == alertname]
    if not books:
        return "Automated steps: none (no runbook in `gotthard/runbooks/registry.py`)."
    main = books[0]
    parts = []
    for step in main.steps:
        text = ACTIONS[step.action].doc
        if step.on_resolve:
            text += f" (and {ACTIONS[step.on_resolve].doc} when the alert resolves)"
        parts.append(text)
    line = "Automated steps: " + "; ".join(parts)
    if main.matchers:
        line += f", when the alert has the label(s) {', '.join(sorted(main.matchers))}"
    specs = [ACTIONS[step.action] for step in main.steps]
    for setting in dict.fromkeys(spec.needs_setting for spec in specs if spec.needs_setting):
        line += f" and `{setting}` is set"
    if any(spec.removes_node for spec in specs):
        line += "; node actions respect the rate and blast-radius limits"
    return line + " (`gotthard runbooks serve`; dry-run unless enforced)."
