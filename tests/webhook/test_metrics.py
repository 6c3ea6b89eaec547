"""Metrics: exact values after a known sequence of requests, read back from the exposition
text, and the hooks other parts of the server call."""
from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
from cryptography import x509
from prometheus_client.parser import text_string_to_metric_families

from certs import authority
from testing.builders import admission_review, mpijob
from tests.conftest import ROOT
from webhook import create_app, metrics
from webhook.bootstrap import ServeOptions, build_runtime
from webhook.review import parse_admission_review

Sample = tuple[str, frozenset[tuple[str, str]]]


def parse(text: str) -> dict[Sample, float]:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


class Scraper:
    def __init__(self, client) -> None:
        self.client = client
        self.before = self.scrape()

    def scrape(self) -> dict[Sample, float]:
        answer = self.client.get("/metrics")
        assert answer.status_code == 200
        assert answer.content_type.startswith("text/plain; version=0.0.4")
        return parse(answer.get_data(as_text=True))

    def delta(self, now: dict[Sample, float], name: str, **labels: str) -> float:
        key = (name, frozenset(labels.items()))
        return now.get(key, 0.0) - self.before.get(key, 0.0)


@pytest.fixture
def app():
    return create_app(build_runtime(ServeOptions(audit_log=False)))


def test_metrics_after_a_known_sequence_of_requests(app):
    client = app.test_client()
    scraper = Scraper(client)
    post = lambda path, review: client.post(path, json=review)  # noqa: E731
    post("/validate", admission_review(mpijob()))
    post("/validate", admission_review(mpijob(), dry_run=True))
    post("/validate", admission_review(mpijob(slots=9)))
    mutated = post("/mutate", admission_review(mpijob())).get_json()["response"]
    client.post("/validate", data=b"{not json", headers={"Content-Type": "application/json"})
    now = scraper.scrape()

    requests = "mpijob_webhook_requests_total"
    assert scraper.delta(now, requests, endpoint="validate", operation="CREATE", decision="allowed", dry_run="false") == 1
    assert scraper.delta(now, requests, endpoint="validate", operation="CREATE", decision="allowed", dry_run="true") == 1
    assert scraper.delta(now, requests, endpoint="validate", operation="CREATE", decision="denied", dry_run="false") == 1
    assert scraper.delta(now, requests, endpoint="mutate", operation="CREATE", decision="allowed", dry_run="false") == 1
    assert scraper.delta(now, "mpijob_webhook_bad_requests_total", endpoint="validate", code="400") == 1

    duration = "mpijob_webhook_request_duration_seconds"
    assert scraper.delta(now, f"{duration}_count", endpoint="validate") == 3
    assert scraper.delta(now, f"{duration}_bucket", endpoint="validate", le="10.0") == 3
    assert scraper.delta(now, f"{duration}_count", endpoint="mutate") == 1

    findings = "mpijob_webhook_findings_total"
    assert scraper.delta(now, findings, rule="slots-per-worker", action="deny", dry_run="false") == 1
    # Without a cluster, the skipped cluster rules are one warning per checked request.
    assert scraper.delta(now, findings, rule="cluster-state", action="warn", dry_run="false") == 2
    assert scraper.delta(now, findings, rule="cluster-state", action="warn", dry_run="true") == 1

    applied = mutated["auditAnnotations"]["mutated-by"].split(",")
    assert applied
    for mutation in applied:
        assert scraper.delta(now, "mpijob_webhook_mutations_total", mutation=mutation) == 1


def test_the_duration_buckets_run_from_1_ms_to_10_s(app):
    client = app.test_client()
    client.post("/validate", json=admission_review(mpijob()))
    buckets = sorted(float(dict(key[1])["le"]) for key in Scraper(client).before
                     if key[0] == "mpijob_webhook_request_duration_seconds_bucket"
                     and dict(key[1])["endpoint"] == "validate")
    assert buckets == [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, float("inf")]


