"""``bench e2e``: what admission adds to an MPIJob create on a real API server. Dry-run creates of
one MPIJob (the upstream ``pi`` example; ``POST .../mpijobs?dryRun=All``) go straight to a real
kube-apiserver over kept-alive HTTPS connections with the admin's client certificate, from
separate load-generator processes (``bench.load``), while the API server admits them in one of
four ways, one registered at a time:

    none       the API server alone (no policy, no webhook): the base every other line is measured from
    policies   the exported ValidatingAdmissionPolicies (``export vap``, default policy; those it accepts)
    bare       a webhook that allows everything: the floor (``bench.floor``: the same gunicorn, TLS and Flask)
    ours       ``mpijob-webhook serve``, default policy, its caches watching the same API server

Both webhooks are registered as the manifests register ours (``manifests/base/webhooks.yaml``),
with ``clientConfig.url: https://127.0.0.1:PORT/validate`` and the ``caBundle``. The ways take
turns in rounds (each round starts one later in the order), each measured at every concurrency
in a window of its own; latencies are pooled per way and concurrency over the rounds. What a way
adds is its p50 (p99) minus the p50 (p99) of ``none``.

    KUBEBUILDER_ASSETS=/path/to/kube/bin python3 -m bench e2e                   # about 6 minutes
    KUBEBUILDER_ASSETS=/path/to/kube/bin python3 -m bench e2e --rounds 2 --seconds 1   # a rough look
    KUBEBUILDER_ASSETS=/path/to/kube/bin python3 -m bench e2e --smoke            # a few requests (the tests)

The folder holds etcd, kube-apiserver and kube-controller-manager (``testing.control_plane``).
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.e2e_cluster import (DRY_RUN_CREATE, WEBHOOK_CONFIGURATIONS, AdminConnection, ExportedPolicies,
                               admin_cert, install_crd, job_body, process_cpu_seconds, wait_for,
                               webhook_configuration)
from bench.load import Generators, Result
from bench.report import Stats
from bench.run import pooled
from bench.servers import ServerProcess
from certs import authority
from testing.control_plane import ASSETS_VARIABLE, BINARIES, ControlPlane, assets
from testing.reference_data import ROOT

WAYS = ("none", "policies", "bare", "ours")
TARGET = 1.25  # ours may add at most this many times what the bare webhook adds (p50 and p99)
Window = tuple[Result, float, int | None]  # as bench.run.pooled takes them (no API-server counts here)


@dataclass
class Way:
    """One way of admitting the job: how to register it, and what the probe shows once it is."""
    name: str
    register: Callable[[], object]
    unregister: Callable[[], object]
    probe_outcome: str
    webhook: str | None = None
    server: ServerProcess | None = None


@dataclass
class Plan:
    rounds: int
    seconds: float
    warmup: float
    concurrency: tuple[int, ...]
    at_least_one: bool = False
    lead: float = 0.1


@dataclass
class Measurements:
    """Every window of every way at every concurrency, in the order measured (round by round)."""
    windows: dict[tuple[str, int], list[Window]] = field(default_factory=dict)
    apiserver_cpu: dict[tuple[str, int], float] = field(default_factory=dict)  # seconds, over the windows
    loads: list[float] = field(default_factory=list)  # the 1-minute load average at each window

    def add(self, way: str, concurrency: int, window: Window, apiserver_cpu: float) -> None:
        self.windows.setdefault((way, concurrency), []).append(window)
        self.apiserver_cpu[(way, concurrency)] = self.apiserver_cpu.get((way, concurrency), 0.0) + apiserver_cpu
        self.loads.append(os.getloadavg()[0])

    def apiserver_cpu_ms(self, way: str, concurrency: int) -> float:
        """The API server's CPU time per measured request (ms)."""
        requests = sum(len(result.latencies) for result, _, _ in self.windows[(way, concurrency)])
        return self.apiserver_cpu[(way, concurrency)] / requests * 1000 if requests else math.nan

    def stats(self, way: str, concurrency: int) -> Stats:
        return pooled(self.windows[(way, concurrency)])

    def per_round_added(self, way: str, concurrency: int, attribute: str) -> list[float]:
        """What ``way`` added in each round over that round's own ``none`` window (ms)."""
        return [getattr(Stats.of(mine[0], mine[1]), attribute) - getattr(Stats.of(base[0], base[1]), attribute)
                for mine, base in zip(self.windows[(way, concurrency)], self.windows[("none", concurrency)])]


