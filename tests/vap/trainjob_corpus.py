"""The TrainJobs and training runtimes the TrainJob parity tests run on: the upstream and Open
Data Hub runtimes and examples, runtimes broken in each way ``training-runtime`` and
``launcher`` know, a violating TrainJob per finding of every exported check on both API
shapes, TrainJobs whose patches change what a check reads, and lookalikes the webhook admits.

Every test hands the policies ALL the runtimes (as the API server hands in every object the
binding's ``selector: {}`` selects), so each evaluation also shows that the runtimes a TrainJob
does not name change nothing."""
from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from policies.config.reader import parse_policy
from tests.policies.trainer.trainer_data import DATA, load, mpi_runtimes, runtime, trainjob

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
ODH = "openmpi-cuda"  # launcher first, runLauncherAsNode, 1 GPU per pod in the runtime
DEEPSPEED = "deepspeed-distributed"  # node first, runLauncherAsNode, no resources
NAMESPACE = "team-a"


def _jobs(rt: Obj) -> list[Obj]:
    return rt["spec"]["template"]["spec"]["replicatedJobs"]


def _job(rt: Obj, name: str) -> Obj:
    return next(j for j in _jobs(rt) if j["name"] == name)


def _pod(rt: Obj, name: str) -> Obj:
    return _job(rt, name)["template"]["spec"]["template"]["spec"]


def _variant(base: Obj, name: str, change: Callable[[Obj], None]) -> Obj:
    rt = copy.deepcopy(base)
    rt["metadata"] = {"name": name}
    change(rt)
    return rt


def _set(path: tuple[str, ...], value: Any) -> Callable[[Obj], None]:
    def change(obj: Obj) -> None:
        node = obj
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return change


def _node_gpus(amount: Any) -> Callable[[Obj], None]:
    def change(rt: Obj) -> None:
        for job in ("launcher", "node"):
            _pod(rt, job)["containers"][0]["resources"] = {"limits": {GPU: amount}, "requests": {GPU: amount}}
    return change


def _without_ancestor_label(rt: Obj) -> None:
    del _job(rt, "launcher")["template"]["metadata"]


def _rename_container(job: str) -> Callable[[Obj], None]:
    def change(rt: Obj) -> None:
        _pod(rt, job)["containers"][0]["name"] = "mpi"
    return change


def _drop_job(job: str) -> Callable[[Obj], None]:
    def change(rt: Obj) -> None:
        rt["spec"]["template"]["spec"]["replicatedJobs"] = [j for j in _jobs(rt) if j["name"] != job]
    return change


def _node_parallelism(count: int, launcher_as_node: bool = True) -> Callable[[Obj], None]:
    def change(rt: Obj) -> None:
        _job(rt, "node")["template"]["spec"]["parallelism"] = count
        rt["spec"]["mlPolicy"]["mpi"]["runLauncherAsNode"] = launcher_as_node
    return change


def _launcher_not_ancestor_parallelism(rt: Obj) -> None:
    _without_ancestor_label(rt)
    _job(rt, "launcher")["template"]["spec"]["parallelism"] = 3


def _torch(rt: Obj) -> None:
    rt["spec"]["mlPolicy"] = {"numNodes": 1, "torch": {"numProcPerNode": "auto"}}


