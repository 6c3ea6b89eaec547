"""Client connections under gunicorn's threaded worker: a connection costs no request thread
until its TLS handshake and its whole request head are in, and none can hold a thread, the
worker's loop or the room other connections need for longer than its deadline.

What gunicorn 27's ``gthread`` worker does on its own, and what ``EventLoopWorker`` changes:

- gthread hands a new connection to a request thread, which runs the TLS handshake and reads the
  request head with blocking calls: a client that sends one byte and stalls holds a thread until
  it is cut, so as many stalled clients as threads stop the server. Here the handshake and the
  head are read without blocking in the worker's event loop (the main thread); only a connection
  whose head is complete is handed to a thread, with what was read already in its parser.
- gthread counts connections that have not sent anything against ``worker_connections`` and
  stops accepting when they reach it: a thousand silent connects stop the worker. Here
  connections that have not yet completed a handshake and a first request head are *pending*,
  bounded on their own (``max_pending``; a new one evicts the oldest), and never counted against
  ``worker_connections``, which then bounds only *established* connections (those that sent a
  whole request head: the API server's). Accepting never stops.
- gthread can count a connection closed twice (the handshake fails, the thread closes the
  socket, then the main loop's close raises and counts it again), and the limit drifts. Here one
  method closes a connection, once, and uncounts it if it was counted.
- Every connection has one deadline per request, ``client_seconds`` from its first byte (from the
  accept, for a new connection): the handshake and the head must be in by then, in the loop, and
  the body, read by the thread, by the same deadline (``BoundedClientSocket``); the answer may
  take ``ANSWER_GRACE`` seconds more. Kept-alive connections wait in the loop between requests for
  up to ``keepalive`` seconds.
- Closing a connection only drains what has already arrived; it never waits for the client.

Two kinds of listener: the TLS port (admission, conversion, and probes for humans) and the plain
health port (``plain_ports``: kubelet probes and Prometheus, which present no client certificate).
Both get the same treatment. HTTP/2 is not offered (a connection would hold a thread for its
whole life).

The numbers behind these choices, and the attacks they answer, are in docs/security.md.
"""
from __future__ import annotations

import errno
import logging
import re
import resource
import selectors
import socket
import ssl
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

from gunicorn import http, util
from gunicorn import sock as gunicorn_sock
from gunicorn.http.errors import NoMoreData
from gunicorn.workers import gthread

log = logging.getLogger("gunicorn.error")

# The API server waits at most 30 s for a webhook (10 s unless configured otherwise) and sends
# each request in one go; a request still arriving after this long has been given up on.
DEFAULT_CLIENT_SECONDS = 10.0
# After the request deadline, how long writing the answer may still take.
ANSWER_GRACE = 2.0
# Connections still in their handshake or first request head, per worker process. Each costs a
# file descriptor and a few KiB (the TLS state); far above what the API server opens at once.
DEFAULT_MAX_PENDING = 4096
# A request head longer than this is refused (431) before any thread sees it: the API server's
# are well under 1 KiB, and gunicorn's own per-line and per-field limits apply after it.
MAX_HEAD_BYTES = 64 * 1024
# Connections accepted per readiness of a listener, and expired connections closed, per turn of
# the loop: a burst (a thousand connections opened together reach their deadline together) is
# worked off between the other connections' events, not ahead of all of them.
ACCEPT_BATCH = 64
EXPIRE_BATCH = 128
# At most one warning per this many seconds about clients cut at their deadline (a flood of them
# must not become a flood of log lines); the next says how many more there were.
WARNING_INTERVAL = 10.0

# A request whose body is larger than this (or of unknown length: chunked) is served by the
# large-body threads, a quarter of the threads (at least one): a few clients sending maximum-size
# reviews then cannot take every thread, and the probes and ordinary reviews behind them are
# still answered promptly. The API server's reviews are a few KiB; one of a thousand-worker job
# with long environments is well under this.
LARGE_BODY_BYTES = 1024 * 1024


def _any_case(word: bytes) -> bytes:
    """A pattern matching ``word`` (lower-case ASCII) in any case: each letter a class of its two
    cases, as ``bytes.lower`` folds ASCII letters only."""
    return b"".join(b"[%c%c]" % (c, c - 32) if 97 <= c <= 122 else re.escape(bytes((c,))) for c in word)


