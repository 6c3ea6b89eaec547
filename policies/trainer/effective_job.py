"""The job the Trainer controller will build from a TrainJob and its MPI runtime.

Computed as the controller does it (kubeflow/trainer ``pkg/runtime/core/trainingruntime.go``,
the MPI and JobSet plugins), release by release (``ApiShape``):

1. the runtime's JobSet template, patched in list order: v2.2+ ``spec.runtimePatches``
   (strategic merge of each entry's template; v2.3 merges the whole JobSet spec, v2.2 each
   named replicated job's template), v2.1 ``spec.podTemplateOverrides`` (strategic merge of the
   pod template of each job in ``targetJobs``);
2. per replicated job a pod count: its ``parallelism`` (1 when unset); the job labelled as the
   trainer's ancestor (the ``launcher`` of every MPI runtime) takes the runtime's
   ``mlPolicy.numNodes`` instead (1 when unset); at least 1;
3. ``spec.trainer.resourcesPerNode`` on the container ``node`` of the ancestor job and, with
   ``runLauncherAsNode``, of the job ``node``: it replaces the runtime's resources (v2.1, v2.2)
   or is merged into them per resource key (v2.3);
4. ``spec.trainer.image`` / ``command`` / ``args`` on the ancestor's container ``node``; the
   ancestor job gets ``replicas: 1``;
5. the MPI policy: with ``spec.trainer.numNodes`` set, the job ``node`` gets that many pods,
   one fewer with ``runLauncherAsNode`` but at least 1 (0 and negatives are taken as written);
   the slots per node are ``spec.trainer.numProcPerNode``, else the runtime's
   ``mlPolicy.mpi.numProcPerNode``, and when that is 1 the GPU count per node if above 1 (of
   ``resourcesPerNode`` if given, else of the runtime's first ``node`` container with resources).

Every value keeps where it was written (``Written``), so a message can name the field to change:
``spec.trainer.numNodes`` in the TrainJob, or a field of the runtime.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeGuard

from policies.kube.quantities import quantity_or_none
from policies.trainer import strategic_merge
from policies.trainer.api import (
    ANCESTOR_LABEL,
    ANCESTOR_TRAINER,
    DEFAULT_SSH_AUTH_MOUNT_PATH,
    LAUNCHER,
    NODE,
    OPENMPI,
    ApiShape,
    Obj,
    RuntimeRef,
    mapping,
    int_or_string_value,
    ml_policy,
    mpi_policy,
    runtime_ref,
    sequence,
    spec,
    trainer,
)

RUNTIME_JOBS = "spec.template.spec.replicatedJobs"
# Every field of the TrainJob's spec that ``effective_job`` reads, and nothing else of the
# TrainJob: a memo of effective jobs keys on them (tests/policies/trainer check the list).
SPEC_INPUTS = ("runtimeRef", "trainer", "runtimePatches", "podTemplateOverrides")
RESOURCES_PER_NODE = "spec.trainer.resourcesPerNode"


@dataclass(frozen=True, slots=True)
class Written:
    """Where a value was written: a field path of the TrainJob, or of its runtime."""

    path: str
    in_runtime: bool = False


# Frozen, with read-only maps once memoised (policies.trainer.effective_job_memo): one effective
# job is read by every request about the same TrainJob spec and runtime.
@dataclass(frozen=True, slots=True)
class EffectiveContainer:
    container: Mapping[str, Any]  # as the pods run it
    written: Written  # the container itself
    image: Written
    resources: Written
    init: bool = False

    @property
    def name(self) -> str:
        return str(self.container.get("name") or "")


@dataclass(frozen=True, slots=True)
class EffectiveReplicatedJob:
    name: str
    ancestor: str | None
    replicas: int  # JobSet replicas: Jobs of this template (the ancestor job always 1)
    count: int  # parallelism = completions of each Job: pods per Job
    count_written: Written  # what decided ``count``
    pod_template: Mapping[str, Any]  # metadata and spec, after patches and the trainer's values
    written: Written  # the replicated job in the runtime
    containers: tuple[EffectiveContainer, ...] = ()
    # Where each pod spec field (nodeSelector, tolerations, …) and the pod template's labels and
    # annotations were last written: the runtime, or the patch that set them
    pod_fields: Mapping[str, Written] = field(default_factory=dict)
    count_explicit: bool = True  # False: nobody wrote the count, the controller's default 1 applies

    @property
    def pods(self) -> int:
        return max(self.replicas, 0) * max(self.count, 0)

    @property
    def pod_spec(self) -> Mapping[str, Any]:
        return mapping(self.pod_template, "spec")


@dataclass(frozen=True, slots=True)
class EffectiveJob:
    shape: ApiShape
    runtime: RuntimeRef
    jobs: tuple[EffectiveReplicatedJob, ...]
    run_launcher_as_node: bool
    slots: int
    slots_written: Written | None  # None: nobody wrote it, the runtime's default 1 applies
    mpi_implementation: str
    ssh_auth_mount_path: str

    def job(self, name: str) -> EffectiveReplicatedJob | None:
        # A loop, not next() over a generator: each mutation asks for the launcher and the
        # node, and a generator object per question is most of what the question costs
        for job in self.jobs:
            if job.name == name:
                return job
        return None

    @property
    def launcher(self) -> EffectiveReplicatedJob | None:
        return self.job(LAUNCHER)

    @property
    def node(self) -> EffectiveReplicatedJob | None:
        return self.job(NODE)

    @property
    def ancestor(self) -> EffectiveReplicatedJob | None:
        return next((job for job in self.jobs if job.ancestor == ANCESTOR_TRAINER), None)


def effective_job(trainjob: Obj, runtime: Obj, shape: ApiShape) -> EffectiveJob:
    """The job built from ``trainjob`` and ``runtime`` (whose ``spec.mlPolicy.mpi`` is set)."""
    mpi = mpi_policy(runtime) or {}
    policy = ml_policy(runtime)
    job_trainer = trainer(trainjob)
    launcher_as_node = mpi.get("runLauncherAsNode") is True
    template_spec = mapping(mapping(spec(runtime), "template"), "spec")
    jobs, provenance = _patched_jobs(trainjob, template_spec, shape)

    built = []
    for index, (job, fields) in enumerate(zip(jobs, provenance)):
        built.append(_replicated_job(index, job, fields, policy, job_trainer, launcher_as_node, shape))
    built = _node_count(built, job_trainer, launcher_as_node)
    slots, slots_written = _slots(mpi, job_trainer, built)
    implementation = mpi.get("mpiImplementation")
    mount = mpi.get("sshAuthMountPath")
    return EffectiveJob(
        shape, runtime_ref(trainjob), tuple(built), launcher_as_node, slots, slots_written,
        implementation if isinstance(implementation, str) and implementation else OPENMPI,
        mount if isinstance(mount, str) and mount else DEFAULT_SSH_AUTH_MOUNT_PATH,
    )


# --- 1. patches -----------------------------------------------------------------------------

Provenance = dict[str, Written]  # pod field ("spec.nodeSelector", "metadata.labels") → where


def _patched_jobs(trainjob: Obj, template_spec: Obj, shape: ApiShape) -> tuple[list[Obj], list[Provenance]]:
    """The runtime's replicated jobs after the TrainJob's patches, each with where its pod
    template's fields were last written."""
    jobs: list[Obj] = [job for job in sequence(template_spec, "replicatedJobs") if isinstance(job, Mapping)]
    provenance: list[Provenance] = [_runtime_fields(index, job) for index, job in enumerate(jobs)]
    job_spec = spec(trainjob)
    if shape is ApiShape.V2_1:
        for p, override in enumerate(sequence(job_spec, "podTemplateOverrides")):
            if isinstance(override, Mapping):
                _apply_override(jobs, provenance, override, f"spec.podTemplateOverrides[{p}]")
        return jobs, provenance
    for p, patch in enumerate(sequence(job_spec, "runtimePatches")):
        patch_spec = mapping(mapping(mapping(patch, "trainingRuntimeSpec") if isinstance(patch, Mapping) else {},
                                     "template"), "spec")
        base = f"spec.runtimePatches[{p}].trainingRuntimeSpec.template.spec.replicatedJobs"
        if shape is ApiShape.V2_3 and patch_spec:
            jobs, provenance = _merge_jobset_spec(jobs, provenance, patch_spec, base)
        else:
            for r, job_patch in enumerate(sequence(patch_spec, "replicatedJobs")):
                if not isinstance(job_patch, Mapping) or not isinstance(job_patch.get("template"), Mapping):
                    continue
                for index, job in enumerate(jobs):
                    if job.get("name") == job_patch.get("name"):
                        jobs[index] = {**job, "template": strategic_merge.merge(job.get("template") or {},
                                                                                 job_patch["template"])}
                        _note(provenance[index], mapping(job_patch, "template"), f"{base}[{r}].template")
    return jobs, provenance


