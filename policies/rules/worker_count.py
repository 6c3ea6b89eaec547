"""``worker-count``: the Worker spec exists and asks for a number of workers the admin allows.

Owns: ``spec.mpiReplicaSpecs[Worker]`` is present unless ``spec.runLauncherAsWorker`` is true
(then the launcher alone may run every rank); when present, its ``replicas`` is set and within
[min, max]. The operator reads an omitted Worker ``replicas`` as 0, not 1, so an omitted count
is refused rather than guessed. The Worker's containers and restartPolicy belong to
``replica-spec``.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from policies.base import Action, Finding, Problem, RuleContext
from policies.jobs import WORKER, replica_path, replica_spec, spec


@dataclass(frozen=True)
class WorkerCountParams:
    min: int = 2
    max: int = 100

    def __post_init__(self) -> None:
        if self.min < 0:
            raise ValueError(f"min must be 0 or more (got {self.min})")


class WorkerCount:
    id = "worker-count"
    Params = WorkerCountParams
    default_action = Action.DENY
    needs_cluster = False

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        params: WorkerCountParams = ctx.params(self.id)
        path = replica_path(WORKER)
        allowed = f"between {params.min} and {params.max}"
        worker = replica_spec(ctx.job, WORKER)
        if worker is None:
            if not spec(ctx.job).get("runLauncherAsWorker"):
                yield Finding(self.id, path,
                              "an MPIJob needs a Worker replica spec unless spec.runLauncherAsWorker is true; "
                              f"add {path} with replicas {allowed} and a pod template",
                              Problem.REQUIRED)
            return
        replicas = worker.get("replicas")
        if replicas is None:
            yield Finding(self.id, f"{path}.replicas",
                          "not set, and the MPI operator then starts 0 workers (an omitted Worker count "
                          f"is 0, not 1); set {path}.replicas to a number {allowed}",
                          Problem.REQUIRED)
        elif replicas > params.max:
            yield Finding(self.id, f"{path}.replicas",
                          f"at most {params.max} workers are allowed (asked {replicas}); "
                          f"set {path}.replicas to {params.max} or fewer, and give each worker more "
                          "slots or GPUs if you need the ranks",
                          Problem.INVALID, replicas)
        elif replicas < params.min:
            yield Finding(self.id, f"{path}.replicas",
                          f"at least {params.min} workers are required for a distributed job (asked {replicas}); "
                          f"set {path}.replicas to {params.min} or more",
                          Problem.INVALID, replicas)
