"""End to end with real gunicorn and TLS: several near-maximum bodies at once are all answered,
ordinary reviews sent meanwhile are answered too, and the worker's memory stays within its body
budget (then goes back down) instead of growing with every body in flight."""
from __future__ import annotations

import http.client
import json
import threading
import time
from pathlib import Path

from testing.builders import admission_review, mpijob
from testing.tls_server import TlsServer, serving

MiB = 1024 * 1024
# Room for one of the bodies below at a time (each is charged 49 MiB): without the budget, the
# nine of them decoded at once took this worker 100 MiB and more beyond its memory before them.
BUDGET_MIB = 56
THREADS = 16
BIG_CLIENTS = 9  # as many as may run (one) and wait for room (half the threads) at once
# Beyond the worker's memory before the burst: its budget, plus what the budget does not count
# (the allocator's own slack, the ordinary reviews).
ALLOWANCE_MIB = BUDGET_MIB + 16


def big_review(size: int = 7 * MiB - 4096) -> bytes:
    """A valid review just under 7 MiB: an MPIJob carrying one very long annotation."""
    job = mpijob()
    job["metadata"]["annotations"] = {"example.com/notes": ""}
    room = size - len(json.dumps(admission_review(job)).encode())
    job["metadata"]["annotations"]["example.com/notes"] = "x" * room
    return json.dumps(admission_review(job)).encode()


def worker_pid(server: TlsServer) -> int:
    pid = server.process.pid
    [child] = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return int(child)


def memory_mib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no {field} for {pid}")


def post(server: TlsServer, body: bytes) -> tuple[int, dict]:
    connection = http.client.HTTPSConnection("localhost", server.port, context=server.ssl_context(), timeout=60)
    try:
        connection.request("POST", "/validate?timeout=30s", body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_near_maximum_bodies_at_once_stay_within_the_body_budget(tmp_path: Path):
    body = big_review()
    assert 7 * MiB - 8192 < len(body) < 7 * MiB
    flags = ("--dev", "--workers", "1", "--threads", str(THREADS), "--no-audit-log", "--body-memory", str(BUDGET_MIB))
    with serving(tmp_path / "server", *flags) as server:
        server.review("/validate", admission_review(mpijob()))  # warmed up
        pid = worker_pid(server)
        before = memory_mib(pid, "VmRSS")
        assert memory_mib(pid, "VmHWM") < before + 20  # the high-water mark below is the burst's

        answers: list[tuple[int, dict]] = []
        small: list[float] = []
        done = threading.Event()

        def big() -> None:
            answers.append(post(server, body))

        def ordinary() -> None:  # a kept-alive client as the API server's, meanwhile
            while not done.is_set():
                started = time.monotonic()
                assert server.review("/validate", admission_review(mpijob()))["allowed"] is True
                small.append(time.monotonic() - started)

        clients = [threading.Thread(target=big) for _ in range(BIG_CLIENTS)]
        watcher = threading.Thread(target=ordinary)
        watcher.start()
        for client in clients:
            client.start()
        for client in clients:
            client.join()
        done.set()
        watcher.join()

        assert [status for status, _ in answers] == [200] * BIG_CLIENTS, [a["message"] for s, a in answers if s != 200]
        assert all(answer["response"]["allowed"] is True for _, answer in answers)
        assert small and max(small) < 5, small
        peak = memory_mib(pid, "VmHWM")
        assert peak - before < ALLOWANCE_MIB, f"{before:.0f} MiB before, {peak:.0f} MiB at the peak"
        time.sleep(0.5)
        after = memory_mib(pid, "VmRSS")
        assert after - before < 30, f"{before:.0f} MiB before, {after:.0f} MiB after the burst"
