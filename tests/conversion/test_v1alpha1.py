"""v1alpha1 → v2beta1 as the v1alpha1 operator ran the job, and v2beta1 → v1alpha1."""
from __future__ import annotations

import json

import pytest

from policies.conversion import PROBLEMS_ANNOTATION, ConversionOptions, Severity, convert
from policies.conversion.notes import current_problems
from policies.conversion.v1alpha1 import launcher_on_master_affinity, launcher_on_master_tolerations
from tests.conversion.common import HUB, without_stash

V1ALPHA1 = "kubeflow.org/v1alpha1"
TEMPLATE = {"spec": {"containers": [{"name": "bench", "image": "mpioperator/tensorflow-benchmarks:0.3.0",
                                     "command": ["mpirun", "python", "bench.py"], "args": ["--fp16"]}]}}


def job(**spec) -> dict:
    return {"apiVersion": V1ALPHA1, "kind": "MPIJob", "metadata": {"name": "bench", "namespace": "team-a"},
            "spec": {"template": TEMPLATE, **spec}}


def hub(obj: dict, **options) -> dict:
    return convert(obj, HUB, ConversionOptions(**options)).obj


def worker(converted: dict) -> dict:
    return converted["spec"]["mpiReplicaSpecs"]["Worker"]


def worker_limits(converted: dict) -> dict:
    return worker(converted)["template"]["spec"]["containers"][0].get("resources", {}).get("limits", {})


@pytest.mark.parametrize(("spec", "per_node", "workers", "units", "slots"), [
    ({"gpus": 16}, 8, 2, 8, 8),
    ({"gpus": 4}, 8, 1, 4, 4),  # below one node: one worker with all of them
    ({"gpus": 1}, 8, 1, 1, 1),
    ({"gpus": 32, "gpusPerNode": 4}, 8, 8, 4, 4),  # the object's capacity wins over the setting
    ({"gpus": 16}, 4, 4, 4, 4),  # the setting, when the object has none
    ({"processingUnits": 24, "processingUnitsPerNode": 8}, 1, 3, 8, 8),
    ({"gpus": 16, "slotsPerWorker": 1}, 8, 2, 8, 1),  # explicit slots win
], ids=["16-gpus", "4-gpus-one-node", "1-gpu", "gpusPerNode", "setting", "processingUnits", "explicit-slots"])
def test_size_from_units(spec, per_node, workers, units, slots):
    converted = hub(job(**spec), gpus_per_node=per_node)
    assert worker(converted)["replicas"] == workers
    assert worker_limits(converted) == {"nvidia.com/gpu": units}
    assert converted["spec"]["slotsPerWorker"] == slots
    assert PROBLEMS_ANNOTATION not in converted["metadata"].get("annotations", {})


def test_processing_resource_type_cpu_sets_a_cpu_limit():
    converted = hub(job(processingUnits=4, processingResourceType="cpu"))
    assert worker_limits(converted) == {"cpu": 4}


def test_replicas_keep_the_template_resources_and_take_slots_from_them():
    template = {"spec": {"containers": [{**TEMPLATE["spec"]["containers"][0],
                                         "resources": {"limits": {"nvidia.com/gpu": "2", "memory": "8Gi"}}}]}}
    converted = hub(job(replicas=3, template=template))
    assert worker(converted)["replicas"] == 3
    assert worker_limits(converted) == {"nvidia.com/gpu": "2", "memory": "8Gi"}  # as written
    assert converted["spec"]["slotsPerWorker"] == 2


def test_replicas_without_a_processing_limit_have_one_slot():
    assert hub(job(replicas=2))["spec"]["slotsPerWorker"] == 1


def test_launcher_comes_from_the_template_with_its_resources_cleared():
    template = {"spec": {"containers": [{**TEMPLATE["spec"]["containers"][0], "resources": {
        "limits": {"nvidia.com/gpu": 8}, "requests": {"cpu": 2}, "claims": [{"name": "fabric"}]}}]}}
    launcher = hub(job(gpus=16, template=template))["spec"]["mpiReplicaSpecs"]["Launcher"]
    container = launcher["template"]["spec"]["containers"][0]
    assert launcher["replicas"] == 1
    assert container["command"] == ["mpirun", "python", "bench.py"] and container["args"] == ["--fp16"]
    assert container["resources"] == {"claims": [{"name": "fabric"}]}  # only limits and requests go


