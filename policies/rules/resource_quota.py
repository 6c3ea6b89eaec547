"""``resource-quota``: the whole job against every ResourceQuota of its namespace, before any pod
exists.

The MPI operator creates the pods one by one after the job was accepted; a quota then refuses
them one by one and the job hangs half-started. This rule adds up what the job's pods will charge
(``policies.quota``: launcher + workers × per worker, with LimitRange defaults) and compares it
with each quota whose scopes match them:

- over ``hard``: it can never run as is — always denied (whatever Kueue does, the pods will
  be refused);
- over the headroom (hard − used − what jobs accepted but not yet started will take): denied,
  or a warning when Kueue manages the job (it waits in its queue) or the job is suspended;
- a container that does not state a resource a quota tracks (cpu, memory): denied, as the
  API server refuses the pod ("must specify requests.cpu").

The message gives the numbers and the largest worker count that fits now and ever.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from policies.base import Action, Finding, Problem, RuleContext
from policies.jobs import WORKER, display_name, queue_name, replica_path, replica_spec, worker_replicas
from policies.messages import fits_warning, plural
from policies.quantities import format_quantity
from policies.quota import (
    MPIJOB_COUNT,
    MUST_SPECIFY,
    Charge,
    Quota,
    charge,
    container_usage_names,
    is_active,
    is_suspended,
    pod_facts,
    pods_not_created_yet,
    quota_matches_pod,
    quotas,
)
from policies.resources import JobPods, job_pods, request_pods

WORKER_REPLICAS = f"{replica_path(WORKER)}.replicas"
ZERO = Decimal(0)


@dataclass(frozen=True)
class ResourceQuotaParams:
    # A job Kueue manages (queue label) or that is suspended waits for room instead of failing:
    # a shortfall of headroom (not of hard) is then only a warning.
    warn_when_queued: bool = True


def minimum_workers(ctx: RuleContext) -> int:
    """The smallest worker count the admin allows (``worker-count``), for suggestions."""
    try:
        return max(int(getattr(ctx.params("worker-count"), "min", 1)), 1)
    except KeyError:
        return 1


@dataclass(frozen=True)
class Demand:
    """What this request adds to one quota: a fixed part plus ``workers`` × ``per_worker``.

    For a new job (or one about to start) the fixed part is the launcher; for an update that
    adds workers to a running job it is nothing, and ``offset`` is the workers already running.
    """

    fixed: Mapping[str, Decimal]
    per_worker: Mapping[str, Decimal]
    workers: int
    offset: int = 0

    def total(self, resource: str) -> Decimal:
        return self.fixed.get(resource, ZERO) + self.workers * self.per_worker.get(resource, ZERO)


@dataclass(frozen=True)
class Shortfall:
    quota: Quota
    resource: str
    demand: Demand
    in_flight: Decimal
    in_flight_jobs: tuple[str, ...]
    defaulted_by: tuple[str, ...] = ()  # LimitRanges whose defaults make up part of the request

    @property
    def requested(self) -> Decimal:
        return self.demand.total(self.resource)

    @property
    def hard(self) -> Decimal:
        return self.quota.hard[self.resource]

    @property
    def used(self) -> Decimal:
        return self.quota.used.get(self.resource, ZERO)

    @property
    def available(self) -> Decimal:
        return max(self.hard - self.used - self.in_flight, ZERO)

    @property
    def over_hard(self) -> bool:
        return self.requested > self.hard


@dataclass
class _Fit:
    """Largest worker counts over every (quota, resource) the job's workers charge."""

    now: int | None = None  # None: no limit found; -1: not even with zero workers
    ever: int | None = None

    def bound(self, fixed: Decimal, per_worker: Decimal, room_now: Decimal, room_ever: Decimal,
              offset: int) -> None:
        self.now = _smaller(self.now, _count(room_now - fixed, per_worker, offset))
        self.ever = _smaller(self.ever, _count(room_ever - fixed, per_worker, offset))


