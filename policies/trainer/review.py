"""What a request about a TrainJob carries beside the object: its runtime, the API shape and
the effective job, worked out once by the admission side (which reads the runtime from the
cluster view) and handed to rules and mutations through the rule context."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from policies.trainer.api import AUTO, ApiShape, Obj, RuntimeRef, detect_shape, is_multikueue, mpi_policy, runtime_ref
from policies.trainer.effective_job import EffectiveJob, effective_job

if TYPE_CHECKING:
    from policies.base import RuleContext
    from policies.cluster import ClusterView

_KEY = "trainjob-review"


@dataclass(slots=True)
class TrainJobReview:
    runtime_ref: RuntimeRef
    runtime: Obj | None  # None: not in the cluster view (not created, or not cached yet)
    shape: ApiShape
    effective: EffectiveJob | None  # None unless the runtime was found and is an MPI runtime
    multikueue: bool = False  # spec.managedBy MultiKueue: no pods in this cluster

    @property
    def runtime_label(self) -> str:
        """``ClusterTrainingRuntime mpi-cuda``: how messages name the runtime."""
        return self.runtime_ref.describe()


def review_trainjob(trainjob: Obj, namespace: str, cluster: ClusterView, *, pinned_shape: str = AUTO,
                    old_trainjob: Obj | None = None) -> TrainJobReview:
    """The runtime ``trainjob`` names, looked up in ``cluster`` (a TrainingRuntime in
    ``namespace``), the API shape, and the effective job when the runtime is an MPI runtime."""
    ref = runtime_ref(trainjob)
    runtime = cluster.training_runtime(ref.kind, namespace, ref.name) if ref.supported and ref.name else None
    shape = detect_shape(trainjob, pinned_shape, old_trainjob)
    effective = effective_job(trainjob, runtime, shape) if runtime is not None and mpi_policy(runtime) is not None \
        else None
    return TrainJobReview(ref, runtime, shape, effective, is_multikueue(trainjob))


def attach(ctx: RuleContext, review: TrainJobReview) -> None:
    """Hand ``review`` to the rules and mutations that run with ``ctx``."""
    ctx.derived(_KEY, lambda: review)


def review_of(ctx: RuleContext) -> TrainJobReview | None:
    """The TrainJob review attached to ``ctx``; None for an MPIJob."""
    review = ctx.derived(_KEY, lambda: None)
    return review if isinstance(review, TrainJobReview) else None
