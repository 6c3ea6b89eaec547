"""Instructions per request, counted by valgrind's callgrind: the same count for the same code
whatever else the machine is doing, so a change of a few µs shows where timings drown in noise.

    python3 -m bench profile --mode instructions  # /validate, /mutate, /convert: about 6 minutes
    python3 -m bench profile --mode instructions /validate --requests 300
    python3 -m bench profile --mode instructions /validate --warmup 20 --requests 30  # rougher, minutes on a busy machine
    python3 -m bench profile --mode instructions --trainjobs  # each TrainJob payload beside its MPIJob twin

For each endpoint, the floor's app and ours (as ``serve`` builds it, with one benchmark
namespace's cluster state) each answer the payloads in-process in two runs under callgrind: a
warm-up, then N requests or none. The difference of the two runs' counts, divided by N, is what
one request costs, with the start-up left out. Callgrind also simulates the first-level caches:
their misses say how much of a request's time the instruction count alone does not show (in a
request, each part costs more than in a loop of itself; docs/performance.md, "Inside a request").
Needs valgrind (Debian's package of that name).

With ``--trainjobs``, the rows of ``--mode overhead --trainjobs`` (the upstream examples, then
each TrainJob payload after its MPIJob twin, on /validate and /mutate) are counted in ONE run of
our app under callgrind: every row is warmed up first, then each row's N requests are answered
between two calls of ``getppid``, before which callgrind dumps its counts (``--dump-before``), so
each dump between two markers holds exactly one row's requests. The floor is left out: the
comparison is the TrainJob against its twin.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bench.floor import create_floor_app
from bench.profile import app_client, audit_log_silenced, chosen_endpoints, cluster_view, payloads_for, post_all

ENDPOINTS = ("/validate", "/mutate", "/convert")
SIDES = ("floor", "ours")
WARMUP = 200  # requests before either run's end: first-use imports, memos, caches
ROOT = Path(__file__).resolve().parent.parent


def counts(callgrind_out: str) -> dict[str, int]:
    """The event totals of a callgrind output file (``events:`` names them, ``summary:`` or
    ``totals:`` counts them)."""
    names: list[str] = []
    values: list[int] = []
    for line in callgrind_out.splitlines():
        if line.startswith("events:"):
            names = line.split()[1:]
        elif line.startswith(("summary:", "totals:")) and not values:
            values = [int(value) for value in line.split()[1:]]
    if not names or len(values) != len(names):
        raise ValueError("not a callgrind output file with event totals")
    return dict(zip(names, values))


@dataclass(frozen=True)
class PerRequest:
    instructions: float
    instruction_cache_misses: float  # first level
    data_cache_misses: float  # first level, reads and writes

    @classmethod
    def between(cls, idle: Mapping[str, int], busy: Mapping[str, int], requests: int) -> PerRequest:
        """What ``requests`` more requests added, per request."""
        def per(*events: str) -> float:
            return sum(busy.get(e, 0) - idle.get(e, 0) for e in events) / requests
        return cls(per("Ir"), per("I1mr"), per("D1mr", "D1mw"))


def child(side: str, endpoint: str, requests: int, warmup: int = WARMUP) -> None:
    """One run under callgrind: the warm-up, then ``requests`` more."""
    view, namespace = cluster_view()
    client = create_floor_app().test_client() if side == "floor" else app_client(view)
    load = payloads_for(endpoint, namespace, None)
    with audit_log_silenced():
        post_all(client, load, warmup)()
        post_all(client, load, requests)()


MARKER = "getppid"  # a libc call nothing on the request path makes: callgrind dumps its counts before each one


def trainjob_child(endpoints: list[str], requests: int, warmup: int, marker: Callable[[], object] = os.getppid) -> None:
    """Our app under callgrind: every row warmed up, then each row's requests between markers."""
    from bench.overhead import TRAINJOB_ROWS

    view, namespace = cluster_view()
    client = app_client(view)
    rows = [post_all(client, payloads_for(endpoint, namespace, row), requests)
            for endpoint in endpoints for row in TRAINJOB_ROWS]
    with audit_log_silenced():
        for endpoint in endpoints:
            for row in TRAINJOB_ROWS:
                post_all(client, payloads_for(endpoint, namespace, row), warmup)()
        for run in rows:
            marker()
            run()
        marker()


def dumped_counts(out: Path) -> list[dict[str, int]]:
    """The counts of each dump of a callgrind run that dumped several times, in order: ``out.1``,
    ``out.2``, …, then ``out`` (written at exit)."""
    dumps = sorted(out.parent.glob(f"{out.name}.*"), key=lambda path: int(path.suffix[1:]))
    return [counts(path.read_text()) for path in [*dumps, out]]


