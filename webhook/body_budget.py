"""The memory one worker process lets request bodies take at once: a budget that each request
reserves its share of before its body is read, and gives back when it has been answered.

Why: decoding a body costs many times its size (the bytes, their text, then a Python object for
every JSON value: 9x for an ordinary 7 MiB review, over 40x for one made of nested empty
objects), and a worker answers up to ``--threads`` requests at once. Sixteen clients sending
7 MiB reviews took one worker past 600 MiB, over the Deployment's 512Mi limit: the pod was
OOM-killed and both webhooks were down. With the budget, what bodies cost is bounded by
``capacity`` whatever clients send; what does not fit waits its turn.

How a request is charged (``webhook.routes``):

0. A small body of declared length (the reviews the API server sends): what the worst body of
   that length can cost (``worst_cost``, ``WORST_PER_BYTE`` a byte), once, before it is read,
   when that is at most ``bounded_charge`` (a ``2 × threads``-th of ``capacity``: with every
   thread holding one, at most half the budget is taken). It is never resized, so its body is
   never scanned for the budget, and it passes waiting requests like any small charge. This
   holds up to ~250 times what an ordinary review really costs (16 MiB for a 64 KiB body),
   bounded; a body past that bound, or of unknown length (chunked), is charged in two steps:

1. Before its body is read: what reading and decoding its declared length costs at least
   (``reading_cost``). The client's bytes stay in the kernel until there is room.
2. Once the body is in: what building the document will cost, estimated from the body's
   structure at C speed (``decoding_cost``). More than ``capacity`` is a 413 (worded with
   the other 413s, ``review.too_costly_to_decode``): no amount of waiting makes it fit. More than the request holds: it gives back what it holds and waits,
   first in line, for the whole amount; a request never waits while holding room, so two
   requests can never wait on each other.

Bodies still arriving: the worker's event loop reads every body before a thread sees it
(``webhook.request_arrival``) and holds room for the bytes as they come (``hold_arriving``,
never waiting: a body without room is not read until there is some; a large one not while
requests wait to decode). Those holds together take
at most ``arriving_capacity`` (half the budget), so bodies that stall half-way can never leave
nothing for decoding; a thread gives its request's hold back (``release_arriving``) just before
the request is charged as above.

Who waits: requests wait in arrival order, so a big one is not overtaken forever, except that
a small one (at most ``SMALL_CHARGE``: every review the API server really sends) that fits goes
at once: a queue of big bodies never delays ordinary admissions. At most ``max_waiting``
requests wait (each waits on a worker thread: the rest are left for everyone else); the next
one is refused at once. A request waits at most until its deadline (``webhook.routes``: the
API server's own ``?timeout=``, bounded by the client timeout).
"""
from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from types import TracebackType

from webhook.review import json_structure

MiB = 1024 * 1024
DEFAULT_CAPACITY = 256 * MiB
# A request charged this much or less never queues behind bigger ones (it still needs room).
SMALL_CHARGE = 4 * MiB
# Memory a request costs whatever its body: the parser's and the answer's own state.
PER_REQUEST = 64 * 1024
# Reading a body of N bytes holds the bytes, then the passes over them that count its structure
# and check its nesting (up to 3 N for a body that is all brackets), or the bytes and their
# decoded text (1 byte a character for the ASCII the API server sends) and a piece of the checks.
READING_FACTOR = 5
# What one JSON object or list costs once built, at most (a dict holding one key: 232 bytes
# on CPython 3.11, a list that grew to 4 slots: 88), and one value beside it (its slot in the
# container, a float, an int or a short string: up to 64).
PER_CONTAINER = 240
PER_VALUE = 64
# What ``decoding_cost`` charges a byte at most: read, its text at its widest, and the byte a
# container (the body all brackets: a body json refuses is still counted).
WORST_PER_BYTE = READING_FACTOR + 2 * 4 + max(PER_CONTAINER, PER_VALUE)


