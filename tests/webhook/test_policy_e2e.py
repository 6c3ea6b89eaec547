"""End to end: ``serve --policy-file`` with two gunicorn workers over real TLS. A ConfigMap-style
update reaches every worker without a restart; an invalid or deleted file keeps the last good
policy; metrics add up across the workers; every decision is one audit line."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from testing.builders import admission_review, mpijob
from tests.conftest import ROOT
from testing.tls_server import TlsServer, serving
from tests.webhook.configmap_volume import ConfigMapVolume

WARN = "rules:\n  slots-per-worker: warn\n"
DENY = "rules:\n  slots-per-worker: deny\n"
TYPO = "rules:\n  slot-per-worker: deny\n"
WORKERS = 2


def wait_for(condition: Callable[[], bool], what: str, server: TlsServer, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}:\n{server.output()}")
        time.sleep(0.05)


def every_worker_logged(server: TlsServer, text: str, times: int = 1) -> None:
    def logged() -> bool:
        lines = re.findall(r"^\[[^\]]+\] \[(\d+)\] \[\w+\] webhook\.policy_reload: " + re.escape(text),
                           server.output(), re.MULTILINE)
        return len(set(lines)) == WORKERS and len(lines) >= WORKERS * times
    wait_for(logged, f"{WORKERS} workers to log {text!r}", server)


def slots(server: TlsServer, count: int = 1, **review_args) -> list[dict]:
    return [server.review("/validate", admission_review(mpijob(slots=9), **review_args)) for _ in range(count)]


def readiness(server: TlsServer) -> tuple[int, str]:
    status, body = server.request("GET", "/readyz")
    return status, json.loads(body)["checks"]["policy"]["detail"]


def scrape(server: TlsServer) -> dict[tuple[str, frozenset], float]:
    status, body = server.health_request("/metrics")
    assert status == 200
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(body.decode()) for s in family.samples}


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def audit_lines(server: TlsServer) -> list[dict]:
    return [json.loads(line) for line in server.output().splitlines() if line.startswith('{"log":"mpijob-webhook.audit"')]


def test_policy_updates_reach_every_worker_and_bad_edits_change_nothing(tmp_path: Path):
    volume = ConfigMapVolume(tmp_path / "config")
    volume.write(WARN)
    flags = ("--dev", "--workers", str(WORKERS), "--threads", "2", "--policy-file", str(volume.path),
             "--policy-check-interval", "0.1")
    with serving(tmp_path / "server", *flags) as server:
        every_worker_logged(server, "policy loaded from")

        # warn: admitted with the finding as a warning (a real request and a dry run).
        [warned] = slots(server)
        [dry] = slots(server, dry_run=True)
        for response in (warned, dry):
            assert response["allowed"] is True
            assert response["warnings"][0].startswith("[slots-per-worker] spec.slotsPerWorker: Invalid value: 9")

        # A ConfigMap update: every worker applies it, no restart.
        volume.write(DENY)
        every_worker_logged(server, "policy reloaded from")
        assert all(r["allowed"] is False and r["status"]["code"] == 422 for r in slots(server, 4))

        # An invalid edit: logged with its field path by each worker, the last good policy stays.
        volume.write(TYPO)
        every_worker_logged(server, f"{volume.path} is invalid (1 problem):\n  line 2: rules.slot-per-worker: "
                                    "unknown rule id 'slot-per-worker'; did you mean slots-per-worker?")
        assert slots(server)[0]["allowed"] is False
        status, detail = readiness(server)
        assert status == 200
        assert "the policy file is invalid and was not applied: " in detail
        assert "rules.slot-per-worker: unknown rule id 'slot-per-worker'; did you mean slots-per-worker?" in detail

        # The file deleted: the last good policy stays, and it is said so.
        volume.remove_key()
        every_worker_logged(server, f"policy file {volume.path} is gone; the policy loaded at ")
        assert slots(server)[0]["allowed"] is False
        status, detail = readiness(server)
        assert (status, detail.startswith(f"policy file {volume.path} is missing; ")) == (200, True)

        # A scrape is exact for the worker answering it; each worker flushes its own requests
        # to the shared files within a second, and writes its audit lines within 0.1 s.
        wait_for(lambda: value(scrape(server), "mpijob_webhook_request_duration_seconds_count", endpoint="validate")
                 == 8, "both workers' requests in /metrics", server)
        wait_for(lambda: len(audit_lines(server)) == 8, "8 audit lines", server)
        samples = scrape(server)
        audit = audit_lines(server)
        assert server.process.poll() is None  # nothing above restarted or stopped the server

    reloads = "mpijob_webhook_policy_reloads_total"
    assert value(samples, reloads, result="success") == 2 * WORKERS  # start-up and one update, per worker
    assert value(samples, reloads, result="invalid") == WORKERS
    assert value(samples, reloads, result="missing") == WORKERS
    assert value(samples, "mpijob_webhook_policy_last_reload_successful") == 0
    assert value(samples, "mpijob_webhook_policy_last_reload_success_timestamp_seconds") > time.time() - 120

    requests = "mpijob_webhook_requests_total"
    common = {"endpoint": "validate", "operation": "CREATE"}
    assert value(samples, requests, **common, decision="allowed", dry_run="false") == 1
    assert value(samples, requests, **common, decision="allowed", dry_run="true") == 1
    assert value(samples, requests, **common, decision="denied", dry_run="false") == 6
    assert value(samples, "mpijob_webhook_request_duration_seconds_count", endpoint="validate") == 8
    assert value(samples, "mpijob_webhook_findings_total", rule="slots-per-worker", action="warn", dry_run="true") == 1
    assert value(samples, "mpijob_webhook_findings_total", rule="slots-per-worker", action="deny", dry_run="false") == 6
    assert value(samples, "mpijob_webhook_serving_certificate_expiration_timestamp_seconds") > time.time()

    # Each worker writes its own lines in batches: in order per worker, not across workers.
    assert sorted((a["decision"], a["dryRun"]) for a in audit) == [("allowed", False), ("allowed", True)] + [
        ("denied", False)] * 6
    [dry_run] = [a for a in audit if a["dryRun"]]
    assert dry_run["rules"][0] == {"rule": "slots-per-worker", "action": "warn", "path": "spec.slotsPerWorker"}
    assert not list((tmp_path / "server").glob("mpijob-webhook-metrics-*"))  # removed at shutdown


def test_an_invalid_policy_file_at_start_up_refuses_to_start(tmp_path: Path):
    policy = tmp_path / "policy.yaml"
    policy.write_text(TYPO)
    run = subprocess.run([sys.executable, "-m", "webhook", "serve", "--dev", "--port", "0", "--policy-file", str(policy)],
                         capture_output=True, text=True, cwd=ROOT, timeout=60,
                         env={**os.environ, "TMPDIR": str(tmp_path)})
    assert run.returncode == 2
    assert run.stderr.startswith(f"mpijob-webhook serve: not starting: {policy} is invalid (1 problem):\n"
                                 "  line 2: rules.slot-per-worker: unknown rule id 'slot-per-worker'; "
                                 "did you mean slots-per-worker?")
    assert "Listening at" not in run.stderr + run.stdout
