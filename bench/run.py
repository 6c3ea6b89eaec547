"""The benchmark: ``mpijob-webhook serve`` (gunicorn, TLS, the example policy file, watch caches of
an in-test API server holding 10,000 namespaces) against the floor (the same server stack doing
no policy work: it answers with the request's uid), under load from separate processes over
kept-alive HTTPS connections.

    python3 -m bench run                  # the full run (about 15 minutes), tables on stdout
    python3 -m bench run --quick          # a smoke run of every table (under a minute)
    python3 -m bench run --json out.json  # also keep every number

By default the server processes share one CPU (the Deployment's CPU limit is one core) and the
load generator gets the others, so neither steals from the other and ratios compare like with
like; ``--no-pin`` lets the scheduler place everything.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from bench import payloads as bodies
from bench.cluster import Cluster, Counts
from bench.load import Generators, Result
from bench.payloads import Payload
from bench.report import Comparison, Report, Stats, render
from bench.servers import ServerProcess
from certs import authority
from policies import registry
from webhook.bootstrap import ServeOptions
from webhook.watch_caches import KINDS

ROOT = Path(__file__).resolve().parent.parent
POLICY_FILE = ROOT / "examples" / "policy.yaml"
CONCURRENCY = (1, 8, 32)
IDLE_LOAD = 1.0
TABLES = ("main", "payloads", "namespaces", "workers", "rules", "layouts")


@dataclass(frozen=True)
class Plan:
    seconds: float
    warmup: float
    namespaces: tuple[int, ...]  # the last one is the main run's cluster
    worker_counts: tuple[int, ...]
    rule_counts: tuple[int, ...]
    layouts: tuple[tuple[int, int], ...]
    payloads_per_endpoint: int | None  # in the per-payload table; None: all
    pairs: int = 3  # windows of the floor and of ours per comparison, in alternating order
    concurrency: tuple[int, ...] = CONCURRENCY  # of the main table
    row_concurrency: int = 8  # of every other table's rows (the layouts' second column is at 32)
    at_least_one: bool = False  # every client measures a request, even past the window (bench.load.Job)
    # Start the floor and every server of ours side by side, unpinned, and pin them once they are
    # ready: starting them takes every CPU (timings of start-up mean nothing then).
    servers_at_once: bool = False
    settle_seconds: float = 1.0  # how long the API server's counts must stay still after servers start
    lead: float = 0.1  # seconds between handing out a window's jobs and the window's start (bench.load)


# The rules table's last row, every rule, is what the main server serves: measured on it.
EVERY_RULE = len(registry.RULES)
FULL = Plan(seconds=5.0, warmup=1.0, namespaces=(1, 1_000, 10_000), worker_counts=(2, 100),
            rule_counts=(0, 10, EVERY_RULE), layouts=((1, 4), (1, 8), (1, 16), (2, 4), (2, 8)), payloads_per_endpoint=None)
# Every table, with the fewest rows that keep each code path working.
QUICK = Plan(seconds=0.2, warmup=0.15, namespaces=(1, 20), worker_counts=(2, 100), rule_counts=(0, EVERY_RULE),
             layouts=(), payloads_per_endpoint=1, pairs=2)
# The test suite's: every table once, in seconds, with two servers of ours (the main one and the
# one with no rules) and one cluster, whose size is the only namespaces row; the waits around
# start-up and windows cut short (a window of 0.02 s: every client measures one request at least),
# two clients per window rather than 8 (each window opens fewer connections and waits for fewer
# first requests). The numbers mean nothing.
SMOKE = Plan(seconds=0.02, warmup=0.01, namespaces=(5,), worker_counts=(2, 100), rule_counts=(0, EVERY_RULE),
             layouts=(), payloads_per_endpoint=1, pairs=1, concurrency=(2,), row_concurrency=2, at_least_one=True,
             servers_at_once=True, settle_seconds=0.1, lead=0.01)


def describe_tree(tree: Path) -> str:
    """The tree's path, and its commit when it is a git checkout."""
    done = subprocess.run(["git", "-C", str(tree), "log", "-1", "--format=%h %cs"], capture_output=True, text=True)
    return f"{tree} at {done.stdout.strip()}" if done.returncode == 0 and done.stdout.strip() else str(tree)


def machine() -> dict[str, Any]:
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return {"cpus": os.cpu_count(), "cpu_model": model, "python": platform.python_version(),
            "platform": platform.platform(), "load_before": round(os.getloadavg()[0], 2)}


