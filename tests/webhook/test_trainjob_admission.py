"""TrainJobs through /validate and /mutate: which are checked, every rule in the TrainJob's own
terms on both API shapes, the cluster-state cases, UPDATEs, and whole response bodies."""
from __future__ import annotations

import base64
import copy
import json
from typing import Any

import jsonpatch
import pytest

from policies.interface import Action
from policies.cluster_view import StaticClusterView
from policies.config.layered_policy import Policy
from policies.config.rule_settings import Settings
from policies.registry import default_settings
from testing.builders import mpijob
from testing.kube_objects import limit_range, local_queue, node, resource_quota
from tests.policies.trainer.trainer_data import runtime, trainjob, trainjob_review
from tests.policies.trainer.trainjob_crd import trainjob_schema_errors, trainjob_v2_1_schema_errors
from testing.app_client import webhook

RUNTIMES = {
    "v2.1": runtime("runtimes/v2.1.0-v2.2.1/deepspeed_distributed.yaml"),
    "v2.3": runtime("runtimes/v2.3.0/deepspeed_distributed.yaml"),
}
ODH = runtime("runtimes/opendatahub/openmpi_cuda.yaml")  # launcher first, 1 GPU per pod in the runtime
REF = "spec.runtimeRef.name"
GPU = "nvidia.com/gpu"


def cluster(shape: str = "v2.3", **extra: Any) -> StaticClusterView:
    runtimes = {"deepspeed-distributed": RUNTIMES[shape], "openmpi-cuda": ODH, **extra.pop("runtimes", {})}
    return StaticClusterView(cluster_runtimes=runtimes, **extra)


def settings(shape: str = "v2.3") -> Settings:
    return default_settings().with_rule("training-runtime", api_shape=shape)


def validate(job: dict, shape: str = "v2.3", view: StaticClusterView | None = None,
             policy_settings: Settings | None = None, **review: Any) -> tuple[dict, Any]:
    served = webhook(cluster=view or cluster(shape), policy=Policy(settings=policy_settings or settings(shape)))
    response = served.review("/validate", trainjob_review(job, **review))["response"]
    return response, served.last


def causes(response: dict) -> list[tuple[str, str]]:
    return [(c["field"], c["message"]) for c in response["status"]["details"]["causes"]]


SHAPES = pytest.mark.parametrize("shape", ["v2.1", "v2.3"])


# --- which TrainJobs ------------------------------------------------------------------------

@SHAPES
def test_a_good_trainjob_on_an_mpi_runtime_is_allowed(shape):
    job = trainjob(numNodes=4, resourcesPerNode={"limits": {GPU: 2}})
    response, decision = validate(job, shape)
    assert response["allowed"] is True
    assert decision.reason == "checked"
    # the TrainJob sets no image: launcher and nodes run the runtime's one image, no hint
    assert "warnings" not in response


def test_a_trainjob_on_another_runtime_is_allowed_untouched_without_a_warning():
    torch = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
             "metadata": {"name": "torch-distributed"},
             "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": []}}}}
    view = cluster(runtimes={"torch-distributed": torch})
    job = trainjob("torch-distributed", numNodes=500, name="x" * 60)
    response, decision = validate(job, view=view)
    assert response == {"uid": response["uid"], "allowed": True}
    assert decision.reason == "not-mpi-runtime"
    served = webhook(cluster=view)
    mutated = served.review("/mutate", trainjob_review(job))["response"]
    assert "patch" not in mutated and served.last.reason == "not-mpi-runtime"


def test_a_runtime_not_in_the_cache_is_the_cluster_state_case():
    job = trainjob("not-created-yet", numNodes=500)
    response, _ = validate(job)
    assert response["allowed"] is True
    assert response["warnings"] == [
        "[cluster-state] spec.runtimeRef.name: ClusterTrainingRuntime not-created-yet is not known to the webhook: "
        "it is not created yet, or its watch cache is behind; the TrainJob was not checked (worker count, slots, "
        "GPUs, quota, node fit)"]
    strict = replace_cluster_unavailable(settings(), Action.DENY)
    refused, _ = validate(job, policy_settings=strict)
    assert refused["allowed"] is False and refused["status"]["code"] == 403


def replace_cluster_unavailable(base: Settings, action: Action) -> Settings:
    from dataclasses import replace
    return replace(base, cluster_unavailable=action)