def _merge_jobset_spec(jobs: list[Obj], provenance: list[Provenance], patch_spec: Obj,
                       base: str) -> tuple[list[Obj], list[Provenance]]:
    """v2.3: the whole JobSet spec patched at once, then the runtime's job order restored (a job
    the runtime lacks sorts as the first one did: Go's zero value for a missing map entry)."""
    order = {job.get("name"): index for index, job in enumerate(jobs)}
    merged = strategic_merge.merge({"replicatedJobs": jobs}, patch_spec).get("replicatedJobs") or []
    merged = [job for job in merged if isinstance(job, Mapping)]
    by_name = {job.get("name"): fields for job, fields in zip(jobs, provenance)}
    fields_of = [dict(by_name.get(job.get("name"), {})) for job in merged]
    for r, job_patch in enumerate(sequence(patch_spec, "replicatedJobs")):
        if isinstance(job_patch, Mapping):
            for index, job in enumerate(merged):
                if job.get("name") == job_patch.get("name"):
                    _note(fields_of[index], mapping(job_patch, "template"), f"{base}[{r}].template")
    ranked = sorted(range(len(merged)), key=lambda i: order.get(merged[i].get("name"), 0))
    return [merged[i] for i in ranked], [fields_of[i] for i in ranked]


def _apply_override(jobs: list[Obj], provenance: list[Provenance], override: Obj, path: str) -> None:
    """v2.1: one podTemplateOverrides entry on the pod template of each job it targets."""
    targets = {t.get("name") for t in sequence(override, "targetJobs") if isinstance(t, Mapping)}
    pod_patch: dict[str, Any] = {}
    meta = mapping(override, "metadata")
    kept = {k: meta[k] for k in ("labels", "annotations") if isinstance(meta.get(k), Mapping)}
    if kept:
        pod_patch["metadata"] = kept
    if isinstance(override.get("spec"), Mapping):
        pod_patch["spec"] = override["spec"]
    for index, job in enumerate(jobs):
        if job.get("name") not in targets:
            continue
        job_template = mapping(job, "template")
        job_spec = mapping(job_template, "spec")
        pod = strategic_merge.merge(job_spec.get("template") or {}, pod_patch)
        jobs[index] = {**job, "template": {**job_template, "spec": {**job_spec, "template": pod}}}
        for key in pod_patch.get("spec") or {}:
            provenance[index][f"spec.{key}"] = Written(f"{path}.spec.{key}")
        for key in kept:
            provenance[index][f"metadata.{key}"] = Written(f"{path}.metadata.{key}")


