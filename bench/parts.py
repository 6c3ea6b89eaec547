"""What each part of the webhook costs where it runs: inside a request, after Flask, the
envelope and the other rules have passed through the CPU's caches.

    python3 -m bench parts                     # /validate and /mutate, about a minute
    python3 -m bench parts /mutate --rounds 40

A part timed in a loop of itself costs a third to a half of what it costs inside a request (the
loop keeps its code and data in the caches), so loop timings mislead about where a request's
time goes. Here the app answers the same payloads once as ``serve`` builds it and once with one
part switched off (a rule, a mutation, the observers: through ``Admission``'s own fields), in
short alternating rounds; a part's cost is the median difference. Parts that share work (the
cluster-aware rules derive the job's pods once for all of them) each show only what is theirs
alone: the groups at the end show what they cost together.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench.floor import create_floor_app
from bench.payloads import Payload
from bench.profile import app_client, cluster_view, payloads_for
from policies import registry

ENDPOINTS = ("/validate", "/mutate")


def variants(endpoint: str, view: Any) -> dict[str, Callable[[Any], None]]:
    """Name → how to switch that part off in an app's Admission; "" is the app as served."""
    def rules(keep: Callable[[Any], bool]) -> Callable[[Any], None]:
        return lambda admission: setattr(admission, "rules", tuple(r for r in registry.RULES if keep(r)))

    def mutations(keep: Callable[[Any], bool]) -> Callable[[Any], None]:
        return lambda admission: setattr(admission, "mutations", tuple(m for m in registry.MUTATIONS if keep(m)))

    found: dict[str, Callable[[Any], None]] = {"": lambda admission: None,
                                               "the audit log and metrics": lambda admission: admission.observers.clear()}
    if endpoint == "/validate":
        for rule in registry.RULES:
            found[f"rule {rule.id}"] = rules(lambda r, rule=rule: r is not rule)
        found["the cluster-aware rules together"] = rules(lambda r: not r.needs_cluster)
        found["the spec-only rules together"] = rules(lambda r: r.needs_cluster)
        found["every rule"] = rules(lambda r: False)
    else:
        for mutation in registry.MUTATIONS:
            found[f"mutation {mutation.id}"] = mutations(lambda m, mutation=mutation: m is not mutation)
        found["every mutation"] = mutations(lambda m: False)
    return found


def cpu_per_request(client: Any, load: Sequence[Payload], requests: int) -> float:
    post = client.post
    started = time.process_time()
    for i in range(requests):
        payload = load[i % len(load)]
        post(payload.path, data=payload.body, content_type="application/json")
    return (time.process_time() - started) / requests * 1e6


def measure(clients: dict[str, Any], load: Sequence[Payload], requests: int, rounds: int) -> dict[str, float]:
    """Median CPU µs per request of each client, over rounds that visit every client in turn
    (so a burst of background load hits them all)."""
    for client in clients.values():
        cpu_per_request(client, load, requests)  # warm up: first-use imports, memos, caches
    samples: dict[str, list[float]] = {name: [] for name in clients}
    for _ in range(rounds):
        for name, client in clients.items():
            samples[name].append(cpu_per_request(client, load, requests))
    return {name: statistics.median(values) for name, values in samples.items()}


def report(endpoint: str, medians: dict[str, float]) -> list[str]:
    ours, floor = medians[""], medians["floor"]
    lines = [f"## {endpoint}: {ours:.0f} µs per request in-process, the floor {floor:.0f} µs, "
             f"so {ours - floor:.0f} µs are ours",
             "", "| switched off | saves µs per request | share of ours |", "|---|---|---|"]
    for name, median in medians.items():
        if name not in ("", "floor"):
            saved = ours - median
            lines.append(f"| {name} | {saved:.1f} | {saved / (ours - floor):.0%} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m bench parts", description=__doc__.split("\n\n")[0])
    parser.add_argument("endpoints", nargs="*", metavar="{/validate,/mutate}", help="default: both")
    parser.add_argument("--requests", type=int, default=200, help="requests per client per round (default 200)")
    parser.add_argument("--rounds", type=int, default=31, help="rounds; the median counts (default 31)")
    args = parser.parse_args(argv)
    unknown = [e for e in args.endpoints if e not in ENDPOINTS]
    if unknown:
        parser.error(f"unknown endpoint {unknown[0]}; choose from {', '.join(ENDPOINTS)}")
    view, namespace = cluster_view()
    lines: list[str] = []
    audit, sys.stdout = sys.stdout, open(os.devnull, "w")  # the audit log goes to stdout  # noqa: SIM115
    try:
        for endpoint in args.endpoints or ENDPOINTS:
            clients = {"floor": create_floor_app().test_client()}
            for name, switch_off in variants(endpoint, view).items():
                client = clients[name] = app_client(view)
                switch_off(client.application.extensions["mpijob-webhook"].admission)
            load = payloads_for(endpoint, namespace, None)
            lines += [*report(endpoint, measure(clients, load, args.requests, args.rounds)), ""]
    finally:
        sys.stdout.close()
        sys.stdout = audit
    print("\n".join(lines).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