class NoRoom(Exception):
    """The request could not get room in time (or the waiting room was full)."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


def reading_cost(declared_length: int | None, max_body: int) -> int:
    """The first charge of a request: reading and decoding ``declared_length`` bytes (the
    largest body allowed when its length is not declared, as for a chunked body)."""
    length = max_body if declared_length is None else declared_length
    return PER_REQUEST + READING_FACTOR * length


def worst_cost(declared_length: int) -> int:
    """What ``decoding_cost`` charges the costliest body of ``declared_length`` bytes."""
    return PER_REQUEST + WORST_PER_BYTE * declared_length


def decoding_cost(body: bytes | bytearray) -> int:
    """An upper bound of what decoding ``body`` into Python objects costs at its peak: the
    text (4 bytes a character at worst once one character is beyond Latin-1), the strings
    copied out of it, and every object, list and value, counted outside strings
    (``review.json_structure``)."""
    width = 1 if body.isascii() else 4
    containers, separators = json_structure(body)
    return PER_REQUEST + (READING_FACTOR + 2 * width) * len(body) + PER_CONTAINER * containers + PER_VALUE * separators


class BodyBudget:
    """``capacity`` bytes shared by the requests of one process (see the module docstring)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY, *, threads: int = 8, max_waiting: int = 4,
                 max_wait: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        if capacity < SMALL_CHARGE:
            raise ValueError(f"a body budget of {capacity} bytes is below {SMALL_CHARGE} bytes, one ordinary request")
        self.capacity = capacity
        # The largest charge a body is given whole before it is read (step 0 above): ``threads``
        # requests holding one each take at most half the budget.
        self.bounded_charge = capacity // (2 * max(threads, 1))
        self.max_waiting = max_waiting
        self.max_wait = max_wait  # seconds a request may wait at most, whatever its own deadline
        self._clock = clock
        # Taken directly (a C-level context manager) where nothing waits, through the Condition
        # built on it where a request waits or wakes those who do.
        self._mutex = threading.Lock()
        self._lock = threading.Condition(self._mutex)
        self._in_use = 0
        self._waiting: deque[object] = deque()
        # Bodies still arriving in the event loop hold at most this much of ``capacity``.
        self.arriving_capacity = capacity // 2
        self._arriving = 0

    @property
    def in_use(self) -> int:
        return self._in_use

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def arriving(self) -> int:
        return self._arriving

    def hold_arriving(self, size: int, small: bool = False) -> bool:
        """Room for ``size`` more bytes of bodies still arriving, if there is some now (never
        waits: the event loop calls it). While requests wait for room to decode, only ``small``
        bodies (the API server's) may take more: the others would take the room as soon as it is
        given back, and the requests that have arrived would never decode."""
        with self._mutex:
            if (self._arriving + size > self.arriving_capacity or self._in_use + size > self.capacity
                    or (self._waiting and not small)):
                return False
            self._arriving += size
            self._in_use += size
            return True

    def release_arriving(self, size: int) -> None:
        """Give back what ``hold_arriving`` took: the body was handed to a thread, or dropped."""
        with self._mutex:
            self._arriving -= size
            self._in_use -= size
            if self._waiting:
                self._lock.notify_all()

    def whole_charge(self, declared_length: int | None) -> int | None:
        """The one charge a body of ``declared_length`` bytes is given before it is read, if
        its worst cost is at most ``bounded_charge`` (step 0 above); else None: it is charged
        for reading, then resized to ``decoding_cost`` once it is in."""
        if declared_length is None:
            return None
        charge = worst_cost(declared_length)
        return charge if charge <= self.bounded_charge else None

    def reserve(self, charge: int, deadline: float, *, again: bool = False, small: bool = False) -> Reservation:
        """Room for ``charge`` bytes, waiting until ``deadline`` (a ``clock`` time) at most;
        NoRoom if it cannot be had by then, or if ``max_waiting`` requests wait already.
        ``again``: a request that had its turn and now needs more (``Reservation.resize``)
        waits first in line, and is not turned away for the others waiting. ``small``: passes
        waiting requests when it fits, whatever its size (a ``whole_charge``), as a charge of
        at most ``SMALL_CHARGE`` does."""
        if charge > self.capacity:
            raise ValueError(f"a charge of {charge} bytes can never fit a budget of {self.capacity}")
        with self._mutex:
            if self._in_use + charge <= self.capacity and (not self._waiting or small or charge <= SMALL_CHARGE):
                self._in_use += charge
                return Reservation(self, charge)
            if len(self._waiting) >= self.max_waiting and not again:
                raise NoRoom(f"{len(self._waiting)} large requests already wait for memory to decode their bodies "
                             f"(this server decodes up to {self.capacity // MiB} MiB of bodies at once); try again",
                             retry_after=1)
            turn = object()
            if again:
                self._waiting.appendleft(turn)
            else:
                self._waiting.append(turn)
            started = self._clock()
            try:
                while not (self._waiting[0] is turn and self._fits(charge)):
                    remaining = deadline - self._clock()
                    if remaining <= 0:
                        raise NoRoom(f"no memory to decode this request's body within {self._clock() - started:.1f} s "
                                     f"(it needs {_mib(charge)} MiB; {_mib(self._in_use)} of the "
                                     f"{self.capacity // MiB} MiB this server decodes at once are in use); try again",
                                     retry_after=1)
                    self._lock.wait(remaining)
                self._in_use += charge
                return Reservation(self, charge)
            finally:
                self._waiting.remove(turn)
                self._lock.notify_all()  # the next in line may fit now, or be first now

    def deadline(self, seconds: float | None = None) -> float:
        """The ``clock`` time until which a request that arrives now may wait: ``max_wait``,
        or less when the client said it gives up sooner (``seconds``)."""
        wait = self.max_wait if seconds is None else min(seconds, self.max_wait)
        return self._clock() + max(wait, 0.0)

    def _fits(self, charge: int) -> bool:
        return self._in_use + charge <= self.capacity

    def _give_back(self, charge: int) -> None:
        with self._mutex:
            self._in_use -= charge
            if self._waiting:  # every request waiting on the Condition has its turn in _waiting
                self._lock.notify_all()


class Reservation:
    """Room held in a BodyBudget until ``release()`` (or the end of a ``with`` block)."""

    def __init__(self, budget: BodyBudget, charge: int) -> None:
        self._budget = budget
        self.charge = charge

    def resize(self, charge: int, deadline: float) -> None:
        """Hold ``charge`` bytes instead: less is given back at once; more means giving back
        all that is held and waiting for the whole amount like a new request (NoRoom if it
        cannot be had by ``deadline``; nothing is held then), first in line."""
        if charge <= self.charge:
            self._budget._give_back(self.charge - charge)
            self.charge = charge
            return
        self.release()
        self.charge = self._budget.reserve(charge, deadline, again=True).charge

    def release(self) -> None:
        if self.charge:
            self._budget._give_back(self.charge)
            self.charge = 0

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.release()


def _mib(size: int) -> str:
    return f"{size / MiB:.0f}"
