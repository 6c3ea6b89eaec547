import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.interface import Problem
from policies.cluster_view import StaticClusterView
from policies.rules.gpus_per_worker import GpusPerWorker, GpusPerWorkerParams, max_gpus
from policies.registry import default_settings
from testing.builders import context, mpijob
from testing.kube_objects import container_limits, limit_range

RULE = GpusPerWorker()
WORKER = "spec.mpiReplicaSpecs[Worker].template.spec"
LAUNCHER = "spec.mpiReplicaSpecs[Launcher].template.spec"


def gpu_job(*containers, init=(), workers=2, **spec):
    """A job whose worker pod has these containers' resources (and init containers')."""
    job = mpijob(workers=workers, **spec)
    pod = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    pod["containers"] = [{"name": f"c{i}", "image": "mpi:1", "resources": r} for i, r in enumerate(containers)]
    if init:
        pod["initContainers"] = [{"name": f"i{i}", "image": "mpi:1", **c} for i, c in enumerate(init)]
    return job


def check(job, **params):
    settings = default_settings().with_rule("gpus-per-worker", **params) if params else None
    return list(RULE.check(context(job, settings=settings)))


def gpus(n, resource="nvidia.com/gpu", kind="limits"):
    return {kind: {resource: n}}


@pytest.mark.parametrize("resources", [
    gpus(16), gpus("16"), gpus(0), {}, gpus(8, "amd.com/gpu"), {"limits": {"cpu": 64, "memory": "512Gi"}},
    {"limits": {"nvidia.com/gpu": 4}, "requests": {"nvidia.com/gpu": 4}},
    {"limits": {"nvidia.com/gpu": "4"}, "requests": {"nvidia.com/gpu": 4}},
], ids=["16", "16-string", "zero", "none", "amd-8", "cpu-only", "equal-both", "equal-mixed-types"])
def test_within_the_maximum_is_clean(resources):
    assert check(gpu_job(resources)) == []


@pytest.mark.parametrize(("resource", "asked", "workers", "spread"), [
    ("nvidia.com/gpu", 17, 2, "to keep 34 in total use 3 workers with at most 16 each"),
    ("nvidia.com/gpu", 32, 4, "to keep 128 in total use 8 workers with 16 each"),
    ("amd.com/gpu", 24, 2, "to keep 48 in total use 3 workers with 16 each"),
    ("intel.com/gpu", "20", 3, "to keep 60 in total use 4 workers with 15 each"),
], ids=["nvidia-17", "nvidia-32", "amd-24", "intel-string-20"])
def test_over_the_maximum_names_numbers_and_a_concrete_fix(resource, asked, workers, spread):
    (finding,) = check(gpu_job(gpus(asked, resource), workers=workers))
    assert finding.rule == "gpus-per-worker"
    assert finding.path == f"{WORKER}.containers[0].resources.limits[{resource}]"
    assert finding.problem is Problem.INVALID
    assert finding.value == int(asked)
    assert f"a worker pod may use at most 16 {resource} (asked {int(asked)})" in finding.message
    assert "lower it to 16 or fewer per pod" in finding.message
    assert spread in finding.message


def test_a_request_alone_counts_and_is_pointed_at():
    findings = check(gpu_job(gpus(20, kind="requests")))
    over = [f for f in findings if "at most 16" in f.message]
    assert [f.path for f in over] == [f"{WORKER}.containers[0].resources.requests[nvidia.com/gpu]"]


def test_containers_are_summed():
    (finding,) = check(gpu_job(gpus(8), gpus(6), gpus(4)))
    assert finding.path == WORKER
    assert finding.value == 18
    assert "(asked 18; its containers ask 8 + 6 + 4)" in finding.message


