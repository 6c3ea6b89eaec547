"""The MPI workload view of an MPIJob (``kubeflow.org/v2beta1``), read as the MPI operator reads it.

Everything an MPIJob says about its pods is written in the MPIJob itself, so every ``Source``
here is a path of the reviewed object. Those paths do not depend on the object: they are made
once, at import, and a view costs only its few per-request objects (two pod groups and a
reference per container).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from policies.mpijob.reading import GROUP, KIND, LAUNCHER, QUEUE_LABEL, WORKER, metadata, replica_path, spec
from policies.messages import plural
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

MPIJOB = WorkloadKind(kind=KIND, plural="mpijobs", group=GROUP, controller="the operator", article="an")
OPERATOR = "kubeflow.org/mpi-operator"  # spec.runPolicy.managedBy of jobs this cluster's operator runs

LAUNCHER_SUFFIX = "-launcher"
WORKER_SUFFIX = "-worker-"

# Read once: a member read off an Enum class is a Python call on 3.11 (docs/performance.md, "Fast
# paths kept and removed"), and these are read for every pod of every request.
_LAUNCHER = Role.LAUNCHER

_SLOTS = Source("spec.slotsPerWorker")
_RUN_LAUNCHER_AS_WORKER = Source("spec.runLauncherAsWorker")
# The flag and the lifecycle have a few possible values each: made here, shared by every view
# (a view and what it holds are read only), not made again for each request.
_RUNS_RANKS = {value: Flag(value, _RUN_LAUNCHER_AS_WORKER) for value in (False, True)}
_SUSPENDED = Lifecycle(suspended=True, active=False, pods_not_created_yet=False)
_INACTIVE = Lifecycle(suspended=False, active=False, pods_not_created_yet=False)
_STARTING = Lifecycle(suspended=False, active=True, pods_not_created_yet=True)
_RUNNING = Lifecycle(suspended=False, active=True, pods_not_created_yet=False)
_QUEUE = Source(f"metadata.labels[{QUEUE_LABEL}]")
_GROUPS = {
    LAUNCHER: (Role.LAUNCHER, "launcher", Source(replica_path(LAUNCHER)),
               Source(f"{replica_path(LAUNCHER)}.replicas"), Source(f"{replica_path(LAUNCHER)}.template.spec")),
    WORKER: (Role.WORKER, "worker", Source(replica_path(WORKER)),
             Source(f"{replica_path(WORKER)}.replicas",
                    when_unset="the MPI operator then starts 0 workers (an omitted Worker count is 0, not 1)"),
             Source(f"{replica_path(WORKER)}.template.spec")),
}


@dataclass(slots=True)
class MPIJobPodNames:
    """The operator's names: the Service ``N``, the launcher ``N-launcher``, the worker pods
    ``N-worker-0`` … ``N-worker-<replicas-1>`` (also their hostnames)."""

    workers: int | None  # worker pods the names count; None: only a launcher

    @property
    def counted(self) -> str:
        return plural(self.workers, "worker") if self.workers is not None else "no Worker spec"

    def longest(self, name: str) -> str:
        """The last worker's name, or the launcher's when it is longer (or there are no workers)."""
        launcher = name + LAUNCHER_SUFFIX
        if self.workers is None:
            return launcher
        worker = f"{name}{WORKER_SUFFIX}{max(self.workers, 1) - 1}"
        return worker if len(worker) >= len(launcher) else launcher


def mpijob_workload(job: Mapping[str, Any], namespace: str = "") -> Workload:
    """The view of a v2beta1 MPIJob (any dict: a missing field is what the operator makes of it).
    ``namespace``: the request's, for an object that does not name its own."""
    job_spec, meta = spec(job), metadata(job)
    specs = job_spec.get("mpiReplicaSpecs") or {}
    launcher = _group(LAUNCHER, specs.get(LAUNCHER))
    workers = _group(WORKER, specs.get(WORKER))
    runs_ranks = bool(job_spec.get("runLauncherAsWorker"))
    # Worker pods the names count (None: only a launcher); 0 or unset names worker-0 anyway
    if workers.present:
        count = workers.count
        named_workers: int | None = count if isinstance(count, int) and count > 0 else 1
    else:
        named_workers = None if runs_ranks else 1
    # Positional, in the order of Workload's fields (its 13 keywords cost 5,600 instructions more
    # on every request: docs/performance.md, "The policy side at main"); mypy checks each type.
    return Workload(
        MPIJOB,  # kind
        str(meta.get("namespace") or namespace),  # namespace
        meta.get("name") or "",  # name
        meta.get("generateName") or "",  # generate_name
        launcher,
        workers,
        Slots(job_spec.get("slotsPerWorker"), _SLOTS),  # slots
        _RUNS_RANKS[runs_ranks],  # launcher_runs_ranks
        MPIJobPodNames(named_workers),  # pod_names
        lifecycle,  # lifecycle: worked out from the job when quota accounting first reads it
        (meta.get("labels") or {}).get(QUEUE_LABEL),  # queue
        _QUEUE,  # queue_source
        job,  # object
    )


