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

Nothing here reads the cluster: callers pass the namespace's LimitRanges, which are parsed once
per change of them (``namespace_limits``), not once per request.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from policies.interface import RuleContext
from policies.cluster_view import SnapshotMemo
from policies.mpijob.reading import LAUNCHER, WORKER, pod_spec, replica_path
from policies.kube.quantities import format_quantity, is_extended, quantity_or_none
from policies.workload import ContainerRef, PodGroup, Role, Source, Workload, request_workload, workload_of

Resources = dict[str, Decimal]
# Where a value came from: "" for the container spec, else the LimitRange that defaulted it.
SPEC = ""
ZERO = Decimal(0)

# Read once: a member read off an Enum class is a Python call on 3.11 (docs/performance.md, "Fast
# paths kept and removed"), and these are read for every pod of every request.
_WORKER = Role.WORKER

# Resources whose request may never differ from the limit (apimachinery: "non-overcommitable").
HUGEPAGES_PREFIX = "hugepages-"
# Resources a request above the limit is refused for (the rest must be equal anyway).
OVERCOMMITTABLE = ("cpu", "memory", "ephemeral-storage")


def parse_resources(values: Any) -> Resources:
    """A container's ``requests`` or ``limits`` map; unparsable entries are left out (the API
    server refuses them with its own message, and a quota cannot count what does not parse)."""
    parsed: Resources = {}
    if not _is_mapping(values):
        return parsed
    for name, value in values.items():
        amount = quantity_or_none(value)
        if amount is not None:
            parsed[str(name)] = amount
    return parsed


