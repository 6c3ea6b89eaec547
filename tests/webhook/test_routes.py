"""The HTTP routes through Flask's test client: which requests are checked at all, and that each
answer is the decision the issue asks for (allowed, denied with the field named, or let through
untouched), on /validate and /mutate alike."""
from __future__ import annotations

import _socket
import base64
import copy
import json
import logging
import ssl
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from werkzeug.test import EnvironBuilder, run_wsgi_app

from policies.rules.slots_per_worker import SlotsPerWorker
from testing.builders import admission_review, mpijob
from testing.app_client import ProbeMutation, ProbeRule, webhook
from webhook import create_app
from webhook.client_auth import ClientAuthentication
from webhook.runtime import Runtime, default_runtime

ENDPOINTS = ("/validate", "/mutate")
INVALID = {"slots": 9}  # slots-per-worker denies it


def checked_webhook(**options: Any):
    """One rule (slots-per-worker) and one mutation (a label), so every decision is predictable."""
    return webhook(rules=(SlotsPerWorker(),), mutations=(ProbeMutation("probe"),), **options)


def allowed(review: dict[str, Any], **response: Any) -> dict[str, Any]:
    return {"apiVersion": review["apiVersion"], "kind": "AdmissionReview",
            "response": {"uid": review["request"]["uid"], "allowed": True, **response}}


def denial_fields(answer: dict[str, Any]) -> list[str]:
    status = answer["response"]["status"]
    assert (answer["response"]["allowed"], status["code"], status["reason"]) == (False, 422, "Invalid")
    return [cause["field"] for cause in status["details"]["causes"]]


# --- health ---------------------------------------------------------------------------------------

def test_healthz():
    http = webhook().client.get("/healthz")
    assert (http.status_code, http.get_json()) == (200, {"status": "ok"})


def test_readyz_lists_its_checks():
    runtime = default_runtime()
    runtime.readiness_checks["policy"] = lambda: (True, "default policy")
    http = create_app(runtime).test_client().get("/readyz")
    assert (http.status_code, http.get_json()) == (
        200, {"status": "ready", "checks": {"policy": {"ready": True, "detail": "default policy"}}})


def test_readyz_is_503_while_a_check_fails_or_raises():
    def broken() -> tuple[bool, str]:
        raise OSError("no route to host")

    runtime = Runtime(default_runtime().admission, readiness_checks={
        "policy": lambda: (True, "default policy"), "cluster": lambda: (False, "nodes not listed yet"), "queues": broken})
    http = create_app(runtime).test_client().get("/readyz")
    assert (http.status_code, http.get_json()) == (503, {"status": "not ready", "checks": {
        "policy": {"ready": True, "detail": "default policy"},
        "cluster": {"ready": False, "detail": "nodes not listed yet"},
        "queues": {"ready": False, "detail": "OSError: no route to host"}}})


# --- what is let through unchecked -----------------------------------------------------------------

@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize(("group", "version", "kind"), [
    ("", "v1", "Pod"), ("kubeflow.org", "v1", "TFJob"), ("example.com", "v2beta1", "MPIJob")],
    ids=["pod", "tfjob", "mpijob-of-another-group"])
def test_other_kinds_are_allowed_and_logged(path: str, group: str, version: str, kind: str,
                                            caplog: pytest.LogCaptureFixture):
    review = admission_review(mpijob(**INVALID))
    review["request"]["kind"] = {"group": group, "version": version, "kind": kind}
    served = checked_webhook()
    with caplog.at_level(logging.WARNING, logger="webhook.admission"):
        assert served.review(path, review) == allowed(review)
    assert served.last.reason == "not-mpijob"
    assert f"{path[1:]} called for {group}/{version} {kind}: not an MPIJob, allowed (check the webhook's rules)" \
        in caplog.messages


@pytest.mark.parametrize("version", ["v1alpha1", "v1alpha2", "v1"])
def test_older_versions_are_allowed_with_a_warning_when_they_cannot_be_converted(version: str):
    served = checked_webhook(to_hub=lambda obj: None)
    review = admission_review({**mpijob(**INVALID), "apiVersion": f"kubeflow.org/{version}"}, version=version)
    assert served.review("/validate", review) == allowed(review, warnings=[
        f"kubeflow.org/{version} MPIJobs are not validated by this webhook; write the job as "
        f"kubeflow.org/v2beta1 to have it checked before it runs"])
    assert served.last.reason == "older-version"
    assert served.review("/mutate", review) == allowed(review)  # patches are written for v2beta1 only
    assert served.last.reason == "older-version"


