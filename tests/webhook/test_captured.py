"""Every AdmissionReview recorded from a Kubernetes 1.36 API server, through /validate and /mutate
with every rule and mutation of the registry (no cluster): the exact decision for each, the
answer in the version received for the same uid, and every patch applied with jsonpatch.
ConversionReview recordings are the conversion tests' business."""
from __future__ import annotations

import base64
import copy
import json
from dataclasses import dataclass
from typing import Any

import jsonpatch
import pytest

from policies.registry import RULES
from policies.mpijob.crd_type_check import check_shape
from tests.conftest import ROOT, captured_reviews
from testing.app_client import ProbeRule, webhook

RECORDED = {name: review for name, review in captured_reviews().items() if review.get("kind") == "AdmissionReview"}


@dataclass(frozen=True)
class Expected:
    validate: str  # the Decision.reason of /validate: checked | unchanged-spec | skipped-operation | …
    mutate: str
    patched: bool = False  # /mutate answers with a patch
    version: str = "admission.k8s.io/v1"


CHECKED_AND_PATCHED = Expected("checked", "checked", patched=True)
UNTOUCHED = Expected("skipped-operation", "skipped-operation")
EXPECTED = {
    "01-create-dryrun-mutating.request.json": CHECKED_AND_PATCHED,
    "01-create-dryrun-validating.request.json": CHECKED_AND_PATCHED,
    "02-create-mutating.request.json": CHECKED_AND_PATCHED,
    "02-create-validating.request.json": CHECKED_AND_PATCHED,
    "03b-label-v2beta1-validating.request.json": Expected("unchanged-spec", "skipped-operation"),
    "04b-patch-spec-v2beta1-validating.request.json": Expected("checked", "skipped-operation"),
    "05b-status-patch-v2beta1-validating.request.json": UNTOUCHED,
    "06c-ssa-create-validating.request.json": CHECKED_AND_PATCHED,
    # written in v1alpha1, sent as written: checked in its v2beta1 form, patched only in v2beta1
    "07-create-v1alpha1-mutating.request.json": Expected("checked", "older-version"),
    # written in v1alpha1, converted by the API server for a v2beta1 registration (matchPolicy Equivalent)
    "07-create-v1alpha1-validating-v2beta1only.request.json": CHECKED_AND_PATCHED,
    "09b-delete-v2beta1-validating.request.json": UNTOUCHED,
    "09c-delete-dryrun-validating.request.json": UNTOUCHED,
    "10-create-impersonated-validating.request.json": CHECKED_AND_PATCHED,
    "10b-create-as-serviceaccount-validating.request.json": CHECKED_AND_PATCHED,
    "11-create-generatename-mutating.request.json": CHECKED_AND_PATCHED,
    "11-create-generatename-validating.request.json": CHECKED_AND_PATCHED,
    "13-create-v1beta1-review-validating-v1beta1.request.json": Expected(
        "checked", "checked", patched=True, version="admission.k8s.io/v1beta1"),
}


def test_every_recorded_admission_review_has_an_expected_decision():
    assert set(RECORDED) == set(EXPECTED)
    assert len(RECORDED) >= 17


def rule_warnings(response: dict[str, Any]) -> list[str]:
    """Warnings from rules ("[rule-id] …"), other than the note that cluster checks were skipped."""
    return [w for w in response.get("warnings", []) if w.startswith("[") and not w.startswith("[cluster-state]")]


@pytest.mark.parametrize("name", EXPECTED)
def test_validate_gives_the_expected_decision(name: str):
    review, expected = RECORDED[name], EXPECTED[name]
    served = webhook()
    answer = served.review("/validate", copy.deepcopy(review))
    response = answer["response"]
    assert (answer["apiVersion"], answer["kind"], response["uid"]) == (
        expected.version, "AdmissionReview", review["request"]["uid"])
    assert (response["allowed"], "status" in response, served.last.reason) == (True, False, expected.validate)
    assert rule_warnings(response) == []  # the recorded jobs are clean
    if expected.validate != "checked":
        assert response == {"uid": review["request"]["uid"], "allowed": True}  # untouched: nothing to say


@pytest.mark.parametrize("name", EXPECTED)
def test_mutate_gives_the_expected_decision_and_a_patch_that_applies(name: str):
    review, expected = RECORDED[name], EXPECTED[name]
    served = webhook()
    answer = served.review("/mutate", copy.deepcopy(review))
    response = answer["response"]
    assert (answer["apiVersion"], response["uid"]) == (expected.version, review["request"]["uid"])
    assert (response["allowed"], "status" in response, served.last.reason) == (True, False, expected.mutate)
    assert ("patch" in response) == expected.patched
    if not expected.patched:
        assert response == {"uid": review["request"]["uid"], "allowed": True}
        return
    assert response["patchType"] == "JSONPatch"
    original = review["request"]["object"]
    patched = jsonpatch.apply_patch(original, json.loads(base64.b64decode(response["patch"])))
    assert patched != original and check_shape(patched) == []
    # what /mutate made is still admitted by /validate
    after = copy.deepcopy(review)
    after["request"]["object"] = patched
    assert webhook().review("/validate", after)["response"]["allowed"] is True


