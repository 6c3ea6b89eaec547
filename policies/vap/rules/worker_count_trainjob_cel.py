"""``worker-count`` for TrainJobs in CEL: the runtime has a ``node`` job unless the launcher runs
every rank (``runLauncherAsNode``), and the node pods (``spec.trainer.numNodes``, one fewer with
``runLauncherAsNode``; else the runtime's count) are within [min, max].

The pod count of a job the runtime writes depends on which job carries the trainer's ancestor
label: a patch that writes that label, or that names a ``node`` job the runtime lacks, leaves
the count to the webhook.
"""
from __future__ import annotations

from policies.trainer.api import NODE
from policies.vap import cel_text as cel
from policies.vap.checks import Validation, by_message, first, line, param
from policies.vap.trainjob_fields_cel import (
    LABEL,
    LAUNCHER_AS_NODE,
    NODE_COUNT,
    NODE_COUNT_PATH,
    NODE_COUNT_SET,
    NODE_JOBS,
    NODE_PODS,
    RUNTIME_JOBS,
    RUNTIME_REF,
    Reading,
    trainer_field,
    trainer_present,
)

RULE = "worker-count"
MIN, MAX = param("min"), param("max")
NUM_NODES = "spec.trainer.numNodes"
OFFSET = f"({LAUNCHER_AS_NODE} ? 1 : 0)"
BESIDES = f"({LAUNCHER_AS_NODE} ? ' besides the launcher\\'s' : '')"


def validations(reading: Reading) -> list[Validation]:
    return [by_message("workers", lambda root: _workers(reading, root))]


def _said(message: str, path: str) -> str:
    """A message about a value of the runtime: prefixed with the runtime and its field."""
    return f"{LABEL} + ': ' + {path} + ': ' + {message}"


def _workers(reading: Reading, root: str) -> str:
    has_node = f"size({NODE_JOBS}) > 0"
    num_nodes = trainer_field(root, "numNodes")
    from_job = trainer_present(root, "numNodes")
    asked = f"({from_job} ? {num_nodes} - {OFFSET} : {NODE_COUNT})"
    written = f"({from_job} ? {num_nodes} : {NODE_COUNT})"  # the number the user writes
    runtime_counted = f"!{from_job} && {NODE_COUNT_SET}"
    allowed = f"'between ' + string({MIN} + {OFFSET}) + ' and ' + string({MAX} + {OFFSET})"

    missing = line(RULE, cel.string(RUNTIME_REF), "Required value", _said(
        f"'a TrainJob needs a {NODE} replica spec unless spec.mlPolicy.mpi.runLauncherAsNode is true; add "
        f"{RUNTIME_JOBS} with replicas ' + 'between ' + string({MIN}) + ' and ' + string({MAX}) + ' and a pod template'",
        cel.string(RUNTIME_JOBS)))
    pods = NODE_PODS
    unset = line(RULE, cel.string(NUM_NODES), "Required value",
                 f"'not set, and the Trainer controller then runs ' + string({pods}) + ({pods} == 1 ? ' node pod' : "
                 f"' node pods') + ' (' + {LABEL} + ': ' + {NODE_COUNT_PATH} + ' is not set either); set {NUM_NODES} "
                 f"to a number ' + {allowed}")

    def asked_text() -> str:
        return (f"({from_job} && {LAUNCHER_AS_NODE} ? 'asked ' + string({num_nodes}) + ': ' + "
                f"string({asked} > 0 ? {asked} : 0) + ' besides the launcher\\'s node' : 'asked ' + string({written}))")

    def finding(body: str, fix: str) -> str:
        path = f"({from_job} ? {cel.string(NUM_NODES)} : {cel.string(RUNTIME_REF)})"
        message = (f"{body} + ' (' + {asked_text()} + '); set ' + ({from_job} ? {cel.string(NUM_NODES)} : "
                   f"{NODE_COUNT_PATH} + ' in ' + {LABEL}) + ' to ' + {fix}")
        said = f"({from_job} ? {message} : {_said(message, NODE_COUNT_PATH)})"
        return line(RULE, path, "Invalid value", said, f"string({written})")

    too_many = finding(f"'at most ' + string({MAX}) + ' nodes' + {BESIDES} + ' are allowed'",
                       f"string({MAX} + {OFFSET}) + ' or fewer, and give each node more slots or GPUs if you need "
                       "the ranks'")
    too_few = finding(f"'at least ' + string({MIN}) + ' nodes' + {BESIDES} + ' are required for a distributed job'",
                      f"string({MIN} + {OFFSET}) + ' or more'")
    # What the webhook counts, unless a patch may change which job the count comes from.
    known = f"({from_job} || !({reading.writes_ancestor_label(root, NODE)}))"
    counted = f"{has_node} && ({from_job} || {runtime_counted})"
    return first(
        (f"!({has_node}) && !{LAUNCHER_AS_NODE} && !({reading.adds_job(root, NODE)})", missing),
        (f"{has_node} && !{from_job} && !{NODE_COUNT_SET} && {known}", unset),
        (f"{counted} && {known} && {asked} > {MAX}", too_many),
        (f"{counted} && {known} && {asked} < {MIN}", too_few),
    )

