"""Instructions per served request, counted by valgrind's callgrind: ``mpijob-webhook serve`` as
the Deployment runs it (one worker, eight threads, TLS, the example policy file, watch caches of
an in-test API server with 50 namespaces), so what the server does around the app — the
worker's event loop, TLS, reading heads and bodies, handing requests to threads, the audit and
metrics writers — is counted with it. The in-process count (``--mode instructions``) leaves all
of that out.

    python3 -m bench profile --mode served-instructions                 # every case, this tree
    python3 -m bench profile --mode served-instructions --tree DIR      # another checkout's server
    python3 -m bench profile --mode served-instructions validate-c1 --rounds 5

The server runs under ``valgrind --tool=callgrind --trace-children=yes --separate-threads=yes
--instr-atstart=no`` with ``PYTHONHASHSEED=0``; the worker's instrumentation is switched on
once it is up. Kept-alive TLS clients (one connection, or eight) send the payloads round robin:
a warm-up (which opens the connections the counted requests use again), then ``callgrind_control
--zero`` on the worker, N requests, and ``callgrind_control --dump``. Each file of the dump holds
one thread's count since the zero: the worker's main
thread is its event loop, the others are the request threads and the writers.
A request = the dump / N. Two runs of one tree differ by up to about 1 % (how requests fall
into turns of the loop, and into the writers' batches, depends on timing). Needs valgrind.
"""
from __future__ import annotations

import argparse
import http.client
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench import payloads as bodies
from bench.cluster import Cluster
from bench.instructions import counts
from bench.run import serves_health_port
from bench.servers import ServerProcess
from certs import authority

ROOT = Path(__file__).resolve().parent.parent
NAMESPACES = 50
WARMUP = 64  # at least one request on every connection: each is opened (handshake) by the warm-up
CONTROL_SECONDS = 120.0  # callgrind_control waits for the worker's next turn, slow under valgrind
REQUEST_SECONDS = 120.0
IDLE_SECONDS = 10
IDLE = "idle, per second"


@dataclass(frozen=True)
class Case:
    name: str
    endpoint: str
    connections: int
    rounds: int  # N = rounds × the payloads


CASES = {case.name: case for case in (
    Case("validate-c1", "/validate", 1, 20),
    Case("validate-c8", "/validate", 8, 40),
    Case("mutate-c8", "/mutate", 8, 40),
    Case("convert-c8", "/convert", 8, 8),
)}


def case_payloads(endpoint: str, namespace: str) -> list[bodies.Payload]:
    """The main table's: the upstream examples (the large job left out), or the single-object
    conversion reviews."""
    if endpoint == "/convert":
        return bodies.single_conversions(namespace)
    return [p for p in bodies.admission_payloads(endpoint, namespace) if p.name != "large-job"]


@dataclass(frozen=True)
class PerThread:
    """Instructions per request of one dump: the worker's event loop and every other thread."""
    event_loop: float
    other_threads: float

    @property
    def total(self) -> float:
        return self.event_loop + self.other_threads


DUMP_FILE = re.compile(r"\.(?P<dump>\d+)-(?P<thread>\d+)$")


def dump_per_thread(directory: Path, out_name: str, dump: int) -> dict[int, int]:
    """Instructions of each thread in dump number ``dump`` (files ``out_name.DUMP-THREAD``)."""
    per_thread: dict[int, int] = {}
    for path in directory.glob(f"{out_name}.{dump}-*"):
        match = DUMP_FILE.search(path.name)
        if match and int(match["dump"]) == dump:
            per_thread[int(match["thread"])] = counts(path.read_text()).get("Ir", 0)
    return per_thread


def per_request(per_thread: dict[int, int], requests: int) -> PerThread:
    if 1 not in per_thread:
        raise ValueError("the dump has no main thread (thread 1): not the worker's dump")
    others = sum(count for thread, count in per_thread.items() if thread != 1)
    return PerThread(per_thread[1] / requests, others / requests)


def control(worker: int, *command: str) -> None:
    """A ``callgrind_control`` command to the worker, done when it returns."""
    done = subprocess.run(["callgrind_control", *command, str(worker)], capture_output=True, text=True,
                          timeout=CONTROL_SECONDS)
    if done.returncode != 0 or "OK." not in done.stdout:
        raise RuntimeError(f"callgrind_control {' '.join(command)} {worker} failed:\n{done.stdout}{done.stderr}")


def connect(server: ServerProcess, count: int) -> list[http.client.HTTPSConnection]:
    """Kept-alive connections, opened by the warm-up and used again for the counted requests:
    a TLS handshake costs the event loop about as much as a dozen requests."""
    context = ssl.create_default_context(cafile=str(server.ca_file))
    return [http.client.HTTPSConnection("127.0.0.1", server.port, timeout=REQUEST_SECONDS, context=context)
            for _ in range(count)]


