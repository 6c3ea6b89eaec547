"""``kubeflow.org/v1alpha1`` ↔ v2beta1, following what the v1alpha1 operator did with a job.

v1alpha1 has one pod ``template`` for the launcher and the workers, and sizes the job by
exactly one of ``gpus`` (deprecated), ``processingUnits`` (+ ``processingResourceType``) or
``replicas``. The operator derived: a total below the per-node capacity → one worker with all
units; a multiple of it → total/perNode workers with perNode units each; anything else was
refused. Workers were a StatefulSet running ``sleep 365d`` (the launcher reached them with
``kubectl exec``); the launcher was a Job from the same template with its resources cleared,
started once every worker was ready, with ``backoffLimit`` 6 unless given; when the launcher
finished, the workers were scaled to zero.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from policies.conversion.spoke import ConversionOptions, Spoke, hub_annotations, rebuilt, ssh_advisory
from policies.conversion.notes import Note, attention, problem
from policies.conversion.stash import Derived
from policies.conversion.tree import ABSENT, get, integer, is_mapping, mapping, put
from policies.mpijob.reading import HUB_API_VERSION, LAUNCHER, WORKER
from policies.kube.quantities import BadQuantity, quantity

API_VERSION = "kubeflow.org/v1alpha1"

GPU = "nvidia.com/gpu"
CPU = "cpu"
MASTER = "node-role.kubernetes.io/master"
CONTROL_PLANE = "node-role.kubernetes.io/control-plane"
DEFAULT_BACKOFF_LIMIT = 6
FIELDS = frozenset({
    "gpus", "gpusPerNode", "processingUnits", "processingUnitsPerNode", "processingResourceType",
    "slotsPerWorker", "launcherOnMaster", "backoffLimit", "activeDeadlineSeconds", "replicas", "template",
})
_WORKER = ("spec", "mpiReplicaSpecs", WORKER)
_CONTAINER0 = ("spec", "containers", 0)
_TEMPLATE_CONTAINER0 = ("template", *_CONTAINER0)

ADVISORY = ssh_advisory(API_VERSION)


# --- v1alpha1 → v2beta1 ------------------------------------------------------------------------
def up(obj: Mapping[str, Any], options: ConversionOptions) -> Derived:
    spec = mapping(obj.get("spec"))
    template = mapping(spec.get("template"))
    size = _size(spec, template, options)
    notes = [*size.notes, *_unknown_fields(spec)]
    launcher = {"replicas": 1, "restartPolicy": _launcher_restart_policy(template),
                "template": _launcher_template(template, spec.get("launcherOnMaster") is True)}
    replica_specs: dict[str, Any] = {LAUNCHER: launcher}
    if size.workers is not None:
        # The v1alpha1 StatefulSet restarted workers always; OnFailure is v2beta1's closest.
        replica_specs[WORKER] = {"replicas": size.workers, "restartPolicy": "OnFailure",
                                 "template": _worker_template(template, size)}
    run_policy: dict[str, Any] = {
        "cleanPodPolicy": "All",  # workers were scaled to zero once the launcher finished
        "backoffLimit": spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT),
    }
    if "activeDeadlineSeconds" in spec:
        run_policy["activeDeadlineSeconds"] = spec["activeDeadlineSeconds"]
    hub_spec: dict[str, Any] = {
        "slotsPerWorker": size.slots,
        "runPolicy": run_policy,
        "launcherCreationPolicy": "WaitForWorkersReady",  # the launcher waited for ready workers
        "mpiReplicaSpecs": replica_specs,
    }
    if size.workers is None:
        hub_spec["runLauncherAsWorker"] = True  # mpirun with no workers ran the ranks in the launcher
    status = _hub_status(obj["status"]) if "status" in obj else None
    annotations = hub_annotations(obj, API_VERSION, tuple(notes), {"spec": hub_spec})
    return Derived(rebuilt(obj, HUB_API_VERSION, hub_spec, status, annotations), tuple(notes))


class _Size:
    def __init__(self, workers: int | None, per_worker: int | None, resource: str, slots: Any,
                 notes: list[Note]) -> None:
        self.workers = workers  # None: no Worker replica spec (the launcher ran alone)
        self.per_worker = per_worker  # units to set as each worker's limit; None: leave the template
        self.resource = resource
        self.slots = slots
        self.notes = notes


def _size(spec: Mapping[str, Any], template: Mapping[str, Any], options: ConversionOptions) -> _Size:
    notes: list[Note] = []
    resource_type = spec.get("processingResourceType")
    resource = resource_type if resource_type in (GPU, CPU) else GPU
    if resource_type is not None and resource_type not in (GPU, CPU):
        notes.append(attention("spec.processingResourceType",
                               f"{resource_type!r} is neither {GPU} nor {CPU}; the v1alpha1 operator used {GPU}, "
                               f"and so does this conversion"))
    about = (_WORKER + ("replicas",), _WORKER + ("template",) + _CONTAINER0 + ("resources", "limits", resource))
    if spec.get("gpus") is not None or spec.get("processingUnits") is not None:
        workers, per_worker = _size_by_units(spec, resource, options, notes, about)
        units = per_worker
    elif spec.get("replicas") is not None:
        workers, per_worker = _size_by_replicas(spec, notes, about), None
        units = _whole_units(get(template, _CONTAINER0 + ("resources", "limits", resource)))
    else:
        workers, per_worker, units = None, None, None
        notes.append(attention("spec", "sets none of gpus, processingUnits or replicas: the v1alpha1 operator ran "
                                       "the launcher alone, and so will v2beta1 (no Worker replica spec, "
                                       "runLauncherAsWorker)"))
    if "slotsPerWorker" in spec:
        slots = spec["slotsPerWorker"]
    else:  # the operator's hostfile: slots = units per worker, else 1
        slots = units if units and units > 0 else 1
    return _Size(workers, per_worker, resource, slots, notes)


def _size_by_units(spec: Mapping[str, Any], resource: str, options: ConversionOptions, notes: list[Note],
                   about: tuple) -> tuple[int | None, int | None]:
    field = "processingUnits" if spec.get("processingUnits") is not None else "gpus"
    per_node_field = "processingUnitsPerNode" if field == "processingUnits" else "gpusPerNode"
    if field == "processingUnits" and spec.get("gpus") is not None:
        notes.append(problem("spec.gpus", spec["gpus"], f"set together with processingUnits ({spec['processingUnits']}); "
                                                        "the v1alpha1 operator refused such jobs. Converted from "
                                                        "processingUnits; remove spec.gpus", *about))
    total = integer(spec[field])
    per_node = integer(spec.get(per_node_field))
    if spec.get(per_node_field) is not None and (per_node is None or per_node < 1):
        notes.append(problem(f"spec.{per_node_field}", spec[per_node_field],
                             "must be a positive integer; the v1alpha1 operator failed on it. Converted with "
                             f"{options.gpus_per_node} per node (the webhook's setting)", *about))
        per_node = None
    source = f"spec.{per_node_field}"
    if per_node is None:
        per_node, source = options.gpus_per_node, f"the webhook's --gpus-per-node; set spec.{per_node_field} to change it"
    if total is None or total < 1:
        notes.append(problem(f"spec.{field}", spec[field], "must be a positive integer; converted to a single worker "
                                                           "without a resource limit", *about))
        return 1, None
    if total < per_node:
        return 1, total
    if total % per_node == 0:
        return total // per_node, per_node
    # Refused by the old operator. Keep the total: the fewest equal workers that each fit a node.
    workers = math.ceil(total / per_node)
    while total % workers:
        workers += 1
    notes.append(problem(f"spec.{field}", total, f"not a multiple of {per_node} per node ({source}); the v1alpha1 "
                                                 "operator refused such jobs. "
                                                 f"Converted to {workers} workers with "
                                          f"{total // workers} {resource} each; set spec.{field} to a multiple of "
                                          f"{per_node} (e.g. {total - total % per_node} or "
                                          f"{total - total % per_node + per_node})", *about))
    return workers, total // workers


def _size_by_replicas(spec: Mapping[str, Any], notes: list[Note], about: tuple) -> int | None:
    replicas = integer(spec["replicas"])
    if replicas is None or replicas < 0:
        notes.append(problem("spec.replicas", spec["replicas"], "must be a whole number of workers; converted without "
                                                                "workers (the launcher runs every rank)", *about))
        return None
    if replicas == 0:
        notes.append(attention("spec.replicas", "replicas is 0: the v1alpha1 operator ran the launcher alone, and so "
                                                "will v2beta1 (no Worker replica spec, runLauncherAsWorker)"))
        return None
    return replicas


def _whole_units(limit: Any) -> int | None:
    if limit is ABSENT:
        return None
    try:
        value = quantity(limit)
    except BadQuantity:
        return None
    return int(value) if value == value.to_integral_value() else None


def _unknown_fields(spec: Mapping[str, Any]) -> list[Note]:
    return [attention(f"spec.{key}", "is not a kubeflow.org/v1alpha1 field and has no v2beta1 equivalent; "
                                     "it is not part of the converted job")
            for key in spec if key not in FIELDS]


def _launcher_restart_policy(template: Mapping[str, Any]) -> str:
    # A Job allows only Never or OnFailure: the operator turned anything else into OnFailure.
    return "Never" if get(template, ("spec", "restartPolicy")) == "Never" else "OnFailure"


def _launcher_template(template: Mapping[str, Any], on_master: bool) -> dict[str, Any]:
    out = dict(template)
    resources = get(template, _CONTAINER0 + ("resources",))
    if is_mapping(resources) and ("limits" in resources or "requests" in resources):
        out, container = _with_first_container(template)
        kept = {k: v for k, v in resources.items() if k not in ("limits", "requests")}
        if kept:
            container["resources"] = kept
        else:
            del container["resources"]
    if on_master:
        put(out, ("spec", "tolerations"), launcher_on_master_tolerations())
        put(out, ("spec", "affinity"), launcher_on_master_affinity())
    return out


def _worker_template(template: Mapping[str, Any], size: _Size) -> dict[str, Any]:
    if not is_mapping(get(template, _CONTAINER0)):
        return dict(template)
    out, container = _with_first_container(template)
    container.pop("command", None)  # v2beta1 workers run the image's sshd, not the MPI program
    container.pop("args", None)
    if size.per_worker is not None:
        put(container, ("resources", "limits", size.resource), size.per_worker)
    return out


def _with_first_container(template: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A copy of ``template`` holding a copy of its first container (which the caller checked
    is a map), and that container: to edit in place, everything else shared."""
    pod = template["spec"]
    containers = pod["containers"]
    container = dict(containers[0])
    return {**template, "spec": {**pod, "containers": [container, *containers[1:]]}}, container