def _runtime_fields(index: int, job: Obj) -> Provenance:
    pod = _pod_template(job)
    where = f"{RUNTIME_JOBS}[{index}].template.spec.template"
    fields = {f"spec.{key}": Written(f"{where}.spec.{key}", True) for key in mapping(pod, "spec")}
    fields.update({f"metadata.{key}": Written(f"{where}.metadata.{key}", True) for key in mapping(pod, "metadata")})
    return fields


def _note(fields: Provenance, job_template_patch: Obj, path: str) -> None:
    """The pod fields a replicated job's template patch writes now come from that patch."""
    pod = mapping(mapping(job_template_patch, "spec"), "template")
    for key in mapping(pod, "spec"):
        fields[f"spec.{key}"] = Written(f"{path}.spec.template.spec.{key}")
    for key in mapping(pod, "metadata"):
        fields[f"metadata.{key}"] = Written(f"{path}.spec.template.metadata.{key}")


def _pod_template(job: Obj) -> Obj:
    return mapping(mapping(mapping(job, "template"), "spec"), "template")


# --- 2–4. counts, resourcesPerNode, the trainer's values --------------------------------------

def _replicated_job(index: int, job: Obj, fields: Provenance, policy: Obj, job_trainer: Obj,
                    launcher_as_node: bool, shape: ApiShape) -> EffectiveReplicatedJob:
    name = str(job.get("name") or "")
    where = f"{RUNTIME_JOBS}[{index}]"
    job_template = mapping(job, "template")
    labels = mapping(mapping(job_template, "metadata"), "labels")
    ancestor = labels.get(ANCESTOR_LABEL) if isinstance(labels.get(ANCESTOR_LABEL), str) else None
    parallelism = mapping(job_template, "spec").get("parallelism")
    count = parallelism if _is_int(parallelism) else 1
    count_written = Written(f"{where}.template.spec.parallelism", True)
    listed_replicas = job.get("replicas")
    replicas = listed_replicas if _is_int(listed_replicas) else 1
    explicit = _is_int(parallelism)
    is_trainer = ancestor == ANCESTOR_TRAINER
    if is_trainer:
        num_nodes = policy.get("numNodes")
        count, explicit = (num_nodes, True) if _is_int(num_nodes) else (1, False)
        count_written = Written("spec.mlPolicy.numNodes", True)
        replicas = 1
    count = max(count, 1)

    pod = _pod_template(job)
    pod_spec = dict(mapping(pod, "spec"))
    gets_resources = "resourcesPerNode" in job_trainer and (is_trainer or (launcher_as_node and name == NODE))
    containers: list[EffectiveContainer] = []
    patched = False
    for key, init in (("initContainers", True), ("containers", False)):
        listed = []
        for c, container in enumerate(sequence(pod_spec, key)):
            if not isinstance(container, Mapping):
                continue
            written = Written(f"{where}.template.spec.template.spec.{key}[{c}]", True)
            image, resources = Written(f"{written.path}.image", True), Written(f"{written.path}.resources", True)
            if not init and container.get("name") == NODE:
                if is_trainer:
                    container, image = _with_trainer_values(container, job_trainer, image)
                if gets_resources and not patched:
                    patched = True  # the first container named node, as the controller breaks there
                    container, resources = _with_resources(container, job_trainer, shape, resources)
            listed.append(container)
            containers.append(EffectiveContainer(container, written, image, resources, init))
        if key in pod_spec:
            pod_spec[key] = listed
    pod_template = {**pod, "spec": pod_spec}
    ordered = tuple(c for c in containers if not c.init) + tuple(c for c in containers if c.init)
    return EffectiveReplicatedJob(name, ancestor, replicas, count, count_written, pod_template,
                                  Written(where, True), ordered, fields, explicit)


