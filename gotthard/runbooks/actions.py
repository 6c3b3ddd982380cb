"""The actions: Slurm through ``scontrol``/``sinfo`` (argv lists, never a shell, with
timeouts), Kubernetes through the official client, DR through :mod:`gotthard.dr.api`.

Each action returns an :class:`Outcome`; it raises only for failures, which the engine
turns into a ``failed`` decision.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from gotthard import slurm_state
from gotthard.runbooks.settings import RunbooksConfig
from gotthard.site import KubeAccess

if TYPE_CHECKING:
    from gotthard.config import Config

#: Set on a node that a runbook cordoned, so that only those nodes are uncordoned.
CORDON_ANNOTATION = "gotthard.io/cordoned-by-runbook"

Result = Literal["ok", "noop", "skipped"]


class ActionError(Exception):
    """An action failed; the message says why (no secrets, no raw label values)."""


@dataclass(frozen=True)
class Outcome:
    result: Result
    detail: str


@dataclass(frozen=True)
class SlurmNode:
    name: str
    partitions: frozenset[str]
    #: Base state and flags, as :func:`gotthard.slurm_state.normalize` gives them.
    base: str
    flags: tuple[str, ...]
    reason: str

    @classmethod
    def parse(cls, name: str, partitions: frozenset[str], state: str, reason: str) -> SlurmNode:
        """A node from sinfo's ``%T`` state and ``%E`` reason (``none`` for no reason)."""
        try:
            base, flags = slurm_state.normalize(state)
        except ValueError:  # not a state sinfo prints: nothing is known about the node
            base, flags = "unknown", ()
        return cls(name, partitions, base, flags, reason if reason != "none" else "")

    @property
    def state(self) -> str:
        """The one state sinfo's long form shows (``drained``, ``idle``, ...)."""
        return slurm_state.effective_state(self.base, self.flags)

    @property
    def unavailable(self) -> bool:
        return slurm_state.is_unavailable(self.base, self.flags)


def slurm_reason(alertname: str) -> str:
    """The drain reason of the *alertname* runbook; resume acts only on this exact reason."""
    return f"{slurm_state.DRAIN_REASON_PREFIX}{alertname}"


