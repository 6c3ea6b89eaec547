"""The MPI workload view of an MPIJob: counts, templates and containers, each with the path the
user wrote it at; what omitted fields mean; names, lifecycle and queue."""
import dataclasses

import pytest

from policies.mpijob.workload_builder import MPIJOB, MPIJobPodNames, mpijob_workload
from policies.workload import (
    Lifecycle,
    Role,
    Source,
    max_name_length,
    request_old_workload,
    request_workload,
    workload_of,
)
from testing.builders import context, mpijob

LAUNCHER = "spec.mpiReplicaSpecs[Launcher]"
WORKER = "spec.mpiReplicaSpecs[Worker]"


def test_groups_counts_and_where_they_were_written():
    view = mpijob_workload(mpijob("pi", workers=3, slots=2, namespace="team-a"))
    assert (view.kind, view.namespace, view.name, view.generate_name, view.display_name) == \
        (MPIJOB, "team-a", "pi", "", "pi")
    launcher, workers = view.groups()
    assert (launcher.role, launcher.name, launcher.noun, launcher.present, launcher.count, launcher.pods) == \
        (Role.LAUNCHER, "Launcher", "launcher", True, 1, 1)
    assert (workers.role, workers.name, workers.noun, workers.present, workers.count, workers.pods) == \
        (Role.WORKER, "Worker", "worker", True, 3, 3)
    assert (launcher.source.path, launcher.count_source.path, launcher.template_source.path) == \
        (LAUNCHER, f"{LAUNCHER}.replicas", f"{LAUNCHER}.template.spec")
    assert (workers.source.path, workers.count_source.path, workers.template_source.path) == \
        (WORKER, f"{WORKER}.replicas", f"{WORKER}.template.spec")
    assert workers.template is view.object["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]  # not a copy
    assert (view.slots.value, view.slots.source.path, view.slots.source.field_name) == \
        (2, "spec.slotsPerWorker", "slotsPerWorker")
    assert (view.launcher_runs_ranks.value, view.launcher_runs_ranks.source.path) == \
        (False, "spec.runLauncherAsWorker")
    assert view.rank_groups() == (workers,)
    assert all(s.origin == "" and s.finding_path == s.path for s in (workers.count_source, view.slots.source))


def test_containers_in_start_order_with_their_paths_and_those_of_image_and_resources():
    job = mpijob(workers=2)
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    worker["initContainers"] = [{"name": "fetch", "image": "busybox"}, "not a container"]
    worker["containers"].append({"name": "sidecar", "image": "envoy"})
    view = mpijob_workload(job)
    walked = [(group.name, c.path, c.name, c.init) for group, c in view.containers()]
    assert walked == [
        ("Launcher", f"{LAUNCHER}.template.spec.containers[0]", "mpi-launcher", False),
        ("Worker", f"{WORKER}.template.spec.initContainers[0]", "fetch", True),
        ("Worker", f"{WORKER}.template.spec.containers[0]", "mpi-worker", False),
        ("Worker", f"{WORKER}.template.spec.containers[1]", "sidecar", False),
    ]
    first = next(view.workers.app_containers())
    assert first.container is worker["containers"][0]
    assert first.image_source() == Source(f"{WORKER}.template.spec.containers[0].image")
    assert first.resources_source().child("limits[nvidia.com/gpu]").path == \
        f"{WORKER}.template.spec.containers[0].resources.limits[nvidia.com/gpu]"
    assert first.resources_path == f"{WORKER}.template.spec.containers[0].resources"


def test_an_omitted_worker_count_is_none_and_zero_pods_and_says_what_the_operator_makes_of_it():
    view = mpijob_workload(mpijob(workers=None))
    assert (view.workers.present, view.workers.count, view.workers.pods) == (True, None, 0)
    assert view.workers.count_source.when_unset == \
        "the MPI operator then starts 0 workers (an omitted Worker count is 0, not 1)"
    assert view.pod_names.counted == "1 worker"  # worker-0 is named anyway


@pytest.mark.parametrize(("replicas", "pods"), [(0, 0), (-2, 0), (5, 5)])
def test_pods_are_never_negative(replicas, pods):
    view = mpijob_workload(mpijob(workers=replicas))
    assert (view.workers.count, view.workers.pods) == (replicas, pods)


def test_without_a_worker_spec_the_group_is_absent_but_says_where_to_add_it():
    job = mpijob()
    del job["spec"]["mpiReplicaSpecs"]["Worker"]
    view = mpijob_workload(job)
    assert (view.workers.present, view.workers.count, view.workers.pods, view.workers.template,
            view.workers.containers) == (False, None, 0, {}, ())
    assert view.workers.source.path == WORKER
    assert [g.name for g in view.present_groups()] == ["Launcher"]
    assert view.pod_names.counted == "1 worker"  # the operator is still asked for workers


def test_run_launcher_as_worker_makes_the_launcher_a_rank_group_and_names_only_the_launcher():
    job = mpijob(runLauncherAsWorker=True)
    del job["spec"]["mpiReplicaSpecs"]["Worker"]
    view = mpijob_workload(job)
    assert view.launcher_runs_ranks.value is True
    assert view.rank_groups() == (view.workers, view.launcher)
    assert (view.pod_names.counted, view.pod_names.longest("pi")) == ("no Worker spec", "pi-launcher")


def test_an_object_without_a_namespace_gets_the_requests():
    assert mpijob_workload(mpijob()).namespace == ""
    assert mpijob_workload(mpijob(), "team-b").namespace == "team-b"
    assert mpijob_workload(mpijob(namespace="team-a"), "team-b").namespace == "team-a"
    ctx = context(mpijob())
    assert request_workload(ctx).namespace == ctx.namespace != ""


def test_generate_name_leaves_the_name_empty():
    job = mpijob()
    job["metadata"] = {"generateName": "train-"}
    view = mpijob_workload(job)
    assert (view.name, view.generate_name, view.display_name) == ("", "train-", "train-")


@pytest.mark.parametrize(("workers", "longest", "limit"), [
    (None, "x-launcher", 54), (1, "x-worker-0", 54), (10, "x-worker-9", 54), (11, "x-worker-10", 53),
    (100, "x-worker-99", 53), (101, "x-worker-100", 52),
])
def test_pod_name_arithmetic(workers, longest, limit):
    names = MPIJobPodNames(workers)
    assert (names.longest("x"), max_name_length(names)) == (longest, limit)


def test_an_empty_object_is_two_absent_groups_not_an_error():
    view = mpijob_workload({})
    assert (view.launcher.present, view.workers.present, view.slots.value, view.queue, view.name) == \
        (False, False, None, None, "")
    assert list(view.containers()) == []


def test_queue_label():
    job = mpijob()
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team-queue"}
    view = mpijob_workload(job)
    assert (view.queue, view.queue_source.path) == ("team-queue", "metadata.labels[kueue.x-k8s.io/queue-name]")


def _with_status(*conditions, suspend=False, **extra):
    job = mpijob(runPolicy={"suspend": suspend, **extra})
    if conditions:
        job["status"] = {"conditions": [{"type": t, "status": s} for t, s in conditions]}
    return job


@pytest.mark.parametrize(("job", "expected"), [
    (_with_status(), Lifecycle(suspended=False, active=True, pods_not_created_yet=True)),
    (_with_status(suspend=True), Lifecycle(suspended=True, active=False, pods_not_created_yet=False)),
    (_with_status(("Created", "True"), ("Running", "True")), Lifecycle(False, True, False)),
    (_with_status(("Created", "True"), ("Suspended", "True")), Lifecycle(False, True, True)),  # just resumed
    (_with_status(("Succeeded", "True")), Lifecycle(False, False, False)),
    (_with_status(("Failed", "True")), Lifecycle(False, False, False)),
    (_with_status(managedBy="kueue.x-k8s.io/multikueue"), Lifecycle(False, False, False)),
    (_with_status(managedBy="kubeflow.org/mpi-operator"), Lifecycle(False, True, True)),
])
def test_lifecycle(job, expected):
    assert mpijob_workload(job).lifecycle == expected


def test_a_deleted_job_is_not_active():
    job = _with_status(("Running", "True"))
    job["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert mpijob_workload(job).lifecycle == Lifecycle(False, False, False)


def test_built_once_per_request_and_anew_for_another_object():
    ctx = context(mpijob(workers=2))
    view = request_workload(ctx)
    assert request_workload(ctx) is view and view.object is ctx.job
    other = dataclasses.replace(ctx, job=mpijob(workers=5))
    assert request_workload(other).workers.count == 5 and request_workload(ctx) is view
    assert request_old_workload(ctx) is None


def test_the_replaced_object_of_an_update_has_its_own_view():
    old, new = mpijob(workers=2), mpijob(workers=4)
    ctx = dataclasses.replace(context(new), operation="UPDATE", old_job=old)
    before = request_old_workload(ctx)
    assert before is not None and before.workers.count == 2 and before is request_old_workload(ctx)
    assert request_workload(ctx).workers.count == 4


def test_an_mpijob_view_by_kind_dispatch():
    assert workload_of(mpijob()).kind is MPIJOB
    assert (MPIJOB.count_resource, MPIJOB.one) == ("count/mpijobs.kubeflow.org", "an MPIJob")


@pytest.mark.parametrize("runs_ranks", [False, True])
def test_views_share_the_few_flag_and_lifecycle_values_without_sharing_anything_per_job(runs_ranks):
    one, two = (mpijob_workload({**mpijob(workers=n), "spec": {**mpijob(workers=n)["spec"], "runLauncherAsWorker": runs_ranks}})
                for n in (1, 3))
    assert one.launcher_runs_ranks is two.launcher_runs_ranks and one.launcher_runs_ranks.value is runs_ranks
    assert one.lifecycle is two.lifecycle == Lifecycle(False, True, True)
    assert one.workers is not two.workers and (one.workers.pods, two.workers.pods) == (1, 3)
