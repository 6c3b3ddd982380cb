"""Running test code in several threads at once (one implementation for every test)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TypeVar, cast

T = TypeVar("T")


def in_threads(funcs: Sequence[Callable[[], T]], timeout: float = 60.0) -> list[T]:
    """Call each of *funcs* in a thread of its own, all started together; their results.

    Every thread is joined (each within *timeout* seconds) before anything is raised: a
    function that raised fails the call with all their exceptions (an exception group),
    one still running after its *timeout* with :class:`TimeoutError`.
    """
    results: list[T | None] = [None] * len(funcs)
    errors: list[BaseException] = []

    def call(index: int) -> None:
        try:
            results[index] = funcs[index]()
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(funcs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    if errors:
        raise BaseExceptionGroup(f"{len(errors)} of {len(funcs)} threads raised", errors)
    if any(thread.is_alive() for thread in threads):
        raise TimeoutError(f"a thread still runs after {timeout:g}s")
    return cast("list[T]", results)
