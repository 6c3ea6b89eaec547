"""``gpus-per-worker`` for TrainJobs in CEL, where ``spec.trainer.resourcesPerNode`` decides it.

The Trainer controller writes ``resourcesPerNode`` into the ``node`` container of the launcher
(the trainer's ancestor) and, with ``runLauncherAsNode``, of every node pod: replacing that
container's resources (v2.1, v2.2) or merged into them per resource key (v2.3). When the
runtime's ``node`` containers that receive it have no resources of their own, both give that
container exactly ``resourcesPerNode``, and it decides: every extended resource a whole number of
0 or more, a request only with an equal limit, and, with ``runLauncherAsNode`` and no other GPU
container in the runtime's node pod, the node pod's GPUs (each by its limit, else its request) at
most ``max``.

Left to the webhook: runtimes whose receiving ``node`` containers have resources (what v2.3
merges in, and the GPUs of node pods the runtime gives), node pods whose other containers name
GPUs (the webhook sums them), a patch that writes the launcher's ancestor label, and a
LimitRange's maximum. (No patch can write a container's resources: the CRDs prune them.)
"""
from __future__ import annotations

from policies.trainer.api import LAUNCHER, NODE
from policies.vap import cel_text as cel
from policies.vap.checks import Validation, by_message, first, line, param, quoted_value
from policies.vap.rules.gpus_per_worker_cel import GPU_SUFFIX, _extended
from policies.vap.trainjob_fields_cel import (
    LAUNCHER_AS_NODE,
    LAUNCHER_JOBS,
    NODE_JOBS,
    Reading,
    containers,
    has_node_container,
    is_ancestor,
    job_named,
    pod_spec_present,
    trainer_field,
    trainer_present,
)

RULE = "gpus-per-worker"
MAX = param("max")
FIELD = "spec.trainer.resourcesPerNode"
LAUNCHER_GETS = "variables.launcherGetsPerNode"
NODE_GETS = "variables.nodeGetsPerNode"


def validations(reading: Reading) -> list[Validation]:
    check = by_message("perNode", lambda root: _per_node(reading, root))
    launcher, node = f"{LAUNCHER_JOBS}[0]", f"{NODE_JOBS}[0]"
    # From the runtime alone, once per evaluation: which pods' node container gets
    # resourcesPerNode, whether those containers have resources of their own, and whether the
    # node pod names GPUs in any other container.
    runtime = (
        ("launcherGetsPerNode", f"size({LAUNCHER_JOBS}) > 0 && {is_ancestor(launcher)} && {has_node_container(launcher)}"),
        ("nodeGetsPerNode", f"{LAUNCHER_AS_NODE} && size({NODE_JOBS}) > 0 && {has_node_container(node)}"),
        ("perNodeAlone", f"(!{LAUNCHER_GETS} || {_bare(launcher)}) && (!{NODE_GETS} || {_bare(node)})"),
        ("nodePodOtherGpus", f"size({NODE_JOBS}) > 0 && ({_other_gpu_containers(node)})"),
    )
    return [Validation(check.name, check.expression, check.message, (*runtime, *check.variables))]


def _bare(job: str) -> str:
    """The job's node container has no resources of its own."""
    return f"{containers(job)}.exists(c, {job_named('c', NODE)} && !has(c.resources))"


def _names_gpu(c: str) -> str:
    def named(kind: str) -> str:
        return (f"(has({c}.resources) && has({c}.resources.{kind}) && "
                f"{c}.resources.{kind}.exists(k, k.endsWith('{GPU_SUFFIX}')))")
    return f"({named('limits')} || {named('requests')})"


def _other_gpu_containers(job: str) -> str:
    """Whether a container of the job's pod other than ``node``, or an init container, names a GPU."""
    pod = f"{job}.template.spec.template.spec"
    init = f"({pod_spec_present(job)} && has({pod}.initContainers) ? {pod}.initContainers : [])"
    return (f"{containers(job)}.exists(c, !{job_named('c', NODE)} && {_names_gpu('c')}) || "
            f"{init}.exists(c, {_names_gpu('c')})")


def _rendered(value: str) -> str:
    return f"(type({value}) == string ? {quoted_value(value)} : string({value}))"


