"""What a measurement says (throughput, latency percentiles, CPU), and the report's tables."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.load import Result


@dataclass(frozen=True)
class Stats:
    requests: int
    throughput: float  # requests per second
    p50_ms: float
    p95_ms: float
    p99_ms: float
    errors: int
    server_cpu_ms: float  # server CPU time (all its processes) per request
    client_cpu: float  # busiest load generator process: CPU seconds per second of the window
    # Requests other than watches (lists, gets) the API server answered during the load phase:
    # what a request that called the API server would show up as.
    api_reads: int | None = None

    @classmethod
    def of(cls, result: Result, server_cpu_seconds: float, api_reads: int | None = None) -> Stats:
        latencies = sorted(result.latencies)
        count = len(latencies)
        window = result.window or 1.0
        return cls(
            requests=count,
            throughput=count / window,
            p50_ms=_percentile(latencies, 50) * 1000,
            p95_ms=_percentile(latencies, 95) * 1000,
            p99_ms=_percentile(latencies, 99) * 1000,
            errors=result.errors,
            server_cpu_ms=server_cpu_seconds / count * 1000 if count else math.nan,
            client_cpu=result.cpu_seconds / window,
            api_reads=api_reads,
        )


def _percentile(ordered: Sequence[float], percent: float) -> float:
    """Nearest rank: the smallest value that ``percent`` % of the values do not exceed."""
    if not ordered:
        return math.nan
    rank = max(1, math.ceil(percent / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Comparison:
    """Ours next to the floor, measured back to back with the same payloads and clients."""

    endpoint: str
    payload: str
    concurrency: int
    ours: Stats
    floor: Stats
    note: str = ""  # what the webhook answered (allowed, warnings, patch size, ...)
    # Each pair of windows' own ratios (see ``Bench.compare``); the ratios above pool them all.
    pair_ratios: tuple[float, ...] = ()
    pair_p99_ratios: tuple[float, ...] = ()
    # ``bench run --baseline-tree``: another revision's server, in the same pairs of windows
    # against the same floor; its ratios to the floor, pooled and per pair, as ours.
    baseline: Stats | None = None
    baseline_note: str = ""
    baseline_pair_ratios: tuple[float, ...] = ()
    baseline_pair_p99_ratios: tuple[float, ...] = ()
    # and to its own floor (that tree's server stack), the ratio its own run would report
    baseline_floor: Stats | None = None
    baseline_own_pair_ratios: tuple[float, ...] = ()

    @property
    def throughput_ratio(self) -> float:
        return _ratio(self.ours.throughput, self.floor.throughput)

    @property
    def p99_ratio(self) -> float:
        return _ratio(self.ours.p99_ms, self.floor.p99_ms)

    @property
    def baseline_throughput_ratio(self) -> float:
        return _ratio(self.baseline.throughput, self.floor.throughput) if self.baseline else math.nan

    @property
    def baseline_p99_ratio(self) -> float:
        return _ratio(self.baseline.p99_ms, self.floor.p99_ms) if self.baseline else math.nan

    @property
    def baseline_own_ratio(self) -> float:
        return _ratio(self.baseline.throughput, self.baseline_floor.throughput) \
            if self.baseline and self.baseline_floor else math.nan

    def to_dict(self) -> dict[str, Any]:
        ratios = {"throughput_ratio": self.throughput_ratio, "p99_ratio": self.p99_ratio}
        if self.baseline is not None:
            ratios.update(baseline_throughput_ratio=self.baseline_throughput_ratio,
                          baseline_p99_ratio=self.baseline_p99_ratio, baseline_own_ratio=self.baseline_own_ratio)
        return {**asdict(self), **ratios}


def _ratio(part: float, whole: float) -> float:
    return part / whole if whole else math.nan


@dataclass
class Report:
    machine: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    main: list[Comparison] = field(default_factory=list)
    payloads: list[Comparison] = field(default_factory=list)
    namespaces: list[dict[str, Any]] = field(default_factory=list)
    worker_counts: list[dict[str, Any]] = field(default_factory=list)
    rules: list[dict[str, Any]] = field(default_factory=list)
    layouts: list[dict[str, Any]] = field(default_factory=list)
    replica: dict[str, Any] = field(default_factory=dict)  # memory, watches, API calls of the main server

    def to_dict(self) -> dict[str, Any]:
        return {
            "machine": self.machine, "settings": self.settings,
            "main": [c.to_dict() for c in self.main], "payloads": [c.to_dict() for c in self.payloads],
            "namespaces": self.namespaces, "worker_counts": self.worker_counts, "rules": self.rules,
            "layouts": self.layouts, "replica": self.replica,
        }


# --- rendering ----------------------------------------------------------------------------

def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(value: Any) -> str:
        if isinstance(value, float):
            if math.isnan(value):
                return "n/a"
            return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"
        return str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _comparisons(comparisons: Sequence[Comparison]) -> str:
    header = ["endpoint", "payload", "conc.", "req/s", "floor req/s", "ratio", "ratio per pair", "p50 ms", "p95 ms",
              "p99 ms", "floor p50", "floor p99", "p99 ratio", "p99 ratio per pair", "CPU ms/req", "floor CPU ms/req",
              "client CPU"]
    rows = [[c.endpoint, c.payload, c.concurrency, c.ours.throughput, c.floor.throughput, c.throughput_ratio,
             _spread(c.pair_ratios), c.ours.p50_ms, c.ours.p95_ms, c.ours.p99_ms, c.floor.p50_ms, c.floor.p99_ms,
             c.p99_ratio, _spread(c.pair_p99_ratios), c.ours.server_cpu_ms, c.floor.server_cpu_ms,
             f"{max(c.ours.client_cpu, c.floor.client_cpu):.0%}"]
            for c in comparisons]
    return _table(header, rows)


def _baselines(comparisons: Sequence[Comparison]) -> str:
    """Ours and the baseline, each as a ratio to the floor of the same pairs of windows."""
    header = ["endpoint", "payload", "conc.", "floor req/s", "ratio", "ratio per pair", "baseline ratio",
              "baseline ratio per pair", "p99 ratio", "baseline p99 ratio", "CPU ms/req", "baseline CPU ms/req",
              "its floor req/s", "baseline / its floor", "per pair", "floor CPU ms/req", "its floor CPU ms/req"]
    nothing = math.nan
    rows = [[c.endpoint, c.payload, c.concurrency, c.floor.throughput, c.throughput_ratio, _spread(c.pair_ratios),
             c.baseline_throughput_ratio, _spread(c.baseline_pair_ratios), c.p99_ratio, c.baseline_p99_ratio,
             c.ours.server_cpu_ms, c.baseline.server_cpu_ms if c.baseline else nothing,
             c.baseline_floor.throughput if c.baseline_floor else nothing, c.baseline_own_ratio,
             _spread(c.baseline_own_pair_ratios), c.floor.server_cpu_ms,
             c.baseline_floor.server_cpu_ms if c.baseline_floor else nothing]
            for c in comparisons]
    return _table(header, rows)


def _spread(ratios: Sequence[float]) -> str:
    """The lowest and highest of the pairs' ratios: how far apart single windows land."""
    if not ratios:
        return "n/a"
    return f"{min(ratios):.2f} to {max(ratios):.2f}" if len(ratios) > 1 else f"{ratios[0]:.2f}"


