"""``launcher``: everything about ``spec.mpiReplicaSpecs[Launcher]``.

Owns: the Launcher spec is present; its ``replicas`` is exactly 1 (omitted means 1, as the
operator defaults it); its pod template has at least one container; its ``restartPolicy`` is
unset, ``Never`` or ``OnFailure``. The same container and restartPolicy checks for the Worker
belong to ``replica-spec``, so each problem is reported once.
"""
from __future__ import annotations

from policies.interface import Action, Finding, NoParams, Problem, RuleContext
from policies.mpijob.reading import LAUNCHER, replica_path, replica_spec
from policies.mpijob.replica_spec_checks import replica_problems
from policies.trainer.trainjob_review import TrainJobReview, review_of

PATH = replica_path(LAUNCHER)


class Launcher:
    id = "launcher"
    Params = NoParams
    default_action = Action.DENY
    needs_cluster = False

    def check(self, ctx: RuleContext) -> list[Finding]:
        review = review_of(ctx) if ctx.trainjob is not None else None  # an MPIJob's context carries none
        if review is not None:
            return self._trainjob(review)
        launcher = replica_spec(ctx.job, LAUNCHER)
        if launcher is None:
            return [Finding(self.id, PATH,
                            "an MPIJob needs a Launcher replica spec: the launcher pod runs mpirun; "
                            f"add {PATH} with replicas: 1 and a pod template", Problem.REQUIRED)]
        findings = []
        replicas = launcher.get("replicas")
        if replicas is not None and replicas != 1:
            findings.append(Finding(self.id, f"{PATH}.replicas",
                                    f"an MPIJob has exactly 1 launcher (asked {replicas}); "
                                    f"set {PATH}.replicas to 1 or leave it unset, and add workers for more ranks",
                                    Problem.INVALID, replicas))
        findings += replica_problems(self.id, LAUNCHER, launcher)
        return findings

    def _trainjob(self, review: TrainJobReview) -> list[Finding]:
        """A TrainJob's launcher pods: the runtime's ``mlPolicy.numNodes`` pods of the
        ``launcher`` job (not the TrainJob's numNodes), each running mpirun: exactly 1. A runtime
        without a launcher job belongs to ``training-runtime``."""
        launcher = review.effective.launcher if review.effective is not None else None
        if launcher is None or launcher.pods == 1:
            return []
        label = review.runtime_label
        return [Finding(self.id, "spec.runtimeRef.name",
                        f"{label}: {launcher.count_written.path}: the {LAUNCHER.lower()} job runs {launcher.pods} pods, "
                        f"each starting mpirun over all the nodes; an MPI job has exactly 1 launcher: set "
                        f"{launcher.count_written.path} in {label} to 1 (spec.trainer.numNodes sets the nodes)",
                        Problem.INVALID, launcher.pods)]