def test_workers_run_without_the_launchers_command():
    container = worker(hub(job(gpus=16)))["template"]["spec"]["containers"][0]
    assert "command" not in container and "args" not in container
    assert container["image"] == "mpioperator/tensorflow-benchmarks:0.3.0"


@pytest.mark.parametrize(("pod_restart", "launcher_restart"), [
    (None, "OnFailure"), ("Never", "Never"), ("OnFailure", "OnFailure"), ("Always", "OnFailure")])
def test_launcher_restart_policy_is_never_or_on_failure(pod_restart, launcher_restart):
    template = {"spec": {**TEMPLATE["spec"], **({"restartPolicy": pod_restart} if pod_restart else {})}}
    specs = hub(job(gpus=8, template=template))["spec"]["mpiReplicaSpecs"]
    assert specs["Launcher"]["restartPolicy"] == launcher_restart
    assert specs["Worker"]["restartPolicy"] == "OnFailure"


def test_run_policy_and_launcher_creation():
    spec = hub(job(gpus=8))["spec"]
    assert spec["runPolicy"] == {"cleanPodPolicy": "All", "backoffLimit": 6}
    assert spec["launcherCreationPolicy"] == "WaitForWorkersReady"
    spec = hub(job(gpus=8, backoffLimit=2, activeDeadlineSeconds=3600))["spec"]
    assert spec["runPolicy"] == {"cleanPodPolicy": "All", "backoffLimit": 2, "activeDeadlineSeconds": 3600}


def test_launcher_on_master_tolerates_and_requires_master_or_control_plane():
    template = {"spec": {**TEMPLATE["spec"], "tolerations": [{"key": "gpu", "operator": "Exists"}]}}
    specs = hub(job(gpus=16, launcherOnMaster=True, template=template))["spec"]["mpiReplicaSpecs"]
    launcher_pod = specs["Launcher"]["template"]["spec"]
    assert launcher_pod["tolerations"] == [
        {"key": "node-role.kubernetes.io/master", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}]
    terms = launcher_pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "node-role.kubernetes.io/master", "operator": "Exists"}]},
                     {"matchExpressions": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]}]
    assert specs["Worker"]["template"]["spec"]["tolerations"] == [{"key": "gpu", "operator": "Exists"}]


def test_no_size_runs_the_launcher_alone():
    converted = convert(job(), HUB)
    assert "Worker" not in converted.obj["spec"]["mpiReplicaSpecs"]
    assert converted.obj["spec"]["runLauncherAsWorker"] is True
    assert [(n.severity, n.field) for n in converted.notes] == [(Severity.ATTENTION, "spec")]


def _problems(converted: dict) -> list[dict]:
    return json.loads(converted["metadata"]["annotations"][PROBLEMS_ANNOTATION])["problems"]


@pytest.mark.parametrize(("spec", "field", "value", "workers", "units", "says"), [
    ({"gpus": 12}, "spec.gpus", 12, 2, 6, "not a multiple of 8 per node"),
    ({"gpus": 20}, "spec.gpus", 20, 4, 5, "e.g. 16 or 24"),
    ({"gpus": 4, "processingUnits": 16}, "spec.gpus", 4, 2, 8, "set together with processingUnits (16)"),
    ({"gpus": 16, "gpusPerNode": 0}, "spec.gpusPerNode", 0, 2, 8, "must be a positive integer"),
    ({"gpus": 0}, "spec.gpus", 0, 1, None, "must be a positive integer"),
], ids=["not-a-multiple", "not-a-multiple-20", "gpus-and-processingUnits", "zero-per-node", "zero-gpus"])
def test_jobs_the_old_operator_refused_still_convert_and_record_why(spec, field, value, workers, units, says):
    converted = hub(job(**spec))
    assert worker(converted)["replicas"] == workers
    assert worker_limits(converted).get("nvidia.com/gpu") == units
    (recorded,) = _problems(converted)
    assert (recorded["field"], recorded["value"]) == (field, value)
    assert says in recorded["message"]
    assert [(p.field, p.value) for p in current_problems(converted)] == [(field, value)]
    assert without_stash(convert(converted, V1ALPHA1).obj) == job(**spec)


def test_a_problem_record_goes_stale_once_the_job_is_resized_in_v2beta1():
    converted = hub(job(gpus=12))
    assert current_problems(converted)
    worker(converted)["replicas"] = 3
    assert current_problems(converted) == []


