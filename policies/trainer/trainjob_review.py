"""What a request about a TrainJob carries beside the object: its runtime, the API shape and
the effective job, worked out once by the admission side (which reads the runtime from the
cluster view) and handed to rules and mutations through the rule context
(``RuleContext.trainjob``), for the object and, on UPDATE, the stored one it replaces."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from policies.cluster_view import SnapshotMemo
from policies.trainer.api import (
    AUTO,
    ApiShape,
    Obj,
    RuntimeRef,
    detect_shape,
    is_multikueue,
    mpi_policy,
    runtime_ref,
)
from policies.trainer.effective_job import EffectiveJob
from policies.trainer.effective_job_memo import memoised_effective_job

if TYPE_CHECKING:
    from policies.interface import RuleContext
    from policies.cluster_view import ClusterView
    from policies.config.rule_settings import Settings
    from policies.workload import Workload

TRAINING_RUNTIME_RULE = "training-runtime"  # whose apiShape parameter pins the API shape


@dataclass(slots=True)
class TrainJobReview:
    trainjob: Obj
    runtime_ref: RuntimeRef
    runtime: Obj | None  # None: not in the cluster view (not created, or not cached yet)
    shape: ApiShape
    effective: EffectiveJob | None  # None unless the runtime was found and is an MPI runtime
    multikueue: bool = False  # spec.managedBy MultiKueue: no pods in this cluster
    namespace: str = ""  # the request's
    _workload: Workload | None = field(default=None, repr=False)

    @property
    def runtime_label(self) -> str:
        """``ClusterTrainingRuntime mpi-cuda``: how messages name the runtime."""
        return self.runtime_ref.describe()

    @property
    def is_mpi(self) -> bool:
        return self.effective is not None

    def workload(self) -> Workload:
        if self._workload is None:
            from policies.trainer.trainjob_workload import trainjob_workload  # reads policies.workload

            if self.effective is None:
                raise ValueError(f"{self.runtime_label} is not a known MPI runtime: no workload view")
            self._workload = trainjob_workload(self.trainjob, self.effective, self.namespace)
        return self._workload


@dataclass(slots=True)
class TrainJobReviews:
    """The review of the request's TrainJob and, on UPDATE, of the stored one."""

    current: TrainJobReview
    old: TrainJobReview | None = None

    def of(self, obj: object) -> TrainJobReview | None:
        if obj is self.current.trainjob:
            return self.current
        if self.old is not None and obj is self.old.trainjob:
            return self.old
        return None

    def workload(self, obj: Obj) -> Workload:
        review = self.of(obj)
        if review is None:
            raise ValueError("no review of this TrainJob was attached to the context")
        return review.workload()


def review_trainjob(trainjob: Obj, namespace: str, cluster: ClusterView, *, pinned_shape: str = AUTO,
                    old_trainjob: Obj | None = None, inputs_key: bytes | str | None = None) -> TrainJobReview:
    """The runtime ``trainjob`` names, looked up in ``cluster`` (a TrainingRuntime in
    ``namespace``), the API shape, and the effective job when the runtime is an MPI runtime.
    ``inputs_key``: ``effective_job_memo.inputs_key(trainjob)``, when the caller has it already."""
    ref = runtime_ref(trainjob)
    runtime = cluster.training_runtime(ref.kind, namespace, ref.name) if ref.supported and ref.name else None
    shape = detect_shape(trainjob, pinned_shape, old_trainjob)
    effective = memoised_effective_job(trainjob, runtime, shape, inputs_key) \
        if runtime is not None and mpi_policy(runtime) is not None else None
    return TrainJobReview(trainjob, ref, runtime, shape, effective, is_multikueue(trainjob), namespace)


def attach(ctx: RuleContext, review: TrainJobReview, old: TrainJobReview | None = None) -> None:
    """Hand ``review`` (and the stored object's, on UPDATE) to the rules and mutations of ``ctx``."""
    ctx.trainjob = TrainJobReviews(review, old)


def review_of(ctx: RuleContext) -> TrainJobReview | None:
    """The review of the context's TrainJob; None for an MPIJob."""
    reviews = ctx.trainjob
    return reviews.of(ctx.job) if isinstance(reviews, TrainJobReviews) else None


def trainjob_workloads(trainjobs: Sequence[Obj], cluster: ClusterView, settings: Settings) -> tuple[Workload, ...]:
    """The views of a namespace's TrainJobs on MPI runtimes (those on other runtimes, or on a
    runtime not cached, are not counted), for quota accounting of what is in flight."""
    pinned = settings.params(TRAINING_RUNTIME_RULE).api_shape
    views = []
    for trainjob in trainjobs:
        namespace = str((trainjob.get("metadata") or {}).get("namespace") or "")
        review = review_trainjob(trainjob, namespace, cluster, pinned_shape=pinned)
        if review.effective is not None:
            views.append(review.workload())
    return tuple(views)


# Per snapshot of a namespace's TrainJobs (and the view and settings): built again when a
# TrainJob of the namespace changes. A runtime edited since is read at the next change.
_in_flight: SnapshotMemo[tuple[Workload, ...]] = SnapshotMemo(trainjob_workloads, size=2048)
_NONE: tuple[Workload, ...] = ()


def in_flight_trainjobs(trainjobs: Sequence[Obj], ctx: RuleContext) -> tuple[Workload, ...]:
    """``trainjob_workloads`` of the cluster view's snapshot ``trainjobs``, once per snapshot."""
    if not trainjobs:
        return _NONE
    return _in_flight(trainjobs, ctx.cluster, ctx.settings)
