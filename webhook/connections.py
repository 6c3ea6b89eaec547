"""Client connections under gunicorn's threaded worker: a connection costs no request thread
until its TLS handshake, its whole request head and its whole body are in, and none can hold a
thread, the worker's loop or the room other connections need for longer than its deadline.

What gunicorn 27's ``gthread`` worker does on its own, and what ``EventLoopWorker`` changes:

- gthread hands a new connection to a request thread, which runs the TLS handshake and reads the
  request with blocking calls: a client that sends one byte and stalls holds a thread until it
  is cut, so as many stalled clients as threads stop the server. Here the handshake, the head and
  the body are read without blocking in the worker's event loop (the main thread;
  ``webhook.request_arrival``); only a request that has fully arrived is handed to a thread
  (``webhook.request_handover``), and a client refused by its head (client authentication, a
  body over the limit) is answered from the loop without its body ever being read.
- gthread counts connections that have not sent anything against ``worker_connections`` and
  stops accepting when they reach it: a thousand silent connects stop the worker. Here
  connections that have not yet completed a handshake and a first request are *pending*,
  bounded on their own (``max_pending``; a new one evicts the oldest), and never counted against
  ``worker_connections``, which then bounds only *established* connections (those that sent a
  whole request: the API server's). Accepting never stops.
- gthread can count a connection closed twice (the handshake fails, the thread closes the
  socket, then the main loop's close raises and counts it again), and the limit drifts. Here one
  method closes a connection, once, and uncounts it if it was counted.
- Every connection has one deadline per request, ``client_seconds`` from its first byte (from the
  accept, for a new connection): the handshake, the head and the body must be in by then; the
  answer may take ``ANSWER_GRACE`` seconds more (``webhook.client_sockets``). Kept-alive
  connections wait in the loop between requests for up to ``keepalive`` seconds.
- Closing a connection only drains what has already arrived; it never waits for the client.

Two kinds of listener: the TLS port (admission, conversion, and probes for humans) and the plain
health port (``plain_ports``: kubelet probes and Prometheus, which present no client certificate).
Both get the same treatment, and the health port's requests have threads of their own. HTTP/2 is
not offered (a connection would hold a thread for its whole life).

The numbers behind these choices, and the attacks they answer, are in docs/security.md.
"""
from __future__ import annotations

import errno
import logging
import resource
import selectors
import socket
import ssl
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

from gunicorn import util
from gunicorn import sock as gunicorn_sock
from gunicorn.workers import gthread

from webhook.client_sockets import ANSWER_GRACE, DEFAULT_CLIENT_SECONDS, BoundedClientSocket, BoundedPlainSocket
from webhook.request_arrival import (BODY, CLOSING, HANDSHAKE, HEAD, IDLE, LARGE_READ_PER_TURN, LINGER_SECONDS,
                                     ArrivingRequests, FindRoom, RefuseClient)
from webhook.request_framing import LARGE_BODY_BYTES, Answer, too_large
from webhook.review import MAX_BODY_BYTES, TOO_LARGE
from webhook.request_handover import HandingOver

__all__ = ["ANSWER_GRACE", "DEFAULT_CLIENT_SECONDS", "DEFAULT_MAX_PENDING", "LARGE_BODY_BYTES", "BoundedClientSocket",
           "Connection", "ConnectionHooks", "EventLoopWorker", "bounded_clients"]

log = logging.getLogger("gunicorn.error")

# Connections still in their handshake or first request, per worker process. Each costs a file
# descriptor and a few KiB (the TLS state); far above what the API server opens at once.
DEFAULT_MAX_PENDING = 4096
# Connections accepted per readiness of a listener, and expired connections closed, per turn of
# the loop: a burst (a thousand connections opened together reach their deadline together) is
# worked off between the other connections' events, not ahead of all of them.
ACCEPT_BATCH = 64
EXPIRE_BATCH = 128
# At most one warning per this many seconds about clients cut at their deadline (a flood of them
# must not become a flood of log lines); the next says how many more there were.
WARNING_INTERVAL = 10.0
# How often bodies waiting for room in the body budget look again (room is given back by threads).
ROOM_RETRY_SECONDS = 0.02


