"""The decision engine: runbook lookup, target validation, safety rules, audit, metrics.

One lock serialises the processing of payloads, so that the limit checks and the
actions they allow are atomic: two concurrent notifications can never both take the
last node the blast radius allows.

A step that puts a node back into service (resume, uncordon) first needs the repair
confirmed by Prometheus (:mod:`gotthard.runbooks.repair`); otherwise it is
``not-repaired``, a result that the next notification retries.

Every action goes to the cluster the alert is of (:mod:`gotthard.runbooks.clusters`): its
Slurm controller, its Kubernetes API, its Prometheus. An alert of a cluster the webhook
does not own is audited as ``foreign-cluster`` and never acted on.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gotthard.files import open_private
from gotthard.runbooks import clusters as ownership
from gotthard.runbooks import registry, validate
from gotthard.runbooks.actions import ActionError, Outcome
from gotthard.runbooks.clusters import Cluster, Clusters
from gotthard.runbooks.registry import ActionSpec, Runbook
from gotthard.runbooks.settings import RunbooksConfig
from gotthard.runbooks.validate import Alert, TargetError, WebhookPayload

log = logging.getLogger("gotthard.runbooks")

#: Results that end an alert event's step for good: a repeat notification is a duplicate.
FINAL_RESULTS = frozenset({"ok", "noop", "skipped", "planned", "invalid", "disabled"})


class AuditLog:
    """Append-only JSONL; every record is flushed and fsync'ed before ``write`` returns.

    The file is private (0600, see :mod:`gotthard.files`)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        fd = open_private(self.path, os.O_WRONLY | os.O_APPEND)
        self._file = os.fdopen(fd, "a", encoding="utf-8")

    def write(self, record: Mapping[str, Any]) -> None:
        line = json.dumps({"ts": time.time(), **record}, sort_keys=True, default=str)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def handled_keys(self, mode: str) -> set[str]:
        """Keys of steps already handled for good in ``mode`` (read back at start-up)."""
        keys: set[str] = set()
        try:
            with self.path.open(encoding="utf-8", errors="replace") as handle:
                for line in handle:
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue
                    if (
                        isinstance(record, dict)
                        and record.get("mode") == mode
                        and record.get("result") in FINAL_RESULTS
                        and isinstance(record.get("key"), str)
                    ):
                        keys.add(record["key"])
        except OSError:
            pass
        return keys


class Metrics:
    def __init__(self, engine: Engine) -> None:
        self.registry = CollectorRegistry()

        def counter(name: str, documentation: str, *labels: str) -> Counter:
            return Counter(name, documentation, labels, registry=self.registry)

        self.actions = counter(
            "gotthard_runbook_actions",
            "Runbook step decisions by runbook (alertname), action and result.",
            "runbook",
            "action",
            "result",
        )
        self.requests = counter(
            "gotthard_runbook_webhook_requests", "Webhook requests by HTTP status code.", "code"
        )
        self.alerts = counter("gotthard_runbook_alerts", "Alerts received, by status.", "status")
        self.duration = Histogram(
            "gotthard_runbook_action_duration_seconds",
            "Time actions took to run (enforce mode).",
            ["action"],
            registry=self.registry,
        )
        enforce = Gauge(
            "gotthard_runbook_enforce",
            "1 when actions are enforced, 0 in dry-run.",
            registry=self.registry,
        )
        enforce.set(1 if engine.settings.mode == "enforce" else 0)
        kill = Gauge(
            "gotthard_runbook_kill_switch",
            "1 while the kill-switch file exists (no action runs).",
            registry=self.registry,
        )
        kill.set_function(lambda: 1.0 if engine.kill_switch_on() else 0.0)


def _key(alert: Alert, index: int) -> str:
    return f"{alert.fingerprint}|{alert.starts_at_key}|{alert.status}|{index}"


