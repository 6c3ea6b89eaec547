"""Older MPIJobs at /validate and /mutate: checked in their v2beta1 form, never patched."""
from __future__ import annotations

import copy

import pytest
import yaml

from policies.conversion import convert
from policies.conversion.v1alpha1 import ADVISORY
from policies.registry import RULES
from testing.builders import admission_review
from tests.conftest import UPSTREAM, captured_reviews
from testing.app_client import ProbeRule, webhook

V1ALPHA1_JOB = yaml.safe_load((UPSTREAM / "v1alpha1" / "tensorflow-benchmarks-gpus16.yaml").read_text())
V1ALPHA2_JOB = yaml.safe_load((UPSTREAM / "v1alpha2" / "horovod-tensorflow-mnist.yaml").read_text())
CONVERTED_NOTE = ("checked as kubeflow.org/v2beta1 (converted from kubeflow.org/v1alpha1); "
                  "field paths refer to that form")


def sized(**spec) -> dict:
    job = copy.deepcopy(V1ALPHA1_JOB)
    job["spec"].update(spec)
    return job


def probe_served():
    probe = ProbeRule("probe")
    return probe, webhook(rules=(*RULES, probe))


def denial(answer: dict) -> tuple[int, list[tuple[str, str]]]:
    status = answer["status"]
    return status["code"], [(c["field"], c["message"].split("]")[0] + "]") for c in status["details"]["causes"]]


def test_a_v1alpha1_create_is_checked_as_v2beta1_and_told_what_its_image_needs():
    probe, served = probe_served()
    answer = served.review("/validate", admission_review(V1ALPHA1_JOB, version="v1alpha1"))["response"]
    assert answer["allowed"] is True
    assert answer["warnings"][:2] == [CONVERTED_NOTE, ADVISORY]
    assert len(ADVISORY) <= 256  # one warning, never truncated by the API server
    (ctx,) = probe.seen
    worker = ctx.job["spec"]["mpiReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 2
    assert ctx.job["spec"]["sshAuthMountPath"] == "/root/.ssh"  # judged as stored: defaulted
    assert served.last.reason == "checked"


def test_a_v1alpha1_job_the_old_operator_refused_is_denied_with_its_v1alpha1_field():
    served = webhook()
    answer = served.review("/validate", admission_review(sized(gpus=12), version="v1alpha1"))["response"]
    assert answer["allowed"] is False
    assert denial(answer) == (422, [("spec.gpus", "[conversion-problem]")])
    assert answer["status"]["message"].startswith(
        'MPIJob.kubeflow.org "tensorflow-benchmarks-16" is invalid: [conversion-problem] spec.gpus: Invalid value: 12: '
        "not a multiple of 8 per node")
    assert CONVERTED_NOTE in answer["warnings"]


def test_a_v1alpha1_job_on_one_node_is_denied_by_the_worker_count_in_v2beta1_terms():
    served = webhook()
    answer = served.review("/validate", admission_review(sized(gpus=4), version="v1alpha1"))["response"]
    assert denial(answer) == (422, [("spec.mpiReplicaSpecs[Worker].replicas", "[worker-count]")])


def test_a_v1alpha2_job_with_contradicting_clean_pod_policies_is_denied():
    job = copy.deepcopy(V1ALPHA2_JOB)
    job["spec"]["runPolicy"] = {"cleanPodPolicy": "All"}
    served = webhook()
    answer = served.review("/validate", admission_review(job, version="v1alpha2"))["response"]
    assert denial(answer) == (422, [("spec.cleanPodPolicy", "[conversion-problem]")])
    assert "written as kubeflow.org/v1alpha2" in answer["status"]["message"]
    assert answer["warnings"][0] == CONVERTED_NOTE.replace("v1alpha1", "v1alpha2")


def test_an_update_converts_the_old_object_too_and_warns_only_on_create():
    probe, served = probe_served()
    old, new = sized(), sized(gpus=32)
    answer = served.review("/validate", admission_review(new, old=old, operation="UPDATE", version="v1alpha1"))
    assert CONVERTED_NOTE not in answer["response"].get("warnings", [])
    (ctx,) = probe.seen
    assert ctx.job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 4
    assert ctx.old_job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2


@pytest.mark.parametrize("version", ["v1alpha1", "v1alpha2", "v1"])
def test_mutate_never_patches_an_older_version(version):
    job = {**copy.deepcopy(V1ALPHA2_JOB), "apiVersion": f"kubeflow.org/{version}"}
    served = webhook()
    answer = served.review("/mutate", admission_review(job, version=version))["response"]
    assert answer == {"uid": answer["uid"], "allowed": True}
    assert served.last.reason == "older-version"


def test_a_v1alpha1_create_seen_through_matchpolicy_equivalent_is_judged_as_it_will_be_stored():
    """The API server's conversion output, as a v2beta1-only registration gets it: not pruned,
    not defaulted. Left-over v1alpha1 fields (the recorded converter kept spec.replicas and
    spec.template) are pruned before the rules see the job."""
    review = captured_reviews()["07-create-v1alpha1-validating-v2beta1only.request.json"]
    probe, served = probe_served()
    answer = served.review("/validate", review)["response"]
    assert answer["allowed"] is True
    assert answer["warnings"][:2] == [CONVERTED_NOTE, ADVISORY]
    (ctx,) = probe.seen
    assert "replicas" not in ctx.job["spec"] and "template" not in ctx.job["spec"]
    assert ctx.job["spec"]["mpiImplementation"] == "OpenMPI"  # defaulted as stored
    assert ctx.job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 4


def test_our_own_conversion_output_seen_through_matchpolicy_equivalent_carries_the_problem():
    """What really happens for a v2beta1 registration: /convert runs first, and its output (with
    the problem record) is what the validating webhook is sent."""
    hub = convert(sized(gpus=12), "kubeflow.org/v2beta1").obj
    review = admission_review(hub)
    review["request"]["requestKind"]["version"] = "v1alpha1"
    answer = webhook().review("/validate", review)["response"]
    assert denial(answer) == (422, [("spec.gpus", "[conversion-problem]")])


def test_a_v2beta1_write_of_a_job_fixed_in_v2beta1_no_longer_reports_the_old_problem():
    hub = convert(sized(gpus=12), "kubeflow.org/v2beta1").obj
    fixed = copy.deepcopy(hub)
    fixed["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 3
    fixed["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {
        "nvidia.com/gpu": 4}
    fixed["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"] = "bench:1.0"
    fixed["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["image"] = "bench:1.0"
    fixed["spec"]["slotsPerWorker"] = 4
    answer = webhook().review("/validate", admission_review(fixed, old=hub, operation="UPDATE"))["response"]
    assert answer["allowed"] is True, answer
