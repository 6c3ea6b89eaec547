"""v1alpha2 and v1 ↔ v2beta1: the versions that already have ``mpiReplicaSpecs``.

What differs from v2beta1 (mpi-operator v1alpha2, Kubeflow training-operator v1):
``cleanPodPolicy`` at the top level (v2beta1 keeps it only in ``runPolicy``; when both are set
``runPolicy`` wins, as in the training-operator); ``backoffLimit`` / ``activeDeadlineSeconds``
at the top level (older spellings of the ``runPolicy`` fields, which take precedence);
v1alpha2's ``mpiDistribution`` (``IntelMPI`` is v2beta1's ``Intel``); ``mainContainer``, which
v2beta1 does not have (the old operators, like v2beta1, set MPI up in each pod template's first
container: the order is kept, and a ``mainContainer`` naming another one is pointed out).
Status has the same shape in all three and is passed through.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from policies.conversion.spoke import ConversionOptions, Spoke, hub_annotations, rebuilt, ssh_advisory
from policies.conversion.notes import Note, attention, problem
from policies.conversion.stash import Derived
from policies.conversion.tree import get, is_mapping, mapping
from policies.mpijob.reading import HUB_API_VERSION, LAUNCHER

_FIELDS = frozenset({"slotsPerWorker", "cleanPodPolicy", "backoffLimit", "activeDeadlineSeconds",
                     "mpiReplicaSpecs", "mainContainer", "runPolicy"})
_DISTRIBUTION_TO_IMPLEMENTATION = {
    "OpenMPI": "OpenMPI", "IntelMPI": "Intel", "MPICH": "MPICH",
    "open_mpi": "OpenMPI", "intel_mpi": "Intel", "mpich": "MPICH",  # the first v1alpha2 spellings
}
_IMPLEMENTATION_TO_DISTRIBUTION = {"OpenMPI": "OpenMPI", "Intel": "IntelMPI", "MPICH": "MPICH"}
_RESTART_POLICIES = ("Never", "OnFailure")
_CONTAINERS = ("template", "spec", "containers")
_FIRST_LAUNCHER_CONTAINER_NAME = ("mpiReplicaSpecs", LAUNCHER, *_CONTAINERS, 0, "name")


@dataclass(frozen=True)
class Dialect:
    api_version: str
    has_distribution: bool  # spec.mpiDistribution (v1alpha2 only)

    @cached_property
    def fields(self) -> frozenset[str]:
        return _FIELDS | {"mpiDistribution"} if self.has_distribution else _FIELDS


def up(obj: Mapping[str, Any], options: ConversionOptions, *, dialect: Dialect) -> Derived:
    spec = mapping(obj.get("spec"))
    notes: list[Note] = [attention(f"spec.{key}", f"is not a {dialect.api_version} field and has no v2beta1 "
                                                  "equivalent; it is not part of the converted job")
                         for key in spec if key not in dialect.fields]
    hub: dict[str, Any] = {}
    if "slotsPerWorker" in spec:
        hub["slotsPerWorker"] = spec["slotsPerWorker"]
    run_policy = _hub_run_policy(spec, notes)
    if run_policy is not None:
        hub["runPolicy"] = run_policy
    if dialect.has_distribution and "mpiDistribution" in spec:
        distribution = spec["mpiDistribution"]
        implementation = _DISTRIBUTION_TO_IMPLEMENTATION.get(distribution) if isinstance(distribution, str) else None
        if implementation is None:
            notes.append(problem("spec.mpiDistribution", distribution, "supported values: OpenMPI, IntelMPI, MPICH; "
                                                                       "converted without spec.mpiImplementation "
                                                                       "(OpenMPI)", ("spec", "mpiImplementation")))
        else:
            hub["mpiImplementation"] = implementation
    if "mpiReplicaSpecs" in spec:
        hub["mpiReplicaSpecs"] = spec["mpiReplicaSpecs"]
        notes.extend(_restart_policy_notes(spec["mpiReplicaSpecs"]))
        notes.extend(_main_container_notes(spec))
    status = obj["status"] if "status" in obj else None
    annotations = hub_annotations(obj, dialect.api_version, tuple(notes), {"spec": hub})
    return Derived(rebuilt(obj, HUB_API_VERSION, hub, status, annotations), tuple(notes))


def _hub_run_policy(spec: Mapping[str, Any], notes: list[Note]) -> Any:
    """runPolicy with the top-level spellings folded in; runPolicy's own values win."""
    given = spec.get("runPolicy")
    if "runPolicy" in spec and not is_mapping(given):
        return given  # not a mapping: kept as it is for the schema check to explain
    run_policy = dict(given or {})
    top, nested = spec.get("cleanPodPolicy"), run_policy.get("cleanPodPolicy")
    if top is not None and nested is None:
        run_policy["cleanPodPolicy"] = top
    elif top is not None and top != nested:
        notes.append(problem("spec.cleanPodPolicy", top, f"contradicts spec.runPolicy.cleanPodPolicy ({nested}); the "
                                                         "training operator refused such jobs. Converted with "
                                                         f"{nested}; remove spec.cleanPodPolicy",
                             ("spec", "runPolicy", "cleanPodPolicy")))
    for key in ("backoffLimit", "activeDeadlineSeconds"):
        if key in spec and key not in run_policy:
            run_policy[key] = spec[key]
    return run_policy if run_policy or "runPolicy" in spec else None


