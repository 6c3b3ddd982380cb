"""The event loop under :class:`gotthard.serve.Server`: connections wait here, never in a thread.

One thread per server accepts connections, runs their TLS handshakes (non-blocking) and
reads each request's line and headers. Only a connection whose request head is complete
is handed to a worker thread (:meth:`Server._serve_connection`), which authenticates,
reads the body, answers, and gives the connection back for the next request.

Connections that have not authenticated yet are kept apart from the others and budgeted
(see :class:`gotthard.webconfig.Limits`): per client address and in total, with short
deadlines. A new connection beyond a budget closes the oldest unauthenticated one of its
own address (or of the address holding the most), never an authenticated one; so
however many connections a client holds open without a certificate or a request, a
scrape that connects and asks at once is handshaken and handed to a worker within
milliseconds.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import logging
import selectors
import socket
import ssl
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from gotthard.spiffe import SpiffeIdError, peer_id

if TYPE_CHECKING:
    from gotthard.serve import Server

log = logging.getLogger("gotthard.serve")

#: how often deadlines are checked (seconds)
SWEEP_SECONDS = 0.1
_HEAD_ENDS = (b"\r\n\r\n", b"\n\n")


def head_end(buffer: bytes | bytearray) -> tuple[int, int]:
    """``(end, separator length)`` of the request head in *buffer*, or ``(-1, 0)``."""
    found = [(buffer.find(sep), len(sep)) for sep in _HEAD_ENDS]
    found = [(at, size) for at, size in found if at >= 0]
    return min(found) if found else (-1, 0)


class Conn:
    """One client connection and where it stands."""

    __slots__ = (
        "address",
        "authenticated",
        "buffer",
        "deadline",
        "first_byte",
        "forbidden",
        "handshaking",
        "port",
        "sock",
        "spiffe_id",
        "where",
    )

    def __init__(self, sock: socket.socket, address: str, port: int) -> None:
        self.sock = sock
        self.address, self.port = address, port
        self.handshaking = False
        self.deadline = 0.0
        self.buffer = bytearray()
        #: monotonic time the current request's first byte arrived (0: none yet)
        self.first_byte = 0.0
        self.authenticated = False
        #: why the client certificate is refused (answered 403), or ""
        self.forbidden = ""
        self.spiffe_id = ""
        #: "pending", "idle", "busy" or "" (closed)
        self.where = ""


class Loop:
    """The accept and wait loop of one server."""

    def __init__(self, server: Server, listen: tuple[str, int]) -> None:
        self.server = server
        self.limits = limits = server.limits
        family = socket.AF_INET6 if ":" in listen[0] else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.bind(listen)
            self.sock.listen(limits.backlog)
        except OSError:
            self.sock.close()
            raise
        self.sock.setblocking(False)
        self.address: tuple[str, int] = self.sock.getsockname()[:2]
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.sock, selectors.EVENT_READ, "accept")
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._returned: collections.deque[tuple[Conn, bool]] = collections.deque()
        self.pending: dict[str, OrderedDict[Conn, None]] = {}
        self.pending_count = 0
        self.idle: OrderedDict[Conn, None] = OrderedDict()
        self.busy: set[Conn] = set()
        self._busy_lock = threading.Lock()
        self.workers = ThreadPoolExecutor(limits.workers, thread_name_prefix=server.name)
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()
        self._accept_paused_until = 0.0
        self._logged: dict[str, float] = {}
        #: connections closed to make room in the unauthenticated budget (a counter)
        self.evicted = 0

    # --- running and stopping ------------------------------------------------------------------

    def run(self) -> None:
        """Serve until :meth:`stop`. A loop runs once: a stop that comes before its thread
        gets here (a server closed right after it started) makes it return before it
        touches the selector, which :meth:`close` may already have closed."""
        self._stopped.clear()  # before the check below: a stop() from now on waits for us
        next_sweep = time.monotonic() + SWEEP_SECONDS
        try:
            while not self._stop.is_set():
                for key, _ in self.selector.select(SWEEP_SECONDS):
                    if key.data == "accept":
                        self._accept()
                    elif key.data == "wake":
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(4096)
                        self._take_returned()
                    elif key.data.where in ("pending", "idle"):
                        self._step(key.data)
                now = time.monotonic()
                if now >= next_sweep:
                    self._sweep(now)
                    next_sweep = now + SWEEP_SECONDS
        finally:
            self._stopped.set()

    def stop(self) -> None:
        """Stop :meth:`run` and wait for it (from another thread)."""
        self._stop.set()
        self._wake()
        self._stopped.wait()

    def close(self) -> None:
        """Stop the loop if it runs (:meth:`stop`), then close the listening socket and
        every connection: closing the selector under a running loop would fail it."""
        self.stop()
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(self.sock)
        self.sock.close()
        for conn in [c for group in self.pending.values() for c in group] + list(self.idle):
            self._close(conn)
        with self._busy_lock:
            busy = list(self.busy)
        for conn in busy:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)
        self.workers.shutdown(wait=False, cancel_futures=True)
        self.selector.close()
        self._wake_r.close()
        self._wake_w.close()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _log_once(self, kind: str, message: str, *args: Any) -> None:
        """*message* at most every 10 seconds per *kind*."""
        now = time.monotonic()
        if now - self._logged.get(kind, -10.0) >= 10:
            self._logged[kind] = now
            log.warning(message, *args)

    # --- accepting ---------------------------------------------------------------------------

    def _accept(self) -> None:
        now = time.monotonic()
        if now < self._accept_paused_until:
            return
        state = self.server.reloader.current()
        for _ in range(512):  # then let the other connections have a turn
            try:
                sock, address = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:
                if err.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._log_once("fds", "%s: cannot accept: %s", self.server.name, err)
                    if not self._evict_one():
                        self._accept_paused_until = now + SWEEP_SECONDS
                        return
                    continue
                return
            sock.setblocking(False)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Conn(sock, str(address[0]), int(address[1]))
            if state.context is not None:
                try:
                    conn.sock = state.context.wrap_socket(
                        sock, server_side=True, do_handshake_on_connect=False
                    )
                except OSError:
                    sock.close()
                    continue
                conn.handshaking = True
                conn.deadline = now + self.limits.handshake_timeout
            else:
                conn.deadline = now + self.limits.header_timeout
            self._admit(conn)
            self.selector.register(conn.sock, selectors.EVENT_READ, conn)

    def _admit(self, conn: Conn) -> None:
        """Count *conn* as unauthenticated, closing the oldest one over a budget."""
        limits = self.limits
        group = self.pending.get(conn.address)
        if group is not None and len(group) >= limits.max_unauthenticated_per_address:
            self._evict(next(iter(group)), "per-address")
        if self.pending_count >= limits.max_unauthenticated:
            self._evict_one()
        self.pending.setdefault(conn.address, OrderedDict())[conn] = None
        self.pending_count += 1
        conn.where = "pending"

    def _evict_one(self) -> bool:
        """Close the oldest unauthenticated connection of the address holding the most."""
        if not self.pending:
            return False
        biggest = max(self.pending.values(), key=len)
        self._evict(next(iter(biggest)), "total")
        return True

    def _evict(self, conn: Conn, budget: str) -> None:
        self.evicted += 1
        self._log_once(
            "evict",
            "%s: unauthenticated connection budget (%s) full: closing the oldest of %s"
            " (%d unauthenticated open; logged at most every 10 s)",
            self.server.name,
            budget,
            conn.address,
            self.pending_count,
        )
        self._close(conn)

    def _unlist(self, conn: Conn) -> None:
        if conn.where == "pending":
            group = self.pending[conn.address]
            del group[conn]
            if not group:
                del self.pending[conn.address]
            self.pending_count -= 1
        elif conn.where == "idle":
            del self.idle[conn]
        conn.where = ""

    def _close(self, conn: Conn) -> None:
        self._unlist(conn)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.selector.unregister(conn.sock)
        with contextlib.suppress(OSError):
            conn.sock.close()

    # --- handshakes and request heads -----------------------------------------------------------

    def _step(self, conn: Conn) -> None:
        if conn.handshaking:
            tls: ssl.SSLSocket = conn.sock  # type: ignore[assignment]
            try:
                tls.do_handshake()
            except ssl.SSLWantReadError:
                self.selector.modify(conn.sock, selectors.EVENT_READ, conn)
                return
            except ssl.SSLWantWriteError:
                self.selector.modify(conn.sock, selectors.EVENT_WRITE, conn)
                return
            except (OSError, ValueError) as err:
                log.debug(
                    "%s: TLS handshake with %s failed: %s", self.server.name, conn.address, err
                )
                self._close(conn)
                return
            conn.handshaking = False
            self.selector.modify(conn.sock, selectors.EVENT_READ, conn)
            conn.deadline = time.monotonic() + self.limits.header_timeout
            if tls.context.verify_mode == ssl.CERT_REQUIRED:
                self._check_certificate(conn, tls)
        self._read(conn)

    def _check_certificate(self, conn: Conn, tls: ssl.SSLSocket) -> None:
        """A verified client certificate authenticates the connection, unless the web
        config's SPIFFE allow-list refuses its ID (then every request is a 403)."""
        allowed = self.server.reloader.state.web.allowed_spiffe_ids
        if allowed:
            try:
                conn.spiffe_id = peer_id(tls.getpeercert())
            except SpiffeIdError as err:
                conn.forbidden = f"the client certificate is no X.509-SVID: {err}"
            else:
                if not allowed.allows(conn.spiffe_id):
                    conn.forbidden = f"SPIFFE ID {conn.spiffe_id} is not allowed"
            if conn.forbidden:
                log.warning("%s: %s: %s", self.server.name, conn.address, conn.forbidden)
                return
        self._unlist(conn)
        self._park(conn, authenticated=True)

    def _park(self, conn: Conn, *, authenticated: bool) -> None:
        """List *conn* as waiting for its next request."""
        now = time.monotonic()
        conn.authenticated = authenticated
        if not authenticated:
            conn.deadline = now + self.limits.header_timeout
            self._admit(conn)
            return
        while len(self.idle) >= self.limits.max_connections:
            self._close(next(iter(self.idle)))
        conn.deadline = now + self.limits.idle_timeout
        self.idle[conn] = None
        conn.where = "idle"

    def _read(self, conn: Conn) -> None:
        """Read what has arrived; hand the connection to a worker once its request
        head is complete (or too long)."""
        while True:
            try:
                data = conn.sock.recv(65536)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                return
            except OSError:
                self._close(conn)
                return
            if not data:
                self._close(conn)
                return
            if not conn.buffer:
                conn.first_byte = time.monotonic()
                conn.deadline = min(
                    conn.deadline if conn.where == "pending" else float("inf"),
                    conn.first_byte + self.limits.read_timeout,
                )
            conn.buffer += data
            if head_end(conn.buffer)[0] >= 0 or len(conn.buffer) > self.limits.max_header_bytes:
                self._dispatch(conn)
                return

    def _dispatch(self, conn: Conn) -> None:
        self._unlist(conn)
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(conn.sock)
        with self._busy_lock:
            self.busy.add(conn)
        conn.where = "busy"
        conn.sock.setblocking(True)
        try:
            self.workers.submit(self._work, conn)
        except RuntimeError:  # shutting down
            self.give_back(conn, keep=False)

    def _work(self, conn: Conn) -> None:
        keep = False
        try:
            keep = self.server._serve_connection(conn)
        except Exception:
            log.exception("%s: serving %s failed", self.server.name, conn.address)
        self.give_back(conn, keep)

    # --- connections coming back from workers -----------------------------------------------------

    def give_back(self, conn: Conn, keep: bool) -> None:
        """From a worker: the request is answered; *keep* the connection open for the next."""
        with self._busy_lock:
            self.busy.discard(conn)
        if not keep or self._stop.is_set():
            conn.where = ""
            with contextlib.suppress(OSError):
                conn.sock.close()
            return
        self._returned.append((conn, keep))
        self._wake()

    def _take_returned(self) -> None:
        while self._returned:
            conn, _ = self._returned.popleft()
            try:
                conn.sock.setblocking(False)
                self.selector.register(conn.sock, selectors.EVENT_READ, conn)
            except (OSError, ValueError, KeyError):
                with contextlib.suppress(OSError):
                    conn.sock.close()
                continue
            conn.first_byte = time.monotonic() if conn.buffer else 0.0
            self._park(conn, authenticated=conn.authenticated)
            if conn.buffer:
                conn.deadline = min(conn.deadline, conn.first_byte + self.limits.read_timeout)
                if head_end(conn.buffer)[0] >= 0:
                    self._dispatch(conn)
                    continue
            self._read(conn)  # TLS may hold decrypted bytes the selector does not see

    def _sweep(self, now: float) -> None:
        if self._accept_paused_until and now >= self._accept_paused_until:
            self._accept_paused_until = 0.0
        expired = [c for group in self.pending.values() for c in group if c.deadline <= now]
        expired += [c for c in self.idle if c.deadline <= now]
        for conn in expired:
            log.debug("%s: closing %s: deadline passed", self.server.name, conn.address)
            self._close(conn)