def runtimes() -> list[Obj]:
    """Every runtime the policies are handed: upstream's and ODH's MPI runtimes (v2.3 and v2.1
    shapes), a torch runtime, the broken variants, and a TrainingRuntime in the test namespace
    and one of the same name elsewhere."""
    found = {rt["metadata"]["name"]: rt for rt in mpi_runtimes().values()}
    found.pop(DEEPSPEED, None)
    v23 = runtime("runtimes/v2.3.0/deepspeed_distributed.yaml")
    v21 = runtime("runtimes/v2.1.0-v2.2.1/deepspeed_distributed.yaml")
    odh = runtime("runtimes/opendatahub/openmpi_cuda.yaml")
    variants = [
        v23,
        _variant(v21, "deepspeed-v21", lambda rt: None),
        _variant(v23, "torch-distributed", _torch),
        _variant(odh, "two-launchers", _set(("spec", "mlPolicy", "numNodes"), 2)),
        _variant(odh, "intel-mpi", _set(("spec", "mlPolicy", "mpi", "mpiImplementation"), "Intel")),
        _variant(odh, "empty-implementation", _set(("spec", "mlPolicy", "mpi", "mpiImplementation"), "")),
        _variant(odh, "launcher-unlabelled", _without_ancestor_label),
        _variant(odh, "launcher-unlabelled-parallel", _launcher_not_ancestor_parallelism),
        _variant(odh, "launcher-container-renamed", _rename_container("launcher")),
        _variant(odh, "node-container-renamed", _rename_container("node")),
        _variant(odh, "no-node-job", _both(_drop_job("node"), _set(("spec", "mlPolicy", "mpi", "runLauncherAsNode"),
                                                                   False))),
        _variant(odh, "no-node-job-launcher-ranks", _both(_drop_job("node"), _node_free_launcher_as_node)),
        _variant(odh, "no-launcher-job", _drop_job("launcher")),
        _variant(odh, "node-parallel-200", _node_parallelism(200, launcher_as_node=False)),
        _variant(odh, "node-parallel-1", _node_parallelism(1, launcher_as_node=False)),
        _variant(odh, "node-parallel-4", _node_parallelism(4, launcher_as_node=False)),
        _variant(odh, "slots-16", _set(("spec", "mlPolicy", "mpi", "numProcPerNode"), 16)),
        _variant(odh, "slots-unset", _both(_delete(("spec", "mlPolicy", "mpi", "numProcPerNode")), _node_gpus("4"))),
        _variant(odh, "gpus-12", _node_gpus("12")),
        _variant(odh, "gpus-fraction", _node_gpus("1.5")),
        _variant(odh, "eleven-launchers", _set(("spec", "mlPolicy", "numNodes"), 11)),
    ]
    for rt in variants:
        found[rt["metadata"]["name"]] = rt
    local = _variant(odh, "local-mpi", _set(("spec", "mlPolicy", "numNodes"), 3))
    local["kind"], local["metadata"]["namespace"] = "TrainingRuntime", NAMESPACE
    elsewhere = _variant(odh, "local-mpi", lambda rt: None)
    elsewhere["kind"], elsewhere["metadata"]["namespace"] = "TrainingRuntime", "team-b"
    good_local = _variant(odh, "local-good", lambda rt: None)
    good_local["kind"], good_local["metadata"]["namespace"] = "TrainingRuntime", NAMESPACE
    return [*found.values(), local, elsewhere, good_local]


# Runtimes the TrainJobs of the tests do not name (broken ones, of both kinds): every evaluation
# also shows that they change nothing. Each test hands in these and the runtime the TrainJob names.
DECOYS = ("two-launchers", "intel-mpi", "local-mpi")


def params_for(trainjob: Obj, every: list[Obj]) -> list[Obj]:
    """The runtimes handed to the policies for ``trainjob``: the decoys and those it names (the
    API server hands in every runtime; the others are judged alike, at a cost the tests cannot
    afford for each case)."""
    named = ((trainjob.get("spec") or {}).get("runtimeRef") or {}).get("name")
    return [rt for rt in every if rt["metadata"]["name"] in (*DECOYS, named)]


def _both(*changes: Callable[[Obj], None]) -> Callable[[Obj], None]:
    def change(obj: Obj) -> None:
        for each in changes:
            each(obj)
    return change


def _delete(path: tuple[str, ...]) -> Callable[[Obj], None]:
    def change(obj: Obj) -> None:
        node = obj
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
    return change


def _node_free_launcher_as_node(rt: Obj) -> None:
    rt["spec"]["mlPolicy"]["mpi"]["runLauncherAsNode"] = True


# --- TrainJobs -------------------------------------------------------------------------------
def job(runtime_name: str = ODH, *, name: str = "train", kind: str = "ClusterTrainingRuntime", **trainer: Any) -> Obj:
    return trainjob(runtime_name, name=name, namespace=NAMESPACE, kind=kind, **trainer)


