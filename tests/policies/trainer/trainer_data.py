"""The Kubeflow Trainer objects of the test data (verbatim upstream copies), and TrainJobs."""
from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

from testing.reference_data import TRAINER, load_yaml_documents

DATA = TRAINER
RUNTIMES = DATA / "runtimes"
CRDS = DATA / "crds"


def load(path: Path) -> list[dict[str, Any]]:
    return copy.deepcopy(_parsed(path))


@cache
def _parsed(path: Path) -> list[dict[str, Any]]:
    """Each file parsed once a run: ``mpi_runtimes`` reads the CRDs among these files (megabytes)
    every time it is called."""
    return [doc for doc in load_yaml_documents(path) if isinstance(doc, dict)]


def mpi_runtimes() -> dict[str, dict[str, Any]]:
    """Every MPI runtime of the test data, by its file's path under the data folder."""
    found = {}
    for path in sorted(DATA.rglob("*.yaml")):
        for doc in load(path):
            if doc.get("kind") in ("ClusterTrainingRuntime", "TrainingRuntime") and \
                    ((doc.get("spec") or {}).get("mlPolicy") or {}).get("mpi") is not None:
                found[str(path.relative_to(DATA))] = doc
    return found


def runtime(relative: str) -> dict[str, Any]:
    return copy.deepcopy(load(DATA / relative)[0])


def trainjob(runtime_name: str = "deepspeed-distributed", *, name: str = "train", namespace: str = "team-a",
             kind: str = "ClusterTrainingRuntime", **trainer: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"runtimeRef": {"name": runtime_name, "kind": kind, "apiGroup": "trainer.kubeflow.org"}},
    }
    if trainer:
        job["spec"]["trainer"] = trainer
    return job


def trainjob_review(obj: Any, *, operation: str = "CREATE", old: Any = None, namespace: str = "team-a",
                    **options: Any) -> dict[str, Any]:
    """An AdmissionReview of a TrainJob, as the API server sends it."""
    from testing.builders import admission_review  # noqa: PLC0415 - testing.builders imports the webhook's side

    review = admission_review(obj, operation=operation, old=old, namespace=namespace, **options)
    gvk = {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": "TrainJob"}
    review["request"].update(kind=gvk, requestKind=gvk,
                             resource={"group": "trainer.kubeflow.org", "version": "v1alpha1", "resource": "trainjobs"})
    return review
