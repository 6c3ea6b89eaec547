"""The MPI workload view: what the workload rules read, whatever API the job came through.

An MPI job is one launcher pod group and one worker pod group, a number of slots (ranks) per
worker, and a name the controller derives pod names from. An MPIJob (``kubeflow.org/v2beta1``)
writes all of it in one object; a Trainer ``TrainJob`` writes part of it and takes the rest from
its ``ClusterTrainingRuntime`` or ``TrainingRuntime``. A builder per API turns the object into
one ``Workload``, once per request (``request_workload``); the rules about the workload (counts,
slots, GPUs, images, LimitRanges, quota, node fit, Kueue queue, name length) read only this.

Every value carries a ``Source``: where the user wrote it (a field path of the reviewed object,
or of another object such as the runtime) and how a message tells them to change it. Rules
build their messages from it, so a finding about a TrainJob names ``spec.trainer.numNodes``
where the same finding about an MPIJob names ``spec.mpiReplicaSpecs[Worker].replicas``.

Built for every request and read by several rules: slotted dataclasses, not frozen ones (see
``policies.interface``), compared by identity. Read only: never change a view or what it holds.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

if TYPE_CHECKING:
    from policies.interface import RuleContext

DNS1035_LABEL_MAX = 63


class Source(NamedTuple):
    """Where one value of the view was written, and how to tell the user to change it.

    ``path`` is the field that holds the value, as kubectl prints it, in the object ``origin``
    names: "" for the reviewed object itself (all of an MPIJob), else ``"<Kind> <name>"`` of the
    object it comes from (``"ClusterTrainingRuntime mpi-cuda"``). A finding must carry a path of
    the reviewed object: for a value from elsewhere that is ``reported_at`` (e.g. the TrainJob's
    ``spec.runtimeRef.name``), and the message names the other object and its field (``said``).

    ``offset`` turns the view's number into the one the user writes: a TrainJob's worker pods
    are ``numNodes - 1`` with ``runLauncherAsNode``, so its worker count has offset 1.

    A tuple, immutable as a frozen dataclass is, but made for a fraction of the cost: a frozen
    dataclass sets each field through ``object.__setattr__`` (docs/performance.md, "The view and
    the quantities"). Compare Sources with Sources only (a tuple of the same values is equal).
    """

    path: str
    origin: str = ""
    reported_at: str = ""
    offset: int = 0
    # What leaving the field out means, for a value the user did not write and the controller
    # does not default usefully: "the MPI operator then starts 0 workers (…)". "" when unset is fine.
    when_unset: str = ""

    @property
    def finding_path(self) -> str:
        """The path a finding about this value carries (always one of the reviewed object)."""
        return self.reported_at if self.origin else self.path

    @property
    def field_name(self) -> str:
        """The last name of the path, as messages quote it: ``slotsPerWorker``, ``numProcPerNode``."""
        path = self.path
        bracket = path.find("[")
        if bracket < 0:  # no key or index to step over: most paths
            return path.rsplit(".", 1)[-1]
        depth, start = 0, 0
        for index, char in enumerate(path):  # the last name outside brackets (keys may hold dots)
            if char == "[":
                depth += 1
            elif char == "]":
                depth -= 1
            elif char == "." and depth == 0:
                start = index + 1
        return path[start:].split("[", 1)[0]

    def child(self, suffix: str) -> Source:
        """The source of a field inside this one: ``resources.child("limits[nvidia.com/gpu]")``."""
        return Source(f"{self.path}.{suffix}", self.origin, self.reported_at)

    def written(self, value: int) -> int:
        """The number the user writes for the view's ``value``."""
        return value + self.offset

    def said(self, message: str) -> str:
        """``message`` as a finding's message: prefixed with the other object and its field when
        the value is not written in the reviewed object."""
        return f"{self.origin}: {self.path}: {message}" if self.origin else message

    def set_to(self, text: str) -> str:
        """The fix: ``set spec.slotsPerWorker to 8`` (``… in ClusterTrainingRuntime x`` when elsewhere)."""
        where = f" in {self.origin}" if self.origin else ""
        return f"set {self.path}{where} to {text}"


class Role(StrEnum):
    """What a pod group does in the MPI job (not what the API calls it: see ``PodGroup.name``)."""

    LAUNCHER = "launcher"  # runs mpirun; with run-launcher-as-worker it runs ranks too
    WORKER = "worker"  # runs sshd and the ranks


@dataclass(slots=True, eq=False)
class ContainerRef:
    """One container of a pod group as the pods will run it, and where its fields were written.

    ``path`` is the container's own path (``spec.mpiReplicaSpecs[Worker].template.spec.containers[0]``,
    or in the runtime for a TrainJob). Its image and resources may have been written elsewhere:
    a TrainJob's ``spec.trainer.image`` and ``spec.trainer.resourcesPerNode`` replace the runtime's.
    ``image`` and ``resources`` are None when written in the container itself (all of an MPIJob):
    ``image_source`` / ``resources_source`` then derive them, only when a message needs them.
    """

    container: Mapping[str, Any]
    path: str
    init: bool = False
    origin: str = ""  # as Source.origin: where the container itself was written
    reported_at: str = ""  # as Source.reported_at
    image: Source | None = None
    resources: Source | None = None

    @property
    def name(self) -> str:
        return str(self.container.get("name") or "")

    def source(self) -> Source:
        return Source(self.path, self.origin, self.reported_at)

    def image_source(self) -> Source:
        return self.image if self.image is not None else Source(f"{self.path}.image", self.origin, self.reported_at)

    def resources_source(self) -> Source:
        """Where ``resources`` were written; ``.child("limits[cpu]")`` is one value of them."""
        if self.resources is not None:
            return self.resources
        return Source(f"{self.path}.resources", self.origin, self.reported_at)

    @property
    def resources_path(self) -> str:
        """``resources_source().path``, without building a Source for the reviewed object's own."""
        return self.resources.path if self.resources is not None else f"{self.path}.resources"


@dataclass(slots=True, eq=False)
class PodGroup:
    """The pods of one role: how many the controller creates, from which template.

    ``name`` is how the API and messages call the group (an MPIJob's replica type ``Launcher`` /
    ``Worker``; a JobSet's replicated job ``launcher`` / ``node``), ``noun`` how a message counts
    its pods (``3 workers``, ``3 nodes``). ``present`` is False when the object has no such group
    (an MPIJob without a Worker spec): ``source`` still says where to add it, and ``pods`` is 0.
    """

    role: Role
    name: str
    noun: str
    present: bool
    source: Source  # the group itself: spec.mpiReplicaSpecs[Worker]
    # Pods asked for, as the user wrote it (in pods of this group: Source.written gives the
    # user's number); None when nobody wrote one (count_source.when_unset says what that means)
    count: int | None
    count_source: Source
    pods: int  # pods the controller creates: what quota and names count
    template: Mapping[str, Any]  # the pod spec (template.spec) the pods get; {} when absent
    template_source: Source  # spec.mpiReplicaSpecs[Worker].template.spec
    containers: tuple[ContainerRef, ...] = ()  # init containers after the app containers, each in order
    # The pod template's whole ``template`` (metadata and spec), for what reads labels and annotations
    pod_template: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def app_containers(self) -> Iterator[ContainerRef]:
        return (c for c in self.containers if not c.init)


@dataclass(slots=True)
class Slots:
    """MPI ranks per worker pod (the hostfile's ``slots``). ``value`` None: not written anywhere,
    the controller's default (1) applies and there is nothing to check."""

    value: int | None
    source: Source


@dataclass(slots=True)
class Flag:
    value: bool
    source: Source


@dataclass(slots=True)
class Lifecycle:
    """Where the job is in its life, as quota accounting needs it."""

    suspended: bool  # asked to hold no pods (MPIJob runPolicy.suspend, TrainJob spec.suspend)
    active: bool  # holding, or about to hold, resources in this cluster
    pods_not_created_yet: bool  # active, but its pods are not in the quota's status.used yet


@dataclass(frozen=True, slots=True)
class WorkloadKind:
    """The API the job came through, in the words messages use for it."""

    kind: str  # MPIJob | TrainJob
    plural: str  # mpijobs | trainjobs: kubectl get <plural>
    group: str  # kubeflow.org | trainer.kubeflow.org
    controller: str  # who creates the pods: "the operator", "the Trainer controller"
    article: str = "a"  # "an MPIJob", "a TrainJob"

    @property
    def one(self) -> str:
        """The kind with its indefinite article, as a message starts a sentence about one."""
        return f"{self.article} {self.kind}"

    def job_key(self, name: str) -> str:
        """How quota accounting tells the jobs of a namespace apart. Names are unique within one
        API only: an MPIJob and a TrainJob may both be called ``train``. An MPIJob keeps its bare
        name (what messages have always listed), another API's job reads ``TrainJob train``."""
        return name if self.kind == "MPIJob" else f"{self.kind} {name}"

    # The object-count quota resource the API server charges per job: count/mpijobs.kubeflow.org.
    # Made once with the kind (one per API, at import), not on every quota check.
    count_resource: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "count_resource", f"count/{self.plural}.{self.group}")


