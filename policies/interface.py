"""The one interface every rule and mutation implements, and the values they exchange.

Rules never choose how strictly they are enforced: the admin's action (deny / warn / audit)
is attached by the engine. A finding may only *lower* its own ceiling (a hint that can never
block, such as differing launcher and worker images).
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from policies.cluster_view import ClusterView
    from policies.mutations.edits import WorkingCopy
    from policies.config.rule_settings import Settings

_T = TypeVar("_T")


class Action(StrEnum):
    """How a finding is enforced; ordered from strictest to mildest."""

    DENY = "deny"
    WARN = "warn"
    AUDIT = "audit"

    @property
    def rank(self) -> int:
        return _ACTION_RANK[self]

    def capped_by(self, ceiling: Action) -> Action:
        """The milder of the two: a rule set to deny cannot turn an advisory finding into a denial."""
        return self if _ACTION_RANK[self] <= _ACTION_RANK[ceiling] else ceiling


_ACTION_RANK = {Action.DENY: 2, Action.WARN: 1, Action.AUDIT: 0}


class Problem(Enum):
    """The kind of problem, in the API server's own field-error vocabulary.

    ``cause`` is the ``details.causes[].reason`` the API server uses, ``label`` starts the cause
    message exactly like a native field error (``Invalid value: 9: …``). ``POLICY`` is a
    violation of cluster policy (quota, node fit) rather than of a field's value: it is answered
    with 403 Forbidden, like the API server's own quota admission.
    """

    INVALID = ("FieldValueInvalid", "Invalid value")
    REQUIRED = ("FieldValueRequired", "Required value")
    NOT_SUPPORTED = ("FieldValueNotSupported", "Unsupported value")
    FORBIDDEN = ("FieldValueForbidden", "Forbidden")
    TYPE_INVALID = ("FieldValueTypeInvalid", "Invalid value")
    POLICY = ("", "")

    def __init__(self, cause: str, label: str) -> None:
        self.cause = cause
        self.label = label


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


# The values built for every request are slotted but not frozen: a frozen dataclass sets each
# field through object.__setattr__, which costs more than the rest of building it. Nothing
# writes to them after they are made, and nothing hashes them.
@dataclass(slots=True)
class Finding:
    rule: str
    path: str  # field path as kubectl prints it: spec.mpiReplicaSpecs[Worker].replicas
    message: str  # what is wrong, what is allowed, what to do
    problem: Problem = Problem.INVALID
    value: Any = UNSET  # the offending value, shown like a native field error when set
    ceiling: Action = Action.DENY


@dataclass(slots=True)
class UserInfo:
    username: str = ""
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(slots=True)
class RuleContext:
    """Everything a rule or mutation may look at, and nothing it may change.

    ``job`` is the MPIJob as the API server sent it (v2beta1 shape, already shape-checked when
    rules run); ``name`` is the object's name, or for ``generateName`` the prefix followed by
    the five characters the API server will add (``generated_name`` tells which).
    """

    operation: str  # CREATE | UPDATE
    job: Mapping[str, Any]
    namespace: str
    name: str
    settings: Settings
    cluster: ClusterView
    old_job: Mapping[str, Any] | None = None
    generated_name: bool = False
    user: UserInfo = field(default_factory=UserInfo)
    dry_run: bool = False
    # For a Kubeflow Trainer TrainJob: its runtime and effective jobs (policies.trainer.trainjob_review
    # TrainJobReviews); None for an MPIJob. An init field, so a context copied for the stored
    # object (ratcheting) keeps it.
    trainjob: Any = None
    # Values derived from the request that several rules read (the job's effective pod
    # resources): computed by the first rule that asks, once per context. Not an init field, so
    # a context copied with another job (dataclasses.replace) starts empty. The workload view,
    # which every workload rule reads, is looked up here directly (policies.workload.request_workload).
    _derived: dict[Hashable, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def params(self, rule_id: str) -> Any:
        """The typed parameters the admin set for ``rule_id`` (or the mutation of that id)."""
        return self.settings.params(rule_id)

    def derived(self, key: Hashable, compute: Callable[[], _T]) -> _T:
        """``compute()``, once per context: rules share what they derive from the same job."""
        derived = self._derived
        if key in derived:  # asked first: about half the calls are the first for their key, and
            return derived[key]  # type: ignore[no-any-return]  # a KeyError raised costs more
        value = derived[key] = compute()
        return value


# The members a rule or mutation declares are read-only properties here, not ClassVars: a rule
# sets them as plain class attributes (``id = "worker-count"``), which satisfies a read-only
# property but not a ClassVar, and a test's rule may set them per instance.
class Rule(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def Params(self) -> type:  # noqa: N802 - a class: a frozen dataclass with defaults; the policy file fills it
        ...

    @property
    def default_action(self) -> Action: ...

    @property
    def needs_cluster(self) -> bool:  # skipped (and said so) when cluster state is unavailable
        ...

    def check(self, ctx: RuleContext) -> Iterable[Finding]: ...


@dataclass(slots=True)
class Mutated:
    """What one mutation did to the working copy. ``changed`` must be True exactly when it
    edited something: the engine trusts it instead of comparing copies, and computes a patch
    only when some mutation changed the job."""

    changed: bool = False
    warnings: tuple[str, ...] = ()  # for the user; the engine adds ``[mutation-id]``


class Mutation(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def Params(self) -> type: ...  # noqa: N802 - a class, like a rule's

    @property
    def enabled_by_default(self) -> bool: ...

    # Optional ``fields``: the paths of the map keys it reads and writes, so /mutate type-checks
    # only those (policies.mutations.mutated_fields_check); without it the whole object is checked.

    def apply(self, job: WorkingCopy, ctx: RuleContext) -> Mutated:
        """Edit ``job``, the engine's ``WorkingCopy``: it shares every subtree with the request, so
        write only into maps ``job.writable(path)`` hands out (``set_value``, ``set_default``)."""
        ...


@dataclass(frozen=True)
class NoParams:
    """For rules and mutations that have nothing to tune but their action."""