# Searched for in the head's fields as they are: a pattern that starts with a literal is found by
# a scan at C speed, where a case-blind one that starts with an optional byte is tried at every
# offset, and letter classes spare lower-casing a copy of the fields first (docs/performance.md,
# "A served request, counted", and "The event loop, cut").
_CONTENT_LENGTH = re.compile(rb"\n" + _any_case(b"content-length") + rb"[ \t]*:[ \t]*(\d+)")
_CHUNKED = re.compile(rb"\n" + _any_case(b"transfer-encoding") + rb"[ \t]*:[^\r\n]*" + _any_case(b"chunked"))

_HEAD_TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\n"
                   b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s")


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


# Where a connection is.
HANDSHAKE = "handshake"  # TLS handshake under way (pending)
HEAD = "head"  # reading a request head in the loop (pending if it is the first request)
BUSY = "busy"  # a request thread has it
IDLE = "idle"  # kept alive between requests


class Connection:
    """One client connection as the worker's loop sees it."""

    __slots__ = ("sock", "client", "server", "phase", "head", "scanned", "deadline", "dispatched", "parser",
                 "events", "on_ready", "established", "closed")

    def __init__(self, sock: socket.socket, client: Any, server: Any, deadline: float, tls: bool) -> None:
        self.sock = sock
        self.client = client
        self.server = server
        self.phase = HANDSHAKE if tls else HEAD
        self.head = bytearray()
        self.scanned = 0  # how much of head has been searched for its end
        self.deadline = deadline
        self.dispatched = 0.0  # when the head was complete and the request queued for a thread
        self.parser: Any = None
        self.events = 0  # what the poller waits for (0: not registered)
        # What the poller calls when it is ready: made once, not at every wait (the worker sets it;
        # it refers back to the connection, a cycle that closing the connection breaks).
        self.on_ready: Callable[[Any], None] | None = None
        self.established = False  # counted in nr_conns
        self.closed = False

    def peer(self) -> str:
        try:
            return "%s:%s" % tuple(self.client[:2])
        except (TypeError, IndexError):
            return "a client"


# Why a connection is closed before it was served a request (the metrics' label values).
DROP_REASONS = ("deadline", "evicted", "handshake_failed", "untrusted_client_certificate", "head_too_large")


@dataclass(frozen=True)
class ConnectionHooks:
    """What the worker reports, from its loop (cheap, must not raise)."""
    # A connection closed before it was served a request, and why: deadline, evicted,
    # handshake_failed, untrusted_client_certificate, head_too_large.
    dropped: Callable[[str, Connection], None] | None = None
    # The pending and established counts, when either changed (at most once per loop turn).
    counts: Callable[[int, int], None] | None = None


