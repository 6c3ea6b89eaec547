"""Instructions per request, counted by valgrind's callgrind: the same count for the same code
whatever else the machine is doing, so a change of a few µs shows where timings drown in noise.

    python3 -m bench profile --mode instructions  # /validate, /mutate, /convert: about 6 minutes
    python3 -m bench profile --mode instructions /validate --requests 300

For each endpoint, the floor's app and ours (as ``serve`` builds it, with one benchmark
namespace's cluster state) each answer the payloads in-process in two runs under callgrind: a
warm-up, then N requests or none. The difference of the two runs' counts, divided by N, is what
one request costs, with the start-up left out. Callgrind also simulates the first-level caches:
their misses say how much of a request's time the instruction count alone does not show (in a
request, each part costs more than in a loop of itself; docs/performance.md, "Inside a request").
Needs valgrind (Debian's package of that name).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
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


def child(side: str, endpoint: str, requests: int) -> None:
    """One run under callgrind: the warm-up, then ``requests`` more."""
    view, namespace = cluster_view()
    client = create_floor_app().test_client() if side == "floor" else app_client(view)
    load = payloads_for(endpoint, namespace, None)
    with audit_log_silenced():
        post_all(client, load, WARMUP)()
        post_all(client, load, requests)()


def run_under_callgrind(side: str, endpoint: str, requests: int, workdir: Path) -> dict[str, int]:
    out = workdir / f"{side}{endpoint.replace('/', '-')}-{requests}.callgrind"
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--cache-sim=yes", f"--callgrind-out-file={out}",
         sys.executable, "-m", "bench.instructions", "--child", side, endpoint, str(requests)],
        cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0 or not out.exists():
        raise SystemExit(f"callgrind run of {side} {endpoint} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return counts(out.read_text())


def measure(endpoint: str, requests: int, workdir: Path, pool: ThreadPoolExecutor) -> dict[str, PerRequest]:
    runs = {(side, n): pool.submit(run_under_callgrind, side, endpoint, n, workdir)
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
    parser.add_argument("--child", nargs=3, metavar=("SIDE", "ENDPOINT", "REQUESTS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        side, endpoint, requests = args.child
        child(side, endpoint, int(requests))
        return 0
    endpoints = chosen_endpoints(parser, args.endpoints, ENDPOINTS)
    if args.requests < 1:
        parser.error("--requests must be at least 1")
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="mpijob-webhook-instructions-") as tmp, ThreadPoolExecutor(len(os.sched_getaffinity(0))) as pool:
        for endpoint in endpoints:
            lines += report(endpoint, measure(endpoint, args.requests, Path(tmp), pool))
    print("\n".join(lines).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