@pytest.mark.parametrize(("init", "containers", "asked", "path", "says"), [
    ([{"resources": gpus(20)}], [gpus(2)], 20, WORKER, "(asked 20 while its init containers run)"),
    ([{"resources": gpus(4), "restartPolicy": "Always"}], [gpus(14)], 18, WORKER, "its containers ask 14 + 4"),
    ([{"resources": gpus(4), "restartPolicy": "Always"}, {"resources": gpus(13)}], [gpus(1)], 17, WORKER,
     "(asked 17 while its init containers run)"),
    ([{"resources": gpus(20), "restartPolicy": "Always"}], [{}], 20,
     f"{WORKER}.initContainers[0].resources.limits[nvidia.com/gpu]", "(asked 20)"),
], ids=["init-peak", "sidecar-summed", "init-after-sidecar", "sidecar-alone"])
def test_init_containers_are_counted_as_kubernetes_counts_them(init, containers, asked, path, says):
    (finding,) = check(gpu_job(*containers, init=init))
    assert finding.value == asked
    assert finding.path == path
    assert says in finding.message


def test_init_containers_within_the_app_total_do_not_add():
    assert check(gpu_job(gpus(16), init=[{"resources": gpus(16)}])) == []


def test_each_gpu_resource_is_held_to_the_maximum_separately():
    (finding,) = check(gpu_job({"limits": {"nvidia.com/gpu": 16, "amd.com/gpu": 17}}))
    assert finding.path.endswith("limits[amd.com/gpu]")


@pytest.mark.parametrize(("maximum", "asked", "found"), [(8, 9, True), (8, 8, False), (0, 1, True)],
                         ids=["9-over-8", "8-at-8", "no-gpus-allowed"])
def test_admin_maximum_is_honoured(maximum, asked, found):
    findings = check(gpu_job(gpus(asked)), max=maximum)
    assert bool(findings) is found
    if found:
        assert f"at most {maximum} nvidia.com/gpu (asked {asked})" in findings[0].message


def test_max_gpus_reads_the_settings():
    settings = default_settings().with_rule("gpus-per-worker", max=4)
    assert max_gpus(context(mpijob(), settings=settings), "nvidia.com/gpu") == 4


def test_launcher_gpus_count_only_when_it_runs_ranks():
    job = gpu_job(gpus(1))
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["resources"] = gpus(20)
    assert check(job) == []
    job["spec"]["runLauncherAsWorker"] = True
    (finding,) = check(job)
    assert finding.path == f"{LAUNCHER}.containers[0].resources.limits[nvidia.com/gpu]"
    assert "the launcher pod (it runs ranks too) may use at most 16" in finding.message
    assert "to keep" not in finding.message


def test_request_without_limit_is_refused_by_the_api_server():
    (finding,) = check(gpu_job(gpus(2, kind="requests")))
    assert finding.path == f"{WORKER}.containers[0].resources.limits[nvidia.com/gpu]"
    assert finding.problem is Problem.REQUIRED
    assert "requested without a limit" in finding.message
    assert "the API server refuses" in finding.message
    assert "to 2" in finding.message


@pytest.mark.parametrize(("requests", "limits"), [(2, 4), ("4", 2), (1, "2")], ids=["2-vs-4", "4-vs-2", "1-vs-2"])
def test_request_must_equal_limit_for_extended_resources(requests, limits):
    job = gpu_job({"requests": {"nvidia.com/gpu": requests}, "limits": {"nvidia.com/gpu": limits}})
    (finding,) = check(job)
    assert finding.path == f"{WORKER}.containers[0].resources.limits[nvidia.com/gpu]"
    assert finding.problem is Problem.INVALID
    assert finding.value == limits
    assert f"request {requests} differs from its limit {limits}" in finding.message
    assert "requests equal to limits" in finding.message


def test_any_extended_resource_of_any_container_is_checked():
    job = gpu_job(gpus(1))
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    launcher["initContainers"] = [{"name": "i", "image": "mpi:1",
                                   "resources": {"requests": {"example.com/fpga": 1}, "limits": {"example.com/fpga": 2}}}]
    (finding,) = check(job)
    assert finding.path == f"{LAUNCHER}.initContainers[0].resources.limits[example.com/fpga]"


