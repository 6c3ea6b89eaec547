"""The type check of a TrainJob's fields the webhook reads, before anything reads them.

The API server checks a TrainJob against its CRD schema only after the mutating webhooks, and a
hand-made request can carry anything: like an MPIJob's (``policies.mpijob.crd_type_check``), a TrainJob whose
fields have the wrong types is refused with their paths, and nothing else runs on it. The schema
covers the fields of both API shapes the webhook reads; the pod templates inside patches are
checked against the same Kubernetes pod schema as an MPIJob's templates (from the embedded CRD
schema), so the check and the MPIJob's never drift apart. Unknown fields are left to pruning.

Nearly all of the work is in the spec fields the effective job is computed from (``SPEC_INPUTS``:
the patches' pod templates above all), and the same spec comes back again and again (/mutate then
/validate, retries, every UPDATE). The caller that has the exact key of those fields
(``effective_job_memo.inputs_key``, computed once per request for the effective-job memo too)
hands it in: inputs found well typed under the same key are not walked again, the rest of the
TrainJob is. The findings are the same: a key is remembered only when the whole TrainJob had
none, and the check of those fields depends on nothing but their values, which equal ``marshal``
bytes pin down with their types and key order (only ``bytes`` keys are remembered, never the
JSON text used for maps of other types).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from policies.interface import Finding
from policies.mpijob.crd_type_check import OBJECT_META, mpijob_schema, schema_check
from policies.trainer.bounded_memo import BoundedMemo
from policies.trainer.effective_job import SPEC_INPUTS

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


@cache
def _check_without_inputs() -> Callable[[Any], list[Finding]]:
    """The check of everything but the spec's ``SPEC_INPUTS``."""
    schema = trainjob_schema()
    spec = schema["properties"]["spec"]
    rest = {name: field for name, field in spec["properties"].items() if name not in SPEC_INPUTS}
    return schema_check({**schema, "properties": {**schema["properties"], "spec": {**spec, "properties": rest}}})


class WellTypedInputs:
    """The keys of spec inputs found well typed, at most ``size`` weighing (their length) at
    most ``bounded_memo.BUDGET`` together, the least recently used dropped first."""

    def __init__(self, size: int = 512) -> None:
        self._keys: BoundedMemo[bytes, bool] = BoundedMemo(size)

    def __contains__(self, key: bytes) -> bool:
        return self._keys.get(key) is not None

    def add(self, key: bytes) -> None:
        self._keys.put(key, True, len(key))

    def __len__(self) -> int:
        return len(self._keys)

    def clear(self) -> None:
        self._keys.clear()


well_typed_inputs = WellTypedInputs()


def check_trainjob_shape(trainjob: Any, inputs_key: bytes | str | None = None) -> list[Finding]:
    """Type problems of the fields the webhook reads, as findings of the rule ``object-shape``.
    ``inputs_key``: ``effective_job_memo.inputs_key(trainjob)``, when the caller has it (see above)."""
    if type(inputs_key) is bytes and inputs_key in well_typed_inputs:
        return _check_without_inputs()(trainjob)
    findings = _check()(trainjob)
    if not findings and type(inputs_key) is bytes:
        well_typed_inputs.add(inputs_key)
    return findings