def wait_for_idle(minutes: float) -> tuple[float, float]:
    """Waits (a minute at a time) until the 1-minute load average is below IDLE_LOAD; the load
    average seen last and the minutes waited."""
    started = time.monotonic()
    load = os.getloadavg()[0]
    while load > IDLE_LOAD and time.monotonic() - started < minutes * 60:
        print(f"load average {load:.2f} > {IDLE_LOAD}: waiting a minute for other work to finish", flush=True)
        time.sleep(60)
        load = os.getloadavg()[0]
    return load, (time.monotonic() - started) / 60


class Bench:
    def __init__(self, plan: Plan, workdir: Path, *, workers: int, threads: int, pin: bool,
                 generators: int | None, log: Callable[[str], None], baseline_tree: Path | None = None) -> None:
        self.plan = plan
        self.baseline_tree = baseline_tree
        self.workdir = workdir
        self.workers, self.threads = workers, threads
        self.log = log
        cpus = sorted(os.sched_getaffinity(0))
        if pin and len(cpus) >= 2:
            self.server_cpus: set[int] | None = {cpus[0]}
            self.client_cpus: set[int] | None = set(cpus[1:])
        else:
            self.server_cpus = self.client_cpus = None
        count = generators or max(1, len(self.client_cpus or cpus) if pin else len(cpus) // 2)
        self.generators = Generators(count, self.client_cpus)
        self.tls = authority.dev_bundle(workdir)
        self.api_reads = 0
        self.api_watches = 0
        self.load_phases = 0

    def close(self) -> None:
        self.generators.close()

    # --- servers ------------------------------------------------------------------------------
    def _tls_args(self) -> list[str]:
        return ["--cert-file", str(self.tls.cert_file), "--key-file", str(self.tls.key_file)]

    def floor(self) -> ServerProcess:
        return ServerProcess("floor", ["bench.floor", *self._tls_args(), "--workers", str(self.workers),
                                       "--threads", str(self.threads)], self.workdir, self.tls.ca_file,
                             self.server_cpus)

    def ours(self, cluster: Cluster, *, name: str = "serve", rules: int | None = None,
             workers: int | None = None, threads: int | None = None) -> ServerProcess:
        command = ["webhook", "serve"] if rules is None else ["bench.fewer_rules", str(rules)]
        return ServerProcess(name, [
            *command, *self._tls_args(), "--policy-file", str(POLICY_FILE), "--kubeconfig", str(cluster.kubeconfig),
            "--workers", str(workers or self.workers), "--threads", str(threads or self.threads),
        ], self.workdir, self.tls.ca_file, self.server_cpus)

    def baseline(self, cluster: Cluster) -> Baseline:
        """Another checkout's ``serve`` and floor, started as that tree starts them: its own
        modules, its own example policy, and ``--health-port`` only if its serve has the flag."""
        tree = self.baseline_tree
        assert tree is not None
        health_port = serves_health_port(tree)
        layout = ["--workers", str(self.workers), "--threads", str(self.threads)]
        server = ServerProcess("baseline", [
            "webhook", "serve", *self._tls_args(), "--policy-file", str(tree / "examples" / "policy.yaml"),
            "--kubeconfig", str(cluster.kubeconfig), *layout,
        ], self.workdir, self.tls.ca_file, self.server_cpus, tree=tree, health_port=health_port)
        floor = ServerProcess("baseline-floor", ["bench.floor", *self._tls_args(), *layout], self.workdir,
                              self.tls.ca_file, self.server_cpus, tree=tree, health_port=health_port)
        return Baseline(server, floor)

    def cluster(self, namespaces: int) -> Cluster:
        return Cluster(namespaces, self.workdir / f"kubeconfig-{namespaces}", self.client_cpus)

    @staticmethod
    def settle(cluster: Cluster, before: Counts, seconds: float, timeout: float = 60.0, *, at_least: int = 0) -> int:
        """Waits until a server started after ``before`` has opened all its watches (/readyz is
        ready once every kind is listed; each watch starts just after): the watches it opened,
        once the API server's counts have stayed still for ``seconds``. ``at_least``: the watches
        the servers are known to open, waited for first (the still time then only has to show
        that no more come). Counted as requests, not as open streams: the API server notices a
        stopped server's streams only when it next writes to them."""
        deadline = time.monotonic() + timeout
        last, since = cluster.counts(), time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.05)
            now = cluster.counts()
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= seconds and last.watches - before.watches >= at_least:
                break
        return last.watches - before.watches

    # --- measuring ----------------------------------------------------------------------------
    def measure(self, server: ServerProcess, load: list[Payload], concurrency: int,
                cluster: Cluster | None = None) -> Stats:
        return Stats.of(*self._window(server, load, concurrency, cluster))

    def _window(self, server: ServerProcess, load: list[Payload], concurrency: int,
                cluster: Cluster | None) -> tuple[Result, float, int | None]:
        """One measured window: what the clients saw, the server's CPU seconds, and the reads
        the API server answered meanwhile (when ``cluster`` is given)."""
        before = cluster.counts() if cluster else None
        result, cpu = self.generators.run(server.port, str(server.ca_file), [(p.path, p.body) for p in load],
                                          concurrency, self.plan.seconds, self.plan.warmup, server.cpu_seconds,
                                          self.plan.at_least_one, self.plan.lead)
        api_reads = None
        if cluster and before:
            after = cluster.counts()
            api_reads = after.lists - before.lists
            self.api_reads += api_reads
            self.api_watches += after.watches - before.watches
            self.load_phases += 1
        if result.errors:
            raise RuntimeError(f"{server.name}: {result.errors} failed requests, first: {result.first_error}\n"
                               f"{server.output()[-3000:]}")
        return result, cpu, api_reads

    def compare(self, ours: ServerProcess, floor: ServerProcess, cluster: Cluster, endpoint: str,
                payload: str, load: list[Payload], concurrency: int,
                baseline: Baseline | None = None) -> Comparison:
        """The floor and ours (and the baseline and its floor, if given) in ``plan.pairs`` pairs of windows,
        back to back, the order alternating (``turns``), so that a change in the machine's speed
        during the comparison hits every side alike. Each side's windows are pooled (all their
        latencies, all their requests over all their seconds); each pair's own ratios are kept,
        to show how far one window can be trusted."""
        sides = [("floor", floor, None), ("ours", ours, cluster),
                 *([("baseline", baseline.server, None), ("baseline floor", baseline.floor, None)] if baseline else [])]
        windows: dict[str, list[tuple[Result, float, int | None]]] = {side: [] for side, _, _ in sides}
        for pair in range(self.plan.pairs):
            for side, server, counted in turns(pair, sides):
                windows[side].append(self._window(server, load, concurrency, counted))

        def per_pair(side: str, floor_side: str = "floor") -> tuple[Comparison, ...]:
            return tuple(Comparison(endpoint, payload, concurrency, Stats.of(*mine), Stats.of(*theirs))
                         for mine, theirs in zip(windows[side], windows[floor_side]))

        pairs = per_pair("ours")
        comparison = Comparison(endpoint, payload, concurrency, pooled(windows["ours"]), pooled(windows["floor"]),
                                describe(ours, load), pair_ratios=tuple(p.throughput_ratio for p in pairs),
                                pair_p99_ratios=tuple(p.p99_ratio for p in pairs))
        ours_stats, floor_stats = comparison.ours, comparison.floor
        line = (f"{endpoint:9} {payload:28} c={concurrency:<2} {ours_stats.throughput:7.0f} req/s "
                f"(floor {floor_stats.throughput:6.0f}, {comparison.throughput_ratio:4.0%}); p99 "
                f"{ours_stats.p99_ms:6.2f} ms (floor {floor_stats.p99_ms:6.2f}, {comparison.p99_ratio:4.2f}x); "
                f"pairs {' '.join(f'{r:.0%}' for r in comparison.pair_ratios)}")
        if baseline is not None:
            theirs, own = per_pair("baseline"), per_pair("baseline", "baseline floor")
            comparison.baseline, comparison.baseline_note = pooled(windows["baseline"]), describe(baseline.server, load)
            comparison.baseline_floor = pooled(windows["baseline floor"])
            comparison.baseline_pair_ratios = tuple(p.throughput_ratio for p in theirs)
            comparison.baseline_pair_p99_ratios = tuple(p.p99_ratio for p in theirs)
            comparison.baseline_own_pair_ratios = tuple(p.throughput_ratio for p in own)
            line += (f"; baseline {comparison.baseline_throughput_ratio:4.0%}, p99 "
                     f"{comparison.baseline_p99_ratio:4.2f}x, pairs "
                     f"{' '.join(f'{r:.0%}' for r in comparison.baseline_pair_ratios)}; to its own floor "
                     f"{comparison.baseline_own_ratio:4.0%}")
        self.log(line)
        return comparison


