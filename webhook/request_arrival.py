"""A request read in the worker's event loop, head and body, before any thread sees it
(``ArrivingRequests``, mixed into ``webhook.connections.EventLoopWorker``).

- The head is read without blocking; one longer than ``MAX_HEAD_BYTES`` is refused (431).
- Right after the head, a client that may not call the path is refused (``refuse_client``:
  client authentication, 401 or 403), and a body declared larger than the limit is refused
  (413): the body is never read.
- The body is read in the loop too (Content-Length or chunked, ``webhook.request_framing``),
  under the request's one deadline (from its first byte; 408 when it passes). Every byte is
  read only once room for it is held in the body budget (``webhook.body_budget.hold_arriving``):
  a body without room waits, unread (its bytes stay in the kernel), first come first served,
  for ``client_seconds`` at most (then a 429, as the route's when the budget is full); when room
  is short, the body that has sent nothing for longest is cut (408) once it has been silent
  ``STALLED_SECONDS``, so bodies that stall half-way cannot keep the room from bodies that
  arrive. A large body (over ``LARGE_BODY_BYTES``, or chunked) takes room for all of its
  declared length at once: half-arrived large bodies can never wait for each other.
- An answer the loop gives itself is sent, then the connection is closed after what the client
  still sends has been read and discarded for up to ``LINGER_SECONDS`` (closing with unread
  bytes would reset the connection, and the client might never see the answer).

Only a request whose body has fully arrived (or whose framing the loop cannot follow: the
parser answers that at once) is handed to a thread (``webhook.request_handover``).
"""
from __future__ import annotations

import logging
import select
import selectors
import socket
import ssl
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from webhook.request_framing import (CONTINUE, HEAD_TOO_LARGE, INVALID, LARGE_BODY_BYTES, MAX_HEAD_BYTES, WAIT,
                                     Answer, ChunkedBody, body_ended, body_stalled, body_timeout, declared_length,
                                     expects_continue, head_end, no_room)

if TYPE_CHECKING:
    from webhook.connections import Connection, ConnectionHooks

log = logging.getLogger("gunicorn.error")

# Where a connection is (a Connection's phase).
HANDSHAKE = "handshake"  # TLS handshake under way (pending)
HEAD = "head"  # reading a request head in the loop (pending if it is the first request)
BODY = "body"  # reading its body in the loop
ROOM = "room"  # its body waits for room in the body budget (not read meanwhile)
BUSY = "busy"  # a request thread has it
IDLE = "idle"  # kept alive between requests
CLOSING = "closing"  # answered by the loop; what the client still sends is discarded, then closed

# A body's bytes are read at most this many at a time, each step only once room for it is held.
# Never fewer: a TLS record is decrypted whole, and what a smaller read left of it would wait in
# OpenSSL, where the poller cannot see it.
READ_STEP = 64 * 1024
# What one readiness of a connection may read before the loop turns to the others, and what all
# large bodies together may read in one turn of the loop: a client streaming a 7 MiB body as fast
# as the loop reads it would otherwise keep the loop (and every handshake and probe behind it) for
# the whole body, and every TLS record read is a wait for the interpreter while threads decode
# (up to the switch interval). A large body not read this turn is read on the next (the poller
# reports it again): handshakes, heads and small bodies are never queued behind large ones.
READ_PER_TURN = 64 * 1024
LARGE_READ_PER_TURN = 512 * 1024
# A body holding room that has sent nothing for this long is cut when another body (or a request
# in a thread) needs the room: the API server writes a body in one go, which arrives in
# milliseconds, so a body that pauses this long while others wait is not the API server's. Short,
# because bodies waiting behind stalled ones get their turn only as fast as stalled ones are cut
# (200 stalled 7 MiB bodies, 18 at a time in the room of a 256 MiB budget: about 3 s).
STALLED_SECONDS = 0.25
# After an answer from the loop, how long (and how much) what the client still sends is discarded.
LINGER_SECONDS = 2.0
LINGER_BYTES = 1024 * 1024


