"""The exporter runtime: collectors, cached single-flight polling, and the scrape.

A collector is a *source* that produces a typed snapshot (``poll``) and a pure
function from that snapshot to metric families (``render``). The runtime wraps each
collector in a :class:`CollectorRunner` that

* polls the source at most once per poll interval, however many scrapers ask;
* runs the poll in a background thread, so a scrape waits at most its timeout and
  otherwise serves the last good snapshot, marked stale;
* renders each snapshot once and reuses the text until the next snapshot;
* turns an exception into ``gotthard_collector_up 0`` without touching the others.

Every collector reports ``gotthard_collector_up``, ``gotthard_collector_duration_seconds``,
``gotthard_collector_errors_total``, ``gotthard_collector_stale`` and
``gotthard_collector_last_success_timestamp_seconds``; the exporter reports
``gotthard_build_info`` and ``gotthard_time_seconds``, its wall clock as the scrape began
(``timestamp()`` of it is Prometheus' time of the same scrape: the difference is the
host's clock skew, as node_exporter's ``node_time_seconds``).
"""

from __future__ import annotations

import logging
import platform
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gotthard import __version__
from gotthard.exporters.families import MetricFamily, desc, render_text

log = logging.getLogger("gotthard.exporter")


# --- the exporter's own families, in output order -------------------------------------

BUILD_INFO = desc(
    "gotthard_build_info", "Gotthard build information; always 1.", "version", "python_version"
)
COLLECTOR_UP = desc(
    "gotthard_collector_up", "1 if the collector's last poll succeeded.", "collector"
)
COLLECTOR_DURATION = desc(
    "gotthard_collector_duration_seconds", "Seconds the collector's last poll took.", "collector"
)
COLLECTOR_ERRORS = desc(
    "gotthard_collector_errors_total",
    "Failed polls plus recoverable errors (bad lines, unreadable files) per collector.",
    "collector",
)
COLLECTOR_STALE = desc(
    "gotthard_collector_stale",
    "1 if the served data is not from the latest poll (poll slow or failed).",
    "collector",
)
COLLECTOR_LAST_SUCCESS = desc(
    "gotthard_collector_last_success_timestamp_seconds",
    "Unix time of the collector's last successful poll.",
    "collector",
)

TIME = desc(
    "gotthard_time_seconds",
    "Unix time on the exporter's host as the scrape began (its clock, for clock skew).",
)


class SetupError(Exception):
    """A collector cannot be built from this configuration (bad URL, missing module or
    directory): ``gotthard exporter`` exits 2 naming the collector."""


class Collector(Protocol):
    """What the runtime needs from a collector module."""

    name: str
    #: Seconds between polls of the source; 0 polls on every scrape (single-flight still).
    poll_interval: float

    def poll(self) -> Any:
        """Read the source and return a typed snapshot; may block and may raise."""

    def render(self, snapshot: Any) -> list[MetricFamily]:
        """Turn a snapshot into metric families; pure."""

    def snapshot_errors(self, snapshot: Any) -> int:
        """Recoverable problems the snapshot carries (bad lines, unreadable files)."""

    # Optional: ``close()`` releases the source (threads, libraries) at shutdown;
    # ``poll_timeout`` (seconds) bounds one poll, and ``--once`` waits that long for it.


@dataclass(frozen=True, slots=True)
class CollectorState:
    """What one scrape learned about one collector."""

    name: str
    up: bool
    stale: bool
    duration_seconds: float
    errors_total: int
    last_success_unix: float | None
    text: str
    last_error: str


