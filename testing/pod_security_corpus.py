"""Upstream's PodSecurity fixtures (tests/data/pod-security, see its README) in job form: each
pod as an MPIJob's Worker and Launcher template, in a namespace whose enforce labels are the
fixture's level and version; for the corpus test and the test on the real API server."""
from __future__ import annotations

import copy
from collections.abc import Iterator
from functools import cache
from typing import Any, NamedTuple

import yaml

from testing.builders import mpijob
from testing.kube_objects import namespace
from testing.reference_data import DATA

CORPUS = DATA / "pod-security"
ENFORCE = "pod-security.kubernetes.io/enforce"
# Pods whose job the MPIJob CRD's own schema refuses before any rule runs (as the API server
# does, 422 Invalid): a scaleIO volume with ``secretRef: null``, which the CRD requires. Denied
# all the same, by ``[object-shape]``.
REFUSED_BY_THE_SCHEMA = ("restrictedvolumes17-",)


class Fixture(NamedTuple):
    level: str
    version: str  # v1.N
    verdict: str  # pass | fail
    pod: str  # file under pods/

    @property
    def namespace(self) -> str:
        return f"{self.level}-{self.version.replace('.', '-')}"


def fixtures() -> list[Fixture]:
    lines = (CORPUS / "index.txt").read_text().splitlines()
    return [Fixture(*line.split()) for line in lines if line and not line.startswith("#")]


@cache
def pod(name: str) -> dict[str, Any]:
    return yaml.safe_load((CORPUS / "pods" / name).read_text())  # type: ignore[no-any-return]


def namespace_of(fixture: Fixture) -> dict[str, Any]:
    return namespace(fixture.namespace, {ENFORCE: fixture.level, f"{ENFORCE}-version": fixture.version})


def template(pod_object: dict[str, Any]) -> dict[str, Any]:
    """The pod's template: its labels and annotations (the checks read annotations), its spec."""
    meta = {key: value for key, value in (pod_object.get("metadata") or {}).items() if key in ("labels", "annotations")}
    return {**({"metadata": meta} if meta else {}), "spec": copy.deepcopy(pod_object["spec"])}


def job_with(launcher: dict[str, Any], worker: dict[str, Any], name: str = "corpus") -> dict[str, Any]:
    """An MPIJob whose Launcher and Worker templates are these pods (each keeps its restartPolicy
    unset: the MPI operator's replicas take Never / OnFailure, and a fixture pod sets none)."""
    job = mpijob(name)
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"] = template(launcher)
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"] = template(worker)
    return job


def every_level_version() -> Iterator[tuple[str, str]]:
    seen: dict[tuple[str, str], None] = {}
    for fixture in fixtures():
        seen.setdefault((fixture.level, fixture.version), None)
    return iter(seen)


def base_pod(level: str, version: str) -> dict[str, Any]:
    """Upstream's minimal valid pod of that level and version (``base``): what the other replica runs."""
    for fixture in fixtures():
        if (fixture.level, fixture.version, fixture.verdict) == (level, version, "pass") and \
                fixture.pod.startswith("base-"):
            return pod(fixture.pod)
    raise LookupError(f"no base pod for {level} {version}")