@dataclass(frozen=True)
class Baseline:
    """``--baseline-tree``: that tree's server, and its own floor (its server stack may differ
    from ours: the ratio it reported then is to its floor)."""

    server: ServerProcess
    floor: ServerProcess


_Side = TypeVar("_Side")


def turns(pair: int, sides: Sequence[_Side]) -> list[_Side]:
    """The order of one pair's windows: as given in even pairs, reversed in odd ones, so that over
    two pairs every side is measured as often before as after each other side."""
    return list(sides) if pair % 2 == 0 else list(sides)[::-1]


def serves_health_port(tree: Path) -> bool:
    """Whether the ``serve`` of the source tree at ``tree`` has ``--health-port`` (older ones
    answer /readyz on the TLS port only), asked of that tree's own command line."""
    done = subprocess.run([sys.executable, "-m", "webhook", "serve", "--help"], cwd=tree, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(tree)})
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: python3 -m webhook serve --help failed:\n{done.stderr[-2000:]}")
    return "--health-port" in done.stdout


def pooled(windows: list[tuple[Result, float, int | None]]) -> Stats:
    """One side's windows as one measurement: every latency, every request over every second."""
    total = Result()
    cpu, reads = 0.0, None
    for result, server_cpu, api_reads in windows:
        total.latencies += result.latencies
        total.errors += result.errors
        total.cpu_seconds += result.cpu_seconds
        total.window += result.window
        cpu += server_cpu
        if api_reads is not None:
            reads = (reads or 0) + api_reads
    return Stats.of(total, cpu, reads)


