"""``training-runtime`` in CEL: the runtime the TrainJob names is a usable MPI runtime (a
``launcher`` job labelled as the trainer's ancestor with a container ``node``, a ``node`` job
with a container ``node``, ``mpiImplementation`` OpenMPI), and ``spec.trainer.numNodes`` and
``numProcPerNode``, when set as numbers, are at least 1.

A job or container the runtime lacks may be added by the TrainJob's own patches (a container
``node`` in a patch of that job's pod template; on v2.3 a replicated job named in a patch), and
a patch may write the ancestor label: then that finding is left to the webhook.
"""
from __future__ import annotations

from policies.trainer.api import ANCESTOR_LABEL, ANCESTOR_TRAINER, LAUNCHER, NODE, OPENMPI
from policies.vap import cel_text as cel
from policies.vap.checks import Validation, by_message, line, quoted_value, when
from policies.vap.trainjob_fields_cel import (
    LABEL,
    LAUNCHER_JOBS,
    NODE_JOBS,
    RUNTIME,
    RUNTIME_JOBS,
    RUNTIME_REF,
    JOB_NAMES,
    Reading,
    has_node_container,
    is_ancestor,
    is_int,
    trainer_field,
    trainer_present,
)

RULE = "training-runtime"
IMPLEMENTATION = f"{RUNTIME}.spec.mlPolicy.mpi.mpiImplementation"


def validations(reading: Reading) -> list[Validation]:
    return [
        by_message("launcherJob", lambda root: _launcher_job(reading, root)),
        by_message("launcherNode", lambda root: _node_container(reading, root, LAUNCHER, LAUNCHER_JOBS)),
        by_message("nodeJob", lambda root: _node_job(reading, root)),
        by_message("nodeNode", lambda root: _node_container(reading, root, NODE, NODE_JOBS)),
        by_message("implementation", _implementation),
        by_message("numNodes", lambda root: _at_least_one(root, "numNodes", "nodes (the launcher included)",
                                                           "Jobs the API server refuses or no worker pods")),
        by_message("numProcPerNode", lambda root: _at_least_one(root, "numProcPerNode", "MPI ranks per node",
                                                                 "no ranks")),
    ]


def _about_runtime(path: str, message: str, problem: str = "Invalid value") -> str:
    """``spec.runtimeRef.name: <problem>: "<name>": <Kind> <name>: <path>: <message>``."""
    value = quoted_value(f"{RUNTIME}.metadata.name") if problem != "Required value" else None
    return line(RULE, cel.string(RUNTIME_REF), problem, f"{LABEL} + ': ' + {path} + ': ' + {message}", value)


def _job_index(jobs: str) -> str:
    return f"string({JOB_NAMES}.indexOf({jobs}[0].name))"


def _launcher_job(reading: Reading, root: str) -> str:
    missing = _about_runtime(cel.string(RUNTIME_JOBS), cel.string(
        f"has no replicated job named {LAUNCHER}: the Trainer controller runs mpirun from it; use an MPI runtime "
        "with launcher and node jobs"))
    labels = f"'{RUNTIME_JOBS}[' + {_job_index(LAUNCHER_JOBS)} + '].template.metadata.labels'"
    unlabelled = _about_runtime(labels, cel.string(
        f"the {LAUNCHER} job lacks the label {ANCESTOR_LABEL}: {ANCESTOR_TRAINER}, so the TrainJob's image, command, "
        "resourcesPerNode and numNodes never reach it; add the label"))
    return (f"(size({LAUNCHER_JOBS}) == 0 ? "
            + when(f"!({reading.adds_job(root, LAUNCHER)})", missing) + " : "
            + when(f"!{is_ancestor(LAUNCHER_JOBS + '[0]')} && !({reading.writes_ancestor_label(root, LAUNCHER)})",
                   unlabelled) + ")")


def _node_job(reading: Reading, root: str) -> str:
    missing = _about_runtime(cel.string(RUNTIME_JOBS), cel.string(
        f"has no replicated job named {NODE}: spec.trainer.numNodes sets the pods of that job, so the TrainJob would "
        "run no workers; use an MPI runtime with launcher and node jobs"))
    return when(f"size({NODE_JOBS}) == 0 && !({reading.adds_job(root, NODE)})", missing)


def _node_container(reading: Reading, root: str, name: str, jobs: str) -> str:
    path = f"'{RUNTIME_JOBS}[' + {_job_index(jobs)} + '].template.spec.template.spec.containers'"
    message = _about_runtime(path, cel.string(
        f"the {name} job has no container named {NODE}: the Trainer controller puts the MPI settings (SSH keys, "
        f"hostfile) and the TrainJob's values into that container; rename the MPI container to node"), "Required value")
    return when(f"size({jobs}) > 0 && !{has_node_container(jobs + '[0]')} && "
                f"!({reading.adds_node_container(root, name)})", message)


def _implementation(root: str) -> str:
    message = _about_runtime("'spec.mlPolicy.mpi.mpiImplementation'", (
        f"{IMPLEMENTATION} + ' is not supported by the Trainer controller (only {OPENMPI}): every reconcile would "
        f"fail; set it to {OPENMPI}'"), "Unsupported value")
    return when(f"has({IMPLEMENTATION}) && {IMPLEMENTATION} != '' && {IMPLEMENTATION} != {cel.string(OPENMPI)}",
                message)


def _at_least_one(root: str, field: str, what: str, gives: str) -> str:
    value = trainer_field(root, field)
    message = (f"'must be at least 1: it is the number of {what}, and ' + string({value}) + ' gives {gives}; "
               f"set spec.trainer.{field} to 1 or more'")
    return when(f"{trainer_present(root, field)} && {is_int(value)} && {value} < 1",
                line(RULE, cel.string(f"spec.trainer.{field}"), "Invalid value", message, f"string({value})"))
