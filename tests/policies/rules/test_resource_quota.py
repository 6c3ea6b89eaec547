from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies import messages
from policies.interface import Action, Problem
from policies.cluster_view import StaticClusterView
from policies.engine import evaluate
from policies.kube.quantities import is_extended
from policies.kube.quota import MUST_SPECIFY, Quota, namespace_quotas, unstated, usage
from policies.kube.pod_resources import ContainerResources
from policies.rules.resource_quota import ResourceQuota
from policies.registry import default_settings
from testing.builders import context, mpijob
from testing.kube_objects import (
    RUNNING,
    SUCCEEDED,
    container_limits,
    gpu_job,
    limit_range,
    priority_class_scope,
    resource_quota,
    stored_mpijob,
)

RULE = ResourceQuota()
GPU = "requests.nvidia.com/gpu"


def view(*quotas, ranges=(), jobs=()):
    return StaticClusterView(quotas={"team-a": list(quotas)}, ranges={"team-a": list(ranges)},
                             jobs={"team-a": list(jobs)})


def check(job, cluster, **kwargs):
    return list(RULE.check(context(job, cluster=cluster, **kwargs)))


def gpu_quota(hard=32, used=24, **kwargs):
    return resource_quota("team-cv-quota", {GPU: hard}, {GPU: used}, **kwargs)


def with_queue(job, queue="team-queue"):
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": queue}
    return job


def test_data_model_case_is_denied_with_the_right_suggestions():
    """data-model.md §4: 20 workers × 2 GPUs, hard 32, used 24. Its own "reduce to 16" would not
    fit: 8 GPUs are free, so 4 workers fit now and 16 at most ever."""
    (finding,) = check(gpu_job(), view(gpu_quota()))
    assert finding.path == "spec.mpiReplicaSpecs[Worker].replicas"
    assert finding.problem is Problem.POLICY and finding.ceiling is Action.DENY
    assert finding.message == (
        "train needs more than the namespace quota allows in total, so it can never run as is: "
        "ResourceQuota team-cv-quota: requests.nvidia.com/gpu requested 40 (20 workers × 2), hard 32, used 24, "
        "available 8. Suggestions: 1. reduce spec.mpiReplicaSpecs[Worker].replicas to 4 to fit now; "
        "2. at most 16 workers can ever fit this quota; 3. wait for running workloads in team-a to finish; "
        "4. ask your cluster administrator to raise requests.nvidia.com/gpu in ResourceQuota team-cv-quota")


def test_over_hard_is_denied_even_when_kueue_manages_the_job():
    (finding,) = check(with_queue(gpu_job()), view(gpu_quota()))
    assert finding.ceiling is Action.DENY
    assert "can never run as is" in finding.message


def test_within_headroom_is_clean():
    assert check(gpu_job(workers=4), view(gpu_quota())) == []


def test_over_headroom_within_hard_is_denied_with_what_fits_now():
    (finding,) = check(gpu_job(workers=6), view(gpu_quota()))
    assert finding.ceiling is Action.DENY
    assert "does not fit the namespace quota now" in finding.message
    assert "requested 12 (6 workers × 2), hard 32, used 24, available 8" in finding.message
    assert "1. reduce spec.mpiReplicaSpecs[Worker].replicas to 4 to fit now; 2. wait for" in finding.message
    assert "can ever fit" not in finding.message  # 6 workers do fit this quota one day


def test_over_headroom_is_a_short_warning_when_kueue_manages_the_job():
    (finding,) = check(with_queue(gpu_job(workers=6)), view(gpu_quota()))
    assert finding.ceiling is Action.WARN
    line = messages.line(finding)
    assert line == ("[resource-quota] spec.mpiReplicaSpecs[Worker].replicas: needs requests.nvidia.com/gpu 12 "
                    "(6 workers × 2) but ResourceQuota team-cv-quota has 8 of 32 free; its pods will wait until "
                    "the quota has room, or use 4 workers")
    assert len(line) <= 256


