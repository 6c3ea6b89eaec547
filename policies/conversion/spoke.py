"""What every older MPIJob version module provides, and the pieces they share.

A version module derives its form from the hub (``down``) and the hub form from its own
(``up``); both lossy, both pure and cheap. ``Spoke`` wraps the pair into the lossless
``to_hub`` / ``from_hub`` the API server needs (see ``policies.conversion.stash``).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Any, Protocol

from policies.conversion import stash
from policies.conversion.notes import PROBLEMS_ANNOTATION, Note, record
from policies.conversion.tree import Path, mapping
from policies.mpijob.reading import HUB_API_VERSION

DEFAULT_GPUS_PER_NODE = 8


@dataclass(frozen=True)
class ConversionOptions:
    # Per-node capacity for v1alpha1 jobs sized by ``gpus`` / ``processingUnits`` that do not say
    # it themselves. The v1alpha1 operator took it from a flag: 1 in the binary, 8 in the shipped
    # manifest (the one people ran), hence 8.
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE

    def __post_init__(self) -> None:
        if not isinstance(self.gpus_per_node, int) or self.gpus_per_node < 1:
            raise ValueError(f"gpus per node must be a positive integer, got {self.gpus_per_node!r}")


DEFAULT_OPTIONS = ConversionOptions()


def ssh_advisory(api_version: str) -> str:
    """What no conversion can fix: every operator before v2beta1 reached the workers with
    ``kubectl exec`` (workers ran ``sleep``); a v2beta1 launcher uses SSH."""
    return (f"{api_version} workers ran `sleep` and the launcher reached them with `kubectl exec`; v2beta1 "
            "launchers use SSH: the worker image must run sshd (e.g. command /usr/sbin/sshd -De) with the SSH "
            "and MPI set-up of the mpi-operator v2 images")

class Derive(Protocol):
    """``up`` or ``down`` of a version module: the other form of ``obj``."""

    def __call__(self, obj: Mapping[str, Any], options: ConversionOptions) -> stash.Derived: ...


@dataclass(frozen=True)
class Spoke:
    """One older apiVersion: its two derivations, its coupled field groups and what its users
    must know when moving to v2beta1."""

    api_version: str
    up: Derive
    down: Derive
    coupled: tuple[tuple[Path, ...], ...] = ()  # paths in this version's form
    advisory: str = ""  # shown when a job of this version is checked or converted to v2beta1

    def to_hub(self, obj: Mapping[str, Any], options: ConversionOptions = DEFAULT_OPTIONS) -> dict[str, Any]:
        return self.converted_to_hub(obj, options).obj

    def from_hub(self, obj: Mapping[str, Any], options: ConversionOptions = DEFAULT_OPTIONS) -> dict[str, Any]:
        return self.converted_from_hub(obj, options).obj

    def converted_to_hub(self, obj: Mapping[str, Any], options: ConversionOptions = DEFAULT_OPTIONS) -> stash.Converted:
        return stash.convert(obj, source=self.api_version, target=HUB_API_VERSION,
                             forward=partial(self.up, options=options),
                             backward=partial(self.down, options=options), coupled=self._coupled)

    def converted_from_hub(self, obj: Mapping[str, Any], options: ConversionOptions = DEFAULT_OPTIONS) -> stash.Converted:
        return stash.convert(obj, source=HUB_API_VERSION, target=self.api_version,
                             forward=partial(self.down, options=options),
                             backward=partial(self.up, options=options), coupled=self._coupled)

    @cached_property
    def _coupled(self) -> Mapping[str, tuple[tuple[Path, ...], ...]]:
        return {self.api_version: self.coupled}


def rebuilt(
    obj: Mapping[str, Any],
    api_version: str,
    spec: dict[str, Any],
    status: dict[str, Any] | None,
    annotations: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``obj`` as ``api_version`` with a new spec and status. Metadata is shared with ``obj``
    (only its annotations may be replaced): the API server forbids changing anything else."""
    out = {**obj, "apiVersion": api_version, "spec": spec}
    if status is None:
        out.pop("status", None)
    else:
        out["status"] = status
    if annotations is not None:
        metadata = {k: v for k, v in obj["metadata"].items() if k != "annotations"}
        if annotations:
            metadata["annotations"] = dict(annotations)
        out["metadata"] = metadata
    return out


def hub_annotations(obj: Mapping[str, Any], source: str, notes: tuple[Note, ...], hub: Mapping[str, Any]) -> dict[str, Any] | None:
    """The hub object's annotations: the spoke's, with the problem record replaced by a fresh
    one (or removed when the job has no problem). None when nothing changes."""
    annotations = mapping(obj["metadata"].get("annotations"))
    value = record(source, notes, hub)
    if value is None and PROBLEMS_ANNOTATION not in annotations:
        return None
    fresh = {k: v for k, v in annotations.items() if k != PROBLEMS_ANNOTATION}
    if value is not None:
        fresh[PROBLEMS_ANNOTATION] = value
    return fresh