def test_a_training_runtime_is_looked_up_in_the_trainjobs_namespace():
    own = {**copy.deepcopy(ODH), "kind": "TrainingRuntime", "metadata": {"name": "team-mpi", "namespace": "team-a"}}
    view = StaticClusterView(runtimes={"team-a": {"team-mpi": own}})
    job = trainjob("team-mpi", kind="TrainingRuntime", numNodes=200)
    response, _ = validate(job, view=view)
    assert response["allowed"] is False
    elsewhere, _ = validate(trainjob("team-mpi", kind="TrainingRuntime", numNodes=200, namespace="team-b"),
                            view=view, namespace="team-b")
    assert elsewhere["allowed"] is True and "[cluster-state]" in elsewhere["warnings"][0]


# --- every rule, in the TrainJob's terms, on both API shapes ----------------------------------

@SHAPES
@pytest.mark.parametrize(("trainer", "expected"), [
    ({"numNodes": 120}, [("spec.trainer.numNodes", "[worker-count] Invalid value: 120: at most 100 nodes besides the "
                          "launcher's are allowed (asked 120: 119 besides the launcher's node); set spec.trainer.numNodes to 101 or fewer, and give each node more slots or "
                          "GPUs if you need the ranks")]),
    ({"numNodes": 3, "numProcPerNode": 12}, [
        ("spec.trainer.numProcPerNode", "[slots-per-worker] Invalid value: 12: numProcPerNode must be between 1 and 8 "
         "(asked 12); set spec.trainer.numProcPerNode to 8, and use more nodes for more ranks")]),
    ({"numNodes": 0}, [
        ("spec.trainer.numNodes", "[worker-count] Invalid value: 0: at least 2 nodes besides the launcher's are "
         "required for a distributed job (asked 0: 0 besides the launcher's node); set spec.trainer.numNodes to 3 or more"),
        ("spec.trainer.numNodes", "[training-runtime] Invalid value: 0: must be at least 1: it is the number of nodes "
         "(the launcher included), and 0 gives Jobs the API server refuses or no worker pods; set "
         "spec.trainer.numNodes to 1 or more")]),
    ({"numNodes": 3, "image": "registry.example.com/team/train:"}, [
        ("spec.trainer.image", "[image-reference] Invalid value: \"registry.example.com/team/train:\": ")]),
])
def test_field_values_are_refused_with_422_and_the_trainjobs_paths(shape, trainer, expected):
    response, _ = validate(trainjob(**trainer), shape)
    assert response["allowed"] is False and response["status"]["code"] == 422
    got = causes(response)
    assert [f for f, _ in got] == [f for f, _ in expected]
    for (_, message), (_, start) in zip(got, expected):
        assert message.startswith(start), message


AUTO_ON_V2_1 = (
    '[training-runtime] Invalid value: "auto": must be a whole number on an MPI runtime ("auto", "cpu" and "gpu" '
    'choose processes on torch runtimes only): the Trainer controller would read "auto" as 0 ranks per node, and '
    "the Trainer's own webhook refuses it; set spec.trainer.numProcPerNode to the MPI ranks per node, or leave it "
    "out for the runtime's")
AUTO_ON_V2_3 = (
    '[training-runtime] Invalid value: "auto": must be an integer, not a string: from Trainer v2.2 on, '
    "spec.trainer.numProcPerNode is an int32 and the API server refuses a string; set spec.trainer.numProcPerNode "
    "to the MPI ranks per node, or leave it out for the runtime's")


@pytest.mark.parametrize(("shape", "message"), [("v2.1", AUTO_ON_V2_1), ("v2.3", AUTO_ON_V2_3)])
def test_a_string_num_proc_per_node_is_quoted_as_written(shape, message):
    # The controller reads "auto" as 0 (IntOrString.IntValue): the answer names what the user
    # wrote, once, not the 0 that slots-per-worker would see
    response, _ = validate(trainjob(numNodes=3, numProcPerNode="auto"), shape)
    assert response["status"]["code"] == 422
    assert causes(response) == [("spec.trainer.numProcPerNode", message)]


