"""Reading an MPIJob (v2beta1, plain dict) the way the MPI operator reads it.

Rules run only after the shape check passed, so these helpers may trust the types of the
fields the CRD schema declares; they still treat every field as optional.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LAUNCHER = "Launcher"
WORKER = "Worker"
REPLICA_TYPES = (LAUNCHER, WORKER)
GROUP = "kubeflow.org"
KIND = "MPIJob"
HUB_VERSION = "v2beta1"
HUB_API_VERSION = f"{GROUP}/{HUB_VERSION}"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # on the MPIJob's own metadata; Kueue's queue for it

Job = Mapping[str, Any]


def spec(job: Job) -> Mapping[str, Any]:
    return job.get("spec") or {}


def metadata(job: Job) -> Mapping[str, Any]:
    return job.get("metadata") or {}


def replica_specs(job: Job) -> Mapping[str, Mapping[str, Any]]:
    return spec(job).get("mpiReplicaSpecs") or {}


def replica_spec(job: Job, replica_type: str) -> Mapping[str, Any] | None:
    return replica_specs(job).get(replica_type)


def replica_path(replica_type: str) -> str:
    return f"spec.mpiReplicaSpecs[{replica_type}]"


def pod_spec(replica: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if not replica:
        return {}
    return (replica.get("template") or {}).get("spec") or {}