_DESCRIPTIONS: dict[tuple[int, bytes], str] = {}


def describe(server: ServerProcess, load: list[Payload]) -> str:
    """What the server answers to each payload, checked once: a broken answer stops the run.
    The payloads not checked yet are sent over one kept-alive connection, closed again after."""
    notes = set()
    connection: http.client.HTTPSConnection | None = None
    try:
        for payload in load:
            key = (server.port, payload.body)
            if key not in _DESCRIPTIONS:
                if connection is None:
                    connection = http.client.HTTPSConnection(
                        "127.0.0.1", server.port, timeout=30, context=ssl.create_default_context(cafile=str(server.ca_file)))
                _DESCRIPTIONS[key] = _answer(server, payload, connection)
            notes.add(_DESCRIPTIONS[key])
    finally:
        if connection is not None:
            connection.close()
    return "; ".join(sorted(notes))


def _answer(server: ServerProcess, payload: Payload, connection: http.client.HTTPSConnection) -> str:
    connection.request("POST", payload.path, payload.body, {"Content-Type": "application/json"})
    reply = connection.getresponse()
    status, body = reply.status, reply.read()
    sent = json.loads(payload.body)
    answer = json.loads(body) if status == 200 else {}
    response = answer.get("response") or {}
    if status != 200 or response.get("uid") != sent["request"]["uid"]:
        raise RuntimeError(f"{server.name} answered {payload.name} with HTTP {status}: {body[:500]!r}")
    if payload.path == "/convert":
        converted = response.get("convertedObjects") or []
        if response.get("result", {}).get("status") != "Success" or len(converted) != payload.objects:
            raise RuntimeError(f"{server.name} did not convert {payload.name}: {response.get('result')}")
        return "converted"
    if not response.get("allowed"):
        raise RuntimeError(f"{server.name} refused {payload.name}: {response.get('status', {}).get('message')}")
    patch = f", patched ({len(response['patch'])} base64 chars)" if response.get("patch") else ""
    return f"allowed, {len(response.get('warnings') or ())} warnings{patch}"


def worker_memory(server: ServerProcess) -> tuple[float, float]:
    """The largest RSS and PSS of the server's worker processes, MiB."""
    memory = server.worker_memory()
    return max(m.rss_mib for m in memory), max(m.pss_mib for m in memory)