def send(connections: list[http.client.HTTPSConnection], load: list[bodies.Payload], requests: int) -> None:
    """``requests`` requests over the connections in parallel, round robin."""
    failures: list[str] = []

    def client(index: int) -> None:
        connection = connections[index]
        try:
            for number in range(index, requests, len(connections)):
                payload = load[number % len(load)]
                connection.request("POST", payload.path, payload.body, {"Content-Type": "application/json"})
                reply = connection.getresponse()
                body = reply.read()
                if reply.status != 200:
                    failures.append(f"{payload.name}: HTTP {reply.status} {body[:200]!r}")
                    return
        except (OSError, http.client.HTTPException) as error:
            failures.append(f"connection {index}: {error!r}")

    threads = [threading.Thread(target=client, args=(index,)) for index in range(len(connections))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise RuntimeError(f"{len(failures)} clients failed; the first: {failures[0]}")


def served_server(tree: Path, workdir: Path, cluster: Cluster, out: Path) -> ServerProcess:
    tls = authority.dev_bundle(workdir)
    # --trace-children: without it valgrind opens no control pipe in the worker gunicorn forks
    launcher = ["valgrind", "--tool=callgrind", "--trace-children=yes", "--separate-threads=yes",
                "--instr-atstart=no", f"--callgrind-out-file={out}.%p"]
    return ServerProcess("serve", [
        "webhook", "serve", "--cert-file", str(tls.cert_file), "--key-file", str(tls.key_file),
        "--policy-file", str(tree / "examples" / "policy.yaml"), "--kubeconfig", str(cluster.kubeconfig),
        "--workers", "1", "--threads", "8",
    ], workdir, tls.ca_file, tree=tree, health_port=serves_health_port(tree), launcher=launcher,
        environment={"PYTHONHASHSEED": "0"})


@dataclass(frozen=True)
class Counted:
    requests: int  # N; for the idle row, the seconds waited
    seconds: float  # from the zero to the dump
    per: PerThread  # instructions per request (the idle row: per second)


def measure(tree: Path, cases: Sequence[Case], rounds: int | None, log: Callable[[str], None],
            keep: Path | None = None) -> dict[str, Counted]:
    """Each case counted, every case on one server; then the idle worker, per second. ``keep``:
    where the callgrind files are left (for ``callgrind_annotate``), instead of a temporary folder."""
    results: dict[str, Counted] = {}
    with tempfile.TemporaryDirectory(prefix="mpijob-webhook-served-") as tmp:
        workdir = keep or Path(tmp)
        out = workdir / "callgrind.out"
        with Cluster(NAMESPACES, workdir / "kubeconfig") as cluster:
            server = served_server(tree, workdir, cluster, out)
            log(f"starting {tree}'s server under callgrind")
            with server:
                worker = server.workers()[0]
                control(worker, "--instr=on")

                def counted(dump: int, requests: int, load: Callable[[], None]) -> Counted:
                    control(worker, "--zero")
                    started = time.monotonic()
                    load()
                    control(worker, "--dump")
                    seconds = time.monotonic() - started
                    return Counted(requests, seconds, per_request(dump_per_thread(workdir, f"{out.name}.{worker}", dump), requests))

                for dump, case in enumerate(cases, start=1):
                    payloads = case_payloads(case.endpoint, cluster.target)
                    requests = (rounds or case.rounds) * len(payloads)
                    connections = connect(server, case.connections)
                    try:
                        send(connections, payloads, WARMUP)
                        results[case.name] = counted(dump, requests, lambda: send(connections, payloads, requests))
                    finally:
                        for connection in connections:
                            connection.close()
                    log(f"{case.name}: {results[case.name].per.total:,.0f} instructions per request (N = {requests})")
                # what the worker does with no request at all: the share of the counts above
                # that is time, not requests (the loop's turns, the writers' flushes)
                results[IDLE] = counted(len(cases) + 1, IDLE_SECONDS, lambda: time.sleep(IDLE_SECONDS))
    return results


def report(results: dict[str, Counted]) -> list[str]:
    lines = ["| case | N | seconds | event loop | other threads | whole worker |", "|---|---|---|---|---|---|"]
    for name, row in results.items():
        lines.append(f"| {name} | {row.requests} | {row.seconds:.1f} | {row.per.event_loop:,.0f} | "
                     f"{row.per.other_threads:,.0f} | {row.per.total:,.0f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m bench profile --mode served-instructions",
                                     description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("cases", nargs="*", metavar=f"{{{','.join(CASES)}}}", help="default: all of them")
    parser.add_argument("--tree", type=Path, default=ROOT, metavar="DIR",
                        help="the source tree whose server is counted (default: this one)")
    parser.add_argument("--rounds", type=int, help="rounds of the payloads counted per case (default: the case's own)")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="leave the callgrind files in DIR (dump K is case K; the last, the idle worker), "
                             "for callgrind_annotate")
    args = parser.parse_args(argv)
    unknown = [name for name in args.cases if name not in CASES]
    if unknown:
        parser.error(f"unknown case {unknown[0]}; choose from {', '.join(CASES)}")
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if not (args.tree / "webhook" / "commands" / "serve.py").is_file():
        parser.error(f"--tree {args.tree}: not a checkout of this project (no webhook/commands/serve.py)")
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2

    def log(line: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {line}", file=sys.stderr, flush=True)

    cases = [CASES[name] for name in args.cases] or list(CASES.values())
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    print("\n".join(report(measure(args.tree.resolve(), cases, args.rounds, log, args.keep))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