def test_a_suspended_job_is_warned_like_a_queued_one():
    job = gpu_job(workers=6)
    job["spec"]["runPolicy"]["suspend"] = True
    (finding,) = check(job, view(gpu_quota()))
    assert finding.ceiling is Action.WARN


def test_the_admin_may_deny_queued_jobs_too():
    settings = default_settings().with_rule("resource-quota", warn_when_queued=False)
    (finding,) = check(with_queue(gpu_job(workers=6)), view(gpu_quota()), settings=settings)
    assert finding.ceiling is Action.DENY


def test_a_worker_count_below_the_minimum_is_never_suggested():
    # 2 GPUs free and 2 per worker: 1 worker would fit, but worker-count requires at least 2
    (finding,) = check(gpu_job(workers=4), view(gpu_quota(used=30)))
    assert "to fit now" not in finding.message
    assert "available 2" in finding.message
    lowered = default_settings().with_rule("worker-count", min=1)
    (finding,) = check(gpu_job(workers=4), view(gpu_quota(used=30)), settings=lowered)
    assert "reduce spec.mpiReplicaSpecs[Worker].replicas to 1 to fit now" in finding.message


def test_a_quota_too_small_for_the_minimum_says_so():
    (finding,) = check(gpu_job(workers=4, gpus=8), view(gpu_quota(hard=8, used=0)))
    assert "this quota cannot hold even 2 workers of this size: use smaller workers" in finding.message


def test_pod_count_includes_the_launcher():
    quota = resource_quota("pods", {"pods": 10}, {"pods": 5})
    (finding,) = check(mpijob(workers=8), view(quota))
    assert "pods requested 9 (launcher 1 + 8 workers × 1), hard 10, used 5, available 5" in finding.message
    assert "reduce spec.mpiReplicaSpecs[Worker].replicas to 4 to fit now" in finding.message
    assert check(mpijob(workers=4), view(quota)) == []


def test_the_smallest_fit_over_all_resources_is_suggested():
    quota = resource_quota("mixed", {GPU: 64, "requests.cpu": 10}, {GPU: 0, "requests.cpu": 4})
    (finding,) = check(gpu_job(workers=10), view(quota))
    # GPUs would allow 10 now, but cpu: 6 free − launcher 1 = 5 workers of 1 cpu
    assert "requests.cpu requested 11 (launcher 1 + 10 workers × 1)" in finding.message
    assert GPU not in finding.message.split("Suggestions")[0]
    assert "reduce spec.mpiReplicaSpecs[Worker].replicas to 5 to fit now" in finding.message
    assert "at most 9 workers can ever fit" in finding.message


@pytest.mark.parametrize(("selector", "priority", "counted"), [
    ([priority_class_scope("In", "high")], "high", True),
    ([priority_class_scope("In", "high")], "", False),
    ([priority_class_scope("NotIn", "high")], "low", True),
    ([priority_class_scope("Exists")], "", False),
    ([priority_class_scope("DoesNotExist")], "", True),
], ids=["in-match", "in-no-class", "notin-match", "exists-no-class", "doesnotexist"])
def test_priority_class_scoped_quota_counts_only_matching_pods(selector, priority, counted):
    job = gpu_job(workers=6)
    if priority:
        for replica in job["spec"]["mpiReplicaSpecs"].values():
            replica["template"]["spec"]["priorityClassName"] = priority
    findings = check(job, view(gpu_quota(selector=selector)))
    assert bool(findings) is counted


@pytest.mark.parametrize(("scope", "deadline", "counted"), [
    ("Terminating", 3600, True), ("Terminating", None, False),
    ("NotTerminating", None, True), ("NotTerminating", 3600, False),
    ("NotBestEffort", None, True), ("BestEffort", None, False),
])
def test_scopes_match_the_pods(scope, deadline, counted):
    job = gpu_job(workers=6)
    if deadline is not None:
        for replica in job["spec"]["mpiReplicaSpecs"].values():
            replica["template"]["spec"]["activeDeadlineSeconds"] = deadline
    assert bool(check(job, view(gpu_quota(scopes=[scope])))) is counted