def test_conversions_are_counted_by_versions_and_result(app):
    scraper = Scraper(app.test_client())
    metrics.record_conversion("v1alpha1", "v2beta1", "success")
    metrics.record_conversion("v1alpha1", "v2beta1", "success")
    metrics.record_conversion("v2beta1", "v1", "failed")
    now = scraper.scrape()
    name = "mpijob_webhook_conversions_total"
    assert scraper.delta(now, name, from_version="v1alpha1", to_version="v2beta1", result="success") == 2
    assert scraper.delta(now, name, from_version="v2beta1", to_version="v1", result="failed") == 1
    with pytest.raises(ValueError, match="conversion result must be one of"):
        metrics.record_conversion("v1", "v2beta1", "ok")


def test_cache_sync_is_shown_as_a_time_and_an_age(app):
    synced = time.time() - 30
    metrics.record_cache_sync("resourcequotas", synced)
    now = Scraper(app.test_client()).before
    key = frozenset({("cache", "resourcequotas")})
    assert now[("mpijob_webhook_cache_last_sync_timestamp_seconds", key)] == pytest.approx(synced)
    assert 30 <= now[("mpijob_webhook_cache_last_sync_age_seconds", key)] < 40


def test_policy_reloads_are_counted_with_the_last_success(app):
    scraper = Scraper(app.test_client())
    metrics.record_policy_reload("invalid")
    assert scraper.scrape()[("mpijob_webhook_policy_last_reload_successful", frozenset())] == 0
    metrics.record_policy_reload("success", loaded_at=1_700_000_000.0)
    now = scraper.scrape()
    assert scraper.delta(now, "mpijob_webhook_policy_reloads_total", result="invalid") == 1
    assert scraper.delta(now, "mpijob_webhook_policy_reloads_total", result="success") == 1
    assert now[("mpijob_webhook_policy_last_reload_successful", frozenset())] == 1
    assert now[("mpijob_webhook_policy_last_reload_success_timestamp_seconds", frozenset())] == 1_700_000_000.0


def test_the_serving_certificate_expiry_is_read_from_the_file(tmp_path):
    bundle = authority.dev_bundle(tmp_path)
    expected = x509.load_pem_x509_certificate(bundle.cert_file.read_bytes()).not_valid_after_utc.timestamp()
    app = create_app(build_runtime(ServeOptions(audit_log=False, cert_file=bundle.cert_file)))
    now = Scraper(app.test_client()).before
    assert now[("mpijob_webhook_serving_certificate_expiration_timestamp_seconds", frozenset())] == expected


SERVE_SET_UP = """
import os, sys
from webhook.cli import build_parser
import webhook.bootstrap, webhook.routes
build_parser()
print('prometheus_client' in sys.modules)
from webhook import metrics
directory = metrics.prepare_multiprocess_dir(sys.argv[1])
metrics.record_conversion('v1', 'v2beta1', 'success')
metrics.flush()
print(os.environ['PROMETHEUS_MULTIPROC_DIR'] == str(directory), sorted({p.name.split('_')[0] for p in directory.iterdir()}))
"""


