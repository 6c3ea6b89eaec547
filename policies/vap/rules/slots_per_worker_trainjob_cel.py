"""``slots-per-worker`` for TrainJobs in CEL: the MPI ranks per node within [min, max], as the
Trainer controller counts them: ``spec.trainer.numProcPerNode``, else the runtime's
``mlPolicy.mpi.numProcPerNode``, and when that is 1 (or unset) the GPUs per node if above 1
(of ``spec.trainer.resourcesPerNode`` when given, else of the runtime's first ``node`` container
with resources, in the first job named ``node`` or labelled as the trainer's ancestor).

Left to the webhook (the check passes): a v2.1 string ``numProcPerNode`` that is not a plain
integer, GPU counts that are not whole quantities or are named by several resources containing
"gpu" in one map (the controller takes the first in Go's random map order), and GPUs read from
the runtime when a patch of the TrainJob writes the resources of a ``node`` container or the
ancestor label, or names a job the runtime lacks.
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


def validations(reading: Reading) -> list[Validation]:
    return [by_message("slots", lambda root: _slots(reading, root))]


def _amount(value: str) -> str:
    """A GPU quantity as a whole number; a list of one, or [] when it is not whole."""
    return (f"(type({value}) == int ? [{value}] : "
            f"(type({value}) == string && isQuantity({value}) && quantity({value}).isInteger() ? "
            f"[quantity({value}).asInteger()] : []))")


def _gpus(resources: str) -> str:
    """The controller's GPU count of one resources map, as a list of one, or [] when it cannot be
    told exactly: the first resource containing "gpu" in requests, else in limits."""
    def one(kind: str) -> str:  # [0] none named; [n] one whole amount; [] cannot be told
        amounts = f"(has({resources}.{kind}) ? {resources}.{kind}.filter(k, {GPU}).map(k, " \
                  f"{_amount(f'{resources}.{kind}[k]')}) : [])"
        return f"(size({amounts}) == 0 ? [0] : (size({amounts}) > 1 ? [] : {amounts}[0]))"

    requests, limits = one("requests"), one("limits")
    return f"(size({requests}) == 1 && {requests}[0] != 0 ? {requests} : (size({requests}) == 1 ? {limits} : []))"


def _runtime_resources() -> str:
    """The resources of the runtime's first container ``node`` with resources, in the first job
    named ``node`` or labelled as the ancestor: a list of one, or []."""
    found = (f"{JOBS}.filter(j, {job_named('j', NODE)} || {is_ancestor('j')}).map(j, "
             f"{containers('j')}.filter(c, {job_named('c', NODE)} && has(c.resources)).map(c, c.resources))"
             f".filter(l, size(l) > 0)")
    return f"(size({found}) > 0 ? [{found}[0][0]] : [])"


def _slots(reading: Reading, root: str) -> str:
    asked = trainer_field(root, "numProcPerNode")
    from_job = trainer_present(root, "numProcPerNode")
    job_slots = (f"(type({asked}) == int ? [{asked}] : (type({asked}) == string && {asked}.matches('{INTEGER}') ? "
                 f"[int({asked})] : []))")
    runtime_set = f"(has({RUNTIME_VALUE}) && type({RUNTIME_VALUE}) == int)"
    runtime_slots = f"({runtime_set} ? {RUNTIME_VALUE} : 1)"
    per_node = f"{trainer_field(root, 'resourcesPerNode')}"
    patched = cel.any_of([
        reading.patches_any_pod(root, lambda pod: f"has({pod}.containers) && {pod}.containers.exists(c, "
                                                  f"{job_named('c', NODE)} && has(c.resources))"),
        reading.writes_any_ancestor_label(root),
        reading.adds_unknown_job(root),
    ])
    from_runtime = f"({patched} ? [] : {_runtime_resources()}.map(r, {_gpus('r')}))"
    # [gpus] when known, [] when it cannot be told; from resourcesPerNode or the runtime
    gpus = (f"({trainer_present(root, 'resourcesPerNode')} ? {_gpus(per_node)} : "
            f"(size({from_runtime}) == 0 ? [0] : {from_runtime}[0]))")

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
