"""POST /convert: whole ConversionReview answers, for the recorded reviews and every error path."""
from __future__ import annotations

import copy
import json

import pytest
import yaml

from policies.conversion import ConversionOptions, convert
from tests.conftest import UPSTREAM, captured_reviews
from tests.conversion.common import HUB
from testing.app_client import webhook
from webhook.bootstrap import ServeOptions, build_runtime
from webhook.conversion_review import ConversionWebhook, parse_conversion_review

RECORDED = {name: review for name, review in captured_reviews().items() if "conversion" in name}
V1ALPHA1_JOB = yaml.safe_load((UPSTREAM / "v1alpha1" / "tensorflow-benchmarks-gpus16.yaml").read_text())
V1_JOB = yaml.safe_load((UPSTREAM / "v1" / "horovod-tensorflow-mnist.yaml").read_text())
HUB_JOB = yaml.safe_load((UPSTREAM / "v2beta1" / "pi.yaml").read_text())


def conversion_review(desired: object, *objects: object, api_version: str = "apiextensions.k8s.io/v1",
                      uid: str = "705ab4f5-6393-11e8-b7cc-42010a800002") -> dict:
    return {"apiVersion": api_version, "kind": "ConversionReview",
            "request": {"uid": uid, "desiredAPIVersion": desired, "objects": list(objects)}}


def post(review: object) -> tuple[int, dict]:
    return webhook().post("/convert", review)


def success(review: dict, converted: list) -> dict:
    return {"apiVersion": review["apiVersion"], "kind": "ConversionReview",
            "response": {"uid": review["request"]["uid"], "convertedObjects": converted, "result": {"status": "Success"}}}


def failure(review: dict, message: str) -> dict:
    return {"apiVersion": review["apiVersion"], "kind": "ConversionReview",
            "response": {"uid": review["request"]["uid"], "convertedObjects": [],
                         "result": {"status": "Failed", "message": message}}}


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_recorded_reviews_are_answered_in_their_version_with_every_object_converted(name):
    review = RECORDED[name]
    request = review["request"]
    status, answer = post(review)
    assert status == 200
    expected = [convert(obj, request["desiredAPIVersion"]).obj for obj in request["objects"]]
    assert answer == success(review, expected)
    for before, after in zip(request["objects"], answer["response"]["convertedObjects"]):
        assert after["apiVersion"] == request["desiredAPIVersion"]
        assert after["kind"] == before["kind"]
        for key in ("uid", "name", "namespace", "managedFields", "creationTimestamp", "generation"):
            assert after["metadata"].get(key) == before["metadata"].get(key)


def test_the_recorded_v1alpha1_create_becomes_four_workers_of_four_gpus():
    review = RECORDED["07-create-v1alpha1-conversion-1.request.json"]
    _, answer = post(review)
    (hub,) = answer["response"]["convertedObjects"]
    assert hub["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 4
    assert hub["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] == {
        "limits": {"nvidia.com/gpu": 4}}
    assert "replicas" not in hub["spec"] and "template" not in hub["spec"]  # no v1alpha1 leftovers
    back = convert(hub, "kubeflow.org/v1alpha1").obj
    assert back == review["request"]["objects"][0]


def test_the_recorded_read_as_v1alpha1_through_a_v1beta1_review_comes_back_whole():
    review = RECORDED["08f-get-one-v1alpha1-v1beta1-review-conversion.request.json"]
    _, answer = post(review)
    assert answer["apiVersion"] == "apiextensions.k8s.io/v1beta1"
    (old,) = answer["response"]["convertedObjects"]
    assert old["status"] == {"launcherStatus": "Active", "workerReplicas": 2, "startTime": "2026-11-21T14:00:00Z"}
    # and written back (e.g. kubectl edit in v1alpha1 changing nothing): the stored object, exactly
    _, again = post(conversion_review(HUB, old, api_version="apiextensions.k8s.io/v1beta1"))
    assert again["response"]["convertedObjects"] == review["request"]["objects"]


def test_mixed_versions_in_one_review_keep_their_order():
    objects = [V1ALPHA1_JOB, HUB_JOB, V1_JOB, convert(HUB_JOB, "kubeflow.org/v1alpha2").obj]
    review = conversion_review("kubeflow.org/v1alpha2", *objects)
    status, answer = post(review)
    assert status == 200
    assert answer == success(review, [convert(obj, "kubeflow.org/v1alpha2").obj for obj in objects])
    converted = answer["response"]["convertedObjects"]
    assert [o["metadata"]["name"] for o in converted] == ["tensorflow-benchmarks-16", "pi", "tensorflow-mnist", "pi"]
    assert converted[3] == converted[1]  # already v1alpha2: unchanged, stash and all
    assert {o["apiVersion"] for o in converted} == {"kubeflow.org/v1alpha2"}


def test_an_empty_review_succeeds():
    review = conversion_review(HUB)
    assert post(review) == (200, success(review, []))


@pytest.mark.parametrize(("bad", "message"), [
    ([1, 2], "objects[1]: expected an MPIJob object, got a list"),
    ({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "x"}},
     "objects[1] (v1 ConfigMap x/c): expected kind MPIJob, got 'ConfigMap'"),
    ({**V1_JOB, "apiVersion": "kubeflow.org/v3"},
     "objects[1] (kubeflow.org/v3 MPIJob tensorflow-mnist): apiVersion 'kubeflow.org/v3' is not an MPIJob "
     "version this webhook converts (kubeflow.org/v2beta1, kubeflow.org/v1alpha1, kubeflow.org/v1alpha2, kubeflow.org/v1)"),
    ({**V1_JOB, "metadata": "x"}, "objects[1]: metadata must be an object"),
    (None, "objects[1]: expected an MPIJob object, got null"),
], ids=["list", "configmap", "unknown-version", "bad-metadata", "null"])
def test_a_malformed_object_fails_the_review_naming_it(bad, message):
    review = conversion_review(HUB, V1_JOB, bad, V1ALPHA1_JOB)
    assert post(review) == (200, failure(review, message))


