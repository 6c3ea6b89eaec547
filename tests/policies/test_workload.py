"""The kind-neutral workload view: how a Source phrases a path and a fix, and that the workload
rules speak in the terms of whatever object the view was built from (here a hand-made view of
the shape a TrainJob on an MPI runtime gives: counts from spec.trainer, slots from the runtime,
GPUs from spec.trainer.resourcesPerNode)."""
from dataclasses import dataclass, replace

from policies.interface import Problem
from policies.messages import line
from policies.kube.quota import namespace_quotas
from policies.rules.gpus_per_worker import GpusPerWorker
from policies.rules.image_reference import ImageReference
from policies.rules.job_name import JobName
from policies.rules.slots_per_worker import SlotsPerWorker
from policies.rules.worker_count import WorkerCount
from policies.workload import (
    ContainerRef,
    Flag,
    Lifecycle,
    PodGroup,
    Role,
    Slots,
    Source,
    Workload,
    WorkloadKind,
    request_workload,
)
from testing.builders import context, mpijob
from testing.kube_objects import gpu_job, resource_quota

RUNTIME = "ClusterTrainingRuntime mpi-cuda"
REF = "spec.runtimeRef.name"
NODE = "spec.template.spec.replicatedJobs[node].template.spec.template.spec"
LAUNCHER = "spec.template.spec.replicatedJobs[launcher].template.spec.template.spec"


def test_a_source_in_the_reviewed_object_is_its_own_path():
    source = Source("spec.slotsPerWorker")
    assert (source.finding_path, source.field_name, source.said("too many"), source.set_to("8")) == \
        ("spec.slotsPerWorker", "slotsPerWorker", "too many", "set spec.slotsPerWorker to 8")
    assert Source("spec.mpiReplicaSpecs[Worker].replicas").field_name == "replicas"
    assert Source("metadata.labels[kueue.x-k8s.io/queue-name]").field_name == "labels"


def test_a_source_in_another_object_is_reported_at_the_reference_and_named_in_the_message():
    source = Source("spec.mlPolicy.mpi.numProcPerNode", origin=RUNTIME, reported_at=REF)
    assert source.finding_path == REF
    assert source.said("must be at most 8") == f"{RUNTIME}: spec.mlPolicy.mpi.numProcPerNode: must be at most 8"
    assert source.set_to("8") == f"set spec.mlPolicy.mpi.numProcPerNode in {RUNTIME} to 8"
    child = Source(f"{NODE}.containers[0].resources", RUNTIME, REF).child("limits[cpu]")
    assert (child.path, child.origin, child.finding_path) == (f"{NODE}.containers[0].resources.limits[cpu]", RUNTIME, REF)


def test_an_offset_turns_the_views_count_into_the_users_number():
    assert Source("spec.trainer.numNodes", offset=1).written(3) == 4


@dataclass
class JobSetNames:
    nodes: int

    @property
    def counted(self) -> str:
        return f"{self.nodes} nodes"

    def longest(self, name: str) -> str:
        return f"{name}-node-0-{self.nodes - 1}-abcde"


def _group(role, name, template_path, count, count_source, containers):
    template = {"containers": [c.container for c in containers]}
    return PodGroup(role, name, name, True, Source(template_path, RUNTIME, REF), count, count_source,
                    count or 0, template, Source(template_path, RUNTIME, REF), tuple(containers))