def _main_container_notes(spec: Mapping[str, Any]) -> list[Note]:
    main = spec.get("mainContainer")
    if not isinstance(main, str) or not main or main == get(spec, _FIRST_LAUNCHER_CONTAINER_NAME):
        return []
    return [attention("spec.mainContainer", f"{main!r} is not the launcher's first container; v2beta1 (like the "
                                            "operators before it) runs MPI in the first container of each pod "
                                            "template: put it first")]


def _restart_policy_notes(replica_specs: Any) -> list[Note]:
    notes = []
    for replica_type, replica in mapping(replica_specs).items():
        policy = mapping(replica).get("restartPolicy")
        if policy is not None and policy not in _RESTART_POLICIES:
            notes.append(attention(f"spec.mpiReplicaSpecs[{replica_type}].restartPolicy",
                                   f"{policy!r} is not supported by the v2beta1 operator; use Never or OnFailure"))
    return notes


def down(obj: Mapping[str, Any], options: ConversionOptions, *, dialect: Dialect) -> Derived:
    spec = mapping(obj.get("spec"))
    out: dict[str, Any] = {}
    if "slotsPerWorker" in spec:
        out["slotsPerWorker"] = spec["slotsPerWorker"]
    run_policy = spec.get("runPolicy")
    if is_mapping(run_policy) and "cleanPodPolicy" in run_policy:
        out["cleanPodPolicy"] = run_policy["cleanPodPolicy"]  # older controllers read it here
    if "runPolicy" in spec:
        out["runPolicy"] = run_policy
    if dialect.has_distribution and spec.get("mpiImplementation") in _IMPLEMENTATION_TO_DISTRIBUTION:
        out["mpiDistribution"] = _IMPLEMENTATION_TO_DISTRIBUTION[spec["mpiImplementation"]]
    if "mpiReplicaSpecs" in spec:
        out["mpiReplicaSpecs"] = spec["mpiReplicaSpecs"]
    status = obj["status"] if "status" in obj else None
    return Derived(rebuilt(obj, dialect.api_version, out, status))


def spoke(dialect: Dialect) -> Spoke:
    def _up(obj: Mapping[str, Any], options: ConversionOptions) -> Derived:
        return up(obj, options, dialect=dialect)

    def _down(obj: Mapping[str, Any], options: ConversionOptions) -> Derived:
        return down(obj, options, dialect=dialect)

    return Spoke(
        dialect.api_version,
        up=_up,
        down=_down,
        coupled=(
            (("spec", "cleanPodPolicy"), ("spec", "runPolicy", "cleanPodPolicy")),
            (("spec", "backoffLimit"), ("spec", "runPolicy", "backoffLimit")),
            (("spec", "activeDeadlineSeconds"), ("spec", "runPolicy", "activeDeadlineSeconds")),
        ),
        advisory=ssh_advisory(dialect.api_version),
    )
