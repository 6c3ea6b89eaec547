"""The audit log: one JSON line per decision, naming who, what and which rules fired, and
nothing from inside the object."""
from __future__ import annotations

import dataclasses
import io
import json
import re
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from policies.interface import Action, Finding, UserInfo
from policies.cluster_view import StaticClusterView
from policies.config.reader import parse_policy
from policies.engine import MutationResult, Outcome, Verdict
from testing.builders import admission_review, mpijob
from tests.conftest import ROOT
from testing.tls_server import serving
from webhook.admission import Decision
from webhook import audit
from webhook.audit import AuditLog
from webhook.metrics import decision_label
from webhook.review import AdmissionRequest, parse_admission_review
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
    log = AuditLog(stream, clock=lambda: NOW)
    runtime.admission.observers.append(log)
    getattr(runtime.admission, endpoint)(parse_admission_review(review))
    log.flush()
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
    log = AuditLog(stream, clock=lambda: NOW)
    log(Decision("validate", review, False, "checked", verdict=verdict, seconds=0.002))
    log.flush()
    line = json.loads(stream.getvalue())
    assert (line["decision"], line["error"], line["latencyMs"]) == ("error", "rule image-reference failed", 2.0)
    assert SECRETS[0] not in stream.getvalue()


def test_the_log_writes_to_stdout_by_default(capsys):
    review = parse_admission_review(admission_review(mpijob()))
    log = AuditLog()
    log(Decision("validate", review, True, "checked", verdict=Verdict()))
    log.flush()
    line = json.loads(capsys.readouterr().out)
    assert (line["uid"], line["decision"], line["rules"]) == (review.uid, "allowed", [])


# --- the line, exactly as json.dumps writes the record ---------------------------------------------

def reference_record(decision: Decision, now: datetime) -> dict:
    """The record as a dict, in the order its keys are written."""
    req, verdict, mutation = decision.request, decision.verdict, decision.mutation
    entry = {
        "log": "mpijob-webhook.audit",
        "time": now.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "uid": req.uid,
        "user": {"username": req.user.username, "groups": list(req.user.groups)},
        "namespace": req.namespace,
        "name": req.name,
        "kind": {"group": req.group, "version": req.version, "kind": req.kind},
        "operation": req.operation,
        "dryRun": req.dry_run,
        "endpoint": decision.endpoint,
        "decision": decision_label(decision),
        "reason": decision.reason,
        "rules": [{"rule": o.finding.rule, "action": o.action.value, "path": o.finding.path}
                  for o in (verdict.outcomes if verdict is not None else ())],
        "latencyMs": round(decision.seconds * 1000, 3),
    }
    if req.request_version and req.request_version != req.version:
        entry["requestVersion"] = req.request_version
    if req.sub_resource:
        entry["subResource"] = req.sub_resource
    if verdict is not None and verdict.skipped:
        entry["skippedRules"] = list(verdict.skipped)
    if mutation is not None:
        entry["mutations"] = list(mutation.applied)
        entry["patchOperations"] = decision.patch_ops
        entry["rules"] += [{"rule": f.rule, "action": "deny", "path": f.path} for f in mutation.invalid]
    if (verdict is not None and verdict.error) or (mutation is not None and mutation.error):
        failed = verdict.error if verdict is not None and verdict.error else mutation.error or ""  # type: ignore[union-attr]
        entry["error"] = failed.split(":", 1)[0]
    return entry


# Whatever a name, path or user may hold: quotes, backslashes, control and non-ASCII characters.
texts = st.text(st.sampled_from('"\\\n\t\x00\x1f\x7fé\u2028😀:') | st.characters(exclude_categories=("Cs",)), max_size=8)
findings = st.builds(Finding, rule=texts, path=texts, message=st.just("quoted value"))
requests = st.builds(
    AdmissionRequest, api_version=st.just("admission.k8s.io/v1"), uid=texts, group=st.just("kubeflow.org"),
    version=st.sampled_from(["v2beta1", "v1"]), kind=st.just("MPIJob"), operation=st.sampled_from(["CREATE", "UPDATE"]),
    namespace=texts, name=texts, generated_name=st.booleans(), object=st.none(), old_object=st.none(),
    dry_run=st.booleans(), sub_resource=st.sampled_from(["", "status"]), request_version=st.sampled_from(["", "v2beta1", "v1"]),
    user=st.builds(UserInfo, username=texts, groups=st.lists(texts, max_size=3).map(tuple)))
verdicts = st.none() | st.builds(
    Verdict, outcomes=st.lists(st.builds(Outcome, finding=findings, action=st.sampled_from(Action)), max_size=3).map(tuple),
    skipped=st.lists(texts, max_size=2).map(tuple), error=st.none() | texts)
mutations = st.none() | st.builds(
    MutationResult, job=st.just({}), applied=st.lists(texts, max_size=2).map(tuple), error=st.none() | texts,
    invalid=st.lists(findings, max_size=2).map(tuple))