def test_a_numeric_string_num_proc_per_node_is_its_number_on_v2_1_and_a_type_error_on_v2_3():
    assert validate(trainjob(numNodes=3, numProcPerNode="4"), "v2.1")[0]["allowed"] is True
    over = causes(validate(trainjob(numNodes=3, numProcPerNode="12"), "v2.1")[0])
    assert over == [("spec.trainer.numProcPerNode", "[slots-per-worker] Invalid value: 12: numProcPerNode must be "
                     "between 1 and 8 (asked 12); set spec.trainer.numProcPerNode to 8, and use more nodes for more ranks")]
    (typed,) = causes(validate(trainjob(numNodes=3, numProcPerNode="4"), "v2.3")[0])
    assert typed[1].startswith('[training-runtime] Invalid value: "4": must be an integer, not a string')


@SHAPES
def test_gpus_per_node_name_resources_per_node(shape):
    response, _ = validate(trainjob(numNodes=3, resourcesPerNode={"limits": {GPU: 32}}), shape)
    # the launcher runs ranks too (runLauncherAsNode): both pods are held to the maximum; and the
    # slots the controller derives from 32 GPUs are over the range, with the field to set instead
    assert [f for f, _ in causes(response)] == ["spec.trainer.numProcPerNode",
                                                 "spec.trainer.resourcesPerNode.limits[nvidia.com/gpu]",
                                                 "spec.trainer.resourcesPerNode.limits[nvidia.com/gpu]"]


@SHAPES
def test_a_name_longer_than_the_jobset_allows_is_refused_and_44_is_the_limit(shape):
    assert validate(trainjob(name="a" * 44, numNodes=4), shape)[0]["allowed"] is True
    response, _ = validate(trainjob(name="a" * 45, numNodes=4), shape)
    ((field, message),) = causes(response)
    assert field == "metadata.name"
    assert "the name may be at most 44 characters: shorten it by 1" in message
    assert f'"{"a" * 45}-launcher-0-0-xxxxx" (64 characters)' in message


@SHAPES
def test_generate_name_prefixes_are_held_to_the_same_limit(shape):
    job = trainjob(numNodes=4)
    del job["metadata"]["name"]
    job["metadata"]["generateName"] = "b" * 40 + "-"
    response, _ = validate(job, shape)
    ((field, message),) = causes(response)
    assert field == "metadata.generateName"
    assert "the prefix may be at most 39 characters: it is too long by 2" in message


def test_a_runtime_with_several_launchers_is_named():
    rt = copy.deepcopy(ODH)
    rt["spec"]["mlPolicy"]["numNodes"] = 2
    response, _ = validate(trainjob("openmpi-cuda", numNodes=4), view=cluster(runtimes={"openmpi-cuda": rt}))
    assert causes(response) == [(REF, "[launcher] Invalid value: 2: ClusterTrainingRuntime openmpi-cuda: "
                                      "spec.mlPolicy.numNodes: the launcher job runs 2 pods, each starting mpirun over "
                                      "all the nodes; an MPI job has exactly 1 launcher: set spec.mlPolicy.numNodes in "
                                      "ClusterTrainingRuntime openmpi-cuda to 1 (spec.trainer.numNodes sets the nodes)")]


