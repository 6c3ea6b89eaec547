"""v1alpha2 and v1 ↔ v2beta1: top-level cleanPodPolicy and lifecycle fields, mpiDistribution,
mainContainer."""
from __future__ import annotations


import pytest

from policies.conversion import PROBLEMS_ANNOTATION, Severity, convert
from policies.conversion.notes import current_problems
from tests.conversion.common import HUB, stash_of, without_stash

V1ALPHA2, V1 = "kubeflow.org/v1alpha2", "kubeflow.org/v1"
REPLICATED = (V1ALPHA2, V1)


def replica(*names: str) -> dict:
    return {"replicas": 1, "template": {"spec": {"containers": [{"name": n, "image": "i"} for n in names]}}}


def job(version: str, **spec) -> dict:
    return {"apiVersion": version, "kind": "MPIJob", "metadata": {"name": "mnist"},
            "spec": {"mpiReplicaSpecs": {"Launcher": replica("mpi"), "Worker": {**replica("mpi"), "replicas": 2}}, **spec}}


def hub_spec(obj: dict) -> dict:
    return convert(obj, HUB).obj["spec"]


@pytest.mark.parametrize("version", REPLICATED)
@pytest.mark.parametrize(("spec", "run_policy"), [
    ({"cleanPodPolicy": "Running"}, {"cleanPodPolicy": "Running"}),
    ({"cleanPodPolicy": "All", "runPolicy": {"ttlSecondsAfterFinished": 60}}, {"cleanPodPolicy": "All", "ttlSecondsAfterFinished": 60}),
    ({"runPolicy": {"cleanPodPolicy": "None"}}, {"cleanPodPolicy": "None"}),
    ({"cleanPodPolicy": "All", "runPolicy": {"cleanPodPolicy": "All"}}, {"cleanPodPolicy": "All"}),
    ({"backoffLimit": 3, "activeDeadlineSeconds": 600}, {"backoffLimit": 3, "activeDeadlineSeconds": 600}),
    ({"backoffLimit": 3, "runPolicy": {"backoffLimit": 1}}, {"backoffLimit": 1}),  # runPolicy takes precedence
], ids=["top-level", "merged", "nested", "same-both", "legacy-lifecycle", "runPolicy-wins"])
def test_run_policy_gets_the_top_level_fields(version, spec, run_policy):
    converted = hub_spec(job(version, **spec))
    assert converted["runPolicy"] == run_policy
    assert "cleanPodPolicy" not in converted and "backoffLimit" not in converted


@pytest.mark.parametrize("version", REPLICATED)
def test_contradicting_clean_pod_policies_convert_with_run_policy_and_record_the_problem(version):
    obj = job(version, cleanPodPolicy="All", runPolicy={"cleanPodPolicy": "Running"})
    converted = convert(obj, HUB).obj
    assert converted["spec"]["runPolicy"] == {"cleanPodPolicy": "Running"}
    (recorded,) = current_problems(converted)
    assert (recorded.source, recorded.field, recorded.value) == (version, "spec.cleanPodPolicy", "All")
    assert "contradicts spec.runPolicy.cleanPodPolicy (Running)" in recorded.message
    assert without_stash(convert(converted, version).obj) == obj


@pytest.mark.parametrize("version", REPLICATED)
def test_hub_to_older_puts_clean_pod_policy_where_either_reader_finds_it(version):
    hub = {"apiVersion": HUB, "kind": "MPIJob", "metadata": {"name": "mnist"},
           "spec": {"runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 2}, "mpiReplicaSpecs": {}}}
    spec = convert(hub, version).obj["spec"]
    assert spec["cleanPodPolicy"] == "Running"
    assert spec["runPolicy"] == {"cleanPodPolicy": "Running", "backoffLimit": 2}


@pytest.mark.parametrize(("distribution", "implementation"), [
    ("OpenMPI", "OpenMPI"), ("IntelMPI", "Intel"), ("MPICH", "MPICH"), ("intel_mpi", "Intel"), ("open_mpi", "OpenMPI")])
def test_mpi_distribution_becomes_mpi_implementation(distribution, implementation):
    obj = job(V1ALPHA2, mpiDistribution=distribution)
    converted = convert(obj, HUB).obj
    assert converted["spec"]["mpiImplementation"] == implementation
    assert without_stash(convert(converted, V1ALPHA2).obj) == obj


@pytest.mark.parametrize(("implementation", "distribution"), [("OpenMPI", "OpenMPI"), ("Intel", "IntelMPI"), ("MPICH", "MPICH")])
def test_mpi_implementation_becomes_mpi_distribution_in_v1alpha2_only(implementation, distribution):
    hub = {"apiVersion": HUB, "kind": "MPIJob", "metadata": {"name": "mnist"},
           "spec": {"mpiImplementation": implementation, "mpiReplicaSpecs": {}}}
    assert convert(hub, V1ALPHA2).obj["spec"]["mpiDistribution"] == distribution
    v1 = convert(hub, V1).obj
    assert "mpiDistribution" not in v1["spec"] and "mpiImplementation" not in v1["spec"]
    assert stash_of(v1) is not None  # held for the way back
    assert convert(v1, HUB).obj == hub


def test_an_unknown_mpi_distribution_is_a_recorded_problem():
    converted = convert(job(V1ALPHA2, mpiDistribution="LAM"), HUB)
    assert "mpiImplementation" not in converted.obj["spec"]
    assert [(n.severity, n.field, n.value) for n in converted.notes] == [(Severity.PROBLEM, "spec.mpiDistribution", "LAM")]
    assert PROBLEMS_ANNOTATION in converted.obj["metadata"]["annotations"]


@pytest.mark.parametrize("version", REPLICATED)
def test_main_container_is_kept_for_the_way_back_and_the_order_never_changes(version):
    """The old operators, like v2beta1, set MPI up in the first container: the order is theirs."""
    obj = job(version, mainContainer="mpi")
    obj["spec"]["mpiReplicaSpecs"] = {"Launcher": replica("log-shipper", "mpi"), "Worker": replica("mpi", "log-shipper")}
    converted = convert(obj, HUB)
    assert converted.obj["spec"]["mpiReplicaSpecs"] is obj["spec"]["mpiReplicaSpecs"]  # shared, not copied
    assert "mainContainer" not in converted.obj["spec"]
    (note,) = converted.notes
    assert (note.severity, note.field) == (Severity.ATTENTION, "spec.mainContainer")
    assert "'mpi' is not the launcher's first container" in note.message
    assert without_stash(convert(converted.obj, version).obj) == obj


def test_a_main_container_that_is_first_needs_nothing():
    assert convert(job(V1, mainContainer="mpi"), HUB).notes == ()


def test_unsupported_restart_policies_need_attention():
    obj = job(V1)
    obj["spec"]["mpiReplicaSpecs"]["Worker"]["restartPolicy"] = "Always"
    converted = convert(obj, HUB)
    assert converted.obj["spec"]["mpiReplicaSpecs"]["Worker"]["restartPolicy"] == "Always"  # faithful
    assert [(n.severity, n.field) for n in converted.notes] == [
        (Severity.ATTENTION, "spec.mpiReplicaSpecs[Worker].restartPolicy")]


def test_v1_status_passes_through():
    status = {"conditions": [{"type": "Running", "status": "True"}], "replicaStatuses": {"Worker": {"active": 2}},
              "startTime": "2026-11-21T14:00:00Z"}
    obj = {**job(V1), "status": status}
    assert convert(obj, HUB).obj["status"] == status
