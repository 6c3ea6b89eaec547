import pytest

from policies.interface import Problem
from policies.cluster_view import StaticClusterView
from policies.rules.limit_range import LimitRange
from testing.builders import context, mpijob
from testing.kube_objects import container_limits, limit_range, pod_limits

RULE = LimitRange()
WORKER_C0 = "spec.mpiReplicaSpecs[Worker].template.spec.containers[0]"


def check(job, *ranges):
    return list(RULE.check(context(job, cluster=StaticClusterView(ranges={"team-a": list(ranges)}))))


def worker_job(resources, workers=2):
    return mpijob(workers=workers, worker_resources=resources)


def test_no_limit_range_no_finding():
    assert check(worker_job({"limits": {"cpu": 64}})) == []


def test_container_max_names_the_limit_range_container_value_bound_and_fix():
    lr = limit_range("fpga-limits", container_limits(max={"example.com/fpga": "2", "memory": "64Gi"}))
    findings = check(worker_job({"limits": {"example.com/fpga": 4, "memory": "64Gi"}}), lr)
    (finding,) = [f for f in findings if "Worker" in f.path]
    assert finding.path == f"{WORKER_C0}.resources.limits[example.com/fpga]"
    assert finding.problem is Problem.POLICY
    assert finding.message == ("LimitRange fpga-limits allows at most example.com/fpga 2 per container, but container "
                               "mpi-worker asks 4; lower it to 2 and use more workers for more in total")


def test_gpu_maximum_of_rank_pods_is_left_to_gpus_per_worker():
    """gpus-per-worker reads the same bound and names the LimitRange: one finding per problem."""
    lr = limit_range("gpu-limits", container_limits(max={"nvidia.com/gpu": "4"}))
    job = worker_job({"limits": {"nvidia.com/gpu": 8}})
    assert check(job, lr) == []
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    launcher["resources"] = {"limits": {"nvidia.com/gpu": 8}}
    (finding,) = check(job, lr)  # the launcher runs no ranks: its GPUs are this rule's
    assert finding.path == "spec.mpiReplicaSpecs[Launcher].template.spec.containers[0].resources.limits[nvidia.com/gpu]"
    job["spec"]["runLauncherAsWorker"] = True
    assert check(job, lr) == []


def test_container_min_on_the_request():
    lr = limit_range("floor", container_limits(min={"memory": "2Gi"}))
    findings = check(worker_job({"limits": {"memory": "1Gi"}}), lr)
    # both the launcher (1Gi) and the worker (1Gi) are below the floor
    assert [f.path for f in findings] == [
        "spec.mpiReplicaSpecs[Launcher].template.spec.containers[0].resources.requests[memory]",
        f"{WORKER_C0}.resources.requests[memory]",
    ]
    assert findings[1].message == ("LimitRange floor requires at least memory 2Gi per container, but container "
                                   "mpi-worker requests 1Gi; raise the request to 2Gi")


def test_min_on_the_limit_when_the_request_is_fine():
    lr = limit_range("floor", container_limits(min={"cpu": "1"}))
    job = worker_job({"requests": {"cpu": 2}, "limits": {"cpu": "500m"}})
    paths = [f.path for f in check(job, lr)]
    assert f"{WORKER_C0}.resources.limits[cpu]" in paths


def test_max_limit_request_ratio():
    lr = limit_range("ratio", container_limits(max_limit_request_ratio={"cpu": "2"}))
    (finding,) = check(worker_job({"requests": {"cpu": 1}, "limits": {"cpu": 4}}), lr)
    assert finding.path == f"{WORKER_C0}.resources.limits[cpu]"
    assert "limit of at most 2× the request per container, but container mpi-worker has 4 / 1 = 4" in finding.message
    assert "lower the limit to 2 or raise the request" in finding.message


def test_ratio_needs_a_request():
    lr = limit_range("ratio", container_limits(max_limit_request_ratio={"memory": "2"}))
    job = worker_job({"requests": {"cpu": 1}})
    (worker,) = check(job, lr)  # the launcher's memory limit is also its request
    assert worker.path == f"{WORKER_C0}.resources.requests[memory]"
    assert "needs a non-zero request" in worker.message


def test_pod_max_counts_every_container():
    lr = limit_range("pod-cap", pod_limits(max={"cpu": "3"}))
    job = worker_job({"limits": {"cpu": 2}})
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"].append(
        {"name": "sidecar", "image": "x", "resources": {"limits": {"cpu": 2}}})
    (finding,) = check(job, lr)
    assert finding.path == "spec.mpiReplicaSpecs[Worker].template.spec.limits[cpu]"
    assert "allows at most cpu 3 per pod, but the Worker pod asks 4" in finding.message


def test_a_default_limit_below_the_request_makes_the_pod_invalid():
    lr = limit_range("small", container_limits(default={"cpu": "1"}))
    (finding,) = check(worker_job({"requests": {"cpu": 4}}), lr)
    assert finding.path == f"{WORKER_C0}.resources.limits[cpu]"
    assert finding.message == ("container mpi-worker: cpu request 4 is above its limit 1 (limit set by LimitRange "
                               "small), which the API server refuses: set resources.limits.cpu to at least 4")


def test_a_default_gpu_limit_different_from_the_request_makes_the_pod_invalid():
    lr = limit_range("gpu-max", container_limits(max={"nvidia.com/gpu": "4"}))
    (finding,) = check(worker_job({"requests": {"nvidia.com/gpu": 2, "cpu": 1}}), lr)
    assert finding.path == f"{WORKER_C0}.resources.limits[nvidia.com/gpu]"
    assert "request 2 differs from its limit 4 (limit set by LimitRange gpu-max)" in finding.message


def test_defaults_within_bounds_are_clean():
    lr = limit_range("ok", container_limits(max={"cpu": "8", "memory": "32Gi"}, min={"cpu": "100m"},
                                            default={"cpu": "1", "memory": "1Gi"}))
    assert check(worker_job({"limits": {"cpu": 2, "memory": "4Gi"}}), lr) == []


@pytest.mark.parametrize("kind", ["PersistentVolumeClaim", "Unknown"])
def test_other_limit_types_are_ignored(kind):
    lr = limit_range("pvc", {"type": kind, "max": {"cpu": "1"}})
    assert check(worker_job({"limits": {"cpu": 2}}), lr) == []


def test_findings_come_per_container_then_pod_each_by_kind_of_bound_and_resource():
    """The order users read them in: per container, then the pod; min before max before ratio,
    each by resource name, whatever order the LimitRange states them in."""
    lr = limit_range("bounds",
                     container_limits(max_limit_request_ratio={"cpu": "2"}, max={"memory": "1Gi", "cpu": "1"},
                                      min={"memory": "8Gi", "cpu": "4"}),
                     pod_limits(max={"memory": "1Gi"}))
    job = worker_job({"requests": {"cpu": 2, "memory": "2Gi"}, "limits": {"cpu": 8, "memory": "2Gi"}})
    worker = [f.path.removeprefix("spec.mpiReplicaSpecs[Worker].template.spec.") for f in check(job, lr)
              if "[Worker]" in f.path]
    assert worker == ["containers[0].resources.requests[cpu]", "containers[0].resources.requests[memory]",
                      "containers[0].resources.limits[cpu]", "containers[0].resources.limits[memory]",
                      "containers[0].resources.limits[cpu]", "limits[memory]"]
