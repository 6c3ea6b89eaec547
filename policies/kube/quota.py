"""ResourceQuota semantics for the pods of an MPIJob: which quotas a pod counts against (scopes),
what it charges (usage names), and what other jobs of the namespace are about to charge.

Mirrors kube-apiserver's quota admission (``pkg/quota/v1/evaluator/core/pods.go``): usage is
derived from the pod's effective requests and limits (``policies.kube.pod_resources``); a quota with
scopes counts only the pods all its scopes match; object counts such as
``count/mpijobs.kubeflow.org`` are charged only by quotas without scopes.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, NamedTuple

from policies.cluster_view import SnapshotMemo
from policies.mpijob.reading import GROUP, pod_spec
from policies.kube.quantities import is_extended
from policies.kube.pod_resources import (
    HUGEPAGES_PREFIX,
    ContainerResources,
    JobPods,
    PodResources,
    Resources,
    container_defaults,
    limit_range_items,
    parse_resources,
    workload_pods,
)
from policies.workload import Role, workload_of

MPIJOB_COUNT = f"count/mpijobs.{GROUP}"
POD_COUNTS = ("pods", "count/pods")
# A quota on any of these makes every container of a matching pod state it (backward compatibility
# the API server keeps: "must specify requests.cpu").
MUST_SPECIFY = ("cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory")
_QOS_RESOURCES = ("cpu", "memory")
ZERO = Decimal(0)

# Read once: a member read off an Enum class is a Python call on 3.11 (docs/performance.md, "Fast
# paths kept and removed"), and these are read for every pod of every request.
_LAUNCHER = Role.LAUNCHER


@dataclass(frozen=True)
class Quota:
    name: str
    hard: Resources
    used: Resources
    scopes: tuple[str, ...]
    selector: tuple[Mapping[str, Any], ...]  # scopeSelector.matchExpressions
    # Derived from the above once, as a quota is read by many requests:
    # (resource, hard, used) of what pods are charged: every hard resource but the MPIJob count
    limits: tuple[tuple[str, Decimal, Decimal], ...] = field(init=False, repr=False, compare=False)
    # (resource, "requests" | "limits", container resource) of each MUST_SPECIFY resource it tracks
    must_specify: tuple[tuple[str, str, str], ...] = field(init=False, repr=False, compare=False)
    # the container resources of ``must_specify`` every container must request, and limit
    must_request: frozenset[str] = field(init=False, repr=False, compare=False)
    must_limit: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "limits", tuple((r, hard, self.used.get(r, ZERO))
                                                 for r, hard in self.hard.items() if r != MPIJOB_COUNT))
        must_specify = tuple((r, "limits" if r.startswith("limits.") else "requests", r.rsplit(".", 1)[-1])
                             for r in MUST_SPECIFY if r in self.hard)
        object.__setattr__(self, "must_specify", must_specify)
        object.__setattr__(self, "must_request", frozenset(n for _, side, n in must_specify if side == "requests"))
        object.__setattr__(self, "must_limit", frozenset(n for _, side, n in must_specify if side == "limits"))

    def stated_by(self, container: ContainerResources) -> bool:
        """Whether ``container`` states everything of ``must_specify`` (``unstated`` finds nothing)."""
        return container.requests.keys() >= self.must_request and container.limits.keys() >= self.must_limit

    @property
    def scoped(self) -> bool:
        return bool(self.scopes or self.selector)


def quotas(objects: Iterable[Mapping[str, Any]]) -> list[Quota]:
    """The namespace's ResourceQuotas, sorted by name.

    ``spec.hard`` is the admin's current intent (the quota controller copies it to ``status.hard``
    within a moment); ``status.used`` is what the API server has charged so far, and moves the
    instant a pod is created.
    """
    parsed = []
    for obj in objects:
        status = obj.get("status") or {}
        quota_spec = obj.get("spec") or {}
        hard = parse_resources(quota_spec.get("hard") or status.get("hard"))
        selector = (quota_spec.get("scopeSelector") or {}).get("matchExpressions") or ()
        parsed.append(Quota(
            name=(obj.get("metadata") or {}).get("name") or "",
            hard=hard,
            used=parse_resources(status.get("used")),
            scopes=tuple(str(s) for s in quota_spec.get("scopes") or ()),
            selector=tuple(e for e in selector if isinstance(e, Mapping)),
        ))
    return sorted(parsed, key=lambda q: q.name)


# --- scopes -------------------------------------------------------------------------------

@dataclass(frozen=True)
class PodFacts:
    """What quota scopes look at in a pod spec."""

    terminating: bool  # activeDeadlineSeconds set
    best_effort: bool  # QoS class BestEffort
    priority_class: str
    cross_namespace_affinity: bool


def pod_facts(replica: Mapping[str, Any] | None, pod: PodResources) -> PodFacts:
    return template_facts(pod_spec(replica), pod)


def template_facts(pod_template: Mapping[str, Any], pod: PodResources) -> PodFacts:
    """``pod_facts`` of a pod template's spec (``template.spec``)."""
    deadline = pod_template.get("activeDeadlineSeconds")
    return PodFacts(
        terminating=isinstance(deadline, int) and not isinstance(deadline, bool) and deadline >= 0,
        best_effort=not any(r in c.requests or r in c.limits for c in pod.containers for r in _QOS_RESOURCES),
        priority_class=str(pod_template.get("priorityClassName") or ""),
        cross_namespace_affinity=_cross_namespace_affinity(pod_template.get("affinity")),
    )