def test_a_fixed_v1alpha1_job_loses_its_problem_record():
    broken = hub(job(gpus=12))
    view = convert(broken, V1ALPHA1).obj
    view["spec"]["gpus"] = 16
    fixed = convert(view, HUB).obj
    assert current_problems(fixed) == []
    assert worker(fixed)["replicas"] == 2 and worker_limits(fixed) == {"nvidia.com/gpu": 8}


def test_hub_to_v1alpha1_shares_one_template_running_the_launchers_command():
    obj = {"apiVersion": HUB, "kind": "MPIJob", "metadata": {"name": "pi"}, "spec": {
        "slotsPerWorker": 2, "runPolicy": {"backoffLimit": 3, "activeDeadlineSeconds": 60},
        "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "restartPolicy": "Never", "template": {"spec": {
                "containers": [{"name": "l", "image": "i", "command": ["mpirun"], "args": ["-n", "4", "pi"]}],
                "tolerations": launcher_on_master_tolerations(), "affinity": launcher_on_master_affinity()}}},
            "Worker": {"replicas": 2, "template": {"spec": {
                "containers": [{"name": "w", "image": "i", "command": ["/usr/sbin/sshd", "-De"],
                                "resources": {"limits": {"nvidia.com/gpu": 2}}}]}}}}}}
    spec = without_stash(convert(obj, V1ALPHA1).obj)["spec"]
    assert spec == {
        "replicas": 2,
        "template": {"spec": {"containers": [{"name": "w", "image": "i", "command": ["mpirun"], "args": ["-n", "4", "pi"],
                                              "resources": {"limits": {"nvidia.com/gpu": 2}}}],
                              "restartPolicy": "Never"}},
        "slotsPerWorker": 2, "backoffLimit": 3, "activeDeadlineSeconds": 60, "launcherOnMaster": True}


@pytest.mark.parametrize(("launcher_status", "replica_statuses", "condition"), [
    ("Active", {"Launcher": {"active": 1}, "Worker": {"active": 2}}, ("Running", "MPIJobRunning", "2026-11-21T14:00:00Z")),
    ("Succeeded", {"Launcher": {"succeeded": 1}, "Worker": {"active": 2}}, ("Succeeded", "MPIJobSucceeded", "2026-11-21T15:00:00Z")),
    ("Failed", {"Launcher": {"failed": 1}, "Worker": {"active": 2}}, ("Failed", "MPIJobFailed", "2026-11-21T15:00:00Z")),
])
def test_status_both_ways(launcher_status, replica_statuses, condition):
    status = {"launcherStatus": launcher_status, "workerReplicas": 2,
              "startTime": "2026-11-21T14:00:00Z", "completionTime": "2026-11-21T15:00:00Z"}
    converted = hub({**job(gpus=16), "status": status})["status"]
    kind, reason, since = condition
    assert converted["replicaStatuses"] == replica_statuses
    assert converted["conditions"] == [{"type": kind, "status": "True", "reason": reason, "lastTransitionTime": since}]
    stored = {"apiVersion": HUB, "kind": "MPIJob", "metadata": {"name": "bench"}, "spec": {}, "status": converted}
    assert convert(stored, V1ALPHA1).obj["status"] == status


def test_hub_status_from_conditions_when_the_launcher_count_is_gone():
    stored = {"apiVersion": HUB, "kind": "MPIJob", "metadata": {"name": "bench"}, "spec": {}, "status": {
        "conditions": [{"type": "Running", "status": "False"}, {"type": "Succeeded", "status": "True"}]}}
    assert without_stash(convert(stored, V1ALPHA1).obj)["status"] == {"launcherStatus": "Succeeded"}


def test_unknown_and_odd_fields_never_fail_and_come_back():
    odd = job(gpus="sixteen", replicas=-1, template="not a template", gpu=8)
    converted = convert(odd, HUB)
    assert {(n.severity, n.field) for n in converted.notes} == {
        (Severity.PROBLEM, "spec.gpus"), (Severity.ATTENTION, "spec.gpu")}
    assert without_stash(convert(converted.obj, V1ALPHA1).obj) == odd


def test_json_types_survive_a_round_trip_exactly():
    """``true`` is not ``1`` and ``8.0`` is not ``8`` in JSON, though Python's == says so."""
    odd = job(gpus="8", replicas=True, slotsPerWorker=8.0)
    back = convert(convert(odd, HUB).obj, V1ALPHA1).obj
    assert json.dumps(without_stash(back), sort_keys=True) == json.dumps(odd, sort_keys=True)
