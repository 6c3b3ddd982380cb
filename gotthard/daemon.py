"""One lifecycle for Gotthard's long-running processes: ``gotthard exporter``,
``gotthard runbooks serve`` and ``gotthard dr daemon``.

* Logging: one format on stderr (:data:`LOG_FORMAT`: time, level, logger, message),
  its level set by each daemon's ``--log.level`` flag (:func:`add_log_level`).
* Serving: the daemon's :class:`~gotthard.serve.Server` answers on its own thread, and
  the daemon's own work, if it has any (the DR scheduler's election loop), on another;
  the main thread waits for a signal.
* Readiness: ``GET /healthz`` answers ``503 starting`` until the daemon's start-up work
  (``start``: warming the exporter's collectors) is done, then the server's own answer,
  and ``503 stopping`` from the first stop signal on.
* Shutdown: SIGTERM or SIGINT, once: logs ``stopping``, stops the work, stops the
  accept loop, closes the listening socket and the open connections, runs the close
  callbacks (the exporter's collectors, the webhook's engine), logs ``stopped``. The
  command then exits 0. A second signal while stopping is logged and changes nothing.

Only the standard library is imported here: ``gotthard exporter --once`` loads this
module without the serving layer.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import select
import signal
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gotthard.serve import Request, Response, Server

log = logging.getLogger("gotthard.daemon")

#: The one log line format of every daemon.
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_LEVELS = ("debug", "info", "warning", "error")
SIGNALS = (signal.SIGTERM, signal.SIGINT)


#: The options of every daemon's ``--log.level`` flag (``args.log_level``).
LOG_LEVEL_OPTIONS: dict[str, Any] = {
    "default": "info",
    "choices": LOG_LEVELS,
    "help": "least severe log messages written to stderr (default info)",
}


def add_log_level(parser: argparse.ArgumentParser) -> None:
    """The ``--log.level`` flag of a daemon's subcommand."""
    parser.add_argument("--log.level", dest="log_level", **LOG_LEVEL_OPTIONS)


def configure_logging(level: str) -> None:
    """Log to stderr in :data:`LOG_FORMAT` from *level* (one of :data:`LOG_LEVELS`) up."""
    logging.basicConfig(level=level.upper(), format=LOG_FORMAT, stream=sys.stderr)


class Daemon:
    """Serve *server* and run *work* until SIGTERM or SIGINT; see the module docstring.

    *start* is the start-up work, done in the calling thread while ``/healthz`` says
    ``starting``. *work* runs on a thread of its own and must return soon after
    *interrupt* is called; if it returns (or raises) earlier, the daemon stops too.
    *close* callbacks run after the server has stopped, in order.

    The calling thread (the main thread, which receives the signals' handlers) sleeps in
    ``select`` on a socket the signals themselves wake (``signal.set_wakeup_fd``): a
    signal the kernel delivers to another thread still wakes it at once."""

    def __init__(
        self,
        name: str,
        server: Server,
        *,
        start: Callable[[], object] | None = None,
        work: Callable[[], object] | None = None,
        interrupt: Callable[[], object] | None = None,
        close: Sequence[Callable[[], object]] = (),
    ) -> None:
        from gotthard.serve import HEALTH_ROUTE

        self.name = name
        self.server = server
        self.state = "starting"
        self._start = start
        self._work = work
        self._interrupt = interrupt
        self._close = close
        self._lock = threading.Lock()
        self._wake_reader, self._wake_writer = socket.socketpair()
        for end in (self._wake_reader, self._wake_writer):
            end.setblocking(False)
        server.routes[HEALTH_ROUTE] = self._gate(server.routes[HEALTH_ROUTE])

    def _gate(self, route: Callable[[Request], Response]) -> Callable[[Request], Response]:
        """*route* while running; ``503`` with the state before and after."""
        from gotthard.serve import text

        def healthz(request: Request) -> Response:
            if self.state != "running":
                return text(503, f"{self.state}\n", headers=[("Retry-After", "1")])
            return route(request)

        return healthz

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # full (a wake-up is pending anyway) or closed
            self._wake_writer.send(b"\0")

    def stop(self, reason: str = "asked to stop") -> None:
        """Begin the shutdown; idempotent, from any thread but a signal handler's."""
        with self._lock:
            already, self.state = self.state == "stopping", "stopping"
        if already:
            log.info("%s: %s while stopping; still stopping", self.name, reason)
            return
        log.info("%s: %s: stopping", self.name, reason)
        if self._interrupt is not None:
            self._interrupt()
        self._wake()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        # A handler runs in the main thread between two bytecodes, possibly while that
        # thread holds a lock stop() needs (a logging handler's): it hands the work to a
        # thread of its own.
        name = signal.Signals(signum).name
        threading.Thread(target=self.stop, args=(name,), name="stop", daemon=True).start()

    def _run_work(self, failed: list[BaseException]) -> None:
        assert self._work is not None
        try:
            self._work()
        except BaseException as err:
            failed.append(err)
        finally:
            self._wake()

    def run(self) -> None:
        """Serve until stopped; whatever *start* or *work* raised is raised once the
        server and the close callbacks are done."""
        main = threading.current_thread() is threading.main_thread()
        handlers: dict[int, Any] = {}
        wakeup_fd = -1
        if main:
            handlers = {signum: signal.signal(signum, self._on_signal) for signum in SIGNALS}
            wakeup_fd = signal.set_wakeup_fd(self._wake_writer.fileno(), warn_on_full_buffer=False)
        failed: list[BaseException] = []
        worker: threading.Thread | None = None
        self.server.start()
        log.info("%s: listening on %s", self.name, self.server.url)
        try:
            if self._start is not None:
                self._start()
            with self._lock:
                ready = self.state == "starting"
                if ready:
                    self.state = "running"
            if ready:
                log.info("%s: ready", self.name)
                if self._work is not None:
                    worker = threading.Thread(
                        target=self._run_work, args=(failed,), name=f"{self.name}-work"
                    )
                    worker.start()
                while self.state == "running" and (worker is None or worker.is_alive()):
                    select.select([self._wake_reader], [], [])
                    with contextlib.suppress(OSError):
                        self._wake_reader.recv(4096)
        finally:
            self.state = "stopping"
            if worker is not None:
                if worker.is_alive() and self._interrupt is not None:
                    self._interrupt()  # idempotent: stop() may have done it already
                worker.join()
            self.server.close()
            try:
                for close in self._close:
                    close()
            finally:
                if main:
                    signal.set_wakeup_fd(wakeup_fd)
                    for signum, handler in handlers.items():
                        signal.signal(signum, handler)
                self._wake_reader.close()
                self._wake_writer.close()
                log.info("%s: stopped", self.name)
        if failed:
            raise failed[0]
