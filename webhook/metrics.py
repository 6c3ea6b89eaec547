"""Prometheus metrics, served on ``GET /metrics``, correct across gunicorn worker processes.

``serve`` calls ``prepare_multiprocess_dir`` before gunicorn forks its workers: every process
then writes its samples to files in ``PROMETHEUS_MULTIPROC_DIR`` and a scrape of any worker
adds them all up. prometheus_client picks its storage when it is first imported, so this module
imports it only on first use (see ``_metrics``), never at import time.

The per-request hooks (``observe_decision``, ``record_conversion``, ``record_bad_request``) only
append a small tuple to an in-process queue: a prometheus_client update takes a lock and, in
multiprocess mode, writes a file, for every label set on every request. A daemon thread
(``webhook.flushing``) adds the queue up and writes it to the metrics once a second
(``FLUSH_SECONDS``); a scrape flushes this worker first, and a worker flushes as it exits. So a
scrape is exact for the worker that answers it, and the other workers' requests show up to
``FLUSH_SECONDS`` late. A request that finds ``MAX_PENDING`` tallies waiting flushes them itself,
so the queue stays bounded whatever happens to the thread. Gauges (cache sync, policy reload,
certificate) are set directly: they change rarely.

Hooks for the other parts of the server (all cheap, safe from any thread):

- ``observe_decision(decision)``: an ``Admission`` observer (requests, latency, findings).
- ``record_conversion(from_version, to_version, result)``: one converted object of a
  ConversionReview; ``result`` is ``"success"`` or ``"failed"``.
- ``record_escaped_audit_line()``: an audit line had to be escaped to be written (``webhook.audit``).
- ``record_cache_sync(cache, when=None)``: a cluster-state cache (``"nodes"``,
  ``"resourcequotas"``, …) is in sync with the API server as of ``when`` (default: now); call it
  after every successful list and on every watch event or bookmark. ``/metrics`` reports the age.
- ``record_policy_reload(result, ...)``: the policy file was read (see ``webhook.policy_reload``).
- ``set_certificate_expiry(cert_file)``: the serving certificate's notAfter.
"""
from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from policies.engine import Outcome
from webhook.admission import Decision
from webhook.flushing import PeriodicFlush

PREFIX = "mpijob_webhook"
# Gatekeeper's buckets: 1 ms to 10 s.
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_DURATION_BOUNDS = (*DURATION_BUCKETS, float("inf"))  # the histogram's buckets, +Inf included
FLUSH_SECONDS = 1.0
# Tallies a worker holds at most: the request that reaches it flushes them itself, so memory
# stays bounded even if the flush thread ever stopped (about a second of a busy replica's load
# is a few thousand).
MAX_PENDING = 20_000
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONVERSION_RESULTS = ("success", "failed")
RELOAD_RESULTS = ("success", "invalid", "missing")
# The (endpoint, operation) pairs the webhook configurations send (manifests/base/webhooks.yaml),
# and every decision label: each series exists from the first scrape (see _zero_known_series).
ADMISSION_CALLS = (("validate", "CREATE"), ("validate", "UPDATE"), ("mutate", "CREATE"))
DECISIONS = ("allowed", "denied", "error")
BAD_REQUEST_ENDPOINTS = ("validate", "mutate", "convert")


class _Children:
    """A labelled metric's child for each tuple of label values. ``labels()`` checks the values
    and takes a lock on every call; a child, once made, never changes, so it is looked up once."""

    def __init__(self, metric: Any) -> None:
        self._metric = metric
        self._children: dict[tuple[str, ...], Any] = {}

    def __call__(self, *values: str) -> Any:
        child = self._children.get(values)
        if child is None:  # two threads may both ask: labels() gives both the same child
            child = self._children[values] = self._metric.labels(*values)
        return child


