"""``gpus-per-worker``: GPUs one worker pod uses, and extended resources the API server accepts.

Owns: for every GPU extended resource (``*/gpu``: nvidia.com, amd.com, intel.com, …) the
worker pod's amount, counted as Kubernetes counts it (``policies.kube.pod_resources``: a limit alone is
also the request; app containers and sidecars summed; a one-shot init container counts alone,
with the sidecars started before it; the pod takes the larger), is at most ``max_gpus``. With
``runLauncherAsWorker`` the launcher pod runs ranks too and is held to the same maximum.

Also owns, for every extended resource of every container of either template, what the spec
alone gets wrong: amounts that are not whole numbers of 0 or more, a request without a limit,
a request that differs from its limit. The API server refuses such pods, but only when the
operator creates them, long after the job was admitted. The same problems caused by a
LimitRange default belong to ``limit-range``.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from policies.interface import Action, Finding, Problem, RuleContext
from policies.messages import plural
from policies.rules.worker_count import WorkerCount, WorkerCountParams
from policies.kube.quantities import BadQuantity, is_extended, is_gpu, quantity
from policies.kube.pod_resources import (
    ContainerResources,
    PodResources,
    ResourceProblem,
    pod_totals,
    request_limit_ranges,
    request_pod_as_written,
)
from policies.workload import ContainerRef, PodGroup, Role, Workload, request_workload


@dataclass(frozen=True)
class GpusPerWorkerParams:
    # Most GPUs of one kind (each */gpu resource) that one worker pod may use, and the launcher
    # pod too with runLauncherAsWorker; a namespace's LimitRange max for that GPU wins over it.
    max: int = 16

    def __post_init__(self) -> None:
        if self.max < 0:
            raise ValueError(f"max must be 0 or more (got {self.max})")


def max_gpus(ctx: RuleContext, resource: str) -> int:
    """The most of ``resource`` one worker pod may use: the namespace's LimitRange ``max`` when
    one bounds that resource (the admin's per-namespace answer), else the setting."""
    return gpu_maximum(ctx, resource)[0]


def gpu_maximum(ctx: RuleContext, resource: str) -> tuple[int, str]:
    """(maximum, the LimitRange it comes from or "" for the setting). LimitRanges are read only
    while the cluster view is usable; otherwise the setting applies."""
    if ctx.cluster.available:
        bound = request_limit_ranges(ctx).gpu_bounds.get(resource)
        if bound is not None:
            return int(bound[0]), bound[1]
    params: GpusPerWorkerParams = ctx.params(GpusPerWorker.id)
    return params.max, ""


class GpusPerWorker:
    id = "gpus-per-worker"
    Params = GpusPerWorkerParams
    default_action = Action.DENY
    needs_cluster = False

    def check(self, ctx: RuleContext) -> list[Finding]:
        workload = request_workload(ctx)
        named: dict[str, ContainerRef] = {}  # container path → container
        with_devices: list[PodGroup] = []  # the pods of the others have nothing here to check
        for group, container in workload.containers():
            if _names_devices(container.container):
                named[container.path] = container
                if not with_devices or with_devices[-1] is not group:
                    with_devices.append(group)
        if not named:
            return []  # most jobs: without extended resources and GPUs nothing below can apply
        findings: list[Finding] = []
        not_whole: set[tuple[str, str]] = set()  # (container path, resource) already reported
        for path, container in named.items():
            for finding, resource in self._whole_amounts(container):
                not_whole.add((path, resource))
                findings.append(finding)
        rank_groups = workload.rank_groups()
        for group in with_devices:
            pod = request_pod_as_written(ctx, group.name)  # the spec alone: LimitRanges are not ours
            if pod is None:
                continue
            for problem in pod.problems:
                if is_extended(problem.resource) and (problem.container.path, problem.resource) not in not_whole:
                    findings.append(self._spec_problem(problem, named[problem.container.path].container))
            if group in rank_groups:
                findings += self._pod_maximum(ctx, workload, pod)
        return findings

    # --- per container -------------------------------------------------------------------------
    def _whole_amounts(self, container: ContainerRef) -> list[tuple[Finding, str]]:
        """Extended resources come in whole units of 0 or more."""
        found = []
        resources = container.container.get("resources") or {}
        for kind in ("limits", "requests"):
            for resource, value in sorted((resources.get(kind) or {}).items()):
                if is_extended(resource) and not _is_whole(value):
                    source = container.resources_source().child(f"{kind}[{resource}]")
                    found.append((Finding(self.id, source.finding_path,
                                          source.said(f"{resource} is counted in whole units of 0 or more; "
                                                      f"{source.set_to('a whole number such as 1')}"),
                                          Problem.INVALID, value), resource))
        return found

    def _spec_problem(self, problem: ResourceProblem, container: Mapping[str, Any]) -> Finding:
        source = problem.container.resource_source(problem.field, problem.resource)
        written = ((container.get("resources") or {}).get(problem.field) or {}).get(problem.resource)
        if written is None:
            return Finding(self.id, source.finding_path, source.said(problem.message), Problem.REQUIRED)
        return Finding(self.id, source.finding_path, source.said(problem.message), Problem.INVALID, written)

    # --- per pod -------------------------------------------------------------------------------
    def _pod_maximum(self, ctx: RuleContext, workload: Workload, pod: PodResources) -> list[Finding]:
        counted = [gpus for gpus in map(_gpus_counted, pod.containers) if gpus is not None]
        found = []
        for resource, amount in sorted(pod_totals(counted, "requests").items()):
            allowed, limit_range = gpu_maximum(ctx, resource)
            if amount > allowed:
                found.append(self._over(ctx, workload, pod, counted, resource, int(amount), allowed, limit_range))
        return found

    def _over(self, ctx: RuleContext, workload: Workload, pod: PodResources, counted: list[ContainerResources],
              resource: str, asked: int, allowed: int, limit_range: str = "") -> Finding:
        running = [c for c in counted if (not c.init or c.sidecar) and c.requests.get(resource, 0) > 0]
        if sum(c.requests[resource] for c in running) != asked:  # the peak is while an init container runs
            source, parts = pod.template_at, " while its init containers run"
        elif len(running) == 1:
            (container,) = running
            kind = "limits" if resource in container.limits else "requests"  # no LimitRange defaults here
            source, parts = container.resource_source(kind, resource), ""
        else:
            source = pod.template_at
            parts = f"; its containers ask {' + '.join(str(int(c.requests[resource])) for c in running)}"
        worker = pod.role is Role.WORKER
        noun = workload.workers.noun
        role = f"a {noun} pod" if worker else f"the {workload.launcher.noun} pod (it runs ranks too)"
        spread = _spread(ctx, workload, asked, allowed) if worker else ""
        return Finding(self.id, source.finding_path,
                       source.said(f"{role} may use at most {allowed} {resource}"
                                   f"{f', set by LimitRange {limit_range}' if limit_range else ''} "
                                   f"(asked {asked}{parts}); lower it to "
                                   f"{allowed} or fewer per pod{spread}"),
                       Problem.INVALID, asked)


def _names_devices(container: Mapping[str, Any]) -> bool:
    """Whether the container's limits or requests name an extended resource or a GPU (whatever
    the amount, even one that does not parse)."""
    resources = container.get("resources") or {}
    for kind in ("limits", "requests"):
        for resource in resources.get(kind) or ():
            if _is_device(resource):
                return True
    return False


def _is_device(resource: str) -> bool:
    # Both are domain-qualified names: cpu and memory, what most containers name, stop at the "/"
    return "/" in resource and (is_extended(resource) or is_gpu(resource))


def _gpus_counted(container: ContainerResources) -> ContainerResources | None:
    """What a container is counted for here: its GPUs, each by its limit where it has one, else
    its request (pod totals are per resource: the other resources change nothing). An amount
    that is not a whole number of 0 or more counts 0: it is reported on its own, and counted at
    face value it made totals no pod can have (asked 16 of "at most 16", from 15.5 + 1) and
    peaks blamed on init containers that ask for nothing. None for a container without GPUs,
    which changes neither the pod's totals nor its peak while init containers run (that of a
    sidecar before it, or none)."""
    counted = {r: (v if v >= 0 and v == v.to_integral_value() else Decimal(0))
               for r, v in {**container.requests, **container.limits}.items() if is_gpu(r)}
    if not counted:
        return None
    return ContainerResources(container.path, container.name, counted, container.limits,
                              container.defaulted_requests, container.defaulted_limits, container.init,
                              container.sidecar, container.resources_at)


def _is_whole(value: Any) -> bool:
    try:
        amount = quantity(value)
    except BadQuantity:
        return False
    return amount >= 0 and amount == amount.to_integral_value()


def _spread(ctx: RuleContext, workload: Workload, asked: int, allowed: int) -> str:
    """How to keep the job's total with more, smaller workers."""
    workers = workload.workers.count
    if not isinstance(workers, int) or workers < 1 or allowed < 1:
        return ""
    count = workload.workers.count_source
    return _keeping_the_total(workers, asked, allowed, *_worker_count_limits(ctx), workload.workers.noun,
                              count.path if count.offset else "", count.offset)


def _worker_count_limits(ctx: RuleContext) -> tuple[int, int | None]:
    """(fewest, most) workers ``worker-count`` allows in this namespace; most is None without
    that rule. A suggestion that broke it would only trade this denial for that one."""
    config = ctx.settings.rules.get(WorkerCount.id)
    if config is None:
        return 1, None
    params: WorkerCountParams = config.params
    return max(params.min, 1), params.max


def _keeping_the_total(workers: int, asked: int, allowed: int, fewest: int, most: int | None, noun: str = "worker",
                       field: str = "", offset: int = 0) -> str:
    """How to spread the ``workers`` × ``asked`` GPUs over more pods. ``field`` and ``offset``:
    the field the user writes the pod count in, when it is not the count itself (a TrainJob's
    ``numNodes`` counts the launcher too with ``runLauncherAsNode``): the advice then gives that
    field's number. When no pod count the policy allows keeps them, it says so in the numbers
    the user wrote (pods × GPUs each) beside the most the policy allows, never as a product the
    user has to recompute."""
    total = workers * asked
    needed = max(-(-total // allowed), fewest)
    besides = " besides the launcher's" if offset else ""
    if most is not None and needed > most:
        return (f"; {plural(workers, noun)}{besides} × {asked} each cannot be spread out within the policy: "
                f"it allows at most {plural(most, noun)}{besides} × {allowed} each")
    each = str(total // needed) if total % needed == 0 else f"at most {allowed}"
    if field:
        return f", and to keep {total} in total over the {noun} pods set {field} to {needed + offset} with {each} each"
    return f", and to keep {total} in total use {plural(needed, noun)} with {each} each"
