"""Client connections under gunicorn's threaded worker, bounded so that a slow or idle client
can neither hold a worker thread for long nor delay anyone else's request.

What gunicorn 27's ``gthread`` worker does on its own, and what is changed here:

- A new connection is handed straight to a worker thread, which waits up to five seconds for
  its first byte: a few clients that connect and send nothing hold every thread in turn.
  Here a new connection waits in the worker's poller (no thread) until it sends something,
  and is closed if it stays silent for ``client_seconds``.
- Once a thread owns a connection, the TLS handshake, the request line, the headers and the
  body are read with blocking calls that have no timeout: one client that stops half-way
  holds its thread for good. Here every blocking call is bounded by one deadline: the request
  must be in within ``client_seconds`` of the thread taking the connection, and the answer
  must be out within ``ANSWER_GRACE`` seconds after that. A client that misses it is cut off.
- Closing a connection lingers up to two seconds, on the main loop, for the client to close
  its side: a client that never does delays every other connection of that process. Here a
  closing connection only drains what has already arrived.

Kept-alive connections between requests wait in the poller as before (``keepalive``).
"""
from __future__ import annotations

import errno
import logging
import selectors
import ssl
import time
from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar

from gunicorn.workers import gthread

log = logging.getLogger("gunicorn.error")

# The API server waits at most 30 s for a webhook (10 s unless configured otherwise) and sends
# each request in one go; a request still arriving after this long has been given up on.
DEFAULT_CLIENT_SECONDS = 10.0
# After the request deadline, how long writing the answer may still take.
ANSWER_GRACE = 2.0


class BoundedClientSocket(ssl.SSLSocket):
    """A TLS client connection whose blocking calls share one deadline per request.

    gunicorn switches the socket to blocking mode whenever a worker thread takes the connection
    and back to non-blocking when it hands it to the poller; the deadline starts at the first
    and ends at the second. Timeouts gunicorn sets itself (draining a body) still apply when
    they are shorter.
    """

    request_seconds: ClassVar[float] = DEFAULT_CLIENT_SECONDS
    _deadline: float | None = None
    _limit: float | None = None  # a per-call timeout the caller asked for, if any
    _closing = False
    _reported = False

    # --- blocking mode ----------------------------------------------------------------------
    def setblocking(self, flag: bool) -> None:
        if flag and not self._missed_deadline():
            self._deadline = None  # a worker thread takes the connection: a new request starts
        self.settimeout(None if flag else 0.0)

    def settimeout(self, value: float | None) -> None:
        if self._closing:
            super().settimeout(0.0)  # closing never waits for the client
            return
        if value is not None and value <= 0:
            self._deadline = self._limit = None
            super().settimeout(value)
            return
        if self._deadline is None:
            self._deadline = time.monotonic() + self.request_seconds
        self._limit = value
        super().settimeout(self._call_timeout(0.0)[0])

    def gettimeout(self) -> float | None:
        return super().gettimeout() if self._deadline is None else self._limit

    def shutdown(self, how: int) -> None:
        self._closing = True
        super().shutdown(how)
        super().settimeout(0.0)

    # --- the calls that wait for the client ---------------------------------------------------
    def do_handshake(self, block: bool = False) -> None:
        self._bounded(0.0, super().do_handshake, block)

    def read(self, len: int = 1024, buffer: Any = None) -> Any:  # noqa: A002 - the ssl module's signature
        return self._bounded(0.0, super().read, len, buffer)

    def write(self, data: Any) -> int:
        return self._bounded(ANSWER_GRACE, super().write, data)

    def send(self, data: Any, flags: int = 0) -> int:
        return self._bounded(ANSWER_GRACE, super().send, data, flags)

    def _missed_deadline(self, grace: float = 0.0) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline + grace

    def _call_timeout(self, grace: float) -> tuple[float, bool]:
        """The timeout for the next call, and whether the deadline (rather than a shorter
        timeout the caller asked for) sets it."""
        remaining = (self._deadline or 0.0) + grace - time.monotonic()
        if self._limit is not None and self._limit < remaining:
            return self._limit, False
        return max(remaining, 0.001), True

    def _bounded(self, grace: float, call: Callable[..., Any], *args: Any) -> Any:
        if self._deadline is None or self._closing:
            return call(*args)
        if self._missed_deadline(grace):
            raise self._cut_off()
        timeout, by_deadline = self._call_timeout(grace)
        ssl.SSLSocket.settimeout(self, timeout)
        try:
            return call(*args)
        except TimeoutError:
            if by_deadline:
                raise self._cut_off() from None
            raise

    def _cut_off(self) -> ConnectionResetError:
        """The client missed its deadline: gunicorn closes the connection on a reset without
        logging a traceback, and the one warning below says why."""
        if not self._reported:
            self._reported = True
            try:
                peer = "%s:%s" % self.getpeername()[:2]
            except OSError:
                peer = "a client"
            log.warning("closing the connection from %s: its request did not arrive within %gs",
                        peer, self.request_seconds)
        return ConnectionResetError(errno.ECONNRESET, f"client did not send its request within {self.request_seconds:g}s")


class BoundedThreadWorker(gthread.ThreadWorker):
    """gunicorn's gthread worker, but a new connection gets a thread only once it has sent
    something; one that stays silent for ``idle_seconds`` is closed."""

    idle_seconds: ClassVar[float] = DEFAULT_CLIENT_SECONDS

    def accept(self, listener: Any) -> None:
        try:
            client, address = listener.accept()
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                return
            raise
        self.nr_conns += 1
        conn = gthread.TConn(self.cfg, client, address, listener.getsockname())
        # Every pending connection gets the same lifetime, so the queue stays ordered by expiry,
        # as murder_pending() expects.
        conn.timeout = time.monotonic() + self.idle_seconds
        self.pending_conns.append(conn)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self.on_pending_socket_readable, conn))


SSLContextHook = Callable[[Any, Callable[[], ssl.SSLContext]], ssl.SSLContext]


def bounded_clients(client_seconds: float, ssl_context: SSLContextHook | None = None) -> dict[str, Any]:
    """The gunicorn settings that bound every client to ``client_seconds``: the worker class,
    and an ``ssl_context`` hook (wrapping ``ssl_context`` if given) whose contexts make
    BoundedClientSocket connections."""
    socket_class = type("BoundedClientSocket", (BoundedClientSocket,), {"request_seconds": client_seconds})
    worker_class = type("BoundedThreadWorker", (BoundedThreadWorker,), {"idle_seconds": client_seconds,
                                                                      "__module__": __name__})

    def bounded_ssl_context(conf: Any, default_factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        context = ssl_context(conf, default_factory) if ssl_context else default_factory()
        context.sslsocket_class = socket_class
        return context

    return {"worker_class": worker_class, "ssl_context": bounded_ssl_context}
