"""AdmissionReview out: whole response bodies, in the version asked, for the same uid; denials in
the API server's own terms (422 Invalid with causes for field values, 403 Forbidden for policy);
any failure while deciding is a refusal (code 500 in an HTTP 200), never an allow; warnings and
audit annotations within the API server's limits."""
from __future__ import annotations

import base64
import json
import re
from typing import Any

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.interface import Action, Finding, Problem
from policies.engine import Outcome, Verdict
from policies.rules.slots_per_worker import SlotsPerWorker
from testing.builders import admission_review, mpijob
from testing.app_client import ProbeMutation, ProbeRule, webhook
from webhook import create_app, responses
from webhook.admission import Admission
from webhook.review import parse_admission_review
from webhook.runtime import Runtime, default_runtime

VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
SLOTS_MESSAGE = ("slotsPerWorker must be between 1 and 8 (asked 9); set spec.slotsPerWorker to 8, "
                 "and use more workers for more ranks")
# The name part of a Kubernetes qualified name (the API server prefixes "<webhook name>/").
QUALIFIED_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


def only_slots():
    return webhook(rules=(SlotsPerWorker(),), mutations=())


def answer(version: str, uid: str, **response: Any) -> dict[str, Any]:
    return {"apiVersion": version, "kind": "AdmissionReview", "response": {"uid": uid, **response}}


def refusal(message: str) -> dict[str, Any]:
    return {"allowed": False, "status": {"status": "Failure", "code": 500, "reason": "InternalError", "message": message}}


def unchecked(error: str) -> str:
    return (f"the MPIJob could not be checked and was refused rather than admitted unchecked: {error}; "
            "retry, and tell the cluster administrator if it persists")


def half_done(error: str) -> str:
    return (f"the MPIJob could not be prepared and was refused rather than admitted half-done: {error}; "
            "retry, and tell the cluster administrator if it persists")


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", ["/validate", "/mutate"])
def test_allowed_is_answered_in_the_version_received_for_the_same_uid(version: str, path: str):
    review = admission_review(mpijob(), api_version=version)
    uid = review["request"]["uid"]
    assert only_slots().review(path, review) == answer(version, uid, allowed=True)


@pytest.mark.parametrize("version", VERSIONS)
def test_field_value_denial_is_422_invalid_with_causes(version: str):
    review = admission_review(mpijob(slots=9), api_version=version)
    assert only_slots().review("/validate", review) == answer(
        version, review["request"]["uid"], allowed=False,
        status={
            "status": "Failure", "code": 422, "reason": "Invalid",
            "message": f'MPIJob.kubeflow.org "pi" is invalid: [slots-per-worker] spec.slotsPerWorker: '
                       f"Invalid value: 9: {SLOTS_MESSAGE}",
            "details": {"name": "pi", "group": "kubeflow.org", "kind": "MPIJob", "causes": [{
                "reason": "FieldValueInvalid", "field": "spec.slotsPerWorker",
                "message": f"[slots-per-worker] Invalid value: 9: {SLOTS_MESSAGE}"}]},
        },
        auditAnnotations={"denied-by": "slots-per-worker"},
    )


def test_every_violation_is_listed_in_message_and_causes():
    first = ProbeRule("probe-a", lambda ctx: [Finding("probe-a", "spec.a", "bad a", Problem.REQUIRED)])
    second = ProbeRule("probe-b", lambda ctx: [Finding("probe-b", "spec.b", "bad b", Problem.NOT_SUPPORTED, "x"),
                                               Finding("probe-b", "spec.c", "bad c", Problem.FORBIDDEN)])
    review = admission_review(mpijob())
    status = webhook(rules=(first, second), mutations=()).review("/validate", review)["response"]["status"]
    assert status["message"] == ('MPIJob.kubeflow.org "pi" is invalid: [probe-a] spec.a: Required value: bad a\n'
                                 '[probe-b] spec.b: Unsupported value: "x": bad b\n'
                                 "[probe-b] spec.c: Forbidden: bad c")
    assert status["details"]["causes"] == [
        {"reason": "FieldValueRequired", "message": "[probe-a] Required value: bad a", "field": "spec.a"},
        {"reason": "FieldValueNotSupported", "message": '[probe-b] Unsupported value: "x": bad b', "field": "spec.b"},
        {"reason": "FieldValueForbidden", "message": "[probe-b] Forbidden: bad c", "field": "spec.c"},
    ]


