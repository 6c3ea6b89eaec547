"""The type check of a TrainJob's fields the webhook reads, before anything reads them.

The API server checks a TrainJob against its CRD schema only after the mutating webhooks, and a
hand-made request can carry anything: like an MPIJob's (``policies.mpijob.crd_type_check``), a TrainJob whose
fields have the wrong types is refused with their paths, and nothing else runs on it. The schema
covers the fields of both API shapes the webhook reads; the pod templates inside patches are
checked against the same Kubernetes pod schema as an MPIJob's templates (from the embedded CRD
schema), so the check and the MPIJob's never drift apart. Unknown fields are left to pruning.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from policies.interface import Finding
from policies.mpijob.crd_type_check import OBJECT_META, mpijob_schema, schema_check

_STRING: dict[str, Any] = {"type": "string"}
_STRING_MAP = {"type": "object", "additionalProperties": _STRING}
_STRINGS = {"type": "array", "items": _STRING}
_LABELS_ONLY = {"type": "object", "properties": {"labels": _STRING_MAP, "annotations": _STRING_MAP}}


def _object(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def _list_of(item: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": item}


@cache
def trainjob_schema() -> dict[str, Any]:
    pod_template = mpijob_schema()["properties"]["spec"]["properties"]["mpiReplicaSpecs"][
        "additionalProperties"]["properties"]["template"]
    pod_spec = dict(pod_template["properties"]["spec"])
    pod_spec.pop("required", None)  # a patch names only what it changes
    container = pod_spec["properties"]["containers"]["items"]["properties"]
    patched_pod = _object(metadata=_LABELS_ONLY, spec=pod_spec)
    job_patch = _object(name=_STRING, template=_object(metadata=_LABELS_ONLY, spec=_object(template=patched_pod)))
    runtime_patch = _object(
        manager=_STRING, time=_STRING,
        trainingRuntimeSpec=_object(template=_object(metadata=_LABELS_ONLY,
                                                     spec=_object(replicatedJobs=_list_of(job_patch)))))
    override = _object(targetJobs=_list_of(_object(name=_STRING)), metadata=_LABELS_ONLY, spec=pod_spec)
    trainer = _object(image=_STRING, command=_STRINGS, args=_STRINGS, env=container["env"],
                      numNodes={"type": "integer"}, numProcPerNode={"x-kubernetes-int-or-string": True},
                      resourcesPerNode=container["resources"])
    spec = _object(runtimeRef=_object(name=_STRING, kind=_STRING, apiGroup=_STRING), trainer=trainer,
                   suspend={"type": "boolean"}, managedBy=_STRING, runtimePatches=_list_of(runtime_patch),
                   podTemplateOverrides=_list_of(override), labels=_STRING_MAP, annotations=_STRING_MAP)
    return _object(metadata=OBJECT_META, spec=spec)


@cache
def _check() -> Callable[[Any], list[Finding]]:
    return schema_check(trainjob_schema())


def check_trainjob_shape(trainjob: Any) -> list[Finding]:
    """Type problems of the fields the webhook reads, as findings of the rule ``object-shape``."""
    return _check()(trainjob)