decisions = st.builds(
    Decision, endpoint=st.sampled_from(["validate", "mutate"]), request=requests, allowed=st.booleans(),
    reason=st.sampled_from(["checked", "exempt", "error", "invalid-shape"]), verdict=verdicts, mutation=mutations,
    patch_ops=st.integers(min_value=0, max_value=10_000),
    seconds=st.floats(min_value=0, max_value=100, allow_nan=False, allow_infinity=False))


@settings(max_examples=min(settings.default.max_examples, 1000))  # several ms an example to draw
@given(decisions, st.datetimes(timezones=st.just(timezone.utc)))
def test_the_line_is_the_record_as_json_dumps_writes_it(decision: Decision, now: datetime):
    expected = json.dumps(reference_record(decision, now), separators=(",", ":"), ensure_ascii=False)
    stream = io.StringIO()
    log = AuditLog(stream, clock=lambda: now)
    log(decision)
    log.flush()
    assert stream.getvalue() == expected + "\n"


def test_the_time_is_now_in_utc_to_the_millisecond():
    review = parse_admission_review(admission_review(mpijob()))
    stream = io.StringIO()
    before = datetime.now(timezone.utc)
    log = AuditLog(stream)
    log(Decision("validate", review, True, "checked", verdict=Verdict()))
    after = datetime.now(timezone.utc)
    log.flush()
    written = json.loads(stream.getvalue())["time"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", written), written
    assert before - timedelta(milliseconds=1) < datetime.strptime(written, "%Y-%m-%dT%H:%M:%S.%f%z") <= after


def test_the_time_follows_the_clock_across_seconds(monkeypatch):
    review = parse_admission_review(admission_review(mpijob()))
    stream = io.StringIO()
    ticks = iter([1_500_000_000.9996, 1_500_000_001.0004, 1_500_000_001.25, 1_500_000_060.5])
    monkeypatch.setattr(audit, "time", SimpleNamespace(time=lambda: next(ticks), gmtime=time.gmtime, strftime=time.strftime))
    log = AuditLog(stream)
    for _ in range(4):
        log(Decision("validate", review, True, "checked", verdict=Verdict()))
    log.flush()
    assert [json.loads(text)["time"] for text in stream.getvalue().splitlines()] == [
        "2017-07-14T02:40:00.999Z", "2017-07-14T02:40:01.000Z", "2017-07-14T02:40:01.250Z", "2017-07-14T02:41:00.500Z"]


# --- buffered writing ----------------------------------------------------------------------------

class Recorder(io.StringIO):
    """A stream that remembers each write, to see how lines were batched."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return super().write(text)


def decision_for(uid: str) -> Decision:
    request = dataclasses.replace(parse_admission_review(admission_review(mpijob())), uid=uid)
    return Decision("validate", request, True, "checked", verdict=Verdict())


def test_lines_are_written_within_a_tenth_of_a_second_without_a_flush():
    stream = Recorder()
    log = AuditLog(stream)
    for n in range(3):
        log(decision_for(f"uid-{n}"))
    started = time.monotonic()
    while stream.getvalue().count("\n") < 3:
        assert time.monotonic() - started < audit.WRITE_SECONDS + 5, "the lines were never written"
        time.sleep(0.01)
    assert [json.loads(text)["uid"] for text in stream.getvalue().splitlines()] == ["uid-0", "uid-1", "uid-2"]
    assert all(text.endswith("\n") for text in stream.writes)
    writer = [thread for thread in threading.enumerate() if thread.name == "audit-log-writer"]
    assert len(writer) == 1 and writer[0].daemon


def without_the_writer(log: AuditLog) -> AuditLog:
    """The log, out of the background writer's sight: only the test and a full buffer write it."""
    audit._logs.discard(log)
    return log


def test_a_full_buffer_is_written_at_once_by_the_request_that_fills_it():
    stream = Recorder()
    log = without_the_writer(AuditLog(stream, clock=lambda: NOW))
    decision = decision_for("uid")
    size = len(audit.line(decision, NOW))
    count = audit.MAX_PENDING_CHARS // size + 1  # the line that takes the buffer past the limit
    for _ in range(count - 1):
        log(decision)
    assert stream.writes == []
    log(decision)
    assert len(stream.writes) == 1 and stream.writes[0].count("\n") == count
    log(decision)
    log.flush()
    assert len(stream.writes) == 2 and stream.writes[1] == audit.line(decision, NOW) + "\n"


def test_lines_from_many_threads_are_whole_and_in_order_per_thread():
    stream = Recorder()
    log = without_the_writer(AuditLog(stream))
    decisions = {thread: [decision_for(f"{thread}-{n}") for n in range(200)] for thread in range(8)}

    def decide(thread: int) -> None:
        for decision in decisions[thread]:
            log(decision)

    threads = [threading.Thread(target=decide, args=(thread,)) for thread in decisions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    log.flush()
    assert all(text.endswith("\n") for text in stream.writes)
    uids = [json.loads(text)["uid"] for text in stream.getvalue().splitlines()]
    assert len(uids) == 8 * 200
    for thread in decisions:
        assert [uid for uid in uids if uid.startswith(f"{thread}-")] == [f"{thread}-{n}" for n in range(200)]


def test_each_line_goes_to_the_stdout_of_its_time(monkeypatch):
    first, second = io.StringIO(), io.StringIO()
    log = AuditLog()
    monkeypatch.setattr("sys.stdout", first)
    log(decision_for("before"))
    monkeypatch.setattr("sys.stdout", second)
    log(decision_for("after"))
    log.flush()
    assert [json.loads(first.getvalue())["uid"], json.loads(second.getvalue())["uid"]] == ["before", "after"]


EXIT_RIGHT_AFTER_A_DECISION = """
from tests.webhook.test_audit import decision_for
from webhook.audit import AuditLog
log = AuditLog()
for n in range(3):
    log(decision_for(f"uid-{n}"))
"""


def test_lines_still_buffered_are_written_when_the_process_exits():
    run = subprocess.run([sys.executable, "-c", EXIT_RIGHT_AFTER_A_DECISION], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert run.returncode == 0, run.stderr
    assert [json.loads(text)["uid"] for text in run.stdout.splitlines()] == ["uid-0", "uid-1", "uid-2"]


FORK = """
import os, sys
from tests.webhook.test_audit import decision_for
from webhook.audit import AuditLog
log = AuditLog()
log(decision_for("parent"))
child = os.fork()
if child == 0:
    log(decision_for("child"))
    log.flush()
    os._exit(0)
os.waitpid(child, 0)
"""


def test_a_forked_child_leaves_the_parents_lines_to_the_parent():
    run = subprocess.run([sys.executable, "-c", FORK], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert run.returncode == 0, run.stderr
    assert sorted(json.loads(text)["uid"] for text in run.stdout.splitlines()) == ["child", "parent"]


def test_a_stopped_server_has_written_the_line_of_its_last_request(tmp_path):
    # Stopped right after the answer, well inside the writer's 0.1 s: the worker's exit writes it.
    review = admission_review(mpijob(slots=9))
    with serving(tmp_path, "--dev", "--workers", "1", "--threads", "2") as server:
        assert server.review("/validate", review)["allowed"] is False
    lines = [json.loads(text) for text in server.output().splitlines() if text.startswith('{"log":"mpijob-webhook.audit"')]
    assert [(entry["uid"], entry["decision"]) for entry in lines] == [(review["request"]["uid"], "denied")]


# --- one bad line never costs the others -------------------------------------------------------

def escaped_lines() -> float:
    from prometheus_client import REGISTRY

    from webhook import metrics

    metrics.flush()
    return REGISTRY.get_sample_value("mpijob_webhook_audit_lines_escaped_total", {"reason": "unencodable"}) or 0.0


def decision_with_uid(uid: str) -> Decision:
    review = admission_review(mpijob())
    review["request"]["uid"] = "UID"
    request = dataclasses.replace(parse_admission_review(review), uid=uid)
    return Decision("validate", request, True, "checked", Verdict(()), None)


def test_a_line_holding_a_lone_surrogate_is_escaped_and_the_batch_is_written():
    """The parser refuses lone surrogates; if one ever reached a line, the UTF-8 stdout could not
    encode it: that line is written with JSON escapes, counted, and the batch around it stays."""
    buffer = io.BytesIO()
    stream = io.TextIOWrapper(buffer, encoding="utf-8", write_through=True)
    log = AuditLog(stream, clock=lambda: NOW)
    before = escaped_lines()
    uids = [f"uid-{i}" for i in range(10)] + ["bad-\ud800-é"] + [f"uid-{i}" for i in range(10, 20)]
    for uid in uids:
        log(decision_with_uid(uid))
    log.flush()
    written = buffer.getvalue().decode("utf-8").splitlines()
    assert [json.loads(text)["uid"] for text in written] == uids
    assert written[10].isascii() and '"uid":"bad-\\ud800-\\u00e9"' in written[10]
    assert all("é" not in text for text in written)
    assert escaped_lines() == before + 1


def test_a_stream_that_cannot_encode_a_line_loses_only_that_lines_characters():
    """A stdout that is not UTF-8 (e.g. ASCII): the batch falls back to line by line, and each
    line the stream cannot encode is written escaped, not dropped with its batch."""
    buffer = io.BytesIO()
    stream = io.TextIOWrapper(buffer, encoding="ascii", write_through=True)
    log = AuditLog(stream, clock=lambda: NOW)
    before = escaped_lines()
    uids = ["uid-a", "uid-é", "uid-b", "uid-😀", "uid-c"]
    for uid in uids:
        log(decision_with_uid(uid))
    log.flush()
    written = buffer.getvalue().decode("ascii").splitlines()
    assert [json.loads(text)["uid"] for text in written] == uids
    assert escaped_lines() == before + 2