@pytest.mark.parametrize(("edit", "start"), [
    (lambda rt: rt["spec"]["template"]["spec"]["replicatedJobs"].pop(1),
     "[training-runtime] Invalid value: \"openmpi-cuda\": ClusterTrainingRuntime openmpi-cuda: "
     "spec.template.spec.replicatedJobs: has no replicated job named node"),
    (lambda rt: rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"].pop("metadata"),
     "[training-runtime] Invalid value: \"openmpi-cuda\": ClusterTrainingRuntime openmpi-cuda: "
     "spec.template.spec.replicatedJobs[0].template.metadata.labels: the launcher job lacks the label"),
    (lambda rt: rt["spec"]["template"]["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]
     ["containers"][0].update(name="worker"),
     "[training-runtime] Required value: ClusterTrainingRuntime openmpi-cuda: "
     "spec.template.spec.replicatedJobs[1].template.spec.template.spec.containers: the node job has no container"),
    (lambda rt: rt["spec"]["mlPolicy"]["mpi"].update(mpiImplementation="Intel"),
     "[training-runtime] Unsupported value: \"openmpi-cuda\": ClusterTrainingRuntime openmpi-cuda: "
     "spec.mlPolicy.mpi.mpiImplementation: Intel is not supported"),
])
@SHAPES
def test_an_unusable_mpi_runtime_is_named_at_the_runtime_reference(edit, start, shape):
    rt = copy.deepcopy(ODH)
    edit(rt)
    response, _ = validate(trainjob("openmpi-cuda", numNodes=4), shape, view=cluster(shape, runtimes={"openmpi-cuda": rt}))
    runtime_causes = [m for f, m in causes(response) if "[training-runtime]" in m]
    assert len(runtime_causes) == 1 and runtime_causes[0].startswith(start), runtime_causes
    assert all(f == REF for f, m in causes(response) if "[training-runtime]" in m)


@SHAPES
def test_quota_counts_the_launcher_and_every_node_pod_and_answers_403(shape):
    view = cluster(shape, quotas={"team-a": [resource_quota("gpus", {f"requests.{GPU}": 6})]})
    job = trainjob(numNodes=4, resourcesPerNode={"limits": {GPU: 2}})  # 1 launcher + 3 nodes, 2 GPUs each
    response, _ = validate(job, shape, view)
    assert response["allowed"] is False and response["status"]["code"] == 403
    assert "TrainJob" in response["status"]["message"] or "train" in response["status"]["message"]
    smaller = trainjob(numNodes=3, resourcesPerNode={"limits": {GPU: 2}})
    assert validate(smaller, shape, view)[0]["allowed"] is True


def test_quota_headroom_with_a_queue_label_is_a_warning():
    # 8 GPUs fit the quota's hard 10 but not the 6 left now: Kueue queues the job until they are
    view = cluster(quotas={"team-a": [resource_quota("gpus", {f"requests.{GPU}": 10}, {f"requests.{GPU}": 4})]},
                   queues={"team-a": [local_queue("gpu")]})
    job = trainjob(numNodes=4, resourcesPerNode={"limits": {GPU: 2}})
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "gpu"}
    response, _ = validate(job, view=view)
    assert response["allowed"] is True
    assert any(w.startswith("[resource-quota]") for w in response["warnings"])
    del job["metadata"]["labels"]
    assert validate(job, view=view)[0]["status"]["code"] == 403


def test_in_flight_trainjobs_count_against_the_quota():
    waiting = trainjob(name="earlier", numNodes=2, resourcesPerNode={"limits": {GPU: 2}})  # 4 GPUs, no pods yet
    view = cluster(quotas={"team-a": [resource_quota("gpus", {f"requests.{GPU}": 6})]},
                   train_jobs={"team-a": [waiting]})
    response, _ = validate(trainjob(numNodes=2, resourcesPerNode={"limits": {GPU: 2}}), view=view)
    assert response["allowed"] is False
    assert "earlier" in response["status"]["message"]


def test_an_mpijob_in_flight_with_the_trainjobs_name_still_counts():
    # Names are unique per API only: the MPIJob "train" waiting for its pods is another job than
    # the TrainJob "train" being created, and its 4 GPUs are taken from the same quota.
    waiting = mpijob("train", workers=2, worker_resources={"limits": {"cpu": 1, "memory": "1Gi", GPU: 2}},
                     namespace="team-a")
    view = cluster(quotas={"team-a": [resource_quota("gpus", {f"requests.{GPU}": 6})]}, jobs={"team-a": [waiting]})
    job = trainjob(name="train", numNodes=3, resourcesPerNode={"limits": {GPU: 2}})  # launcher + 2 nodes: 6 GPUs
    response, _ = validate(job, view=view)
    assert response["allowed"] is False and response["status"]["code"] == 403
    assert "used 0 + 4 for MPIJobs accepted but not started yet (train), available 2" in response["status"]["message"]
    alone = cluster(quotas={"team-a": [resource_quota("gpus", {f"requests.{GPU}": 6})]})
    assert validate(job, view=alone)[0]["allowed"] is True


def test_in_flight_jobs_of_both_apis_are_named_with_their_kind():
    gpus = {"limits": {"cpu": 1, "memory": "1Gi", GPU: 1}}
    view = cluster(quotas={"team-a": [resource_quota("gpus", {f"requests.{GPU}": 8})]},
                   jobs={"team-a": [mpijob("pi", workers=2, worker_resources=gpus, namespace="team-a")]},
                   train_jobs={"team-a": [trainjob(name="earlier", numNodes=3, resourcesPerNode={"limits": {GPU: 1}})]})
    response, _ = validate(trainjob(name="train", numNodes=3, resourcesPerNode={"limits": {GPU: 2}}), view=view)
    assert "+ 5 for jobs accepted but not started yet (TrainJob earlier, pi)" in response["status"]["message"]