@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_delete_and_connect_are_allowed(path: str, operation: str):
    served = checked_webhook()
    review = admission_review(None, operation=operation, old=mpijob(**INVALID))
    assert review["request"]["object"] is None
    assert served.review(path, review) == allowed(review)
    assert served.last.reason == "skipped-operation"


@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize("sub_resource", ["status", "scale"])
def test_subresource_updates_are_allowed(path: str, sub_resource: str):
    served = checked_webhook()
    review = admission_review(mpijob(**INVALID), operation="UPDATE", old=mpijob(), sub_resource=sub_resource)
    assert served.review(path, review) == allowed(review)
    assert served.last.reason == "skipped-operation"


@pytest.mark.parametrize("path", ENDPOINTS)
def test_exempt_namespace_is_allowed_unchecked(path: str):
    served = checked_webhook()
    review = admission_review(mpijob(**INVALID), namespace="kube-system")
    assert served.review(path, review) == allowed(review)
    assert served.last.reason == "exempt"


# --- UPDATE ---------------------------------------------------------------------------------------

def relabelled(job: dict[str, Any], **labels: str) -> dict[str, Any]:
    changed = copy.deepcopy(job)
    changed["metadata"]["labels"] = labels
    changed["metadata"]["finalizers"] = ["example.com/keep"]
    return changed


def test_update_leaving_the_spec_unchanged_is_allowed_even_if_the_spec_is_invalid():
    old = mpijob(**INVALID)
    served = checked_webhook()
    review = admission_review(relabelled(old, team="a"), operation="UPDATE", old=old)
    assert served.review("/validate", review) == allowed(review)
    assert served.last.reason == "unchanged-spec"
    assert served.review("/mutate", review) == allowed(review)  # mutations are for CREATE only
    assert served.last.reason == "skipped-operation"


def test_update_changing_the_spec_is_validated():
    served = checked_webhook()
    old = mpijob()
    denied = served.review("/validate", admission_review(mpijob(**INVALID), operation="UPDATE", old=old))
    assert denial_fields(denied) == ["spec.slotsPerWorker"]
    review = admission_review(mpijob(slots=4), operation="UPDATE", old=old)
    assert served.review("/validate", review) == allowed(review)
    assert served.last.reason == "checked"


def test_update_of_an_invalid_job_into_another_invalid_spec_is_denied():
    review = admission_review(mpijob(slots=10), operation="UPDATE", old=mpijob(**INVALID))
    assert denial_fields(checked_webhook().review("/validate", review)) == ["spec.slotsPerWorker"]


def test_deleting_object_gets_no_free_pass_for_a_spec_change():
    """Kyverno CVE-2023-34091: an object with deletionTimestamp bypassed policies."""
    old = mpijob()
    old["metadata"].update(deletionTimestamp="2026-11-21T14:00:00Z", finalizers=["example.com/keep"])
    new = mpijob(**INVALID)
    new["metadata"].update(deletionTimestamp="2026-11-21T14:00:00Z", finalizers=["example.com/keep"])
    answer = checked_webhook().review("/validate", admission_review(new, operation="UPDATE", old=old))
    assert denial_fields(answer) == ["spec.slotsPerWorker"]


def test_deleting_object_may_drop_its_finalizers():
    old = mpijob(**INVALID)
    old["metadata"].update(deletionTimestamp="2026-11-21T14:00:00Z", finalizers=["example.com/keep"])
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = []
    review = admission_review(new, operation="UPDATE", old=old)
    assert checked_webhook().review("/validate", review) == allowed(review)


# --- CREATE ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ENDPOINTS)
def test_dry_run_is_evaluated_exactly_like_the_real_request(path: str):
    for job in (mpijob(), mpijob(**INVALID)):
        real = admission_review(job)
        dry = copy.deepcopy(real)
        dry["request"]["dryRun"] = True
        dry["request"]["options"] = {"dryRun": ["All"]}
        served = checked_webhook()
        assert served.review(path, dry) == served.review(path, real)
        assert served.decisions[0].request.dry_run is True


