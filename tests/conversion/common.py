"""Shared by the conversion tests: the upstream fixtures per version, and how objects are compared."""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from policies.conversion import STASH_ANNOTATION
from tests.conftest import UPSTREAM, load_yaml_documents

HUB = "kubeflow.org/v2beta1"
SPOKES = ("kubeflow.org/v1alpha1", "kubeflow.org/v1alpha2", "kubeflow.org/v1")
VERSIONS = (HUB, *SPOKES)
GOLDEN = Path(__file__).resolve().parent / "golden"


def upstream_jobs(version: str) -> dict[str, dict[str, Any]]:
    """``{"v1alpha1/gpus16.yaml": job}`` for every upstream example of ``version`` (short name)."""
    folder = UPSTREAM / version.split("/")[1]
    return {f"{folder.name}/{p.name}": load_yaml_documents(p)[0] for p in sorted(folder.glob("*.yaml"))}


def older_upstream_jobs() -> dict[str, dict[str, Any]]:
    return {name: job for version in SPOKES for name, job in upstream_jobs(version).items()}


def without_stash(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` without the conversion-data annotation (and without an annotations map it emptied)."""
    out = dict(obj)
    metadata = dict(out.get("metadata") or {})
    annotations = {k: v for k, v in (metadata.get("annotations") or {}).items() if k != STASH_ANNOTATION}
    if annotations:
        metadata["annotations"] = annotations
    else:
        metadata.pop("annotations", None)
    out["metadata"] = metadata
    return out


def as_json(obj: Any) -> str:
    """For comparisons that must tell ``true`` from ``1`` and ``1.0`` from ``1``, as JSON does."""
    return json.dumps(obj, sort_keys=True)


def stash_of(obj: Mapping[str, Any]) -> str | None:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(STASH_ANNOTATION)
