"""The load generator: separate processes, each holding some of the client connections, every
connection a kept-alive HTTPS connection used by one thread for one request at a time, as the
API server uses its connections to a webhook.

Processes are started once (``Generators``) and reused for every measurement. Each measurement
starts at the same wall-clock time in every process; requests that start during the warm-up or
end after the window are not counted. Each process reports its own CPU time over the window, so
the report can show that the load generator had CPU to spare (it was not the bottleneck).
"""
from __future__ import annotations

import argparse
import http.client
import os
import pickle
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}


@dataclass(frozen=True)
class Job:
    port: int
    ca_file: str
    requests: tuple[tuple[str, bytes], ...]  # (path, body), sent round robin
    connections: int
    start_at: float  # wall clock (time.time())
    warmup: float
    seconds: float
    # A smoke run's windows are too short to promise a request on a busy machine: each client
    # then goes on past the window until it has measured one, so every number is defined.
    at_least_one: bool = False
    # A client certificate (cert file, key file) to present, as an admin to a real API server
    # (``bench.e2e``), and the status a request must answer with to count (a create: 201).
    client_cert: tuple[str, str] | None = None
    ok_status: int = 200


@dataclass
class Result:
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str = ""
    cpu_seconds: float = 0.0  # of the busiest generator process, over the window
    window: float = 0.0

    def merge(self, other: Result) -> None:
        self.latencies += other.latencies
        self.errors += other.errors
        self.first_error = self.first_error or other.first_error
        self.cpu_seconds = max(self.cpu_seconds, other.cpu_seconds)
        self.window = max(self.window, other.window)


def _client(job: Job, index: int, context: ssl.SSLContext, measure_from: float, stop_at: float,
            result: Result, lock: threading.Lock) -> None:
    latencies: list[float] = []
    errors, first_error = 0, ""
    connection = http.client.HTTPSConnection("127.0.0.1", job.port, context=context, timeout=60)
    try:
        connection.connect()
        requests = job.requests
        turn = index  # connections start at different payloads
        time.sleep(max(0.0, measure_from - job.warmup - time.perf_counter()))
        while True:
            started = time.perf_counter()
            if started >= stop_at and (latencies or not job.at_least_one):
                break
            path, body = requests[turn % len(requests)]
            turn += 1
            try:
                connection.request("POST", path, body, HEADERS)
                response = connection.getresponse()
                answer = response.read()
                status = response.status
            except (OSError, http.client.HTTPException) as exc:
                status, answer, first_error = 0, b"", first_error or f"{type(exc).__name__}: {exc}"
                connection.close()
                connection = http.client.HTTPSConnection("127.0.0.1", job.port, context=context, timeout=60)
            ended = time.perf_counter()
            if status != job.ok_status:
                errors += 1
                first_error = first_error or f"HTTP {status} from {path}: {answer[:500]!r}"
            elif started >= measure_from and (ended <= stop_at or (job.at_least_one and not latencies)):
                latencies.append(ended - started)
    finally:
        connection.close()
        with lock:
            result.latencies += latencies
            result.errors += errors
            result.first_error = result.first_error or first_error


def run_job(job: Job) -> Result:
    """Runs one measurement in this process."""
    context = ssl.create_default_context(cafile=job.ca_file)  # the certificate names 127.0.0.1
    if job.client_cert:
        context.load_cert_chain(*job.client_cert)
    offset = time.perf_counter() - time.time()
    measure_from = job.start_at + job.warmup + offset
    stop_at = measure_from + job.seconds
    result, lock = Result(), threading.Lock()
    threads = [threading.Thread(target=_client, args=(job, i, context, measure_from, stop_at, result, lock),
                                daemon=True) for i in range(job.connections)]
    for thread in threads:
        thread.start()
    time.sleep(max(0.0, measure_from - time.perf_counter()))
    cpu_before = time.process_time()
    time.sleep(max(0.0, stop_at - time.perf_counter()))
    result.cpu_seconds = time.process_time() - cpu_before
    result.window = job.seconds
    for thread in threads:
        thread.join(120)
    return result


def serve(cpus: set[int] | None) -> None:
    """A generator process: jobs in (pickled, on stdin), results out (on stdout)."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            job = pickle.load(source)
        except EOFError:
            return
        pickle.dump(run_job(job), sink)
        sink.flush()


class Generators:
    """``processes`` load generator processes, reused for every measurement."""

    def __init__(self, processes: int, cpus: set[int] | None = None) -> None:
        pinned = ["--cpus", ",".join(map(str, sorted(cpus)))] if cpus else []
        self._processes = [
            subprocess.Popen([sys.executable, "-m", "bench.load", *pinned], cwd=ROOT,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            for _ in range(processes)]

    @property
    def count(self) -> int:
        return len(self._processes)

    def run(self, port: int, ca_file: str, requests: list[tuple[str, bytes]], connections: int,
            seconds: float, warmup: float, counter: Callable[[], float] | None = None,
            at_least_one: bool = False, lead: float = 0.1, client_cert: tuple[str, str] | None = None,
            ok_status: int = 200) -> tuple[Result, float]:
        """``connections`` clients spread over the processes: their merged result, and how much
        ``counter`` (e.g. the server's CPU seconds) grew over the measured window."""
        shares = [connections // self.count + (i < connections % self.count) for i in range(self.count)]
        start_at = time.time() + lead  # every process has received its job by then
        busy = []
        for process, share in zip(self._processes, shares):
            if share:
                assert process.stdin is not None
                pickle.dump(Job(port, ca_file, tuple(requests), share, start_at, warmup, seconds, at_least_one,
                                client_cert, ok_status), process.stdin)
                process.stdin.flush()
                busy.append(process)
        grown = 0.0
        if counter is not None:
            time.sleep(max(0.0, start_at + warmup - time.time()))
            before = counter()
            time.sleep(max(0.0, start_at + warmup + seconds - time.time()))
            grown = counter() - before
        merged = Result()
        for process in busy:
            assert process.stdout is not None
            merged.merge(pickle.load(process.stdout))
        return merged, grown

    def close(self) -> None:
        for process in self._processes:
            assert process.stdin is not None
            process.stdin.close()  # end of jobs
        for process in self._processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            assert process.stdout is not None
            process.stdout.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a load generator process (started by the benchmark)",
                                     allow_abbrev=False)
    parser.add_argument("--cpus", default="", help="pin to these CPUs (comma-separated)")
    args = parser.parse_args(argv)
    serve({int(c) for c in args.cpus.split(",")} if args.cpus else None)
    return 0


if __name__ == "__main__":
    from bench.load import main as generator_main  # results pickle as bench.load.Result, not __main__'s

    sys.exit(generator_main())