def launcher_on_master_tolerations() -> list[dict[str, str]]:
    return [{"key": key, "operator": "Exists", "effect": "NoSchedule"} for key in (MASTER, CONTROL_PLANE)]


def launcher_on_master_affinity() -> dict[str, Any]:
    # Either label: older clusters mark control-plane nodes "master", current ones "control-plane".
    terms = [{"matchExpressions": [{"key": key, "operator": "Exists"}]} for key in (MASTER, CONTROL_PLANE)]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


# To recognise them (the converted objects get fresh copies, never these).
_ON_MASTER_TOLERATIONS = launcher_on_master_tolerations()
_ON_MASTER_AFFINITY = launcher_on_master_affinity()

_CONDITION = {"Active": ("Running", "MPIJobRunning", "active"),
              "Succeeded": ("Succeeded", "MPIJobSucceeded", "succeeded"),
              "Failed": ("Failed", "MPIJobFailed", "failed")}


def _hub_status(status: Any) -> Any:
    if not is_mapping(status):
        return status
    out: dict[str, Any] = {k: status[k] for k in ("startTime", "completionTime") if k in status}
    replica_statuses: dict[str, Any] = {}
    launcher_status = status.get("launcherStatus")
    if launcher_status in _CONDITION:
        kind, reason, counter = _CONDITION[launcher_status]
        replica_statuses[LAUNCHER] = {counter: 1}
        condition = {"type": kind, "status": "True", "reason": reason}
        since = status.get("completionTime" if kind != "Running" else "startTime")
        if isinstance(since, str):
            condition["lastTransitionTime"] = since
        out["conditions"] = [condition]
    if integer(status.get("workerReplicas")) is not None:
        replica_statuses[WORKER] = {"active": status["workerReplicas"]}
    if replica_statuses:
        out["replicaStatuses"] = replica_statuses
    return out