class PodNames(Protocol):
    """The controller's pod-name arithmetic, which differs by API: the MPI operator names
    ``<name>-launcher`` and ``<name>-worker-<i>``; a JobSet names
    ``<name>-<replicatedJob>-<jobIndex>-<podIndex>-<5 random>``."""

    @property
    def counted(self) -> str:
        """The pod counts the names depend on, for a message: ``3 workers``, ``no Worker spec``."""
        ...

    def longest(self, name: str) -> str:
        """The longest object name the controller derives from the job's name ``name``."""
        ...


def jobs_in_words(keys: Sequence[str]) -> tuple[str, str]:
    """Jobs keyed by ``WorkloadKind.job_key`` as a message names them: ("MPIJobs", "a, b") when
    all are of one API, else ("jobs", "a, TrainJob b")."""
    kinds = {key.split(" ", 1)[0] if " " in key else "MPIJob" for key in keys}
    if len(kinds) == 1:
        return f"{kinds.pop()}s", ", ".join(key.rsplit(" ", 1)[-1] for key in keys)
    return "jobs", ", ".join(keys)


def max_name_length(names: PodNames) -> int:
    """The longest job name whose derived names all are DNS-1035 labels."""
    return DNS1035_LABEL_MAX - len(names.longest(""))


class Workload:
    """One MPI job as the workload rules see it. Build it with the builder of its API
    (``policies.mpijob.workload_builder.mpijob_workload``), once per request (``request_workload``).

    A slotted class with its own ``__init__`` rather than a dataclass for one reason: the
    lifecycle, which only quota accounting reads (and not on most requests), may be given as the
    function that works it out from the object, called on its first read
    (docs/performance.md, "The view and the quantities")."""

    __slots__ = ("kind", "namespace", "name", "generate_name", "launcher", "workers", "slots",
                 "launcher_runs_ranks", "pod_names", "_lifecycle", "queue", "queue_source", "object")

    kind: WorkloadKind
    namespace: str  # metadata.namespace, else the request's
    name: str  # metadata.name; "" when the API server is still to generate it
    generate_name: str  # metadata.generateName, or ""
    launcher: PodGroup
    workers: PodGroup
    slots: Slots
    # The launcher runs ranks too (MPIJob spec.runLauncherAsWorker, TrainJob runLauncherAsNode)
    launcher_runs_ranks: Flag
    pod_names: PodNames
    _lifecycle: Lifecycle | Callable[[Mapping[str, Any]], Lifecycle]
    queue: str | None  # the Kueue LocalQueue it names (metadata.labels), or None
    queue_source: Source
    object: Mapping[str, Any]  # the reviewed object, for kind-specific rules only

    def __init__(self, kind: WorkloadKind, namespace: str, name: str, generate_name: str, launcher: PodGroup,
                 workers: PodGroup, slots: Slots, launcher_runs_ranks: Flag, pod_names: PodNames,
                 lifecycle: Lifecycle | Callable[[Mapping[str, Any]], Lifecycle], queue: str | None,
                 queue_source: Source, object: Mapping[str, Any]) -> None:  # noqa: A002 - the field's name
        self.kind = kind
        self.namespace = namespace
        self.name = name
        self.generate_name = generate_name
        self.launcher = launcher
        self.workers = workers
        self.slots = slots
        self.launcher_runs_ranks = launcher_runs_ranks
        self.pod_names = pod_names
        self._lifecycle = lifecycle
        self.queue = queue
        self.queue_source = queue_source
        self.object = object

    @property
    def lifecycle(self) -> Lifecycle:
        """Where the job is in its life; worked out from ``object`` on the first read when the
        builder gave the function that does it."""
        lifecycle = self._lifecycle
        if isinstance(lifecycle, Lifecycle):
            return lifecycle
        made = self._lifecycle = lifecycle(self.object)
        return made

    def __repr__(self) -> str:
        return f"Workload({self.kind.kind} {self.namespace}/{self.display_name})"

    @property
    def display_name(self) -> str:
        return self.name or self.generate_name

    def groups(self) -> tuple[PodGroup, PodGroup]:
        """Launcher first, then workers (present or not)."""
        return self.launcher, self.workers

    def present_groups(self) -> Iterator[PodGroup]:
        return (g for g in (self.launcher, self.workers) if g.present)

    def rank_groups(self) -> tuple[PodGroup, ...]:
        """The groups whose pods run MPI ranks: the workers, and the launcher when it runs ranks too."""
        return (self.workers, self.launcher) if self.launcher_runs_ranks.value else (self.workers,)

    def containers(self) -> Iterator[tuple[PodGroup, ContainerRef]]:
        """Every container of every present group with its group, launcher first: what rules
        about containers (images, extended resources) walk."""
        for group in (self.launcher, self.workers):
            if group.present:
                for container in group.containers:
                    yield group, container


