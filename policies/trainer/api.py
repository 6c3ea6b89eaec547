"""Reading ``trainer.kubeflow.org/v1alpha1`` objects (TrainJob, TrainingRuntime,
ClusterTrainingRuntime) as plain dicts, and the API shapes OpenShift AI ships.

Two shapes of the same ``v1alpha1`` exist in the field. Trainer v2.1 (OpenShift AI 3.2–3.5)
patches pod templates with ``spec.podTemplateOverrides`` and accepts ``spec.labels`` /
``spec.annotations`` and a string ``numProcPerNode``; v2.2 replaced them with
``spec.runtimePatches`` (keyed by ``manager``). v2.3 (OpenShift AI 3.6) keeps the v2.2 fields
but merges ``resourcesPerNode`` into the runtime's resources per key instead of replacing them.
The API server prunes the fields its CRD does not declare before any webhook sees the object,
so a field of one shape present in a request proves the shape; an object with neither says
nothing and the runtime or the policy file decides (``detect_shape``).
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeGuard

GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
TRAINJOB = "TrainJob"
TRAINJOBS = "trainjobs"
TRAINING_RUNTIME = "TrainingRuntime"
CLUSTER_TRAINING_RUNTIME = "ClusterTrainingRuntime"
RUNTIME_KINDS = (CLUSTER_TRAINING_RUNTIME, TRAINING_RUNTIME)

ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
ANCESTOR_TRAINER = "trainer"
LAUNCHER = "launcher"  # the replicated job (and, with runLauncherAsNode, its container is "node")
NODE = "node"  # the worker replicated job, and the name of the MPI container in both jobs
OPENMPI = "OpenMPI"
DEFAULT_SSH_AUTH_MOUNT_PATH = "/root/.ssh"
# The Trainer controller leaves TrainJobs with this spec.managedBy to MultiKueue: no pods here.
MULTIKUEUE = "kueue.x-k8s.io/multikueue"
KUEUE_MANAGER = "kueue.x-k8s.io/manager"  # the manager of Kueue's own runtimePatches entry
# The label Kueue (0.16 and before, on Trainer v2.1) puts on each podTemplateOverrides entry of its own
KUEUE_POD_SET = "kueue.x-k8s.io/podset"

Obj = Mapping[str, Any]


class ApiShape(StrEnum):
    """The TrainJob API as a Trainer release serves it (the policy file's ``apiShape``)."""

    V2_1 = "v2.1"  # podTemplateOverrides; resourcesPerNode replaces the runtime's resources
    V2_2 = "v2.2"  # runtimePatches; resourcesPerNode replaces
    V2_3 = "v2.3"  # runtimePatches; resourcesPerNode is merged per resource key

    @property
    def has_runtime_patches(self) -> bool:
        return self is not ApiShape.V2_1

    @property
    def merges_resources(self) -> bool:
        return self is ApiShape.V2_3


AUTO = "auto"
_SHAPE_V2_1, _SHAPE_V2_3 = ApiShape.V2_1, ApiShape.V2_3
# Fields only the v2.1 CRD declares, and only the v2.2+ CRD declares (under spec)
_V2_1_ONLY = ("podTemplateOverrides", "labels", "annotations")
_V2_2_ONLY = ("runtimePatches", "activeDeadlineSeconds")


def is_mapping(value: Any) -> TypeGuard[Mapping[str, Any]]:
    """``isinstance(value, Mapping)``, told at C speed for what nearly every value is: a dict
    (decoded JSON, and the read-only copies the memos hand out) or nothing. The ABC check itself
    costs about 1,800 instructions a call; a TrainJob review asked it about 35 times."""
    return isinstance(value, dict) or (value is not None and isinstance(value, Mapping))


def spec(obj: Obj) -> Obj:
    value = obj.get("spec")
    return value if is_mapping(value) else {}


def metadata(obj: Obj) -> Obj:
    value = obj.get("metadata")
    return value if is_mapping(value) else {}


def mapping(obj: Obj, key: str) -> Obj:
    value = obj.get(key)
    return value if is_mapping(value) else {}


def sequence(obj: Obj, key: str) -> Sequence[Any]:
    value = obj.get(key)
    return value if isinstance(value, list) else ()


def trainer(trainjob: Obj) -> Obj:
    return mapping(spec(trainjob), "trainer")


def ml_policy(runtime: Obj) -> Obj:
    return mapping(spec(runtime), "mlPolicy")


def mpi_policy(runtime: Obj) -> Obj | None:
    """The runtime's ``spec.mlPolicy.mpi``; None when the runtime is not an MPI runtime."""
    value = ml_policy(runtime).get("mpi")
    return value if is_mapping(value) else None


_WHOLE_NUMBER = re.compile(r"[+-]?[0-9]+")  # what Go's strconv.Atoi parses


def int_or_string_value(value: Any) -> int | None:
    """An IntOrString as the controller reads it (v2.1's ``numProcPerNode``): a number, or a
    string Go's ``strconv.Atoi`` parses (``"4"``, not ``" 4"`` nor ``"auto"``); None for any
    other value, which ``IntOrString.IntValue`` turns into 0."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _WHOLE_NUMBER.fullmatch(value):
        return int(value)
    return None


def is_multikueue(trainjob: Obj) -> bool:
    return spec(trainjob).get("managedBy") == MULTIKUEUE


@dataclass(frozen=True, slots=True)
class RuntimeRef:
    """``spec.runtimeRef`` with the CRD's defaults applied (kind ClusterTrainingRuntime)."""

    name: str
    kind: str
    api_group: str

    @property
    def supported(self) -> bool:
        return self.api_group == GROUP and self.kind in RUNTIME_KINDS

    @property
    def namespaced(self) -> bool:
        return self.kind == TRAINING_RUNTIME

    def describe(self) -> str:
        """How messages name the runtime: ``ClusterTrainingRuntime mpi-cuda``."""
        return f"{self.kind} {self.name}"


def runtime_ref(trainjob: Obj) -> RuntimeRef:
    ref = mapping(spec(trainjob), "runtimeRef")
    name, kind, group = ref.get("name"), ref.get("kind"), ref.get("apiGroup")
    fields = (
        name if isinstance(name, str) else "",
        kind if isinstance(kind, str) and kind else CLUSTER_TRAINING_RUNTIME,
        group if isinstance(group, str) and group else GROUP,
    )
    # The last one made is handed out again for the same fields: it is frozen, and building a
    # frozen dataclass (object.__setattr__ per field) is most of what this costs a request.
    # One entry, replaced whole: nothing grows with what requests name.
    global _last_runtime_ref
    last = _last_runtime_ref
    if last[0] == fields:
        return last[1]
    made = RuntimeRef(*fields)
    _last_runtime_ref = (fields, made)
    return made


_last_runtime_ref: tuple[tuple[str, str, str], RuntimeRef] = (("", "", ""), RuntimeRef("", "", ""))


def detect_shape(trainjob: Obj, pinned: str = AUTO, old_trainjob: Obj | None = None) -> ApiShape:
    """The API shape the cluster serves: ``pinned`` unless it is ``auto``; else what the
    object's own fields (or, on UPDATE, the stored object's) prove, see the module's docstring;
    else v2.3, the newest. v2.2 and v2.3 differ in no field, only in how ``resourcesPerNode``
    meets the runtime's resources: a v2.2 cluster, and a v2.1 cluster whose TrainJobs carry
    no field of their shape, pin it in the policy file."""
    if pinned != AUTO:
        return ApiShape(pinned)
    # Loops rather than any() over generators, the members read once (an Enum member read off
    # its class goes through a descriptor), and the spec read once: every TrainJob request
    # asks, and these cost it about 11,000 instructions (callgrind) a request
    for obj in (trainjob, old_trainjob):
        if obj is None:
            continue
        job_spec = spec(obj)
        for key in _V2_1_ONLY:
            if key in job_spec:
                return _SHAPE_V2_1
        if isinstance(mapping(job_spec, "trainer").get("numProcPerNode"), str):
            return _SHAPE_V2_1
        for key in _V2_2_ONLY:
            if key in job_spec:
                return _SHAPE_V2_3
    return _SHAPE_V2_3