def trainjob_like(*, nodes=3, slots=2, gpus=2, image="ghcr.io/example/mpi:1", worker_image=None) -> Workload:
    """What a TrainJob builder makes of numNodes, runLauncherAsNode, a runtime's numProcPerNode and
    resourcesPerNode: the worker count is numNodes - 1, GPUs are written in the TrainJob."""
    per_node = Source("spec.trainer.resourcesPerNode")
    resources = {"limits": {"nvidia.com/gpu": gpus}}
    launcher = ContainerRef({"name": "node", "image": image, "resources": resources}, f"{LAUNCHER}.containers[0]",
                            origin=RUNTIME, reported_at=REF, image=Source("spec.trainer.image"), resources=per_node)
    node = ContainerRef({"name": "node", "image": worker_image or image, "resources": resources},
                        f"{NODE}.containers[0]", origin=RUNTIME, reported_at=REF, resources=per_node)
    return Workload(
        kind=WorkloadKind("TrainJob", "trainjobs", "trainer.kubeflow.org", "the Trainer controller"),
        namespace="team-a", name="bert", generate_name="",
        launcher=_group(Role.LAUNCHER, "launcher", LAUNCHER, 1, Source("spec.mlPolicy.numNodes", RUNTIME, REF),
                        [launcher]),
        workers=_group(Role.WORKER, "node", NODE, nodes - 1, Source("spec.trainer.numNodes", offset=1), [node]),
        slots=Slots(slots, Source("spec.mlPolicy.mpi.numProcPerNode", RUNTIME, REF)),
        launcher_runs_ranks=Flag(True, Source("spec.mlPolicy.mpi.runLauncherAsNode", RUNTIME, REF)),
        pod_names=JobSetNames(nodes - 1), lifecycle=Lifecycle(False, True, True), queue=None,
        queue_source=Source("metadata.labels[kueue.x-k8s.io/queue-name]"), object={},
    )


def run(rule, view, **context_args):
    ctx = context(mpijob(), **context_args)
    # The rules read the view through request_workload: this context's is the hand-made one
    ctx.derived("workload", lambda: view)
    assert request_workload(ctx) is view
    return [line(f) for f in rule.check(ctx)]


def test_worker_count_names_the_trainjob_field_and_the_number_to_write_there():
    (finding,) = run(WorkerCount(), trainjob_like(nodes=121))
    assert finding == ("[worker-count] spec.trainer.numNodes: Invalid value: 121: at most 100 nodes besides the "
                       "launcher's are allowed (asked 121: 120 besides the launcher's node); set spec.trainer.numNodes to 101 or fewer, and give each node more slots or "
                       "GPUs if you need the ranks")


def test_slots_from_the_runtime_are_reported_at_the_runtime_reference():
    (finding,) = run(SlotsPerWorker(), trainjob_like(slots=16))
    assert finding == (f"[slots-per-worker] {REF}: Invalid value: 16: {RUNTIME}: spec.mlPolicy.mpi.numProcPerNode: "
                       "numProcPerNode must be between 1 and 8 (asked 16); set spec.mlPolicy.mpi.numProcPerNode in "
                       f"{RUNTIME} to 8, and use more nodes for more ranks")


def test_gpus_written_in_resources_per_node_are_reported_there_for_launcher_and_nodes():
    findings = run(GpusPerWorker(), trainjob_like(gpus=32))
    assert findings == [
        "[gpus-per-worker] spec.trainer.resourcesPerNode.limits[nvidia.com/gpu]: Invalid value: 32: the launcher pod "
        "(it runs ranks too) may use at most 16 nvidia.com/gpu (asked 32); lower it to 16 or fewer per pod",
        "[gpus-per-worker] spec.trainer.resourcesPerNode.limits[nvidia.com/gpu]: Invalid value: 32: a node pod may "
        "use at most 16 nvidia.com/gpu (asked 32); lower it to 16 or fewer per pod, and to keep 64 in total over "
        "the node pods set spec.trainer.numNodes to 5 with 16 each",
    ]



def test_gpus_no_allowed_node_count_holds_are_said_in_the_numbers_the_user_wrote():
    """200 nodes (199 besides the launcher's) of 32: no node count worker-count allows keeps
    them at 16 each; the message gives nodes × GPUs each, asked and allowed, never a total."""
    findings = run(GpusPerWorker(), trainjob_like(nodes=200, gpus=32))
    assert findings[1] == (
        "[gpus-per-worker] spec.trainer.resourcesPerNode.limits[nvidia.com/gpu]: Invalid value: 32: a node pod may "
        "use at most 16 nvidia.com/gpu (asked 32); lower it to 16 or fewer per pod; 199 nodes besides the launcher's "
        "× 32 each cannot be spread out within the policy: it allows at most 100 nodes besides the launcher's × 16 "
        "each")