class _Metrics:
    def __init__(self) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        self.requests = _Children(Counter(
            f"{PREFIX}_requests_total", "Admission requests answered, by endpoint, operation, decision and dry run.",
            ["endpoint", "operation", "decision", "dry_run"]))
        self.duration = _Children(Histogram(
            f"{PREFIX}_request_duration_seconds", "Time to decide one admission request.",
            ["endpoint"], buckets=DURATION_BUCKETS))
        self.findings = _Children(Counter(
            f"{PREFIX}_findings_total", "Rule findings, by rule and the action the policy gave them.",
            ["rule", "action", "dry_run"]))
        self.mutations = _Children(Counter(
            f"{PREFIX}_mutations_total", "Mutations that changed an MPIJob, by mutation.", ["mutation"]))
        self.bad_requests = _Children(Counter(
            f"{PREFIX}_bad_requests_total", "Requests refused before any decision (malformed, too large, wrong type).",
            ["endpoint", "code"]))
        self.escaped_audit_lines = _Children(Counter(
            f"{PREFIX}_audit_lines_escaped_total",
            "Audit lines that could not be written as they were (a character the output cannot encode) and were "
            "written with every non-ASCII character escaped instead.", ["reason"]))
        self.conversions = _Children(Counter(
            f"{PREFIX}_conversions_total", "Objects converted between MPIJob versions, by result.",
            ["from_version", "to_version", "result"]))
        self.reloads = _Children(Counter(
            f"{PREFIX}_policy_reloads_total", "Policy file reads by result (success, invalid, missing), per worker.",
            ["result"]))
        self.reload_ok = Gauge(
            f"{PREFIX}_policy_last_reload_successful",
            "1 when every worker serves the policy file as it is on disk; 0 while it is invalid or missing.",
            multiprocess_mode="livemin")
        self.reload_ok.set(1)  # until a reload of the policy file says otherwise
        self.reload_time = Gauge(
            f"{PREFIX}_policy_last_reload_success_timestamp_seconds",
            "When the policy file was last loaded successfully (Unix time).", multiprocess_mode="max")
        self.cache_sync = _Children(Gauge(
            f"{PREFIX}_cache_last_sync_timestamp_seconds",
            "When each cluster-state cache was last known in sync with the API server (Unix time).",
            ["cache"], multiprocess_mode="max"))
        self.cert_expiry = Gauge(
            f"{PREFIX}_serving_certificate_expiration_timestamp_seconds",
            "notAfter of the serving certificate the server started with (Unix time).",
            multiprocess_mode="mostrecent")
        self.connections = _Children(Gauge(
            f"{PREFIX}_connections",
            "Open client connections: pending (TLS handshake or first request under way) and "
            "established (sent a whole request).", ["state"], multiprocess_mode="livesum"))
        self.dropped_connections = _Children(Counter(
            f"{PREFIX}_dropped_connections_total",
            "Connections closed before they were served a request, by reason (deadline, evicted, "
            "handshake_failed, untrusted_client_certificate, head_too_large, client_refused, "
            "body_too_large, body_stalled, body_ended, no_room).", ["reason"]))
        self.refused_clients = _Children(Counter(
            f"{PREFIX}_refused_clients_total",
            "Admission and conversion requests refused because the client is not authenticated, by "
            "endpoint and reason (handshake: its certificate was refused during the TLS handshake).",
            ["endpoint", "reason"]))
        self._zero_known_series()

    def _zero_known_series(self) -> None:
        """Every labelled counter and histogram at 0 for each label value known in advance, as
        Prometheus' instrumentation guidance asks: a series that appears only when it first
        counts makes a fresh pod's panels say "No data" and ``rate()``/``increase()`` miss that
        first event. Not the cache sync times: 0 would say a cache last synced in 1970 (an age
        of decades, and the alert); those appear with each cache's first list, before the pod
        is ready."""
        from policies.engine import CLUSTER_STATE_RULE
        from policies.interface import Action
        from policies.mpijob.crd_type_check import RULE_ID as SHAPE_RULE
        from policies.registry import MUTATION_IDS, RULE_IDS
        from webhook.client_auth import REFUSALS
        from webhook.connections import DROP_REASONS
        from webhook.conversion_review import SERVED_VERSIONS
        from webhook.review import BAD_REVIEW_STATUSES

        flags = (_flag(False), _flag(True))
        for endpoint, operation in ADMISSION_CALLS:
            self.duration(endpoint)
            for decision in DECISIONS:
                for flag in flags:
                    self.requests(endpoint, operation, decision, flag)
        for rule in (SHAPE_RULE, *RULE_IDS, CLUSTER_STATE_RULE):
            for action in Action:
                for flag in flags:
                    self.findings(rule, action.value, flag)
        for mutation_id in MUTATION_IDS:
            self.mutations(mutation_id)
        for endpoint in BAD_REQUEST_ENDPOINTS:
            for code in (*BAD_REVIEW_STATUSES, 429):
                self.bad_requests(endpoint, str(code))
        self.escaped_audit_lines("unencodable")
        for source in SERVED_VERSIONS:
            for desired in SERVED_VERSIONS:
                for result in CONVERSION_RESULTS if source != desired else ():
                    self.conversions(source, desired, result)
        for result in RELOAD_RESULTS:
            self.reloads(result)
        for state in ("pending", "established"):
            self.connections(state)
        for reason in DROP_REASONS:
            self.dropped_connections(reason)
        for endpoint, reason in REFUSALS:
            self.refused_clients(endpoint, reason)