def test_policy_denial_is_403_forbidden():
    quota = ProbeRule("quota-probe", lambda ctx: [Finding(
        "quota-probe", "", "team-a has 8 GPUs free and the job asks 16; ask for at most 8", Problem.POLICY)])
    review = admission_review(mpijob())
    assert webhook(rules=(quota,), mutations=()).review("/validate", review) == answer(
        "admission.k8s.io/v1", review["request"]["uid"], allowed=False,
        status={
            "status": "Failure", "code": 403, "reason": "Forbidden",
            "message": 'MPIJob "pi" is forbidden: [quota-probe] team-a has 8 GPUs free and the job asks 16; '
                       "ask for at most 8",
            "details": {"name": "pi", "group": "kubeflow.org", "kind": "MPIJob", "causes": [{
                "reason": "FieldValueForbidden", "field": "",
                "message": "[quota-probe] team-a has 8 GPUs free and the job asks 16; ask for at most 8"}]},
        },
        auditAnnotations={"denied-by": "quota-probe"},
    )


def test_generated_name_is_shown_as_unnamed_only_when_there_is_none():
    job = mpijob()
    del job["metadata"]["name"]
    review = admission_review(job | {"spec": {**job["spec"], "slotsPerWorker": 9}})
    status = only_slots().review("/validate", review)["response"]["status"]
    assert status["details"]["name"] == "(unnamed)"
    assert status["message"].startswith('MPIJob.kubeflow.org "(unnamed)" is invalid: ')


@pytest.mark.parametrize("version", VERSIONS)
def test_exception_inside_a_rule_refuses_with_500_in_an_http_200(version: str):
    ok = ProbeRule("ok-probe")
    exploding = ProbeRule("exploding", RuntimeError("boom"))
    served = webhook(rules=(ok, exploding), mutations=())
    review = admission_review(mpijob(), api_version=version)
    assert served.review("/validate", review) == answer(
        version, review["request"]["uid"], **refusal(unchecked("rule exploding failed: RuntimeError: boom")))
    assert (served.last.allowed, served.last.reason, served.last.verdict.error) == (
        False, "checked", "rule exploding failed: RuntimeError: boom")


def test_exception_inside_a_rule_keeps_the_warnings_of_the_rules_before_it():
    warner = ProbeRule("warner", lambda ctx: [Finding("warner", "spec.x", "careful")], default_action=Action.WARN)
    review = admission_review(mpijob())
    response = webhook(rules=(warner, ProbeRule("exploding", ValueError("bad"))), mutations=()).review(
        "/validate", review)["response"]
    assert response == {"uid": review["request"]["uid"], **refusal(unchecked("rule exploding failed: ValueError: bad")),
                        "warnings": ["[warner] spec.x: Invalid value: careful"], "auditAnnotations": {"warned-by": "warner"}}


def test_exception_inside_a_mutation_refuses_with_500_in_an_http_200():
    review = admission_review(mpijob())
    served = webhook(rules=(), mutations=(ProbeMutation("probe", KeyError("x")),))
    assert served.review("/mutate", review) == answer(
        "admission.k8s.io/v1", review["request"]["uid"], **refusal(half_done("mutation probe failed: KeyError: 'x'")))
    assert (served.last.allowed, served.last.reason) == (False, "error")


@pytest.mark.parametrize(("path", "message"), [
    ("/validate", unchecked("RuntimeError: policy store unreadable")),
    ("/mutate", half_done("RuntimeError: policy store unreadable")),
])
def test_failure_outside_the_rules_refuses_and_is_reported(path: str, message: str):
    def broken_policy():
        raise RuntimeError("policy store unreadable")

    logic = Admission(policy=broken_policy, cluster=default_runtime().admission.cluster)
    decisions = []
    logic.observers.append(decisions.append)
    review = admission_review(mpijob())
    http = create_app(Runtime(logic)).test_client().post(path, json=review)
    assert (http.status_code, http.get_json()) == (200, answer("admission.k8s.io/v1", review["request"]["uid"],
                                                              **refusal(message)))
    assert [(d.endpoint, d.allowed, d.reason) for d in decisions] == [(path[1:], False, "error")]