def _with_trainer_values(container: Obj, job_trainer: Obj, image: Written) -> tuple[Obj, Written]:
    updated = dict(container)
    for key in ("image", "command", "args"):
        if job_trainer.get(key) is not None:
            updated[key] = job_trainer[key]
    if job_trainer.get("image") is not None:
        image = Written("spec.trainer.image")
    return updated, image


def _with_resources(container: Obj, job_trainer: Obj, shape: ApiShape, resources: Written) -> tuple[Obj, Written]:
    per_node = mapping(job_trainer, "resourcesPerNode")
    given = {key: per_node[key] for key in ("limits", "requests") if isinstance(per_node.get(key), Mapping)}
    if shape.merges_resources:
        base = mapping(container, "resources")
        merged = dict(base)
        for key, values in given.items():
            merged[key] = {**mapping(base, key), **values}
        return {**container, "resources": merged}, Written(RESOURCES_PER_NODE)
    if not given:  # v2.1–2.2 replace only when limits or requests is set
        return container, resources
    return {**container, "resources": given}, Written(RESOURCES_PER_NODE)


# --- 5. the MPI policy ------------------------------------------------------------------------

def _node_count(jobs: list[EffectiveReplicatedJob], job_trainer: Obj,
                launcher_as_node: bool) -> list[EffectiveReplicatedJob]:
    num_nodes = job_trainer.get("numNodes")
    if not _is_int(num_nodes):
        return jobs
    for index, job in enumerate(jobs):
        if job.name == NODE:
            jobs[index] = replace(job, count=max(num_nodes - 1, 1) if launcher_as_node else num_nodes,
                                  count_written=Written("spec.trainer.numNodes"), count_explicit=True)
            break
    return jobs


