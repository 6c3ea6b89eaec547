"""``training-runtime``: the runtime a TrainJob names is a usable MPI runtime, and the TrainJob's
own counts make sense.

Owns, for a TrainJob whose runtime sets ``spec.mlPolicy.mpi`` (other TrainJobs are not checked
at all): the runtime has a ``launcher`` replicated job labelled as the trainer's ancestor
(``trainer.kubeflow.org/trainjob-ancestor-step: trainer``: it receives the TrainJob's image,
command and resources) with a container ``node``, and a ``node`` replicated job with a container
``node`` (the worker pods, where ``numNodes`` lands); its ``mpiImplementation`` is one the
controller supports (OpenMPI; any other fails every reconcile); the TrainJob's
``spec.trainer.numNodes`` and ``numProcPerNode``, when set, are at least 1 (Trainer v2.3.0
accepts 0 and negatives, which make Jobs the API server refuses or a job with no ranks), and a
string ``numProcPerNode`` is a number: v2.1's IntOrString ``"auto"`` is for torch runtimes (the
controller reads it as 0 here), and from v2.2 on the field is an int32.
How many nodes and slots the admin allows belongs to ``worker-count`` and ``slots-per-worker``;
a launcher count other than 1 to ``launcher``.

Its parameter ``apiShape`` pins the TrainJob API the cluster serves (``policies.trainer.api``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from policies.interface import Action, Finding, Problem, RuleContext
from policies.trainer.api import (
    ANCESTOR_LABEL,
    ANCESTOR_TRAINER,
    AUTO,
    LAUNCHER,
    NODE,
    OPENMPI,
    ApiShape,
    int_or_string_value,
    trainer,
)
from policies.trainer.effective_job import RUNTIME_JOBS, EffectiveReplicatedJob
from policies.trainer.trainjob_review import TrainJobReview, review_of

RUNTIME_REF = "spec.runtimeRef.name"
NUM_PROC_PER_NODE = "spec.trainer.numProcPerNode"
SHAPES = (AUTO, *(shape.value for shape in ApiShape))


@dataclass(frozen=True)
class TrainingRuntimeParams:
    # The TrainJob API the cluster serves: v2.1 (OpenShift AI 3.2–3.5: podTemplateOverrides),
    # v2.2, v2.3 (3.6: runtimePatches); auto tells it from each TrainJob's fields, else v2.3.
    api_shape: str = AUTO

    def __post_init__(self) -> None:
        if self.api_shape not in SHAPES:
            raise ValueError(f"apiShape must be one of {', '.join(SHAPES)} (got {self.api_shape!r})")


class TrainingRuntime:
    id = "training-runtime"
    Params = TrainingRuntimeParams
    default_action = Action.DENY
    needs_cluster = False

    def check(self, ctx: RuleContext) -> list[Finding]:
        review = review_of(ctx)
        if review is None or review.effective is None:
            return []
        return self._runtime(review) + self._counts(review)

    def _runtime(self, review: TrainJobReview) -> list[Finding]:
        effective = review.effective
        assert effective is not None
        findings: list[Finding] = []
        label = review.runtime_label
        launcher, node = effective.launcher, effective.node
        if launcher is None:
            findings.append(self._about_runtime(
                label, RUNTIME_JOBS, f"has no replicated job named {LAUNCHER}: the Trainer controller runs "
                "mpirun from it; use an MPI runtime with launcher and node jobs"))
        else:
            if launcher.ancestor != ANCESTOR_TRAINER:
                findings.append(self._about_runtime(
                    label, f"{launcher.written.path}.template.metadata.labels",
                    f"the {LAUNCHER} job lacks the label {ANCESTOR_LABEL}: {ANCESTOR_TRAINER}, so the TrainJob's "
                    "image, command, resourcesPerNode and numNodes never reach it; add the label"))
            findings += self._node_container(label, launcher)
        if node is None:
            findings.append(self._about_runtime(
                label, RUNTIME_JOBS, f"has no replicated job named {NODE}: spec.trainer.numNodes sets the "
                "pods of that job, so the TrainJob would run no workers; use an MPI runtime with launcher and node jobs"))
        else:
            findings += self._node_container(label, node)
        if effective.mpi_implementation != OPENMPI:
            findings.append(self._about_runtime(
                label, "spec.mlPolicy.mpi.mpiImplementation",
                f"{effective.mpi_implementation} is not supported by the Trainer controller (only {OPENMPI}): "
                f"every reconcile would fail; set it to {OPENMPI}", Problem.NOT_SUPPORTED))
        return findings

    def _node_container(self, label: str, job: EffectiveReplicatedJob) -> list[Finding]:
        if any(c.name == NODE and not c.init for c in job.containers):
            return []
        return [self._about_runtime(
            label, f"{job.written.path}.template.spec.template.spec.containers",
            f"the {job.name} job has no container named {NODE}: the Trainer controller puts the MPI "
            f"settings (SSH keys, hostfile) and the TrainJob's values into that container; rename the "
            "MPI container to node", Problem.REQUIRED)]

    def _about_runtime(self, label: str, path: str, message: str, problem: Problem = Problem.INVALID) -> Finding:
        return Finding(self.id, RUNTIME_REF, f"{label}: {path}: {message}", problem, label.split(" ", 1)[1])

    def _counts(self, review: TrainJobReview) -> list[Finding]:
        findings = []
        job_trainer = trainer(review.trainjob)
        for field, what in (("numNodes", "nodes (the launcher included)"), ("numProcPerNode", "MPI ranks per node")):
            value = job_trainer.get(field)
            if isinstance(value, int) and not isinstance(value, bool) and value < 1:
                findings.append(Finding(
                    self.id, f"spec.trainer.{field}",
                    f"must be at least 1: it is the number of {what}, and {value} gives "
                    f"{'Jobs the API server refuses or no worker pods' if field == 'numNodes' else 'no ranks'}; "
                    f"set spec.trainer.{field} to 1 or more", Problem.INVALID, value))
        asked = job_trainer.get("numProcPerNode")
        if isinstance(asked, str):
            findings += self._string_slots(asked, review.shape)
        return findings

    def _string_slots(self, asked: str, shape: ApiShape) -> list[Finding]:
        """v2.1's IntOrString ``numProcPerNode``: on an MPI runtime only a number means
        something (the controller reads ``"auto"`` as 0, and upstream's v2.1 webhook refuses any
        string); from v2.2 on the field is an int32 and a string cannot be stored at all."""
        fix = f"set {NUM_PROC_PER_NODE} to the MPI ranks per node, or leave it out for the runtime's"
        if shape.has_runtime_patches:
            message = (f"must be an integer, not a string: from Trainer v2.2 on, {NUM_PROC_PER_NODE} is an "
                       f"int32 and the API server refuses a string; {fix}")
        elif int_or_string_value(asked) is None:
            message = (f'must be a whole number on an MPI runtime ("auto", "cpu" and "gpu" choose processes on '
                       f"torch runtimes only): the Trainer controller would read {json.dumps(asked)} as 0 ranks "
                       f"per node, and the Trainer's own webhook refuses it; {fix}")
        else:  # "4": the controller runs 4 ranks, and slots-per-worker checks the 4
            return []
        return [Finding(self.id, NUM_PROC_PER_NODE, message, Problem.INVALID, asked)]
