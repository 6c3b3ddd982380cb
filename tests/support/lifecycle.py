"""``with`` support for the test helpers that own a background resource."""

from __future__ import annotations

from types import TracebackType
from typing import Self


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
