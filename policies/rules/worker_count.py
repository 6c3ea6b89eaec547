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
from policies.workload import Source, request_workload


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
        workload = request_workload(ctx)
        workers = workload.workers
        if not workers.present:
            if workload.launcher_runs_ranks.value:
                return []
            group, flag = workers.source, workload.launcher_runs_ranks.source
            return [Finding(self.id, group.finding_path,
                            group.said(f"{workload.kind.one} needs a {workers.name} replica spec unless "
                                       f"{flag.path} is true; add {group.path} with replicas {_allowed(params)} "
                                       "and a pod template"),
                            Problem.REQUIRED)]
        replicas, count = workers.count, workers.count_source
        if replicas is None:
            return [Finding(self.id, count.finding_path,
                            count.said(f"not set, and {count.when_unset}; "
                                       f"{count.set_to(f'a number {_allowed(params, count.offset)}')}"),
                            Problem.REQUIRED)]
        noun = workers.noun
        if replicas > params.max:
            return [Finding(self.id, count.finding_path,
                            count.said(f"at most {params.max} {noun}s{_besides(count)} are allowed "
                                       f"({_asked(replicas, count, noun)}); "
                                       f"{count.set_to(f'{count.written(params.max)} or fewer')}, and give each "
                                       f"{noun} more slots or GPUs if you need the ranks"),
                            Problem.INVALID, count.written(replicas))]
        if replicas < params.min:
            return [Finding(self.id, count.finding_path,
                            count.said(f"at least {params.min} {noun}s{_besides(count)} are required for a "
                                       f"distributed job ({_asked(replicas, count, noun)}); "
                                       f"{count.set_to(f'{count.written(params.min)} or more')}"),
                            Problem.INVALID, count.written(replicas))]
        return []


def _allowed(params: WorkerCountParams, offset: int = 0) -> str:
    return f"between {params.min + offset} and {params.max + offset}"


# A count written with the launcher's pod in it (a TrainJob's numNodes with runLauncherAsNode):
# the limit is on the others, and the message says which number is which.
def _besides(count: Source) -> str:
    return " besides the launcher's" if count.offset else ""


def _asked(replicas: int, count: Source, noun: str) -> str:
    if not count.offset:
        return f"asked {replicas}"
    return f"asked {count.written(replicas)}: {max(replicas, 0)} besides the launcher's {noun}"
