"""The audit log as serve runs it: request threads queue their lines, one thread writes them.
Every line still arrives whole and once, each thread's lines in its order, and flush() writes
out whatever is still queued."""
from __future__ import annotations

import io
import json
import threading
import time

from policies.engine import Verdict
from tests.builders import admission_review, mpijob
from webhook.admission import Decision
from webhook.audit import AuditLog
from webhook.review import parse_admission_review

THREADS, LINES = 8, 50


class SlowStream(io.StringIO):
    """A stdout that takes a while per write, so lines pile up in the queue."""

    def write(self, text: str) -> int:
        time.sleep(0.001)
        return super().write(text)


def decision(thread: int, index: int) -> Decision:
    review = admission_review(mpijob(f"job-{thread}-{index}"))
    return Decision("validate", parse_admission_review(review), True, "checked", verdict=Verdict())


def test_lines_from_many_threads_arrive_whole_once_and_in_order() -> None:
    stream = SlowStream()
    log = AuditLog(stream, background=True)
    decisions = [[decision(t, i) for i in range(LINES)] for t in range(THREADS)]

    def submit(thread: int) -> None:
        for item in decisions[thread]:
            log(item)

    workers = [threading.Thread(target=submit, args=(t,)) for t in range(THREADS)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    log.flush()

    names = [json.loads(line)["name"] for line in stream.getvalue().splitlines()]
    assert sorted(names) == sorted(f"job-{t}-{i}" for t in range(THREADS) for i in range(LINES))
    for t in range(THREADS):
        mine = [int(n.rsplit("-", 1)[1]) for n in names if n.startswith(f"job-{t}-")]
        assert mine == list(range(LINES))


def test_the_caller_does_not_wait_for_the_write() -> None:
    class Stuck(io.StringIO):
        def __init__(self) -> None:
            super().__init__()
            self.release = threading.Event()

        def write(self, text: str) -> int:
            self.release.wait(5)
            return super().write(text)

    stream = Stuck()
    log = AuditLog(stream, background=True)
    started = time.monotonic()
    for i in range(20):
        log(decision(0, i))
    assert time.monotonic() - started < 1.0  # queued, while the writer is stuck
    stream.release.set()
    log.flush()
    assert len(stream.getvalue().splitlines()) == 20
