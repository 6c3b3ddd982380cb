"""Leader election with optimistic concurrency against the emulated API server.

Two electors share one Lease on one emulator. With delays injected into one replica's
requests, or random delays into both, no two replicas act as leader at the same instant;
a conflicting write loses; a leader that stops renewing is replaced within one lease
duration (plus one renew period, the time the standby takes to look again).
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from kubernetes import client

from gotthard.dr.lease import LeaseElector
from tests.support.kube import EmulatorThread
from tests.support.wait import wait_until

LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/gotthard/leases"
DURATION = 1.0
RENEW = 0.1


def elector(k8s: EmulatorThread, identity: str, **kwargs: object) -> LeaseElector:
    """An elector whose requests carry *identity* as User-Agent (faults can target it)."""
    return LeaseElector(k8s.api(identity), "gotthard", "dr", identity, DURATION, **kwargs)  # type: ignore[arg-type]


@dataclass
class Candidate:
    """One replica's election loop in a thread: a round every :data:`RENEW` seconds.

    ``terms`` holds ``(start, deadline)`` for each won round: the replica may act as
    leader from the moment the round began (a conservative bound) to its deadline."""

    elector: LeaseElector
    terms: list[tuple[float, float]] = field(default_factory=list)
    errors: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def loop(self) -> None:
        while not self.stop.is_set():
            started = time.time()
            try:
                if self.elector.try_acquire():
                    self.terms.append((started, self.elector.deadline))
            except Exception:  # a timed-out round: the next one tries again
                self.errors += 1
            self.stop.wait(RENEW)


@contextmanager
def running(*candidates: Candidate) -> Iterator[None]:
    threads = [threading.Thread(target=c.loop, daemon=True) for c in candidates]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        for c in candidates:
            c.stop.set()
        for thread in threads:
            thread.join(10)


def sample_both(a: LeaseElector, b: LeaseElector, seconds: float) -> tuple[int, int, int]:
    """Sample both electors' leader state every ~0.5 ms for *seconds*; the samples where
    a, b, and both were leader."""
    a_leads = b_leads = both = 0
    end = time.time() + seconds
    while time.time() < end:
        now = time.time()
        la, lb = now < a.deadline, now < b.deadline
        a_leads += la
        b_leads += lb
        both += la and lb
        time.sleep(0.0005)
    return a_leads, b_leads, both


def overlapping(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[str]:
    return [
        f"a {sa:.3f}-{da:.3f} overlaps b {sb:.3f}-{db:.3f}"
        for sa, da in a
        for sb, db in b
        if sa < db and sb < da
    ]


def test_first_elector_creates_the_lease_and_the_other_waits(k8s: EmulatorThread) -> None:
    a, b = elector(k8s, "a"), elector(k8s, "b")
    assert a.try_acquire() and a.is_leader()
    assert not b.try_acquire() and not b.is_leader()
    lease = client.CoordinationV1Api(k8s.api()).read_namespaced_lease("dr", "gotthard")
    assert lease.spec.holder_identity == "a" and lease.spec.lease_transitions == 0
    first = lease.metadata.resource_version
    assert a.try_acquire()  # renewal: a new resourceVersion, same holder
    lease = client.CoordinationV1Api(k8s.api()).read_namespaced_lease("dr", "gotthard")
    assert int(lease.metadata.resource_version) > int(first)
    a.release()
    assert not a.is_leader()
    assert b.try_acquire()  # released: no need to wait for expiry
    lease = client.CoordinationV1Api(k8s.api()).read_namespaced_lease("dr", "gotthard")
    assert lease.spec.holder_identity == "b" and lease.spec.lease_transitions == 1


def test_two_electors_racing_for_an_expired_lease_one_wins_the_other_conflicts(
    k8s: EmulatorThread,
) -> None:
    """Both read the same resourceVersion of the expired Lease; their PUTs are delayed so
    both are in flight together. The server accepts one; the other gets 409 and loses."""
    clock = [1000.0]
    old = elector(k8s, "old", clock=lambda: clock[0])
    assert old.try_acquire()
    clock[0] += 10 * DURATION  # the old holder is gone; its Lease has expired
    b = elector(k8s, "b", clock=lambda: clock[0])
    c = elector(k8s, "c", clock=lambda: clock[0])
    k8s.fault("PUT", LEASE_PATH, 0, 0.3, times=2)
    results: dict[str, bool] = {}
    threads = [
        threading.Thread(target=lambda e=e: results.__setitem__(e.identity, e.try_acquire()))
        for e in (b, c)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sorted(results.values()) == [False, True], results
    winner = next(name for name, won in results.items() if won)
    lease = client.CoordinationV1Api(k8s.api()).read_namespaced_lease("dr", "gotthard")
    assert lease.spec.holder_identity == winner
    assert [e.is_leader() for e in (b, c)].count(True) == 1


def test_no_two_leaders_at_once_under_injected_delays(k8s: EmulatorThread) -> None:
    """Phase 1: a leads. Phase 2: a's requests are delayed past its lease (a stalled
    leader): it must stop acting before b can take over. Phase 3: random delays on both,
    changing every 0.2 s. Leader state is sampled every ~0.5 ms throughout, and the
    replicas' leadership terms must never overlap."""
    a, b = Candidate(elector(k8s, "a")), Candidate(elector(k8s, "b"))
    assert a.elector.try_acquire()
    samples = []
    with running(a, b):
        samples.append(sample_both(a.elector, b.elector, 0.6))
        for method in ("GET", "PUT"):
            k8s.fault(method, LEASE_PATH, 0, 1.5 * DURATION, times=None, agent="a")
        samples.append(sample_both(a.elector, b.elector, 2.5 * DURATION))
        assert b.terms, "b never took over from the stalled leader"
        rng = random.Random(14)
        end = time.time() + 3.0
        while time.time() < end:
            k8s.clear_faults()
            for agent in ("a", "b"):
                for method in ("GET", "PUT"):
                    k8s.fault(method, LEASE_PATH, 0, rng.uniform(0, 0.6), None, agent)
            samples.append(sample_both(a.elector, b.elector, 0.2))
        k8s.clear_faults()
    a_leads, b_leads, both = (sum(column) for column in zip(*samples, strict=True))
    assert both == 0, f"{both} samples with two leaders"
    assert a_leads and b_leads  # leadership did change hands while sampling
    assert not overlapping(a.terms, b.terms)


def test_a_leader_that_stops_renewing_is_replaced_within_one_lease_duration(
    k8s: EmulatorThread,
) -> None:
    a, b = Candidate(elector(k8s, "a")), Candidate(elector(k8s, "b"))
    with running(a, b):
        wait_until(lambda: a.elector.is_leader() or b.elector.is_leader(), timeout=5)
        leader, standby = (a, b) if a.elector.is_leader() else (b, a)
        leader.stop.set()  # killed: no more renewals, no release
        killed = time.time()
        wait_until(lambda: standby.elector.is_leader(), timeout=5 * DURATION, interval=0.01)
        took_over = time.time() - killed
    assert not leader.elector.is_leader()
    # the Lease expires at most DURATION after the kill; the standby looks every RENEW
    assert took_over <= DURATION + RENEW + 0.2, took_over
    assert standby.terms[0][0] >= leader.terms[-1][1]  # it started after the old deadline
    assert math.isfinite(standby.elector.deadline)