def request_workload(ctx: RuleContext) -> Workload:
    """The view of the request's object, built once per request (per context)."""
    # Every workload rule starts here: the context's memo is read directly, without a closure
    # and a call to ``ctx.derived`` for each of them (docs/performance.md, "counted").
    try:
        return ctx._derived[_WORKLOAD]  # type: ignore[no-any-return]
    except KeyError:  # the first rule of the request: built here, without a second lookup and a closure
        workload = ctx._derived[_WORKLOAD] = _workload_in(ctx, ctx.job)
        return workload


_WORKLOAD = "workload"  # the key of the request's view in RuleContext.derived


def request_old_workload(ctx: RuleContext) -> Workload | None:
    """The view of the stored object an UPDATE replaces, built once per request; None on CREATE."""
    old = ctx.old_job
    if old is None:
        return None
    return ctx.derived("old-workload", lambda: _workload_in(ctx, old))


def _workload_in(ctx: RuleContext, obj: Mapping[str, Any]) -> Workload:
    """A TrainJob's view needs its runtime, which the context carries (``ctx.trainjob``)."""
    if ctx.trainjob is not None:
        return ctx.trainjob.workload(obj)  # type: ignore[no-any-return]
    return workload_builder.mpijob_workload(obj, ctx.namespace)


def workload_of(obj: Mapping[str, Any] | Workload, namespace: str = "") -> Workload:
    """The view of ``obj``, by the builder of its API (MPIJob v2beta1 unless it says otherwise).
    ``namespace``: the request's, for an object that does not name its own (a CREATE may not).
    A view already built (a TrainJob's, which needs its runtime) is taken as it is."""
    if isinstance(obj, Workload):
        return obj
    return workload_builder.mpijob_workload(obj, namespace)


# The MPIJob builder reads this module's types, so it is imported once they are defined, and its
# function is looked up when a view is built. An import statement inside the function instead
# cost 7,800 instructions on every request (docs/performance.md, "The policy side at main").
from policies.mpijob import workload_builder  # noqa: E402