class EventLoopWorker(gthread.ThreadWorker):
    """gunicorn's gthread worker, with handshakes and request heads read in its event loop (see
    the module docstring)."""

    client_seconds: ClassVar[float] = DEFAULT_CLIENT_SECONDS
    max_pending: ClassVar[int] = DEFAULT_MAX_PENDING
    plain_ports: ClassVar[frozenset[int]] = frozenset()
    hooks: ClassVar[ConnectionHooks] = ConnectionHooks()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Each ordered oldest first; within each, every entry got the same lifetime when it was
        # added, so the first to expire is always at the front.
        self.pending: OrderedDict[Connection, None] = OrderedDict()  # handshake or first head
        self.reading: OrderedDict[Connection, None] = OrderedDict()  # established, next head
        self.idle: OrderedDict[Connection, None] = OrderedDict()  # kept alive between requests
        # gthread's handle_request looks at its length (a deque in gunicorn; only len() is used).
        self.keepalived_conns = self.idle  # type: ignore[assignment]
        self.keepalive_seconds = float(self.cfg.keepalive)  # read once: a config lookup is two calls
        self._next_notify = 0.0
        # No deadline in the tables is earlier than this: until then a turn of the loop need not
        # look at them (see _expire).
        self._next_due = 0.0
        self._reported_counts = (-1, -1)
        self._cut_since_warning = 0
        self._next_warning = 0.0

    # --- start and stop ---------------------------------------------------------------------
    def init_process(self) -> None:
        _raise_open_files_limit(self.worker_connections + self.max_pending + 256)
        self.large_pool = futures.ThreadPoolExecutor(max_workers=max(1, self.cfg.threads // 4),
                                                     thread_name_prefix="large-body")
        super().init_process()

    def handle_quit(self, sig: Any, frame: Any) -> None:
        self.large_pool.shutdown(wait=False)
        super().handle_quit(sig, frame)

    def run(self) -> None:
        queue_fd = self.method_queue.fileno()
        assert queue_fd is not None  # opened by init_process
        self.poller.register(queue_fd, selectors.EVENT_READ, self.method_queue.run_callbacks)
        self.set_accept_enabled(True)
        wait = 0.0
        while self.alive:
            self.wait_for_and_dispatch_events(timeout=wait)
            if not self.is_parent_alive():
                break
            now = time.monotonic()
            wait = self._expire(now)
            self._report_counts()
            self._notify_when_due(now)

        # Stopping: no new connections; idle and pending ones go now, requests under way (in a
        # thread, or whose head is arriving) get the graceful timeout.
        self.set_accept_enabled(False)
        for table in (self.pending, self.idle):
            for conn in list(table):
                self._close(conn)
        graceful_deadline = time.monotonic() + self.cfg.graceful_timeout
        wait = 0.0
        while self.nr_conns > 0 and time.monotonic() < graceful_deadline:
            self.wait_for_and_dispatch_events(timeout=min(wait, 0.5))
            now = time.monotonic()
            wait = self._expire(now)
            self._notify_when_due(now)
            for conn in list(self.idle):  # answered with Connection: close, but be sure
                self._close(conn)
        for table in (self.pending, self.reading, self.idle):
            for conn in list(table):
                self._close(conn)
        self.tpool.shutdown(wait=False)
        self.large_pool.shutdown(wait=False)
        self.poller.close()
        self.method_queue.close()
        for listener in self.sockets:
            listener.close()

    def _notify_when_due(self, now: float) -> None:
        """Tell the arbiter we are alive: at most twice a second, not on every turn of a busy loop."""
        if now >= self._next_notify:
            self._next_notify = now + 0.5
            self.notify()

    # --- new connections ----------------------------------------------------------------------
    def accept(self, listener: Any) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                client, address = listener.accept()
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # Out of descriptors: make room (the oldest pending connection goes) and
                    # accept again on the next turn of the loop.
                    log.warning("cannot accept a connection (%s): closing the oldest pending one", exc)
                    if self.pending:
                        self._drop(next(iter(self.pending)), "evicted")
                    return
                if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.ECONNABORTED, errno.EPROTO):
                    return
                raise
            try:
                self._admit(client, address, listener.getsockname())
            except Exception:  # noqa: BLE001 - one bad connection must not stop the worker
                log.exception("could not set up the connection from %s", address)
                client.close()

    def _admit(self, client: socket.socket, address: Any, server: Any) -> None:
        client.setblocking(False)
        tls = server[1] not in self.plain_ports if isinstance(server, tuple) else True
        # A TLS connection stays a plain socket until its first bytes arrive (_start_tls): a
        # silent connection then costs a descriptor, not the TLS state (some 30 KiB).
        sock = client if tls else BoundedPlainSocket.taking_over(client)
        if len(self.pending) >= self.max_pending:
            self._drop(next(iter(self.pending)), "evicted")
        conn = Connection(sock, address, server, time.monotonic() + self.client_seconds, tls)
        conn.on_ready = partial(self._on_ready, conn)
        self.pending[conn] = None
        self._wait_for(conn, selectors.EVENT_READ)

    def _start_tls(self, conn: Connection) -> None:
        """Wrap a new TLS connection's socket, once it has something to say."""
        self._stop_waiting(conn)  # the wrapped socket is a new object on the same descriptor
        conn.sock = gunicorn_sock.ssl_context(self.cfg).wrap_socket(
            conn.sock, server_side=True, do_handshake_on_connect=False,
            suppress_ragged_eofs=self.cfg.suppress_ragged_eofs)

    # --- the loop's side of a connection ----------------------------------------------------------
    def _wait_for(self, conn: Connection, events: int) -> None:
        if conn.events == events or conn.closed:
            return
        if conn.events:
            self.poller.modify(conn.sock, events, conn.on_ready)
        else:
            self.poller.register(conn.sock, events, conn.on_ready)
        conn.events = events

    def _stop_waiting(self, conn: Connection) -> None:
        if conn.events:
            conn.events = 0
            try:
                self.poller.unregister(conn.sock)
            except (KeyError, ValueError, OSError):
                pass

    def _on_ready(self, conn: Connection, _fileobj: Any = None) -> None:
        if conn.closed:
            return
        try:
            if conn.phase is IDLE:
                # The first bytes of the next request: its deadline starts now (the connection
                # joins `reading` only if it has to wait for the rest: _wait_for_more).
                del self.idle[conn]
                conn.phase, conn.deadline = HEAD, time.monotonic() + self.client_seconds
            if conn.phase is HANDSHAKE:
                if not isinstance(conn.sock, ssl.SSLSocket):
                    self._start_tls(conn)
                try:
                    conn.sock.do_handshake()  # type: ignore[attr-defined]
                except ssl.SSLError as exc:
                    if isinstance(exc, (ssl.SSLWantReadError, ssl.SSLWantWriteError)):
                        raise
                    self._drop(conn, _handshake_failure(exc))
                    return
                conn.phase = HEAD
            self._read_head(conn)
        except ssl.SSLWantReadError:
            self._wait_for_more(conn, selectors.EVENT_READ)
        except ssl.SSLWantWriteError:
            self._wait_for_more(conn, selectors.EVENT_WRITE)
        except BlockingIOError:
            self._wait_for_more(conn, selectors.EVENT_READ)
        except (OSError, ssl.SSLError):  # reset, or a TLS error after the handshake: the client's
            self._close(conn)
        except Exception:  # noqa: BLE001 - one bad connection must not stop the worker
            log.exception("error on the connection from %s", conn.peer())
            self._close(conn)

    def _wait_for_more(self, conn: Connection, events: int) -> None:
        """Wait for the rest of a handshake or head; an established connection's deadline is
        kept in `reading` from now (a pending one is in `pending` from its accept)."""
        if conn.established and conn not in self.reading:
            self.reading[conn] = None
        self._wait_for(conn, events)

    def _read_head(self, conn: Connection) -> None:
        """Read what has arrived; hand the connection to a thread once the head is complete.
        Raises SSLWantReadError or BlockingIOError when it has to wait for more."""
        head = conn.head  # grows in place
        while True:
            size, scanned = len(head), conn.scanned
            if size > scanned:  # not yet searched for its end from there
                start = scanned - 3 if scanned > 3 else 0
                # A bare LF ends a line too as far as finding the end goes: gunicorn's parser then
                # answers such a head with a 400 rather than the client waiting for its deadline.
                end = head.find(b"\r\n\r\n", start)
                if end >= 0 or head.find(b"\n\n", start) >= 0:
                    break
                conn.scanned = size
            if size > MAX_HEAD_BYTES:
                self._refuse_head(conn)
                return
            data = conn.sock.recv_now(65536)  # type: ignore[attr-defined]
            if not data:  # the client closed
                self._close(conn)
                return
            head += data
        self._dispatch(conn, end if end >= 0 else size)

    def _dispatch(self, conn: Connection, fields_end: int) -> None:
        if not conn.established:  # its first request: it was pending
            del self.pending[conn]
            self._establish(conn)
        else:
            self.reading.pop(conn, None)
        self._stop_waiting(conn)
        if conn.parser is None:
            conn.parser = http.get_parser(self.cfg, conn.sock, conn.client)
        large = _large_body(conn.head, fields_end)
        conn.dispatched = time.monotonic()
        conn.parser.unreader.unread(conn.head)  # copied there: conn.head is a new one below
        conn.head, conn.scanned, conn.phase = bytearray(), 0, BUSY
        if large:
            served = self.large_pool.submit(self.handle, conn)
            served.add_done_callback(lambda done: self.method_queue.defer(self.finish_request, conn, done))
        else:
            self.enqueue_req(conn)  # type: ignore[arg-type]  # our Connection stands in for gthread's TConn

    def _establish(self, conn: Connection) -> None:
        """Count the connection against worker_connections, closing the longest-idle kept-alive
        connection if that is full (its client reconnects when it needs to)."""
        if self.nr_conns >= self.worker_connections and self.idle:
            self._close(next(iter(self.idle)))
        conn.established = True
        self.nr_conns += 1

    def _refuse_head(self, conn: Connection) -> None:
        body = (b'{"kind":"Status","apiVersion":"v1","status":"Failure","code":431,'
                b'"reason":"RequestHeaderFieldsTooLarge","message":"request head longer than %d bytes"}'
                % MAX_HEAD_BYTES)
        try:
            conn.sock.send(_HEAD_TOO_LARGE % (len(body), body))
        except (OSError, ssl.SSLError):
            pass
        self._drop(conn, "head_too_large")

    # --- back from a thread -----------------------------------------------------------------------
    def handle(self, conn: Connection) -> Any:  # type: ignore[override]
        """Serve the request whose head is in ``conn.parser``'s buffer. Runs in a thread."""
        req = None
        try:
            # Time spent queued for a thread is the server's, not the client's: the client's
            # deadline moves by as much (its body waits unread meanwhile).
            queued = max(0.0, time.monotonic() - conn.dispatched)
            conn.sock.begin_request(conn.deadline + queued)  # type: ignore[attr-defined]
            req = next(conn.parser)
            if not req:
                return False
            # gthread's own helper (not in the type stubs); our Connection stands in for its TConn.
            return self._keepalive_after(conn, self.handle_request(req, conn))  # type: ignore[attr-defined,arg-type]
        except NoMoreData as exc:
            self.log.debug("Ignored premature client disconnection. %s", exc)
        except StopIteration as exc:
            self.log.debug("Closing connection. %s", exc)
        except ssl.SSLError as exc:
            if exc.args[0] != ssl.SSL_ERROR_EOF:
                self.handle_error(req, conn.sock, conn.client, exc)
        except OSError as exc:
            if exc.errno not in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN):
                self.log.exception("Socket error processing request.")
        except Exception as exc:  # noqa: BLE001 - answered as gunicorn answers it
            self.handle_error(req, conn.sock, conn.client, exc)
        return False

    def finish_request(self, conn: Connection, fs: Future[Any]) -> None:  # type: ignore[override]
        """Back on the loop (via gthread's method queue): wait for the next request, or close."""
        try:
            keep = not fs.cancelled() and fs.result() is True
        except Exception:  # noqa: BLE001 - handle() answers its own errors; close in any case
            keep = False
        if conn.closed:
            return
        if not keep or not self.alive or conn.sock.fileno() < 0:
            self._close(conn, graceful=keep or conn.sock.fileno() >= 0)
            return
        try:
            conn.sock.setblocking(False)
        except OSError:
            self._close(conn)
            return
        unreader = conn.parser.unreader
        if unreader.buf.getvalue():  # the client pipelined its next request (as gthread looks)
            conn.head += unreader.take_buffered()
            conn.phase, conn.deadline = HEAD, time.monotonic() + self.client_seconds
            self._on_ready(conn)
            return
        conn.phase, conn.deadline = IDLE, time.monotonic() + self.keepalive_seconds
        self.idle[conn] = None
        self._wait_for(conn, selectors.EVENT_READ)

    # --- closing --------------------------------------------------------------------------------
    def _expire(self, now: float) -> float:
        """Close the connections whose deadline has passed; return the seconds until the next
        deadline (at most a second, for the arbiter's heartbeat).

        The tables are looked at only once ``_next_due`` has come: the earliest deadline in them
        when they were last looked at or, if sooner, that time plus the shortest lifetime a
        connection is given (client_seconds or keepalive). A deadline is set when its connection
        is added to a table, from the time then: none added since is earlier."""
        if now < self._next_due:
            return min(self._next_due - now, 1.0)
        budget = EXPIRE_BATCH
        for table, reason in ((self.pending, "deadline"), (self.reading, "deadline"), (self.idle, None)):
            while table and budget > 0:
                conn = next(iter(table))
                if conn.deadline > now:
                    break
                budget -= 1
                if reason is None:
                    self._close(conn)
                else:
                    self._drop(conn, reason)
        if budget == 0:  # more may be due: the next turn goes on at once
            self._next_due = now
            return 0.0
        due = now + min(self.client_seconds, self.keepalive_seconds)
        for table in (self.pending, self.reading, self.idle):
            if table:
                due = min(due, next(iter(table)).deadline)
        self._next_due = due
        return min(max(due - now, 0.0), 1.0)

    def _drop(self, conn: Connection, reason: str) -> None:
        """Close a connection that was never served its request, and say so."""
        if conn.closed:
            return
        if reason == "deadline":
            self._warn_cut(conn)
        self._close(conn)
        if self.hooks.dropped is not None:
            try:
                self.hooks.dropped(reason, conn)
            except Exception:  # noqa: BLE001 - reporting must not stop the loop
                log.exception("reporting a dropped connection failed")

    def _warn_cut(self, conn: Connection) -> None:
        now = time.monotonic()
        if now < self._next_warning:
            self._cut_since_warning += 1
            return
        more = f" ({self._cut_since_warning} more since the last such warning)" if self._cut_since_warning else ""
        log.warning("closing the connection from %s: its request did not arrive within %gs%s",
                    conn.peer(), self.client_seconds, more)
        self._cut_since_warning, self._next_warning = 0, now + WARNING_INTERVAL

    def _close(self, conn: Connection, graceful: bool = False) -> None:
        """The one place a connection is closed and uncounted: at most once."""
        if conn.closed:
            return
        conn.closed = True
        for table in (self.pending, self.reading, self.idle):
            table.pop(conn, None)
        self._stop_waiting(conn)
        conn.on_ready = None
        if conn.established:
            conn.established = False
            self.nr_conns -= 1
        try:
            if graceful:
                util.close_graceful(conn.sock)  # never waits: see _RequestDeadline.shutdown
            else:
                conn.sock.close()
        except OSError:
            pass

    def _report_counts(self) -> None:
        counts = (len(self.pending), self.nr_conns)
        if counts != self._reported_counts and self.hooks.counts is not None:
            self._reported_counts = counts
            try:
                self.hooks.counts(*counts)
            except Exception:  # noqa: BLE001 - reporting must not stop the loop
                log.exception("reporting the connection counts failed")