def run(plan: Plan, bench: Bench, report: Report, tables: Collection[str] = TABLES) -> None:
    namespaces = plan.namespaces[-1]
    with ExitStack() as stack:
        servers: list[ServerProcess] = []
        # Every server started is stopped, side by side, however the run ends.
        stack.callback(stop_all, servers)
        floor = bench.floor()
        # The smoke plan starts the floor at once (it needs no cluster) and waits for it with the
        # servers of ours; otherwise it is ready before anything else starts.
        servers.append(floor.spawn(pinned=False) if plan.servers_at_once else floor.start())
        started = time.monotonic()
        cluster = stack.enter_context(bench.cluster(namespaces))
        bench.log(f"API server up with {namespaces} namespaces in {time.monotonic() - started:.1f} s")
        # The smoke plan starts the servers of the rules table with the main one: no load phase
        # runs while they list the cluster.
        variants = {count: bench.ours(cluster, name=f"rules-{count}", rules=count)
                    for count in (plan.rule_counts if plan.servers_at_once and "rules" in tables else ())
                    if count < len(registry.RULES)}
        started, before = time.monotonic(), cluster.counts()
        ours = bench.ours(cluster)
        spawned = [ours, *variants.values()]
        servers += [server.spawn(pinned=not plan.servers_at_once) for server in spawned]
        ours.wait_until_ready()
        sync_seconds = time.monotonic() - started
        for server in [*spawned, *([floor] if plan.servers_at_once else [])]:
            server.wait_until_ready()
            server.pin()
        # The watches one replica opens: every server of ours started here opens the same kinds,
        # one watch per kind per worker (the benchmark cluster serves every kind).
        opened = bench.settle(cluster, before, plan.settle_seconds, at_least=len(KINDS) * bench.workers * len(spawned))
        watches = opened // len(spawned)
        bench.log(f"serve ready (caches synced) in {sync_seconds:.1f} s")
        target = cluster.target

        loads = {
            "/validate": ("upstream examples", bodies.admission_payloads("/validate", target)),
            "/mutate": ("upstream examples", bodies.admission_payloads("/mutate", target)),
            "/convert": ("single-object reviews", bodies.single_conversions(target)),
        }
        upstream = {endpoint: [p for p in load if p.name != "large-job"] for endpoint, (_, load) in loads.items()}
        baseline = None
        if bench.baseline_tree is not None and "main" in tables:
            baseline = bench.baseline(cluster)
            servers += [baseline.server.spawn(), baseline.floor.spawn()]
            for server in (baseline.server, baseline.floor):
                server.wait_until_ready()
            bench.log(f"baseline ({bench.baseline_tree}) and its floor ready")
        for endpoint, (label, _) in loads.items() if "main" in tables else ():
            for concurrency in plan.concurrency:
                report.main.append(bench.compare(ours, floor, cluster, endpoint, label, upstream[endpoint], concurrency,
                                                 baseline))

        if "payloads" in tables:
            for endpoint in ("/validate", "/mutate"):
                # the upstream examples, TrainJobs on MPI runtimes, then the large job
                examples = loads[endpoint][1]
                every = examples[:-1] + bodies.trainjob_payloads(endpoint, target) + examples[-1:]
                chosen = every if plan.payloads_per_endpoint is None else every[-plan.payloads_per_endpoint:]
                for payload in chosen:
                    report.payloads.append(bench.compare(ours, floor, cluster, endpoint, payload.name, [payload],
                                                         plan.row_concurrency))
            relist = bodies.relist_conversion(target)
            report.payloads.append(bench.compare(ours, floor, cluster, "/convert", relist.name, [relist],
                                                 plan.row_concurrency))

        worker_counts = plan.worker_counts if "workers" in tables else ()
        for payload in bodies.worker_count_payloads(target, worker_counts):
            describe(ours, [payload])
            stats = bench.measure(ours, [payload], plan.row_concurrency, cluster)
            report.worker_counts.append({"label": payload.name, "stats": asdict(stats)})

        rss, pss = worker_memory(ours)
        report.replica = {"layout": f"{bench.workers} workers x {bench.threads} threads", "namespaces": namespaces,
                          "rss_mib": round(rss, 1), "pss_mib": round(pss, 1), "watches": watches}
        main_load = upstream["/validate"]
        if "namespaces" in tables:
            report.namespaces.append(namespace_row(bench, ours, cluster, main_load, namespaces, sync_seconds, watches))

        for count in plan.rule_counts if "rules" in tables else ():
            if count >= len(registry.RULES):  # every rule: what the main server serves already
                describe(ours, main_load)
                stats = bench.measure(ours, main_load, plan.row_concurrency, cluster)
                report.rules.append({"label": str(count), "stats": asdict(stats)})
                bench.log(f"{count} rules: {stats.throughput:.0f} req/s, p99 {stats.p99_ms:.2f} ms")
                continue
            if count in variants:
                describe(variants[count], main_load)
                stats = bench.measure(variants[count], main_load, plan.row_concurrency, cluster)
                report.rules.append({"label": str(count), "stats": asdict(stats)})
                bench.log(f"{count} rules: {stats.throughput:.0f} req/s, p99 {stats.p99_ms:.2f} ms")
                continue
            before = cluster.counts()
            with bench.ours(cluster, name=f"rules-{count}", rules=count) as variant:
                bench.settle(cluster, before, plan.settle_seconds)
                describe(variant, main_load)
                stats = bench.measure(variant, main_load, plan.row_concurrency, cluster)
                report.rules.append({"label": str(count), "stats": asdict(stats)})
                bench.log(f"{count} rules: {stats.throughput:.0f} req/s, p99 {stats.p99_ms:.2f} ms")

        for workers, threads in plan.layouts if "layouts" in tables else ():
            before = cluster.counts()
            with bench.ours(cluster, name=f"layout-{workers}x{threads}", workers=workers, threads=threads) as variant:
                opened = bench.settle(cluster, before, plan.settle_seconds)
                describe(variant, main_load)
                c8 = bench.measure(variant, main_load, plan.row_concurrency, cluster)
                c32 = bench.measure(variant, main_load, 32, cluster)
                rss, _ = worker_memory(variant)
                report.layouts.append({"label": f"{workers} x {threads}", "stats": asdict(c8),
                                       "c32_throughput": c32.throughput, "c32_p99_ms": c32.p99_ms,
                                       "rss_mib": round(rss, 1), "watches": opened})
                bench.log(f"layout {workers}x{threads}: {c8.throughput:.0f} req/s, c=32 p99 {c32.p99_ms:.2f} ms")

    if "namespaces" in tables:
        report.namespaces[:0] = [namespaces_row(bench, size) for size in plan.namespaces[:-1]]
    report.replica.update(api_reads_during_load=bench.api_reads, watches_during_load=bench.api_watches,
                          load_phases=bench.load_phases)