def test_best_effort_quota_counts_pods_without_requests():
    quota = resource_quota("best-effort", {"pods": 3}, scopes=["BestEffort"])
    job = mpijob(workers=4)
    for replica in job["spec"]["mpiReplicaSpecs"].values():
        del replica["template"]["spec"]["containers"][0]["resources"]
    (finding,) = check(job, view(quota))
    assert "pods requested 5 (launcher 1 + 4 workers × 1), hard 3" in finding.message


def test_jobs_accepted_but_not_started_count_against_the_headroom():
    first = stored_mpijob("first", workers=4, worker_resources={"limits": {"nvidia.com/gpu": 2}})
    (finding,) = check(gpu_job(workers=2), view(gpu_quota(), jobs=[first]))
    assert ("requested 4 (2 workers × 2), hard 32, used 24 + 8 for MPIJobs accepted but not started yet (first), "
            "available 0") in finding.message


@pytest.mark.parametrize("other", [
    stored_mpijob("running", workers=4, conditions=RUNNING, worker_resources={"limits": {"nvidia.com/gpu": 2}}),
    stored_mpijob("queued", workers=4, suspend=True, worker_resources={"limits": {"nvidia.com/gpu": 2}}),
    stored_mpijob("done", workers=4, conditions=SUCCEEDED, worker_resources={"limits": {"nvidia.com/gpu": 2}}),
    stored_mpijob("train", workers=4, worker_resources={"limits": {"nvidia.com/gpu": 2}}),
], ids=["running-already-in-used", "suspended", "finished", "itself"])
def test_jobs_whose_pods_are_counted_or_never_come_are_not_in_flight(other):
    assert check(gpu_job(workers=2), view(gpu_quota(), jobs=[other])) == []


def test_a_resumed_job_without_pods_yet_is_in_flight():
    resumed = stored_mpijob("resumed", workers=4, conditions=[("Created", "True"), ("Suspended", "True")],
                            worker_resources={"limits": {"nvidia.com/gpu": 2}})
    (finding,) = check(gpu_job(workers=2), view(gpu_quota(), jobs=[resumed]))
    assert "(resumed)" in finding.message


def test_running_jobs_are_counted_in_the_wait_suggestion():
    running = stored_mpijob("a", conditions=RUNNING), stored_mpijob("b", conditions=RUNNING)
    (finding,) = check(gpu_job(workers=6), view(gpu_quota(), jobs=running))
    assert "wait for the 2 running MPIJobs in team-a to finish" in finding.message


def test_limit_range_defaulting_changes_the_verdict():
    quota = resource_quota("gpus", {GPU: 8})
    job = mpijob(workers=2, worker_resources={"limits": {"cpu": 1}})
    assert check(job, view(quota)) == []
    gpu_max = limit_range("gpu-max", container_limits(max={"nvidia.com/gpu": "4"}))
    (finding,) = check(job, view(quota, ranges=[gpu_max]))
    assert ("requests.nvidia.com/gpu requested 12 (launcher 4 + 2 workers × 4, defaults of LimitRange gpu-max "
            "included), hard 8") in finding.message


