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
from typing import Any, Literal

from gotthard.runbooks.settings import RunbooksConfig

#: Set on a node that a runbook cordoned, so that only those nodes are uncordoned.
CORDON_ANNOTATION = "gotthard.io/cordoned-by-runbook"
#: Slurm node states (sinfo %T, lower case) in which a node takes no new work.
UNAVAILABLE_STATES = frozenset(
    {"drained", "draining", "drain", "down", "fail", "failing", "maint", "reboot", "unknown"}
)

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
    state: str
    reason: str

    @property
    def unavailable(self) -> bool:
        return any(part in UNAVAILABLE_STATES for part in self.state.split("+"))


def slurm_reason(alertname: str) -> str:
    return f"gotthard: {alertname}"


def _clean_state(raw: str) -> str:
    """``drained*`` / ``idle~`` -> ``drained`` / ``idle`` (sinfo's flag suffixes)."""
    return raw.strip().lower().rstrip("*~#!%$@^-")


class SlurmActions:
    def __init__(self, settings: RunbooksConfig) -> None:
        self.settings = settings

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.settings.slurm_conf:
            env["SLURM_CONF"] = self.settings.slurm_conf
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
            entry = found.setdefault(name, (set(), _clean_state(state), reason))
            entry[0].add(partition.rstrip("*"))
        return {
            name: SlurmNode(name, frozenset(parts), state, reason if reason != "none" else "")
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
                state, reason = _clean_state(fields[2]), fields[3].strip()
        if not parts:
            return None
        return SlurmNode(name, frozenset(parts), state, reason if reason != "none" else "")

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
    def __init__(self, settings: RunbooksConfig, api_client: Any | None = None) -> None:
        self.settings = settings
        self._api_client = api_client
        self._core: Any | None = None

    def _api(self) -> Any:
        if self._core is None:
            from kubernetes import client, config

            api_client = self._api_client
            if api_client is None:
                k8s = self.settings.kubernetes
                try:
                    if k8s.in_cluster:
                        config.load_incluster_config()
                        api_client = client.ApiClient()
                    else:
                        api_client = config.new_client_from_config(
                            config_file=k8s.kubeconfig or None, context=k8s.context or None
                        )
                except Exception as err:  # kubernetes raises ConfigException and others
                    raise ActionError(f"no Kubernetes configuration: {err}") from None
            self._core = client.CoreV1Api(api_client)
        return self._core

    def _call(self, what: str, func: Any, *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return func(
                *args, _request_timeout=self.settings.kubernetes.request_timeout_seconds, **kwargs
            )
        except ApiException as err:
            raise ActionError(f"Kubernetes {what}: HTTP {err.status} {err.reason}") from None
        except Exception as err:  # urllib3 errors, timeouts
            raise ActionError(f"Kubernetes {what}: {type(err).__name__}: {err}") from None

    def _read(self, name: str) -> Mapping[str, Any]:
        api = self._api()
        node = self._call(f"read node {name}", api.read_node, name)
        return api.api_client.sanitize_for_serialization(node) or {}

    def _patch(self, name: str, body: Mapping[str, Any]) -> None:
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
        self._patch(
            name,
            {
                "spec": {"unschedulable": True},
                "metadata": {"annotations": {CORDON_ANNOTATION: alertname}},
            },
        )
        return Outcome("ok", f"cordoned {name}")

    def uncordon(self, name: str, alertname: str) -> Outcome:
        node = self._read(name)
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        if annotations.get(CORDON_ANNOTATION) != alertname:
            return Outcome("skipped", f"{name} was not cordoned by the {alertname} runbook")
        self._patch(
            name,
            {
                "spec": {"unschedulable": None},
                "metadata": {"annotations": {CORDON_ANNOTATION: None}},
            },
        )
        return Outcome("ok", f"uncordoned {name}")


class DrActions:
    """Delegates to :mod:`gotthard.dr.api` (imported when first used)."""

    def __init__(self, dr_settings: Any | None = None, api_client: Any | None = None) -> None:
        self._dr_settings = dr_settings
        self._api_client = api_client

    def _api(self) -> tuple[Any, Any]:
        try:
            from gotthard.dr import api
        except ImportError as err:
            raise ActionError(f"the DR area is not available: {err}") from None
        settings = self._dr_settings
        if settings is None:
            try:
                from gotthard.dr.settings import DrConfig
            except ImportError as err:
                raise ActionError(f"the DR settings are not available: {err}") from None
            settings = DrConfig()
        return api, settings

    def backup_now(self, namespace: str, reason: str) -> Outcome:
        api, settings = self._api()
        name = api.backup_now(settings, namespace, reason=reason, api_client=self._api_client)
        return Outcome("ok", f"backup {name} requested for namespace {namespace}")

    def failover(self, service: str, target_site: str, reason: str) -> Outcome:
        api, settings = self._api()
        ref = api.request_failover(
            settings, service, target_site, reason=reason, api_client=self._api_client
        )
        return Outcome("ok", f"failover of {service} to {target_site} requested: {ref}")
