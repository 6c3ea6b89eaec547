"""A request whose head and body have arrived, handed from the worker's event loop to a thread,
and its connection back to the loop once answered (``HandingOver``, mixed into
``webhook.connections.EventLoopWorker``).

Three pools of threads, so that no kind of request can take the threads another needs, each
handing a request to its thread that ran last (``webhook.warm_threads``):

- the health port's own (``HEALTH_THREADS``): ``/healthz`` answers whatever the TLS port is doing;
- the large-body threads, a quarter of the threads (at least one): bodies over a MiB (or
  chunked), so clients sending maximum-size reviews cannot take every thread;
- gthread's pool, for everything else (the API server's reviews).

The thread reads the request from what arrived (``ArrivedUnreader``): gunicorn's parser parses
it as it would from the socket, without a byte more to wait for.
"""
from __future__ import annotations

import errno
import io
import selectors
import ssl
import time
from collections import OrderedDict
from concurrent import futures
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, ClassVar

from gunicorn import http
from gunicorn.http.errors import NoMoreData
from gunicorn.http.unreader import SocketUnreader

from webhook.request_arrival import BUSY, HEAD, IDLE
from webhook.warm_threads import WarmestFirstPool

if TYPE_CHECKING:
    from webhook.connections import Connection
    from webhook.request_arrival import ArrivingRoom

# Threads of the health port: a probe and a scrape at once.
HEALTH_THREADS = 2
# How long draining a body the app did not read may take (it has arrived already).
DRAIN_SECONDS = 1.0
# What the parser is given at a time from what arrived: as gunicorn reads a socket (8 KiB for a
# head, up to 1 MiB when it knows how much of a body it still wants).
SMALL_PIECE = 8192
LARGE_PIECE = 1024 * 1024


class ArrivedUnreader(SocketUnreader):
    """gunicorn's socket reader, serving what the loop read first, a piece at a time (the parser
    copies what it is given: one buffer holding a whole body would be copied again for each
    piece read from it)."""

    def __init__(self, sock: Any, arrived: bytearray) -> None:
        super().__init__(sock)
        self.arrived = arrived
        self.offset = 0

    def chunk(self, size_hint: int | None = None) -> bytes:
        size = SMALL_PIECE if not size_hint or size_hint < SMALL_PIECE else min(size_hint, LARGE_PIECE)
        offset = self.offset
        if offset >= len(self.arrived):
            # The request has arrived whole, or its framing is broken: nothing more to wait for
            # (the parser answers what it has; the next request is the loop's to read).
            return b""
        piece = bytes(self.arrived[offset:offset + size])
        self.offset = offset + len(piece)
        return piece

    def take_buffered(self) -> bytes:
        """What was read back or not yet served (a request the client sent behind this one);
        what arrived is let go. (gunicorn 27 has a method of this name for its buffer alone;
        26 has none.)"""
        rest = bytes(self.arrived[self.offset:])
        self.arrived, self.offset = bytearray(), 0
        buffered = self.buf.getvalue()
        self.buf = io.BytesIO()
        return buffered + rest