def _cross_namespace_affinity(affinity: Any) -> bool:
    if not isinstance(affinity, Mapping):
        return False
    for kind in ("podAffinity", "podAntiAffinity"):
        terms = affinity.get(kind) or {}
        if not isinstance(terms, Mapping):
            continue
        required = list(terms.get("requiredDuringSchedulingIgnoredDuringExecution") or ())
        preferred = [t.get("podAffinityTerm") for t in terms.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
                     if isinstance(t, Mapping)]
        for term in required + preferred:
            if isinstance(term, Mapping) and (term.get("namespaces") or term.get("namespaceSelector") is not None):
                return True
    return False


def _scope_matches(scope: str, operator: str, values: Sequence[str], facts: PodFacts) -> bool:
    match scope:
        case "Terminating":
            return facts.terminating
        case "NotTerminating":
            return not facts.terminating
        case "BestEffort":
            return facts.best_effort
        case "NotBestEffort":
            return not facts.best_effort
        case "CrossNamespacePodAffinity":
            return facts.cross_namespace_affinity
        case "PriorityClass":
            match operator:
                case "In":
                    return facts.priority_class in values
                case "NotIn":
                    return facts.priority_class not in values
                case "Exists":
                    return facts.priority_class != ""
                case "DoesNotExist":
                    return facts.priority_class == ""
    return False  # scopes of other objects (VolumeAttributesClass) never match a pod


def quota_matches_pod(quota: Quota, facts: PodFacts) -> bool:
    """All ``spec.scopes`` and all ``scopeSelector`` expressions must match."""
    if not (quota.scopes or quota.selector):
        return True
    if not all(_scope_matches(s, "Exists", (), facts) for s in quota.scopes):
        return False
    return all(
        _scope_matches(str(e.get("scopeName") or ""), str(e.get("operator") or ""),
                       tuple(str(v) for v in e.get("values") or ()), facts)
        for e in quota.selector
    )


# --- usage --------------------------------------------------------------------------------

_COMPUTE = ("cpu", "memory", "ephemeral-storage")
_COMPUTE_NAMES = tuple((r, f"requests.{r}", f"limits.{r}") for r in _COMPUTE)  # formatted once
_ONE = Decimal(1)


def usage(requests: Mapping[str, Decimal], limits: Mapping[str, Decimal]) -> Resources:
    """What one pod (or one container) charges: ``podComputeUsageHelper``."""
    charged: Resources = {"pods": _ONE, "count/pods": _ONE}
    for resource, requested, limited in _COMPUTE_NAMES:
        if resource in requests:
            charged[resource] = charged[requested] = requests[resource]
        if resource in limits:
            charged[limited] = limits[resource]
    for resource, value in requests.items():  # the quota resources the others charge
        if resource in _COMPUTE:
            continue
        if resource.startswith(HUGEPAGES_PREFIX):
            charged[resource] = charged[f"requests.{resource}"] = value
        elif is_extended(resource):  # only the requests.<name> form may be quota'd
            charged[f"requests.{resource}"] = value
    return charged


def unstated(container: ContainerResources, tracked: Sequence[tuple[str, str, str]]) -> list[str]:
    """The quota resources of ``tracked`` (``Quota.must_specify``) the container's usage lacks:
    ``cpu`` and ``requests.cpu`` are charged when it requests cpu, ``limits.cpu`` when it limits it."""
    return [resource for resource, side, name in tracked if name not in getattr(container, side)]


class Charge(NamedTuple):  # a tuple: made for every quota on every request, and cheap to make
    """What one job charges one quota: per launcher pod and per worker pod (zero when the pod
    does not match the quota's scopes)."""

    launcher: Resources
    worker: Resources
    workers: int

    def total(self, resource: str) -> Decimal:
        return self.launcher.get(resource, ZERO) + self.workers * self.worker.get(resource, ZERO)


class PodCharge:
    """One pod of a job as every quota sees it: what it charges, and what scopes look at (only
    worked out when a quota has scopes)."""

    __slots__ = ("pod", "usage", "_facts")

    def __init__(self, pod: PodResources) -> None:
        self.pod = pod
        self.usage = usage(pod.requests, pod.limits)
        self._facts: PodFacts | None = None

    @property
    def facts(self) -> PodFacts:
        if self._facts is None:
            self._facts = template_facts(self.pod.template, self.pod)
        return self._facts