def test_a_limit_range_maximum_bounds_gpus_per_node():
    gpu_max = {"type": "Container", "max": {GPU: "4"}}
    view = cluster(ranges={"team-a": [limit_range("gpu-max", gpu_max)]})
    response, _ = validate(trainjob(numNodes=3, resourcesPerNode={"limits": {GPU: 8}}), view=view)
    assert response["allowed"] is False
    assert all(f == "spec.trainer.resourcesPerNode.limits[nvidia.com/gpu]" for f, _ in causes(response))


@SHAPES
def test_a_limit_range_problem_of_resources_per_node_is_said_once_in_nodes(shape):
    # resourcesPerNode reaches the launcher's and the node pods' container node (runLauncherAsNode):
    # one field, one problem, one cause; and more *nodes* is the TrainJob's way to more in total
    view = cluster(shape, ranges={"team-a": [limit_range("cpu-max", {"type": "Container", "max": {"cpu": "16"}})]})
    response, _ = validate(trainjob(numNodes=3, resourcesPerNode={"limits": {"cpu": "64"}}), shape, view)
    assert response["status"]["code"] == 403
    assert causes(response) == [("spec.trainer.resourcesPerNode.limits[cpu]", "[limit-range] LimitRange cpu-max allows "
                                 "at most cpu 16 per container, but container node asks 64; lower it to 16 and use "
                                 "more nodes for more in total")]


def test_node_fit_uses_the_runtimes_and_patches_node_selectors():
    view = cluster(node_list=[node("gpu-1", {"cpu": "32", "memory": "256Gi", GPU: "8"}, labels={"pool": "a100"})])
    job = trainjob(numNodes=3, resourcesPerNode={"limits": {GPU: 2}})
    assert "warnings" not in validate(job, view=view)[0]
    job["spec"]["runtimePatches"] = [{"manager": "example.com/team", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
            "nodeSelector": {"pool": "h100"}}}}}}]}}}}]
    response, _ = validate(job, view=view)
    assert response["allowed"] is True
    (warning,) = [w for w in response["warnings"] if w.startswith("[node-fit]")]
    assert "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec" in warning


def test_a_missing_local_queue_is_warned_about():
    view = cluster(queues={"team-a": []})
    job = trainjob(numNodes=3)
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "nope"}
    response, _ = validate(job, view=view)
    assert response["allowed"] is True
    assert response["warnings"][0].startswith('[kueue-queue] metadata.labels[kueue.x-k8s.io/queue-name]: LocalQueue "nope"')


def test_multikueue_trainjobs_get_only_the_checks_that_do_not_depend_on_this_cluster():
    view = cluster(quotas={"team-a": [resource_quota("gpus", {f"requests.{GPU}": 1})]})
    job = trainjob(numNodes=4, resourcesPerNode={"limits": {GPU: 2}})
    job["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    response, decision = validate(job, view=view)
    assert response["allowed"] is True
    assert "resource-quota" not in [o.finding.rule for o in decision.verdict.outcomes]
    job["spec"]["trainer"]["numNodes"] = 500
    assert validate(job, view=view)[0]["allowed"] is False  # worker-count does not depend on the cluster


# --- UPDATE ---------------------------------------------------------------------------------

@SHAPES
def test_an_update_that_keeps_an_existing_problem_is_not_blocked_by_it(shape):
    # a change of the spec that is neither Kueue's nor a no-op: the user adds a toleration with
    # a patch of their own (v2.2+ keeps spec.trainer immutable, v2.1 still lets it change)
    old = trainjob(numNodes=150)
    new = copy.deepcopy(old)
    toleration = {"tolerations": [{"key": "gpu", "operator": "Exists"}]}
    if shape == "v2.1":
        new["spec"]["podTemplateOverrides"] = [{"targetJobs": [{"name": "node"}], "spec": toleration}]
    else:
        new["spec"]["runtimePatches"] = [{"manager": "example.com/team", "trainingRuntimeSpec": {"template": {"spec": {
            "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": toleration}}}}]}}}}]
    response, decision = validate(new, shape, operation="UPDATE", old=old)
    assert response["allowed"] is True and decision.reason == "checked"
    (kept,) = decision.verdict.outcomes
    assert (kept.finding.rule, kept.finding.path, kept.action) == ("worker-count", "spec.trainer.numNodes", Action.AUDIT)
    worse = copy.deepcopy(old)
    worse["spec"]["trainer"]["numNodes"] = 160
    refused, _ = validate(worse, shape, operation="UPDATE", old=old)
    assert causes(refused) == [("spec.trainer.numNodes", "[worker-count] Invalid value: 160: at most 100 nodes besides "
                                "the launcher's are allowed (asked 160: 159 besides the launcher's node); set "
                                "spec.trainer.numNodes to 101 or fewer, and give each node more slots or GPUs if you "
                                "need the ranks")]