# --- v2beta1 → v1alpha1 ------------------------------------------------------------------------
def down(obj: Mapping[str, Any], options: ConversionOptions) -> Derived:
    spec = mapping(obj.get("spec"))
    replica_specs = mapping(spec.get("mpiReplicaSpecs"))
    launcher = mapping(replica_specs.get(LAUNCHER))
    worker = replica_specs.get(WORKER)
    out: dict[str, Any] = {}
    if is_mapping(worker) and "replicas" in worker:
        out["replicas"] = worker["replicas"]
    out["template"] = _shared_template(launcher, worker)
    if "slotsPerWorker" in spec:
        out["slotsPerWorker"] = spec["slotsPerWorker"]
    run_policy = mapping(spec.get("runPolicy"))
    for key in ("backoffLimit", "activeDeadlineSeconds"):
        if key in run_policy:
            out[key] = run_policy[key]
    launcher_pod = mapping(get(launcher, ("template", "spec")))
    if (launcher_pod.get("tolerations") == _ON_MASTER_TOLERATIONS
            and launcher_pod.get("affinity") == _ON_MASTER_AFFINITY):
        out["launcherOnMaster"] = True
    status = _v1alpha1_status(obj["status"]) if "status" in obj else None
    return Derived(rebuilt(obj, API_VERSION, out, status))