class HandingOver:
    """The handing-over half of the event-loop worker (see the module docstring)."""

    if TYPE_CHECKING:  # the worker's, used here
        cfg: Any
        log: Any
        alive: bool
        tpool: futures.Executor
        method_queue: Any
        pending: OrderedDict[Connection, None]
        reading: OrderedDict[Connection, None]
        idle: OrderedDict[Connection, None]
        holding: OrderedDict[Connection, None]
        plain_ports: ClassVar[frozenset[int]]
        client_seconds: ClassVar[float]
        keepalive_seconds: float
        room: ArrivingRoom

        def _establish(self, conn: Connection) -> None: ...
        def _stop_waiting(self, conn: Connection) -> None: ...
        def _wait_for(self, conn: Connection, events: int) -> None: ...
        def _close(self, conn: Connection, graceful: bool = False) -> None: ...
        def _on_ready(self, conn: Connection, _fileobj: Any = None) -> None: ...
        def handle_request(self, req: Any, conn: Any) -> bool: ...
        def handle_error(self, req: Any, client: Any, addr: Any, einfo: Any) -> None: ...

    def get_thread_pool(self) -> WarmestFirstPool:
        """gthread's pool (``tpool``), for the API server's reviews: the thread that ran last
        takes the next request (``webhook.warm_threads``)."""
        return WarmestFirstPool(self.cfg.threads, "request")

    def _start_pools(self, threads: int) -> None:
        self.large_pool = WarmestFirstPool(max(1, threads // 4), "large-body")
        self.health_pool = WarmestFirstPool(HEALTH_THREADS, "health")

    def _stop_pools(self) -> None:
        self.large_pool.shutdown(wait=False)
        self.health_pool.shutdown(wait=False)

    def _dispatch(self, conn: Connection, large: bool) -> None:
        """The request has arrived: to a thread, with what was read."""
        if not conn.established:  # its first request: it was pending
            del self.pending[conn]
            self._establish(conn)
        else:
            self.reading.pop(conn, None)
        self._stop_waiting(conn)
        self.holding.pop(conn, None)
        held, conn.held = conn.held, 0  # given back by its thread: the loop no longer counts it
        if conn.parser is None:
            conn.parser = http.get_parser(self.cfg, conn.sock, conn.client)
        conn.parser.unreader = ArrivedUnreader(conn.sock, conn.head)
        conn.dispatched = time.monotonic()
        conn.head, conn.scanned, conn.phase = bytearray(), 0, BUSY
        conn.chunked, conn.body_end = None, 0
        pool: futures.Executor
        if large:
            pool = self.large_pool
        elif isinstance(conn.server, tuple) and conn.server[1] in self.plain_ports:
            pool = self.health_pool
        else:
            pool = self.tpool
        served = pool.submit(self._serve, conn, held)
        served.add_done_callback(lambda done: self.method_queue.defer(self.finish_request, conn, done))

    def _serve(self, conn: Connection, held: int) -> Any:
        """In a thread: give back the room the body held as it arrived (the route charges the
        body itself, webhook.routes), then serve the request."""
        if held:
            self.room.release_arriving(held)
        return self.handle(conn)

    def handle(self, conn: Connection) -> Any:
        """Serve the request that arrived in ``conn.parser``'s reader. Runs in a thread."""
        req = None
        try:
            # Time spent queued for a thread is the server's, not the client's: the deadline for
            # writing the answer moves by as much.
            queued = max(0.0, time.monotonic() - conn.dispatched)
            conn.sock.begin_request(conn.deadline + queued)  # type: ignore[attr-defined]
            req = next(conn.parser)
            if not req:
                return False
            # Our Connection stands in for gthread's TConn. A body the app left unread is drained
            # (it has arrived: this never waits for the client) so the next request starts clean.
            return (self.handle_request(req, conn)
                    and conn.parser.finish_body(deadline=time.monotonic() + DRAIN_SECONDS) is not False)
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

    def finish_request(self, conn: Connection, fs: Future[Any]) -> None:
        """Back on the loop (via gthread's method queue): wait for the next request, or close."""
        try:
            keep = not fs.cancelled() and fs.result() is True
        except Exception:  # noqa: BLE001 - handle() answers its own errors; close in any case
            keep = False
        if conn.closed:
            return
        following = conn.parser.unreader.take_buffered()  # and what arrived is let go
        if not keep or not self.alive or conn.sock.fileno() < 0:
            self._close(conn, graceful=keep or conn.sock.fileno() >= 0)
            return
        try:
            conn.sock.setblocking(False)
        except OSError:
            self._close(conn)
            return
        if following:  # the client pipelined its next request
            conn.head += following
            conn.phase, conn.deadline = HEAD, time.monotonic() + self.client_seconds
            self._on_ready(conn)
            return
        conn.phase, conn.deadline = IDLE, time.monotonic() + self.keepalive_seconds
        self.idle[conn] = None
        self._wait_for(conn, selectors.EVENT_READ)