def _growth(rows: Sequence[dict[str, Any]], label: str, extra: Sequence[tuple[str, str]] = ()) -> str:
    header = [label, "req/s", "p50 ms", "p95 ms", "p99 ms", "CPU ms/req", *(title for title, _ in extra)]
    body = [[r["label"], r["stats"]["throughput"], r["stats"]["p50_ms"], r["stats"]["p95_ms"], r["stats"]["p99_ms"],
             r["stats"]["server_cpu_ms"], *(r.get(key, "") for _, key in extra)] for r in rows]
    return _table(header, body)


def render(report: Report) -> str:
    out = []
    m = report.machine
    out.append(f"machine: {m.get('cpus')} CPUs ({m.get('cpu_model')}), Python {m.get('python')}, "
               f"load average {m.get('load_before')} before, {m.get('load_after')} after")
    s = report.settings
    out.append(f"server: {s.get('layout')}, pinned to CPUs {s.get('server_cpus')}; "
               f"{s.get('generators')} load generator process(es) on CPUs {s.get('client_cpus')}; "
               f"{s.get('seconds')} s per measurement after {s.get('warmup')} s warm-up, "
               f"{s.get('pairs')} pairs of floor and ours measurements per comparison; "
               f"{s.get('namespaces')} namespaces cached")
    if report.main:
        out.append("\n## ours vs the floor (same gunicorn, TLS, Flask; the uid answered, no policy work)\n")
        out.append(_comparisons(report.main))
        if any(c.baseline for c in report.main):
            out.append(f"\n## ours vs the baseline ({s.get('baseline')}): each against our floor, "
                       f"and the baseline against its own\n")
            out.append(_baselines(report.main))
    if report.payloads:
        out.append("\n## per payload\n")
        out.append(_comparisons(report.payloads))
    if report.namespaces:
        out.append("\n## latency vs cached namespaces (/validate)\n")
        out.append(_growth(report.namespaces, "namespaces",
                           (("caches synced s", "sync_seconds"), ("RSS MiB / worker", "rss_mib"),
                            ("watches / replica", "watches"))))
    if report.worker_counts:
        out.append("\n## latency vs MPIJob worker count (/validate)\n")
        out.append(_growth(report.worker_counts, "workers"))
    if report.rules:
        out.append("\n## latency vs enabled rules (/validate)\n")
        out.append(_growth(report.rules, "rules"))
    if report.layouts:
        out.append("\n## process / thread layout (/validate)\n")
        out.append(_growth(report.layouts, "workers x threads",
                           (("c=32 req/s", "c32_throughput"), ("c=32 p99 ms", "c32_p99_ms"),
                            ("RSS MiB / worker", "rss_mib"), ("watches / replica", "watches"))))
    if report.replica:
        r = report.replica
        out.append(f"\none replica ({r.get('layout')}, {r.get('namespaces')} namespaces): worker RSS "
                   f"{r.get('rss_mib')} MiB (PSS {r.get('pss_mib')} MiB); {r.get('watches')} watch connections "
                   f"to the API server; during {r.get('load_phases')} load phases the API server answered "
                   f"{r.get('api_reads_during_load')} lists or gets and {r.get('watches_during_load')} watch "
                   f"requests (watches end after 4 to 6 minutes and are renewed)")
    return "\n".join(out)