def measure_trainjobs(endpoints: tuple[str, ...], requests: int, workdir: Path, warmup: int) -> list[tuple[str, str, float]]:
    """(endpoint, row, instructions per request) for each row of ``--trainjobs``."""
    from bench.overhead import TRAINJOB_ROWS

    out = workdir / "trainjobs.callgrind"
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--dump-before={MARKER}", f"--callgrind-out-file={out}",
         sys.executable, "-m", "bench.instructions", "--trainjob-child", ",".join(endpoints), str(requests), str(warmup)],
        cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"callgrind run of the TrainJob rows failed ({done.returncode}):\n{done.stderr[-2000:]}")
    dumps = dumped_counts(out)
    rows = [(endpoint, row or "the upstream examples") for endpoint in endpoints for row in TRAINJOB_ROWS]
    # the first dump: start-up and warm-up; then one per row; the last: the exit
    if len(dumps) != len(rows) + 2:
        raise SystemExit(f"expected {len(rows) + 2} callgrind dumps, got {len(dumps)}: something else called {MARKER}")
    return [(endpoint, row, dump.get("Ir", 0) / requests) for (endpoint, row), dump in zip(rows, dumps[1:])]


def trainjob_report(measured: list[tuple[str, str, float]]) -> list[str]:
    """Each TrainJob row with its difference to the MPIJob twin row just before it."""
    lines = ["| endpoint | payload | instructions per request | TrainJob − twin |", "|---|---|---|---|"]
    twin: float | None = None
    for endpoint, row, instructions in measured:
        versus = ""
        if row.startswith("trainjob-") and twin:
            versus = f"{instructions - twin:+,.0f} ({instructions / twin - 1:+.1%})"
        twin = instructions if row.startswith("mpijob-twin-") else None
        lines.append(f"| {endpoint} | {row} | {instructions:,.0f} | {versus} |")
    return lines


def run_under_callgrind(side: str, endpoint: str, requests: int, workdir: Path, warmup: int = WARMUP) -> dict[str, int]:
    out = workdir / f"{side}{endpoint.replace('/', '-')}-{requests}.callgrind"
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--cache-sim=yes", f"--callgrind-out-file={out}",
         sys.executable, "-m", "bench.instructions", "--child", side, endpoint, str(requests), str(warmup)],
        cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0 or not out.exists():
        raise SystemExit(f"callgrind run of {side} {endpoint} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return counts(out.read_text())


def measure(endpoint: str, requests: int, workdir: Path, pool: ThreadPoolExecutor,
            warmup: int = WARMUP) -> dict[str, PerRequest]:
    runs = {(side, n): pool.submit(run_under_callgrind, side, endpoint, n, workdir, warmup)
            for side in SIDES for n in (0, requests)}
    return {side: PerRequest.between(runs[side, 0].result(), runs[side, requests].result(), requests)
            for side in SIDES}


def report(endpoint: str, per: Mapping[str, PerRequest]) -> list[str]:
    ours, floor = per["ours"], per["floor"]

    def row(name: str, mine: float, theirs: float) -> str:
        return f"| {name} | {mine:,.0f} | {theirs:,.0f} | {mine - theirs:+,.0f} ({mine / theirs - 1:+.0%}) |"

    return [f"## {endpoint}", "", "| per request | ours | floor | ours − floor |", "|---|---|---|---|",
            row("instructions", ours.instructions, floor.instructions),
            row("first-level instruction cache misses", ours.instruction_cache_misses,
                floor.instruction_cache_misses),
            row("first-level data cache misses", ours.data_cache_misses, floor.data_cache_misses), ""]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m bench profile --mode instructions", description=__doc__.split("\n\n")[0],
                                     allow_abbrev=False)
    parser.add_argument("endpoints", nargs="*", metavar="{/validate,/mutate,/convert}", help="default: all three")
    parser.add_argument("--requests", type=int, default=300, help="requests counted per run (default 300)")
    parser.add_argument("--warmup", type=int, default=WARMUP,
                        help=f"requests before the counted ones, in both runs (default {WARMUP}; fewer: a faster, rougher count)")
    parser.add_argument("--trainjobs", action="store_true",
                        help="the rows of --mode overhead --trainjobs: each TrainJob payload after its MPIJob twin, "
                             "on /validate and /mutate, counted in one callgrind run of our app (no floor)")
    parser.add_argument("--child", nargs=4, metavar=("SIDE", "ENDPOINT", "REQUESTS", "WARMUP"), help=argparse.SUPPRESS)
    parser.add_argument("--trainjob-child", nargs=3, metavar=("ENDPOINTS", "REQUESTS", "WARMUP"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        side, endpoint, requests, warmup = args.child
        child(side, endpoint, int(requests), int(warmup))
        return 0
    if args.trainjob_child:
        names, requests, warmup = args.trainjob_child
        trainjob_child(names.split(","), int(requests), int(warmup))
        return 0
    endpoints = chosen_endpoints(parser, args.endpoints, ("/validate", "/mutate") if args.trainjobs else ENDPOINTS)
    if args.requests < 1:
        parser.error("--requests must be at least 1")
    if args.warmup < 0:
        parser.error("--warmup must not be negative")
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    lines: list[str] = []
    if args.trainjobs:
        with tempfile.TemporaryDirectory(prefix="mpijob-webhook-instructions-") as tmp:
            lines = trainjob_report(measure_trainjobs(endpoints, args.requests, Path(tmp), args.warmup))
        print("\n".join(lines))
        return 0
    with tempfile.TemporaryDirectory(prefix="mpijob-webhook-instructions-") as tmp, ThreadPoolExecutor(len(os.sched_getaffinity(0))) as pool:
        for endpoint in endpoints:
            lines += report(endpoint, measure(endpoint, args.requests, Path(tmp), pool, args.warmup))
    print("\n".join(lines).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
