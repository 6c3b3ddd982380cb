"""The actions: Slurm through ``scontrol`` and the shared Slurm reader (argv lists, never a
shell, with timeouts), Kubernetes through the official client, DR through
:mod:`gotthard.dr.api`.

Each action returns an :class:`Outcome`; it raises only for failures, which the engine
turns into a ``failed`` decision.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from gotthard import command, slurm_state
from gotthard.runbooks.settings import RunbooksConfig
from gotthard.site import KubeAccess
from gotthard.slurm.cli import CliBackend, slurm_env
from gotthard.slurm.snapshot import Node, SlurmUnavailable

if TYPE_CHECKING:
    from gotthard.config import Config

#: Set on a node that a runbook cordoned, so that only those nodes are uncordoned.
CORDON_ANNOTATION = "gotthard.io/cordoned-by-runbook"

Result = Literal["ok", "noop", "skipped"]


class ActionError(Exception):
    """An action failed; the message says why (no secrets, no raw label values)."""


#: A Slurm JWT is three base64url parts; anything else in the file is refused.
_JWT = re.compile(r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$")


def read_jwt(path: str) -> str:
    """The Slurm JWT in *path* (surrounding white space dropped; a ``SLURM_JWT=`` prefix,
    as ``scontrol token`` prints it, accepted). ValueError naming the file (never the
    token) when it cannot be read, is empty or holds no JWT."""
    try:
        text = Path(path).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else "not ASCII"
        raise ValueError(f"Slurm JWT file {path}: cannot read: {why}") from None
    token = text.removeprefix("SLURM_JWT=")
    if not token:
        raise ValueError(f"Slurm JWT file {path}: empty")
    if not _JWT.match(token):
        raise ValueError(f"Slurm JWT file {path}: not a JWT (header.payload.signature)")
    return token


@dataclass(frozen=True)
class Outcome:
    result: Result
    detail: str


def slurm_reason(alertname: str) -> str:
    """The drain reason of the *alertname* runbook; resume acts only on this exact reason."""
    return f"{slurm_state.DRAIN_REASON_PREFIX}{alertname}"


class SlurmActions:
    """``scontrol``/``sinfo`` on one cluster, whose ``slurm.conf`` the site model names.

    Nodes are read by the shared Slurm reader (:meth:`gotthard.slurm.cli.CliBackend.nodes`:
    the same sinfo columns and parser as the exporter's).

    With *jwt_file* (the cluster's ``slurm_jwt_file``), every command runs with
    ``SLURM_JWT`` set to the token the file holds, read afresh before each command: the
    Slurm client then authenticates with ``auth/jwt`` and needs no munge socket (a pod
    in Kubernetes). A file that cannot be read, or is empty, fails the action (closed),
    naming the file and never the token.
    """

    def __init__(
        self, settings: RunbooksConfig, slurm_conf: str = "", *, jwt_file: str = ""
    ) -> None:
        self.settings = settings
        self.slurm_conf = slurm_conf
        self.jwt_file = jwt_file
        env = dict(os.environ)
        if slurm_conf:
            env["SLURM_CONF"] = slurm_conf
        self._env = env
        self._reader = CliBackend(
            paths={"sinfo": settings.sinfo_path},
            env=env,
            timeout=settings.action_timeout_seconds,
        )

    def _command_env(self) -> dict[str, str]:
        """The environment of the next Slurm command (with the current JWT, if any)."""
        if not self.jwt_file:
            return self._env
        try:
            token = read_jwt(self.jwt_file)
        except ValueError as err:
            raise ActionError(str(err)) from None
        return {**self._env, "SLURM_JWT": token}

    def _nodes(self, names: Sequence[str] = ()) -> tuple[Node, ...]:
        if self.jwt_file:
            self._reader.env = slurm_env(self._command_env())
        try:
            return self._reader.nodes(names)
        except SlurmUnavailable as err:
            raise ActionError(str(err)) from None

    def _scontrol(self, *args: str) -> None:
        """Run ``scontrol ARGS`` (a list: no shell is ever involved) with the action timeout."""
        argv = [self.settings.scontrol_path, *args]
        env = self._command_env()
        try:
            command.run(argv, timeout=self.settings.action_timeout_seconds, env=env)
        except command.CommandError as err:
            raise ActionError(str(err)) from None

    def inventory(self) -> Mapping[str, Node]:
        """Every node with its partitions, state and reason."""
        return {node.name: node for node in self._nodes()}

    def node(self, name: str) -> Node | None:
        found = [node for node in self._nodes([name]) if node.name == name]
        return found[0] if found else None

    def drain(self, name: str, alertname: str) -> Outcome:
        reason = slurm_reason(alertname)
        current = self.node(name)
        if current is None:
            raise ActionError(f"node {name} is not known to Slurm")
        if current.unavailable and current.reason == reason:
            return Outcome(
                "noop", f"{name} already {current.effective_state} with reason {reason!r}"
            )
        self._scontrol("update", f"NodeName={name}", "State=DRAIN", f"Reason={reason}")
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
                f"{name} is {current.effective_state} with reason {current.reason!r},"
                f" not {reason!r}: left as it is",
            )
        self._scontrol("update", f"NodeName={name}", "State=RESUME")
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
