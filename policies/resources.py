"""The resources each pod of an MPIJob will really have, computed the way the API server does.

What the user writes is not what the pod gets. In order, the API server:

1. defaults each container's missing requests to its limits (``SetDefaults_Pod``, at decode);
2. fills missing limits and requests from every LimitRange of the namespace (the ``LimitRanger``
   admission plugin), after defaulting the LimitRange items themselves (``SetDefaults_LimitRangeItem``:
   a ``max`` without ``default`` becomes the default limit, a default limit without
   ``defaultRequest`` becomes the default request, a ``min`` without ``defaultRequest`` becomes the
   default request — verified: ``max: nvidia.com/gpu: 4`` gives every container without a GPU
   limit 4 GPUs);
3. validates the result (a request above its limit; extended resources such as GPUs need a limit
   and requests equal to limits);
4. charges the quota and the scheduler with the pod's request per resource: the larger of the sum
   of its containers (plus restartable init containers, "sidecars") and its largest init container
   (plus the sidecars started before it).

Nothing here reads the cluster: callers pass the namespace's LimitRanges.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from policies.base import RuleContext
from policies.jobs import REPLICA_TYPES, WORKER, containers, pod_spec, replica_path, replica_spec, worker_replicas
from policies.quantities import BadQuantity, format_quantity, is_extended, quantity

Resources = dict[str, Decimal]
# Where a value came from: "" for the container spec, else the LimitRange that defaulted it.
SPEC = ""

# Resources whose request may never differ from the limit (apimachinery: "non-overcommitable").
HUGEPAGES_PREFIX = "hugepages-"
# Resources a request above the limit is refused for (the rest must be equal anyway).
OVERCOMMITTABLE = ("cpu", "memory", "ephemeral-storage")


def parse_resources(values: Any) -> Resources:
    """A container's ``requests`` or ``limits`` map; unparsable entries are left out (the API
    server refuses them with its own message, and a quota cannot count what does not parse)."""
    parsed: Resources = {}
    if not isinstance(values, Mapping):
        return parsed
    for name, value in values.items():
        try:
            parsed[str(name)] = quantity(value)
        except BadQuantity:
            continue
    return parsed


def is_non_overcommittable(resource: str) -> bool:
    return is_extended(resource) or resource.startswith(HUGEPAGES_PREFIX)


# --- LimitRanges --------------------------------------------------------------------------

@dataclass(frozen=True)
class LimitRangeItem:
    """One ``spec.limits[i]`` of a LimitRange, with the API server's own defaults applied."""

    limit_range: str  # name of the LimitRange
    index: int
    type: str  # Container | Pod | PersistentVolumeClaim
    min: Resources
    max: Resources
    default: Resources
    default_request: Resources
    max_limit_request_ratio: Resources


def limit_range_items(limit_ranges: Iterable[Mapping[str, Any]]) -> list[LimitRangeItem]:
    """Items of the namespace's LimitRanges in a stable order (by name: the API server gives no
    order, and with two LimitRanges defaulting the same resource the first one applied wins)."""
    items: list[LimitRangeItem] = []
    for limit_range in sorted(limit_ranges, key=lambda lr: (lr.get("metadata") or {}).get("name") or ""):
        name = (limit_range.get("metadata") or {}).get("name") or ""
        for index, item in enumerate((limit_range.get("spec") or {}).get("limits") or ()):
            if isinstance(item, Mapping):
                items.append(_defaulted_item(name, index, item))
    return items


def _defaulted_item(name: str, index: int, item: Mapping[str, Any]) -> LimitRangeItem:
    kind = str(item.get("type") or "")
    minimum = parse_resources(item.get("min"))
    maximum = parse_resources(item.get("max"))
    default = parse_resources(item.get("default"))
    default_request = parse_resources(item.get("defaultRequest"))
    if kind == "Container":  # SetDefaults_LimitRangeItem: stored objects already carry these
        for resource, value in maximum.items():
            default.setdefault(resource, value)
        for resource, value in default.items():
            default_request.setdefault(resource, value)
        for resource, value in minimum.items():
            default_request.setdefault(resource, value)
    return LimitRangeItem(name, index, kind, minimum, maximum, default, default_request,
                          parse_resources(item.get("maxLimitRequestRatio")))


@dataclass(frozen=True)
class ContainerDefaults:
    limits: Mapping[str, tuple[Decimal, str]] = field(default_factory=dict)  # resource → (value, LimitRange)
    requests: Mapping[str, tuple[Decimal, str]] = field(default_factory=dict)


def container_defaults(items: Sequence[LimitRangeItem]) -> ContainerDefaults:
    limits: dict[str, tuple[Decimal, str]] = {}
    requests: dict[str, tuple[Decimal, str]] = {}
    for item in items:
        if item.type != "Container":
            continue
        for resource, value in item.default.items():
            limits.setdefault(resource, (value, item.limit_range))
        for resource, value in item.default_request.items():
            requests.setdefault(resource, (value, item.limit_range))
    return ContainerDefaults(limits, requests)


