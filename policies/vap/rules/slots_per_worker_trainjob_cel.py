"""``slots-per-worker`` for TrainJobs in CEL: the MPI ranks per node within [min, max], as the
Trainer controller counts them: ``spec.trainer.numProcPerNode``, else the runtime's
``mlPolicy.mpi.numProcPerNode``, and when that is 1 (or unset) the GPUs per node if above 1
(of ``spec.trainer.resourcesPerNode`` when given, else of the runtime's first ``node`` container
with resources, in the first job named ``node`` or labelled as the trainer's ancestor).

Left to the webhook (the check passes): a v2.1 string ``numProcPerNode`` that is not a plain
integer, GPU counts that are not whole quantities or are named by several resources containing
"gpu" in one map (the controller takes the first in Go's random map order), and GPUs read from
the runtime when a patch of the TrainJob writes the ancestor label or names a job the runtime
lacks (no patch can write a container's resources: the CRDs prune them).

GPU counts are variables, each computed once per evaluation (for ``object`` and, on UPDATE,
``oldObject``): a GPU count is a walk over one resources map.
"""
from __future__ import annotations

from policies.trainer.api import NODE
from policies.vap import cel_text as cel
from policies.vap.checks import Validation, by_message, first, line, param
from policies.vap.trainjob_fields_cel import (
    JOBS,
    LABEL,
    RUNTIME,
    RUNTIME_REF,
    Reading,
    containers,
    is_ancestor,
    job_named,
    trainer_field,
    trainer_present,
)

RULE = "slots-per-worker"
MIN, MAX = param("min"), param("max")
FIELD = "spec.trainer.numProcPerNode"
RUNTIME_FIELD = "spec.mlPolicy.mpi.numProcPerNode"
RUNTIME_VALUE = f"{RUNTIME}.{RUNTIME_FIELD}"
INTEGER = "^[+-]?[0-9]{1,18}$"
GPU = "k.lowerAscii().contains('gpu')"
ROOTS = {cel.NEW: "New", cel.OLD: "Old"}


def validations(reading: Reading) -> list[Validation]:
    check = by_message("slots", lambda root: _slots(reading, root))
    declared = [("runtimeGpuResources", _runtime_resources()),
                ("runtimeGpuRequests", f"variables.runtimeGpuResources.map(r, {_amounts('r', 'requests')})"),
                ("runtimeGpuLimits", f"variables.runtimeGpuResources.map(r, {_amounts('r', 'limits')})")]
    for root, suffix in ROOTS.items():
        per_node = trainer_field(root, "resourcesPerNode")
        given = trainer_present(root, "resourcesPerNode")
        declared += [(f"perNodeGpuRequests{suffix}", f"{given} ? {_amounts(per_node, 'requests')} : []"),
                     (f"perNodeGpuLimits{suffix}", f"{given} ? {_amounts(per_node, 'limits')} : []"),
                     (f"slotsGpus{suffix}", _gpus(reading, root, suffix))]
    return [Validation(check.name, check.expression, check.message, (*declared, *check.variables))]


def _amount(value: str) -> str:
    """A GPU quantity as a whole number; a list of one, or [] when it is not whole."""
    return (f"(type({value}) == int ? [{value}] : "
            f"(type({value}) == string && isQuantity({value}) && quantity({value}).isInteger() ? "
            f"[quantity({value}).asInteger()] : []))")


def _amounts(resources: str, kind: str) -> str:
    """The amounts of every resource of ``resources.<kind>`` whose name contains "gpu"."""
    return f"(has({resources}.{kind}) ? {resources}.{kind}.filter(k, {GPU}).map(k, {_amount(f'{resources}.{kind}[k]')}) : [])"


def _one(amounts: str) -> str:
    """[0] none named; [n] one whole amount; [] cannot be told (not whole, or several names)."""
    return f"(size({amounts}) == 0 ? [0] : (size({amounts}) > 1 ? [] : {amounts}[0]))"