def test_serve_sets_up_multiprocess_mode_before_prometheus_client_is_imported(tmp_path):
    # prometheus_client picks in-process or shared-file storage when it is first imported, so
    # nothing the CLI imports may import it; serve then empties the directory of an earlier run.
    stale = tmp_path / "counter_123.db"
    stale.write_bytes(b"old")
    run = subprocess.run([sys.executable, "-c", SERVE_SET_UP, str(tmp_path)], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    # The histogram too: its series exist from the start, at 0 (metrics._zero_known_series).
    assert run.stdout.splitlines() == ["False", "True ['counter', 'gauge', 'histogram']"], run.stderr
    assert not stale.exists()


def test_prepare_multiprocess_dir_refuses_once_metrics_exist(app):
    app.test_client().get("/metrics")
    with pytest.raises(RuntimeError, match="before any metric is recorded"):
        metrics.prepare_multiprocess_dir()


# --- tallies on the request path, flushed in aggregate ----------------------------------------

def without_created(exposition: bytes) -> list[str]:
    return [text for text in exposition.decode().splitlines() if "_created" not in text]


def test_a_histogram_fed_in_aggregate_exposes_exactly_what_observe_gives():
    # The flush writes bucket counts and the sum through prometheus_client internals: this
    # fails if an upgrade changes them.
    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    durations = [0.0, 0.0004, 0.001, 0.0011, 0.0025, 0.003, 0.0049, 0.07, 0.25, 0.3, 2.5, 9.99, 10.0, 10.5, 120.0]
    observed, aggregated = CollectorRegistry(), CollectorRegistry()
    for registry in (observed, aggregated):
        Histogram("mpijob_webhook_request_duration_seconds", "Time to decide one admission request.",
                  ["endpoint"], buckets=metrics.DURATION_BUCKETS, registry=registry)
    by_observe = observed._names_to_collectors["mpijob_webhook_request_duration_seconds"].labels("validate")
    for seconds in durations:
        by_observe.observe(seconds)
    tally = metrics._Observations()
    for seconds in durations:
        tally.add(seconds)
    metrics._add_observations(
        aggregated._names_to_collectors["mpijob_webhook_request_duration_seconds"].labels("validate"), tally)
    assert without_created(generate_latest(aggregated)) == without_created(generate_latest(observed))
    assert 'mpijob_webhook_request_duration_seconds_bucket{endpoint="validate",le="0.001"} 3.0' in \
        without_created(generate_latest(aggregated))


def test_requests_reach_prometheus_client_within_the_flush_interval_without_a_scrape(app):
    from prometheus_client import REGISTRY

    labels = {"endpoint": "validate", "operation": "CREATE", "decision": "denied", "dry_run": "false"}
    before = REGISTRY.get_sample_value("mpijob_webhook_requests_total", labels) or 0.0
    app.test_client().post("/validate", json=admission_review(mpijob(slots=9)))
    started = time.monotonic()
    while (REGISTRY.get_sample_value("mpijob_webhook_requests_total", labels) or 0.0) != before + 1:
        assert time.monotonic() - started < metrics.FLUSH_SECONDS + 5, "the request was never flushed"
        time.sleep(0.02)
    flusher = [thread for thread in threading.enumerate() if thread.name == "metrics-flush"]
    assert len(flusher) == 1 and flusher[0].daemon


def test_decisions_from_many_threads_are_all_counted(app):
    client = app.test_client()
    scraper = Scraper(client)
    runtime = app.extensions["mpijob-webhook"]
    review = parse_admission_review(admission_review(mpijob(slots=9), dry_run=True))
    per_thread, threads = 300, 8

    def decide() -> None:
        for _ in range(per_thread):
            runtime.admission.validate(review)

    workers = [threading.Thread(target=decide) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    now = scraper.scrape()
    total = per_thread * threads
    assert scraper.delta(now, "mpijob_webhook_requests_total", endpoint="validate", operation="CREATE",
                         decision="denied", dry_run="true") == total
    assert scraper.delta(now, "mpijob_webhook_request_duration_seconds_count", endpoint="validate") == total
    assert scraper.delta(now, "mpijob_webhook_findings_total", rule="slots-per-worker", action="deny",
                         dry_run="true") == total


EXIT_WITHOUT_A_SCRAPE = """
import sys, threading
from webhook import create_app, metrics
from webhook.bootstrap import ServeOptions, build_runtime
from testing.builders import admission_review, mpijob
metrics.prepare_multiprocess_dir(sys.argv[1])
app = create_app(build_runtime(ServeOptions(audit_log=False)))
before = sorted(t.name for t in threading.enumerate() if t.name == 'metrics-flush')
for _ in range(3):
    app.test_client().post('/validate', json=admission_review(mpijob(slots=9)))
metrics.record_conversion('v1alpha1', 'v2beta1', 'failed')
print(before, [t.daemon for t in threading.enumerate() if t.name == 'metrics-flush'])
"""


def test_what_a_process_tallied_is_written_when_it_exits(tmp_path):
    # The flush thread starts on first use, is a daemon (the process exits at once), and the
    # interpreter's exit writes what it had not flushed yet.
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    run = subprocess.run([sys.executable, "-c", EXIT_WITHOUT_A_SCRAPE, str(tmp_path)], capture_output=True,
                         text=True, cwd=ROOT, timeout=60)
    assert run.stdout.splitlines() == ["[] [True]"], run.stderr
    samples = {(s.name, frozenset(s.labels.items())): s.value
               for family in MultiProcessCollector(CollectorRegistry(), path=str(tmp_path)).collect()
               for s in family.samples}
    assert samples[("mpijob_webhook_requests_total", frozenset({
        ("endpoint", "validate"), ("operation", "CREATE"), ("decision", "denied"), ("dry_run", "false")}))] == 3
    assert samples[("mpijob_webhook_request_duration_seconds_count", frozenset({("endpoint", "validate")}))] == 3
    assert samples[("mpijob_webhook_conversions_total", frozenset({
        ("from_version", "v1alpha1"), ("to_version", "v2beta1"), ("result", "failed")}))] == 1


FORK = """
import os, sys
from webhook import metrics
metrics.record_conversion('v1alpha1', 'v2beta1', 'success')
child = os.fork()
if child == 0:
    os._exit(0 if not metrics._counts and not metrics._flusher.running else 1)
_, status = os.waitpid(child, 0)
metrics.flush()
from prometheus_client import REGISTRY
print(os.waitstatus_to_exitcode(status), REGISTRY.get_sample_value('mpijob_webhook_conversions_total',
      {'from_version': 'v1alpha1', 'to_version': 'v2beta1', 'result': 'success'}))
"""


def test_a_forked_child_leaves_its_parents_tallies_to_the_parent():
    run = subprocess.run([sys.executable, "-c", FORK], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert run.stdout.split() == ["0", "1.0"], run.stderr


def test_tallies_stay_bounded_when_the_flush_thread_falls_behind(app, monkeypatch):
    """The request that finds MAX_PENDING tallies waiting adds them up itself: memory stays
    bounded whatever happens to the flush thread, and nothing is lost."""
    monkeypatch.setattr(metrics, "MAX_PENDING", 25)
    scraper = Scraper(app.test_client())
    runtime = app.extensions["mpijob-webhook"]
    review = parse_admission_review(admission_review(mpijob(slots=9), dry_run=True))
    most = 0
    for _ in range(200):
        runtime.admission.validate(review)
        metrics.record_bad_request("validate", 400)
        most = max(most, len(metrics._decisions), len(metrics._counts))
    assert most < 25
    now = scraper.scrape()
    assert scraper.delta(now, "mpijob_webhook_requests_total", endpoint="validate", operation="CREATE",
                         decision="denied", dry_run="true") == 200
    assert scraper.delta(now, "mpijob_webhook_bad_requests_total", endpoint="validate", code="400") == 200


def test_a_failing_flush_at_the_bound_does_not_change_the_answer(app, monkeypatch):
    """The request that reaches MAX_PENDING flushes; if that fails, it is logged and the
    request is answered as it would have been (here: a 400 for a malformed body, not a 500)."""
    def broken() -> None:
        raise RuntimeError("metrics storage unavailable")

    monkeypatch.setattr(metrics, "MAX_PENDING", 1)
    monkeypatch.setattr(metrics, "_metrics", broken)
    answer = app.test_client().post("/validate", data=b"{not json", content_type="application/json")
    assert answer.status_code == 400
    assert answer.get_json()["reason"] == "BadRequest"
    metrics._decisions.clear()
    metrics._counts.clear()
