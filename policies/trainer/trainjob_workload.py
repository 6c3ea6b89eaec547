"""The MPI workload view (``policies.workload``) of a TrainJob on an MPI runtime, built from its
effective job, so every workload rule runs unchanged and speaks the TrainJob's terms.

The launcher pod group is the JobSet's ``launcher`` replicated job, the workers are ``node``.
Values written in the TrainJob carry its own paths (``spec.trainer.numNodes``,
``spec.trainer.resourcesPerNode``); values that come from the runtime carry the runtime's path
and name it (``ClusterTrainingRuntime mpi-cuda: spec.mlPolicy.numNodes: …``), reported at
``spec.runtimeRef.name``, the TrainJob's field that chose it.

The pod groups, slots and pod names are worked out from the effective job and
``spec.trainer.numNodes`` only, so they are remembered with the effective job they came from
(``_PodGroupsMemo``): the memo of effective jobs hands the same object to every request with the
same runtime and spec inputs, and ``numNodes`` is one of those inputs, kept in the key anyway for
a caller that pairs an effective job with another TrainJob. What comes from the TrainJob's
metadata and status (name, namespace, queue, lifecycle) is read from each request's object.
Nothing here changes a pod group after it is built, and its maps are the effective job's
read-only ones.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from policies.messages import plural
from policies.trainer.api import (
    GROUP,
    LAUNCHER,
    MULTIKUEUE,
    NODE,
    TRAINJOB,
    TRAINJOBS,
    Obj,
    int_or_string_value,
    mapping,
    metadata,
    sequence,
    spec,
    trainer,
)
from policies.trainer.bounded_memo import BoundedMemo
from policies.trainer.effective_job_memo import SIZE as EFFECTIVE_JOBS, inputs_key_or_none
from policies.trainer.effective_job import EffectiveContainer, EffectiveJob, EffectiveReplicatedJob, Written
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
)

TRAINJOB_KIND = WorkloadKind(kind=TRAINJOB, plural=TRAINJOBS, group=GROUP, controller="the Trainer controller")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
RUNTIME_REF = "spec.runtimeRef.name"
GENERATED = "-xxxxx"  # the five random characters a Job's pod names end with
_QUEUE = Source(f"metadata.labels[{QUEUE_LABEL}]")
_NUM_PROC_PER_NODE = Source("spec.trainer.numProcPerNode")
_SCHEDULING = ("spec.nodeSelector", "spec.affinity", "spec.tolerations")


@dataclass(slots=True)
class JobSetPodNames:
    """A JobSet's pod names: ``<name>-<replicatedJob>-<jobIndex>-<podIndex>-<5 random>``; the
    JobSet webhook refuses the JobSet when one of them would not be a DNS-1035 label (the TrainJob
    itself is admitted, and never starts: kubeflow/trainer#2735)."""

    jobs: tuple[tuple[str, int, int], ...]  # (replicated job, replicas, pods per Job)

    @property
    def counted(self) -> str:
        return " and ".join(plural(max(replicas, 1) * max(count, 1), f"{name} pod") for name, replicas, count in self.jobs) \
            or "no replicated job"

    def longest(self, name: str) -> str:
        names = [f"{name}-{job}-{max(replicas, 1) - 1}-{max(count, 1) - 1}{GENERATED}"
                 for job, replicas, count in self.jobs]
        return max(names, key=len, default=name + GENERATED)


def trainjob_workload(trainjob: Obj, effective: EffectiveJob, namespace: str = "") -> Workload:
    """The view of ``trainjob`` whose runtime's effective job is ``effective``; ``namespace``:
    the request's, for an object that does not name its own (a CREATE may not)."""
    meta = metadata(trainjob)
    groups = _pod_groups(effective, trainer(trainjob).get("numNodes"), trainjob)
    return Workload(
        kind=TRAINJOB_KIND,
        namespace=str(meta.get("namespace") or namespace),
        name=meta.get("name") or "",
        generate_name=meta.get("generateName") or "",
        launcher=groups.launcher,
        workers=groups.workers,
        slots=_readable_slots(trainer(trainjob).get("numProcPerNode"), groups.slots),
        launcher_runs_ranks=groups.launcher_runs_ranks,
        pod_names=groups.pod_names,
        lifecycle=lifecycle(trainjob),
        queue=(mapping(meta, "labels")).get(QUEUE_LABEL),
        queue_source=_QUEUE,
        object=trainjob,
    )


@dataclass(frozen=True, slots=True)
class PodGroups:
    """The part of a TrainJob's view that its effective job and ``numNodes`` decide."""

    launcher: PodGroup
    workers: PodGroup
    slots: Slots
    launcher_runs_ranks: Flag
    pod_names: JobSetPodNames


def pod_groups(effective: EffectiveJob, num_nodes: object) -> PodGroups:
    origin = effective.runtime.describe()
    launcher_as_node = effective.run_launcher_as_node
    return PodGroups(
        launcher=_group(Role.LAUNCHER, LAUNCHER, effective.launcher, origin, num_nodes, launcher_as_node),
        workers=_group(Role.WORKER, NODE, effective.node, origin, num_nodes, launcher_as_node),
        slots=_slots(effective, origin),
        launcher_runs_ranks=Flag(launcher_as_node, _runtime_source("spec.mlPolicy.mpi.runLauncherAsNode", origin)),
        pod_names=JobSetPodNames(tuple((rj.name, rj.replicas, rj.count) for rj in effective.jobs)),
    )


class _PodGroupsMemo:
    """``pod_groups`` per effective job (by identity: the entry holds on to it, so its id is not
    taken by another while the entry lives) and ``numNodes`` (only a whole number is read); as
    many entries as the memo of effective jobs, the least recently used dropped first. An entry
    holds its effective job, so it weighs what an entry of that memo does: the length of the
    TrainJob's spec inputs written out (worked out only when an entry is made)."""

    def __init__(self, size: int = EFFECTIVE_JOBS) -> None:
        self._entries: BoundedMemo[tuple[int, type, int | None], tuple[EffectiveJob, PodGroups]] = BoundedMemo(size)

    def __call__(self, effective: EffectiveJob, num_nodes: object, trainjob: Obj) -> PodGroups:
        nodes = num_nodes if isinstance(num_nodes, int) else None
        key = (id(effective), type(nodes), nodes)
        entry = self._entries.get(key)
        if entry is not None:
            return entry[1]
        groups = pod_groups(effective, nodes)
        inputs = inputs_key_or_none(trainjob)
        if inputs is not None:  # as for the effective job: what cannot be written out is not kept
            self._entries.put(key, (effective, groups), len(inputs))
        return groups

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()


_pod_groups = _PodGroupsMemo()


def _runtime_source(path: str, origin: str, **extra: Any) -> Source:
    return Source(path, origin, RUNTIME_REF, **extra)


def _source(written: Written, origin: str, **extra: Any) -> Source:
    return _runtime_source(written.path, origin, **extra) if written.in_runtime else Source(written.path, **extra)


def _group(role: Role, name: str, rj: EffectiveReplicatedJob | None, origin: str, num_nodes: object,
           launcher_as_node: bool) -> PodGroup:
    noun = "launcher" if role is Role.LAUNCHER else "node"
    if rj is None:
        where = _runtime_source("spec.template.spec.replicatedJobs", origin)
        return PodGroup(role, name, noun, False, where, None, where, 0, {}, where)
    group_source = _source(rj.written, origin)
    count, count_source = _count(role, rj, origin, num_nodes, launcher_as_node)
    template_source = _template_source(rj, origin)
    containers = tuple(_container(c, origin) for c in rj.containers)
    return PodGroup(role, name, noun, True, group_source, count, count_source, rj.pods, rj.pod_spec,
                    template_source, containers, rj.pod_template)


def _count(role: Role, rj: EffectiveReplicatedJob, origin: str, num_nodes: object,
           launcher_as_node: bool) -> tuple[int | None, Source]:
    """How many pods the user asked for, in pods of the group, and where they asked. With
    ``runLauncherAsNode`` the launcher is one of the ``numNodes`` nodes: the node pods are one
    fewer than the user's number (``Source.offset``), as the worker pods of an MPIJob that runs
    its launcher as a worker are its Worker replicas."""
    written = rj.count_written
    if role is Role.WORKER and not written.in_runtime:  # spec.trainer.numNodes
        offset = 1 if launcher_as_node else 0
        return (num_nodes - offset if isinstance(num_nodes, int) else None), Source(written.path, offset=offset)
    if role is Role.WORKER and rj.count_explicit:  # numNodes unset: the runtime's parallelism applies
        return rj.count, _source(written, origin)
    if role is Role.WORKER:
        return None, Source(
            "spec.trainer.numNodes", offset=1 if launcher_as_node else 0,
            when_unset=f"{TRAINJOB_KIND.controller} then runs {plural(rj.pods, 'node pod')} "
                       f"({origin}: {written.path} is not set either)")
    return rj.pods, _source(written, origin)


def _template_source(rj: EffectiveReplicatedJob, origin: str) -> Source:
    """Where the pod spec's scheduling fields were written: the TrainJob's patch that set one,
    else the runtime's pod template."""
    for key in _SCHEDULING:
        written = rj.pod_fields.get(key)
        if written is not None and not written.in_runtime:
            return Source(written.path.rsplit(".", 1)[0])
    return _runtime_source(f"{rj.written.path}.template.spec.template.spec", origin)


def _container(container: EffectiveContainer, origin: str) -> ContainerRef:
    return ContainerRef(
        container.container, container.written.path, container.init, origin, RUNTIME_REF,
        image=None if container.image.in_runtime else Source(container.image.path),
        resources=None if container.resources.in_runtime else Source(container.resources.path),
    )


def _slots(effective: EffectiveJob, origin: str) -> Slots:
    written = effective.slots_written
    if written is None:  # nobody wrote it: the runtime's default of 1
        return Slots(None, _NUM_PROC_PER_NODE)
    if written.path.endswith("numProcPerNode"):
        return Slots(effective.slots, _source(written, origin))
    # The controller took the GPU count per node: set numProcPerNode to choose otherwise
    return Slots(effective.slots, _NUM_PROC_PER_NODE)


def _readable_slots(asked: object, slots: Slots) -> Slots:
    """``slots``, but nothing to check when ``numProcPerNode`` is a string the controller cannot
    read as a number (v2.1's ``"auto"``, which it takes as 0): ``training-runtime`` says so,
    quoting what the user wrote; a range check of the 0 would only echo a number nobody wrote."""
    if isinstance(asked, str) and int_or_string_value(asked) is None:
        return Slots(None, _NUM_PROC_PER_NODE)
    return slots


def lifecycle(trainjob: Obj) -> Lifecycle:
    """Suspended (``spec.suspend``); active: not finished (``Complete`` / ``Failed``), not being
    deleted, not handed to MultiKueue; pods not created yet: active, and the status shows no
    replicated job with an active, ready or finished pod (the controller has not started it)."""
    if spec(trainjob).get("suspend") is True:
        return Lifecycle(True, False, False)
    status = mapping(trainjob, "status")
    conditions = {str(c.get("type")): str(c.get("status")) for c in sequence(status, "conditions")
                  if isinstance(c, Mapping)}
    active = not (conditions.get("Complete") == "True" or conditions.get("Failed") == "True"
                  or metadata(trainjob).get("deletionTimestamp") or spec(trainjob).get("managedBy") == MULTIKUEUE)
    started = any(isinstance(job, Mapping) and any(job.get(k) for k in ("active", "ready", "succeeded", "failed"))
                  for job in sequence(status, "jobsStatus"))
    return Lifecycle(False, bool(active), bool(active) and not started)
