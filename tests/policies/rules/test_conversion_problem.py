import copy
import json

import pytest

from policies.interface import UNSET, Problem
from policies.conversion import PROBLEMS_ANNOTATION, convert
from policies.rules.conversion_problem import ConversionProblem
from testing.builders import context, mpijob

RULE = ConversionProblem()
TEMPLATE = {"spec": {"containers": [{"name": "bench", "image": "bench:1.0", "command": ["mpirun", "bench"]}]}}


def v1alpha1(**spec) -> dict:
    return {"apiVersion": "kubeflow.org/v1alpha1", "kind": "MPIJob", "metadata": {"name": "bench"},
            "spec": {"template": TEMPLATE, **spec}}


def hub(obj: dict) -> dict:
    return convert(obj, "kubeflow.org/v2beta1").obj


@pytest.mark.parametrize("job", [mpijob(), hub(v1alpha1(gpus=16)), hub(v1alpha1(replicas=2))],
                         ids=["native-v2beta1", "v1alpha1-gpus-16", "v1alpha1-replicas"])
def test_jobs_without_a_recorded_problem_are_clean(job):
    assert list(RULE.check(context(job))) == []


@pytest.mark.parametrize(("spec", "field", "value", "message"), [
    ({"gpus": 12}, "spec.gpus", 12,
     "not a multiple of 8 per node (the webhook's --gpus-per-node; set spec.gpusPerNode to change it); the "
     "v1alpha1 operator refused such jobs. Converted to 2 workers with 6 nvidia.com/gpu each; set spec.gpus to a "
     "multiple of 8 (e.g. 8 or 16) (written as kubeflow.org/v1alpha1)"),
    ({"gpus": 8, "processingUnits": 16}, "spec.gpus", 8,
     "set together with processingUnits (16); the v1alpha1 operator refused such jobs. Converted from "
     "processingUnits; remove spec.gpus (written as kubeflow.org/v1alpha1)"),
    ({"processingUnits": 24, "processingUnitsPerNode": 16}, "spec.processingUnits", 24,
     "not a multiple of 16 per node (spec.processingUnitsPerNode); the v1alpha1 operator refused such jobs. "
     "Converted to 2 workers with 12 nvidia.com/gpu each; set spec.processingUnits to a multiple of 16 "
     "(e.g. 16 or 32) (written as kubeflow.org/v1alpha1)"),
], ids=["not-a-multiple", "both-set", "processing-units"])
def test_a_recorded_problem_is_reported_on_the_field_the_user_wrote(spec, field, value, message):
    (finding,) = RULE.check(context(hub(v1alpha1(**spec))))
    assert (finding.rule, finding.path, finding.value, finding.problem) == ("conversion-problem", field, value,
                                                                              Problem.INVALID)
    assert finding.message == message


def test_a_problem_without_a_value_is_reported_without_one():
    job = hub(v1alpha1(gpus=12))
    record = json.loads(job["metadata"]["annotations"][PROBLEMS_ANNOTATION])
    del record["problems"][0]["value"]
    job["metadata"]["annotations"][PROBLEMS_ANNOTATION] = json.dumps(record)
    (finding,) = RULE.check(context(job))
    assert finding.value is UNSET


def test_a_record_is_stale_once_the_v2beta1_fields_it_is_about_change():
    job = hub(v1alpha1(gpus=12))
    resized = copy.deepcopy(job)
    resized["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {
        "nvidia.com/gpu": 4}
    assert list(RULE.check(context(resized))) == []
    relabelled = copy.deepcopy(job)
    relabelled["metadata"]["labels"] = {"team": "a"}  # unrelated changes keep it current
    assert len(list(RULE.check(context(relabelled)))) == 1


@pytest.mark.parametrize("value", ["not json", "{}", '{"about": [], "fingerprint": "x", "problems": []}', "[]"])
def test_a_damaged_record_is_ignored(value):
    job = mpijob()
    job["metadata"]["annotations"] = {PROBLEMS_ANNOTATION: value}
    assert list(RULE.check(context(job))) == []