@pytest.mark.parametrize("tracked", ["requests.cpu", "cpu", "limits.memory"])
def test_containers_must_state_what_a_quota_tracks(tracked):
    quota = resource_quota("compute", {tracked: "100Gi" if tracked.endswith("memory") else 100})
    job = mpijob(workers=2, worker_resources={"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 1}})
    findings = check(job, view(quota))
    (finding,) = findings
    field = "limits" if tracked.startswith("limits.") else "requests"
    assert finding.path == f"spec.mpiReplicaSpecs[Worker].template.spec.containers[0].resources.{field}"
    assert f"failed quota: compute: must specify {tracked}" in finding.message
    assert "on container mpi-worker" in finding.message


def test_a_limit_range_default_satisfies_must_specify():
    quota = resource_quota("compute", {"requests.cpu": 100})
    job = mpijob(workers=2, worker_resources={"limits": {"memory": "1Gi"}})
    assert len(check(job, view(quota))) == 1
    defaults = limit_range("defaults", container_limits(default_request={"cpu": "100m"}))
    assert check(job, view(quota, ranges=[defaults])) == []


def test_mpijob_count_quota():
    quota = resource_quota("objects", {"count/mpijobs.kubeflow.org": 2}, {"count/mpijobs.kubeflow.org": 2})
    (finding,) = check(mpijob(), view(quota))
    assert finding.message.startswith("ResourceQuota objects allows 2 MPIJobs in namespace team-a and 2 exist")
    assert check(mpijob(), view(quota), operation="UPDATE", old=mpijob(workers=3)) == []
    scoped = resource_quota("objects", {"count/mpijobs.kubeflow.org": 0}, scopes=["NotTerminating"])
    assert check(mpijob(), view(scoped)) == []


def test_scaling_a_running_job_charges_only_the_added_workers():
    old = stored_mpijob("train", workers=4, conditions=RUNNING, worker_resources={"limits": {"nvidia.com/gpu": 2}})
    new = gpu_job(workers=10)
    (finding,) = check(new, view(gpu_quota()), operation="UPDATE", old=old)
    assert "requested 12 (6 more workers × 2)" in finding.message
    assert "reduce spec.mpiReplicaSpecs[Worker].replicas to 8 to fit now" in finding.message
    assert check(gpu_job(workers=8), view(gpu_quota()), operation="UPDATE", old=old) == []
    assert check(gpu_job(workers=3), view(gpu_quota()), operation="UPDATE", old=old) == []


def test_suspending_a_running_job_charges_nothing():
    old = stored_mpijob("train", workers=20, conditions=RUNNING, worker_resources={"limits": {"nvidia.com/gpu": 2}})
    new = gpu_job(workers=20)
    new["spec"]["runPolicy"]["suspend"] = True
    assert check(new, view(gpu_quota()), operation="UPDATE", old=old) == []


def test_resuming_a_suspended_job_charges_all_of_it():
    old = stored_mpijob("train", workers=6, suspend=True, worker_resources={"limits": {"nvidia.com/gpu": 2}})
    (finding,) = check(gpu_job(workers=6), view(gpu_quota()), operation="UPDATE", old=old)
    assert "requested 12 (6 workers × 2)" in finding.message


def test_skipped_with_a_warning_when_the_cluster_is_unavailable():
    unavailable = StaticClusterView(quotas={"team-a": [gpu_quota()]}, available=False,
                                    unavailable_reason="the API server has not answered for 40 s")
    verdict = evaluate(context(gpu_job(), cluster=unavailable))
    assert verdict.allowed
    assert "resource-quota" in verdict.skipped
    (warning,) = [f for f in verdict.warnings if f.rule == "cluster-state"]
    assert "the API server has not answered for 40 s" in warning.message


def test_engine_answers_403_for_quota_denials():
    verdict = evaluate(context(gpu_job(), cluster=view(gpu_quota())))
    assert not verdict.allowed and verdict.is_policy_denial
    assert [f.rule for f in verdict.denials] == ["resource-quota"]


def test_the_queued_warning_stays_whole_with_long_names():
    name = "team-computer-vision-research-gpu-quota-for-the-winter-term"
    quota = resource_quota(name, {GPU: 32, "requests.cpu": 8}, {GPU: 24, "requests.cpu": 6})
    (finding,) = check(with_queue(gpu_job(workers=6)), view(quota))
    line = messages.line(finding)
    assert len(line) <= 256, line
    assert f"ResourceQuota {name} has" in line and "its pods will wait" in line


# --- derived once per change of the cluster state ----------------------------------------------
# The view hands out snapshots; what the rule derives from them (parsed quotas, jobs in flight)
# is kept until a snapshot is replaced. A view replaced by one with changed objects must be read
# anew on the very next check.

def test_a_changed_quota_is_seen_on_the_next_check():
    cluster = view(gpu_quota(hard=32, used=24))
    assert check(gpu_job(workers=6), cluster) != []
    assert check(gpu_job(workers=6), cluster) != []  # answered from what was derived
    assert check(gpu_job(workers=6), view(gpu_quota(hard=64, used=24))) == []
    (finding,) = check(gpu_job(workers=6), view(gpu_quota(hard=32, used=30)))
    assert "hard 32, used 30, available 2" in finding.message


def test_a_job_that_started_is_no_longer_in_flight_on_the_next_check():
    limits = {"limits": {"nvidia.com/gpu": 2}}
    quotas = {"team-a": (gpu_quota(),)}  # unchanged: the very same snapshot in both views
    first = stored_mpijob("first", workers=4, worker_resources=limits)
    waiting = StaticClusterView(quotas=quotas, jobs={"team-a": (first,)})
    (finding,) = check(gpu_job(workers=2), waiting)
    assert "+ 8 for MPIJobs accepted but not started yet (first)" in finding.message
    started = stored_mpijob("first", workers=4, conditions=RUNNING, worker_resources=limits)
    assert check(gpu_job(workers=2), StaticClusterView(quotas=quotas, jobs={"team-a": (started,)})) == []


def test_a_changed_limit_range_changes_what_jobs_in_flight_charge():
    quotas = {"team-a": (resource_quota("gpus", {GPU: 16}),)}
    jobs = {"team-a": (stored_mpijob("first", workers=4, worker_resources={"limits": {"cpu": 1}}),)}
    assert check(gpu_job(workers=3), StaticClusterView(quotas=quotas, jobs=jobs)) == []
    gpu_max = limit_range("gpu-max", container_limits(max={"nvidia.com/gpu": "2"}))
    (finding,) = check(gpu_job(workers=3), StaticClusterView(quotas=quotas, jobs=jobs, ranges={"team-a": (gpu_max,)}))
    # the waiting job's launcher and 4 workers now get 2 GPUs each from the LimitRange
    assert "used 0 + 10 for MPIJobs accepted but not started yet (first), available 6" in finding.message


def test_the_same_snapshots_are_derived_once_and_new_ones_again():
    quotas, ranges, jobs = (gpu_quota(),), (), (stored_mpijob("first"),)
    derived = namespace_quotas(quotas, ranges, jobs)
    assert namespace_quotas(quotas, ranges, jobs) is derived
    assert namespace_quotas((gpu_quota(),), ranges, jobs) is not derived
    assert namespace_quotas(quotas, ranges, (stored_mpijob("first", conditions=RUNNING),)).running == ("first",)


# --- what a pod charges: pinned against the API server's podComputeUsageHelper, as written -----

def reference_usage(requests, limits):
    charged = {"pods": Decimal(1), "count/pods": Decimal(1)}
    for resource in ("cpu", "memory", "ephemeral-storage"):
        if resource in requests:
            charged[resource] = requests[resource]
            charged[f"requests.{resource}"] = requests[resource]
        if resource in limits:
            charged[f"limits.{resource}"] = limits[resource]
    for resource, value in requests.items():
        if resource.startswith("hugepages-"):
            charged[resource] = value
            charged[f"requests.{resource}"] = value
        elif is_extended(resource):
            charged[f"requests.{resource}"] = value
    return charged


pod_resource_names = st.sampled_from(["cpu", "memory", "ephemeral-storage", "hugepages-2Mi", "nvidia.com/gpu",
                                      "example.com/fpga", "kubernetes.io/batch", "pods"]) \
    | st.text("abc./-", max_size=6)
resource_maps = st.dictionaries(pod_resource_names, st.builds(Decimal, st.integers(0, 64)), max_size=5)


@given(resource_maps, resource_maps)
def test_usage_is_what_the_api_server_charges(requests, limits):
    charged = usage(requests, limits)
    assert list(charged.items()) == list(reference_usage(requests, limits).items())


@given(resource_maps, resource_maps, st.sets(st.sampled_from(MUST_SPECIFY)))
def test_unstated_is_what_the_container_does_not_charge(requests, limits, tracked):
    quota = Quota("q", {r: Decimal(1) for r in tracked}, {}, (), ())
    container = ContainerResources("spec.x", "main", requests, limits)
    charged = reference_usage(requests, limits)
    assert unstated(container, quota.must_specify) == [r for r in MUST_SPECIFY if r in tracked and r not in charged]
    assert quota.stated_by(container) == (not unstated(container, quota.must_specify))