def stop_all(servers: list[ServerProcess]) -> None:
    """Every server told to stop, then waited for: they stop side by side."""
    for server in servers:
        server.stop_soon()
    for server in servers:
        server.wait_stopped()


def namespaces_row(bench: Bench, size: int) -> dict[str, Any]:
    """A fresh API server with ``size`` namespaces, a fresh serve, and /validate at concurrency 8."""
    with bench.cluster(size) as cluster:
        started, before = time.monotonic(), cluster.counts()
        with bench.ours(cluster, name=f"namespaces-{size}") as ours:
            sync_seconds = time.monotonic() - started
            watches = bench.settle(cluster, before, bench.plan.settle_seconds)
            load = [p for p in bodies.admission_payloads("/validate", cluster.target) if p.name != "large-job"]
            return namespace_row(bench, ours, cluster, load, size, sync_seconds, watches)


def namespace_row(bench: Bench, ours: ServerProcess, cluster: Cluster, load: list[Payload], size: int,
                  sync_seconds: float, watches: int) -> dict[str, Any]:
    describe(ours, load)
    stats = bench.measure(ours, load, bench.plan.row_concurrency, cluster)
    rss, _ = worker_memory(ours)
    bench.log(f"{size} namespaces: {stats.throughput:.0f} req/s, p50 {stats.p50_ms:.2f} ms, p99 {stats.p99_ms:.2f} ms")
    return {"label": f"{size:,}", "stats": asdict(stats), "sync_seconds": round(sync_seconds, 1),
            "rss_mib": round(rss, 1), "watches": watches}