def _patched(base: Obj, *patches: Obj) -> Obj:
    """``base`` with runtimePatches entries (v2.2+)."""
    out = copy.deepcopy(base)
    out["spec"]["runtimePatches"] = list(patches)
    return out


def runtime_patch(manager: str, jobs: dict[str, Obj]) -> Obj:
    """One runtimePatches entry: job name → its job template patch."""
    return {"manager": manager, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": name, "template": template} for name, template in jobs.items()]}}}}


def pod_patch(pod_spec: Obj | None = None, labels: dict[str, str] | None = None) -> Obj:
    """A job template patch of the pod template (and of the job's own labels)."""
    template: Obj = {}
    if labels is not None:
        template["metadata"] = {"labels": labels}
    if pod_spec is not None:
        template["spec"] = {"template": {"spec": pod_spec}}
    return template


def _override(base: Obj, targets: list[str], pod_spec: Obj) -> Obj:
    """``base`` with one v2.1 podTemplateOverrides entry."""
    out = copy.deepcopy(base)
    out["spec"]["podTemplateOverrides"] = [{"targetJobs": [{"name": t} for t in targets], "spec": pod_spec}]
    return out


def _generated(prefix: str, **trainer: Any) -> Obj:
    out = job(**trainer)
    out["metadata"] = {"generateName": prefix, "namespace": NAMESPACE}
    return out


def _odh_example(**trainer: Any) -> Obj:
    example = copy.deepcopy(next(d for d in load(DATA / "examples/opendatahub/kftv2-mpi-ddp-sft-trainjob.yaml")
                                 if d.get("kind") == "TrainJob"))
    example["spec"]["trainer"].update(trainer)
    return example


def _other_group() -> Obj:
    out = job(numNodes=500)
    out["spec"]["runtimeRef"]["apiGroup"] = "example.com"
    return out


# What a patch may write of a container (the v2.3 CRD allows name, env, securityContext and
# volumeMounts): enough to add a container named node.
NODE_CONTAINER = {"containers": [{"name": "node", "env": [{"name": "MODE", "value": "mpi"}]}]}
OWN_MUTATIONS = runtime_patch("mpijob-webhook.kubeflow.org/mutations", {
    name: {"spec": {"template": {"metadata": {"labels": {"sidecar.istio.io/inject": "false"},
                                              "annotations": {"sidecar.istio.io/inject": "false"}},
                                 "spec": {"serviceAccountName": "mpi-restricted"}}}} for name in ("launcher", "node")})
KUEUE = runtime_patch("kueue.x-k8s.io/manager", {
    name: pod_patch({"nodeSelector": {"pool": "a100"}, "tolerations": [{"key": "gpu", "operator": "Exists"}]})
    for name in ("launcher", "node")})

# name → (the rule the webhook reports, the TrainJob, its API shape)
VIOLATIONS: dict[str, tuple[str, Obj, str]] = {
    "nodes-120": ("worker-count", job(numNodes=120), "v2.3"),
    "nodes-2-with-launcher-as-node": ("worker-count", job(numNodes=2), "v2.3"),
    "nodes-unset-deepspeed": ("worker-count", job(DEEPSPEED), "v2.3"),
    "nodes-from-runtime-200": ("worker-count", job("node-parallel-200"), "v2.3"),
    "nodes-from-runtime-1": ("worker-count", job("node-parallel-1"), "v2.3"),
    "no-node-job": ("worker-count", job("no-node-job", numNodes=3), "v2.3"),
    "nodes-101-v21": ("worker-count", job("deepspeed-v21", numNodes=102), "v2.1"),
    "two-launchers": ("launcher", job("two-launchers", numNodes=3), "v2.3"),
    "launcher-parallel-3": ("launcher", job("launcher-unlabelled-parallel", numNodes=3), "v2.3"),
    "slots-9": ("slots-per-worker", job(numNodes=3, numProcPerNode=9), "v2.3"),
    "slots-from-runtime-16": ("slots-per-worker", job("slots-16", numNodes=3), "v2.3"),
    "slots-from-gpus-per-node-16": ("slots-per-worker", job(numNodes=3, resourcesPerNode={"limits": {GPU: 16}}), "v2.3"),
    "slots-from-gpus-requests-12": ("slots-per-worker", job(numNodes=3, resourcesPerNode={
        "requests": {GPU: "12"}, "limits": {GPU: "12", "cpu": "8"}}), "v2.3"),
    "slots-from-runtime-gpus-12": ("slots-per-worker", job("gpus-12", numNodes=3), "v2.3"),
    "slots-string-9-v21": ("slots-per-worker", job("deepspeed-v21", numNodes=3, numProcPerNode="9"), "v2.1"),
    "name-45": ("job-name", job(name="p" * 45, numNodes=3), "v2.3"),
    "name-44-eleven-launchers": ("job-name", job("eleven-launchers", name="p" * 44, numNodes=3), "v2.3"),
    "generate-name-40": ("job-name", _generated("g" * 40, numNodes=3), "v2.3"),
    "name-not-a-label": ("job-name", job(name="Train_Job", numNodes=3), "v2.3"),
    "gpus-17": ("gpus-per-worker", job(DEEPSPEED, numNodes=3, numProcPerNode=1, resourcesPerNode={"limits": {GPU: 17}}),
                "v2.3"),
    "gpus-requests-17": ("gpus-per-worker", job(DEEPSPEED, numNodes=3, numProcPerNode=1, resourcesPerNode={
        "requests": {GPU: "17"}}), "v2.3"),
    "gpus-fraction": ("gpus-per-worker", job(DEEPSPEED, numNodes=3, resourcesPerNode={"limits": {GPU: "1.5"}}), "v2.3"),
    "gpus-negative-request": ("gpus-per-worker", job(DEEPSPEED, numNodes=3, resourcesPerNode={
        "limits": {GPU: 2}, "requests": {GPU: "-1"}}), "v2.3"),
    "gpus-request-without-limit": ("gpus-per-worker", job(DEEPSPEED, numNodes=3, resourcesPerNode={
        "requests": {GPU: 2, "cpu": "4"}, "limits": {"cpu": "4"}}), "v2.3"),
    "gpus-request-differs": ("gpus-per-worker", job(DEEPSPEED, numNodes=3, resourcesPerNode={
        "limits": {GPU: 2}, "requests": {GPU: 1}}), "v2.3"),
    "fpga-fraction-v21": ("gpus-per-worker", job("deepspeed-v21", numNodes=3, resourcesPerNode={
        "limits": {"example.com/fpga": "500m"}}), "v2.1"),
    "numnodes-0": ("training-runtime", job(numNodes=0), "v2.3"),
    "numprocpernode-0": ("training-runtime", job(numNodes=3, numProcPerNode=0), "v2.3"),
    "intel-mpi": ("training-runtime", job("intel-mpi", numNodes=3), "v2.3"),
    "launcher-unlabelled": ("training-runtime", job("launcher-unlabelled", numNodes=3), "v2.3"),
    "launcher-container-renamed": ("training-runtime", job("launcher-container-renamed", numNodes=3), "v2.3"),
    "node-container-renamed": ("training-runtime", job("node-container-renamed", numNodes=3), "v2.3"),
    "no-launcher-job": ("training-runtime", job("no-launcher-job", numNodes=3), "v2.3"),
    "local-runtime-two-launchers": ("launcher", job("local-mpi", kind="TrainingRuntime", numNodes=3), "v2.3"),
    "patch-adds-other-container": ("training-runtime", _patched(job("node-container-renamed", numNodes=3), runtime_patch(
        "team", {"node": pod_patch({"containers": [{"name": "sidecar"}]})})), "v2.3"),
    "no-node-job-launcher-runs-ranks": ("training-runtime", job("no-node-job-launcher-ranks", numNodes=1), "v2.3"),
    "odh-example-one-node-besides-the-launcher": ("worker-count", next(
        d for d in load(DATA / "examples/opendatahub/kftv2-mpi-ddp-sft-trainjob.yaml") if d.get("kind") == "TrainJob"),
        "v2.3"),
    "own-mutation-patch-kept": ("worker-count", _patched(job(numNodes=120), OWN_MUTATIONS), "v2.3"),
    "kueue-patch-kept": ("slots-per-worker", _patched(job(numNodes=3, numProcPerNode=9), KUEUE), "v2.3"),
    "override-other-job-v21": ("training-runtime", _override(job("node-container-renamed", numNodes=3), ["launcher"],
                                                             NODE_CONTAINER), "v2.1"),
}

# TrainJobs the webhook admits although they look close to a violation (or that it does not check).
ADMITTED: dict[str, tuple[Obj, str]] = {
    "good": (job(numNodes=3), "v2.3"),
    "gpus-16": (job(DEEPSPEED, numNodes=3, numProcPerNode=1, resourcesPerNode={"limits": {GPU: 16, "cpu": "8"},
                                                                                "requests": {GPU: "16"}}), "v2.3"),
    "gpus-two-vendors-8-each": (job(DEEPSPEED, numNodes=3, numProcPerNode=2, resourcesPerNode={
        "limits": {GPU: 8, "amd.com/gpu": 8}}), "v2.3"),
    "nodes-101-with-launcher-as-node": (job(numNodes=101), "v2.3"),
    "name-44": (job(name="p" * 44, numNodes=3), "v2.3"),
    "slots-8": (job(numNodes=3, numProcPerNode=8), "v2.3"),
    "slots-from-gpus-8": (job(numNodes=3, resourcesPerNode={"limits": {GPU: "8"}}), "v2.3"),
    "gpus-fraction-slots-unknown": (job("gpus-fraction", numNodes=3), "v2.3"),
    "slots-unset-runtime-gpus-4": (job("slots-unset", numNodes=3), "v2.3"),
    "node-parallel-4": (job("node-parallel-4"), "v2.3"),
    "empty-implementation-is-openmpi": (job("empty-implementation", numNodes=3), "v2.3"),
    "torch-runtime-not-checked": (job("torch-distributed", name="p" * 60, numNodes=500, numProcPerNode=0), "v2.3"),
    "runtime-missing": (job("no-such-runtime", numNodes=500), "v2.3"),
    "other-group": (_other_group(), "v2.3"),
    "local-runtime-good": (job("local-good", kind="TrainingRuntime", numNodes=3), "v2.3"),
    "patch-adds-node-container": (_patched(job("node-container-renamed", numNodes=3), runtime_patch(
        "team", {"node": pod_patch(NODE_CONTAINER)})), "v2.3"),
    "patch-labels-launcher": (_patched(job("launcher-unlabelled", numNodes=3), runtime_patch(
        "team", {"launcher": pod_patch(labels={ANCESTOR: "trainer"})})), "v2.3"),
    "override-adds-node-container-v21": (_override(job("node-container-renamed", numNodes=3), ["node"], NODE_CONTAINER),
                                         "v2.1"),
    "odh-example-3-nodes": (_odh_example(numNodes=3), "v2.3"),
}

# Findings the webhook gives and the policies leave to it (docs/vap.md): the policies admit.
LEFT_TO_WEBHOOK: dict[str, tuple[str, Obj, str]] = {
    "patch-unlabels-launcher": ("training-runtime", _patched(job("two-launchers", numNodes=3), runtime_patch(
        "team", {"launcher": pod_patch(labels={ANCESTOR: "no"})})), "v2.3"),
    "limits-merged-with-the-runtimes-requests": ("gpus-per-worker", job(numNodes=3, numProcPerNode=1, resourcesPerNode={
        "limits": {GPU: 4}}), "v2.3"),
    "slots-string-not-a-number-v21": ("training-runtime", job("deepspeed-v21", numNodes=3, numProcPerNode=" 9"), "v2.1"),
}


def upstream_examples() -> dict[str, Obj]:
    """The upstream TrainJob examples (torch runtimes: not checked by either)."""
    found = {}
    for path in sorted((DATA / "examples").glob("*.yaml")):
        for doc in load(path):
            if doc.get("kind") == "TrainJob":
                found[f"{path.stem}-{doc['metadata']['name']}"] = doc
    return found


V21_POLICY = parse_policy("rules:\n  training-runtime: {params: {apiShape: v2.1}}\n", own_namespace="mpijob-webhook")