class EndToEnd:
    """The control plane, both webhook servers and the load generators of one run, started once;
    ``run`` switches between the ways and measures them; ``close`` stops everything."""

    def __init__(self, plan: Plan, workdir: Path, bin_dir: Path, generators: int, log: Callable[[str], None]) -> None:
        self.plan, self.workdir, self.log = plan, workdir, log
        self.plane = ControlPlane(workdir / "control-plane", bin_dir)
        self.tls = authority.dev_bundle(workdir)
        self.generators = Generators(generators)
        self.servers: list[ServerProcess] = []
        self.policies = ExportedPolicies()
        self.api: AdminConnection | None = None

    def start(self) -> list[Way]:
        started = time.monotonic()
        self.plane.start()
        self.api = api = AdminConnection(self.plane)
        install_crd(self.plane, api)
        tls = ["--cert-file", str(self.tls.cert_file), "--key-file", str(self.tls.key_file)]
        bare = ServerProcess("bare", ["bench.floor", *tls], self.workdir, self.tls.ca_file)
        ours = ServerProcess("ours", ["webhook", "serve", *tls, "--kubeconfig", str(self.plane.kubeconfig)],
                             self.workdir, self.tls.ca_file)
        self.servers = [bare, ours]
        for server in self.servers:
            server.spawn(pinned=False)
        self.policies.install(api)
        for server in self.servers:
            server.wait_until_ready()
        self.log(f"control plane, CRD, both webhooks and the exported policies ready in "
                 f"{time.monotonic() - started:.0f} s")
        return [
            Way("none", lambda: None, lambda: None, "admitted"),
            Way("policies", lambda: self.policies.bind(api), lambda: self.policies.unbind(api), "policy"),
            self._webhook_way("bare", "allow-all.bench.mpijob-webhook.kubeflow.org", bare, "admitted"),
            self._webhook_way("ours", "validate.mpijob-webhook.kubeflow.org", ours, "webhook"),
        ]

    def _webhook_way(self, name: str, webhook: str, server: ServerProcess, outcome: str) -> Way:
        api = self.api
        assert api is not None
        configuration = webhook_configuration(f"bench-e2e-{name}", webhook,
                                              f"https://127.0.0.1:{server.port}/validate", self.tls.ca_file)
        return Way(name, lambda: api.must("POST", WEBHOOK_CONFIGURATIONS, configuration),
                   lambda: api.must("DELETE", f"{WEBHOOK_CONFIGURATIONS}/{configuration['metadata']['name']}"),
                   outcome, webhook, server)

    def run(self, ways: list[Way]) -> Measurements:
        api = self.api
        assert api is not None
        measurements, current = Measurements(), ways[0]
        body = job_body()
        for round_ in range(self.plan.rounds):
            for way in ways[round_ % len(ways):] + ways[:round_ % len(ways)]:
                current.unregister()
                way.register()
                wait_for(api, way.probe_outcome, way.webhook)
                current = way
                concurrencies = self.plan.concurrency if round_ % 2 == 0 else self.plan.concurrency[::-1]
                for concurrency in concurrencies:
                    window, apiserver_cpu = self._window(way, body, concurrency)
                    measurements.add(way.name, concurrency, window, apiserver_cpu)
                    stats = Stats.of(window[0], window[1])
                    self.log(f"round {round_ + 1}/{self.plan.rounds} {way.name:8} c={concurrency:<2} "
                             f"{stats.requests:6} requests  p50 {stats.p50_ms:6.2f} ms  p99 {stats.p99_ms:6.2f} ms  "
                             f"load {os.getloadavg()[0]:.2f}")
        current.unregister()
        return measurements

    def _window(self, way: Way, body: bytes, concurrency: int) -> tuple[Window, float]:
        """One measured window, and the API server's CPU seconds over it (read where the load
        generator reads the webhook's: at the window's start and end)."""
        apiserver = self.plane.processes["kube-apiserver"].pid
        readings: list[float] = []

        def cpu_seconds() -> float:
            readings.append(process_cpu_seconds(apiserver))
            return way.server.cpu_seconds() if way.server else 0.0

        result, cpu = self.generators.run(
            self.plane.apiserver_port, str(self.plane.ca_file), [(DRY_RUN_CREATE, body)], concurrency,
            self.plan.seconds, self.plan.warmup, cpu_seconds, self.plan.at_least_one, self.plan.lead,
            client_cert=admin_cert(self.plane), ok_status=201)
        if result.errors:
            raise RuntimeError(f"{way.name}: {result.errors} failed requests, first: {result.first_error}")
        return (result, cpu, None), readings[-1] - readings[0]

    def close(self) -> None:
        self.generators.close()
        if self.api is not None:
            self.api.close()
        for server in self.servers:
            server.stop_soon()
        for server in self.servers:
            server.wait_stopped()
        self.plane.stop()