@pytest.mark.parametrize("path", ["/validate", "/mutate"])
def test_dry_run_recordings_are_answered_like_the_real_ones(path: str):
    real, dry = RECORDED["02-create-validating.request.json"], RECORDED["01-create-dryrun-validating.request.json"]
    assert dry["request"]["dryRun"] is True and real["request"]["dryRun"] is False
    real_response = webhook().review(path, real)["response"]
    dry_response = webhook().review(path, dry)["response"]
    assert {**dry_response, "uid": None} == {**real_response, "uid": None}


def probe_served() -> tuple[ProbeRule, Any]:
    """The registry's rules plus a probe that records what the rules are given."""
    probe = ProbeRule("probe")
    return probe, webhook(rules=(*RULES, probe))


def test_rules_see_generate_name_as_its_prefix_and_five_characters():
    probe, served = probe_served()
    assert served.review("/validate", RECORDED["11-create-generatename-mutating.request.json"])["response"]["allowed"]
    assert [(ctx.name, ctx.generated_name) for ctx in probe.seen] == [("pi-gen-xxxxx", True)]
    served.review("/validate", RECORDED["11-create-generatename-validating.request.json"])
    assert [(ctx.name, ctx.generated_name) for ctx in probe.seen[1:]] == [("pi-gen-s47w4", False)]


def with_generate_name(prefix: str) -> dict[str, Any]:
    review = copy.deepcopy(RECORDED["11-create-generatename-mutating.request.json"])
    review["request"]["object"]["metadata"]["generateName"] = prefix
    return review


def test_job_name_rule_counts_the_five_generated_characters():
    # 2 workers: the last pod is "<name>-worker-1", so a name may have 54 characters and a prefix 49
    allowed = webhook().review("/validate", with_generate_name("p" * 48 + "-"))["response"]
    assert allowed["allowed"] is True
    denied = webhook().review("/validate", with_generate_name("p" * 49 + "-"))["response"]
    assert denied["allowed"] is False
    (cause,) = denied["status"]["details"]["causes"]
    assert cause["field"] == "metadata.generateName"
    assert cause["message"].startswith(f'[job-name] Invalid value: "{"p" * 49}-": ')
    assert "the prefix may be at most 49 characters: it is too long by 1" in cause["message"]


def test_rules_see_who_asked():
    probe, served = probe_served()
    served.review("/validate", RECORDED["10-create-impersonated-validating.request.json"])
    served.review("/validate", RECORDED["10b-create-as-serviceaccount-validating.request.json"])
    assert [(ctx.user.username, ctx.user.groups) for ctx in probe.seen] == [
        ("alice", ("data-scientists", "system:authenticated")),
        ("system:serviceaccount:team-a:default",
         ("system:serviceaccounts", "system:serviceaccounts:team-a", "system:authenticated"))]


def test_update_that_changes_the_spec_is_checked_against_the_old_object():
    probe, served = probe_served()
    review = RECORDED["04b-patch-spec-v2beta1-validating.request.json"]
    served.review("/validate", review)
    (ctx,) = probe.seen
    assert ctx.operation == "UPDATE"
    assert ctx.job["spec"]["slotsPerWorker"] != ctx.old_job["spec"]["slotsPerWorker"]
    assert ctx.old_job["metadata"]["name"] == review["request"]["oldObject"]["metadata"]["name"]


def test_v1alpha1_create_seen_through_a_v2beta1_registration_is_checked_in_its_v2beta1_form():
    """The API server converted it (requestKind v1alpha1, kind v2beta1) and sent the converter's
    output as it is: not pruned, not defaulted, with the v1alpha1 fields still in the spec."""
    review = RECORDED["07-create-v1alpha1-validating-v2beta1only.request.json"]
    sent = review["request"]
    assert (sent["kind"]["version"], sent["requestKind"]["version"]) == ("v2beta1", "v1alpha1")
    assert {"replicas", "template"} <= set(sent["object"]["spec"])
    assert "sshAuthMountPath" not in sent["object"]["spec"]
    probe, served = probe_served()
    assert served.review("/validate", review)["response"]["allowed"] is True
    (ctx,) = probe.seen
    workers = ctx.job["spec"]["mpiReplicaSpecs"]["Worker"]
    assert (workers["replicas"], workers["template"]["spec"]["containers"][0]["resources"]["limits"]) == (
        4, {"nvidia.com/gpu": 4})
    assert ctx.job["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"] == 1


def test_the_shipped_example_is_the_recorded_create():
    example = json.loads((ROOT / "examples" / "review-pi.json").read_text())
    assert example == RECORDED["02-create-validating.request.json"]
