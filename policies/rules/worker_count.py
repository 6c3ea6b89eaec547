"""``worker-count``: the Worker spec exists and asks for a number of workers the admin allows.

Owns: ``spec.mpiReplicaSpecs[Worker]`` is present unless ``spec.runLauncherAsWorker`` is true
(then the launcher alone may run every rank); when present, its ``replicas`` is set and within
[min, max]. The operator reads an omitted Worker ``replicas`` as 0, not 1, so an omitted count
is refused rather than guessed. The Worker's containers and restartPolicy belong to
``replica-spec``.
"""
from __future__ import annotations

from dataclasses import dataclass

from policies.interface import Action, Finding, Problem, RuleContext
from policies.mpijob.reading import WORKER, replica_path, replica_spec, spec

PATH = replica_path(WORKER)


@dataclass(frozen=True)
class WorkerCountParams:
    # Fewest Worker replicas a job may ask for (one worker alone is not a distributed job).
    min: int = 2
    # Most Worker replicas a job may ask for; a job that needs more ranks gives each worker more
    # slots or GPUs.
    max: int = 100

    def __post_init__(self) -> None:
        if self.min < 0:
            raise ValueError(f"min must be 0 or more (got {self.min})")


class WorkerCount:
    id = "worker-count"
    Params = WorkerCountParams
    default_action = Action.DENY
    needs_cluster = False

    def check(self, ctx: RuleContext) -> list[Finding]:
        params: WorkerCountParams = ctx.params(self.id)
        worker = replica_spec(ctx.job, WORKER)
        if worker is None:
            if spec(ctx.job).get("runLauncherAsWorker"):
                return []
            return [Finding(self.id, PATH,
                            "an MPIJob needs a Worker replica spec unless spec.runLauncherAsWorker is true; "
                            f"add {PATH} with replicas {_allowed(params)} and a pod template",
                            Problem.REQUIRED)]
        replicas = worker.get("replicas")
        if replicas is None:
            return [Finding(self.id, f"{PATH}.replicas",
                            "not set, and the MPI operator then starts 0 workers (an omitted Worker count "
                            f"is 0, not 1); set {PATH}.replicas to a number {_allowed(params)}",
                            Problem.REQUIRED)]
        if replicas > params.max:
            return [Finding(self.id, f"{PATH}.replicas",
                            f"at most {params.max} workers are allowed (asked {replicas}); "
                            f"set {PATH}.replicas to {params.max} or fewer, and give each worker more "
                            "slots or GPUs if you need the ranks",
                            Problem.INVALID, replicas)]
        if replicas < params.min:
            return [Finding(self.id, f"{PATH}.replicas",
                            f"at least {params.min} workers are required for a distributed job (asked {replicas}); "
                            f"set {PATH}.replicas to {params.min} or more",
                            Problem.INVALID, replicas)]
        return []


def _allowed(params: WorkerCountParams) -> str:
    return f"between {params.min} and {params.max}"