def _large_body(head: bytes | bytearray, fields_end: int | None = None) -> bool:
    """Whether the request whose head (and maybe part of its body) is ``head`` brings a body
    over LARGE_BODY_BYTES, or one of unknown length. ``fields_end``: where its fields end (its
    first CRLF CRLF, else its length), if the caller has found it already."""
    if fields_end is None:
        fields_end = head.find(b"\r\n\r\n")
        if fields_end < 0:
            fields_end = len(head)
    length = _CONTENT_LENGTH.search(head, 0, fields_end)
    if length is not None:
        # Six digits are at most 999,999, under the limit: only a longer number is converted.
        return length.end() - length.start(1) > 6 and int(length.group(1)) > LARGE_BODY_BYTES
    return _CHUNKED.search(head, 0, fields_end) is not None


def _handshake_failure(exc: ssl.SSLError) -> str:
    if getattr(exc, "reason", None) == "CERTIFICATE_VERIFY_FAILED" or getattr(exc, "verify_code", 0):
        return "untrusted_client_certificate"
    return "handshake_failed"


def _raise_open_files_limit(wanted: int) -> None:
    """Pending connections are file descriptors: make sure the process may open enough."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        log.warning("cannot raise the open files limit to %d (%s)", target, exc)
    if target < wanted:
        log.warning("the open files limit (%d) is below the %d connections this worker may hold", target, wanted)


SSLContextHook = Callable[[Any, Callable[[], ssl.SSLContext]], ssl.SSLContext]


def bounded_clients(client_seconds: float, ssl_context: SSLContextHook | None = None, *,
                    max_pending: int = DEFAULT_MAX_PENDING, plain_ports: frozenset[int] = frozenset(),
                    on_dropped: Callable[[str, Connection], None] | None = None,
                    on_counts: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """The gunicorn settings that bound every client to ``client_seconds``: the worker class,
    and an ``ssl_context`` hook (wrapping ``ssl_context`` if given) whose contexts make
    BoundedClientSocket connections."""
    socket_class = type("BoundedClientSocket", (BoundedClientSocket,), {"request_seconds": client_seconds})
    worker_class = type("EventLoopWorker", (EventLoopWorker,), {
        "client_seconds": client_seconds, "max_pending": max_pending, "plain_ports": plain_ports,
        "hooks": ConnectionHooks(on_dropped, on_counts), "__module__": __name__})

    def bounded_ssl_context(conf: Any, default_factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        context = ssl_context(conf, default_factory) if ssl_context else default_factory()
        context.sslsocket_class = socket_class
        return context

    return {"worker_class": worker_class, "ssl_context": bounded_ssl_context}
