"""Leader election on a Kubernetes Lease (coordination.k8s.io/v1) with get/create/patch.

``kubernetes.leaderelection`` needs PUT (replace); this loop uses create (409 = someone
else won the race) and merge-patch, then reads the Lease back and only counts itself
leader when the holder it reads is its own identity.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable

from kubernetes import client

from gotthard.kube import Retry, call, call_unless


def _fmt(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(value: object) -> float | None:
    if isinstance(value, dt.datetime):
        return value.timestamp()
    if isinstance(value, str) and value:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    return None


class LeaseElector:
    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        name: str,
        identity: str,
        duration_seconds: float,
        retry: Retry | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.api = client.CoordinationV1Api(api)
        self.namespace, self.name, self.identity = namespace, name, identity
        self.duration = duration_seconds
        self.retry = retry or Retry(attempts=2, backoff_seconds=0.2)
        self.clock = clock

    def _spec(self, transitions: int, acquired: float) -> dict[str, object]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.duration),
            "acquireTime": _fmt(acquired),
            "renewTime": _fmt(self.clock()),
            "leaseTransitions": transitions,
        }

    def _read(self) -> client.V1Lease:
        return call(
            self.retry, "get lease", self.api.read_namespaced_lease, self.name, self.namespace
        )

    def _patch(self, spec: dict[str, object]) -> None:
        call(
            self.retry,
            "patch lease",
            self.api.patch_namespaced_lease,
            self.name,
            self.namespace,
            {"spec": spec},
        )

    def try_acquire(self) -> bool:
        """Acquire or renew; True while this identity holds the Lease."""
        found, lease = call_unless(
            404, self.retry, "get lease", self.api.read_namespaced_lease, self.name, self.namespace
        )
        if not found:
            body = {
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(0, self.clock()),
            }
            created, _ = call_unless(
                409,
                self.retry,
                "create lease",
                self.api.create_namespaced_lease,
                self.namespace,
                body,
            )
            return created and self._holds()
        spec = lease.spec
        holder = spec.holder_identity if spec else None
        renewed = _parse(spec.renew_time) if spec else None
        duration = (spec.lease_duration_seconds if spec else None) or self.duration
        expired = renewed is None or self.clock() > renewed + duration
        if holder != self.identity and not expired:
            return False
        transitions = int((spec.lease_transitions if spec else 0) or 0)
        if holder != self.identity:
            transitions += 1
            acquired = self.clock()
        else:
            acquired = _parse(spec.acquire_time) or self.clock()
        self._patch(self._spec(transitions, acquired))
        return self._holds()

    def _holds(self) -> bool:
        lease = self._read()
        return bool(lease.spec and lease.spec.holder_identity == self.identity)

    def release(self) -> None:
        """Give the Lease up (expire it) if held, so a standby takes over at once."""
        try:
            if self._holds():
                self._patch({"holderIdentity": "", "renewTime": _fmt(0)})
        except Exception:  # best effort on shutdown
            pass
