"""A thread pool that hands each request to the thread that became idle last
(``WarmestFirstPool``), for the worker's request threads.

``concurrent.futures.ThreadPoolExecutor`` keeps its idle threads waiting on one queue, and the
queue wakes them in turn: once a second thread exists (it starts whenever a request is queued
at a moment when no thread is idle — at concurrency 1, when the thread that answered the last
request has not yet got back to the queue), the threads take the requests one after the other,
and each request finds its thread's stack and data cold in the CPU cache. Here an idle thread
waits on a lock of its own, the idle threads form a stack, and a request goes to the top one:
the one that ran last. A thread counts as idle before the future of its request is settled, so
the next request, which the loop can only hand over once it has seen the answer, finds it free:
at concurrency 1 one thread serves every request.
"""
from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

_Work = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class _PoolThread:
    __slots__ = ("wake", "work")

    def __init__(self, work: _Work | None) -> None:
        self.wake = threading.Lock()
        self.wake.acquire()  # released to hand it work (or to let it go, with None)
        self.work = work


class WarmestFirstPool(Executor):
    """At most ``max_workers`` threads, started as needed; work no thread is free for waits in
    order. The ``Executor`` interface, as ``ThreadPoolExecutor``'s."""

    def __init__(self, max_workers: int, thread_name_prefix: str = "request") -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self.max_workers = max_workers
        self._prefix = thread_name_prefix
        self._lock = threading.Lock()
        self._idle: list[_PoolThread] = []  # the last one became idle last
        self._waiting: deque[_Work] = deque()
        self._threads: set[threading.Thread] = set()
        self._shutdown = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        work: _Work = (future, fn, args, kwargs)
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if self._idle:
                thread = self._idle.pop()
                thread.work = work
                thread.wake.release()
            elif len(self._threads) < self.max_workers:
                runner = threading.Thread(target=self._run, args=(_PoolThread(work),),
                                          name=f"{self._prefix}_{len(self._threads)}", daemon=True)
                self._threads.add(runner)
                runner.start()
            else:
                self._waiting.append(work)
        return future

    def _run(self, thread: _PoolThread) -> None:
        work = thread.work
        try:
            while work is not None:
                future, fn, args, kwargs = work
                del work
                outcome: tuple[bool, Any] | None = None
                if future.set_running_or_notify_cancel():
                    try:
                        outcome = (True, fn(*args, **kwargs))
                    except BaseException as error:  # noqa: BLE001 - the future carries it, as ThreadPoolExecutor's does
                        outcome = (False, error)
                del fn, args, kwargs
                with self._lock:
                    work = self._waiting.popleft() if self._waiting else None
                    idle = work is None and not self._shutdown
                    if idle:
                        thread.work = None
                        self._idle.append(thread)
                if outcome is not None:  # settled once the thread is free again (module docstring)
                    if outcome[0]:
                        future.set_result(outcome[1])
                    else:
                        future.set_exception(outcome[1])
                del future, outcome
                if idle:
                    thread.wake.acquire()
                    work = thread.work
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                while self._waiting:
                    self._waiting.popleft()[0].cancel()
            idle, self._idle = self._idle, []
            threads = list(self._threads)
        for thread in idle:  # let them go: their work is None
            thread.work = None
            thread.wake.release()
        if wait:
            for runner in threads:
                if runner is not threading.current_thread():
                    runner.join()
