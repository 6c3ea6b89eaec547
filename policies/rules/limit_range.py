"""``limit-range``: every container and pod of the job within each LimitRange of its namespace.

The LimitRanger admission plugin checks pods only when the MPI operator creates them, after the
job was accepted; a violation then leaves the job without its pods. This rule applies the same
checks up front, to the values the pods will really get (``policies.kube.pod_resources``: requests
defaulted from limits, then LimitRange defaults): per container and per pod ``min``, ``max`` and
``maxLimitRequestRatio`` of any resource (cpu, memory, GPUs, other extended resources), and the
pods a LimitRange default makes invalid (a default limit below the container's request, a
default GPU limit that differs from its request).
"""
from __future__ import annotations

from decimal import Decimal

from policies.interface import Action, Finding, NoParams, Problem, RuleContext
from policies.kube.quantities import format_quantity, is_gpu
from policies.kube.pod_resources import ContainerResources, LimitRangeItem, PodResources, namespace_limits, request_pods
from policies.workload import Role, Source, request_workload

Subject = ContainerResources | PodResources  # what a LimitRange item bounds

# Read once: a member read off an Enum class is a Python call on 3.11 (docs/performance.md, "Fast
# paths kept and removed"), and these are read for every pod of every request.
_WORKER = Role.WORKER


class LimitRange:
    id = "limit-range"
    Params = NoParams
    default_action = Action.DENY
    needs_cluster = True

    def check(self, ctx: RuleContext) -> list[Finding]:
        ranges = ctx.cluster.limit_ranges(ctx.namespace)
        if not ranges:
            return []
        limits = namespace_limits(ranges)
        pods = request_pods(ctx)
        workload = request_workload(ctx)
        launcher_runs_ranks = workload.launcher_runs_ranks.value
        more = f"use more {workload.workers.noun}s for more in total"  # workers | nodes
        findings: list[Finding] = []
        for pod in pods:
            # The GPU maximum of pods that run ranks is gpus-per-worker's, which reads it from
            # these same LimitRanges: one problem, one finding.
            runs_ranks = pod.role is _WORKER or launcher_runs_ranks
            for container in pod.containers:
                for item in limits.container_items:
                    self._bounds(findings, item, container, runs_ranks, more)
            for item in limits.pod_items:
                self._bounds(findings, item, pod, runs_ranks, more)
            for problem in pod.problems:
                if problem.defaulted_by:
                    source = problem.container.resource_source(problem.field, problem.resource)
                    findings.append(Finding(self.id, source.finding_path,
                                            source.said(f"container {problem.container.name}: {problem.message}"),
                                            Problem.POLICY))
        return _once(findings)

    def _bounds(self, findings: list[Finding], item: LimitRangeItem, subject: Subject, runs_ranks: bool,
                more: str) -> None:
        """Adds to ``findings`` where ``subject`` (a container for a Container item, a pod for a Pod
        item) is outside ``item``."""
        requests, limits = subject.requests, subject.limits
        for resource, minimum in item.sorted_min:
            request = requests.get(resource)
            if request is not None and request >= minimum and not (resource in limits and limits[resource] < minimum):
                continue  # within bounds, the usual case: no message to build
            low, (at, where, per, source) = format_quantity(minimum, resource), _words(item, subject)
            if request is None:
                findings.append(self._finding(
                    at.child(f"requests[{resource}]"),
                    f"{source} requires at least {resource} {low} {per}, and {where} requests none; "
                    f"set the request to {low} or more"))
            elif request < minimum:
                findings.append(self._finding(
                    at.child(f"requests[{resource}]"),
                    f"{source} requires at least {resource} {low} {per}, but {where} requests "
                    f"{format_quantity(request, resource)}; raise the request to {low}"))
            else:
                findings.append(self._finding(
                    at.child(f"limits[{resource}]"),
                    f"{source} requires at least {resource} {low} {per}, but {where} has a limit "
                    f"of {format_quantity(limits[resource], resource)}; raise the limit to {low}"))
        for resource, maximum in item.sorted_max:
            if runs_ranks and is_gpu(resource):
                continue
            limit = limits.get(resource)
            if limit is not None and limit <= maximum and not (resource in requests and requests[resource] > maximum):
                continue
            high, (at, where, per, source) = format_quantity(maximum, resource), _words(item, subject)
            if limit is None:
                findings.append(self._finding(
                    at.child(f"limits[{resource}]"),
                    f"{source} allows at most {resource} {high} {per} and needs a limit, but {where} "
                    f"sets none; set the limit to {high} or less"))
            elif limit > maximum:
                findings.append(self._finding(
                    at.child(f"limits[{resource}]"),
                    f"{source} allows at most {resource} {high} {per}, but {where} asks "
                    f"{format_quantity(limit, resource)}; lower it to {high}"
                    + (f" and {more}" if item.type == "Container" else "")))
            else:
                findings.append(self._finding(
                    at.child(f"requests[{resource}]"),
                    f"{source} allows at most {resource} {high} {per}, but {where} requests "
                    f"{format_quantity(requests[resource], resource)}; lower it to {high}"))
        for resource, ratio in item.sorted_ratio:
            request, limit = requests.get(resource), limits.get(resource)
            if request and limit and limit / request <= ratio:
                continue
            at, where, per, source = _words(item, subject)
            if not request or not limit:
                missing = "request" if not request else "limit"
                findings.append(self._finding(
                    at.child(f"{missing}s[{resource}]"),
                    f"{source} allows a {resource} limit of at most {format_quantity(ratio)}× the "
                    f"request {per}, so {where} needs a non-zero {missing}; set it"))
            else:
                findings.append(self._finding(
                    at.child(f"limits[{resource}]"),
                    f"{source} allows a {resource} limit of at most {format_quantity(ratio)}× the "
                    f"request {per}, but {where} has {format_quantity(limit, resource)} / "
                    f"{format_quantity(request, resource)} = {_ratio(limit / request)}; lower the "
                    f"limit to {format_quantity(request * ratio, resource)} or raise the request"))

    def _finding(self, source: Source, message: str) -> Finding:
        # The API server answers LimitRange violations with 403 Forbidden, like quota.
        return Finding(self.id, source.finding_path, source.said(message), Problem.POLICY)


def _once(findings: list[Finding]) -> list[Finding]:
    """``findings`` without repeats: a TrainJob's ``resourcesPerNode`` is the one field behind
    the launcher's and the node pods' container ``node`` (``runLauncherAsNode``), so both pods
    give the same finding word for word. An MPIJob's pods have paths of their own."""
    seen: set[tuple[str, str]] = set()
    kept = []
    for finding in findings:
        if (finding.path, finding.message) not in seen:
            seen.add((finding.path, finding.message))
            kept.append(finding)
    return kept


def _words(item: LimitRangeItem, subject: Subject) -> tuple[Source, str, str, str]:
    """(where its resources are written, "container x" | "the Worker pod", "per container" |
    "per pod", "LimitRange y"): built only for a finding."""
    if isinstance(subject, ContainerResources):
        where = f"container {subject.name}" if subject.name else "this container"
        source = subject.resources_source()
    else:
        where, source = f"the {subject.replica_type} pod", subject.template_at
    return source, where, f"per {item.type.lower()}", f"LimitRange {item.limit_range}"


def _ratio(value: Decimal) -> str:
    return format(value.quantize(Decimal("0.01")).normalize(), "f")