def pod_charges(pods: JobPods) -> tuple[PodCharge, ...]:
    """Worked out once per job, then held against each quota of the namespace (``charge_of``)."""
    return tuple([PodCharge(pod) for pod in pods.pods.values()])


def charge_of(pods: Sequence[PodCharge], workers: int, quota: Quota) -> Charge:
    # Told apart by identity, not kept in a dict keyed by role and looked up with Role.LAUNCHER
    # and Role.WORKER: two member reads (each a Python call on 3.11) and a dict per quota.
    launcher: Resources | None = None
    worker: Resources | None = None
    for pod in pods:
        if not (quota.scopes or quota.selector) or quota_matches_pod(quota, pod.facts):
            if pod.pod.role is _LAUNCHER:
                launcher = pod.usage
            else:
                worker = pod.usage
    return Charge({} if launcher is None else launcher, {} if worker is None else worker, workers)


def charge(pods: JobPods, quota: Quota) -> Charge:
    return charge_of(pod_charges(pods), pods.workers, quota)


# --- the namespace as quotas see it, derived once per change ------------------------------

@dataclass(frozen=True)
class InFlight:
    """What the jobs accepted but not started yet will charge one quota, by job name."""

    charges: Mapping[str, Charge]
    totals: Mapping[str, Decimal]  # per resource the quota tracks
    names: Mapping[str, tuple[str, ...]]  # per resource, the jobs charging some of it, sorted
    # (resource, hard, room) per ``Quota.limits``: room is hard - used - in flight, what a job may take now
    rooms: tuple[tuple[str, Decimal, Decimal], ...]

    @classmethod
    def of(cls, charges: Mapping[str, Charge], quota: Quota) -> InFlight:
        totals = {r: sum((c.total(r) for c in charges.values()), ZERO) for r in quota.hard}
        return cls(charges, totals,
                   {r: tuple(sorted(n for n, c in charges.items() if c.total(r) > 0)) for r in quota.hard},
                   tuple((r, hard, hard - used - totals[r]) for r, hard, used in quota.limits))

    def without(self, name: str, quota: Quota) -> InFlight:
        """The request's own job is never in flight beside itself."""
        if name not in self.charges:
            return self
        return InFlight.of({n: c for n, c in self.charges.items() if n != name}, quota)


@dataclass(frozen=True)
class NamespaceQuotas:
    """A namespace's quotas (sorted by name), each with what is in flight against it, and the
    names of its jobs whose pods are running (already in ``status.used``)."""

    quotas: tuple[Quota, ...]
    in_flight: tuple[InFlight, ...]  # one per quota
    running: tuple[str, ...]
    # Picked out once, as a namespace's quotas are read by many requests:
    # the quotas that make containers state cpu or memory (``Quota.must_specify``)
    must_specify: tuple[Quota, ...] = field(init=False, repr=False, compare=False)
    # object-count resource (``count/mpijobs.kubeflow.org``, or that of another API's jobs) →
    # the quotas without scopes that count it; a resource no such quota counts is absent
    object_counts: Mapping[str, tuple[Quota, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "must_specify", tuple(q for q in self.quotas if q.must_specify))
        counts: dict[str, tuple[Quota, ...]] = {}
        for quota in self.quotas:
            if not quota.scoped:
                for resource in quota.hard:
                    if resource.startswith("count/"):
                        counts[resource] = (*counts.get(resource, ()), quota)
        object.__setattr__(self, "object_counts", counts)

    def running_besides(self, name: str) -> int:
        return sum(1 for n in self.running if n != name)


def _namespace_quotas(quota_objects: Iterable[Mapping[str, Any]], limit_ranges: Iterable[Mapping[str, Any]],
                      *jobs: Iterable[Mapping[str, Any]]) -> NamespaceQuotas:
    """``jobs``: the namespace's jobs, one sequence per API the webhook guards, each job read
    through its workload view (so in-flight charges count workloads, whatever their API)."""
    parsed = tuple(quotas(quota_objects))
    workloads = [workload_of(job) for listed in jobs for job in listed]
    starting = [w for w in workloads if w.lifecycle.pods_not_created_yet]
    if starting:
        defaults = container_defaults(limit_range_items(limit_ranges))
        pods = [(w.kind.job_key(w.name), workload_pods(w, defaults)) for w in starting]
    else:
        pods = []
    in_flight = tuple(InFlight.of({name: charge(job, quota) for name, job in pods}, quota) for quota in parsed)
    running = tuple(w.kind.job_key(w.name) for w in workloads
                    if w.lifecycle.active and not w.lifecycle.pods_not_created_yet)
    return NamespaceQuotas(parsed, in_flight, running)


# Keyed on the ClusterView's snapshots of the namespace's quotas, LimitRanges and jobs: parsed
# again only when one of them changed. Sized for the namespaces that submit jobs at one time.
namespace_quotas: SnapshotMemo[NamespaceQuotas] = SnapshotMemo(_namespace_quotas, size=2048)