class ArrivingRoom(Protocol):
    """Room for bodies still arriving (``webhook.body_budget.BodyBudget``)."""

    def hold_arriving(self, size: int, small: bool = False) -> bool: ...

    def release_arriving(self, size: int) -> None: ...

    @property
    def waiting(self) -> int: ...


class _NoLimit:
    """Room without a budget (a server without one, as in some tests): never short."""

    def hold_arriving(self, size: int, small: bool = False) -> bool:
        return True

    def release_arriving(self, size: int) -> None:
        pass

    waiting = 0


# Called with the connection's socket and the head (fields only): the answer that refuses the
# client (client authentication), or None.
RefuseClient = Callable[[Any, bytes], "Answer | None"]
# Called once the app is loaded: its body budget.
FindRoom = Callable[[], "ArrivingRoom | None"]


def _has_bytes_waiting(sock: Any) -> bool:
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True
    poll = select.poll()
    poll.register(sock.fileno(), select.POLLIN)
    return bool(poll.poll(0))


class ArrivingRequests:
    """The reading half of the event-loop worker (see the module docstring)."""

    client_seconds: ClassVar[float]
    max_body: ClassVar[int]
    too_large: ClassVar[Answer]

    if TYPE_CHECKING:  # the worker's, used here
        hooks: ClassVar[ConnectionHooks]
        max_pending: ClassVar[int]
        pending: OrderedDict[Connection, None]
        reading: OrderedDict[Connection, None]

        def _wait_for(self, conn: Connection, events: int) -> None: ...
        def _stop_waiting(self, conn: Connection) -> None: ...
        def _close(self, conn: Connection, graceful: bool = False) -> None: ...
        def _drop(self, conn: Connection, reason: str) -> None: ...
        def _report_drop(self, conn: Connection, reason: str) -> None: ...
        def _tables(self) -> tuple[OrderedDict[Connection, Any], ...]: ...
        def _on_ready(self, conn: Connection, _fileobj: Any = None) -> None: ...
        def _wait_for_more(self, conn: Connection, events: int) -> None: ...
        def _dispatch(self, conn: Connection, large: bool) -> None: ...

    def _init_arrival(self) -> None:
        # Bodies holding room, the one that has sent nothing for longest first.
        self.holding: OrderedDict[Connection, None] = OrderedDict()
        # Bodies waiting for room, in the order they asked, with when they did. Out of the deadline
        # tables meanwhile: the wait is the server's, not the client's (their deadline moves by as
        # much), bounded on its own (client_seconds, then a 429; max_pending of them).
        self.room_queue: OrderedDict[Connection, float] = OrderedDict()
        # Connections answered by the loop, lingering before their close (same lifetime each).
        self.closing: OrderedDict[Connection, None] = OrderedDict()
        self.room: ArrivingRoom = _NoLimit()
        self.large_read_left = LARGE_READ_PER_TURN  # what large bodies may still read this turn

    def _find_room(self) -> None:
        """The body budget of the app this worker loaded (once it is loaded)."""
        room = self.hooks.arriving_room() if self.hooks.arriving_room is not None else None
        if room is not None:
            self.room = room

    # --- the head ---------------------------------------------------------------------------
    def _read_head(self, conn: Connection) -> None:
        """Read what has arrived; go on to the body once the head is complete. Raises
        SSLWantReadError or BlockingIOError when it has to wait for more."""
        head = conn.head  # grows in place
        while True:
            size, scanned = len(head), conn.scanned
            if size > scanned:  # not yet searched for its end from there
                fields_end, body_start = head_end(head, scanned - 3 if scanned > 3 else 0)
                if fields_end >= 0:
                    break
                conn.scanned = size
            if size > MAX_HEAD_BYTES:
                self._answer(conn, HEAD_TOO_LARGE, "head_too_large")
                return
            data = conn.sock.recv_now(65536)  # type: ignore[attr-defined]
            if not data:  # the client closed
                self._close(conn)
                return
            head += data
        self._head_arrived(conn, fields_end, body_start)

    def _head_arrived(self, conn: Connection, fields_end: int, body_start: int) -> None:
        head = conn.head
        refuse_client = self.hooks.refuse_client
        if refuse_client is not None and isinstance(conn.sock, ssl.SSLSocket):
            refusal = refuse_client(conn.sock, bytes(head[:fields_end]))
            if refusal is not None:
                self._answer(conn, refusal, "client_refused")
                return
        length = declared_length(head, fields_end)
        if length == 0:
            self._dispatch(conn, False)
            return
        if length is not None and length > self.max_body:
            self._answer(conn, self.too_large, "body_too_large")
            return
        conn.large = length is None or length > LARGE_BODY_BYTES
        conn.body_end = -1 if length is None else body_start + length
        conn.body_start = body_start
        conn.chunked = ChunkedBody(body_start) if length is None else None
        conn.phase, conn.progress = BODY, time.monotonic()
        if not self._body_complete(conn) and expects_continue(head, fields_end):
            try:
                conn.sock.send(CONTINUE)
            except (OSError, ssl.SSLError):
                pass
        self._read_body(conn)

    # --- the body ---------------------------------------------------------------------------
    def _body_complete(self, conn: Connection) -> bool:
        """Whether the body is all in (or cannot be followed: the thread's parser answers it);
        refuses it if it turns out larger than the limit (chunked)."""
        if conn.chunked is None:
            return len(conn.head) >= conn.body_end
        end = conn.chunked.scan(conn.head, self.max_body)
        if end == WAIT:
            return False
        if end >= 0 or end == INVALID:
            return True
        self._answer(conn, self.too_large, "body_too_large")
        return False

    def _read_body(self, conn: Connection) -> None:
        """Read what has arrived of the body, room first, ``READ_PER_TURN`` at most; hand the
        request over once it is in. Raises SSLWantReadError or BlockingIOError when it has to
        wait for more."""
        turn_ends = len(conn.head) + READ_PER_TURN
        if conn.large:
            if self.large_read_left <= 0:
                self._wait_for_more(conn, selectors.EVENT_READ)
                return
            turn_ends = len(conn.head) + min(READ_PER_TURN, self.large_read_left)
            self.large_read_left -= turn_ends - len(conn.head)
        while not conn.closed:
            if self._body_complete(conn):
                self._dispatch(conn, conn.large)
                return
            if conn.closed:
                return
            if len(conn.head) >= turn_ends:  # the rest on a later turn (the poller says when)
                self._wait_for_more(conn, selectors.EVENT_READ)
                return
            if not self._hold(conn, len(conn.head) + READ_STEP):
                self._wait_for_room(conn)
                return
            data = conn.sock.recv_now(READ_STEP)  # type: ignore[attr-defined]
            if not data:
                self._answer(conn, body_ended(conn.body_end - conn.body_start if conn.body_end >= 0 else -1),
                             "body_ended")
                return
            conn.head += data
            conn.progress = time.monotonic()
            self.holding.move_to_end(conn)

    def _hold(self, conn: Connection, size: int) -> bool:
        """Room for ``size`` bytes held by the connection (more taken if it holds less). A large
        body takes room for all of it at once, or none: large bodies half in, each waiting for
        room another holds, would wait for each other until their deadlines."""
        more = size - conn.held
        if more <= 0:
            return True
        if conn.large and not conn.held:
            whole = conn.body_end if conn.body_end >= 0 else len(conn.head) + self.max_body
            size = max(size, whole + READ_STEP)
            more = size - conn.held
        if not self.room.hold_arriving(more, not conn.large):
            return False
        conn.held = size
        self.holding[conn] = None
        return True

    def _release_room(self, conn: Connection) -> None:
        """Give the connection's room back (in the loop: a thread gives back its own)."""
        self.holding.pop(conn, None)
        if conn.held:
            held, conn.held = conn.held, 0
            self.room.release_arriving(held)

    def _wait_for_room(self, conn: Connection) -> None:
        conn.phase = ROOM
        self._stop_waiting(conn)
        self.pending.pop(conn, None)
        self.reading.pop(conn, None)
        self.room_queue[conn] = time.monotonic()
        if len(self.room_queue) > self.max_pending:
            self._answer(next(iter(self.room_queue)), no_room(0), "no_room")

    def _let_in_waiting(self) -> None:
        """Bodies waiting for room go on reading, in order, as long as there is room, cutting
        stalled bodies to make some (once per turn of the loop); one that waited
        ``client_seconds`` is answered 429."""
        queue = self.room_queue
        while queue:
            conn, since = next(iter(queue.items()))
            now = time.monotonic()
            if now - since >= self.client_seconds:
                self._answer(conn, no_room(self.client_seconds), "no_room")
                continue
            if not self._hold(conn, len(conn.head) + READ_STEP) and not self._cut_stalled(conn):
                return
            del queue[conn]
            conn.phase, conn.progress = BODY, now
            conn.deadline += now - since
            (self.reading if conn.established else self.pending)[conn] = None
            self._wait_for(conn, selectors.EVENT_READ)
            # What TLS has already decrypted makes the socket readable no more: read now.
            conn.on_ready(conn.sock)  # type: ignore[misc]

    def _cut_stalled(self, waiting: Connection | None = None) -> bool:
        """Cut the body holding room that has been silent for longest, if for long enough
        (called when a body or a request in a thread needs room)."""
        now = time.monotonic()
        for conn in list(self.holding):
            if conn is waiting or conn.phase is not BODY or conn.closed:
                continue
            if now - conn.progress < STALLED_SECONDS:
                return False
            # Silent, or only unread? The loop may have been slow to come back to it (threads
            # decoding hold the interpreter, and large bodies are read a share a turn): a body
            # with bytes waiting is not stalled.
            if _has_bytes_waiting(conn.sock):
                conn.progress = now
                self.holding.move_to_end(conn)
                continue
            self._answer(conn, body_stalled(STALLED_SECONDS), "body_stalled")
            return True
        return False

    # --- answers from the loop ----------------------------------------------------------------
    def _answer(self, conn: Connection, answer: Answer, reason: str) -> None:
        """Send ``answer`` and close the connection, lingering (see the module docstring)."""
        self._release_room(conn)
        try:
            conn.sock.send(answer.encode())
        except (OSError, ssl.SSLError):
            pass
        self._report_drop(conn, reason)
        if not self._linger(conn):
            self._close(conn)

    def _linger(self, conn: Connection) -> bool:
        """Instead of closing at once (``_drop``): discard what the client still sends, for a
        while. False if the connection is gone already."""
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except (OSError, ValueError):
            return False
        self._stop_waiting(conn)
        for table in self._tables():
            table.pop(conn, None)
        conn.phase, conn.deadline, conn.head = CLOSING, time.monotonic() + LINGER_SECONDS, bytearray()
        conn.scanned = 0  # counts the bytes discarded from here
        self.closing[conn] = None
        self._wait_for(conn, selectors.EVENT_READ)
        return True

    def _discard(self, conn: Connection) -> None:
        while conn.scanned < LINGER_BYTES:
            try:
                data = conn.sock.recv(65536)
            except (BlockingIOError, ssl.SSLWantReadError):
                return
            except (OSError, ssl.SSLError):
                break
            if not data:
                break
            conn.scanned += len(data)
        self._close(conn)

    def _cut_at_deadline(self, conn: Connection) -> None:
        """A connection whose request did not arrive in time: a body under way is answered."""
        if conn.phase is BODY or conn.phase is ROOM:
            self._answer(conn, body_timeout(self.client_seconds), "deadline")
        else:
            self._drop(conn, "deadline")