def _count(requests: str, limits: str) -> str:
    """The controller's GPU count: the first "gpu" resource in requests, else in limits."""
    first_request = _one(requests)
    return (f"(size({first_request}) == 1 && {first_request}[0] != 0 ? {first_request} : "
            f"(size({first_request}) == 1 ? {_one(limits)} : []))")


def _runtime_resources() -> str:
    """The resources of the runtime's first container ``node`` with resources, in the first job
    named ``node`` or labelled as the ancestor: a list of one, or []."""
    found = (f"{JOBS}.filter(j, {job_named('j', NODE)} || {is_ancestor('j')}).map(j, "
             f"{containers('j')}.filter(c, {job_named('c', NODE)} && has(c.resources)).map(c, c.resources))"
             f".filter(l, size(l) > 0)")
    return f"size({found}) > 0 ? [{found}[0][0]] : []"


def _gpus(reading: Reading, root: str, suffix: str) -> str:
    """[GPUs per node] when known exactly, [] when not: from resourcesPerNode, else the runtime."""
    patched = cel.any_of([
        reading.writes_any_ancestor_label(root),
        reading.adds_unknown_job(root),
    ])
    from_runtime = (f"(size(variables.runtimeGpuResources) == 0 ? [0] : "
                    f"{_count('variables.runtimeGpuRequests[0]', 'variables.runtimeGpuLimits[0]')})")
    per_node = _count(f"variables.perNodeGpuRequests{suffix}", f"variables.perNodeGpuLimits{suffix}")
    return f"{trainer_present(root, 'resourcesPerNode')} ? {per_node} : ({patched} ? [] : {from_runtime})"


def _slots(reading: Reading, root: str) -> str:
    asked = trainer_field(root, "numProcPerNode")
    from_job = trainer_present(root, "numProcPerNode")
    job_slots = (f"(type({asked}) == int ? [{asked}] : (type({asked}) == string && {asked}.matches('{INTEGER}') ? "
                 f"[int({asked})] : []))")
    runtime_set = f"(has({RUNTIME_VALUE}) && type({RUNTIME_VALUE}) == int)"
    runtime_slots = f"({runtime_set} ? {RUNTIME_VALUE} : 1)"
    gpus = f"variables.slotsGpus{ROOTS[root]}"

    def out_of_range(value: str) -> str:
        return f"({value} < {MIN} || {value} > {MAX})"

    def message(value: str, path: str, runtime: bool) -> str:
        fix = f"string({value} > {MAX} ? {MAX} : {MIN})"
        where = f"' in ' + {LABEL}" if runtime else "''"
        body = (f"'numProcPerNode must be between ' + string({MIN}) + ' and ' + string({MAX}) + ' (asked ' + "
                f"string({value}) + '); set {path}' + {where} + ' to ' + {fix} + ', and use more nodes for more ranks'")
        if runtime:
            body = f"{LABEL} + ': {path}: ' + {body}"
        at = RUNTIME_REF if runtime else FIELD
        return line(RULE, cel.string(at), "Invalid value", body, f"string({value})")

    job_value = f"{job_slots}[0]"
    gpu_value = f"{gpus}[0]"
    return first(
        (f"{from_job} && size({job_slots}) == 1 && {out_of_range(job_value)}", message(job_value, FIELD, False)),
        (f"!{from_job} && {runtime_slots} != 1 && {out_of_range(RUNTIME_VALUE)}",
         message(RUNTIME_VALUE, RUNTIME_FIELD, True)),
        (f"!{from_job} && {runtime_slots} == 1 && size({gpus}) == 1 && {gpu_value} > 1 && {out_of_range(gpu_value)}",
         message(gpu_value, FIELD, False)),
        (f"!{from_job} && {runtime_set} && {runtime_slots} == 1 && size({gpus}) == 1 && {gpu_value} <= 1 && "
         f"{out_of_range('1')}", message("1", RUNTIME_FIELD, True)),
    )
