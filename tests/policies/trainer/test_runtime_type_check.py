"""Training runtimes against the runtime CRD (what ``check`` does to the runtimes it reads): what
the API server would refuse, with the field path, and the runtime as it would store it."""
from __future__ import annotations

import copy
import importlib.util
import json
from collections.abc import Callable
from functools import cache
from typing import Any

import pytest

from policies import messages
from policies.trainer.runtime_type_check import check_runtime, runtime_schema
from testing.reference_data import ROOT
from tests.policies.trainer.trainer_data import DATA, load, runtime

DEEPSPEED = "runtimes/v2.3.0/deepspeed_distributed.yaml"
DROPPED = "unknown field: the API server drops it from a trainer.kubeflow.org/v1alpha1 ClusterTrainingRuntime"
JOB = "spec.template.spec.replicatedJobs"
NODE_CONTAINER = f"{JOB}[0].template.spec.template.spec.containers[0]"


@cache
def every_runtime() -> dict[str, dict[str, Any]]:
    """Every runtime of the test data (the CRDs' folder left out: it holds none, and is large)."""
    return {f"{path.relative_to(DATA)}[{i}]": doc for path in sorted(DATA.rglob("*.yaml"))
            if path.parent.name != "crds"
            for i, doc in enumerate(load(path)) if doc.get("kind") in ("ClusterTrainingRuntime", "TrainingRuntime")}


@pytest.mark.parametrize("name", sorted(every_runtime()))
def test_every_upstream_runtime_is_valid_and_loses_nothing(name):
    rt = copy.deepcopy(every_runtime()[name])
    checked = check_runtime(rt)
    assert (checked.refused, checked.pruned) == ((), ())
    assert _keeps_all_of(checked.stored, rt)  # only defaults added


def _keeps_all_of(stored: Any, given: Any) -> bool:
    if isinstance(given, dict):
        return isinstance(stored, dict) and all(k in stored and _keeps_all_of(stored[k], v) for k, v in given.items())
    if isinstance(given, list):
        return isinstance(stored, list) and len(stored) == len(given) and all(map(_keeps_all_of, stored, given))
    return bool(stored == given)


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(rt: dict[str, Any]) -> None:
        node = rt
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return edit


def _drop(path: tuple[Any, ...]) -> Callable[[dict[str, Any]], None]:
    def edit(rt: dict[str, Any]) -> None:
        node = rt
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
    return edit


NODE = ("spec", "template", "spec", "replicatedJobs", 0)
REFUSED = [
    ("numNodes-string", _set(("spec", "mlPolicy", "numNodes"), "two"),
     ['[object-shape] spec.mlPolicy.numNodes: Invalid value: "two": must be an integer, not a string']),
    ("slots-string", _set(("spec", "mlPolicy", "mpi", "numProcPerNode"), "4"),
     ['[object-shape] spec.mlPolicy.mpi.numProcPerNode: Invalid value: "4": must be an integer, not a string']),
    ("runLauncherAsNode-string", _set(("spec", "mlPolicy", "mpi", "runLauncherAsNode"), "yes"),
     ['[object-shape] spec.mlPolicy.mpi.runLauncherAsNode: Invalid value: "yes": must be true or false, '
      'not a string']),
    ("mlPolicy-list", _set(("spec", "mlPolicy"), []),
     ['[object-shape] spec.mlPolicy: Invalid value: "[…]": must be a mapping, not a list']),
    ("replicas-string", _set((*NODE, "replicas"), "1"),
     [f'[object-shape] {JOB}[0].replicas: Invalid value: "1": must be an integer, not a string']),
    ("job-without-name", _drop((*NODE, "name")),
     [f"[object-shape] {JOB}[0].name: Required value: is required"]),
    ("container-without-name", _drop((*NODE, "template", "spec", "template", "spec", "containers", 0, "name")),
     [f"[object-shape] {NODE_CONTAINER}.name: Required value: is required"]),
    ("limits-string", _set((*NODE, "template", "spec", "template", "spec", "containers", 0, "resources"),
                           {"limits": "lots"}),
     [f'[object-shape] {NODE_CONTAINER}.resources.limits: Invalid value: "lots": must be a mapping, not a string']),
    ("label-integer", _set(("metadata", "labels", "team"), 7),
     ["[object-shape] metadata.labels[team]: Invalid value: 7: must be a string, not an integer"]),
]


