"""The exporter runtime: isolation of failing collectors, timeouts, stale data, caching."""

from __future__ import annotations

import threading
import time

from prometheus_client.parser import text_string_to_metric_families

from gotthard.exporters.families import MetricFamily, gauge, render_text
from gotthard.exporters.runtime import CollectorRunner, Exporter
from tests.support.threads import in_threads


class CountingCollector:
    """A collector whose source is a counter; ``delay`` makes each poll slow."""

    def __init__(self, name: str, *, interval: float = 0.0, delay: float = 0.0) -> None:
        self.name = name
        self.poll_interval = interval
        self.delay = delay
        self.polls = 0
        self.fail = False
        self._lock = threading.Lock()

    def poll(self) -> int:
        with self._lock:
            self.polls += 1
            count = self.polls
        time.sleep(self.delay)
        if self.fail:
            raise RuntimeError("source exploded")
        return count

    def render(self, snapshot: int) -> list[MetricFamily]:
        family = gauge(f"{self.name}_polls", "Polls so far.")
        family.add((), snapshot)
        return [family]

    def snapshot_errors(self, snapshot: int) -> int:
        return 0


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    result = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            result[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return result


def value(text: str, name: str, **labels: str) -> float | None:
    return samples(text).get((name, tuple(sorted(labels.items()))))


def test_a_failing_collector_reports_up_0_and_the_others_still_report() -> None:
    good, bad = CountingCollector("good"), CountingCollector("bad")
    bad.fail = True
    text = Exporter([CollectorRunner(good), CollectorRunner(bad)]).scrape(timeout=2)
    assert value(text, "gotthard_collector_up", collector="good") == 1
    assert value(text, "gotthard_collector_up", collector="bad") == 0
    assert value(text, "gotthard_collector_errors_total", collector="bad") == 1
    assert value(text, "good_polls") == 1
    assert value(text, "bad_polls") is None
    build = [v for (name, _), v in samples(text).items() if name == "gotthard_build_info"]
    assert build == [1]


def test_the_exporter_reports_its_clock_as_the_scrape_began_not_after_slow_polls() -> None:
    """``gotthard_time_seconds`` is compared with Prometheus' scrape timestamp (clock
    skew): it is read before the scrape waits for polls, so a slow poll adds no skew."""
    exporter = Exporter([CollectorRunner(CountingCollector("slow", delay=0.5))])
    before = time.time()
    text = exporter.scrape(timeout=2)
    after = time.time()
    clock = value(text, "gotthard_time_seconds")
    assert clock is not None and before <= clock <= before + 0.2 < after


def test_a_slow_collector_never_holds_the_scrape_past_its_timeout() -> None:
    slow, fast = CountingCollector("slow", delay=3.0), CountingCollector("fast")
    slow_runner = CollectorRunner(slow)
    exporter = Exporter([slow_runner, CollectorRunner(fast)])
    started = time.monotonic()
    text = exporter.scrape(timeout=0.3)
    # the scrape returned long before the 3 s poll could have finished
    assert time.monotonic() - started < 2.5
    # no snapshot yet: nothing to serve, and the collector is not up
    assert value(text, "gotthard_collector_up", collector="slow") == 0
    assert value(text, "slow_polls") is None
    assert value(text, "fast_polls") == 1
    first_poll = slow_runner.kick()  # the poll still in flight (none is due yet)
    assert first_poll is not None and first_poll.wait(10), "the first slow poll never ended"
    text = exporter.scrape(timeout=0.3)  # starts a second slow poll, serves the first
    assert value(text, "slow_polls") == 1
    assert value(text, "gotthard_collector_stale", collector="slow") == 1
    assert value(text, "gotthard_collector_up", collector="slow") == 1
    assert value(text, "gotthard_collector_stale", collector="fast") == 0


def test_a_one_shot_scrape_waits_for_the_poll_up_to_the_collectors_poll_timeout() -> None:
    slow = CountingCollector("slow", delay=0.6)
    slow.poll_timeout = 2.0  # type: ignore[attr-defined]
    never = CountingCollector("never", delay=30.0)
    never.poll_timeout = 0.8  # type: ignore[attr-defined]
    exporter = Exporter([CollectorRunner(slow), CollectorRunner(never)])
    started = time.monotonic()
    text = exporter.scrape(timeout=0.1, wait_for_polls=True)
    # the slow poll is awaited past the scrape timeout; the other only up to its own bound
    # (0.8 s, far below its 30 s poll)
    assert 0.6 <= time.monotonic() - started < 10
    assert value(text, "slow_polls") == 1
    assert value(text, "gotthard_collector_up", collector="slow") == 1
    assert value(text, "gotthard_collector_duration_seconds", collector="slow") >= 0.6
    assert value(text, "gotthard_collector_up", collector="never") == 0


def test_failed_poll_serves_last_good_data_marked_stale_until_too_old() -> None:
    source = CountingCollector("flaky")
    runner = CollectorRunner(source, max_stale_seconds=0.5)
    exporter = Exporter([runner])
    assert value(exporter.scrape(timeout=1), "flaky_polls") == 1
    source.fail = True
    text = exporter.scrape(timeout=1)
    assert value(text, "flaky_polls") == 1
    assert value(text, "gotthard_collector_stale", collector="flaky") == 1
    assert value(text, "gotthard_collector_up", collector="flaky") == 0
    time.sleep(0.6)
    text = exporter.scrape(timeout=1)
    assert value(text, "flaky_polls") is None  # dropped: older than max_stale_seconds


def test_concurrent_scrapers_share_one_poll_per_interval() -> None:
    source = CountingCollector("shared", interval=0.5, delay=0.05)
    exporter = Exporter([CollectorRunner(source)])
    stop = time.monotonic() + 2.0

    def scraper() -> None:
        while time.monotonic() < stop:
            exporter.scrape(timeout=1)

    in_threads([scraper] * 20)  # raises what any scraper raised
    # 2 s at one poll per 0.5 s: 4 intervals, plus the one at t=0
    assert 3 <= source.polls <= 5


def test_rendered_text_is_reused_until_the_next_poll() -> None:
    calls = []

    class Renders(CountingCollector):
        def render(self, snapshot: int) -> list[MetricFamily]:
            calls.append(snapshot)
            return super().render(snapshot)

    exporter = Exporter([CollectorRunner(Renders("cached", interval=60))])
    for _ in range(5):
        exporter.scrape(timeout=1)
    assert calls == [1]


def test_exposition_escapes_label_values() -> None:
    family = gauge("x_info", "Help with \\ backslash\nand newline.", "reason")
    family.add(('gpu "lost"\\n\nnext',), 1)
    family.add(("plain",), 2.5)
    text = render_text([family])
    parsed = list(text_string_to_metric_families(text))
    assert [s.labels["reason"] for s in parsed[0].samples] == ['gpu "lost"\\n\nnext', "plain"]
    assert [s.value for s in parsed[0].samples] == [1, 2.5]
