"""``kubeflow.org/v1alpha2`` (mpi-operator 0.2) ↔ v2beta1; see ``replicated`` for the mapping."""
from __future__ import annotations

from policies.conversion.replicated import Dialect, spoke

API_VERSION = "kubeflow.org/v1alpha2"

SPOKE = spoke(Dialect(API_VERSION, has_distribution=True))
to_hub = SPOKE.to_hub
from_hub = SPOKE.from_hub
