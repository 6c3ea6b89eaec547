"""``kubeflow.org/v1`` (mpi-operator 0.3, Kubeflow training-operator) ↔ v2beta1; see ``replicated``."""
from __future__ import annotations

from policies.conversion.replicated import Dialect, spoke

API_VERSION = "kubeflow.org/v1"

SPOKE = spoke(Dialect(API_VERSION, has_distribution=False))
to_hub = SPOKE.to_hub
from_hub = SPOKE.from_hub
