"""``launcher`` for TrainJobs in CEL: the runtime's ``launcher`` job runs exactly 1 pod (its
JobSet replicas times its pods per Job; for the trainer's ancestor, ``spec.mlPolicy.numNodes``).

Nothing of the TrainJob changes that count but a patch that writes the ancestor label of the
``launcher`` job: then it is left to the webhook. A runtime without a ``launcher`` job belongs
to ``training-runtime``.
"""
from __future__ import annotations

from policies.trainer.api import LAUNCHER
from policies.vap import cel_text as cel
from policies.vap.checks import Validation, by_message, line, when
from policies.vap.trainjob_fields_cel import (
    LABEL,
    LAUNCHER_COUNT_PATH,
    LAUNCHER_JOBS,
    LAUNCHER_PODS,
    RUNTIME_REF,
    Reading,
)

RULE = "launcher"


def validations(reading: Reading) -> list[Validation]:
    return [by_message("launchers", lambda root: _pods(reading, root))]


def _pods(reading: Reading, root: str) -> str:
    pods, path = LAUNCHER_PODS, LAUNCHER_COUNT_PATH
    message = (f"{LABEL} + ': ' + {path} + ': the {LAUNCHER} job runs ' + string({pods}) + ' pods, each starting "
               f"mpirun over all the nodes; an MPI job has exactly 1 launcher: set ' + {path} + ' in ' + {LABEL} + "
               "' to 1 (spec.trainer.numNodes sets the nodes)'")
    condition = (f"size({LAUNCHER_JOBS}) > 0 && {pods} != 1 && "
                 f"!({reading.writes_ancestor_label(root, LAUNCHER)})")
    return when(condition, line(RULE, cel.string(RUNTIME_REF), "Invalid value", message, f"string({pods})"))
