"""``limit-range``: every container and pod of the job within each LimitRange of its namespace.

The LimitRanger admission plugin checks pods only when the MPI operator creates them, after the
job was accepted; a violation then leaves the job without its pods. This rule applies the same
checks up front, to the values the pods will really get (``policies.resources``: requests
defaulted from limits, then LimitRange defaults): per container and per pod ``min``, ``max`` and
``maxLimitRequestRatio`` of any resource (cpu, memory, GPUs, other extended resources), and the
pods a LimitRange default makes invalid (a default limit below the container's request, a
default GPU limit that differs from its request).
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from decimal import Decimal

from policies.base import Action, Finding, NoParams, Problem, RuleContext
from policies.quantities import format_quantity, is_gpu
from policies.resources import LimitRangeItem, request_limit_range_items, request_pods
from policies.jobs import REPLICA_TYPES, WORKER, spec


class LimitRange:
    id = "limit-range"
    Params = NoParams
    default_action = Action.DENY
    needs_cluster = True

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        ranges = ctx.cluster.limit_ranges(ctx.namespace)
        if not ranges:
            return
        items = request_limit_range_items(ctx)
        pods = request_pods(ctx)
        for replica_type in REPLICA_TYPES:
            if replica_type not in pods.pods:
                continue
            # The GPU maximum of pods that run ranks is gpus-per-worker's, which reads it from
            # these same LimitRanges: one problem, one finding.
            runs_ranks = replica_type == WORKER or bool(spec(ctx.job).get("runLauncherAsWorker"))
            pod = pods.pods[replica_type]
            for container in pod.containers:
                where = f"container {container.name}" if container.name else "this container"
                for item in items:
                    if item.type == "Container":
                        yield from self._bounds(item, "Container", f"{container.path}.resources", where,
                                                container.requests, container.limits, runs_ranks)
            for item in items:
                if item.type == "Pod":
                    yield from self._bounds(item, "Pod", f"{pod.path}.template.spec", f"the {replica_type} pod",
                                            pod.requests, pod.limits, runs_ranks)
            for problem in pod.problems:
                if problem.defaulted_by:
                    yield Finding(
                        self.id, f"{problem.container.path}.resources.{problem.field}[{problem.resource}]",
                        f"container {problem.container.name}: {problem.message}", Problem.POLICY)

    def _bounds(self, item: LimitRangeItem, kind: str, path: str, where: str, requests: Mapping[str, Decimal],
                limits: Mapping[str, Decimal], runs_ranks: bool) -> Iterator[Finding]:
        per = f"per {kind.lower()}"
        source = f"LimitRange {item.limit_range}"
        for resource, minimum in sorted(item.min.items()):
            low = format_quantity(minimum, resource)
            request = requests.get(resource)
            if request is None:
                yield self._finding(f"{path}.requests[{resource}]",
                                    f"{source} requires at least {resource} {low} {per}, and {where} requests none; "
                                    f"set the request to {low} or more")
            elif request < minimum:
                yield self._finding(f"{path}.requests[{resource}]",
                                    f"{source} requires at least {resource} {low} {per}, but {where} requests "
                                    f"{format_quantity(request, resource)}; raise the request to {low}")
            elif resource in limits and limits[resource] < minimum:
                yield self._finding(f"{path}.limits[{resource}]",
                                    f"{source} requires at least {resource} {low} {per}, but {where} has a limit "
                                    f"of {format_quantity(limits[resource], resource)}; raise the limit to {low}")
        for resource, maximum in sorted(item.max.items()):
            if runs_ranks and is_gpu(resource):
                continue
            high = format_quantity(maximum, resource)
            limit = limits.get(resource)
            if limit is None:
                yield self._finding(f"{path}.limits[{resource}]",
                                    f"{source} allows at most {resource} {high} {per} and needs a limit, but {where} "
                                    f"sets none; set the limit to {high} or less")
            elif limit > maximum:
                yield self._finding(f"{path}.limits[{resource}]",
                                    f"{source} allows at most {resource} {high} {per}, but {where} asks "
                                    f"{format_quantity(limit, resource)}; lower it to {high}"
                                    + (" and use more workers for more in total" if kind == "Container" else ""))
            elif resource in requests and requests[resource] > maximum:
                yield self._finding(f"{path}.requests[{resource}]",
                                    f"{source} allows at most {resource} {high} {per}, but {where} requests "
                                    f"{format_quantity(requests[resource], resource)}; lower it to {high}")
        for resource, ratio in sorted(item.max_limit_request_ratio.items()):
            request, limit = requests.get(resource), limits.get(resource)
            if not request or not limit:
                missing = "request" if not request else "limit"
                yield self._finding(f"{path}.{missing}s[{resource}]",
                                    f"{source} allows a {resource} limit of at most {format_quantity(ratio)}× the "
                                    f"request {per}, so {where} needs a non-zero {missing}; set it")
            elif limit / request > ratio:
                yield self._finding(f"{path}.limits[{resource}]",
                                    f"{source} allows a {resource} limit of at most {format_quantity(ratio)}× the "
                                    f"request {per}, but {where} has {format_quantity(limit, resource)} / "
                                    f"{format_quantity(request, resource)} = {_ratio(limit / request)}; lower the "
                                    f"limit to {format_quantity(request * ratio, resource)} or raise the request")

    def _finding(self, path: str, message: str) -> Finding:
        # The API server answers LimitRange violations with 403 Forbidden, like quota.
        return Finding(self.id, path, message, Problem.POLICY)


def _ratio(value: Decimal) -> str:
    return format(value.quantize(Decimal("0.01")).normalize(), "f")
