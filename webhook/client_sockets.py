"""Client sockets whose blocking calls share one deadline per request (``webhook.connections``
hands them to gunicorn): a thread answering a request can never be held by its client for longer
than the request's deadline, plus ``ANSWER_GRACE`` to write the answer.

By the time a thread has a request, its head and body have arrived (read in the worker's event
loop, ``webhook.request_arrival``); the deadline still bounds what the thread writes, and
whatever a thread might read past what arrived (it never should).
"""
from __future__ import annotations

import errno
import logging
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any, ClassVar

log = logging.getLogger("gunicorn.error")

# The API server waits at most 30 s for a webhook (10 s unless configured otherwise) and sends
# each request in one go; a request still arriving after this long has been given up on.
DEFAULT_CLIENT_SECONDS = 10.0
# After the request deadline, how long writing the answer may still take.
ANSWER_GRACE = 2.0


class _RequestDeadline:
    """Blocking calls that share one deadline per request (mixed into a socket class).

    gunicorn switches the socket to blocking mode when a thread reads a request and to
    non-blocking when the loop has it; ``begin_request(deadline)`` starts the deadline (the worker
    gives the one its loop already counted from), ``setblocking(True)`` without one starts a
    deadline of ``request_seconds``. Timeouts gunicorn sets itself (draining a body) still apply
    when they are shorter.
    """

    request_seconds: ClassVar[float] = DEFAULT_CLIENT_SECONDS
    _deadline: float | None = None
    _limit: float | None = None  # a per-call timeout the caller asked for, if any
    _closing = False
    _reported = False

    def begin_request(self, deadline: float) -> None:
        self._deadline, self._limit = deadline, None
        super().settimeout(self._call_timeout(0.0)[0])  # type: ignore[misc]

    # --- blocking mode ----------------------------------------------------------------------
    def setblocking(self, flag: bool) -> None:
        if flag and not self._missed_deadline():
            self._deadline = None  # a worker thread takes the connection: a new request starts
        self.settimeout(None if flag else 0.0)

    def settimeout(self, value: float | None) -> None:
        if self._closing:
            super().settimeout(0.0)  # type: ignore[misc]  # closing never waits for the client
            return
        if value is not None and value <= 0:
            self._deadline = self._limit = None
            super().settimeout(value)  # type: ignore[misc]
            return
        if self._deadline is None:
            self._deadline = time.monotonic() + self.request_seconds
        self._limit = value
        super().settimeout(self._call_timeout(0.0)[0])  # type: ignore[misc]

    def gettimeout(self) -> float | None:
        return super().gettimeout() if self._deadline is None else self._limit  # type: ignore[misc,no-any-return]

    def shutdown(self, how: int) -> None:
        self._closing = True
        super().shutdown(how)  # type: ignore[misc]
        super().settimeout(0.0)  # type: ignore[misc]

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
        super().settimeout(timeout)  # type: ignore[misc]
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
                peer = "%s:%s" % self.getpeername()[:2]  # type: ignore[attr-defined]
            except OSError:
                peer = "a client"
            log.warning("closing the connection from %s: its request did not arrive within %gs",
                        peer, self.request_seconds)
        return ConnectionResetError(errno.ECONNRESET, f"client did not send its request within {self.request_seconds:g}s")


class BoundedClientSocket(_RequestDeadline, ssl.SSLSocket):
    """A TLS client connection whose blocking calls share one deadline per request."""

    # The event loop's read, of what has arrived (the socket does not block there, and the loop
    # keeps the deadline): straight to the ssl module's, without the three calls recv() makes
    # through the deadline above to reach it.
    recv_now = ssl.SSLSocket.read

    def do_handshake(self, block: bool = False) -> None:
        self._bounded(0.0, super().do_handshake, block)

    def read(self, len: int = 1024, buffer: Any = None) -> Any:  # noqa: A002 - the ssl module's signature
        return self._bounded(0.0, super().read, len, buffer)

    def write(self, data: Any) -> int:
        return self._bounded(ANSWER_GRACE, super().write, data)  # type: ignore[no-any-return]

    def send(self, data: Any, flags: int = 0) -> int:
        return self._bounded(ANSWER_GRACE, super().send, data, flags)  # type: ignore[no-any-return]


class BoundedPlainSocket(_RequestDeadline, socket.socket):
    """A plain TCP client connection (the health port) under the same deadline."""

    recv_now = socket.socket.recv  # the event loop's read (see BoundedClientSocket.recv_now)

    @classmethod
    def taking_over(cls, accepted: socket.socket) -> BoundedPlainSocket:
        return cls(accepted.family, accepted.type, accepted.proto, fileno=accepted.detach())

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        return self._bounded(0.0, super().recv, bufsize, flags)  # type: ignore[no-any-return]

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        return self._bounded(0.0, super().recv_into, buffer, nbytes, flags)  # type: ignore[no-any-return]

    def send(self, data: Any, flags: int = 0) -> int:
        return self._bounded(ANSWER_GRACE, super().send, data, flags)  # type: ignore[no-any-return]

    def sendall(self, data: Any, flags: int = 0) -> None:
        self._bounded(ANSWER_GRACE, super().sendall, data, flags)