def test_rules_see_the_name_generate_name_will_produce():
    probe = ProbeRule("probe")
    job = mpijob()
    job["metadata"] = {"generateName": "pi-gen-", "namespace": "team-a"}
    served = webhook(rules=(probe,), mutations=())
    served.review("/validate", admission_review(job))
    assert [(ctx.name, ctx.generated_name) for ctx in probe.seen] == [("pi-gen-xxxxx", True)]


def test_rules_see_the_request_as_sent():
    probe = ProbeRule("probe")
    review = admission_review(mpijob(), dry_run=True, username="bob", namespace="team-b")
    webhook(rules=(probe,), mutations=()).review("/validate", review)
    (ctx,) = probe.seen
    assert (ctx.operation, ctx.namespace, ctx.name, ctx.dry_run, ctx.user.username, ctx.old_job) == (
        "CREATE", "team-b", "pi", True, "bob", None)
    assert ctx.job == review["request"]["object"]


# --- wrong shapes are denials that name the field ---------------------------------------------------

def reshaped(change) -> dict[str, Any]:
    job = mpijob()
    change(job)
    return job


WRONG_SHAPES = {
    "spec a list": (lambda job: job.update(spec=[1, 2]), "spec", 'Invalid value: "[…]": must be a mapping, not a list'),
    "spec a string": (lambda job: job.update(spec="x"), "spec", 'Invalid value: "x": must be a mapping, not a string'),
    "no spec": (lambda job: job.pop("spec"), "spec", "Required value: an MPIJob needs a spec with mpiReplicaSpecs"),
    "replicas a string": (lambda job: job["spec"]["mpiReplicaSpecs"]["Worker"].update(replicas="2"),
                          "spec.mpiReplicaSpecs[Worker].replicas", 'Invalid value: "2": must be an integer, not a string'),
    "containers a mapping": (
        lambda job: job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"].update(containers={"name": "x"}),
        "spec.mpiReplicaSpecs[Launcher].template.spec.containers", 'Invalid value: "{…}": must be a list, not a mapping'),
    "a container a string": (
        lambda job: job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"].update(containers=["busybox"]),
        "spec.mpiReplicaSpecs[Worker].template.spec.containers[0]", 'Invalid value: "busybox": must be a mapping, not a string'),
    "mpiReplicaSpecs a number": (lambda job: job["spec"].update(mpiReplicaSpecs=2),
                                 "spec.mpiReplicaSpecs", "Invalid value: 2: must be a mapping, not an integer"),
    "labels a list": (lambda job: job["metadata"].update(labels=["a"]),
                      "metadata.labels", 'Invalid value: "[…]": must be a mapping, not a list'),
    "a label value a number": (lambda job: job["metadata"].update(labels={"team": 7}),
                               "metadata.labels[team]", "Invalid value: 7: must be a string, not an integer"),
    "slots a boolean": (lambda job: job["spec"].update(slotsPerWorker=True),
                        "spec.slotsPerWorker", "Invalid value: true: must be an integer, not true or false"),
}


# What /mutate also refuses: the fields the mutations read or write, and the maps on the way.
SHAPES_THE_MUTATIONS_READ = ("spec a list", "spec a string", "mpiReplicaSpecs a number", "labels a list")


def _shape_cases(names) -> list[Any]:
    return [pytest.param(*WRONG_SHAPES[name], id=name) for name in names]


def _assert_shape_denial(response: dict[str, Any], field: str, problem: str) -> None:
    status = response["status"]
    assert status["details"]["causes"] == [
        {"reason": status["details"]["causes"][0]["reason"], "field": field, "message": f"[object-shape] {problem}"}]
    assert status["message"] == f'MPIJob.kubeflow.org "pi" is invalid: [object-shape] {field}: {problem}'


@pytest.mark.parametrize(("change", "field", "problem"), _shape_cases(WRONG_SHAPES))
def test_wrong_shape_is_a_denial_naming_the_field(change, field: str, problem: str):
    served = webhook()  # every rule of the registry: none of them may see the bad shape
    _assert_shape_denial(served.review("/validate", admission_review(reshaped(change)))["response"], field, problem)


