"""A background flush for what the request path only gathers in memory (metrics tallies, audit
lines): a request appends to a buffer, and this writes the buffer out every few tenths of a
second, off the request's thread.

The thread starts on first use in each process, never at import: a gunicorn master that only
forks workers starts none, and each worker starts its own after the fork (threads do not survive
a fork). It is a daemon, so it never keeps a process alive, and the buffer is flushed once more
at interpreter exit.
"""
from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class PeriodicFlush:
    """Calls ``flush`` every ``interval`` seconds from a daemon thread once ``start()`` was
    called in this process, and at interpreter exit. ``forget`` runs in a forked child: what
    the buffers hold then belongs to the parent, which writes it itself."""

    def __init__(self, name: str, interval: float, flush: Callable[[], None],
                 forget: Callable[[], None] | None = None) -> None:
        self.name = name
        self.interval = interval
        self._flush = flush
        self._forget = forget
        self._lock = threading.Lock()
        # Read on every request, without the lock: once True it stays True in this process.
        self.running = False
        atexit.register(self.flush)
        os.register_at_fork(after_in_child=self._after_fork)

    def start(self) -> None:
        with self._lock:
            if not self.running:
                threading.Thread(target=self._run, name=self.name, daemon=True).start()
                self.running = True

    def flush(self) -> None:
        try:
            self._flush()
        except Exception:  # noqa: BLE001 - the next flush tries again; the server keeps serving
            log.exception("%s failed", self.name)

    def _run(self) -> None:
        while True:
            time.sleep(self.interval)
            self.flush()

    def _after_fork(self) -> None:
        self._lock = threading.Lock()  # the parent's may have been held by a thread the child lacks
        self.running = False
        if self._forget is not None:
            self._forget()
