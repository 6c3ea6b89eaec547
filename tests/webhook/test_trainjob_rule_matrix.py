"""Every rule and mutation an MPIJob gets, on a TrainJob on an MPI runtime: on both API shapes
(v2.1 and v2.3), through the webhook (``/validate``, ``/mutate``) and through ``check``, each
with its exact action, field path and message in the TrainJob's own terms.

One table drives both ways in: the webhook reads the runtime and the cluster objects from a
cluster view made of them, ``check`` reads the runtime from the input and the rest from
``--cluster-state``; the policy file pins the API shape for both.
"""
from __future__ import annotations

import base64
import contextlib
import copy
import io
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from policies.config.reader import parse_policy
from policies.messages import WARNING_LIMIT
from policies.registry import MUTATION_IDS, TRAINJOB_RULES
from testing.app_client import webhook
from testing.builders import mpijob
from testing.kube_objects import limit_range, local_queue, namespace, node, resource_quota
from tests.policies.trainer.trainer_data import runtime, trainjob, trainjob_review
from webhook.cli import main
from webhook.offline import cluster_view

SHAPES = ("v2.1", "v2.3")
RUNTIME_FILES = {"v2.1": "runtimes/v2.1.0-v2.2.1/deepspeed_distributed.yaml",
                 "v2.3": "runtimes/v2.3.0/deepspeed_distributed.yaml"}
# The launcher's replicated job in each shape's deepspeed runtime (v2.3 lists node first)
LAUNCHER_JOB = {"v2.1": 0, "v2.3": 1}
GPU = "nvidia.com/gpu"
QUEUE = "kueue.x-k8s.io/queue-name"
RUNTIME = "ClusterTrainingRuntime deepspeed-distributed"

Line = tuple[str, str, str]  # (action, rule, "path: message")


@dataclass(frozen=True)
class Case:
    job: Callable[[str], dict[str, Any]]  # the TrainJob, for a shape
    expected: Callable[[str], list[Line]]  # what both ways in say, for a shape
    code: int | None = None  # the webhook's denial code; None: allowed
    cluster: tuple[dict[str, Any], ...] = ()
    edit_runtime: Callable[[dict[str, Any]], None] | None = None
    policy: str = ""  # more of the policy file, after the pinned shape


def same(*lines: Line) -> Callable[[str], list[Line]]:
    return lambda shape: list(lines)


def job(**trainer: Any) -> Callable[[str], dict[str, Any]]:
    return lambda shape: trainjob(**trainer)


def labelled(labels: Mapping[str, str], **trainer: Any) -> Callable[[str], dict[str, Any]]:
    def build(shape: str) -> dict[str, Any]:
        made = trainjob(**trainer)
        made["metadata"]["labels"] = dict(labels)
        return made
    return build


def suspended(**trainer: Any) -> Callable[[str], dict[str, Any]]:
    def build(shape: str) -> dict[str, Any]:
        made = trainjob(**trainer)
        made["spec"]["suspend"] = True
        return made
    return build


def node_pod_patch(pod_spec: dict[str, Any], **trainer: Any) -> Callable[[str], dict[str, Any]]:
    """A TrainJob whose own patch sets ``pod_spec`` on the node pods: a podTemplateOverrides
    entry on v2.1, a runtimePatches entry on v2.3."""
    def build(shape: str) -> dict[str, Any]:
        made = trainjob(**trainer)
        if shape == "v2.1":
            made["spec"]["podTemplateOverrides"] = [{"targetJobs": [{"name": "node"}], "spec": pod_spec}]
        else:
            made["spec"]["runtimePatches"] = [{"manager": "example.com/team", "trainingRuntimeSpec": {"template": {
                "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": pod_spec}}}}]}}}}]
        return made
    return build