def gpu_bound(items: Sequence[LimitRangeItem], resource: str) -> tuple[Decimal, str] | None:
    """The tightest ``max`` a Pod or Container item sets for ``resource``, with its LimitRange's
    name: the most one worker may use (an MPI worker runs its GPUs in one container)."""
    bounds = [(item.max[resource], item.limit_range) for item in items
              if item.type in ("Pod", "Container") and resource in item.max]
    return min(bounds, key=lambda bound: bound[0]) if bounds else None


# --- containers and pods ------------------------------------------------------------------

@dataclass(frozen=True)
class ContainerResources:
    path: str  # spec.mpiReplicaSpecs[Worker].template.spec.containers[0]
    name: str
    requests: Mapping[str, Decimal]
    limits: Mapping[str, Decimal]
    # resource → LimitRange name, for values the LimitRange filled in
    defaulted_requests: Mapping[str, str] = field(default_factory=dict)
    defaulted_limits: Mapping[str, str] = field(default_factory=dict)
    init: bool = False
    sidecar: bool = False  # an init container with restartPolicy Always: runs beside the others


@dataclass(frozen=True)
class ResourceProblem:
    """Something the API server will refuse the pod for, once defaults are applied."""

    container: ContainerResources
    resource: str
    field: str  # requests | limits: which one the user should set
    message: str
    defaulted_by: str = ""  # the LimitRange whose default caused it, "" when the spec alone does


@dataclass(frozen=True)
class PodResources:
    replica_type: str
    containers: tuple[ContainerResources, ...]
    requests: Mapping[str, Decimal]
    limits: Mapping[str, Decimal]
    problems: tuple[ResourceProblem, ...] = ()

    @property
    def path(self) -> str:
        return replica_path(self.replica_type)

    def defaulted_by(self, resource: str) -> tuple[str, ...]:
        """LimitRanges that set a request of ``resource`` on some container of this pod."""
        names = {c.defaulted_requests[resource] for c in self.containers if resource in c.defaulted_requests}
        return tuple(sorted(names))


def effective_container(path: str, container: Mapping[str, Any], defaults: ContainerDefaults,
                        *, init: bool = False) -> ContainerResources:
    resources = container.get("resources") if isinstance(container.get("resources"), Mapping) else {}
    limits = parse_resources(resources.get("limits"))
    requests = parse_resources(resources.get("requests"))
    for resource, value in limits.items():  # SetDefaults_Pod: a limit alone is also the request
        requests.setdefault(resource, value)
    defaulted_limits: dict[str, str] = {}
    defaulted_requests: dict[str, str] = {}
    for resource, (value, source) in defaults.limits.items():
        if resource not in limits:
            limits[resource] = value
            defaulted_limits[resource] = source
    for resource, (value, source) in defaults.requests.items():
        if resource not in requests:
            requests[resource] = value
            defaulted_requests[resource] = source
    return ContainerResources(
        path=path, name=str(container.get("name") or ""), requests=requests, limits=limits,
        defaulted_requests=defaulted_requests, defaulted_limits=defaulted_limits, init=init,
        sidecar=init and container.get("restartPolicy") == "Always",
    )


def container_problems(container: ContainerResources) -> Iterator[ResourceProblem]:
    """The API server's resource validation of one (defaulted) container."""
    for resource, request in container.requests.items():
        limit = container.limits.get(resource)
        source = container.defaulted_limits.get(resource) or container.defaulted_requests.get(resource, "")
        if is_non_overcommittable(resource):
            if limit is None:
                yield ResourceProblem(
                    container, resource, "limits",
                    f"{resource} is requested without a limit, and the API server refuses that for "
                    f"{_kind(resource)}: set resources.limits.{resource} to "
                    f"{format_quantity(request, resource)} (a limit alone is enough)", source)
            elif limit != request:
                yield ResourceProblem(
                    container, resource, "limits",
                    f"{resource} request {format_quantity(request, resource)} differs from its limit "
                    f"{format_quantity(limit, resource)}{_origin(container, resource)}, and {_kind(resource)} "
                    f"need requests equal to limits: set only resources.limits.{resource}", source)
        elif resource in OVERCOMMITTABLE and limit is not None and request > limit:
            yield ResourceProblem(
                container, resource, "limits",
                f"{resource} request {format_quantity(request, resource)} is above its limit "
                f"{format_quantity(limit, resource)}{_origin(container, resource)}, which the API server "
                f"refuses: set resources.limits.{resource} to at least {format_quantity(request, resource)}",
                source)


def _kind(resource: str) -> str:
    return "hugepages" if resource.startswith(HUGEPAGES_PREFIX) else "extended resources such as GPUs"


