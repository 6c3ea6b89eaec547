"""Reading an MPIJob (v2beta1, plain dict) the way the MPI operator reads it.

Rules run only after the shape check passed, so these helpers may trust the types of the
fields the CRD schema declares; they still treat every field as optional.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from policies.interface import RuleContext

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


def worker_replicas(job: Job) -> int:
    """Worker count as the operator sees it: an omitted ``replicas`` is 0, not 1."""
    return replica_count(replica_spec(job, WORKER))


def replica_count(replica: Mapping[str, Any] | None) -> int:
    """A replica spec's ``replicas``; 0 when omitted or not a number."""
    if not replica:
        return 0
    replicas = replica.get("replicas")
    return replicas if isinstance(replicas, int) else 0


def containers(
    replica: Mapping[str, Any] | None, base_path: str, *, init: bool = False
) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(field path, container) pairs of one replica's pod template, in order."""
    pod = pod_spec(replica)
    keys = ("initContainers", "containers") if init else ("containers",)
    for key in keys:
        for index, container in enumerate(pod.get(key) or ()):
            yield f"{base_path}.template.spec.{key}[{index}]", container


def all_containers(job: Job, *, init: bool = True) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    """(replica type, field path, container) for every container of every known replica."""
    return iter(_all_containers(job, ("initContainers", "containers") if init else ("containers",)))


def request_containers(ctx: RuleContext) -> tuple[tuple[str, str, Mapping[str, Any]], ...]:
    """``all_containers`` of the request's job, walked once per request: several rules read them."""
    return ctx.derived("containers", lambda: _all_containers(ctx.job, ("initContainers", "containers")))


def _all_containers(job: Job, keys: tuple[str, ...]) -> tuple[tuple[str, str, Mapping[str, Any]], ...]:
    specs = replica_specs(job)
    found = []
    for replica_type in REPLICA_TYPES:
        pod, base = pod_spec(specs.get(replica_type)), f"{replica_path(replica_type)}.template.spec"
        for key in keys:
            listed = pod.get(key)
            if listed:
                found += [(replica_type, f"{base}.{key}[{index}]", c) for index, c in enumerate(listed)]
    return tuple(found)


def display_name(job: Job) -> str:
    meta = metadata(job)
    return meta.get("name") or meta.get("generateName") or ""


def queue_name(job: Job) -> str | None:
    return (metadata(job).get("labels") or {}).get(QUEUE_LABEL)