def multikueue(**trainer: Any) -> Callable[[str], dict[str, Any]]:
    def build(shape: str) -> dict[str, Any]:
        made = trainjob(**trainer)
        made["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
        return made
    return build


def finished(**trainer: Any) -> dict[str, Any]:
    made = trainjob(**trainer)
    made["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    return made


NODE_PATCH_AT = {"v2.1": "spec.podTemplateOverrides[0].spec",
                 "v2.3": "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec"}


def two_launchers(rt: dict[str, Any]) -> None:
    rt["spec"]["mlPolicy"]["numNodes"] = 2


def node_container_renamed(rt: dict[str, Any]) -> None:
    (node_job,) = [j for j in rt["spec"]["template"]["spec"]["replicatedJobs"] if j["name"] == "node"]
    node_job["template"]["spec"]["template"]["spec"]["containers"][0]["name"] = "worker"


CASES: dict[str, Case] = {
    "worker-count": Case(job(numNodes=120), same((
        "deny", "worker-count", "spec.trainer.numNodes: Invalid value: 120: at most 100 nodes besides the launcher's "
        "are allowed (asked 120: 119 besides the launcher's node); set spec.trainer.numNodes to 101 or fewer, and give "
        "each node more slots or GPUs if you need the ranks")), 422),
    "launcher": Case(job(numNodes=3), same((
        "deny", "launcher", f"spec.runtimeRef.name: Invalid value: 2: {RUNTIME}: spec.mlPolicy.numNodes: the launcher "
        "job runs 2 pods, each starting mpirun over all the nodes; an MPI job has exactly 1 launcher: set "
        f"spec.mlPolicy.numNodes in {RUNTIME} to 1 (spec.trainer.numNodes sets the nodes)")), 422,
        edit_runtime=two_launchers),
    "slots-per-worker": Case(job(numNodes=3, numProcPerNode=12), same((
        "deny", "slots-per-worker", "spec.trainer.numProcPerNode: Invalid value: 12: numProcPerNode must be between 1 "
        "and 8 (asked 12); set spec.trainer.numProcPerNode to 8, and use more nodes for more ranks")), 422),
    "gpus-per-worker": Case(job(numNodes=3, numProcPerNode=1, resourcesPerNode={"limits": {GPU: 32}}), same(
        ("deny", "gpus-per-worker", f"spec.trainer.resourcesPerNode.limits[{GPU}]: Invalid value: 32: the launcher pod "
         f"(it runs ranks too) may use at most 16 {GPU} (asked 32); lower it to 16 or fewer per pod"),
        ("deny", "gpus-per-worker", f"spec.trainer.resourcesPerNode.limits[{GPU}]: Invalid value: 32: a node pod may "
         f"use at most 16 {GPU} (asked 32); lower it to 16 or fewer per pod, and to keep 64 in total over the node "
         "pods set spec.trainer.numNodes to 5 with 16 each")), 422),
    "image-reference": Case(job(numNodes=3, image="registry.example.com/team/train:"), same((
        "deny", "image-reference", 'spec.trainer.image: Invalid value: "registry.example.com/team/train:": not a valid '
        "image reference: it ends in ':' with no tag after it; add the tag or remove the ':'")), 422),
    # spec.trainer.image reaches the launcher only: the node pods keep the runtime's image
    "image-reference-mismatch": Case(job(numNodes=3, image="example.com/train:1"), same((
        "warn", "image-reference", f'spec.runtimeRef.name: {RUNTIME}: launcher runs "example.com/train:1", nodes run '
        '"ghcr.io/kubeflow/trainer/deepspeed-runtime": ranks may hit an MPI ABI mismatch; use one image for both, '
        "pinned by digest"))),
    "limit-range": Case(job(numNodes=3, resourcesPerNode={"requests": {"memory": "1Mi"}}), same((
        "deny", "limit-range", "spec.trainer.resourcesPerNode.requests[memory]: LimitRange mem-min requires at least "
        "memory 1Gi per container, but container node requests 1Mi; raise the request to 1Gi")), 403,
        (limit_range("mem-min", {"type": "Container", "min": {"memory": "1Gi"}}),)),
    "resource-quota": Case(job(numNodes=4, resourcesPerNode={"limits": {GPU: 2}}), same((
        "deny", "resource-quota", "spec.trainer.numNodes: train needs more than the namespace quota allows in total, "
        f"so it can never run as is: ResourceQuota gpus: requests.{GPU} requested 8 (launcher 2 + 3 nodes × 2), hard "
        "6, used 0, available 6. Suggestions: 1. reduce spec.trainer.numNodes to 3 to fit now; 2. ask your cluster "
        f"administrator to raise requests.{GPU} in ResourceQuota gpus")), 403,
        (resource_quota("gpus", {f"requests.{GPU}": 6}),)),
    "resource-quota-queued": Case(labelled({QUEUE: "gpu"}, numNodes=4, resourcesPerNode={"limits": {GPU: 2}}), same((
        "warn", "resource-quota", f"spec.trainer.numNodes: needs requests.{GPU} 8 (launcher 2 + 3 nodes × 2) but "
        "ResourceQuota gpus has 6 of 10 free; its pods will wait until the quota has room, or set "
        "spec.trainer.numNodes to 3")),
        cluster=(resource_quota("gpus", {f"requests.{GPU}": 10}, {f"requests.{GPU}": 4}), local_queue("gpu"))),
    "resource-quota-suspended": Case(suspended(numNodes=4, resourcesPerNode={"limits": {GPU: 2}}), same((
        "warn", "resource-quota", f"spec.trainer.numNodes: needs requests.{GPU} 8 (launcher 2 + 3 nodes × 2) but "
        "ResourceQuota gpus has 6 of 10 free; its pods will wait until the quota has room, or set "
        "spec.trainer.numNodes to 3")),
        cluster=(resource_quota("gpus", {f"requests.{GPU}": 10}, {f"requests.{GPU}": 4}),)),
    # the most that can ever fit, as the number to write in numNodes (the launcher is one of them)
    "resource-quota-ever": Case(job(numNodes=5, resourcesPerNode={"limits": {GPU: 2}}), same((
        "deny", "resource-quota", "spec.trainer.numNodes: train needs more than the namespace quota allows in total, "
        f"so it can never run as is: ResourceQuota gpus: requests.{GPU} requested 10 (launcher 2 + 4 nodes × 2), hard "
        "8, used 4, available 4. Suggestions: 1. spec.trainer.numNodes can be at most 4 to ever fit this quota; 2. "
        f"wait for running workloads in team-a to finish; 3. ask your cluster administrator to raise requests.{GPU} "
        "in ResourceQuota gpus")), 403,
        (resource_quota("gpus", {f"requests.{GPU}": 8}, {f"requests.{GPU}": 4}),)),
    "resource-quota-not-queued": Case(job(numNodes=4, resourcesPerNode={"limits": {GPU: 2}}), same((
        "deny", "resource-quota", "spec.trainer.numNodes: train does not fit the namespace quota now: ResourceQuota "
        f"gpus: requests.{GPU} requested 8 (launcher 2 + 3 nodes × 2), hard 10, used 4, available 6. Suggestions: 1. "
        "reduce spec.trainer.numNodes to 3 to fit now; 2. wait for running workloads in team-a to finish; 3. ask your "
        f"cluster administrator to raise requests.{GPU} in ResourceQuota gpus")), 403,
        (resource_quota("gpus", {f"requests.{GPU}": 10}, {f"requests.{GPU}": 4}),)),
    # TrainJobs and MPIJobs accepted but not started yet take from the same quota
    "resource-quota-in-flight": Case(job(numNodes=3, resourcesPerNode={"limits": {GPU: 2}}), same((
        "deny", "resource-quota", "spec.trainer.numNodes: train does not fit the namespace quota now: ResourceQuota "
        f"gpus: requests.{GPU} requested 6 (launcher 2 + 2 nodes × 2), hard 8, used 0 + 5 for jobs accepted but not "
        "started yet (TrainJob earlier, pi), available 3. Suggestions: 1. wait for running workloads in team-a to "
        f"finish; 2. ask your cluster administrator to raise requests.{GPU} in ResourceQuota gpus")), 403,
        (resource_quota("gpus", {f"requests.{GPU}": 8}),
         mpijob("pi", workers=2, worker_resources={"limits": {"cpu": 1, "memory": "1Gi", GPU: 1}}, namespace="team-a"),
         trainjob(name="earlier", numNodes=3, resourcesPerNode={"limits": {GPU: 1}}))),
    # ... but one handed to MultiKueue holds nothing here, and finished ones hold nothing any more
    "resource-quota-in-flight-elsewhere-not-counted": Case(job(numNodes=3, resourcesPerNode={"limits": {GPU: 2}}), same(),
        cluster=(resource_quota("gpus", {f"requests.{GPU}": 8}),
                 multikueue(name="elsewhere", numNodes=3, resourcesPerNode={"limits": {GPU: 1}})("v2.3"),
                 finished(name="done", numNodes=3, resourcesPerNode={"limits": {GPU: 1}}))),
    # its pods run in another cluster: nothing of this one is read (the quota would refuse it) ...
    "multikueue-not-checked-against-this-cluster": Case(
        multikueue(numNodes=4, resourcesPerNode={"limits": {GPU: 2}}), same(),
        cluster=(resource_quota("gpus", {f"requests.{GPU}": 1}),)),
    # ... but what does not depend on the cluster is
    "multikueue-checked-otherwise": Case(multikueue(numNodes=120), same((
        "deny", "worker-count", "spec.trainer.numNodes: Invalid value: 120: at most 100 nodes besides the launcher's "
        "are allowed (asked 120: 119 besides the launcher's node); set spec.trainer.numNodes to 101 or fewer, and give "
        "each node more slots or GPUs if you need the ranks")), 422,
        (resource_quota("gpus", {f"requests.{GPU}": 1}),)),
    "node-fit": Case(node_pod_patch({"nodeSelector": {"pool": "h100"}}, numNodes=3), lambda shape: [(
        "warn", "node-fit", f"{NODE_PATCH_AT[shape]}: no node can ever run a node pod: no label pool=h100 on 1 of 1 "
        "node; fix its nodeSelector, affinity or tolerations")],
        cluster=(node("gpu-1", {"cpu": "32", "memory": "256Gi", GPU: "8"}, labels={"pool": "a100"}),)),
    "node-fit-size": Case(job(numNodes=3, numProcPerNode=1, resourcesPerNode={"limits": {GPU: 16}}), same(*(
        ("warn", "node-fit", f"spec.trainer.resourcesPerNode: no matching node can hold a {pod} pod ({GPU} 16); "
         f"largest of 1 matching: gpu-1 with {GPU} 8; use more, smaller pods or larger nodes")
        for pod in ("launcher", "node"))),
        cluster=(node("gpu-1", {"cpu": "32", "memory": "256Gi", GPU: "8"}),)),
    "node-fit-resource-nowhere": Case(job(numNodes=3, resourcesPerNode={"limits": {GPU: 2}}), same((
        "warn", "node-fit", f"spec.trainer.resourcesPerNode: {GPU} is requested but no node in the cluster advertises "
        "it; is its device plugin (e.g. the GPU operator) installed, and is the resource name spelled right?")),
        cluster=(node("cpu-1", {"cpu": "32", "memory": "256Gi"}),)),
    "kueue-queue": Case(labelled({QUEUE: "nope"}, numNodes=3), same((
        "warn", "kueue-queue", f'metadata.labels[{QUEUE}]: LocalQueue "nope" does not exist in namespace team-a '
        "(LocalQueues here: other); Kueue would keep the job suspended with no visible reason; set the label to one "
        "of them")), cluster=(local_queue("other"),)),
    # a hostPath volume (a field both shapes' CRDs let a patch write) in a namespace enforcing baseline
    "pod-security": Case(node_pod_patch({"volumes": [{"name": "scratch", "hostPath": {"path": "/scratch"}}]},
                                        numNodes=3), lambda shape: [(
        "deny", "pod-security", f"{NODE_PATCH_AT[shape]}.volumes[0].hostPath: the TrainJob's node pods violate "
        'PodSecurity "baseline:latest" of namespace team-a (pod-security.kubernetes.io/enforce): check hostPathVolumes: '
        'hostPath volumes; allowed: no hostPath volume; replace the hostPath of volume "scratch" with another source, '
        "e.g. emptyDir, a persistentVolumeClaim or a configMap")], 403,
        cluster=(namespace("team-a", {"pod-security.kubernetes.io/enforce": "baseline"}),)),
    "job-name": Case(lambda shape: trainjob(name="a" * 45, numNodes=4), lambda shape: [(
        "deny", "job-name", f'metadata.name: Invalid value: "{"a" * 45}": the Trainer controller names pods after the '
        f'job: "{"a" * 45}-launcher-0-0-xxxxx" (64 characters) is over the 63 allowed for a DNS-1035 label; with '
        + ("1 launcher pod and 3 node pods" if shape == "v2.1" else "3 node pods and 1 launcher pod")
        + " the name may be at most 44 characters: shorten it by 1")], 422),
    "training-runtime-counts": Case(job(numNodes=3, numProcPerNode=0), same(
        ("deny", "training-runtime", "spec.trainer.numProcPerNode: Invalid value: 0: must be at least 1: it is the "
         "number of MPI ranks per node, and 0 gives no ranks; set spec.trainer.numProcPerNode to 1 or more"),
        ("deny", "slots-per-worker", "spec.trainer.numProcPerNode: Invalid value: 0: numProcPerNode must be between 1 "
         "and 8 (asked 0); set spec.trainer.numProcPerNode to 1, and use more nodes for more ranks")), 422),
    "training-runtime-structure": Case(job(numNodes=3), lambda shape: [(
        "deny", "training-runtime", f"spec.runtimeRef.name: Required value: {RUNTIME}: spec.template.spec."
        f"replicatedJobs[{1 - LAUNCHER_JOB[shape]}].template.spec.template.spec.containers: the node job has no "
        "container named node: the Trainer controller puts the MPI settings (SSH keys, hostfile) and the TrainJob's "
        "values into that container; rename the MPI container to node")], 422, edit_runtime=node_container_renamed),
    "policy-params-and-overrides": Case(job(numNodes=60), same((
        "warn", "worker-count", "spec.trainer.numNodes: Invalid value: 60: at most 50 nodes besides the launcher's "
        "are allowed (asked 60: 59 besides the launcher's node); set spec.trainer.numNodes to 51 or fewer, and give "
        "each node more slots or GPUs if you need the ranks")),
        policy="  worker-count:\n    params: {max: 50}\n"
               "overrides:\n  - namespaces: [team-a]\n    rules:\n      worker-count: {action: warn}\n"),
}


def policy_text(shape: str, more: str = "") -> str:
    return f"rules:\n  training-runtime:\n    params:\n      apiShape: {shape}\n{more}"


def runtime_for(shape: str, case: Case) -> dict[str, Any]:
    made = runtime(RUNTIME_FILES[shape])
    if case.edit_runtime is not None:
        case.edit_runtime(made)
    return made


def through_webhook(case: Case, shape: str, endpoint: str = "/validate") -> dict[str, Any]:
    objects = [runtime_for(shape, case), *copy.deepcopy(case.cluster)]
    view = cluster_view([("cluster", index, obj) for index, obj in enumerate(objects)], "team-a")
    served = webhook(cluster=view, policy=parse_policy(policy_text(shape, case.policy)))
    return served.review(endpoint, trainjob_review(case.job(shape)))["response"]


def through_check(case: Case, shape: str, tmp: Path) -> tuple[int, dict[str, Any]]:
    (tmp / "trainjob.yaml").write_text(yaml.safe_dump(case.job(shape)))
    (tmp / "runtime.yaml").write_text(yaml.safe_dump(runtime_for(shape, case)))
    (tmp / "policy.yaml").write_text(policy_text(shape, case.policy))
    args = ["check", "-o", "json", "--policy-file", str(tmp / "policy.yaml"),
            str(tmp / "trainjob.yaml"), str(tmp / "runtime.yaml")]
    if case.cluster:
        (tmp / "cluster.yaml").write_text(yaml.safe_dump_all(list(case.cluster)))
        args += ["--cluster-state", str(tmp / "cluster.yaml")]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(args)
    return code, json.loads(out.getvalue())["results"][0]


def webhook_lines(response: dict[str, Any]) -> list[Line]:
    """The answer as (action, rule, "path: message"): denials from the causes, warnings as sent."""
    lines: list[Line] = []
    for cause in (response.get("status") or {}).get("details", {}).get("causes", []):
        rule, _, message = cause["message"].removeprefix("[").partition("] ")
        lines.append(("deny", rule, f"{cause['field']}: {message}"))
    for warning in response.get("warnings", []):
        rule, _, rest = warning.removeprefix("[").partition("] ")
        lines.append(("warn", rule, rest))
    return lines


def check_lines(result: dict[str, Any]) -> list[Line]:
    return [(f["action"], f["rule"], f["message"].removeprefix(f"[{f['rule']}] ")) for f in result["findings"]]


def as_sent(line: Line) -> Line:
    """A warning as the webhook sends it: cut at the API server's limit."""
    action, rule, text = line
    whole = f"[{rule}] {text}"
    if action != "warn" or len(whole) <= WARNING_LIMIT:
        return line
    return action, rule, whole[:WARNING_LIMIT - 3].removeprefix(f"[{rule}] ") + "..."


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_through_the_webhook(name: str, shape: str) -> None:
    case = CASES[name]
    response = through_webhook(case, shape)
    assert response["allowed"] is (case.code is None)
    if case.code is not None:
        assert response["status"]["code"] == case.code
        assert response["status"]["details"]["kind"] == "TrainJob"
    assert sorted(webhook_lines(response)) == sorted(as_sent(line) for line in case.expected(shape))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_through_check(name: str, shape: str, tmp_path: Path) -> None:
    case = CASES[name]
    code, result = through_check(case, shape, tmp_path)
    assert (code, result["kind"], result["decision"]) == \
        (0 if case.code is None else 1, "TrainJob", "admitted" if case.code is None else "denied")
    assert sorted(check_lines(result)) == sorted(case.expected(shape))


def test_every_rule_a_trainjob_gets_has_a_case() -> None:
    covered = {rule for case in CASES.values() for shape in SHAPES for _, rule, _ in case.expected(shape)}
    assert covered == {rule.id for rule in TRAINJOB_RULES}


# --- which TrainJobs -----------------------------------------------------------------------

def torch_policy(rt: dict[str, Any]) -> None:
    rt["spec"]["mlPolicy"] = {"numNodes": 1, "torch": {}}


def renamed(rt: dict[str, Any]) -> None:
    rt["metadata"]["name"] = "another-runtime"


@pytest.mark.parametrize("shape", SHAPES)
def test_a_trainjob_on_a_runtime_that_is_not_mpi_is_left_untouched(shape: str, tmp_path: Path) -> None:
    case = Case(lambda shape: trainjob(name="x" * 60, numNodes=500), same(), edit_runtime=torch_policy)
    for endpoint in ("/validate", "/mutate"):
        response = through_webhook(case, shape, endpoint)
        assert response == {"uid": response["uid"], "allowed": True}
    code, result = through_check(case, shape, tmp_path)
    assert (code, result["decision"], result["reason"], result["findings"], result["warnings"], result["mutations"]) \
        == (0, "admitted", "not-mpi-runtime", [], [], {"applied": [], "patch": []})


UNKNOWN_RUNTIME = (f"spec.runtimeRef.name: {RUNTIME} is not known to the webhook: it is not created yet, or its watch "
                   "cache is behind; the TrainJob was not checked (worker count, slots, GPUs, quota, node fit)")
# check has no watch cache to be behind: it says where the runtime was looked for, and how to give it
NOT_GIVEN = (f"spec.runtimeRef.name: {RUNTIME} is in none of the files checked nor in --cluster-state: this TrainJob "
             "was not checked (worker count, slots, GPUs, quota, node fit); give the runtime in the same input "
             "(`mpijob-webhook check trainjob.yaml runtime.yaml`, the runtime saved with `kubectl get "
             "clustertrainingruntime deepspeed-distributed -o yaml > runtime.yaml`) or with --cluster-state FILE")


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("policy", "action"), [("", "warn"), ("clusterUnavailable: deny\n", "deny")])
def test_a_runtime_not_known_is_the_cluster_state_case(shape: str, policy: str, action: str, tmp_path: Path) -> None:
    case = Case(job(numNodes=500), same(("deny" if action == "deny" else "warn", "cluster-state", UNKNOWN_RUNTIME)),
                403 if action == "deny" else None, (local_queue("gpu"),), edit_runtime=renamed, policy=policy)
    response = through_webhook(case, shape)
    assert webhook_lines(response) == case.expected(shape)
    assert response.get("status", {}).get("code") == case.code
    code, result = through_check(case, shape, tmp_path)
    offline = [(a, rule, NOT_GIVEN if text == UNKNOWN_RUNTIME else text) for a, rule, text in case.expected(shape)]
    assert (code, result["reason"], check_lines(result)) == (1 if action == "deny" else 0, "runtime-not-given", offline)


# --- mutations ------------------------------------------------------------------------------

MUTATION_POLICY = ("mutations:\n  kueue-queue-label: {params: {defaultQueue: common}}\n"
                   "  restricted-service-account: {params: {serviceAccount: mpi-restricted}}\n")
SIDECAR_OFF = {"sidecar.istio.io/inject": "false"}
OWN = "mpijob-webhook.kubeflow.org/mutations"


def expected_patch(shape: str) -> list[dict[str, Any]]:
    if shape == "v2.1":
        entry: dict[str, Any] = {
            "targetJobs": [{"name": "launcher"}, {"name": "node"}],
            "metadata": {"annotations": {"mpijob-webhook.kubeflow.org/patched-by": OWN, **SIDECAR_OFF},
                         "labels": SIDECAR_OFF},
            "spec": {"serviceAccountName": "mpi-restricted"}}
        add = {"op": "add", "path": "/spec/podTemplateOverrides", "value": [entry]}
    else:
        pod = {"metadata": {"labels": SIDECAR_OFF, "annotations": SIDECAR_OFF},
               "spec": {"serviceAccountName": "mpi-restricted"}}
        add = {"op": "add", "path": "/spec/runtimePatches", "value": [{"manager": OWN, "trainingRuntimeSpec": {
            "template": {"spec": {"replicatedJobs": [{"name": name, "template": {"spec": {"template": pod}}}
                                                     for name in ("launcher", "node")]}}}}]}
    return [{"op": "add", "path": "/metadata/labels", "value": {QUEUE: "common"}}, add]


MUTATED = Case(job(numNodes=3), same(), cluster=(local_queue("common"),), policy=MUTATION_POLICY)


@pytest.mark.parametrize("shape", SHAPES)
def test_every_mutation_through_the_webhook(shape: str) -> None:
    response = through_webhook(MUTATED, shape, "/mutate")
    assert response["auditAnnotations"] == {"mutated-by": ",".join(sorted(MUTATION_IDS))}
    patch = json.loads(base64.b64decode(response["patch"]))
    assert jsonpatch.apply_patch(MUTATED.job(shape), patch) == \
        jsonpatch.apply_patch(MUTATED.job(shape), expected_patch(shape))


@pytest.mark.parametrize("shape", SHAPES)
def test_every_mutation_through_check(shape: str, tmp_path: Path) -> None:
    code, result = through_check(MUTATED, shape, tmp_path)
    assert (code, result["decision"]) == (0, "admitted")
    assert result["mutations"]["applied"] == sorted(MUTATION_IDS)
    assert jsonpatch.apply_patch(MUTATED.job(shape), result["mutations"]["patch"]) == \
        jsonpatch.apply_patch(MUTATED.job(shape), expected_patch(shape))