def render(measurements: Measurements, plan: Plan, refused: dict[str, str]) -> str:
    lines = ["| concurrency | admitted by | requests | p50 ms | p99 ms | adds p50 ms | adds p99 ms "
             "| adds p50 per round: median (range) | webhook CPU ms/request | API server CPU ms/request |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    verdicts = []
    for concurrency in plan.concurrency:
        base = measurements.stats("none", concurrency)
        added = {}
        for way in WAYS:
            stats = measurements.stats(way, concurrency)
            added[way] = (stats.p50_ms - base.p50_ms, stats.p99_ms - base.p99_ms)
            rounds = measurements.per_round_added(way, concurrency, "p50_ms") if way != "none" else []
            spread = f"{statistics.median(rounds):.2f} ({min(rounds):.2f} to {max(rounds):.2f})" if rounds else ""
            cpu = f"{stats.server_cpu_ms:.2f}" if way in ("bare", "ours") else ""
            lines.append(f"| {concurrency} | {way} | {stats.requests:,} | {stats.p50_ms:.2f} | {stats.p99_ms:.2f} | "
                         + (f"{added[way][0]:.2f} | {added[way][1]:.2f} | " if way != "none" else "| | ")
                         + f"{spread} | {cpu} | {measurements.apiserver_cpu_ms(way, concurrency):.2f} |")
        verdicts.append(_verdict(concurrency, added["ours"], added["bare"]))
    loads = measurements.loads
    lines += ["", *verdicts, "",
              f"1-minute load average during the windows: {min(loads):.2f} to {max(loads):.2f} "
              f"(median {sorted(loads)[len(loads) // 2]:.2f}) on {os.cpu_count()} CPUs"]
    if refused:
        lines += ["", f"refused by the API server when created ({len(refused)}; the policies row ran without them):",
                  *(f"- {name}: {reason}" for name, reason in refused.items())]
    return "\n".join(lines)


def _verdict(concurrency: int, ours: tuple[float, float], bare: tuple[float, float]) -> str:
    """Ours against the bare webhook's added latency; a ratio to an addition the run's noise
    drowned (the bare webhook measured no slower than none) would mean nothing."""
    if min(bare) <= 0:
        return (f"c={concurrency}: ours adds {ours[0]:.2f} / {ours[1]:.2f} ms (p50 / p99), the bare webhook "
                f"{bare[0]:.2f} / {bare[1]:.2f}: no ratio, the bare webhook's addition is below this run's noise")
    ratios = [o / b for o, b in zip(ours, bare)]
    met = all(r <= TARGET for r in ratios)
    return (f"c={concurrency}: ours adds {ratios[0]:.2f}x (p50) and {ratios[1]:.2f}x (p99) what the bare webhook adds; "
            f"target at most {TARGET}x: {'met' if met else 'NOT met'}")


def describe_run(argv: Sequence[str]) -> str:
    commit = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h"], capture_output=True, text=True)
    command = " ".join(["python3 -m bench e2e", *argv])
    return f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit.stdout.strip() or '?'}, `{command}`"


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, Plan]:
    parser = argparse.ArgumentParser(prog="python3 -m bench e2e", allow_abbrev=False,
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10, help="rounds of every way at every concurrency (default 10)")
    parser.add_argument("--seconds", type=float, default=3.0, help="measured seconds of each window (default 3)")
    parser.add_argument("--warmup", type=float, default=0.5, help="seconds before each window (default 0.5)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8], help="clients (default 1 8)")
    parser.add_argument("--generators", type=int, default=2, help="load generator processes (default 2)")
    parser.add_argument("--smoke", action="store_true",
                        help="one round, windows of a few requests: the numbers mean nothing (the test suite runs it)")
    args = parser.parse_args(argv)
    if args.smoke:
        return args, Plan(rounds=1, seconds=0.02, warmup=0.01, concurrency=(1, 2), at_least_one=True, lead=0.02)
    return args, Plan(args.rounds, args.seconds, args.warmup, tuple(args.concurrency))


def main(argv: Sequence[str]) -> int:
    args, plan = parse(argv)
    bin_dir = assets()
    if bin_dir is None:
        print(f"python3 -m bench e2e needs a real control plane: set {ASSETS_VARIABLE} to a folder holding "
              f"{', '.join(BINARIES)} v1.36 (see docs/development.md)", file=sys.stderr)
        return 2

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    header = describe_run(argv)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-e2e-") as folder:
        bench = EndToEnd(plan, Path(folder), bin_dir, args.generators, log)
        try:
            measurements = bench.run(bench.start())
        finally:
            bench.close()
    print(f"{header}; load average before {load_before[0]:.2f} / {load_before[1]:.2f} / {load_before[2]:.2f} "
          f"(1, 5, 15 min)\n")
    print(render(measurements, plan, bench.policies.refused))
    return 0