def _per_node(reading: Reading, root: str) -> str:
    per_node = trainer_field(root, "resourcesPerNode")
    given = trainer_present(root, "resourcesPerNode")
    limits, requests = f"{per_node}.limits", f"{per_node}.requests"
    has_limits, has_requests = f"({given} && has({limits}))", f"({given} && has({requests}))"
    whole = cel.whole_and_not_negative
    bad_limits = f"({has_limits} ? {limits}.filter(k, {_extended('k')} && !{whole(limits + '[k]')}) : [])"
    bad_requests = f"({has_requests} ? {requests}.filter(k, {_extended('k')} && !{whole(requests + '[k]')}) : [])"
    in_limits = f"({has_limits} && k in {limits})"
    unequal = (f"({has_requests} ? {requests}.filter(k, {_extended('k')} && {whole(requests + '[k]')} && "
               f"(!{in_limits} || ({whole(limits + '[k]')} && "
               f"{cel.quantity(limits + '[k]')}.compareTo({cel.quantity(requests + '[k]')}) != 0))) : [])")
    amount = (f"({in_limits} ? {cel.quantity(limits + '[k]')}.asInteger() : {cel.quantity(requests + '[k]')}.asInteger())")
    counted = (f"(({has_limits} ? {limits}.filter(k, k.endsWith('{GPU_SUFFIX}') && {whole(limits + '[k]')}) : []) + "
               f"({has_requests} ? {requests}.filter(k, k.endsWith('{GPU_SUFFIX}') && !{in_limits} && "
               f"{whole(requests + '[k]')}) : []))")
    over = f"{counted}.filter(k, {amount} > {MAX})"

    def not_whole(kind: str, keys: str) -> str:
        key = f"{keys}[0]"
        path = f"'{FIELD}.{kind}[' + {key} + ']'"
        message = f"{key} + ' is counted in whole units of 0 or more; set ' + {path} + ' to a whole number such as 1'"
        return line(RULE, path, "Invalid value", message, _rendered(f"{per_node}.{kind}[{key}]"))

    key = f"{unequal}[0]"
    without = line(RULE, f"'{FIELD}.limits[' + {key} + ']'", "Required value",
                   f"{key} + ' is requested without a limit, and the API server refuses that for extended resources: "
                   f"set resources.limits.' + {key} + ' to ' + string({requests}[{key}]) + ' (a limit alone is enough)'")
    differs = line(RULE, f"'{FIELD}.limits[' + {key} + ']'", "Invalid value",
                   f"{key} + ' request ' + string({requests}[{key}]) + ' differs from its limit ' + "
                   f"string({limits}[{key}]) + ', and extended resources need requests equal to limits: set only "
                   f"resources.limits.' + {key}", f"({has_limits} && {key} in {limits} ? "
                                                   f"{_rendered(limits + '[' + key + ']')} : '')")
    gpu = f"{over}[0]"
    asked = f"string([{gpu}].map(k, {amount})[0])"
    kind = f"({has_limits} && {gpu} in {limits} ? 'limits' : 'requests')"
    too_many = line(RULE, f"'{FIELD}.' + {kind} + '[' + {gpu} + ']'", "Invalid value",
                    f"'a node pod may use at most ' + string({MAX}) + ' ' + {gpu} + ' (asked ' + {asked} + '); lower "
                    f"it to ' + string({MAX}) + ' or fewer per pod'", asked)
    decided = cel.all_of([
        given, f"({LAUNCHER_GETS} || {NODE_GETS})", "variables.perNodeAlone",
        f"!({reading.writes_ancestor_label(root, LAUNCHER)})",
    ])
    return f"(!({decided}) ? '' : " + first(
        (f"size({bad_limits}) > 0", not_whole("limits", bad_limits)),
        (f"size({bad_requests}) > 0", not_whole("requests", bad_requests)),
        (f"size({unequal}) > 0 && !({has_limits} && {key} in {limits})", without),
        (f"size({unequal}) > 0", differs),
        (f"{NODE_GETS} && !variables.nodePodOtherGpus && size({over}) > 0", too_many),
    ) + ")"