_lock = threading.Lock()
_instance: _Metrics | None = None
_made_dirs: set[Path] = set()


def _metrics() -> _Metrics:
    global _instance
    if _instance is None:
        with _lock:
            if _instance is None:
                _instance = _Metrics()
    return _instance


def _flag(value: bool) -> str:
    return "true" if value else "false"


def decision_label(decision: Decision) -> str:
    """allowed | denied | error: an error is a refusal because a rule or mutation failed."""
    failed = decision.reason == "error" or (decision.verdict is not None and decision.verdict.error is not None)
    if failed:
        return "error"
    return "allowed" if decision.allowed else "denied"


def observe_decision(decision: Decision) -> None:
    req = decision.request
    verdict = decision.verdict
    mutation = decision.mutation
    _decisions.append((decision.endpoint, req.operation, decision_label(decision), req.dry_run, decision.seconds,
                       verdict.outcomes if verdict is not None else (),
                       mutation.applied if mutation is not None and decision.allowed else ()))
    _flush_when_due(_decisions)


def record_bad_request(endpoint: str, code: int) -> None:
    _count("bad_requests", endpoint, str(code))


def record_connections(pending: int, established: int) -> None:
    """A worker's open connections (see ``webhook.connections``); set when they change."""
    m = _metrics()
    m.connections("pending").set(pending)
    m.connections("established").set(established)


def record_dropped_connection(reason: str, connection: object = None) -> None:
    """A connection closed before it was served (``webhook.connections`` reasons)."""
    _count("dropped_connections", reason)


def record_refused_client(endpoint: str, reason: str) -> None:
    """A request (or, endpoint ``handshake``, a TLS handshake) refused by client authentication."""
    _count("refused_clients", endpoint, reason)


def record_escaped_audit_line() -> None:
    _count("escaped_audit_lines", "unencodable")


def record_conversion(from_version: str, to_version: str, result: str) -> None:
    """One object converted (or not) by the conversion webhook; ``result``: success | failed."""
    if result not in CONVERSION_RESULTS:
        raise ValueError(f"conversion result must be one of {CONVERSION_RESULTS}, not {result!r}")
    _count("conversions", from_version, to_version, result)


