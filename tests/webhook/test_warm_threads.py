"""The request threads' pool: the thread that ran last takes the next request."""
from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import CancelledError, Future

import pytest

from webhook.warm_threads import WarmestFirstPool

WAIT = 10.0


def _name() -> str:
    return threading.current_thread().name


def test_requests_one_after_another_are_all_served_by_one_thread() -> None:
    """As the worker's loop hands them over: the next request only once the last one's future is
    settled (its done callback wakes the loop). The thread is slow to get back after settling
    (descheduled, or waiting for the interpreter): ``ThreadPoolExecutor`` then starts another
    thread for the next request, and goes round all eight (measured: 8 threads for 100 requests)."""
    pool = WarmestFirstPool(8)
    settled: queue.SimpleQueue[Future[str]] = queue.SimpleQueue()

    def hand_over_then_lag(future: Future[str]) -> None:
        settled.put(future)
        time.sleep(0.001)

    names = []
    for _ in range(100):
        pool.submit(_name).add_done_callback(hand_over_then_lag)
        names.append(settled.get(timeout=WAIT).result())
    pool.shutdown()
    assert set(names) == {"request_0"}


def test_the_thread_that_became_idle_last_takes_the_next_request() -> None:
    pool = WarmestFirstPool(3, "t")
    gates = [threading.Event() for _ in range(3)]
    started = threading.Barrier(4)

    def hold(gate: threading.Event) -> str:
        started.wait(WAIT)
        gate.wait(WAIT)
        return _name()

    held = [pool.submit(hold, gate) for gate in gates]
    started.wait(WAIT)  # three threads, each holding one
    order = [2, 0, 1]
    for index in order:
        gates[index].set()
        held[index].result(WAIT)  # settled: its thread is idle by now
    last = held[order[-1]].result()
    assert {f.result() for f in held} == {"t_0", "t_1", "t_2"}
    assert pool.submit(_name).result(WAIT) == last
    assert pool.submit(_name).result(WAIT) == last
    pool.shutdown()


def test_no_more_threads_than_allowed() -> None:
    pool = WarmestFirstPool(2)
    gate = threading.Event()

    def work() -> str:
        gate.wait(WAIT)
        return _name()

    futures = [pool.submit(work) for _ in range(7)]
    gate.set()
    names = [f.result(WAIT) for f in futures]
    pool.shutdown()
    assert set(names) == {"request_0", "request_1"}


def test_work_no_thread_is_free_for_runs_in_the_order_given() -> None:
    pool = WarmestFirstPool(1)
    gate = threading.Event()
    ran: list[int] = []
    busy = pool.submit(gate.wait, WAIT)
    futures = [pool.submit(ran.append, number) for number in range(6)]
    gate.set()
    for future in [busy, *futures]:
        future.result(WAIT)
    pool.shutdown()
    assert ran == [0, 1, 2, 3, 4, 5]


def test_an_error_is_the_futures_and_the_thread_goes_on() -> None:
    pool = WarmestFirstPool(1)

    def fail() -> None:
        raise LookupError("no such thing")

    failed = pool.submit(fail)
    with pytest.raises(LookupError, match="no such thing"):
        failed.result(WAIT)
    assert pool.submit(lambda: 41 + 1).result(WAIT) == 42
    pool.shutdown()


def test_work_cancelled_while_waiting_never_runs() -> None:
    pool = WarmestFirstPool(1)
    gate = threading.Event()
    ran: list[str] = []
    busy = pool.submit(gate.wait, WAIT)
    waiting = pool.submit(ran.append, "cancelled one")
    assert waiting.cancel()
    after = pool.submit(ran.append, "next one")
    gate.set()
    assert busy.result(WAIT) is True and after.result(WAIT) is None
    pool.shutdown()
    assert ran == ["next one"]
    with pytest.raises(CancelledError):
        waiting.result()


def test_shutdown_lets_idle_threads_go_finishes_work_given_and_refuses_more() -> None:
    pool = WarmestFirstPool(1, "stopping")
    gate = threading.Event()
    busy = pool.submit(gate.wait, WAIT)
    queued = pool.submit(lambda: "ran after shutdown began")
    cancelled = pool.submit(lambda: "never")
    assert cancelled.cancel()
    stopping = threading.Thread(target=pool.shutdown)
    stopping.start()
    gate.set()
    stopping.join(WAIT)
    assert not stopping.is_alive()
    assert busy.result() is True and queued.result() == "ran after shutdown began"
    assert not [t for t in threading.enumerate() if t.name.startswith("stopping_")]
    with pytest.raises(RuntimeError, match="cannot schedule new futures after shutdown"):
        pool.submit(_name)


def test_shutdown_can_cancel_what_waits() -> None:
    pool = WarmestFirstPool(1)
    gate = threading.Event()
    busy = pool.submit(gate.wait, WAIT)
    waiting = [pool.submit(_name) for _ in range(3)]
    pool.shutdown(wait=False, cancel_futures=True)
    gate.set()
    assert busy.result(WAIT) is True
    assert all(f.cancelled() for f in waiting)


def test_a_pool_needs_a_thread() -> None:
    with pytest.raises(ValueError, match="max_workers must be at least 1"):
        WarmestFirstPool(0)
