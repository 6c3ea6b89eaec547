from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.resources import (
    effective_container,
    container_defaults,
    job_pods,
    limit_range_items,
    pod_resources,
    pod_totals,
)
from tests.builders import mpijob
from tests.kube_objects import container_limits, limit_range

D = Decimal


def worker(job_resources, *, init=None, ranges=()):
    job = mpijob(worker_resources=job_resources)
    if not job_resources:  # the builder's default resources would otherwise apply
        del job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"]
    if init is not None:
        job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["initContainers"] = init
    return job_pods(job, ranges).pods["Worker"]


def test_limit_without_request_becomes_the_request():
    pod = worker({"limits": {"cpu": 2, "memory": "4Gi"}})
    assert pod.requests == {"cpu": D(2), "memory": D(4 * 2**30)}
    assert pod.limits == pod.requests


def test_json_numbers_and_strings_parse_alike():
    assert worker({"requests": {"cpu": 1}, "limits": {"cpu": "1000m"}}).requests["cpu"] == D(1)
    assert worker({"requests": {"cpu": "500m"}}).requests["cpu"] == D("0.5")


def test_unparsable_quantities_are_left_out():
    pod = worker({"requests": {"cpu": "a lot", "memory": "1Gi"}})
    assert pod.requests == {"memory": D(2**30)}


def test_default_request_and_default_fill_missing_values_only():
    ranges = [limit_range("defaults", container_limits(default={"cpu": "2", "memory": "2Gi"},
                                                       default_request={"cpu": "500m", "memory": "1Gi"}))]
    pod = worker({"limits": {"memory": "8Gi"}}, ranges=ranges)
    (container,) = pod.containers
    # the memory limit was given, so its request is the limit (not the LimitRange's defaultRequest)
    assert container.requests == {"memory": D(8 * 2**30), "cpu": D("0.5")}
    assert container.limits == {"memory": D(8 * 2**30), "cpu": D(2)}
    assert container.defaulted_requests == {"cpu": "defaults"}
    assert container.defaulted_limits == {"cpu": "defaults"}


def test_default_limit_without_default_request_defaults_the_request_too():
    ranges = [limit_range("lr", container_limits(default={"cpu": "2"}))]
    (container,) = worker({}, ranges=ranges).containers
    assert container.requests == {"cpu": D(2)} and container.limits == {"cpu": D(2)}


def test_max_without_default_becomes_the_default_for_every_container():
    """Verified on a 1.36 API server: max nvidia.com/gpu 4 gave every container without a GPU limit 4 GPUs."""
    ranges = [limit_range("gpu-max", container_limits(max={"nvidia.com/gpu": "4"}))]
    pods = job_pods(mpijob(worker_resources={"limits": {"cpu": 1}}), ranges)
    for replica_type in ("Launcher", "Worker"):
        assert pods.pods[replica_type].requests["nvidia.com/gpu"] == D(4)
        assert pods.pods[replica_type].limits["nvidia.com/gpu"] == D(4)
        assert pods.pods[replica_type].defaulted_by("nvidia.com/gpu") == ("gpu-max",)
    # a container that states its GPUs keeps them
    assert worker({"limits": {"nvidia.com/gpu": 2}}, ranges=ranges).requests["nvidia.com/gpu"] == D(2)


def test_min_without_default_request_becomes_the_default_request():
    ranges = [limit_range("lr", container_limits(min={"memory": "256Mi"}))]
    (container,) = worker({}, ranges=ranges).containers
    assert container.requests == {"memory": D(256 * 2**20)}
    assert "memory" not in container.limits


def test_first_limit_range_by_name_wins_a_shared_default():
    ranges = [limit_range("b", container_limits(default={"cpu": "4"})),
              limit_range("a", container_limits(default={"cpu": "1"}))]
    assert worker({}, ranges=ranges).requests["cpu"] == D(1)


