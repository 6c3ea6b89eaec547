"""Kubernetes objects (ResourceQuota, LimitRange, Node, Namespace, LocalQueue, MPIJob status) in
the JSON shape the API server serves them, for cluster-aware tests."""
from __future__ import annotations

from typing import Any

from testing.builders import mpijob


def resource_quota(name: str, hard: dict[str, Any], used: dict[str, Any] | None = None, *,
                   namespace: str = "team-a", scopes: list[str] | None = None,
                   selector: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"hard": {k: str(v) for k, v in hard.items()}}
    if scopes:
        spec["scopes"] = scopes
    if selector:
        spec["scopeSelector"] = {"matchExpressions": selector}
    return {
        "apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
        "status": {"hard": dict(spec["hard"]),
                   "used": {k: str((used or {}).get(k, 0)) for k in hard}},
    }


def priority_class_scope(operator: str, *values: str) -> dict[str, Any]:
    expression: dict[str, Any] = {"scopeName": "PriorityClass", "operator": operator}
    if values:
        expression["values"] = list(values)
    return expression


def limit_range(name: str, *items: dict[str, Any], namespace: str = "team-a") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": name, "namespace": namespace},
            "spec": {"limits": list(items)}}


def container_limits(**fields: dict[str, Any]) -> dict[str, Any]:
    """``container_limits(max={"nvidia.com/gpu": 4})`` → a LimitRange item of type Container."""
    return {"type": "Container", **{_camel(k): v for k, v in fields.items()}}


def pod_limits(**fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "Pod", **{_camel(k): v for k, v in fields.items()}}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def node(name: str, allocatable: dict[str, Any], *, labels: dict[str, str] | None = None,
         taints: list[dict[str, str]] | None = None, unschedulable: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "spec": spec,
            "status": {"allocatable": {k: str(v) for k, v in allocatable.items()},
                       "capacity": {k: str(v) for k, v in allocatable.items()}}}


def namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **(labels or {})}}}


def local_queue(name: str, namespace: str = "team-a", cluster_queue: str = "cluster") -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"clusterQueue": cluster_queue}}


def stored_mpijob(name: str, *, namespace: str = "team-a", conditions: list[tuple[str, str]] | None = None,
                  suspend: bool = False, **kwargs: Any) -> dict[str, Any]:
    """An MPIJob as stored, with the status the operator wrote (``conditions`` as (type, status))."""
    job = mpijob(name, namespace=namespace, **kwargs)
    job["spec"]["runPolicy"]["suspend"] = suspend
    if conditions:
        job["status"] = {"conditions": [{"type": t, "status": s, "reason": t} for t, s in conditions]}
    return job


RUNNING = [("Created", "True"), ("Running", "True")]
SUCCEEDED = [("Created", "True"), ("Running", "False"), ("Succeeded", "True")]


def gpu_job(name: str = "train", workers: int = 20, gpus: int = 2, **kwargs: Any) -> dict[str, Any]:
    """The data-model.md case: workers with ``gpus`` GPUs and 1 CPU each; launcher 1 CPU, no GPU."""
    return mpijob(name, workers=workers, worker_resources={"limits": {"nvidia.com/gpu": gpus, "cpu": 1, "memory": "4Gi"}},
                  **kwargs)