KUEUE_USER = "system:serviceaccount:kueue-system:kueue-controller-manager"
RED_HAT_KUEUE_USER = "system:serviceaccount:openshift-kueue-operator:kueue-controller-manager"


def test_kueues_admission_is_never_blocked():
    view = cluster(quotas={"team-a": [resource_quota("gpus", {f"requests.{GPU}": 1})]})
    old = trainjob(numNodes=4, resourcesPerNode={"limits": {GPU: 2}})
    old["spec"]["suspend"] = True
    old["spec"]["runtimePatches"] = [{"manager": "kueue.x-k8s.io/manager"}]
    admitted = copy.deepcopy(old)
    admitted["spec"]["suspend"] = False
    admitted["spec"]["runtimePatches"] = [{"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {
        "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
            "nodeSelector": {"flavor": "h100"}}}}}}]}}}}]
    response, decision = validate(admitted, view=view, operation="UPDATE", old=old, username=KUEUE_USER)
    assert response == {"uid": response["uid"], "allowed": True}
    assert decision.reason == "kueue-admission"


PODSET = "kueue.x-k8s.io/podset"  # the label Kueue (0.16, Trainer v2.1) puts on its own overrides


def kueue_v2_1_overrides(**pod_spec: Any) -> list[dict]:
    """The podTemplateOverrides entries Kueue 0.16 appends when it admits a v2.1 TrainJob: one
    per pod set, labelled with the pod set's name."""
    return [{"targetJobs": [{"name": name}], "metadata": {"labels": {PODSET: name}}, "spec": dict(pod_spec)}
            for name in ("launcher", "node")]


def test_kueues_admission_of_a_v2_1_trainjob_is_never_blocked():
    # On v2.1 Kueue writes its flavor's node selector as podTemplateOverrides entries of its own
    # (while suspended), then flips suspend: neither update may be refused, even when a rule the
    # admin made strict would refuse the selector it writes
    view = cluster("v2.1", node_list=[node("gpu-1", {"cpu": "32", "memory": "256Gi", GPU: "8"}, labels={"pool": "a"})])
    strict = settings("v2.1").with_rule("node-fit", action=Action.DENY)
    user_override = {"targetJobs": [{"name": "node"}], "spec": {"serviceAccountName": "trainer"}}
    old = trainjob(numNodes=3)
    old["spec"].update(suspend=True, podTemplateOverrides=[user_override])
    placed = copy.deepcopy(old)
    placed["spec"]["podTemplateOverrides"] += kueue_v2_1_overrides(nodeSelector={"pool": "h100"})
    response, decision = validate(placed, "v2.1", view, strict, operation="UPDATE", old=old, username=KUEUE_USER)
    assert response == {"uid": response["uid"], "allowed": True}
    assert decision.reason == "kueue-admission"
    started = copy.deepcopy(placed)
    started["spec"]["suspend"] = False
    response, decision = validate(started, "v2.1", view, strict, operation="UPDATE", old=placed, username=KUEUE_USER)
    assert response["allowed"] is True and decision.reason == "kueue-admission"
    # Kueue stopping the job removes its entries again and suspends it
    response, decision = validate(old, "v2.1", view, strict, operation="UPDATE", old=started, username=KUEUE_USER)
    assert response["allowed"] is True and decision.reason == "kueue-admission"
    # the same selector in an entry of the user's own is checked
    users = copy.deepcopy(old)
    users["spec"]["podTemplateOverrides"].append({"targetJobs": [{"name": "node"}], "spec": {"nodeSelector": {"pool": "h100"}}})
    response, decision = validate(users, "v2.1", view, strict, operation="UPDATE", old=old, username=KUEUE_USER)
    assert response["allowed"] is False and decision.reason == "checked"
    assert causes(response)[0][0] == "spec.podTemplateOverrides[1].spec"