def _shared_template(launcher: Mapping[str, Any], worker: Any) -> dict[str, Any]:
    """The one template both roles came from: the workers' (they keep the user's resources,
    tolerations and affinity), running the launcher's command."""
    base = mapping(worker.get("template") if is_mapping(worker) else launcher.get("template"))
    out = dict(base)
    if is_mapping(get(base, _CONTAINER0)):
        out, container = _with_first_container(base)
        launcher_container = get(launcher, _TEMPLATE_CONTAINER0)
        for key in ("command", "args"):
            value = get(launcher_container, (key,))
            if value is ABSENT:
                container.pop(key, None)
            else:
                container[key] = value
    if launcher.get("restartPolicy") == "Never":
        put(out, ("spec", "restartPolicy"), "Never")
    return out


def _v1alpha1_status(status: Any) -> Any:
    if not is_mapping(status):
        return status
    out: dict[str, Any] = {}
    replica_statuses = mapping(status.get("replicaStatuses"))
    launcher = mapping(replica_statuses.get(LAUNCHER))
    state = next((state for state, (_, _, counter) in _CONDITION.items()  # the operator's order
                  if (integer(launcher.get(counter)) or 0) > 0), None)
    if state is None:
        conditions = status.get("conditions")
        true_conditions = {c.get("type") for c in conditions if is_mapping(c) and c.get("status") == "True"} \
            if isinstance(conditions, list) else set()
        state = next((state for state in ("Succeeded", "Failed", "Active") if _CONDITION[state][0] in true_conditions), None)
    if state is not None:
        out["launcherStatus"] = state
    active_workers = integer(mapping(replica_statuses.get(WORKER)).get("active"))
    if active_workers is not None:
        out["workerReplicas"] = active_workers
    for key in ("startTime", "completionTime"):
        if key in status:
            out[key] = status[key]
    return out


SPOKE = Spoke(
    API_VERSION,
    up=up,
    down=down,
    coupled=((
        ("spec", "gpus"), ("spec", "gpusPerNode"), ("spec", "processingUnits"), ("spec", "processingUnitsPerNode"),
        ("spec", "processingResourceType"), ("spec", "replicas"), ("spec", "slotsPerWorker"),
        ("spec", "template") + _CONTAINER0 + ("resources",),
    ),),
    advisory=ADVISORY,
)
to_hub = SPOKE.to_hub
from_hub = SPOKE.from_hub
