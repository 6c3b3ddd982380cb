"""Polling until a condition holds (one implementation for every test)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T],
    timeout: float = 5.0,
    what: str | Callable[[], str] = "the condition",
    interval: float = 0.05,
) -> T:
    """Call *predicate* every *interval* seconds until it returns a truthy value; that value.

    The test fails (no traceback) with "timed out ... waiting for WHAT" after *timeout*;
    a callable *what* is called then (to add, say, a log read at that moment).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            about = what() if callable(what) else what
            pytest.fail(f"timed out after {timeout:g}s waiting for {about}", pytrace=False)
        time.sleep(interval)
