"""What the webhook adds to the floor, in-process: the floor's Flask app and ours (example policy,
audit log, metrics, the cluster state of one benchmark namespace) answer the same payloads through
the same Flask test client, and the CPU time per request of each is measured back to back.

    python3 -m bench profile --mode overhead  # /validate, /mutate and /convert, about 15 seconds
    python3 -m bench profile --mode overhead /mutate --payload large-job
    python3 -m bench profile --mode overhead --trainjobs  # each TrainJob payload beside its MPIJob twin

The HTTP server (gunicorn, TLS) and the test client cost the same for both and cancel out of the
difference; the difference is our work. It is far steadier than a load test on a busy machine, so
it is the number to watch while changing the hot path; ``python3 -m bench run`` has the last word
(in the server, with its CPU caches shared with TLS and gunicorn, the same work costs about a
third more).
"""
from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.floor import create_floor_app
from bench.payloads import Payload
from bench.profile import app_client, audit_log_silenced, chosen_endpoints, cluster_view, payloads_for, post_all

ENDPOINTS = ("/validate", "/mutate", "/convert")


@dataclass(frozen=True)
class Overhead:
    endpoint: str
    payloads: str
    floor_us: float
    ours_us: float

    @property
    def added_us(self) -> float:
        return self.ours_us - self.floor_us

    def line(self) -> str:
        return (f"{self.endpoint:9} {self.payloads:38} floor {self.floor_us:5.0f} µs   ours {self.ours_us:5.0f} µs   "
                f"added {self.added_us:5.0f} µs   floor/ours {self.floor_us / self.ours_us:4.0%}")


def cpu_per_request(run: Callable[[], None], requests: int, rounds: int) -> float:
    """Best of ``rounds``: interference only ever adds time."""
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        run()
        best = min(best, time.process_time() - started)
    return best / requests * 1e6


def measure(endpoint: str, load: list[Payload], ours: Any, floor: Any, requests: int, rounds: int) -> Overhead:
    runs = {name: post_all(client, load, requests) for name, client in (("ours", ours), ("floor", floor))}
    for run in runs.values():
        run()  # warm up: first-use imports, memos of distinct values, CPU caches
    floor_us = ours_us = float("inf")
    for _ in range(rounds):  # interleaved, so a burst of background load hits both
        floor_us = min(floor_us, cpu_per_request(runs["floor"], requests, 1))
        ours_us = min(ours_us, cpu_per_request(runs["ours"], requests, 1))
    names = load[0].name if len(load) == 1 else f"{len(load)} payloads"
    return Overhead(endpoint, names, floor_us, ours_us)


TRAINJOB_ROWS = (None, "mpijob-twin-of-trainjob-deepspeed", "trainjob-deepspeed",
                 "mpijob-twin-of-trainjob-odh-benchmark", "trainjob-odh-benchmark")


def runtime_read_us(rounds: int = 7, number: int = 20000) -> float:
    """What reading a TrainJob's runtime from the watch cache costs: the TrainJob's runtimeRef
    read and the lookup in a ``ClusterCaches`` holding the benchmark's runtimes (best of
    ``rounds``, in a loop: an upper bound of nothing, a lower bound of a request's share)."""
    import timeit

    from kubernetes import client

    from bench.payloads import trainer_runtimes, trainjobs
    from policies.trainer.api import runtime_ref
    from webhook.watch_caches import CLUSTER_TRAINING_RUNTIMES, ClusterCaches

    caches = ClusterCaches(client.ApiClient())  # never started: filled below, as a watch would
    informer = caches._informers[CLUSTER_TRAINING_RUNTIMES.plural]  # noqa: SLF001 - no API server here
    for runtime in trainer_runtimes():
        informer._put(runtime)  # noqa: SLF001
    job = trainjobs()["trainjob-odh-benchmark"]

    def read() -> object:
        ref = runtime_ref(job)
        return caches.training_runtime(ref.kind, "team", ref.name)

    assert read() is not None
    return min(timeit.repeat(read, number=number, repeat=rounds)) / number * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m bench profile --mode overhead", description=__doc__.split("\n\n")[0],
                                     allow_abbrev=False)
    parser.add_argument("endpoints", nargs="*", metavar="{/validate,/mutate,/convert}",
                        help="default: all three")
    parser.add_argument("--payload", help="one payload by name (default: the upstream examples / single-object reviews)")
    parser.add_argument("--requests", type=int, default=500, help="requests per round (default 500)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds; the best counts (default 7)")
    parser.add_argument("--trainjobs", action="store_true",
                        help="the upstream examples, then each TrainJob payload after its MPIJob twin (the same pods "
                             "as an MPIJob), on /validate and /mutate, and what reading a runtime from the cache costs")
    args = parser.parse_args(argv)
    if args.trainjobs and args.payload:
        parser.error("--trainjobs chooses its payloads: leave out --payload")
    endpoints = chosen_endpoints(parser, args.endpoints, ("/validate", "/mutate") if args.trainjobs else ENDPOINTS)
    rows = TRAINJOB_ROWS if args.trainjobs else (args.payload,)
    view, namespace = cluster_view()
    with audit_log_silenced():
        ours, floor = app_client(view), create_floor_app().test_client()
        results = [measure(endpoint, payloads_for(endpoint, namespace, payload), ours, floor,
                           args.requests, args.rounds) for endpoint in endpoints for payload in rows]
    for result in results:
        print(result.line())
    if args.trainjobs:
        print(f"reading a TrainJob's runtime from the watch cache (runtimeRef and lookup, in a loop): "
              f"{runtime_read_us():.2f} µs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