def test_images_name_the_field_they_were_written_in():
    findings = run(ImageReference(), trainjob_like(image="Bad Image", worker_image="Worse Image"))
    assert [f.split(": Invalid value")[0] for f in findings] == \
        ["[image-reference] spec.trainer.image", f"[image-reference] {REF}"]
    assert findings[1].startswith(f'[image-reference] {REF}: Invalid value: "Worse Image": {RUNTIME}: '
                                  f"{NODE}.containers[0].image: not a valid image reference")


def test_a_mismatch_hint_from_the_runtime_keeps_the_image_names_readable():
    (finding,) = run(ImageReference(), trainjob_like(image="ghcr.io/example/mpi:1",
                                                     worker_image="ghcr.io/example/" + "m" * 200 + ":2"))
    # the runtime's long field path would leave the names a few characters ("g…1", "g…2"): the
    # runtime is named without it, and only the long name is shortened, to fit 256 characters
    assert finding == (f'[image-reference] {REF}: {RUNTIME}: launcher runs "ghcr.io/example/mpi:1", '
                       f'nodes run "ghcr.io/example/{"m" * 11}…{"m" * 25}:2": ranks may hit an MPI ABI mismatch; '
                       "use one image for both, pinned by digest")
    assert len(finding) <= 256


def test_a_mismatch_hint_from_the_runtime_with_short_names_still_fits():
    (finding,) = run(ImageReference(), trainjob_like(image="a:1", worker_image="b:2"))
    # even 3-character names leave no room for the runtime's field path in 256 characters
    assert finding == (f'[image-reference] {REF}: {RUNTIME}: launcher runs "a:1", nodes run "b:2": ranks may hit '
                       "an MPI ABI mismatch; use one image for both, pinned by digest")


def test_name_length_follows_the_views_pod_names():
    ctx = context(mpijob(name="x" * 50))
    ctx.derived("workload", lambda: trainjob_like(nodes=3))
    (finding,) = JobName().check(ctx)
    assert (finding.path, finding.problem, finding.value) == ("metadata.name", Problem.INVALID, "x" * 50)
    assert finding.message == ("the Trainer controller names pods after the job: "
                               f'"{"x" * 50}-node-0-1-abcde" (65 characters) is over the 63 allowed for a DNS-1035 '
                               "label; with 2 nodes the name may be at most 48 characters: shorten it by 2")


def test_in_flight_charges_count_the_jobs_of_every_list_given():
    """One sequence per API: quota accounting counts workloads, whichever API they came through."""
    quotas = (resource_quota("gpus", {"requests.nvidia.com/gpu": 100}),)
    first, second = gpu_job("first", workers=2, gpus=2), gpu_job("second", workers=3, gpus=2)
    for job in (first, second):
        job["metadata"]["namespace"] = "team-a"
    ranges, mpijobs, others = (), (first,), (second,)  # the snapshots a ClusterView hands out
    derived = namespace_quotas(quotas, ranges, mpijobs, others)
    (in_flight,) = derived.in_flight
    assert in_flight.names["requests.nvidia.com/gpu"] == ("first", "second")
    assert in_flight.totals["requests.nvidia.com/gpu"] == 2 * 2 + 3 * 2
    assert namespace_quotas(quotas, ranges, mpijobs, others) is derived  # once per change of the snapshots


def test_the_request_view_is_built_once_per_context_and_anew_for_a_copy():
    ctx = context(mpijob(workers=2))
    view = request_workload(ctx)
    assert request_workload(ctx) is view  # every workload rule reads the same view
    old = replace(ctx, job=mpijob(workers=5))  # as ratcheting copies a context for the stored job
    assert request_workload(old) is not view and request_workload(old).workers.pods == 5