class SlurmActions:
    """``scontrol``/``sinfo`` on one cluster, whose ``slurm.conf`` the site model names."""

    def __init__(self, settings: RunbooksConfig, slurm_conf: str = "") -> None:
        self.settings = settings
        self.slurm_conf = slurm_conf

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        return env

    def _run(self, argv: Sequence[str]) -> str:
        """Run ``argv`` (a list: no shell is ever involved) with the action timeout."""
        timeout = self.settings.action_timeout_seconds
        try:
            result = subprocess.run(
                list(argv),
                capture_output=True,
                text=True,
                env=self._env(),
                timeout=timeout,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise ActionError(f"{argv[0]} {argv[1]} timed out after {timeout:g}s") from None
        except OSError as err:
            raise ActionError(f"cannot run {argv[0]}: {err.strerror or err}") from None
        if result.returncode != 0:
            message = (result.stderr or result.stdout).strip().splitlines()
            last = message[-1][:300] if message else ""
            raise ActionError(f"{argv[0]} {argv[1]} exited {result.returncode}: {last}")
        return result.stdout

    def inventory(self) -> dict[str, SlurmNode]:
        """Every node with its partitions, state and reason (``sinfo -N``)."""
        out = self._run([self.settings.sinfo_path, "-h", "-N", "-o", "%N|%P|%T|%E"])
        found: dict[str, tuple[set[str], str, str]] = {}
        for line in out.splitlines():
            fields = line.split("|", 3)
            if len(fields) != 4:
                continue
            name, partition, state, reason = (f.strip() for f in fields)
            entry = found.setdefault(name, (set(), state, reason))
            entry[0].add(partition.rstrip("*"))
        return {
            name: SlurmNode.parse(name, frozenset(parts), state, reason)
            for name, (parts, state, reason) in found.items()
        }

    def node(self, name: str) -> SlurmNode | None:
        out = self._run([self.settings.sinfo_path, "-h", "-N", "-n", name, "-o", "%N|%P|%T|%E"])
        parts: set[str] = set()
        state = reason = ""
        for line in out.splitlines():
            fields = line.split("|", 3)
            if len(fields) == 4 and fields[0].strip() == name:
                parts.add(fields[1].strip().rstrip("*"))
                state, reason = fields[2].strip(), fields[3].strip()
        if not parts:
            return None
        return SlurmNode.parse(name, frozenset(parts), state, reason)

    def drain(self, name: str, alertname: str) -> Outcome:
        reason = slurm_reason(alertname)
        current = self.node(name)
        if current is None:
            raise ActionError(f"node {name} is not known to Slurm")
        if current.unavailable and current.reason == reason:
            return Outcome("noop", f"{name} already {current.state} with reason {reason!r}")
        self._run(
            [
                self.settings.scontrol_path,
                "update",
                f"NodeName={name}",
                "State=DRAIN",
                f"Reason={reason}",
            ]
        )
        return Outcome("ok", f"drained {name} with reason {reason!r}")

    def resume(self, name: str, alertname: str) -> Outcome:
        reason = slurm_reason(alertname)
        current = self.node(name)
        if current is None:
            raise ActionError(f"node {name} is not known to Slurm")
        if current.reason != reason:
            # Drained by someone else, for another reason, or already resumed: not ours.
            return Outcome(
                "skipped",
                f"{name} is {current.state} with reason {current.reason!r}, not {reason!r}:"
                " left as it is",
            )
        self._run([self.settings.scontrol_path, "update", f"NodeName={name}", "State=RESUME"])
        return Outcome("ok", f"resumed {name}")


class KubernetesActions:
    """Cordon/uncordon on one cluster's Kubernetes API (``access`` from the site model;
    ``None``: the cluster has no Kubernetes, and every node action fails saying so)."""

    def __init__(
        self,
        settings: RunbooksConfig,
        api_client: Any | None = None,
        *,
        access: KubeAccess | None = None,
        where: str = "this cluster",
    ) -> None:
        self.settings = settings
        self._api_client = api_client
        self.access = access
        self.where = where
        self._core: Any | None = None

    def _api(self) -> Any:
        if self._core is None:
            from kubernetes import client

            from gotthard.kube import KubeError, client_for

            api_client = self._api_client
            if api_client is None:
                if self.access is None:
                    raise ActionError(f"{self.where}: no Kubernetes access configured")
                try:
                    api_client = client_for(self.access, self.where)
                except KubeError as err:
                    raise ActionError(str(err)) from None
            self._core = client.CoreV1Api(api_client)
        return self._core

    def _call(self, what: str, func: Any, *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return func(*args, _request_timeout=self.settings.kubernetes_timeout_seconds, **kwargs)
        except ApiException as err:
            raise ActionError(f"Kubernetes {what}: HTTP {err.status} {err.reason}") from None
        except Exception as err:  # urllib3 errors, timeouts
            raise ActionError(f"Kubernetes {what}: {type(err).__name__}: {err}") from None

    def _read(self, name: str) -> Mapping[str, Any]:
        api = self._api()
        node = self._call(f"read node {name}", api.read_node, name)
        return api.api_client.sanitize_for_serialization(node) or {}

    def _set_cordon(self, name: str, alertname: str | None) -> None:
        """Cordon ``name`` and mark it as the ``alertname`` runbook's, or (None) undo both."""
        body = {
            # null removes the field in a merge patch
            "spec": {"unschedulable": True if alertname is not None else None},
            "metadata": {"annotations": {CORDON_ANNOTATION: alertname}},
        }
        api = self._api()
        self._call(
            f"patch node {name}",
            api.patch_node,
            name,
            body,
            _content_type="application/merge-patch+json",
        )

    def cordon(self, name: str, alertname: str) -> Outcome:
        node = self._read(name)
        if (node.get("spec") or {}).get("unschedulable"):
            return Outcome("noop", f"{name} is already cordoned")
        self._set_cordon(name, alertname)
        return Outcome("ok", f"cordoned {name}")

    def uncordon(self, name: str, alertname: str) -> Outcome:
        node = self._read(name)
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        if annotations.get(CORDON_ANNOTATION) != alertname:
            return Outcome("skipped", f"{name} was not cordoned by the {alertname} runbook")
        self._set_cordon(name, None)
        return Outcome("ok", f"uncordoned {name}")


class DrActions:
    """Delegates to :mod:`gotthard.dr.api` (imported when first used), on the DR settings
    and site model of *cfg* (default: the built-in defaults)."""

    def __init__(self, cfg: Config | None = None, api_client: Any | None = None) -> None:
        self._cfg = cfg
        self._api_client = api_client

    def _api(self) -> tuple[Any, Config]:
        try:
            from gotthard.dr import api
        except ImportError as err:
            raise ActionError(f"the DR area is not available: {err}") from None
        if self._cfg is None:
            from gotthard.config import Config

            self._cfg = Config()
        return api, self._cfg

    def backup_now(self, namespace: str, reason: str) -> Outcome:
        api, cfg = self._api()
        name = api.backup_now(cfg, namespace, reason=reason, api_client=self._api_client)
        return Outcome("ok", f"backup {name} requested for namespace {namespace}")

    def record_placement(self, service: str, primary_site: str, site: str) -> Outcome:
        """Audit-only: the placement controller has moved *service*; nothing is run, the
        engine writes this outcome (and the targets) to the audit log."""
        where = "its primary site" if site == primary_site else f"primary site {primary_site}"
        return Outcome("ok", f"placement recorded: {service} runs at {site} ({where})")

    def failover(self, service: str, target_site: str, reason: str) -> Outcome:
        api, cfg = self._api()
        ref = api.request_failover(
            cfg, service, target_site, reason=reason, api_client=self._api_client
        )
        return Outcome("ok", f"failover of {service} to {target_site} requested: {ref}")


@dataclass(frozen=True)
class Backends:
    """What the actions run through: the engine holds one and passes it to each action."""

    slurm: SlurmActions
    kubernetes: KubernetesActions
    dr: DrActions