class Engine:
    def __init__(
        self,
        settings: RunbooksConfig,
        *,
        audit: AuditLog,
        clusters: Clusters | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """*clusters*: those the webhook owns (default: one, ``default_cluster`` or
        ``default``, acting through the default backends)."""
        self.settings = settings
        self.audit = audit
        self.clusters = clusters or ownership.shared(
            settings, [settings.default_cluster or "default"]
        )
        self.clock = clock
        self.metrics = Metrics(self)
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="runbook-action")
        #: step key -> time handled
        self._handled: dict[str, float] = dict.fromkeys(audit.handled_keys(settings.mode), clock())
        #: cluster -> {node: time it was first taken out of service in the window}
        self._window: dict[str, dict[str, float]] = {}
        #: cluster -> {node drained (or, in dry-run, planned to be) and not resumed: time}
        self._drained: dict[str, dict[str, float]] = {}

    # ------------------------------------------------------------------ helpers

    def kill_switch_on(self) -> bool:
        return bool(self.settings.kill_switch_file) and os.path.exists(
            self.settings.kill_switch_file
        )

    def _expire(self, now: float) -> None:
        ttl = self.settings.idempotency_ttl_seconds
        if len(self._handled) > 10000 or any(now - t > ttl for t in self._handled.values()):
            self._handled = {k: t for k, t in self._handled.items() if now - t <= ttl}
        window = self.settings.limits.window_seconds
        for cluster, nodes in list(self._window.items()):
            self._window[cluster] = {n: t for n, t in nodes.items() if now - t < window}
        if self.settings.mode != "enforce":
            for cluster, nodes in list(self._drained.items()):
                self._drained[cluster] = {n: t for n, t in nodes.items() if now - t < window}

    def _targets(self, spec: ActionSpec, alert: Alert) -> dict[str, str]:
        targets: dict[str, str] = {}
        for label, check in spec.targets:
            value = alert.labels.get(label)
            if value is None:
                raise TargetError(f"the alert has no {label!r} label")
            targets[label] = check(value, self.settings)
        return targets

    @staticmethod
    def _cluster_label(alert: Alert) -> str:
        """The alert's ``cluster`` label as the audit shows it (of a foreign alert)."""
        value = alert.labels.get("cluster", "")
        if not value:
            return ""
        try:
            return validate.cluster(value)
        except TargetError:
            return "(invalid)"

    def _limit(self, spec: ActionSpec, node: str, owner: Cluster) -> str | None:
        """Why taking ``node`` out of service is refused now, or None when allowed."""
        limits = self.settings.limits
        cluster = owner.name
        in_window = self._window.setdefault(cluster, {})
        if node not in in_window and len(in_window) >= limits.max_nodes_per_window:
            return (
                f"rate limit: {len(in_window)} node(s) already taken out of service in cluster"
                f" {cluster} in the last {limits.window_seconds:g}s"
                f" (max_nodes_per_window={limits.max_nodes_per_window})"
            )
        if spec.slurm != "drain":
            return None
        try:
            inventory = owner.backends.slurm.inventory()
        except ActionError as err:
            return f"blast radius unknown, refusing: {err}"
        target = inventory.get(node)
        if target is None:
            return f"node {node} is not known to Slurm"
        if target.unavailable:
            return None  # draining it takes no capacity away
        unavailable = {name for name, info in inventory.items() if info.unavailable}
        unavailable |= set(self._drained.get(cluster, {})) | {node}
        for partition in sorted(target.partitions):
            members = {name for name, info in inventory.items() if partition in info.partitions}
            down = len(members & unavailable)
            # one node per partition may always go, or small partitions could never drain
            allowed = max(1.0, limits.max_partition_fraction * len(members))
            if down > allowed + 1e-9:
                return (
                    f"blast radius: draining {node} would leave {down}/{len(members)} nodes of"
                    f" partition {partition} unavailable"
                    f" (max_partition_fraction={limits.max_partition_fraction:g})"
                )
        return None

    @staticmethod
    def _maintenance(owner: Cluster, node: str) -> str | None:
        """Why *node* is in maintenance (an operator's drain or MAINT: never taken out or
        put back by a runbook), or None; None too when Slurm cannot tell (the limits, which
        need Slurm for a drain, decide then)."""
        try:
            found = owner.backends.slurm.node(node)
        except ActionError:
            return None
        if found is None or not found.in_maintenance:
            return None
        return (
            f"node {node} is in maintenance ({found.effective_state},"
            f" reason {validate.shown(found.reason)}): an operator's, not acted on"
        )

    def _execute(
        self, spec: ActionSpec, targets: Mapping[str, str], alert: Alert, owner: Cluster
    ) -> Outcome:
        timeout = self.settings.action_timeout_seconds
        started = time.monotonic()
        future = self._executor.submit(spec.run, owner.backends, targets, alert)
        try:
            return future.result(timeout=timeout + 1)
        except FutureTimeout:
            raise ActionError(f"{spec.name} timed out after {timeout:g}s") from None
        finally:
            self.metrics.duration.labels(spec.name).observe(time.monotonic() - started)

    # ------------------------------------------------------------------ processing

    def process(self, payload: WebhookPayload, request_id: str = "") -> list[dict[str, Any]]:
        """Decide (and in enforce mode run) every step of every alert; audit each one."""
        decisions: list[dict[str, Any]] = []
        with self._lock:
            now = self.clock()
            self._expire(now)
            for alert in payload.alerts:
                self.metrics.alerts.labels(alert.status).inc()
                decisions.extend(self._process_alert(alert, request_id, now))
        return decisions

    def _process_alert(self, alert: Alert, request_id: str, now: float) -> list[dict[str, Any]]:
        base = {
            "request": request_id,
            "mode": self.settings.mode,
            "alertname": alert.name,
            "status": alert.status,
            "fingerprint": alert.fingerprint,
            "startsAt": alert.starts_at_key,
        }
        book = registry.find(alert.labels)
        owner = self.clusters.owner(alert.labels)
        if book is None:
            cluster = owner.name if isinstance(owner, Cluster) else self._cluster_label(alert)
            return [self._not_acted(base, cluster, None, "no-runbook", "no runbook")]
        if isinstance(owner, str):
            # not ours to act on; the 200 answer keeps Alertmanager from retrying
            cluster = self._cluster_label(alert)
            return [self._not_acted(base, cluster, book, ownership.FOREIGN, owner)]
        base["cluster"] = owner.name
        decisions = []
        limited_nodes: set[str] = set()
        # asked at most once per alert, by the first step that puts a node back
        repair = functools.cache(lambda: owner.repair.unconfirmed(alert))
        # asked at most once per node, by the first step that takes it out
        maintenance = functools.cache(lambda node: self._maintenance(owner, node))
        for index, step in enumerate(book.steps):
            action = step.action if alert.status == "firing" else step.on_resolve
            if action is None:
                continue
            key = _key(alert, index)
            record: dict[str, Any] = {**base, "runbook": book.alertname, "step": index}
            record.update(action=action, key=key)
            spec = registry.ACTIONS[action]
            decide = self._decide(alert, owner, spec, key, limited_nodes, repair, maintenance, now)
            result, why, targets = decide
            record.update(result=result, why=why, targets=targets)
            if result in FINAL_RESULTS:
                self._handled[key] = now
            self.audit.write(record)  # flushed before the reply is sent
            self.metrics.actions.labels(book.alertname, action, result).inc()
            log.info("%s %s %s: %s (%s)", alert.name, action, targets, result, why)
            decisions.append(record)
        return decisions

    def _not_acted(
        self, base: Mapping[str, Any], cluster: str, book: Runbook | None, result: str, why: str
    ) -> dict[str, Any]:
        """Audit and count an alert none of whose steps is considered."""
        runbook = book.alertname if book else None
        record = {**base, "cluster": cluster, "runbook": runbook, "result": result, "why": why}
        self.audit.write(record)
        self.metrics.actions.labels(runbook or "none", "none", result).inc()
        return record

    def _decide(
        self,
        alert: Alert,
        owner: Cluster,
        spec: ActionSpec,
        key: str,
        limited_nodes: set[str],
        repair: Callable[[], str | None],
        maintenance: Callable[[str], str | None],
        now: float,
    ) -> tuple[str, str, dict[str, str]]:
        if key in self._handled:
            return "duplicate", "already handled for this (fingerprint, startsAt)", {}
        try:
            targets = self._targets(spec, alert)
        except TargetError as err:
            return "invalid", str(err), {}
        if spec.needs_setting and not getattr(self.settings, spec.needs_setting):
            return "disabled", f"{spec.name} needs {spec.needs_setting} = true", targets
        if self.kill_switch_on():
            return "killed", f"kill switch {self.settings.kill_switch_file} is present", targets
        if spec.restores_node:
            unconfirmed = repair()
            if unconfirmed is not None:
                return "not-repaired", unconfirmed, targets
        node = targets.get("node", "")
        if spec.removes_node:
            node = node.split(".", 1)[0] if self.settings.slurm_strip_domain else node
            in_maintenance = maintenance(node)
            if in_maintenance is not None:
                return "skipped", in_maintenance, targets
            why = None
            if node in limited_nodes:
                why = "an earlier step of this runbook was refused by a limit"
            else:
                why = self._limit(spec, node, owner)
            if why is not None:
                limited_nodes.add(node)
                return "limited", why, targets
        if self.settings.mode != "enforce":
            self._account(spec, node, owner.name, now)
            return "planned", "dry-run: nothing changed", targets
        try:
            outcome = self._execute(spec, targets, alert, owner)
        except ActionError as err:
            return "failed", str(err), targets
        except Exception as err:  # an action must never take the server down
            log.exception("action %s failed", spec.name)
            return "failed", f"{type(err).__name__}: {err}", targets
        if outcome.result == "ok":
            self._account(spec, node, owner.name, now)
        elif spec.slurm == "resume":
            self._drained.get(owner.name, {}).pop(node, None)
        return outcome.result, outcome.detail, targets

    def _account(self, spec: ActionSpec, node: str, cluster: str, now: float) -> None:
        if spec.removes_node:
            self._window.setdefault(cluster, {}).setdefault(node, now)
        if spec.slurm == "drain":
            self._drained.setdefault(cluster, {}).setdefault(node, now)
        elif spec.slurm == "resume":
            self._drained.get(cluster, {}).pop(node, None)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self.audit.close()
