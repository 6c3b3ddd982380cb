"""``with`` support for the test helpers that own a background resource."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Self

import pytest

from gotthard.sandbox import SandboxError
from gotthard.sandbox.core import Sandbox


class StopOnExit:
    """A context manager that calls ``self.stop()`` on exit; entering returns ``self``
    (subclasses that must start first override ``__enter__``)."""

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@contextmanager
def running(sandbox: Sandbox, what: str, **up: bool) -> Iterator[Sandbox]:
    """*sandbox* started with ``up(**up)`` (the test fails in one line naming *what* when
    it cannot start) and stopped on exit."""
    try:
        sandbox.up(verbose=False, **up)
    except SandboxError as exc:
        pytest.fail(f"cannot start {what}: {exc}", pytrace=False)
    try:
        yield sandbox
    finally:
        sandbox.down(verbose=False)