@pytest.mark.parametrize("desired", ["kubeflow.org/v3", "batch/v1", "v2beta1", None, 7])
def test_an_unknown_desired_version_fails_the_review(desired):
    review = conversion_review(desired, V1_JOB)
    assert post(review) == (200, failure(review, (
        f"cannot convert to {desired!r}: supported versions are kubeflow.org/v2beta1, kubeflow.org/v1alpha1, "
        "kubeflow.org/v1alpha2, kubeflow.org/v1")))


def test_a_converter_bug_fails_the_review_with_its_reason_not_a_500(monkeypatch, caplog):
    def broken(obj, desired, options):
        raise KeyError("spec")

    monkeypatch.setattr("webhook.conversion_review.convert", broken)
    review = conversion_review(HUB, V1_JOB)
    assert post(review) == (200, failure(
        review, "objects[0] (kubeflow.org/v1 MPIJob tensorflow-mnist): internal error: KeyError: 'spec'"))
    assert any("converting objects[0]" in m for m in caplog.messages)


@pytest.mark.parametrize(("body", "status", "message"), [
    ({"apiVersion": "apiextensions.k8s.io/v1", "kind": "AdmissionReview", "request": {}}, 400,
     "expected kind ConversionReview, got 'AdmissionReview'"),
    ({"apiVersion": "apiextensions.k8s.io/v2", "kind": "ConversionReview", "request": {}}, 400,
     "unsupported ConversionReview apiVersion 'apiextensions.k8s.io/v2'; supported: apiextensions.k8s.io/v1, "
     "apiextensions.k8s.io/v1beta1"),
    ({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview"}, 400, "ConversionReview has no request object"),
    ({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
      "request": {"desiredAPIVersion": HUB, "objects": []}}, 400, "ConversionReview request has no uid"),
    ({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
      "request": {"uid": "u", "desiredAPIVersion": HUB, "objects": {}}}, 400, "ConversionReview request.objects must be a list"),
    ([], 400, "expected a JSON object of kind ConversionReview"),
], ids=["wrong-kind", "wrong-version", "no-request", "no-uid", "objects-not-a-list", "not-an-object"])
def test_a_bad_envelope_is_a_4xx_with_a_reason(body, status, message):
    assert post(body) == (status, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status,
                                   "reason": "BadRequest", "message": message})


def test_not_json_wrong_content_type_and_huge_bodies_are_refused_like_admission_reviews():
    served = webhook()
    status, answer = served.post("/convert", b"{nope")
    assert (status, answer["reason"]) == (400, "BadRequest")
    assert answer["message"].startswith("request body is not valid JSON")
    status, answer = served.post("/convert", conversion_review(HUB), content_type="text/plain")
    assert (status, answer["reason"]) == (415, "UnsupportedMediaType")
    huge = json.dumps(conversion_review(HUB, {"pad": "x" * (7 * 1024 * 1024)}))
    status, answer = served.post("/convert", huge)
    assert (status, answer["reason"]) == (413, "RequestEntityTooLarge")


def test_round_trip_through_the_route():
    review = conversion_review("kubeflow.org/v1alpha1", HUB_JOB)
    _, answer = post(review)
    (old,) = answer["response"]["convertedObjects"]
    _, back = post(conversion_review(HUB, old))
    assert back["response"]["convertedObjects"] == [HUB_JOB]


def test_the_served_process_converts_with_its_gpus_per_node_and_counts_conversions():
    runtime = build_runtime(ServeOptions(dev=True, gpus_per_node=4, audit_log=False))
    assert runtime.conversion.options == ConversionOptions(gpus_per_node=4)
    hub = runtime.admission.to_hub(V1ALPHA1_JOB)  # 16 GPUs over 4-GPU nodes
    assert hub["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 4
    seen = []
    runtime.conversion.observers.append(lambda *labels: seen.append(labels))
    answer = runtime.conversion.review(parse_conversion_review(conversion_review(HUB, V1ALPHA1_JOB, [1])))
    assert answer["response"]["result"]["status"] == "Failed"
    assert seen == [("kubeflow.org/v1alpha1", HUB, "success"), ("unknown", HUB, "failed")]


def test_a_review_does_not_modify_the_objects_it_was_sent():
    objects = [copy.deepcopy(V1ALPHA1_JOB), copy.deepcopy(HUB_JOB)]
    frozen = copy.deepcopy(objects)
    ConversionWebhook().review(parse_conversion_review(conversion_review("kubeflow.org/v1", *objects)))
    assert objects == frozen