def _group(replica_type: str, replica: Any) -> PodGroup:
    role, noun, source, count_source, template_source = _GROUPS[replica_type]
    present = type(replica) is dict or isinstance(replica, Mapping)
    if not present:
        return PodGroup(role, replica_type, noun, False, source, None, count_source, 0, {}, template_source)
    pod_template = replica.get("template") or {}
    template = pod_template.get("spec") or {}
    replicas = replica.get("replicas")
    if role is _LAUNCHER:
        pods = 1  # the operator always runs exactly one launcher
    else:  # an omitted or non-numeric count is 0 workers
        pods = replicas if isinstance(replicas, int) and replicas > 0 else 0
    # Init containers first, then the app containers, each in order: as the pod starts them.
    # Plain loops, not a function and comprehensions: one or two containers per group, where
    # each call would cost more than the loop (docs/performance.md, "The policy side at main").
    base = template_source.path
    containers: list[ContainerRef] = []
    listed = template.get("initContainers")
    if listed:
        for index, container in enumerate(listed):
            if type(container) is dict or isinstance(container, Mapping):
                containers.append(ContainerRef(container, f"{base}.initContainers[{index}]", True))
    listed = template.get("containers")
    if listed:
        for index, container in enumerate(listed):
            if type(container) is dict or isinstance(container, Mapping):
                containers.append(ContainerRef(container, f"{base}.containers[{index}]"))
    return PodGroup(role, replica_type, noun, True, source, replicas, count_source, pods, template,
                    template_source, tuple(containers), pod_template)


# --- status, as quota accounting needs it -----------------------------------------------------

def _conditions(job: Mapping[str, Any]) -> dict[str, str]:
    status = job.get("status") or {}
    return {str(c.get("type")): str(c.get("status")) for c in status.get("conditions") or ()
            if isinstance(c, Mapping)}


def lifecycle(job: Mapping[str, Any]) -> Lifecycle:
    """Suspended (``spec.runPolicy.suspend``); active: holding or about to hold resources in this
    cluster (not finished, suspended, deleted, nor managed by another controller such as
    MultiKueue); pods not created yet: active, and the MPI operator has not created its pods,
    so the quota's ``status.used`` does not include them yet.

    The last is read from the MPIJob's status, which the operator writes only at the *end* of a
    successful sync — after it created the worker pods (and, with ``AtStartup``, the launcher):

    - no condition at all: the operator has not completed a sync of this job (new, or its pod
      creation keeps failing, e.g. refused by this very quota);
    - ``Suspended`` still True although ``spec.runPolicy.suspend`` is false: just resumed (Kueue
      admitted it), and the operator has not created the pods yet.

    The rare window where pods exist but the status is not written yet counts a job twice
    (cautious); a ``WaitForWorkersReady`` launcher created later is not counted.
    """
    run_policy = spec(job).get("runPolicy") or {}
    if run_policy.get("suspend"):  # the usual new job has no status: nothing more to read
        return _SUSPENDED
    conditions = _conditions(job) if job.get("status") else {}
    if (conditions.get("Succeeded") == "True" or conditions.get("Failed") == "True"
            or metadata(job).get("deletionTimestamp") or run_policy.get("managedBy") not in (None, "", OPERATOR)):
        return _INACTIVE
    return _STARTING if not conditions or conditions.get("Suspended") == "True" else _RUNNING
