"""``resource-quota``: the whole job against every ResourceQuota of its namespace, before any pod
exists.

The MPI operator creates the pods one by one after the job was accepted; a quota then refuses
them one by one and the job hangs half-started. This rule adds up what the job's pods will charge
(``policies.kube.quota``: launcher + workers × per worker, with LimitRange defaults) and compares it
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
from typing import NamedTuple

from policies.interface import Action, Finding, Problem, RuleContext
from policies.messages import fits_warning, plural
from policies.kube.quantities import format_quantity
from policies.kube.quota import (
    Charge,
    InFlight,
    NamespaceQuotas,
    PodCharge,
    Quota,
    charge_of,
    namespace_quotas,
    pod_charges,
    quota_matches_pod,
    unstated,
)
from policies.kube.pod_resources import ContainerResources, request_pods
from policies.trainer.trainjob_review import in_flight_trainjobs
from policies.workload import Workload, jobs_in_words, request_old_workload, request_workload

ZERO = Decimal(0)
NO_WORKLOADS: tuple[Workload, ...] = ()  # one object: the namespace memo is keyed on its identity


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


class Demand(NamedTuple):  # a tuple: made for every quota on every request, and cheap to make
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


def _worker_bounds(demands: Sequence[tuple[Demand, InFlight]]) -> _Fit:
    """Bounds of every (quota, resource) the job charges: only worked out when something is short."""
    fit = _Fit()
    for demand, in_flight in demands:
        for resource, hard, room_now in in_flight.rooms:
            fixed, per_worker = demand.fixed.get(resource, ZERO), demand.per_worker.get(resource, ZERO)
            if fixed + demand.workers * per_worker > ZERO or per_worker:
                fit.bound(fixed, per_worker, room_now, hard, demand.offset)
    return fit


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
        quota_objects = ctx.cluster.resource_quotas(ctx.namespace)
        if not quota_objects:
            return
        # Parsed quotas and what other jobs hold in flight: derived once per change of these
        # (no TrainJobs in the namespace, the usual case, asks no more than the view does)
        trainjobs = ctx.cluster.trainjobs(ctx.namespace)
        namespace = namespace_quotas(quota_objects, ctx.cluster.limit_ranges(ctx.namespace),
                                     ctx.cluster.mpijobs(ctx.namespace),
                                     in_flight_trainjobs(trainjobs, ctx) if trainjobs else NO_WORKLOADS)
        workload = request_workload(ctx)
        pods = request_pods(ctx)
        charges = pod_charges(pods)
        if namespace.must_specify:
            yield from self._unstated(charges, namespace.must_specify)
        if ctx.operation == "CREATE":
            counted = namespace.object_counts.get(workload.kind.count_resource)
            if counted:
                yield from self._job_count(ctx, workload, counted)
        if ctx.operation == "UPDATE" and workload.lifecycle.suspended:
            return  # being (or staying) suspended: nothing is charged until it resumes, checked then
        running_workers = _running_workers(ctx)
        shortfalls, demands = [], []
        for quota, in_flight in zip(namespace.quotas, namespace.in_flight):
            demand = _demand(charge_of(charges, pods.workers, quota), running_workers)
            if demand is None:
                continue
            in_flight = in_flight.without(workload.kind.job_key(ctx.name), quota)
            demands.append((demand, in_flight))
            for resource, _, room_now in in_flight.rooms:
                per_worker = demand.per_worker.get(resource, ZERO)
                requested = demand.fixed.get(resource, ZERO) + demand.workers * per_worker
                if requested > room_now and (requested > ZERO or per_worker):
                    shortfalls.append(Shortfall(quota, resource, demand, in_flight.totals[resource],
                                                in_flight.names[resource], pods.defaulted_by(_pod_resource(resource))))
        if shortfalls:
            yield self._shortfall_finding(ctx, workload, shortfalls, _worker_bounds(demands), namespace)

    # --- "must specify requests.cpu" --------------------------------------------------------
    def _unstated(self, charges: Sequence[PodCharge], namespace_quotas: Sequence[Quota]) -> Iterator[Finding]:
        """``namespace_quotas``: those with ``must_specify``."""
        for quota in namespace_quotas:
            for pod in charges:
                if quota.scoped and not quota_matches_pod(quota, pod.facts):
                    continue
                for container in pod.pod.containers:
                    if quota.stated_by(container):  # the usual container
                        continue
                    missing = unstated(container, quota.must_specify)
                    if missing:
                        yield _unstated_finding(self.id, quota, container, missing)

    # --- count/mpijobs.kubeflow.org --------------------------------------------------------
    def _job_count(self, ctx: RuleContext, workload: Workload, namespace_quotas: Sequence[Quota]) -> Iterator[Finding]:
        """``namespace_quotas``: those without scopes that count jobs of the workload's API
        (``NamespaceQuotas.object_counts``)."""
        kind, resource = workload.kind, workload.kind.count_resource
        for quota in namespace_quotas:
            hard, used = quota.hard[resource], quota.used.get(resource, ZERO)
            if used + 1 > hard:
                yield Finding(
                    self.id, "",
                    f"ResourceQuota {quota.name} allows {_int(hard)} {kind.kind}s in namespace {ctx.namespace} "
                    f"and {_int(used)} exist, so the API server will refuse this one; delete {kind.kind}s that "
                    f"have finished (kubectl get {kind.plural} -n {ctx.namespace}) or ask your cluster "
                    f"administrator to raise {resource}",
                    Problem.POLICY,
                )

    # --- the message ------------------------------------------------------------------------
    def _shortfall_finding(self, ctx: RuleContext, workload: Workload, shortfalls: list[Shortfall], fit: _Fit,
                           namespace: NamespaceQuotas) -> Finding:
        params: ResourceQuotaParams = ctx.params(self.id)
        never = any(s.over_hard for s in shortfalls)
        queued = workload.queue is not None or workload.lifecycle.suspended
        waits = queued and params.warn_when_queued and not never
        count = workload.workers.count_source
        path = count.finding_path if any(s.demand.per_worker for s in shortfalls) else "spec"
        workers = shortfalls[0].demand.offset + shortfalls[0].demand.workers
        if waits:
            hint = fit.now if fit.now is not None and minimum_workers(ctx) <= fit.now < workers else None
            return Finding(self.id, path, _queued_message(self.id, path, workload, shortfalls[0],
                                                          len(shortfalls) - 1, hint),
                           Problem.POLICY, ceiling=Action.WARN)
        running = namespace.running_besides(workload.kind.job_key(ctx.name))
        head = ("needs more than the namespace quota allows in total, so it can never run as is"
                if never else "does not fit the namespace quota now")
        details = "; ".join(_describe(workload, s) for s in shortfalls)
        suggestions = _suggestions(ctx, workload, shortfalls, fit, workers, running, never)
        return Finding(self.id, path, f"{workload.display_name or f'this {workload.kind.kind}'} {head}: {details}. "
                                      f"Suggestions: {suggestions}", Problem.POLICY)


# --- what this request adds -------------------------------------------------------------------

def _running_workers(ctx: RuleContext) -> int | None:
    """For an update of a job whose pods run already (they are in ``status.used``): its worker
    count before the update; None when the whole job is charged."""
    if ctx.operation != "UPDATE":
        return None
    old = request_old_workload(ctx)
    if old is not None and old.lifecycle.active and not old.lifecycle.pods_not_created_yet:
        count = old.workers.count
        return count if old.workers.present and isinstance(count, int) else 0
    return None


def _demand(job_charge: Charge, running_workers: int | None) -> Demand | None:
    if running_workers is None:
        return Demand(job_charge.launcher, job_charge.worker, job_charge.workers)
    added = max(job_charge.workers - running_workers, 0)  # only added workers charge anew
    if not added:
        return None
    return Demand({}, job_charge.worker, added, offset=running_workers)


def _pod_resource(quota_resource: str) -> str:
    """``requests.nvidia.com/gpu`` → ``nvidia.com/gpu``: the container resource behind a quota name."""
    for prefix in ("requests.", "limits."):
        if quota_resource.startswith(prefix):
            return quota_resource[len(prefix):]
    return quota_resource


def _int(value: Decimal) -> str:
    return format_quantity(value)


def _requested(workload: Workload, s: Shortfall) -> str:
    r, d = s.resource, s.demand
    per = d.per_worker.get(r, ZERO)
    fixed = d.fixed.get(r, ZERO)
    noun, launcher = workload.workers.noun, workload.launcher.noun
    workers = f"{plural(d.workers, f'more {noun}') if d.offset else plural(d.workers, noun)} × {format_quantity(per, r)}"
    if per and fixed:
        return f"{launcher} {format_quantity(fixed, r)} + {workers}"
    return workers if per else launcher


def _describe(workload: Workload, s: Shortfall) -> str:
    r = s.resource
    used = f"used {format_quantity(s.used, r)}"
    if s.in_flight:
        kinds, names = jobs_in_words(s.in_flight_jobs)
        used += f" + {format_quantity(s.in_flight, r)} for {kinds} accepted but not started yet ({names})"
    defaults = f", defaults of LimitRange {', '.join(s.defaulted_by)} included" if s.defaulted_by else ""
    return (f"ResourceQuota {s.quota.name}: {r} requested {format_quantity(s.requested, r)} "
            f"({_requested(workload, s)}{defaults}), "
            f"hard {format_quantity(s.hard, r)}, {used}, available {format_quantity(s.available, r)}")


def _suggestions(ctx: RuleContext, workload: Workload, shortfalls: Sequence[Shortfall], fit: _Fit, workers: int,
                 running: int, never: bool) -> str:
    minimum = minimum_workers(ctx)
    count, noun = workload.workers.count_source, workload.workers.noun
    items = []
    if fit.now is not None and minimum <= fit.now < workers:
        items.append(f"reduce {count.path} to {count.written(fit.now)} to fit now")
    if fit.ever is not None and fit.ever < workers:
        if fit.ever >= minimum:
            if fit.ever != fit.now:
                items.append(f"{count.path} can be at most {count.written(fit.ever)} to ever fit this quota"
                             if count.offset else f"at most {fit.ever} {noun}s can ever fit this quota")
        else:
            besides = f" besides the {workload.launcher.noun}'s" if count.offset else ""
            items.append(f"this quota cannot hold even {minimum} {noun}s{besides} of this size: use smaller {noun}s")
    occupied = any(s.used > 0 or s.in_flight > 0 for s in shortfalls)
    later = fit.ever is not None and fit.ever >= minimum and (fit.now is None or fit.now < fit.ever)
    if occupied and (not never or later):
        if running:
            items.append(f"wait for the {plural(running, f'running {workload.kind.kind}')} in {ctx.namespace} "
                         "to finish")
        else:
            items.append(f"wait for running workloads in {ctx.namespace} to finish")
    names = sorted({s.quota.name for s in shortfalls})
    resources = sorted({s.resource for s in shortfalls})
    items.append(f"ask your cluster administrator to raise {', '.join(resources)} in ResourceQuota "
                 f"{', '.join(names)}")
    return " ".join(f"{i}. {text};" for i, text in enumerate(items, 1)).rstrip(";")


def _queued_message(rule: str, path: str, workload: Workload, first: Shortfall, more: int,
                    fits_now: int | None) -> str:
    """The first shortfall and a hint, as much of it as a warning holds (cut at 256 characters)."""
    r = first.resource
    need = (f"needs {r} {format_quantity(first.requested, r)} ({_requested(workload, first)}) but ResourceQuota "
            f"{first.quota.name} has {format_quantity(first.available, r)} of {format_quantity(first.hard, r)} free")
    extra = f" (+{more} more)" if more else ""
    # the number the user writes: with an offset (a TrainJob's launcher counted in numNodes)
    # it is not the pod count
    count = workload.workers.count_source
    hint = "" if fits_now is None else f", or set {count.path} to {count.written(fits_now)}" if count.offset \
        else f", or use {fits_now} {workload.workers.noun}s"
    for text in (f"{need}{extra}; its pods will wait until the quota has room{hint}",
                 f"{need}{extra}; its pods will wait for room{hint}",
                 f"{need}; its pods will wait for room"):
        if fits_warning(rule, path, text):
            break
    return text


def _unstated_finding(rule: str, quota: Quota, container: ContainerResources, missing: Sequence[str]) -> Finding:
    limits_only = all(r.startswith("limits.") for r in missing)
    source = container.resources_source().child("limits" if limits_only else "requests")
    wanted = ", ".join(missing)
    fixes = sorted({f"resources.{'limits' if r.startswith('limits.') else 'requests'}.{r.split('.')[-1]}"
                    for r in missing})
    return Finding(
        rule, source.finding_path,
        source.said(f"ResourceQuota {quota.name} tracks {wanted}, so the API server refuses pods whose containers "
                    f"do not set it (failed quota: {quota.name}: must specify {wanted}); set {' and '.join(fixes)} "
                    f"on container {container.name}" + ("" if limits_only else " (a limit alone also sets the request)")),
        Problem.POLICY,
    )