def test_pod_request_is_the_larger_of_containers_sum_and_largest_init_container():
    job = mpijob(worker_resources={"requests": {"cpu": 1, "memory": "1Gi"}})
    spec = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    spec["containers"].append({"name": "side", "image": "x", "resources": {"requests": {"cpu": 1}}})
    spec["initContainers"] = [
        {"name": "fetch", "image": "x", "resources": {"requests": {"cpu": 3, "memory": "512Mi"}}},
        {"name": "small", "image": "x", "resources": {"requests": {"cpu": 1}}},
    ]
    pod = job_pods(job, ()).pods["Worker"]
    assert pod.requests == {"cpu": D(3), "memory": D(2**30)}


def test_sidecars_add_to_the_pod_and_to_later_init_containers():
    init = [
        {"name": "proxy", "image": "x", "restartPolicy": "Always", "resources": {"requests": {"cpu": 1}}},
        {"name": "warmup", "image": "x", "resources": {"requests": {"cpu": 4}}},
    ]
    pod = worker({"requests": {"cpu": 2}}, init=init)
    # running: app 2 + sidecar 1 = 3; while warming up: sidecar 1 + warmup 4 = 5
    assert pod.requests["cpu"] == D(5)
    init[1]["resources"]["requests"]["cpu"] = 1
    assert worker({"requests": {"cpu": 2}}, init=init).requests["cpu"] == D(3)


def test_gpu_request_without_limit_is_a_problem_of_the_spec():
    (problem,) = worker({"requests": {"nvidia.com/gpu": 2}}).problems
    assert problem.resource == "nvidia.com/gpu" and problem.defaulted_by == ""
    assert "without a limit" in problem.message and "set resources.limits.nvidia.com/gpu to 2" in problem.message


def test_gpu_request_different_from_a_defaulted_limit_names_the_limit_range():
    ranges = [limit_range("gpu-max", container_limits(max={"nvidia.com/gpu": "4"}))]
    (problem,) = worker({"requests": {"nvidia.com/gpu": 2}}, ranges=ranges).problems
    assert problem.defaulted_by == "gpu-max"
    assert "request 2 differs from its limit 4 (limit set by LimitRange gpu-max)" in problem.message


def test_request_above_a_defaulted_limit_is_refused():
    ranges = [limit_range("small", container_limits(default={"cpu": "1"}))]
    (problem,) = worker({"requests": {"cpu": 2}}, ranges=ranges).problems
    assert (problem.resource, problem.field, problem.defaulted_by) == ("cpu", "limits", "small")
    assert "cpu request 2 is above its limit 1 (limit set by LimitRange small)" in problem.message


def test_worker_and_launcher_counts():
    pods = job_pods(mpijob(workers=7), ())
    assert dict(pods.counts) == {"Launcher": 1, "Worker": 7}
    assert job_pods(mpijob(workers=None), ()).workers == 0


def test_limit_range_items_apply_the_api_servers_item_defaults():
    (item,) = limit_range_items([limit_range("lr", container_limits(max={"cpu": "4"}, min={"memory": "1Gi"}))])
    assert item.default == {"cpu": D(4)}
    assert item.default_request == {"cpu": D(4), "memory": D(2**30)}


_amount = st.integers(min_value=0, max_value=64).map(D)


@given(app=st.lists(_amount, min_size=1, max_size=4), init=st.lists(_amount, max_size=3))
def test_pod_total_without_sidecars_is_max_of_sum_and_largest_init(app, init):
    defaults = container_defaults([])
    containers = [effective_container(f"c{i}", {"resources": {"requests": {"cpu": str(v)}}}, defaults)
                  for i, v in enumerate(app)]
    containers += [effective_container(f"i{i}", {"resources": {"requests": {"cpu": str(v)}}}, defaults, init=True)
                   for i, v in enumerate(init)]
    assert pod_totals(containers, "requests").get("cpu", D(0)) == max([sum(app)] + init)


@pytest.mark.parametrize("replica", [None, {}, {"template": {"spec": {"containers": "nope"}}}])
def test_missing_or_odd_templates_have_no_resources(replica):
    pod = pod_resources("Worker", replica, [])
    assert pod.requests == {} and pod.containers == ()