class Connection:
    """One client connection as the worker's loop sees it."""

    __slots__ = ("sock", "client", "server", "phase", "head", "scanned", "deadline", "dispatched", "parser",
                 "events", "on_ready", "established", "closed", "body_start", "body_end", "chunked", "large", "held", "progress")

    def __init__(self, sock: socket.socket, client: Any, server: Any, deadline: float, tls: bool) -> None:
        self.sock = sock
        self.client = client
        self.server = server
        self.phase = HANDSHAKE if tls else HEAD
        self.head = bytearray()  # what has arrived of the request: head, then body
        self.scanned = 0  # how much of head has been searched for its end
        self.deadline = deadline
        self.dispatched = 0.0  # when the request was complete and queued for a thread
        self.parser: Any = None
        self.events = 0  # what the poller waits for (0: not registered)
        # What the poller calls when it is ready: made once, not at every wait (the worker sets it;
        # it refers back to the connection, a cycle that closing the connection breaks).
        self.on_ready: Callable[[Any], None] | None = None
        self.established = False  # counted in nr_conns
        self.closed = False
        self.body_start = 0  # where the body starts in head
        self.body_end = 0  # where the body ends in head (Content-Length); -1 for chunked
        self.chunked: Any = None  # a ChunkedBody scan, for a chunked body
        self.large = False  # for the large-body threads
        self.held = 0  # room held in the body budget for what has arrived
        self.progress = 0.0  # when bytes of its body last arrived

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
    # handshake_failed, untrusted_client_certificate, head_too_large, client_refused,
    # body_too_large, body_stalled, body_ended, no_room.
    dropped: Callable[[str, Connection], None] | None = None
    # The pending and established counts, when either changed (at most once per loop turn).
    counts: Callable[[int, int], None] | None = None
    # The answer refusing a client by its request head (client authentication), or None.
    refuse_client: RefuseClient | None = None
    # The loaded app's body budget, where bodies arriving in the loop hold room.
    arriving_room: FindRoom | None = None


