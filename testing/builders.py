"""Builders for MPIJobs and AdmissionReviews used across the tests."""
from __future__ import annotations

import base64
import copy
import json
import uuid
from typing import Any

from policies.interface import Mutated, Mutation, RuleContext
from policies.cluster_view import NO_CLUSTER, ClusterView
from policies.mutations.edits import WorkingCopy
from policies.config.rule_settings import Settings
from policies.registry import default_settings


def mpijob(name: str = "pi", *, workers: int | None = 2, slots: int | None = 1, image: str = "mpioperator/mpi-pi:openmpi",
           worker_resources: dict | None = None, namespace: str | None = None, **spec: Any) -> dict[str, Any]:
    """A valid v2beta1 MPIJob in the shape the API server sends (defaults applied)."""
    worker: dict[str, Any] = {"template": {"spec": {"containers": [
        {"name": "mpi-worker", "image": image, "command": ["/usr/sbin/sshd"], "args": ["-De"],
         "resources": worker_resources or {"limits": {"cpu": 1, "memory": "1Gi"}}}]}}}
    if workers is not None:
        worker["replicas"] = workers
    job: dict[str, Any] = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name, **({"namespace": namespace} if namespace else {})},
        "spec": {
            "launcherCreationPolicy": "AtStartup",
            "mpiImplementation": "OpenMPI",
            "runLauncherAsWorker": False,
            "sshAuthMountPath": "/home/mpiuser/.ssh",
            "runPolicy": {"cleanPodPolicy": "Running", "suspend": False},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": {"containers": [
                    {"name": "mpi-launcher", "image": image, "command": ["mpirun"],
                     "resources": {"limits": {"cpu": 1, "memory": "1Gi"}}}]}}},
                "Worker": worker,
            },
        },
    }
    if slots is not None:
        job["spec"]["slotsPerWorker"] = slots
    job["spec"].update(spec)
    return job


def admission_review(obj: Any, *, operation: str = "CREATE", old: Any = None, namespace: str = "team-a",
                     api_version: str = "admission.k8s.io/v1", dry_run: bool = False,
                     version: str = "v2beta1", sub_resource: str | None = None,
                     username: str = "alice") -> dict[str, Any]:
    request: dict[str, Any] = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": "kubeflow.org", "version": version, "kind": "MPIJob"},
        "resource": {"group": "kubeflow.org", "version": version, "resource": "mpijobs"},
        "requestKind": {"group": "kubeflow.org", "version": version, "kind": "MPIJob"},
        "namespace": namespace,
        "operation": operation,
        "userInfo": {"username": username, "groups": ["system:authenticated"]},
        "object": copy.deepcopy(obj),
        "oldObject": copy.deepcopy(old),
        "dryRun": dry_run,
    }
    name = (obj or old or {}).get("metadata", {}).get("name") if isinstance(obj or old, dict) else None
    if name:
        request["name"] = name
    if sub_resource:
        request["subResource"] = sub_resource
    return {"apiVersion": api_version, "kind": "AdmissionReview", "request": request}


def context(job: dict[str, Any], *, settings: Settings | None = None, cluster: ClusterView = NO_CLUSTER,
            operation: str = "CREATE", old: dict[str, Any] | None = None, namespace: str = "team-a",
            name: str | None = None, generated_name: bool = False) -> RuleContext:
    return RuleContext(operation=operation, job=job, namespace=namespace,
                       name=name if name is not None else job.get("metadata", {}).get("name", ""),
                       settings=settings or default_settings(), cluster=cluster, old_job=old,
                       generated_name=generated_name)


def run_mutation(mutation: Mutation, job: dict[str, Any], **context_args: Any) -> tuple[dict[str, Any], Mutated]:
    """Apply one mutation to a working copy of ``job``, as the engine does: (edited copy, what it
    reported). The request object itself must come out untouched."""
    request = copy.deepcopy(job)
    edited = WorkingCopy(request)
    outcome = mutation.apply(edited, context(request, **context_args))
    assert request == job, f"{mutation.id} modified the request object"
    return edited, outcome


def patch_of(response: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The decoded patch, or None when the response carries none (and then no patchType either)."""
    if "patch" not in response:
        assert "patchType" not in response
        return None
    assert response["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(response["patch"], validate=True))