# A user writing entries under Kueue's name: a suspended TrainJob given another node pool and
# ServiceAccount through a runtimePatches entry whose manager is Kueue's (v2.1: overrides
# labelled with Kueue's pod sets).
FORGED_POD = {"nodeSelector": {"pool": "h100"}, "serviceAccountName": "admin"}


def forged_update(shape: str) -> tuple[dict, dict]:
    old = trainjob(numNodes=3)
    old["spec"]["suspend"] = True
    new = copy.deepcopy(old)
    if shape == "v2.1":
        new["spec"]["podTemplateOverrides"] = kueue_v2_1_overrides(**FORGED_POD)
    else:
        new["spec"]["runtimePatches"] = [{"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {
            "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": FORGED_POD}}}}]}}}}]
    return old, new


def forged_review_answer(shape: str, username: str, policy: Policy | None = None) -> tuple[dict, dict, Any]:
    view = cluster(shape, node_list=[node("gpu-1", {"cpu": "32", "memory": "256Gi", GPU: "8"}, labels={"pool": "a"})])
    strict = settings(shape).with_rule("node-fit", action=Action.DENY)
    served = webhook(cluster=view, policy=policy or Policy(settings=strict))
    old, new = forged_update(shape)
    review = trainjob_review(new, operation="UPDATE", old=old, username=username)
    return review, served.review("/validate", review), served.last


@SHAPES
def test_an_entry_under_kueues_name_written_by_a_user_is_checked(shape):
    review, answer, decision = forged_review_answer(shape, "alice")
    node_patch = "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec"
    found = ([("spec.podTemplateOverrides[0].spec", "launcher"), ("spec.podTemplateOverrides[1].spec", "node")]
             if shape == "v2.1" else [(node_patch, "node")])
    unfit = "no node can ever run a {} pod: no label pool=h100 on 1 of 1 node; fix its nodeSelector, affinity or tolerations"
    assert decision.reason == "checked"
    assert answer == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {
        "uid": review["request"]["uid"], "allowed": False,
        "status": {
            "status": "Failure", "code": 403, "reason": "Forbidden",
            "message": 'TrainJob "train" is forbidden: ' + "\n".join(
                f"[node-fit] {path}: {unfit.format(pod)}" for path, pod in found),
            "details": {"name": "train", "group": "trainer.kubeflow.org", "kind": "TrainJob", "causes": [
                {"reason": "FieldValueForbidden", "message": f"[node-fit] {unfit.format(pod)}", "field": path}
                for path, pod in found]},
        },
        "auditAnnotations": {"denied-by": "node-fit"},
    }}


@SHAPES
@pytest.mark.parametrize("username", [KUEUE_USER, RED_HAT_KUEUE_USER])
def test_the_same_entry_from_kueues_own_identity_is_its_admission(shape, username):
    review, answer, decision = forged_review_answer(shape, username)
    assert answer == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                      "response": {"uid": review["request"]["uid"], "allowed": True}}
    assert decision.reason == "kueue-admission"


def test_the_policy_file_names_who_kueue_is():
    strict = settings().with_rule("node-fit", action=Action.DENY)
    ours = Policy(settings=strict, kueue_usernames=frozenset({"system:serviceaccount:queues:kueue"}))
    review, answer, decision = forged_review_answer("v2.3", "system:serviceaccount:queues:kueue", ours)
    assert answer["response"] == {"uid": review["request"]["uid"], "allowed": True}
    assert decision.reason == "kueue-admission"
    # the built-in identities are then no longer trusted
    _, answer, decision = forged_review_answer("v2.3", KUEUE_USER, ours)
    assert answer["response"]["allowed"] is False and decision.reason == "checked"


def test_status_writes_are_not_checked():
    job = trainjob(numNodes=500)
    response, decision = validate(job, operation="UPDATE", old=job, sub_resource="status")
    assert response["allowed"] is True and decision.reason == "skipped-operation"


# --- whole bodies ---------------------------------------------------------------------------