def _count(room: Decimal, per_worker: Decimal, offset: int) -> int:
    if room < 0:
        return -1
    if per_worker <= 0:
        return 10**9
    return offset + int(room // per_worker)


def _smaller(current: int | None, candidate: int) -> int:
    return candidate if current is None else min(current, candidate)


class ResourceQuota:
    id = "resource-quota"
    Params = ResourceQuotaParams
    default_action = Action.DENY
    needs_cluster = True

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        namespace_quotas = quotas(ctx.cluster.resource_quotas(ctx.namespace))
        if not namespace_quotas:
            return
        limit_ranges = ctx.cluster.limit_ranges(ctx.namespace)
        pods = request_pods(ctx)
        yield from self._unstated(ctx, pods, namespace_quotas)
        if ctx.operation == "CREATE":
            yield from self._job_count(ctx, namespace_quotas)
        others = [j for j in ctx.cluster.mpijobs(ctx.namespace) if _name(j) != ctx.name]
        starting = [(j, job_pods(j, limit_ranges)) for j in others if pods_not_created_yet(j)]
        shortfalls, fit = [], _Fit()
        for quota in namespace_quotas:
            demand = self._demand(ctx, pods, quota)
            if demand is None:
                continue
            pending = {_name(j): charge(j, p, quota) for j, p in starting}
            for resource, hard in quota.hard.items():
                if resource == MPIJOB_COUNT or demand.total(resource) <= 0 and not demand.per_worker.get(resource):
                    continue
                in_flight = sum((c.total(resource) for c in pending.values()), ZERO)
                room_now = hard - quota.used.get(resource, ZERO) - in_flight
                fit.bound(demand.fixed.get(resource, ZERO), demand.per_worker.get(resource, ZERO),
                          room_now, hard, demand.offset)
                if demand.total(resource) > room_now:
                    names = tuple(sorted(n for n, c in pending.items() if c.total(resource) > 0))
                    shortfalls.append(Shortfall(quota, resource, demand, in_flight, names,
                                                pods.defaulted_by(_pod_resource(resource))))
        if shortfalls:
            yield self._shortfall_finding(ctx, shortfalls, fit, others)

    # --- "must specify requests.cpu" --------------------------------------------------------
    def _unstated(self, ctx: RuleContext, pods: JobPods, namespace_quotas: Sequence[Quota]) -> Iterator[Finding]:
        for quota in namespace_quotas:
            tracked = [r for r in MUST_SPECIFY if r in quota.hard]
            if not tracked:
                continue
            for pod in pods:
                if not quota_matches_pod(quota, pod_facts(replica_spec(ctx.job, pod.replica_type), pod)):
                    continue
                for container in pod.containers:
                    missing = [r for r in tracked if r not in container_usage_names(container)]
                    if missing:
                        yield _unstated_finding(self.id, quota, container.path, container.name, missing)

    # --- count/mpijobs.kubeflow.org --------------------------------------------------------
    def _job_count(self, ctx: RuleContext, namespace_quotas: Sequence[Quota]) -> Iterator[Finding]:
        for quota in namespace_quotas:
            if quota.scoped or MPIJOB_COUNT not in quota.hard:
                continue
            hard, used = quota.hard[MPIJOB_COUNT], quota.used.get(MPIJOB_COUNT, ZERO)
            if used + 1 > hard:
                yield Finding(
                    self.id, "",
                    f"ResourceQuota {quota.name} allows {_int(hard)} MPIJobs in namespace {ctx.namespace} "
                    f"and {_int(used)} exist, so the API server will refuse this one; delete MPIJobs that "
                    f"have finished (kubectl get mpijobs -n {ctx.namespace}) or ask your cluster "
                    f"administrator to raise {MPIJOB_COUNT}",
                    Problem.POLICY,
                )

    # --- what this request adds ------------------------------------------------------------
    def _demand(self, ctx: RuleContext, pods: JobPods, quota: Quota) -> Demand | None:
        job_charge = charge(ctx.job, pods, quota)
        old = ctx.old_job
        if ctx.operation == "UPDATE" and is_suspended(ctx.job):
            return None  # being (or staying) suspended: nothing is charged until it resumes, checked then
        if ctx.operation == "UPDATE" and old is not None and is_active(old) and not pods_not_created_yet(old):
            # Running already: its pods are in status.used; only added workers charge anew.
            old_workers = worker_replicas(old)
            added = max(job_charge.workers - old_workers, 0)
            if not added:
                return None
            return Demand({}, job_charge.worker, added, offset=old_workers)
        return _full(job_charge)

    # --- the message ------------------------------------------------------------------------
    def _shortfall_finding(self, ctx: RuleContext, shortfalls: list[Shortfall], fit: _Fit,
                           others: Sequence[Mapping[str, Any]]) -> Finding:
        params: ResourceQuotaParams = ctx.params(self.id)
        never = any(s.over_hard for s in shortfalls)
        queued = queue_name(ctx.job) is not None or is_suspended(ctx.job)
        waits = queued and params.warn_when_queued and not never
        path = WORKER_REPLICAS if any(s.demand.per_worker for s in shortfalls) else "spec"
        workers = shortfalls[0].demand.offset + shortfalls[0].demand.workers
        if waits:
            hint = fit.now if fit.now is not None and minimum_workers(ctx) <= fit.now < workers else None
            return Finding(self.id, path, _queued_message(self.id, path, shortfalls[0], len(shortfalls) - 1, hint),
                           Problem.POLICY, ceiling=Action.WARN)
        running = sum(1 for j in others if is_active(j) and not pods_not_created_yet(j))
        head = ("needs more than the namespace quota allows in total, so it can never run as is"
                if never else "does not fit the namespace quota now")
        details = "; ".join(_describe(s) for s in shortfalls)
        suggestions = _suggestions(ctx, shortfalls, fit, workers, running, never)
        return Finding(self.id, path, f"{display_name(ctx.job) or 'this MPIJob'} {head}: {details}. "
                                      f"Suggestions: {suggestions}", Problem.POLICY)


def _full(job_charge: Charge) -> Demand:
    return Demand(job_charge.launcher, job_charge.worker, job_charge.workers)


def _name(job: Mapping[str, Any]) -> str:
    return (job.get("metadata") or {}).get("name") or ""


def _pod_resource(quota_resource: str) -> str:
    """``requests.nvidia.com/gpu`` → ``nvidia.com/gpu``: the container resource behind a quota name."""
    for prefix in ("requests.", "limits."):
        if quota_resource.startswith(prefix):
            return quota_resource[len(prefix):]
    return quota_resource


def _int(value: Decimal) -> str:
    return format_quantity(value)


def _requested(s: Shortfall) -> str:
    r, d = s.resource, s.demand
    per = d.per_worker.get(r, ZERO)
    fixed = d.fixed.get(r, ZERO)
    workers = f"{plural(d.workers, 'more worker') if d.offset else plural(d.workers, 'worker')} × {format_quantity(per, r)}"
    if per and fixed:
        return f"launcher {format_quantity(fixed, r)} + {workers}"
    return workers if per else "launcher"


def _describe(s: Shortfall) -> str:
    r = s.resource
    used = f"used {format_quantity(s.used, r)}"
    if s.in_flight:
        used += (f" + {format_quantity(s.in_flight, r)} for MPIJobs accepted but not started yet "
                 f"({', '.join(s.in_flight_jobs)})")
    defaults = f", defaults of LimitRange {', '.join(s.defaulted_by)} included" if s.defaulted_by else ""
    return (f"ResourceQuota {s.quota.name}: {r} requested {format_quantity(s.requested, r)} ({_requested(s)}{defaults}), "
            f"hard {format_quantity(s.hard, r)}, {used}, available {format_quantity(s.available, r)}")


def _suggestions(ctx: RuleContext, shortfalls: Sequence[Shortfall], fit: _Fit, workers: int,
                 running: int, never: bool) -> str:
    minimum = minimum_workers(ctx)
    items = []
    if fit.now is not None and minimum <= fit.now < workers:
        items.append(f"reduce {WORKER_REPLICAS} to {fit.now} to fit now")
    if fit.ever is not None and fit.ever < workers:
        if fit.ever >= minimum:
            if fit.ever != fit.now:
                items.append(f"at most {fit.ever} workers can ever fit this quota")
        else:
            items.append(f"this quota cannot hold even {minimum} workers of this size: use smaller workers")
    occupied = any(s.used > 0 or s.in_flight > 0 for s in shortfalls)
    later = fit.ever is not None and fit.ever >= minimum and (fit.now is None or fit.now < fit.ever)
    if occupied and (not never or later):
        if running:
            items.append(f"wait for the {plural(running, 'running MPIJob')} in {ctx.namespace} to finish")
        else:
            items.append(f"wait for running workloads in {ctx.namespace} to finish")
    names = sorted({s.quota.name for s in shortfalls})
    resources = sorted({s.resource for s in shortfalls})
    items.append(f"ask your cluster administrator to raise {', '.join(resources)} in ResourceQuota "
                 f"{', '.join(names)}")
    return " ".join(f"{i}. {text};" for i, text in enumerate(items, 1)).rstrip(";")


def _queued_message(rule: str, path: str, first: Shortfall, more: int, fits_now: int | None) -> str:
    """The first shortfall and a hint, as much of it as a warning holds (cut at 256 characters)."""
    r = first.resource
    need = (f"needs {r} {format_quantity(first.requested, r)} ({_requested(first)}) but ResourceQuota "
            f"{first.quota.name} has {format_quantity(first.available, r)} of {format_quantity(first.hard, r)} free")
    extra = f" (+{more} more)" if more else ""
    hint = f", or use {fits_now} workers" if fits_now is not None else ""
    for text in (f"{need}{extra}; its pods will wait until the quota has room{hint}",
                 f"{need}{extra}; its pods will wait for room{hint}",
                 f"{need}; its pods will wait for room"):
        if fits_warning(rule, path, text):
            break
    return text


def _unstated_finding(rule: str, quota: Quota, path: str, container: str, missing: Sequence[str]) -> Finding:
    limits_only = all(r.startswith("limits.") for r in missing)
    field_path = f"{path}.resources.{'limits' if limits_only else 'requests'}"
    wanted = ", ".join(missing)
    fixes = sorted({f"resources.{'limits' if r.startswith('limits.') else 'requests'}.{r.split('.')[-1]}"
                    for r in missing})
    return Finding(
        rule, field_path,
        f"ResourceQuota {quota.name} tracks {wanted}, so the API server refuses pods whose containers do "
        f"not set it (failed quota: {quota.name}: must specify {wanted}); set {' and '.join(fixes)} "
        f"on container {container}" + ("" if limits_only else " (a limit alone also sets the request)"),
        Problem.POLICY,
    )