class BrokenAdmission(Admission):
    """Admission with a bug outside its own guard, to reach the HTTP layer's last line."""

    def validate(self, req):
        raise RuntimeError("a bug")

    mutate = validate


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("path", "message"), [
    ("/validate", unchecked("internal error in the webhook (RuntimeError: a bug)")),
    ("/mutate", half_done("internal error in the webhook (RuntimeError: a bug)")),
])
def test_unexpected_error_with_a_known_uid_is_a_refusal_not_an_html_500(version: str, path: str, message: str):
    app = create_app(Runtime(BrokenAdmission(policy=lambda: None, cluster=default_runtime().admission.cluster)))
    review = admission_review(mpijob(), api_version=version)
    http = app.test_client().post(path, json=review)
    assert (http.status_code, http.mimetype) == (200, "application/json")
    assert http.get_json() == answer(version, review["request"]["uid"], **refusal(message))


class BrokenRuntime(Runtime):
    def readiness(self):
        raise RuntimeError("a bug")


def test_unexpected_error_without_a_review_is_a_json_status():
    http = create_app(BrokenRuntime(default_runtime().admission)).test_client().get("/readyz")
    assert (http.status_code, http.mimetype) == (500, "application/json")
    assert http.get_json() == {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500,
                               "reason": "InternalError", "message": "internal error in the webhook: RuntimeError: a bug"}


def test_patch_is_base64_json_patch_that_applies_to_the_object():
    job = mpijob()
    review = admission_review(job)
    response = webhook(rules=(), mutations=(ProbeMutation("probe"),)).review("/mutate", review)["response"]
    patch = json.loads(base64.b64decode(response.pop("patch")))
    assert response == {"uid": review["request"]["uid"], "allowed": True, "patchType": "JSONPatch",
                        "warnings": ["[probe] labelled"], "auditAnnotations": {"mutated-by": "probe"}}
    assert jsonpatch.apply_patch(job, patch) == {**job, "metadata": {**job["metadata"], "labels": {"probe": "yes"}}}


# --- warnings ----------------------------------------------------------------------------------

def test_long_warning_is_cut_to_256_characters():
    (cut,) = responses.limit_warnings(["x" * 300])
    assert cut == "x" * 253 + "..."


def test_warning_prefix_control_characters_and_line_breaks_are_removed():
    assert responses.limit_warnings(["Warning: a\nb", "  WARNING :c\td", "e\x00f\x1b[31m", "warnings are fine"]) == [
        "a b", "c d", "ef[31m", "warnings are fine"]


def one_line_reference(text: str) -> str:
    """Every run of whitespace one space, control characters gone, no kubectl prefix."""
    return re.sub(r"^\s*warning\s*:\s*", "", re.sub(r"[\x00-\x1f\x7f-\x9f]", "", " ".join(text.split())),
                  flags=re.IGNORECASE)


@settings(max_examples=min(settings.default.max_examples, 2000))  # about 3 ms an example
@given(st.lists(st.text(st.sampled_from(" \t\n\x00\x1b\x85\xa0\u2028\u3000wWaArRnNiIgG:\u0130é")
                        | st.characters(), max_size=20), max_size=4))
def test_warnings_are_cleaned_as_one_line_whatever_they_hold(texts: list[str]):
    expected = []
    for text in map(one_line_reference, texts):
        if text and text not in expected:
            expected.append(text)
    assert responses.limit_warnings(texts) == expected


@given(st.text() | st.text(st.characters(max_codepoint=0x7F)))
def test_printable_is_what_python_calls_printable(text: str):
    assert responses._printable(text) is text.isprintable()


def test_empty_and_repeated_warnings_are_dropped():
    assert responses.limit_warnings(["", "  ", "same", "same", "other"]) == ["same", "other"]