@pytest.mark.parametrize(("edit", "expected"), [case[1:] for case in REFUSED], ids=[case[0] for case in REFUSED])
def test_what_the_api_server_would_refuse_is_said_with_its_path(edit, expected):
    rt = runtime(DEEPSPEED)
    edit(rt)
    checked = check_runtime(rt)
    assert not checked.valid
    assert [messages.line(f) for f in checked.refused] == expected
    assert {f.rule for f in checked.refused} == {"object-shape"}


PRUNED = [
    ("misspelt-runLauncherAsNode", ("spec", "mlPolicy", "mpi", "runLauncherAsnode"),
     "spec.mlPolicy.mpi.runLauncherAsnode", "spec.mlPolicy.mpi.runLauncherAsNode"),
    ("resource-not-resources", (*NODE, "template", "spec", "template", "spec", "containers", 0, "resource"),
     f"{NODE_CONTAINER}.resource", f"{NODE_CONTAINER}.resources"),
    ("nothing-like-it", ("spec", "zzzqqq"), "spec.zzzqqq", None),
]


@pytest.mark.parametrize(("where", "path", "suggestion"), [case[1:] for case in PRUNED], ids=[case[0] for case in PRUNED])
def test_unknown_fields_are_pruned_and_said_with_where_they_belong(where, path, suggestion):
    rt = runtime(DEEPSPEED)
    _set(where, {"limits": {"cpu": 1}})(rt)
    checked = check_runtime(rt)
    assert checked.valid
    (pruned,) = checked.pruned
    assert (pruned.path, pruned.suggestion) == (path, suggestion)
    assert pruned.message == DROPPED + (f"; did you mean {suggestion}?" if suggestion else "")
    node = checked.stored
    for key in where[:-1]:
        node = node[key]
    assert where[-1] not in node
    assert rt != checked.stored, "the input is left alone"


def test_the_stored_runtime_has_the_crd_defaults():
    rt = runtime(DEEPSPEED)
    del rt["spec"]["mlPolicy"]["mpi"]["runLauncherAsNode"], rt["spec"]["mlPolicy"]["mpi"]["mpiImplementation"]
    stored = check_runtime(rt).stored
    assert stored["spec"]["mlPolicy"]["mpi"] == {"numProcPerNode": 1, "mpiImplementation": "OpenMPI",
                                                 "sshAuthMountPath": "/home/mpiuser/.ssh", "runLauncherAsNode": False}
    assert [job.get("replicas") for job in stored["spec"]["template"]["spec"]["replicatedJobs"]] == [1, 1]


def _extraction_tool() -> Any:
    spec = importlib.util.spec_from_file_location("extract_crd_schema", ROOT / "tools" / "extract_crd_schema.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("kind", ["clustertrainingruntimes", "trainingruntimes"])
def test_the_carried_schema_is_the_upstream_crds_structure(kind):
    """The schema the package carries is the test data's CRD, descriptions stripped: both kinds."""
    tool = _extraction_tool()
    extracted = tool.extracted(DATA / "crds" / f"trainer.kubeflow.org_{kind}.yaml", "v1alpha1")
    assert json.loads(tool.text(extracted)) == runtime_schema()


def test_the_schemas_ship_in_the_package():
    """A wheel carries only the data files pyproject.toml names: every schema folder is named."""
    import tomllib

    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    folders = {str(p.parent.parent.relative_to(ROOT)).replace("/", ".") for p in (ROOT / "policies").rglob("schema/*.json")}
    assert folders == {"policies.mpijob", "policies.trainer"}
    for package in folders:
        assert "schema/*.json" in package_data.get(package, []), f"{package}'s schema/*.json is not package data"


def test_runtimes_are_copied_not_edited():
    rt = runtime(DEEPSPEED)
    rt["spec"]["mlPolicy"]["mpi"]["extra"] = 1
    before = copy.deepcopy(rt)
    check_runtime(rt)
    assert rt == before