class CollectorRunner:
    """Polls one collector in the background and serves its latest rendering."""

    def __init__(
        self,
        collector: Collector,
        *,
        max_stale_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.collector = collector
        self.name = collector.name
        self._clock = clock
        self._wall = wall_clock
        interval = max(collector.poll_interval, 0.0)
        self._interval = interval
        self._max_stale = max_stale_seconds
        self._lock = threading.Lock()
        self._inflight: threading.Event | None = None
        self._last_start: float | None = None
        self._last_ok = False
        self._last_error = ""
        self._last_duration = 0.0
        self._errors = 0
        self._polls = 0
        self._good_at: float | None = None  # monotonic time of the last good snapshot
        self._good_wall: float | None = None
        self._good_text = ""
        self._fresh = False  # the last completed poll produced the text we hold

    @property
    def polls(self) -> int:
        """How many polls of the source have started (for tests and debugging)."""
        return self._polls

    def kick(self) -> threading.Event | None:
        """Start a poll if one is due and none is running; return the in-flight event."""
        with self._lock:
            now = self._clock()
            due = self._last_start is None or now - self._last_start >= self._interval
            if due and self._inflight is None:
                self._last_start = now
                self._polls += 1
                self._inflight = threading.Event()
                thread = threading.Thread(
                    target=self._run_poll,
                    args=(self._inflight,),
                    name=f"poll-{self.name}",
                    daemon=True,
                )
                thread.start()
            return self._inflight

    def _run_poll(self, done: threading.Event) -> None:
        started = self._clock()
        try:
            snapshot = self.collector.poll()
            text = render_text(self.collector.render(snapshot))
            errors = int(self.collector.snapshot_errors(snapshot))
        except Exception as err:  # a collector must never take the exporter down
            message = f"{type(err).__name__}: {err}"
            # the same failure every poll (no GPU driver on this host) is logged once
            level = logging.DEBUG if message == self._last_error else logging.WARNING
            log.log(
                level,
                "collector %s failed: %s",
                self.name,
                message,
                exc_info=log.isEnabledFor(logging.DEBUG),
            )
            with self._lock:
                self._last_ok = False
                self._last_error = message
                self._errors += 1
                self._fresh = False
                self._last_duration = self._clock() - started
                self._inflight = None
            done.set()
            return
        with self._lock:
            self._last_ok = True
            self._last_error = ""
            self._errors += errors
            self._good_text = text
            self._good_at = self._clock()
            self._good_wall = self._wall()
            self._fresh = True
            self._last_duration = self._good_at - started
            self._inflight = None
        done.set()

    def close(self) -> None:
        """Wait briefly for a poll in flight, then close the collector's source."""
        with self._lock:
            inflight = self._inflight
        if inflight is not None:
            inflight.wait(5.0)
        close = getattr(self.collector, "close", None)
        if close is not None:
            try:
                close()
            except Exception as err:
                log.warning("collector %s: close failed: %s", self.name, err)

    def state(self, *, waited_out: bool) -> CollectorState:
        """The collector's state after a scrape waited (or gave up waiting) for its poll."""
        with self._lock:
            text = self._good_text
            too_old = (
                self._good_at is not None
                and self._max_stale is not None
                and self._clock() - self._good_at > self._max_stale
            )
            if too_old:
                text = ""
            stale = bool(text) and (waited_out or not self._fresh)
            up = self._last_ok and not (waited_out and self._good_at is None)
            return CollectorState(
                name=self.name,
                up=up,
                stale=stale,
                duration_seconds=self._last_duration,
                errors_total=self._errors,
                last_success_unix=self._good_wall,
                text=text,
                last_error=self._last_error,
            )


class Exporter:
    """A set of collector runners scraped together within one deadline."""

    def __init__(self, runners: Sequence[CollectorRunner]) -> None:
        self.runners = list(runners)
        self._scrapes = 0
        self._lock = threading.Lock()

    def scrape(self, timeout: float, *, wait_for_polls: bool = False) -> str:
        """Collect from every collector within *timeout* seconds; the exposition text.

        With *wait_for_polls* (``--once``: there is no later scrape to serve a slow poll's
        result) a collector's poll is awaited up to its own ``poll_timeout`` when that is
        longer than *timeout*, so a poll bounded by its command timeout reports what it
        found (``gotthard_slurm_up 0``, its errors and duration) instead of being cut off.
        """
        wall = time.time()
        started = time.monotonic()
        deadline = started + max(timeout, 0.0)
        with self._lock:
            self._scrapes += 1
        events = [(runner, runner.kick()) for runner in self.runners]
        states: list[CollectorState] = []
        for runner, event in events:
            waited_out = False
            if event is not None:
                until = deadline
                if wait_for_polls:
                    own = float(getattr(runner.collector, "poll_timeout", 0.0) or 0.0)
                    until = max(deadline, started + own)
                waited_out = not event.wait(max(until - time.monotonic(), 0.0))
            states.append(runner.state(waited_out=waited_out))
        return self._compose(states, wall)

    def close(self) -> None:
        """Release every collector's source (those with a ``close`` method), once."""
        for runner in self.runners:
            runner.close()

    def _compose(self, states: list[CollectorState], wall: float) -> str:
        up, duration, errors = COLLECTOR_UP.new(), COLLECTOR_DURATION.new(), COLLECTOR_ERRORS.new()
        stale, last_success = COLLECTOR_STALE.new(), COLLECTOR_LAST_SUCCESS.new()
        for state in states:
            key = (state.name,)
            up.add(key, 1 if state.up else 0)
            duration.add(key, state.duration_seconds)
            errors.add(key, state.errors_total)
            stale.add(key, 1 if state.stale else 0)
            if state.last_success_unix is not None:
                last_success.add(key, state.last_success_unix)
        build = BUILD_INFO.new()
        build.add((__version__, platform.python_version()), 1)
        clock = TIME.new()
        clock.add((), wall)
        meta = render_text([build, up, duration, errors, stale, last_success, clock])
        return "".join(state.text for state in states) + meta