def test_warnings_stop_at_4096_characters_with_a_note():
    kept = responses.limit_warnings([f"{i:03d}" + "w" * 247 for i in range(30)])
    assert [len(w) for w in kept[:-1]] == [250] * 16
    assert kept[-1] == "more warnings were left out"
    assert sum(map(len, kept)) <= 4096


def test_warnings_in_a_response_keep_the_api_server_limits():
    def many(ctx):
        return [Finding("chatty", f"spec.f{i}", "Warning: " + "long text " * 40) for i in range(40)]

    review = admission_review(mpijob())
    response = webhook(rules=(ProbeRule("chatty", many, default_action=Action.WARN),), mutations=()).review(
        "/validate", review)["response"]
    warnings = response["warnings"]
    assert response["allowed"] is True
    assert len(warnings) > 10
    assert all(len(w) <= 256 for w in warnings)
    assert sum(map(len, warnings)) <= 4096
    assert not any(w.lower().startswith("warning") for w in warnings)
    assert warnings[0].startswith("[chatty] spec.f0: Invalid value: Warning: long text")


# --- audit annotations --------------------------------------------------------------------------

def verdict(*pairs: tuple[str, Action], skipped: tuple[str, ...] = ()) -> Verdict:
    return Verdict(tuple(Outcome(Finding(rule, "spec", "m"), action) for rule, action in pairs), skipped)


def test_audit_annotations_name_the_rules_that_fired_under_valid_keys():
    annotations = responses.audit_annotations(verdict(
        ("a", Action.DENY), ("b", Action.WARN), ("a", Action.DENY), ("c", Action.AUDIT), ("d", Action.DENY),
        skipped=("node-fit", "resource-quota")))
    assert annotations == {"denied-by": "a,d", "warned-by": "b", "audited-by": "c",
                           "skipped-rules": "node-fit,resource-quota"}
    assert all(QUALIFIED_NAME_PART.fullmatch(k) and len(k) <= 63 for k in annotations)


@pytest.mark.parametrize("key", ["", "has/slash", "-leading", "trailing-", "with space", "x" * 64, "new\nline", "ok\n"])
def test_audit_annotation_keys_that_are_not_qualified_names_are_dropped(key: str):
    req = parse_admission_review(admission_review(mpijob()))
    response = responses.allow(req, audit={key: "v", "fine-key_1.x": "w"})["response"]
    assert response["auditAnnotations"] == {"fine-key_1.x": "w"}


@given(st.lists(st.tuples(st.sampled_from("abcd"), st.sampled_from(list(Action))), max_size=8))
def test_audit_annotations_list_each_rule_once_per_action_in_order_of_firing(pairs: list[tuple[str, Action]]):
    keys = {Action.DENY: "denied-by", Action.WARN: "warned-by", Action.AUDIT: "audited-by"}
    expected = {keys[action]: ",".join(ids) for action, ids in verdict(*pairs).rules_by_action().items()}
    annotations = responses.audit_annotations(verdict(*pairs))
    assert list(annotations.items()) == list(expected.items())


def test_the_audit_keys_the_webhook_writes_itself_are_valid_and_kept_beside_a_dropped_one():
    assert all(QUALIFIED_NAME_PART.fullmatch(k) for k in responses._OWN_AUDIT_KEYS)
    req = parse_admission_review(admission_review(mpijob()))
    audit = {"mutated-by": "a", "denied-by": "b", "bad key": "c"}
    assert responses.allow(req, audit=audit)["response"]["auditAnnotations"] == {"mutated-by": "a", "denied-by": "b"}
    kept = {"mutated-by": "a", "skipped-rules": "b"}
    response = responses.allow(req, audit=kept)["response"]
    assert response["auditAnnotations"] == kept and response["auditAnnotations"] is not kept


def test_audit_annotations_of_a_denial_reach_the_response():
    review = admission_review(mpijob(slots=9))
    assert only_slots().review("/validate", review)["response"]["auditAnnotations"] == {"denied-by": "slots-per-worker"}
