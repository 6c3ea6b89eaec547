"""The shape check every rule stands on: field types of the v2beta1 CRD schema plus the ObjectMeta
fields rules read, each problem named by its field path."""
from __future__ import annotations

import pytest

from policies import messages
from policies.interface import Problem
from policies.mpijob.crd_type_check import check_shape, mpijob_schema
from testing.builders import mpijob
from tests.conftest import upstream_v2beta1_jobs


def lines(job) -> list[str]:
    return [messages.line(f) for f in check_shape(job)]


@pytest.mark.parametrize("name", upstream_v2beta1_jobs())
def test_upstream_examples_have_the_right_shape(name: str):
    assert check_shape(upstream_v2beta1_jobs()[name]) == []


def test_every_wrong_type_is_reported_not_only_the_first():
    job = mpijob()
    job["spec"]["slotsPerWorker"] = "4"
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 2.5
    job["metadata"]["annotations"] = {"a": ["b"]}
    assert lines(job) == [
        '[object-shape] metadata.annotations[a]: Invalid value: "[…]": must be a string, not a list',
        "[object-shape] spec.mpiReplicaSpecs[Worker].replicas: Invalid value: 2.5: must be an integer, not a number",
        '[object-shape] spec.slotsPerWorker: Invalid value: "4": must be an integer, not a string',
    ]


def test_quantities_are_integers_or_strings():
    job = mpijob(worker_resources={"limits": {"cpu": 2, "memory": "4Gi", "nvidia.com/gpu": True}})
    assert lines(job) == [
        "[object-shape] spec.mpiReplicaSpecs[Worker].template.spec.containers[0].resources.limits[nvidia.com/gpu]: "
        'Invalid value: true: must be an integer or a string (a quantity such as 2, "500m" or "4Gi")']


def test_nulls_are_left_to_the_api_server_and_a_missing_spec_is_required():
    job = mpijob()
    job["spec"]["runPolicy"] = None
    assert check_shape(job) == []
    (finding,) = check_shape({"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "pi"}})
    assert (finding.path, finding.problem, finding.message) == (
        "spec", Problem.REQUIRED, "an MPIJob needs a spec with mpiReplicaSpecs")


@pytest.mark.parametrize("obj", [[], "pi", 7, None], ids=["list", "string", "number", "null"])
def test_an_object_that_is_not_a_mapping_is_one_finding(obj):
    (finding,) = check_shape(obj)
    assert (finding.rule, finding.path, finding.message) == (
        "object-shape", "", "the object must be a mapping (a JSON object)")


def test_long_values_are_shortened_in_the_message():
    job = mpijob()
    job["spec"]["sshAuthMountPath"] = 5
    job["metadata"]["name"] = ["x" * 500]
    assert lines(job)[0] == '[object-shape] metadata.name: Invalid value: "[…]": must be a string, not a list'


def test_the_crd_schema_itself_is_left_as_the_crd_has_it():
    """Metadata is the API server's: the CRD schema (also used to prune) declares no fields of it."""
    assert mpijob_schema()["properties"]["metadata"] == {"type": "object"}