# --- per-request tallies, flushed in aggregate ------------------------------------------------
# Appending to a deque is atomic, so the request threads take no lock; only the flush pops.
# One tuple per decision: endpoint, operation, decision label, dry run, seconds, rule outcomes,
# mutations applied (small values only: never the request, which holds the whole object).
_decisions: deque[tuple[str, str, str, bool, float, tuple[Outcome, ...], tuple[str, ...]]] = deque()
# One increment of a labelled counter: the _Metrics attribute, the label values.
_counts: deque[tuple[str, tuple[str, ...]]] = deque()
_flush_lock = threading.Lock()  # one flush at a time, so a scrape waits for one under way


def _count(counter: str, *labels: str) -> None:
    _counts.append((counter, labels))
    _flush_when_due(_counts)


def _flush_when_due(pending: deque[Any]) -> None:
    if len(pending) >= MAX_PENDING:
        _flusher.flush()  # logs a failure rather than raising it into the request
    elif not _flusher.running:
        _flusher.start()


class _Observations:
    """Durations for one histogram child: a count per bucket, and their sum."""

    __slots__ = ("buckets", "total")

    def __init__(self) -> None:
        self.buckets = [0] * len(_DURATION_BOUNDS)
        self.total = 0.0

    def add(self, seconds: float) -> None:
        self.buckets[bisect_left(_DURATION_BOUNDS, seconds)] += 1  # the first bound >= seconds, as observe()
        self.total += seconds


def flush() -> None:
    """Add what was tallied since the last flush to the prometheus_client metrics (in
    multiprocess mode: to this process's files)."""
    with _flush_lock:  # taken even when nothing is queued: a flush under way may hold it all
        if not _decisions and not _counts:
            return
        m = _metrics()
        requests: dict[tuple[str, ...], int] = {}
        findings: dict[tuple[str, ...], int] = {}
        mutations: dict[str, int] = {}
        durations: dict[str, _Observations] = {}
        for _ in range(len(_decisions)):
            endpoint, operation, label, dry_run, seconds, outcomes, applied = _decisions.popleft()
            flag = _flag(dry_run)
            key = (endpoint, operation, label, flag)
            requests[key] = requests.get(key, 0) + 1
            observed = durations.get(endpoint)
            if observed is None:
                observed = durations[endpoint] = _Observations()
            observed.add(seconds)
            for outcome in outcomes:
                # The Action itself, not the slower .value: it is a str, labelled as its value.
                finding = (outcome.finding.rule, outcome.action, flag)
                findings[finding] = findings.get(finding, 0) + 1
            for mutation_id in applied:
                mutations[mutation_id] = mutations.get(mutation_id, 0) + 1
        counted: dict[tuple[str, tuple[str, ...]], int] = {}
        for _ in range(len(_counts)):
            item = _counts.popleft()
            counted[item] = counted.get(item, 0) + 1
        for labels, n in requests.items():
            m.requests(*labels).inc(n)
        for endpoint, observed in durations.items():
            _add_observations(m.duration(endpoint), observed)
        for labels, n in findings.items():
            m.findings(*labels).inc(n)
        for mutation_id, n in mutations.items():
            m.mutations(mutation_id).inc(n)
        for (counter, labels), n in counted.items():
            getattr(m, counter)(*labels).inc(n)


def _add_observations(histogram: Any, observed: _Observations) -> None:
    """What ``histogram.observe(s)`` for each of the durations would have done, with one update
    per bucket. prometheus_client has no public call for it: this uses the child's ``_sum`` and
    its per-bucket (not cumulative) ``_buckets``, which a test pins against ``observe()``."""
    histogram._sum.inc(observed.total)
    for bucket, n in zip(histogram._buckets, observed.buckets, strict=True):
        if n:
            bucket.inc(n)


def _forget_tallies() -> None:
    global _flush_lock
    _flush_lock = threading.Lock()  # a flush under way at the fork left the child's copy held
    _decisions.clear()
    _counts.clear()


_flusher = PeriodicFlush("metrics-flush", FLUSH_SECONDS, flush, forget=_forget_tallies)