@contextmanager
def bench_context(plan: Plan, args: argparse.Namespace, log: Callable[[str], None]) -> Iterator[Bench]:
    with tempfile.TemporaryDirectory(prefix="mpijob-webhook-bench-") as tmp:
        workdir = Path(tmp)
        if args.logs:
            args.logs.mkdir(parents=True, exist_ok=True)
            workdir = args.logs
        bench = Bench(plan, workdir, workers=args.workers, threads=args.threads, pin=args.pin,
                      generators=args.generators, log=log, baseline_tree=args.baseline_tree)
        try:
            yield bench
        finally:
            bench.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m bench run", description=__doc__.split("\n\n")[0],
                                     allow_abbrev=False)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="a quick run: every table, small sizes, short windows")
    size.add_argument("--smoke", action="store_true", help="the test suite's: every table once, tiny sizes, "
                                                           "two clients, windows of 0.02 s (the numbers mean nothing)")
    parser.add_argument("--seconds", type=float, help="measured seconds per measurement (default 5; quick 0.2)")
    parser.add_argument("--pairs", type=int, help="pairs of floor and ours windows per comparison, in "
                                                  "alternating order (default 3; quick 2)")
    parser.add_argument("--namespaces", type=int, nargs="+", help="cluster sizes (default 1 1000 10000)")
    parser.add_argument("--workers", type=int, default=ServeOptions.workers, help="gunicorn workers (default %(default)s)")
    parser.add_argument("--threads", type=int, default=ServeOptions.threads, help="threads per worker (default %(default)s)")
    parser.add_argument("--generators", type=int, help="load generator processes (default: one per client CPU)")
    parser.add_argument("--no-pin", dest="pin", action="store_false", help="do not pin servers and clients to CPUs")
    parser.add_argument("--wait-for-idle", type=float, default=0.0, metavar="MINUTES",
                        help=f"first wait up to this long for the 1-minute load average to drop below {IDLE_LOAD}")
    parser.add_argument("--only", nargs="+", choices=TABLES, default=TABLES, metavar="TABLE",
                        help=f"run only these tables ({', '.join(TABLES)}); the replica line is always there")
    parser.add_argument("--baseline-tree", type=Path, metavar="DIR",
                        help="with --only main: also measure the server of the source tree in DIR (a checkout of "
                             "another revision, e.g. `git archive REV | tar -x -C DIR`) in the same pairs of windows "
                             "against the same floor, and print both ratios")
    parser.add_argument("--json", type=Path, help="also write every number to this file")
    parser.add_argument("--logs", type=Path, metavar="DIR", help="keep the servers' logs (and certificates) here")
    parser.add_argument("--quiet", action="store_true", help="only the tables")
    args = parser.parse_args(argv)
    plan = SMOKE if args.smoke else QUICK if args.quick else FULL
    if args.seconds:
        plan = Plan(**{**asdict(plan), "seconds": args.seconds})
    if args.pairs is not None:
        if args.pairs < 1:
            parser.error("--pairs must be at least 1")
        plan = Plan(**{**asdict(plan), "pairs": args.pairs})
    if args.namespaces:
        plan = Plan(**{**asdict(plan), "namespaces": tuple(sorted(args.namespaces))})
    if args.baseline_tree is not None:
        if list(args.only) != ["main"]:
            parser.error("--baseline-tree compares the main table only: add --only main")
        if not (args.baseline_tree / "webhook" / "commands" / "serve.py").is_file():
            parser.error(f"--baseline-tree {args.baseline_tree}: not a checkout of this project (no webhook/commands/serve.py)")
        args.baseline_tree = args.baseline_tree.resolve()

    def log(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    report = Report(machine=machine())
    if args.wait_for_idle:
        _, waited = wait_for_idle(args.wait_for_idle)
        report.machine["waited_minutes"] = round(waited, 1)
    report.machine["load_before"] = round(os.getloadavg()[0], 2)
    with bench_context(plan, args, log) as bench:
        report.settings = {"layout": f"{bench.workers} workers x {bench.threads} threads",
                           "server_cpus": sorted(bench.server_cpus) if bench.server_cpus else "any",
                           "client_cpus": sorted(bench.client_cpus) if bench.client_cpus else "any",
                           "generators": bench.generators.count, "seconds": plan.seconds, "warmup": plan.warmup,
                           "pairs": plan.pairs,
                           "namespaces": plan.namespaces[-1], "policy": str(POLICY_FILE.relative_to(ROOT)),
                           **({"baseline": describe_tree(args.baseline_tree)} if args.baseline_tree else {})}
        run(plan, bench, report, args.only)
    report.machine["load_after"] = round(os.getloadavg()[0], 2)
    print(render(report), flush=True)
    if args.json:
        args.json.write_text(json.dumps(report.to_dict(), indent=1))
    return 0
