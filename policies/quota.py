"""ResourceQuota semantics for the pods of an MPIJob: which quotas a pod counts against (scopes),
what it charges (usage names), and what other jobs of the namespace are about to charge.

Mirrors kube-apiserver's quota admission (``pkg/quota/v1/evaluator/core/pods.go``): usage is
derived from the pod's effective requests and limits (``policies.resources``); a quota with
scopes counts only the pods all its scopes match; object counts such as
``count/mpijobs.kubeflow.org`` are charged only by quotas without scopes.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from policies.jobs import GROUP, LAUNCHER, WORKER, pod_spec, replica_spec, spec
from policies.quantities import is_extended
from policies.resources import HUGEPAGES_PREFIX, ContainerResources, JobPods, PodResources, Resources, parse_resources

MPIJOB_COUNT = f"count/mpijobs.{GROUP}"
POD_COUNTS = ("pods", "count/pods")
# A quota on any of these makes every container of a matching pod state it (backward compatibility
# the API server keeps: "must specify requests.cpu").
MUST_SPECIFY = ("cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory")
_QOS_RESOURCES = ("cpu", "memory")


@dataclass(frozen=True)
class Quota:
    name: str
    hard: Resources
    used: Resources
    scopes: tuple[str, ...]
    selector: tuple[Mapping[str, Any], ...]  # scopeSelector.matchExpressions

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
    pod_template = pod_spec(replica)
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
    if not all(_scope_matches(s, "Exists", (), facts) for s in quota.scopes):
        return False
    return all(
        _scope_matches(str(e.get("scopeName") or ""), str(e.get("operator") or ""),
                       tuple(str(v) for v in e.get("values") or ()), facts)
        for e in quota.selector
    )


# --- usage --------------------------------------------------------------------------------

def usage(requests: Mapping[str, Decimal], limits: Mapping[str, Decimal]) -> Resources:
    """What one pod (or one container) charges: ``podComputeUsageHelper``."""
    charged: Resources = {"pods": Decimal(1), "count/pods": Decimal(1)}
    for resource in ("cpu", "memory", "ephemeral-storage"):
        if resource in requests:
            charged[resource] = requests[resource]
            charged[f"requests.{resource}"] = requests[resource]
        if resource in limits:
            charged[f"limits.{resource}"] = limits[resource]
    for resource, value in requests.items():
        if resource.startswith(HUGEPAGES_PREFIX):
            charged[resource] = value
            charged[f"requests.{resource}"] = value
        elif is_extended(resource):  # only the requests.<name> form may be quota'd
            charged[f"requests.{resource}"] = value
    return charged


def container_usage_names(container: ContainerResources) -> set[str]:
    return set(usage(container.requests, container.limits))


@dataclass(frozen=True)
class Charge:
    """What one job charges one quota: per launcher pod and per worker pod (zero when the pod
    does not match the quota's scopes)."""

    launcher: Resources
    worker: Resources
    workers: int
    matching_pods: tuple[PodResources, ...]

    def total(self, resource: str) -> Decimal:
        return self.launcher.get(resource, Decimal(0)) + self.workers * self.worker.get(resource, Decimal(0))


def charge(job: Mapping[str, Any], pods: JobPods, quota: Quota) -> Charge:
    per_pod: dict[str, Resources] = {}
    matching = []
    for pod in pods:
        replica = replica_spec(job, pod.replica_type)
        if quota_matches_pod(quota, pod_facts(replica, pod)):
            per_pod[pod.replica_type] = usage(pod.requests, pod.limits)
            matching.append(pod)
    return Charge(per_pod.get(LAUNCHER, {}), per_pod.get(WORKER, {}), pods.workers, tuple(matching))


# --- other jobs of the namespace ----------------------------------------------------------

def _conditions(job: Mapping[str, Any]) -> dict[str, str]:
    status = job.get("status") or {}
    return {str(c.get("type")): str(c.get("status")) for c in status.get("conditions") or ()
            if isinstance(c, Mapping)}


def is_finished(job: Mapping[str, Any]) -> bool:
    conditions = _conditions(job)
    return conditions.get("Succeeded") == "True" or conditions.get("Failed") == "True"


def is_suspended(job: Mapping[str, Any]) -> bool:
    return bool((spec(job).get("runPolicy") or {}).get("suspend"))


def is_active(job: Mapping[str, Any]) -> bool:
    """Holding (or about to hold) resources in this cluster: not finished, suspended or deleted."""
    metadata = job.get("metadata") or {}
    managed_by = (spec(job).get("runPolicy") or {}).get("managedBy")
    return not (is_finished(job) or is_suspended(job) or metadata.get("deletionTimestamp")
                or managed_by not in (None, "", "kubeflow.org/mpi-operator"))


def pods_not_created_yet(job: Mapping[str, Any]) -> bool:
    """True while the MPI operator has not created the job's pods, so the quota's ``status.used``
    does not include them yet.

    Read from the MPIJob's status, which the operator writes only at the *end* of a successful
    sync — after it created the worker pods (and, with ``AtStartup``, the launcher):

    - no condition at all: the operator has not completed a sync of this job (new, or its pod
      creation keeps failing, e.g. refused by this very quota);
    - ``Suspended`` still True although ``spec.runPolicy.suspend`` is false: just resumed (Kueue
      admitted it), and the operator has not created the pods yet.

    The rare window where pods exist but the status is not written yet counts a job twice
    (cautious); a ``WaitForWorkersReady`` launcher created later is not counted.
    """
    if not is_active(job):
        return False
    conditions = _conditions(job)
    return not conditions or conditions.get("Suspended") == "True"