def test_cpu_and_memory_may_be_overcommitted():
    assert check(gpu_job({"requests": {"cpu": 1, "memory": "1Gi"}, "limits": {"cpu": 4, "memory": "8Gi"}})) == []


@pytest.mark.parametrize(("value", "kind"), [("0.5", "limits"), (-1, "limits"), ("two", "requests"), ("500m", "limits")],
                         ids=["half", "negative", "word", "milli"])
def test_extended_resources_come_in_whole_units(value, kind):
    (finding,) = check(gpu_job(gpus(value, kind=kind)))
    assert finding.path == f"{WORKER}.containers[0].resources.{kind}[nvidia.com/gpu]"
    assert finding.problem is Problem.INVALID
    assert finding.value == value
    assert "counted in whole units of 0 or more" in finding.message


@pytest.mark.parametrize(("containers", "over"), [
    ((gpus("15.5"), gpus(1)), []),
    ((gpus("500m"), gpus(17)), [(17, f"{WORKER}.containers[1].resources.limits[nvidia.com/gpu]")]),
    ((gpus(-1), gpus(17)), [(17, f"{WORKER}.containers[1].resources.limits[nvidia.com/gpu]")]),
], ids=["fraction-beside-1", "fraction-beside-17", "negative-beside-17"])
def test_amounts_that_are_not_whole_count_nothing_in_the_pod_total(containers, over):
    """Such an amount is reported on its own; counted at face value it made "asked 16" of at
    most 16 (15.5 + 1), and a peak "while its init containers run" in a pod without any."""
    found = [f for f in check(gpu_job(*containers)) if "may use at most" in f.message]
    assert [(f.value, f.path) for f in found] == over
    assert all(f"(asked {f.value})" in f.message for f in found)


def check_with_worker_limits(job, fewest=2, most=100, **params):
    settings = default_settings().with_rule("worker-count", min=fewest, max=most)
    if params:
        settings = settings.with_rule("gpus-per-worker", **params)
    return list(RULE.check(context(job, settings=settings)))


def test_a_total_that_no_allowed_worker_count_holds_is_said_to_not_fit():
    """120 workers with 24 GPUs each: 180 workers of 16 would keep the total, but worker-count
    allows 100 (and says so in the same answer): no suggestion may contradict it."""
    (finding,) = check(gpu_job(gpus(24), workers=120))
    assert finding.message == ("a worker pod may use at most 16 nvidia.com/gpu (asked 24); lower it to 16 or fewer "
                               "per pod; 120 workers × 24 each cannot be spread out within the policy: it allows at "
                               "most 100 workers × 16 each")
    assert "2880" not in finding.message  # a product the user never wrote


@pytest.mark.parametrize(("workers", "asked", "fewest", "most", "advice"), [
    (4, 24, 2, 6, ", and to keep 96 in total use 6 workers with 16 each"),
    (5, 24, 2, 6, "; 5 workers × 24 each cannot be spread out within the policy: it allows at most 6 workers × 16 "
                  "each"),
    (2, 17, 4, 100, ", and to keep 34 in total use 4 workers with at most 16 each"),
    (2, 32, 8, 100, ", and to keep 64 in total use 8 workers with 8 each"),
], ids=["fits-at-the-maximum", "over-the-maximum", "raised-to-the-minimum", "minimum-divides"])
def test_the_suggestion_stays_within_the_worker_count_in_force(workers, asked, fewest, most, advice):
    (finding,) = check_with_worker_limits(gpu_job(gpus(asked), workers=workers), fewest, most)
    assert finding.message.endswith("lower it to 16 or fewer per pod" + advice)


SUGGESTION = re.compile(r", and to keep (\d+) in total use (\d+) workers? with (at most )?(\d+) each$")
CANNOT_FIT = re.compile(r"; (\d+) workers? × (\d+) each cannot be spread out within the policy: it allows at most "
                        r"(\d+) workers? × (\d+) each$")


@given(workers=st.integers(1, 300), allowed=st.integers(1, 32), extra=st.integers(1, 40),
       fewest=st.integers(0, 12), room=st.integers(0, 200))
