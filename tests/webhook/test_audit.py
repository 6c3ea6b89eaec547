"""The audit log: one JSON line per decision, naming who, what and which rules fired, and
nothing from inside the object."""
from __future__ import annotations

import io
import json
from datetime import datetime, timezone

from policies.cluster import StaticClusterView
from policies.config import parse_policy
from policies.engine import Verdict
from tests.builders import admission_review, mpijob
from webhook.admission import Decision
from webhook.audit import AuditLog
from webhook.review import parse_admission_review
from webhook.runtime import default_runtime

NOW = datetime(2026, 3, 1, 12, 30, 45, 123456, tzinfo=timezone.utc)
SECRETS = ("hunter2-db-password", "AKIAIOSFODNN7EXAMPLE", "s3cr3t-token-value", "--password=letmein")


def secret_job(**spec):
    job = mpijob("pi", **spec)
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]
    launcher["metadata"] = {"annotations": {"vault.example.com/token": SECRETS[2]}}
    container = launcher["spec"]["containers"][0]
    container["env"] = [{"name": "DB_PASSWORD", "value": SECRETS[0]}, {"name": "AWS_ACCESS_KEY_ID", "value": SECRETS[1]}]
    container["args"] = [SECRETS[3]]
    return job


def audited(policy: str, review: dict, endpoint: str = "validate") -> list[dict]:
    stream = io.StringIO()
    runtime = default_runtime(parse_policy(policy), StaticClusterView())
    runtime.admission.observers.append(AuditLog(stream, clock=lambda: NOW))
    getattr(runtime.admission, endpoint)(parse_admission_review(review))
    text = stream.getvalue()
    assert text.endswith("\n") and text.count("\n") == 1, text  # exactly one line
    for secret in SECRETS:
        assert secret not in text
    return [json.loads(text)]


def test_a_denied_dry_run_is_recorded_with_user_rules_and_latency():
    review = admission_review(secret_job(slots=9), dry_run=True, namespace="team-a", username="alice")
    review["request"]["userInfo"]["groups"] = ["system:authenticated", "ml-team"]
    [line] = audited("rules: {slots-per-worker: deny, image-reference: audit}", review)
    latency = line.pop("latencyMs")
    assert isinstance(latency, float) and 0 < latency < 5000
    assert line == {
        "log": "mpijob-webhook.audit",
        "time": "2026-03-01T12:30:45.123Z",
        "uid": review["request"]["uid"],
        "user": {"username": "alice", "groups": ["system:authenticated", "ml-team"]},
        "namespace": "team-a",
        "name": "pi",
        "kind": {"group": "kubeflow.org", "version": "v2beta1", "kind": "MPIJob"},
        "operation": "CREATE",
        "dryRun": True,
        "endpoint": "validate",
        "decision": "denied",
        "reason": "checked",
        "rules": [{"rule": "slots-per-worker", "action": "deny", "path": "spec.slotsPerWorker"}],
    }


def test_warned_and_audited_findings_are_recorded_with_their_action():
    [line] = audited("rules: {slots-per-worker: audit}", admission_review(secret_job(slots=9)))
    assert line["decision"] == "allowed"
    assert line["dryRun"] is False
    assert line["rules"] == [{"rule": "slots-per-worker", "action": "audit", "path": "spec.slotsPerWorker"}]


def test_a_mutation_is_recorded_with_what_it_changed_not_the_values():
    [line] = audited("{}", admission_review(secret_job()), "mutate")
    assert line["endpoint"] == "mutate"
    assert line["decision"] == "allowed"
    assert "istio-sidecar-off" in line["mutations"]
    assert line["patchOperations"] >= 2


def test_exempt_and_skipped_requests_are_recorded_too():
    [line] = audited("{}", admission_review(secret_job(slots=9), namespace="kube-system"))
    assert (line["decision"], line["reason"], line["rules"]) == ("allowed", "exempt", [])


def test_a_failed_rule_is_recorded_as_an_error_without_the_exception_text():
    review = parse_admission_review(admission_review(secret_job()))
    verdict = Verdict(error=f"rule image-reference failed: ValueError: bad image {SECRETS[0]}")
    stream = io.StringIO()
    AuditLog(stream, clock=lambda: NOW)(Decision("validate", review, False, "checked", verdict=verdict, seconds=0.002))
    line = json.loads(stream.getvalue())
    assert (line["decision"], line["error"], line["latencyMs"]) == ("error", "rule image-reference failed", 2.0)
    assert SECRETS[0] not in stream.getvalue()


def test_the_log_writes_to_stdout_by_default(capsys):
    review = parse_admission_review(admission_review(mpijob()))
    AuditLog()(Decision("validate", review, True, "checked", verdict=Verdict()))
    line = json.loads(capsys.readouterr().out)
    assert (line["uid"], line["decision"], line["rules"]) == (review.uid, "allowed", [])