class EventLoopWorker(ArrivingRequests, HandingOver, gthread.ThreadWorker):  # type: ignore[misc]
    """gunicorn's gthread worker, with handshakes and whole requests read in its event loop (see
    the module docstring)."""

    client_seconds: ClassVar[float] = DEFAULT_CLIENT_SECONDS
    max_pending: ClassVar[int] = DEFAULT_MAX_PENDING
    plain_ports: ClassVar[frozenset[int]] = frozenset()
    hooks: ClassVar[ConnectionHooks] = ConnectionHooks()
    max_body: ClassVar[int] = MAX_BODY_BYTES
    too_large: ClassVar[Answer] = too_large(TOO_LARGE)

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
        self._init_arrival()

    # --- start and stop ---------------------------------------------------------------------
    def init_process(self) -> None:
        _raise_open_files_limit(self.worker_connections + self.max_pending + 256)
        self._start_pools(self.cfg.threads)
        super().init_process()  # loads the app, then runs the loop (run)

    def handle_quit(self, sig: Any, frame: Any) -> None:
        self._stop_pools()
        super().handle_quit(sig, frame)

    def run(self) -> None:
        queue_fd = self.method_queue.fileno()
        assert queue_fd is not None  # opened by init_process
        self.poller.register(queue_fd, selectors.EVENT_READ, self.method_queue.run_callbacks)
        self.set_accept_enabled(True)
        self._find_room()
        wait = 0.0
        while self.alive:
            self.wait_for_and_dispatch_events(timeout=wait)
            if not self.is_parent_alive():
                break
            now = time.monotonic()
            wait = self._expire(now)
            if self.large_read_left <= 0:  # large bodies left unread this turn: come back at once
                wait = 0.0
            self.large_read_left = LARGE_READ_PER_TURN
            if self.room_queue:
                self._let_in_waiting()
            if self.room.waiting:  # requests in threads wait for room to decode: stalled bodies go
                self._cut_stalled()
            if self.room_queue or self.room.waiting:
                wait = min(wait, ROOM_RETRY_SECONDS)
            self._report_counts()
            self._notify_when_due(now)

        # Stopping: no new connections; idle and pending ones go now, requests under way (in a
        # thread, or whose head is arriving) get the graceful timeout.
        self.set_accept_enabled(False)
        for table in (self.pending, self.idle, self.closing):
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
        for table in self._tables():
            for conn in list(table):
                self._close(conn)
        self.tpool.shutdown(wait=False)
        self._stop_pools()
        self.poller.close()
        self.method_queue.close()
        for listener in self.sockets:
            listener.close()

    def _tables(self) -> tuple[OrderedDict[Connection, Any], ...]:
        """Every table a connection the loop has may be in."""
        return self.pending, self.reading, self.idle, self.closing, self.room_queue

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
            if conn.phase is HEAD:
                self._read_head(conn)
            elif conn.phase is BODY:
                self._read_body(conn)
            elif conn.phase is CLOSING:
                self._discard(conn)
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
        """Wait for the rest of a handshake, head or body; an established connection's deadline is
        kept in `reading` from now (a pending one is in `pending` from its accept)."""
        if conn.established and conn not in self.reading:
            self.reading[conn] = None
        self._wait_for(conn, events)

    def _establish(self, conn: Connection) -> None:
        """Count the connection against worker_connections, closing the longest-idle kept-alive
        connection if that is full (its client reconnects when it needs to)."""
        if self.nr_conns >= self.worker_connections and self.idle:
            self._close(next(iter(self.idle)))
        conn.established = True
        self.nr_conns += 1

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
        for table, cut in ((self.pending, True), (self.reading, True), (self.idle, False), (self.closing, False)):
            while table and budget > 0:
                conn = next(iter(table))
                if conn.deadline > now:
                    break
                budget -= 1
                if cut:
                    self._cut_at_deadline(conn)
                else:
                    self._close(conn)
        if budget == 0:  # more may be due: the next turn goes on at once
            self._next_due = now
            return 0.0
        due = now + min(self.client_seconds, self.keepalive_seconds, LINGER_SECONDS)
        for table in (self.pending, self.reading, self.idle, self.closing):
            if table:
                due = min(due, next(iter(table)).deadline)
        self._next_due = due
        return min(max(due - now, 0.0), 1.0)

    def _drop(self, conn: Connection, reason: str) -> None:
        """Close a connection that was never served its request, and say so."""
        if conn.closed:
            return
        self._close(conn)
        self._report_drop(conn, reason)

    def _report_drop(self, conn: Connection, reason: str) -> None:
        if reason == "deadline":
            self._warn_cut(conn)
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
        for table in self._tables():
            table.pop(conn, None)
        self._release_room(conn)
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
                    on_counts: Callable[[int, int], None] | None = None,
                    refuse_client: RefuseClient | None = None,
                    arriving_room: FindRoom | None = None) -> dict[str, Any]:
    """The gunicorn settings that bound every client to ``client_seconds``: the worker class,
    and an ``ssl_context`` hook (wrapping ``ssl_context`` if given) whose contexts make
    BoundedClientSocket connections. ``refuse_client``: the answer to a client refused by its
    request head (``webhook.request_arrival``); ``arriving_room``: the loaded app's body budget."""
    socket_class = type("BoundedClientSocket", (BoundedClientSocket,), {"request_seconds": client_seconds})
    worker_class = type("EventLoopWorker", (EventLoopWorker,), {
        "client_seconds": client_seconds, "max_pending": max_pending, "plain_ports": plain_ports,
        "hooks": ConnectionHooks(on_dropped, on_counts, refuse_client, arriving_room), "__module__": __name__})

    def bounded_ssl_context(conf: Any, default_factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        context = ssl_context(conf, default_factory) if ssl_context else default_factory()
        context.sslsocket_class = socket_class
        return context

    return {"worker_class": worker_class, "ssl_context": bounded_ssl_context}