@pytest.mark.parametrize(("change", "field", "problem"), _shape_cases(SHAPES_THE_MUTATIONS_READ))
def test_wrong_shape_of_a_field_the_mutations_read_is_a_mutate_denial(change, field: str, problem: str):
    served = webhook()  # every mutation of the registry: none of them may see the bad shape
    _assert_shape_denial(served.review("/mutate", admission_review(reshaped(change)))["response"], field, problem)


@pytest.mark.parametrize(("change", "field", "problem"),
                         _shape_cases(n for n in WRONG_SHAPES if n not in SHAPES_THE_MUTATIONS_READ))
def test_wrong_shape_elsewhere_is_left_to_validation_by_mutate(change, field: str, problem: str):
    """The mutations never read it: /mutate patches as usual, the patch applies, and the bad field
    reaches the API server's schema validation and /validate unchanged."""
    job = reshaped(change)
    response = webhook().review("/mutate", admission_review(job))["response"]
    assert response["allowed"] is True
    if "spec" not in job:  # no replica to turn the sidecar off in, no queue configured
        assert "patch" not in response
        return
    patched = jsonpatch.apply_patch(job, json.loads(base64.b64decode(response["patch"])))
    for replica in ("Launcher", "Worker"):
        template = patched["spec"]["mpiReplicaSpecs"][replica]["template"]
        assert template["metadata"]["labels"]["sidecar.istio.io/inject"] == "false"
        assert template["spec"]["automountServiceAccountToken"] is False
        for added in (("metadata",), ("spec", "automountServiceAccountToken")):
            parent = template if len(added) == 1 else template[added[0]]
            del parent[added[-1]]
    assert patched == job  # the field of the wrong type is passed on as it came


@pytest.mark.parametrize("path", ENDPOINTS)
def test_object_that_is_a_list_is_a_denial(path: str):
    review = admission_review([1, 2])
    review["request"]["name"] = "pi"
    status = webhook().review(path, review)["response"]["status"]
    assert (status["code"], status["reason"]) == (422, "Invalid")
    assert status["message"] == ('MPIJob.kubeflow.org "pi" is invalid: [object-shape] '
                                 'Invalid value: "[…]": the object must be a mapping (a JSON object)')


# --- wire format ----------------------------------------------------------------------------------

def test_answers_are_compact_json_in_the_order_built_with_non_ascii_escaped():
    served = webhook()
    review = admission_review(mpijob(), operation="DELETE")
    answer = served.client.post("/validate", json=review)
    assert answer.get_data() == (b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"'
                                 + review["request"]["uid"].encode() + b'","allowed":true}}')
    refused = served.client.post("/validate", json={**review, "apiVersion": "admission.k8s.io/v\u00e9"})
    assert refused.get_data() == (b'{"kind":"Status","apiVersion":"v1","status":"Failure","code":400,'
                                  b'"reason":"BadRequest","message":"unsupported AdmissionReview apiVersion '
                                  b"'admission.k8s.io/v\\u00e9'; supported: admission.k8s.io/v1, "
                                  b'admission.k8s.io/v1beta1"}')


def test_a_client_check_that_fails_is_a_500_status_not_a_page():
    """The client check runs before Flask sees the request (webhook.routes.around_requests): a
    failure there is answered as unexpected_error answers any other."""
    runtime = default_runtime()
    runtime.client_auth = ClientAuthentication(Path("client-ca.crt"))
    environ = EnvironBuilder(path="/validate", method="POST", content_type="application/json",
                             data=b"{}").get_environ()
    # A TLS socket that never connected: asking it for the client's certificate raises.
    environ["gunicorn.socket"] = _socket.socket.__new__(ssl.SSLSocket)
    app_iter, status_line, headers = run_wsgi_app(create_app(runtime), environ)
    assert status_line == "500 INTERNAL SERVER ERROR"
    assert headers["Content-Type"] == "application/json"
    answer = json.loads(b"".join(app_iter))
    assert (answer["kind"], answer["code"], answer["reason"]) == ("Status", 500, "InternalError")
    assert answer["message"].startswith("internal error in the webhook: AttributeError: ")
    assert runtime.body_budget.in_use == 0
