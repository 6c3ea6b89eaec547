"""What the API server prunes from and defaults into a v2beta1 MPIJob, with hints."""
from __future__ import annotations

from policies.mpijob.pruning_defaulting import PrunedField, as_admitted
from testing.builders import mpijob


def test_a_valid_job_loses_nothing():
    job = mpijob("pi")
    admitted, pruned = as_admitted(job)
    assert pruned == []
    assert admitted == job


def test_unknown_fields_are_pruned_with_the_likely_intended_field():
    job = mpijob("pi", cleanPodPolicy="All", slotPerWorker=2)
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    worker["spec"]["containers"][0]["resource"] = {"limits": {"cpu": 1}}
    worker["metadata"] = {"labelz": {"a": "b"}}
    admitted, pruned = as_admitted(job)
    container = "spec.mpiReplicaSpecs[Worker].template.spec.containers[0]"
    assert sorted(pruned, key=lambda p: p.path) == [
        PrunedField("spec.cleanPodPolicy", "spec.runPolicy.cleanPodPolicy"),
        PrunedField("spec.mpiReplicaSpecs[Worker].template.metadata.labelz",
                    "spec.mpiReplicaSpecs[Worker].template.metadata.labels"),
        PrunedField(f"{container}.resource", f"{container}.resources"),
        PrunedField("spec.slotPerWorker", "spec.slotsPerWorker"),
    ]
    assert "cleanPodPolicy" not in admitted["spec"]
    assert job["spec"]["cleanPodPolicy"] == "All"  # the input is left alone
    [clean] = [p for p in pruned if p.path == "spec.cleanPodPolicy"]
    assert clean.message == ("unknown field: the API server drops it from a kubeflow.org/v2beta1 MPIJob; "
                             "did you mean spec.runPolicy.cleanPodPolicy?")


def test_a_field_with_no_likely_match_has_no_suggestion():
    _, pruned = as_admitted(mpijob("pi", zzzqqq=1))
    assert pruned == [PrunedField("spec.zzzqqq", None)]
    assert pruned[0].message == "unknown field: the API server drops it from a kubeflow.org/v2beta1 MPIJob"


def test_schema_defaults_are_filled_in_and_nulls_dropped():
    job = mpijob("pi", slots=None)
    del job["spec"]["mpiImplementation"]
    job["spec"]["runPolicy"]["backoffLimit"] = None
    admitted, pruned = as_admitted(job)
    assert pruned == []
    assert admitted["spec"]["slotsPerWorker"] == 1
    assert admitted["spec"]["mpiImplementation"] == "OpenMPI"
    assert "backoffLimit" not in admitted["spec"]["runPolicy"]


def test_the_objects_own_metadata_is_kept_as_is():
    job = mpijob("pi")
    job["metadata"]["labels"] = {"a": "b"}
    job["metadata"]["somethingElse"] = 1
    admitted, pruned = as_admitted(job)
    assert pruned == []
    assert admitted["metadata"] == job["metadata"]