def test_every_suggestion_respects_every_limit_in_force(workers, allowed, extra, fewest, room):
    most = max(fewest, 1) + room
    asked = allowed + extra
    (finding,) = check_with_worker_limits(gpu_job(gpus(asked), workers=workers), fewest, most, max=allowed)
    total = workers * asked
    if suggested := SUGGESTION.search(finding.message):
        kept, count, at_most, each = int(suggested[1]), int(suggested[2]), suggested[3], int(suggested[4])
        assert kept == total and max(fewest, 1) <= count <= most and each <= allowed
        assert count * each >= total if at_most else count * each == total
    else:
        cannot = CANNOT_FIT.search(finding.message)
        assert cannot, finding.message
        assert tuple(map(int, cannot.groups())) == (workers, asked, most, allowed)
        assert most * allowed < total


def test_every_problem_is_reported_at_once():
    job = gpu_job(gpus(2, kind="requests"), {"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 20}})
    paths = [f.path for f in check(job)]
    assert paths == [f"{WORKER}.containers[0].resources.limits[nvidia.com/gpu]",
                     f"{WORKER}.containers[1].resources.limits[nvidia.com/gpu]",
                     WORKER]


def test_worker_count_missing_gives_no_spread_suggestion():
    (finding,) = check(gpu_job(gpus(17), workers=None))
    assert "to keep" not in finding.message


def test_negative_maximum_is_refused():
    with pytest.raises(ValueError, match=r"max must be 0 or more \(got -1\)"):
        GpusPerWorkerParams(max=-1)


# --- the maximum from the namespace's LimitRange ---------------------------------------------

def check_in_namespace(job, *ranges, available=True, **params):
    from policies.cluster_view import StaticClusterView

    cluster = StaticClusterView(ranges={"team-a": list(ranges)}, available=available)
    settings = default_settings().with_rule("gpus-per-worker", **params) if params else None
    return list(RULE.check(context(job, cluster=cluster, settings=settings)))


def gpu_limit_range(name, maximum, kind="Container", resource="nvidia.com/gpu"):
    from testing.kube_objects import limit_range

    return limit_range(name, {"type": kind, "max": {resource: str(maximum)}})


def test_a_limit_range_bound_replaces_the_setting_and_is_named():
    (finding,) = check_in_namespace(gpu_job(gpus(8)), gpu_limit_range("gpu-limits", 4))
    assert finding.path == f"{WORKER}.containers[0].resources.limits[nvidia.com/gpu]"
    assert finding.message.startswith(
        "a worker pod may use at most 4 nvidia.com/gpu, set by LimitRange gpu-limits (asked 8); lower it to 4")
    # above the setting (16) but within the namespace's own bound: the namespace decides
    assert check_in_namespace(gpu_job(gpus(24)), gpu_limit_range("big-nodes", 32)) == []


def test_the_tightest_pod_or_container_bound_wins():
    ranges = (gpu_limit_range("per-pod", 6, kind="Pod"), gpu_limit_range("per-container", 8))
    (finding,) = check_in_namespace(gpu_job(gpus(7)), *ranges)
    assert "at most 6 nvidia.com/gpu, set by LimitRange per-pod" in finding.message


def test_a_bound_on_another_resource_leaves_the_setting():
    ranges = (gpu_limit_range("amd", 2, resource="amd.com/gpu"),)
    assert check_in_namespace(gpu_job(gpus(8)), *ranges, max=8) == []
    (finding,) = check_in_namespace(gpu_job(gpus(9)), *ranges, max=8)
    assert "at most 8 nvidia.com/gpu (asked 9)" in finding.message


def test_the_setting_applies_while_cluster_state_is_unavailable():
    assert check_in_namespace(gpu_job(gpus(8)), gpu_limit_range("gpu-limits", 4), available=False) == []


def test_max_gpus_reads_the_limit_range():
    from policies.cluster_view import StaticClusterView

    cluster = StaticClusterView(ranges={"team-a": [gpu_limit_range("gpu-limits", 4)]})
    assert max_gpus(context(mpijob(), cluster=cluster), "nvidia.com/gpu") == 4
    assert max_gpus(context(mpijob(), cluster=cluster), "amd.com/gpu") == 16


# --- jobs that name no extended resource and no GPU are answered without deriving pods ----------

def test_a_gpu_name_outside_the_extended_resources_is_still_counted():
    (finding,) = check(gpu_job(gpus(20, "kubernetes.io/gpu")))
    assert finding.path == f"{WORKER}.containers[0].resources.limits[kubernetes.io/gpu]"
    assert finding.message.startswith("a worker pod may use at most 16 kubernetes.io/gpu (asked 20)")


def test_gpus_named_only_by_an_init_container_are_counted():
    (finding,) = check(gpu_job({"limits": {"cpu": 2}}, init=[{"resources": gpus(20)}]))
    assert finding.path == WORKER
    assert "at most 16 nvidia.com/gpu (asked 20 while its init containers run)" in finding.message


def test_gpus_named_only_by_the_launcher_count_when_it_runs_ranks():
    job = gpu_job({"limits": {"cpu": 2}}, runLauncherAsWorker=True)
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["resources"] = gpus(20)
    (finding,) = check(job)
    assert finding.path == f"{LAUNCHER}.containers[0].resources.limits[nvidia.com/gpu]"
    assert finding.message.startswith("the launcher pod (it runs ranks too) may use at most 16 nvidia.com/gpu")


def test_a_limit_range_default_gpu_is_not_this_rules_to_count():
    """The namespace's default of 20 GPUs (its max) lands on containers that name none: that is
    limit-range's finding; the spec alone asks for no GPU."""
    assert check_in_namespace(gpu_job({"limits": {"cpu": 2}}), gpu_limit_range("gpu-default", 20)) == []
    (finding,) = check_in_namespace(gpu_job({"limits": {"cpu": 2, "nvidia.com/gpu": 30}}),
                                    gpu_limit_range("gpu-default", 20))
    assert "at most 20 nvidia.com/gpu, set by LimitRange gpu-default (asked 30)" in finding.message


# --- the worker's GPUs against a plain reference -----------------------------------------------
# Containers without GPUs, one-shot init containers and sidecars in any mix, with or without a
# LimitRange that gives every container a default (which is not this rule's to count).

def _reference_gpus(app, init):
    """max(app containers + sidecars, peak while each init container runs): the API server's sum."""
    total = sum(app) + sum(amount for amount, sidecar in init if sidecar)
    peak, sidecars = 0, 0
    for amount, sidecar in init:
        sidecars += amount if sidecar else 0
        peak = max(peak, sidecars if sidecar else sidecars + amount)
    return max(total, peak)


_gpu_amount = st.sampled_from([None, 0, 1, 2, 3])  # None: a container without GPUs


def _resources(amount):
    return {"limits": {"cpu": 1}} if amount is None else gpus(amount)


@given(app=st.lists(_gpu_amount, min_size=1, max_size=3), init=st.lists(st.tuples(_gpu_amount, st.booleans()),
                                                                       max_size=3),
       defaults=st.booleans())
def test_the_worker_maximum_agrees_with_a_plain_reference(app, init, defaults):
    job = gpu_job(*(_resources(a) for a in app),
                  init=[{"resources": _resources(a), **({"restartPolicy": "Always"} if s else {})} for a, s in init])
    ranges = (limit_range("defaults", container_limits(default={"nvidia.com/gpu": "3", "cpu": "1"})),) \
        if defaults else ()
    ctx = context(job, settings=default_settings().with_rule("gpus-per-worker", max=2),
                  cluster=StaticClusterView(ranges={"team-a": ranges}))
    findings = list(RULE.check(ctx))
    asked = _reference_gpus([a or 0 for a in app], [(a or 0, s) for a, s in init])
    assert [f.value for f in findings] == ([asked] if asked > 2 else [])