def record_policy_reload(result: str, *, loaded_at: float | None = None) -> None:
    """The policy file was read: ``success`` (``loaded_at`` = when), ``invalid`` or ``missing``."""
    if result not in RELOAD_RESULTS:
        raise ValueError(f"reload result must be one of {RELOAD_RESULTS}, not {result!r}")
    m = _metrics()
    m.reloads(result).inc()
    m.reload_ok.set(1 if result == "success" else 0)
    if result == "success":
        m.reload_time.set(loaded_at if loaded_at is not None else time.time())


def record_cache_sync(cache: str, when: float | None = None) -> None:
    _metrics().cache_sync(cache).set(when if when is not None else time.time())


def set_certificate_expiry(cert_file: str | os.PathLike[str]) -> float:
    """Reads the PEM certificate's notAfter into the expiry gauge; returns it (Unix time)."""
    from certs.inspection import serving_cert_expiry

    expiry = serving_cert_expiry(cert_file).timestamp()
    _metrics().cert_expiry.set(expiry)
    return expiry


# --- multi-process set-up (serve, before gunicorn forks) ----------------------------------
def prepare_multiprocess_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """Make (or empty) the directory the worker processes share their samples through, and
    point ``PROMETHEUS_MULTIPROC_DIR`` at it. Must run before any metric exists."""
    if _instance is not None:
        raise RuntimeError("prepare_multiprocess_dir must run before any metric is recorded")
    chosen = path or os.environ.get(MULTIPROC_ENV)
    if chosen:
        directory = Path(chosen)
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob("*.db"):  # left by an earlier run: they would add up
            stale.unlink()
    else:
        import tempfile

        directory = Path(tempfile.mkdtemp(prefix="mpijob-webhook-metrics-"))
        _made_dirs.add(directory)
    os.environ[MULTIPROC_ENV] = str(directory)
    values = sys.modules.get("prometheus_client.values")
    if values is not None:
        # prometheus_client chose in-process storage when it was imported; metrics created from
        # now on must use the shared files instead.
        values.ValueClass = values.get_value_class()  # type: ignore[attr-defined]
    return directory


def child_exit(server: Any, worker: Any) -> None:
    """gunicorn ``child_exit`` hook: drop a dead worker's live gauges."""
    if os.environ.get(MULTIPROC_ENV):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)


def release_multiprocess_dir(directory: Path) -> None:
    """At shutdown: remove the directory if ``prepare_multiprocess_dir`` made it."""
    if directory in _made_dirs:
        shutil.rmtree(directory, ignore_errors=True)
        _made_dirs.discard(directory)


# --- exposition ---------------------------------------------------------------------------
class _Snapshot:
    """What one scrape shows: every collected family, plus each cache's age computed now."""

    def __init__(self, families: list[Any], now: float) -> None:
        self._families = families
        self._now = now

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        yield from self._families
        age = GaugeMetricFamily(f"{PREFIX}_cache_last_sync_age_seconds",
                                "Seconds since each cluster-state cache was last known in sync.", labels=["cache"])
        for family in self._families:
            if family.name == f"{PREFIX}_cache_last_sync_timestamp_seconds":
                for sample in family.samples:
                    age.add_metric([sample.labels["cache"]], max(0.0, self._now - sample.value))
        yield age


def exposition(accept: str | None = None) -> tuple[bytes, str]:
    """The body and content type of a ``/metrics`` answer."""
    from prometheus_client import REGISTRY, CollectorRegistry
    from prometheus_client.exposition import choose_encoder

    _metrics()  # so a scrape before the first request still lists every metric
    flush()  # so this worker's own requests are all counted
    if os.environ.get(MULTIPROC_ENV):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = REGISTRY
    encoder, content_type = choose_encoder(accept or "")
    return encoder(_Snapshot(list(registry.collect()), time.time())), content_type