def test_the_whole_validate_response_of_a_refused_trainjob():
    review = trainjob_review(trainjob(numNodes=150))
    served = webhook(cluster=cluster(), policy=Policy(settings=settings()))
    answer = served.review("/validate", review)
    message = ("[worker-count] Invalid value: 150: at most 100 nodes besides the launcher's are allowed "
               "(asked 150: 149 besides the launcher's node); set "
               "spec.trainer.numNodes to 101 or fewer, and give each node more slots or GPUs if you need the ranks")
    assert answer == {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "response": {
            "uid": review["request"]["uid"], "allowed": False,
            "status": {"status": "Failure", "code": 422, "reason": "Invalid",
                       "message": f'TrainJob.trainer.kubeflow.org "train" is invalid: [worker-count] '
                                  f"spec.trainer.numNodes: {message.removeprefix('[worker-count] ')}",
                       "details": {"name": "train", "group": "trainer.kubeflow.org", "kind": "TrainJob",
                                   "causes": [{"reason": "FieldValueInvalid", "message": message,
                                               "field": "spec.trainer.numNodes"}]}},
            "auditAnnotations": {"denied-by": "worker-count"},
        },
    }


@pytest.mark.parametrize("shape", ["v2.1", "v2.3"])
def test_the_mutated_trainjob_passes_validate_and_the_crd(shape):
    configured = settings(shape).with_mutation("kueue-queue-label", default_queue="common-queue") \
        .with_mutation("restricted-service-account", service_account="mpi-restricted")
    view = cluster(shape, queues={"team-a": [local_queue("common-queue")]})
    served = webhook(cluster=view, policy=Policy(settings=configured))
    job = trainjob(numNodes=4, resourcesPerNode={"limits": {GPU: 2}})
    response = served.review("/mutate", trainjob_review(job))["response"]
    assert response["auditAnnotations"] == {"mutated-by": "istio-sidecar-off,kueue-queue-label,restricted-service-account"}
    patched = jsonpatch.apply_patch(job, json.loads(base64.b64decode(response["patch"])))
    assert (trainjob_schema_errors if shape == "v2.3" else trainjob_v2_1_schema_errors)(patched) == []
    checked = served.review("/validate", trainjob_review(patched))["response"]
    assert checked["allowed"] is True and "warnings" not in checked
    again = served.review("/mutate", trainjob_review(patched))["response"]
    assert "patch" not in again


@pytest.mark.parametrize("endpoint", ["/validate", "/mutate"])
def test_fields_of_the_wrong_type_are_refused_with_their_paths(endpoint):
    job = trainjob(numNodes="four", image=1)
    job["spec"]["runtimePatches"] = [{"manager": "example.com/x", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
            "tolerations": "all"}}}}}]}}}}]
    served = webhook(cluster=cluster())
    response = served.review(endpoint, trainjob_review(job))["response"]
    assert response["allowed"] is False and response["status"]["code"] == 422
    assert [c["field"] for c in response["status"]["details"]["causes"]] == [
        "spec.trainer.numNodes", "spec.trainer.image",
        "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec.tolerations"]
    assert response["status"]["details"]["kind"] == "TrainJob"
    assert served.last.reason == "invalid-shape"


@pytest.mark.parametrize("endpoint", ["/validate", "/mutate"])
def test_a_spec_checked_before_still_has_the_rest_of_its_trainjob_checked(endpoint):
    # the spec fields the effective job is computed from are walked once per exact value
    job = trainjob(numNodes=4, resourcesPerNode={"limits": {GPU: 2}})
    served = webhook(cluster=cluster())
    assert served.review(endpoint, trainjob_review(job))["response"]["allowed"] is True
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": 7}
    response = served.review(endpoint, trainjob_review(job))["response"]
    assert response["allowed"] is False and response["status"]["code"] == 422
    assert [c["field"] for c in response["status"]["details"]["causes"]] == ["metadata.labels[kueue.x-k8s.io/queue-name]"]
    assert served.last.reason == "invalid-shape"


def test_the_policy_file_pins_the_api_shape():
    from policies.config import PolicyError
    from policies.config.reader import parse_policy

    policy = parse_policy("rules:\n  training-runtime:\n    params:\n      apiShape: v2.1\n")
    assert policy.settings.params("training-runtime").api_shape == "v2.1"
    with pytest.raises(PolicyError, match="apiShape must be one of auto, v2.1, v2.2, v2.3"):
        parse_policy("rules:\n  training-runtime:\n    params:\n      apiShape: v9\n")
    # pinned v2.1, a TrainJob with no field of either shape gets a podTemplateOverrides entry
    served = webhook(cluster=cluster("v2.1"), policy=policy)
    response = served.review("/mutate", trainjob_review(trainjob(numNodes=4)))["response"]
    ops = json.loads(base64.b64decode(response["patch"]))
    assert [op["path"] for op in ops] == ["/spec/podTemplateOverrides"]