def _slots(mpi: Obj, job_trainer: Obj, jobs: Sequence[EffectiveReplicatedJob]) -> tuple[int, Written | None]:
    asked = job_trainer.get("numProcPerNode")
    if asked is not None:
        return _int_or_string(asked), Written("spec.trainer.numProcPerNode")
    runtime_value = mpi.get("numProcPerNode")
    runtime_slots = runtime_value if _is_int(runtime_value) else 1  # the CRD's default
    written = Written("spec.mlPolicy.mpi.numProcPerNode", True) if runtime_value is not None else None
    if runtime_slots != 1:
        return runtime_slots, written
    if "resourcesPerNode" in job_trainer:
        resources: Obj = mapping(job_trainer, "resourcesPerNode")
        from_where = Written(RESOURCES_PER_NODE)
    else:
        resources, from_where = _runtime_node_resources(jobs)
    gpus = gpus_per_node(resources)
    if gpus > 1:
        return gpus, from_where
    return runtime_slots, written


def _runtime_node_resources(jobs: Sequence[EffectiveReplicatedJob]) -> tuple[Obj, Written]:
    """The resources of the first container ``node`` with resources, in the first job named
    ``node`` or labelled as the trainer's ancestor, in the runtime's order."""
    for job in jobs:
        if job.name == NODE or job.ancestor == ANCESTOR_TRAINER:
            for container in job.containers:
                if not container.init and container.name == NODE and isinstance(container.container.get("resources"), Mapping):
                    return container.container["resources"], container.resources
    return {}, Written("")


def gpus_per_node(resources: Obj) -> int:
    """The controller's GPU count: the first resource whose name contains "gpu", in requests,
    else in limits; its quantity rounded up."""
    count = _first_gpu(mapping(resources, "requests"))
    return count if count else _first_gpu(mapping(resources, "limits"))


def _first_gpu(resources: Obj) -> int:
    for name, quantity in resources.items():
        if "gpu" in str(name).lower():
            return _quantity_ceiling(quantity)
    return 0


def _quantity_ceiling(value: Any) -> int:
    parsed = quantity_or_none(value)
    return math.ceil(parsed) if parsed is not None else 0


def _int_or_string(value: Any) -> int:
    """v2.1's IntOrString ``numProcPerNode`` as the controller reads it (``IntValue``): a
    number, or a string that parses as one, else 0."""
    number = int_or_string_value(value)
    return 0 if number is None else number


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