def _origin(container: ContainerResources, resource: str) -> str:
    parts = []
    if resource in container.defaulted_limits:
        parts.append(f"limit set by LimitRange {container.defaulted_limits[resource]}")
    if resource in container.defaulted_requests:
        parts.append(f"request set by LimitRange {container.defaulted_requests[resource]}")
    return f" ({'; '.join(parts)})" if parts else ""


def pod_totals(pod_containers: Sequence[ContainerResources], attribute: str) -> Resources:
    """Pod-level requests or limits: ``resourcehelper.PodRequests`` / ``PodLimits``.

    The sum of regular containers and sidecars, or the peak while init containers run (each
    init container plus the sidecars started before it), whichever is larger per resource.
    """
    total: Resources = {}
    sidecars: Resources = {}
    init_peak: Resources = {}
    for container in pod_containers:
        values = getattr(container, attribute)
        if not container.init:
            _add(total, values)
            continue
        if container.sidecar:
            _add(total, values)
            _add(sidecars, values)
            running = dict(sidecars)
        else:
            running = dict(sidecars)
            _add(running, values)
        for resource, value in running.items():
            if value > init_peak.get(resource, Decimal(0)):
                init_peak[resource] = value
    for resource, value in init_peak.items():
        if value > total.get(resource, Decimal(0)):
            total[resource] = value
    return total


def _add(into: Resources, values: Mapping[str, Decimal]) -> None:
    for resource, value in values.items():
        into[resource] = into.get(resource, Decimal(0)) + value


def pod_resources(replica_type: str, replica: Mapping[str, Any] | None,
                  items: Sequence[LimitRangeItem]) -> PodResources:
    defaults = container_defaults(items)
    base = replica_path(replica_type)
    # The API server (LimitRanger and validation) walks init containers after containers; the
    # pod totals depend only on the relative order of init containers.
    regular = [effective_container(p, c, defaults) for p, c in containers(replica, base)
               if isinstance(c, Mapping)]
    init = [effective_container(p, c, defaults, init=True)
            for p, c in _init_containers(replica, base) if isinstance(c, Mapping)]
    all_containers = tuple(regular + init)
    problems = tuple(p for c in all_containers for p in container_problems(c))
    return PodResources(replica_type, all_containers, pod_totals(all_containers, "requests"),
                        pod_totals(all_containers, "limits"), problems)


def _init_containers(replica: Mapping[str, Any] | None, base: str) -> Iterator[tuple[str, Any]]:
    for index, container in enumerate(pod_spec(replica).get("initContainers") or ()):
        yield f"{base}.template.spec.initContainers[{index}]", container


# --- the whole job ------------------------------------------------------------------------

@dataclass(frozen=True)
class JobPods:
    """Each pod shape of the job and how many pods of it the operator creates."""

    pods: Mapping[str, PodResources]  # replica type → pod
    counts: Mapping[str, int]  # replica type → number of pods

    @property
    def workers(self) -> int:
        return self.counts.get(WORKER, 0)

    def __iter__(self) -> Iterator[PodResources]:
        return iter(self.pods.values())

    def defaulted_by(self, resource: str) -> tuple[str, ...]:
        """LimitRanges that set a request of ``resource`` on some container of the job."""
        return tuple(sorted({name for pod in self for name in pod.defaulted_by(resource)}))


def job_pods(job: Mapping[str, Any], limit_ranges: Iterable[Mapping[str, Any]]) -> JobPods:
    return _job_pods(job, limit_range_items(limit_ranges))


def _job_pods(job: Mapping[str, Any], items: Sequence[LimitRangeItem]) -> JobPods:
    pods: dict[str, PodResources] = {}
    counts: dict[str, int] = {}
    for replica_type in REPLICA_TYPES:
        replica = replica_spec(job, replica_type)
        if not isinstance(replica, Mapping):
            continue
        pods[replica_type] = pod_resources(replica_type, replica, items)
        # The operator always runs exactly one launcher; the worker count may be anything.
        counts[replica_type] = max(worker_replicas(job), 0) if replica_type == WORKER else 1
    return JobPods(pods, counts)


# --- shared by the rules of one request ---------------------------------------------------

def request_limit_range_items(ctx: RuleContext) -> list[LimitRangeItem]:
    """The items of the request namespace's LimitRanges, parsed once per request."""
    return ctx.derived("limit-range-items", lambda: limit_range_items(ctx.cluster.limit_ranges(ctx.namespace)))


def request_pods(ctx: RuleContext, *, limit_ranges: bool = True) -> JobPods:
    """``job_pods`` of the request's job with its namespace's LimitRanges applied (or, with
    ``limit_ranges=False``, as written), computed once per request: several rules read them."""
    if not limit_ranges:
        return ctx.derived("pods-as-written", lambda: _job_pods(ctx.job, ()))
    return ctx.derived("pods", lambda: _job_pods(ctx.job, request_limit_range_items(ctx)))
