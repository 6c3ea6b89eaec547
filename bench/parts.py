"""What each part of the webhook costs where it runs: inside a request, after Flask, the
envelope and the other rules have passed through the CPU's caches.

    python3 -m bench profile --mode parts  # /validate and /mutate, about a minute
    python3 -m bench profile --mode parts /mutate --rounds 40

A part timed in a loop of itself costs a third to a half of what it costs inside a request (the
loop keeps its code and data in the caches), so loop timings mislead about where a request's
time goes. Here one app, as ``serve`` builds it, answers the same payloads in short rounds, each
round with one part switched off (a rule, a mutation, the observers: through ``Admission``'s own
fields; the checks of the input, which are no such field: their function swapped for one that
finds nothing) or none, in turn; a part's cost is the difference of the medians. One app for all, not
one per variant: two copies of the same app differ by up to 10 µs per request by where their
objects happen to lie in memory. Parts that share work (the
cluster-aware rules derive the job's pods once for all of them) each show only what is theirs
alone: the groups at the end show what they cost together. The MPIJob workload view, which the
workload rules read and cannot do without, is not switched off but built ahead: each object's
view is built once (the first time it is asked for) and handed out again for an object of the
same name, so that row is what building the views costs a request (its own and the jobs in flight
the quota rule counts).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench.floor import create_floor_app
from bench.payloads import Payload
from bench.profile import app_client, audit_log_silenced, chosen_endpoints, cluster_view, payloads_for, post_all
from policies import engine, registry
from policies.mpijob import workload_builder
from policies.workload import Workload
from webhook import review

ENDPOINTS = ("/validate", "/mutate")


def variants(endpoint: str) -> dict[str, Callable[[Any], Callable[[], None]]]:
    """Name → a switch: given an app's Admission, it switches that part off and returns how to
    switch it back on; "" is the app as served."""
    def swapped(owner_of: Callable[[Any], Any], name: str, stand_in: Any) -> Callable[[Any], Callable[[], None]]:
        def switch_off(admission: Any) -> Callable[[], None]:
            owner = owner_of(admission)
            served = getattr(owner, name)
            setattr(owner, name, stand_in)
            return lambda: setattr(owner, name, served)
        return switch_off

    def other_than(item: Any) -> Callable[[Any], bool]:
        return lambda candidate: candidate is not item

    def rules(keep: Callable[[Any], bool]) -> Callable[[Any], Callable[[], None]]:
        return swapped(lambda admission: admission, "rules", tuple(filter(keep, registry.RULES)))

    def mutations(keep: Callable[[Any], bool]) -> Callable[[Any], Callable[[], None]]:
        return swapped(lambda admission: admission, "mutations", tuple(filter(keep, registry.MUTATIONS)))

    def finding_nothing(module: Any, name: str, stand_in: Callable[..., Any]) -> Callable[[Any], Callable[[], None]]:
        return swapped(lambda admission: module, name, stand_in)

    def observers(admission: Any) -> Callable[[], None]:
        served = list(admission.observers)
        admission.observers.clear()
        return lambda: admission.observers.extend(served)

    found: dict[str, Callable[[Any], Callable[[], None]]] = {
        "": lambda admission: lambda: None, "the audit log and metrics": observers,
        "the nesting guard on the body": finding_nothing(review, "_nested_deeper_than", lambda *args: False)}
    if endpoint == "/validate":
        found["the shape check"] = finding_nothing(engine, "check_shape", lambda job: [])
        found[WORKLOAD_BUILT_AHEAD] = finding_nothing(workload_builder, "mpijob_workload",
                                                      built_ahead(workload_builder.mpijob_workload))
        for rule in registry.RULES:
            found[f"rule {rule.id}"] = rules(other_than(rule))
        found["the cluster-aware rules together"] = rules(lambda r: not r.needs_cluster)
        found["the spec-only rules together"] = rules(lambda r: r.needs_cluster)
        found["every rule"] = rules(lambda r: False)
    else:
        found["the shape check of the fields mutations touch"] = finding_nothing(
            engine, "check_mutation_shape", lambda job, mutations: [])
        for mutation in registry.MUTATIONS:
            found[f"mutation {mutation.id}"] = mutations(other_than(mutation))
        found["every mutation"] = mutations(lambda m: False)
    return found


WORKLOAD_BUILT_AHEAD = "the MPIJob workload builder (each view built ahead)"


def built_ahead(build: Callable[[Any, str], Workload]) -> Callable[..., Workload]:
    """``build``, but each view built once and handed out again for an object of the same
    namespace and name: the benchmark's objects (payloads, jobs in flight) differ by name. The
    views outlive a round, so no round pays for building them."""
    views: dict[tuple[Any, ...], Workload] = {}

    def view_of(job: Any, namespace: str = "") -> Workload:
        meta = job.get("metadata") or {}
        key = (namespace, meta.get("namespace"), meta.get("name"), meta.get("generateName"))
        view = views.get(key)
        if view is None:
            view = views[key] = build(job, namespace)
        return view
    return view_of


def cpu_per_request(client: Any, load: Sequence[Payload], requests: int) -> float:
    run = post_all(client, list(load), requests)  # stops at any answer but 200: no timing of errors
    started = time.process_time()
    run()
    return (time.process_time() - started) / requests * 1e6


def measure(floor: Any, ours: Any, switches: dict[str, Callable[[Any], Callable[[], None]]],
            load: Sequence[Payload], requests: int, rounds: int) -> dict[str, float]:
    """Median CPU µs per request of the floor and of ``ours`` with each switch thrown, over
    rounds that visit every variant in turn (so a burst of background load hits them all)."""
    admission = ours.application.extensions["mpijob-webhook"].admission

    def sample(name: str) -> float:
        if name == "floor":
            return cpu_per_request(floor, load, requests)
        switch_back = switches[name](admission)
        try:
            return cpu_per_request(ours, load, requests)
        finally:
            switch_back()

    names = ["floor", *switches]
    for name in names:
        sample(name)  # warm up: first-use imports, memos, caches
    samples: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(rounds):
        for name in names:
            samples[name].append(sample(name))
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
    parser = argparse.ArgumentParser(prog="python3 -m bench profile --mode parts", description=__doc__.split("\n\n")[0],
                                     allow_abbrev=False)
    parser.add_argument("endpoints", nargs="*", metavar="{/validate,/mutate}", help="default: both")
    parser.add_argument("--payload", help="one payload by name, e.g. large-job (default: the upstream examples)")
    parser.add_argument("--requests", type=int, default=200, help="requests per client per round (default 200)")
    parser.add_argument("--rounds", type=int, default=31, help="rounds; the median counts (default 31)")
    args = parser.parse_args(argv)
    endpoints = chosen_endpoints(parser, args.endpoints, ENDPOINTS)
    view, namespace = cluster_view()
    lines: list[str] = []
    with audit_log_silenced():
        for endpoint in endpoints:
            medians = measure(create_floor_app().test_client(), app_client(view), variants(endpoint),
                              payloads_for(endpoint, namespace, args.payload), args.requests, args.rounds)
            lines += [*report(endpoint, medians), ""]
    print("\n".join(lines).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