def _is_mapping(value: Any) -> bool:
    """``isinstance(value, Mapping)``, without the ABC machinery for the dicts JSON gives and
    the read-only copies of them (dict subclasses) the effective-job memo hands out."""
    return isinstance(value, dict) or isinstance(value, Mapping)


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
    # The bounds sorted by resource, as the limit-range rule reports them: sorted once per
    # LimitRange, not once per container of every request.
    sorted_min: tuple[tuple[str, Decimal], ...] = field(init=False, repr=False, compare=False)
    sorted_max: tuple[tuple[str, Decimal], ...] = field(init=False, repr=False, compare=False)
    sorted_ratio: tuple[tuple[str, Decimal], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sorted_min", tuple(sorted(self.min.items())))
        object.__setattr__(self, "sorted_max", tuple(sorted(self.max.items())))
        object.__setattr__(self, "sorted_ratio", tuple(sorted(self.max_limit_request_ratio.items())))


def limit_range_items(limit_ranges: Iterable[Mapping[str, Any]]) -> list[LimitRangeItem]:
    """Items of the namespace's LimitRanges in a stable order (by name: the API server gives no
    order, and with two LimitRanges defaulting the same resource the first one applied wins)."""
    items: list[LimitRangeItem] = []
    for limit_range in sorted(limit_ranges, key=lambda lr: (lr.get("metadata") or {}).get("name") or ""):
        name = (limit_range.get("metadata") or {}).get("name") or ""
        for index, item in enumerate((limit_range.get("spec") or {}).get("limits") or ()):
            if _is_mapping(item):
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
    # The same as (resource, value, LimitRange) triples: what every container of every request
    # is defaulted from, flattened once per change of the LimitRanges
    limit_items: tuple[tuple[str, Decimal, str], ...] = field(init=False, repr=False, compare=False)
    request_items: tuple[tuple[str, Decimal, str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "limit_items", tuple((r, v, source) for r, (v, source) in self.limits.items()))
        object.__setattr__(self, "request_items", tuple((r, v, source) for r, (v, source) in self.requests.items()))


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


NO_DEFAULTS = ContainerDefaults()


def _tightest_maxima(items: Sequence[LimitRangeItem]) -> dict[str, tuple[Decimal, str]]:
    """Per resource, the smallest ``max`` of the Pod and Container items (the first on a tie)."""
    tightest: dict[str, tuple[Decimal, str]] = {}
    for item in items:
        if item.type in ("Pod", "Container"):
            for resource, maximum in item.max.items():
                if resource not in tightest or maximum < tightest[resource][0]:
                    tightest[resource] = (maximum, item.limit_range)
    return tightest


@dataclass(frozen=True)
class NamespaceLimits:
    """A namespace's LimitRanges as the rules read them: parsed, defaulted and sorted once."""

    items: tuple[LimitRangeItem, ...]
    defaults: ContainerDefaults
    container_items: tuple[LimitRangeItem, ...]  # type Container
    pod_items: tuple[LimitRangeItem, ...]  # type Pod
    # resource → the tightest ``max`` a Pod or Container item sets for it, with its LimitRange's
    # name: for a GPU, the most one worker may use (an MPI worker runs its GPUs in one container)
    gpu_bounds: Mapping[str, tuple[Decimal, str]]


def _namespace_limits(limit_ranges: Iterable[Mapping[str, Any]]) -> NamespaceLimits:
    items = tuple(limit_range_items(limit_ranges))
    return NamespaceLimits(items, container_defaults(items), tuple(i for i in items if i.type == "Container"),
                           tuple(i for i in items if i.type == "Pod"), _tightest_maxima(items))


# Keyed on the ClusterView's snapshot of a namespace's LimitRanges: derived again only when one
# of them changed. Sized for the namespaces that submit jobs at one time.
namespace_limits: SnapshotMemo[NamespaceLimits] = SnapshotMemo(_namespace_limits, size=2048)


# --- containers and pods ------------------------------------------------------------------

# Built for every request, then read by several rules: slotted dataclasses, not frozen ones,
# which cost four times as much to build. Read only: never change one.
@dataclass(slots=True)
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
    # Where its resources were written, when not in the container itself (``path``.resources):
    # a TrainJob's ``spec.trainer.resourcesPerNode``
    resources_at: Source | None = None

    def resources_source(self) -> Source:
        """Where the user writes this container's ``resources``."""
        return Source(f"{self.path}.resources") if self.resources_at is None else self.resources_at

    def resource_source(self, side: str, resource: str) -> Source:
        """Where the user writes ``side`` (requests | limits) of ``resource`` for this container."""
        if self.resources_at is None:
            return Source(f"{self.path}.resources.{side}[{resource}]")
        return self.resources_at.child(f"{side}[{resource}]")


@dataclass(frozen=True)
class ResourceProblem:
    """Something the API server will refuse the pod for, once defaults are applied."""

    container: ContainerResources
    resource: str
    field: str  # requests | limits: which one the user should set
    message: str
    defaulted_by: str = ""  # the LimitRange whose default caused it, "" when the spec alone does


@dataclass(slots=True)
class PodResources:
    replica_type: str
    containers: tuple[ContainerResources, ...]
    requests: Mapping[str, Decimal]
    limits: Mapping[str, Decimal]
    problems: tuple[ResourceProblem, ...] = ()
    # The pod template's spec (``template.spec``) it was derived from: what else rules read of
    # the pod (placement, quota scopes) without walking the job again.
    template: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    role: Role = Role.WORKER
    # Where the pod template was written (``spec.mpiReplicaSpecs[Worker].template.spec``); None
    # for a pod made from a bare replica spec (``pod_resources``), which is an MPIJob's
    template_source: Source | None = field(default=None, repr=False, compare=False)

    @property
    def path(self) -> str:
        return replica_path(self.replica_type)

    @property
    def template_at(self) -> Source:
        """``template_source``, for any pod."""
        if self.template_source is None:
            return Source(f"{self.path}.template.spec")
        return self.template_source

    def defaulted_by(self, resource: str) -> tuple[str, ...]:
        """LimitRanges that set a request of ``resource`` on some container of this pod."""
        names = {c.defaulted_requests[resource] for c in self.containers if resource in c.defaulted_requests}
        return tuple(sorted(names))


def effective_container(path: str, container: Mapping[str, Any], defaults: ContainerDefaults,
                        *, init: bool = False, resources_at: Source | None = None) -> ContainerResources:
    limits: Resources = {}
    requests: Resources = {}
    resources = container.get("resources")
    if resources and _is_mapping(resources):
        written = resources.get("limits")
        if written:
            limits = parse_resources(written)
        written = resources.get("requests")
        if written:
            requests = parse_resources(written)
        if not requests:  # SetDefaults_Pod: a limit alone is also the request
            requests = dict(limits)
        elif limits:
            for resource, value in limits.items():
                requests.setdefault(resource, value)
    defaulted_limits: dict[str, str] = {}
    defaulted_requests: dict[str, str] = {}
    for resource, value, source in defaults.limit_items:
        if resource not in limits:
            limits[resource] = value
            defaulted_limits[resource] = source
    for resource, value, source in defaults.request_items:
        if resource not in requests:
            requests[resource] = value
            defaulted_requests[resource] = source
    return ContainerResources(path, str(container.get("name") or ""), requests, limits, defaulted_requests,
                              defaulted_limits, init, init and container.get("restartPolicy") == "Always",
                              resources_at)


def container_problems(container: ContainerResources) -> list[ResourceProblem]:
    """The API server's resource validation of one (defaulted) container."""
    problems: list[ResourceProblem] = []
    limits = container.limits
    if container.requests == limits:  # the usual container (or none stated): every request is its limit
        return problems
    for resource, request in container.requests.items():
        limit = limits.get(resource)
        if resource in OVERCOMMITTABLE:  # none of them is non-overcommittable
            if limit is not None and request > limit:
                problems.append(ResourceProblem(
                    container, resource, "limits",
                    f"{resource} request {format_quantity(request, resource)} is above its limit "
                    f"{format_quantity(limit, resource)}{_origin(container, resource)}, which the API server "
                    f"refuses: set resources.limits.{resource} to at least {format_quantity(request, resource)}",
                    _source(container, resource)))
        elif limit != request and is_non_overcommittable(resource):
            if limit is None:
                message = (f"{resource} is requested without a limit, and the API server refuses that for "
                           f"{_kind(resource)}: set resources.limits.{resource} to "
                           f"{format_quantity(request, resource)} (a limit alone is enough)")
            else:
                message = (f"{resource} request {format_quantity(request, resource)} differs from its limit "
                           f"{format_quantity(limit, resource)}{_origin(container, resource)}, and "
                           f"{_kind(resource)} need requests equal to limits: set only resources.limits.{resource}")
            problems.append(ResourceProblem(container, resource, "limits", message, _source(container, resource)))
    return problems


def _source(container: ContainerResources, resource: str) -> str:
    return container.defaulted_limits.get(resource) or container.defaulted_requests.get(resource, SPEC)


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
            if total:
                _add(total, values)
            else:  # the first app container: most pods have only one
                total.update(values)
            continue
        if container.sidecar:
            _add(total, values)
            _add(sidecars, values)
            running = sidecars
        elif sidecars:
            running = dict(sidecars)
            _add(running, values)
        else:  # no sidecar started before it: the init container runs alone
            running = values
        for resource, value in running.items():
            if value > init_peak.get(resource, ZERO):
                init_peak[resource] = value
    for resource, value in init_peak.items():
        if value > total.get(resource, ZERO):
            total[resource] = value
    return total


def _add(into: Resources, values: Mapping[str, Decimal]) -> None:
    for resource, value in values.items():
        into[resource] = into.get(resource, ZERO) + value


def pod_resources(replica_type: str, replica: Mapping[str, Any] | None,
                  items: Sequence[LimitRangeItem]) -> PodResources:
    """The pod of one MPIJob replica spec (``replica_type``: Launcher | Worker)."""
    template = pod_spec(replica)
    base = f"{replica_path(replica_type)}.template.spec"
    refs = [ContainerRef(c, f"{base}.{key}[{index}]", key == "initContainers")
            for key in ("initContainers", "containers") for index, c in enumerate(template.get(key) or ())
            if _is_mapping(c)]
    role = Role.LAUNCHER if replica_type == LAUNCHER else Role.WORKER
    return _pod_resources(replica_type, role, template, tuple(refs), Source(base), container_defaults(items))


def group_resources(group: PodGroup, defaults: ContainerDefaults) -> PodResources:
    """The pod of one pod group of a workload, with ``defaults`` (a LimitRange's) applied."""
    return _pod_resources(group.name, group.role, group.template, group.containers, group.template_source, defaults)


def _pod_resources(name: str, role: Role, template: Mapping[str, Any], refs: Sequence[ContainerRef],
                   template_source: Source, defaults: ContainerDefaults) -> PodResources:
    # The API server (LimitRanger and validation) walks init containers after containers; the
    # pod totals depend only on the relative order of init containers.
    found = [effective_container(ref.path, ref.container, defaults, resources_at=ref.resources)
             for ref in refs if not ref.init]
    has_init = len(found) < len(refs)
    if has_init:
        found += [effective_container(ref.path, ref.container, defaults, init=True, resources_at=ref.resources)
                  for ref in refs if ref.init]
    problems: list[ResourceProblem] = []
    for container in found:
        problems += container_problems(container)
    pod_containers = tuple(found)
    if len(found) == 1 and not has_init:  # one app container, the usual pod: its values are the pod's
        return PodResources(name, pod_containers, found[0].requests, found[0].limits, tuple(problems),
                            template, role, template_source)
    return PodResources(name, pod_containers, pod_totals(pod_containers, "requests"),
                        pod_totals(pod_containers, "limits"), tuple(problems), template, role, template_source)


# --- the whole job ------------------------------------------------------------------------

@dataclass(slots=True)
class JobPods:
    """Each pod shape of the job and how many pods of it the controller creates."""

    pods: Mapping[str, PodResources]  # group name (an MPIJob's replica type) → pod
    counts: Mapping[str, int]  # group name → number of pods

    @property
    def workers(self) -> int:
        for name, pod in self.pods.items():
            if pod.role is _WORKER:
                return self.counts[name]
        return 0

    def __iter__(self) -> Iterator[PodResources]:
        return iter(self.pods.values())

    def defaulted_by(self, resource: str) -> tuple[str, ...]:
        """LimitRanges that set a request of ``resource`` on some container of the job."""
        return tuple(sorted({name for pod in self for name in pod.defaulted_by(resource)}))


def job_pods(job: Mapping[str, Any], limit_ranges: Iterable[Mapping[str, Any]]) -> JobPods:
    return workload_pods(workload_of(job), container_defaults(limit_range_items(limit_ranges)))


def workload_pods(workload: Workload, defaults: ContainerDefaults) -> JobPods:
    pods: dict[str, PodResources] = {}
    counts: dict[str, int] = {}
    for group in (workload.launcher, workload.workers):
        if group.present:
            pods[group.name] = group_resources(group, defaults)
            counts[group.name] = group.pods
    return JobPods(pods, counts)


# --- shared by the rules of one request ---------------------------------------------------

def request_limit_ranges(ctx: RuleContext) -> NamespaceLimits:
    """The request namespace's LimitRanges, derived once per change of them."""
    return namespace_limits(ctx.cluster.limit_ranges(ctx.namespace))


def request_pods(ctx: RuleContext, *, limit_ranges: bool = True) -> JobPods:
    """``job_pods`` of the request's workload with its namespace's LimitRanges applied (or, with
    ``limit_ranges=False``, as written), computed once per request: several rules read them.
    Without LimitRange defaults both are the same pods, derived once."""
    if limit_ranges:
        return ctx.derived("pods", lambda: _defaulted_pods(ctx))
    return ctx.derived("pods-as-written", lambda: workload_pods(request_workload(ctx), NO_DEFAULTS))


def _defaulted_pods(ctx: RuleContext) -> JobPods:
    defaults = request_limit_ranges(ctx).defaults
    if not (defaults.limits or defaults.requests):
        return request_pods(ctx, limit_ranges=False)
    return workload_pods(request_workload(ctx), defaults)


def request_pod_as_written(ctx: RuleContext, name: str) -> PodResources | None:
    """``request_pods(ctx, limit_ranges=False).pods.get(name)``. Where the pods with LimitRange
    defaults differ (and are derived anyway), only this pod is derived as written: a rule about
    GPUs need not derive a launcher without any as well."""
    if ctx.cluster.available:
        defaults = request_limit_ranges(ctx).defaults
        if not (defaults.limits or defaults.requests):
            return request_pods(ctx, limit_ranges=False).pods.get(name)
    return ctx.derived(("pod-as-written", name), lambda: _written_pod(request_workload(ctx), name))


def _written_pod(workload: Workload, name: str) -> PodResources | None:
    for group in (workload.launcher, workload.workers):
        if group.name == name and group.present:
            return group_resources(group, NO_DEFAULTS)
    return None
