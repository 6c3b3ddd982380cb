"""Leader election on a Kubernetes Lease (coordination.k8s.io/v1) with optimistic concurrency.

One round (:meth:`LeaseElector.try_acquire`) reads the Lease and, when this identity holds
it or it has expired, writes it back with PUT (replace) carrying the resourceVersion it
read. The API server accepts only one writer per version: a replica whose write answers
409 Conflict has lost the race, and one whose create answers 409 AlreadyExists has lost
it to a replica that created the Lease first. A missing Lease (404) is created.

Fencing: a replica counts itself leader (:meth:`LeaseElector.is_leader`) only until a
local deadline, ``renewTime + leaseDurationSeconds - margin``, where ``renewTime`` is the
clock reading taken *before* the round's first request and written into the Lease. The
other replicas consider the Lease expired only after ``renewTime + leaseDurationSeconds``
on their clocks, so a leader that cannot renew stops acting ``margin`` seconds before
anyone else can acquire. The margin must exceed the clock skew between the replicas.
Every request of a round is bounded by the time left to that deadline, so a slow API
server cannot keep a round (and the daemon waiting on it) past the deadline.

Each round keeps what it read of the Lease, or wrote when it renewed it, in
:attr:`LeaseElector.seen` (holder, renew time, duration, and when it read them): every
replica, leader or not, exports it, so that each site can judge from its own replica
whether anyone renews, and only while that replica still reads the Lease.

``kubernetes.leaderelection`` with its ``LeaseLock`` was not used: its ``run()`` blocks a
thread for good (no stop, no release), reports leadership only through start/stop
callbacks fired after its renew deadline, takes no clock and no ``ApiClient`` (its lock
builds a client from the default configuration), so a daemon could not ask at each
instant whether it leads.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from gotthard.kube import Retry, call, call_unless, status_of

#: The share of the lease duration a leader gives up early (bounded below by 0.1 s).
MARGIN_SHARE = 0.1
#: The shortest time a request of a round may take before it is given up.
MIN_REQUEST_SECONDS = 0.05


def _fmt(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(value: object) -> float | None:
    if isinstance(value, dt.datetime):
        return value.timestamp()
    if isinstance(value, str) and value:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    return None


@dataclass(frozen=True)
class LeaseView:
    """What a replica last read of the Lease, or wrote when it renewed it."""

    #: ``spec.holderIdentity`` ("" when released or unset).
    holder: str
    #: ``spec.renewTime`` (Unix seconds); None when the Lease has none.
    renewed: float | None
    #: ``spec.leaseDurationSeconds``.
    duration: float
    #: When this replica read (or wrote) it, on the clock of the Lease's times (Unix
    #: seconds): how fresh this view is.
    read: float


class LeaseElector:
    """One replica's view of the Lease; :meth:`try_acquire` once per renew period."""

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
        # one attempt per round: the next round is the retry, and it comes before expiry
        self.retry = retry or Retry(attempts=1, timeout_seconds=max(duration_seconds / 2, 0.1))
        self.clock = clock
        self.margin = max(duration_seconds * MARGIN_SHARE, 0.1)
        #: Clock reading until which this replica may act as leader.
        self.deadline = -math.inf
        #: The Lease as the last round read or wrote it (None: never read); a round that
        #: fails leaves it as it was.
        self.seen: LeaseView | None = None

    def is_leader(self) -> bool:
        """Whether this replica may act as leader now (held, and its deadline not passed)."""
        return self.clock() < self.deadline

    def _timeout(self, started: float) -> float:
        """The time a request may take: what is left of a held lease, else the retry's."""
        if self.deadline > started:
            return max(
                min(self.deadline - self.clock(), self.retry.timeout_seconds), MIN_REQUEST_SECONDS
            )
        return self.retry.timeout_seconds

    def _body(
        self, resource_version: str | None, transitions: int, acquired: float, renewed: float
    ) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if resource_version:
            metadata["resourceVersion"] = resource_version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self._lease_seconds(),
                "acquireTime": _fmt(acquired),
                "renewTime": _fmt(renewed),
                "leaseTransitions": transitions,
            },
        }

    def _lease_seconds(self) -> int:
        """The ``leaseDurationSeconds`` this replica writes (a whole number, at least 1)."""
        return max(math.ceil(self.duration), 1)

    def _lose(self) -> bool:
        self.deadline = -math.inf
        return False

    def try_acquire(self) -> bool:
        """One round: acquire or renew. True while this identity holds the Lease and its
        deadline has not passed; an API error other than a conflict is raised."""
        started = self.clock()
        found, lease = call_unless(
            404,
            self.retry,
            "get lease",
            self.api.read_namespaced_lease,
            self.name,
            self.namespace,
            _request_timeout=self._timeout(started),
        )
        if not found or lease is None:
            created, _ = call_unless(
                409,
                self.retry,
                "create lease",
                self.api.create_namespaced_lease,
                self.namespace,
                self._body(None, 0, started, started),
                _request_timeout=self._timeout(started),
            )
            return self._won(started) if created else self._lose()
        spec = lease.spec
        holder = spec.holder_identity if spec else None
        renewed = _parse(spec.renew_time) if spec else None
        duration = (spec.lease_duration_seconds if spec else None) or self.duration
        self.seen = LeaseView(holder or "", renewed, duration, started)
        expired = renewed is None or started > renewed + duration
        if holder != self.identity and holder and not expired:
            return self._lose()
        transitions = int((spec.lease_transitions if spec else 0) or 0)
        if holder == self.identity:
            acquired = (_parse(spec.acquire_time) if spec else None) or started
        else:
            transitions, acquired = transitions + 1, started
        body = self._body(lease.metadata.resource_version, transitions, acquired, started)
        if not self._replace(body, started):
            return self._lose()
        return self._won(started)

    def _replace(self, body: dict[str, Any], started: float) -> bool:
        """PUT *body*; False when its resourceVersion is stale (409: another replica won)."""
        try:
            call(
                self.retry,
                "update lease",
                self.api.replace_namespaced_lease,
                self.name,
                self.namespace,
                body,
                _request_timeout=self._timeout(started),
            )
        except Exception as err:
            if status_of(err) == 409:
                return False
            raise
        return True

    def _won(self, renewed: float) -> bool:
        self.deadline = renewed + self.duration - self.margin
        self.seen = LeaseView(self.identity, renewed, self._lease_seconds(), renewed)
        return self.is_leader()

    def release(self) -> None:
        """Give the Lease up (expire it) if held, so a standby takes over at once."""
        held = self.is_leader()
        self.deadline = -math.inf  # stop acting first
        if not held:
            return
        try:
            lease = self.api.read_namespaced_lease(
                self.name, self.namespace, _request_timeout=self.retry.timeout_seconds
            )
            if lease.spec and lease.spec.holder_identity == self.identity:
                body = self._body(lease.metadata.resource_version, 0, 0, 0)
                body["spec"].update(
                    holderIdentity="",
                    leaseTransitions=lease.spec.lease_transitions or 0,
                )
                self.api.replace_namespaced_lease(
                    self.name, self.namespace, body, _request_timeout=self.retry.timeout_seconds
                )
        except Exception:  # best effort on shutdown: the Lease then expires by itself
            pass
