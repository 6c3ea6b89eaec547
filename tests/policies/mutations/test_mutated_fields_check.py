"""The shape check before the mutations checks the types of the fields they declare, with the
findings the whole-object check has for those fields, and nothing elsewhere."""
from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

import jsonpatch
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from policies import messages
from policies.interface import Mutated, NoParams, Problem
from policies.engine import MutationResult, json_patch
from policies.mpijob.reading import QUEUE_LABEL
from policies.mutations.edits import WorkingCopy
from policies.mutations.mutated_fields_check import check_mutation_shape, declared_fields
from policies.registry import MUTATIONS, default_settings
from policies.mpijob.crd_type_check import _checked_schema, check_shape, narrowed
from testing.builders import context, mpijob
from tests.policies.test_crd_type_check_fast_path import JOBS, JSON, UNUSUAL, _paths, _schema_at, _shaped

WORKER = ("spec", "mpiReplicaSpecs", "Worker", "template")
LAUNCHER = ("spec", "mpiReplicaSpecs", "Launcher", "template")
INJECT = "sidecar.istio.io/inject"


def narrow_lines(job: Any) -> list[str]:
    return [messages.line(f) for f in check_mutation_shape(job, MUTATIONS)]


def placed(job: Any, path: tuple, value: Any) -> Any:
    """A copy of ``job`` with ``value`` at ``path``, maps created (or put in place of other
    values) on the way."""
    if not path:
        return value
    changed = copy.deepcopy(job)
    parent = changed
    for step in path[:-1]:
        child = parent.get(step) if isinstance(parent, dict) else parent[step]
        if not isinstance(child, (dict, list)):
            child = parent[step] = {}
        parent = child
    parent[path[-1]] = value
    return changed


# --- what the mutations declare --------------------------------------------------------------

def test_every_registered_mutation_declares_the_fields_it_reads_and_writes():
    assert {m.id: m.fields for m in MUTATIONS} == {
        "istio-sidecar-off": tuple((*template, "metadata", field, INJECT)
                                   for template in (LAUNCHER, WORKER) for field in ("labels", "annotations")),
        "kueue-queue-label": (("metadata", "labels", QUEUE_LABEL),),
        "restricted-service-account": tuple(
            (*template, "spec", field) for template in (LAUNCHER, WORKER)
            for field in ("automountServiceAccountToken", "serviceAccountName", "serviceAccount")),
    }
    narrowed(_checked_schema(), declared_fields(MUTATIONS))  # every one a field of the schema


# --- a malformed field the mutations read: refused as before ------------------------------------

MALFORMED_READ = {
    "spec a list": (("spec",), [1, 2], 'spec: Invalid value: "[…]": must be a mapping, not a list'),
    "mpiReplicaSpecs a number": (("spec", "mpiReplicaSpecs"), 2,
                                 "spec.mpiReplicaSpecs: Invalid value: 2: must be a mapping, not an integer"),
    "the Worker a string": (("spec", "mpiReplicaSpecs", "Worker"), "w",
                            'spec.mpiReplicaSpecs[Worker]: Invalid value: "w": must be a mapping, not a string'),
    "a template a list": (LAUNCHER, [], 'spec.mpiReplicaSpecs[Launcher].template: Invalid value: "[…]": '
                                        "must be a mapping, not a list"),
    "the pod spec a string": ((*WORKER, "spec"), "x", 'spec.mpiReplicaSpecs[Worker].template.spec: '
                                                      'Invalid value: "x": must be a mapping, not a string'),
    "template labels a list": ((*WORKER, "metadata", "labels"), ["a"],
                               'spec.mpiReplicaSpecs[Worker].template.metadata.labels: Invalid value: "[…]": '
                               "must be a mapping, not a list"),
    "the inject annotation a boolean": ((*LAUNCHER, "metadata", "annotations", INJECT), False,
                                        f"spec.mpiReplicaSpecs[Launcher].template.metadata.annotations[{INJECT}]: "
                                        "Invalid value: false: must be a string, not true or false"),
    "automount a string": ((*WORKER, "spec", "automountServiceAccountToken"), "false",
                           'spec.mpiReplicaSpecs[Worker].template.spec.automountServiceAccountToken: '
                           'Invalid value: "false": must be true or false, not a string'),
    "serviceAccountName a number": ((*LAUNCHER, "spec", "serviceAccountName"), 7,
                                    "spec.mpiReplicaSpecs[Launcher].template.spec.serviceAccountName: "
                                    "Invalid value: 7: must be a string, not an integer"),
    "metadata a string": (("metadata",), "m", 'metadata: Invalid value: "m": must be a mapping, not a string'),
    "the queue label a number": (("metadata", "labels", QUEUE_LABEL), 3,
                                 f"metadata.labels[{QUEUE_LABEL}]: Invalid value: 3: must be a string, not an integer"),
}


@pytest.mark.parametrize(("path", "value", "line"), MALFORMED_READ.values(), ids=MALFORMED_READ.keys())
def test_a_malformed_field_a_mutation_reads_gets_the_finding_of_the_whole_check(path, value, line):
    job = placed(mpijob(), path, value)
    assert narrow_lines(job) == [f"[object-shape] {line}"]
    assert check_mutation_shape(job, MUTATIONS) == check_shape(job)


@pytest.mark.parametrize("obj", [[], "pi", None])
def test_an_object_that_is_not_a_mapping_is_refused_as_before(obj):
    assert check_mutation_shape(obj, MUTATIONS) == check_shape(obj)


# --- anything else: not the mutations' concern --------------------------------------------------

MALFORMED_ELSEWHERE = {
    "containers a string": ((*WORKER, "spec", "containers"), "busybox"),
    "a container a string": ((*WORKER, "spec", "containers", 0), "busybox"),
    "replicas a string": (("spec", "mpiReplicaSpecs", "Worker", "replicas"), "2"),
    "slots a boolean": (("spec", "slotsPerWorker"), True),
    "another label a number": (("metadata", "labels"), {"team": 7}),
    "another template label a number": ((*WORKER, "metadata", "labels"), {"team": 7}),
    "a replica type no mutation edits": (("spec", "mpiReplicaSpecs", "Chief"), "x"),
    "no containers": ((*LAUNCHER, "spec"), {}),
}


@pytest.mark.parametrize(("path", "value"), MALFORMED_ELSEWHERE.values(), ids=MALFORMED_ELSEWHERE.keys())
def test_a_malformed_field_no_mutation_reads_is_left_to_validation(path, value):
    job = placed(mpijob(), path, value)
    assert check_shape(job) != []
    assert check_mutation_shape(job, MUTATIONS) == []


def test_missing_maps_are_not_problems_the_mutations_create_them():
    assert check_shape({"metadata": {"name": "pi"}}) != []
    assert check_mutation_shape({"metadata": {"name": "pi"}}, MUTATIONS) == []
    assert check_mutation_shape({"spec": {}}, MUTATIONS) == []


CONFIGURED = (default_settings().with_mutation("kueue-queue-label", default_queue="common-queue")
              .with_mutation("restricted-service-account", service_account="mpi-restricted"))


def mutated(job: Any) -> tuple[MutationResult, list[dict[str, Any]]]:
    """What the engine does once the shape check passed: every mutation on a working copy."""
    edited, applied = WorkingCopy(job), []
    ctx = context(job, settings=CONFIGURED, name="pi")
    for mutation in MUTATIONS:
        if mutation.apply(edited, ctx).changed:
            applied.append(mutation.id)
    result = MutationResult(dict(edited), tuple(applied))
    return result, json_patch(job, result)


def test_mutations_applied_past_a_malformed_field_elsewhere_give_a_patch_that_applies():
    job = placed(mpijob(), (*WORKER, "spec", "containers"), "busybox")
    assert check_mutation_shape(job, MUTATIONS) == []
    _, patch = mutated(job)
    patched = jsonpatch.apply_patch(job, patch)
    assert patched["metadata"]["labels"] == {QUEUE_LABEL: "common-queue"}
    assert patched["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"] == {
        "containers": "busybox", "automountServiceAccountToken": False, "serviceAccountName": "mpi-restricted"}


class _Undeclared:
    id = "undeclared"
    Params = NoParams
    enabled_by_default = True

    def apply(self, job: dict[str, Any], ctx: Any) -> Mutated:
        return Mutated()


def test_a_mutation_that_declares_no_fields_gets_the_whole_object_checked():
    job = placed(mpijob(), (*WORKER, "spec", "containers"), "busybox")
    assert declared_fields([*MUTATIONS, _Undeclared()]) is None
    assert check_mutation_shape(job, [*MUTATIONS, _Undeclared()]) == check_shape(job) != []
    assert check_mutation_shape(job, []) == []  # no mutation: nothing read but the object itself


# --- the narrowed schema ------------------------------------------------------------------------

def test_a_misspelt_field_is_refused_not_silently_unchecked():
    with pytest.raises(ValueError, match="the schema has no field spec.mpiReplicaSpec"):
        narrowed(_checked_schema(), [("spec", "mpiReplicaSpec", "Worker")])
    with pytest.raises(ValueError, match="no map at spec.slotsPerWorker in the schema"):
        narrowed(_checked_schema(), [("spec", "slotsPerWorker", "x")])


def test_a_shorter_field_covers_the_longer_ones_in_either_order():
    whole_labels = narrowed(_checked_schema(), [("metadata", "labels")])
    assert narrowed(_checked_schema(), [("metadata", "labels", "a"), ("metadata", "labels")]) == whole_labels
    assert narrowed(_checked_schema(), [("metadata", "labels"), ("metadata", "labels", "a")]) == whole_labels
    assert whole_labels["properties"]["metadata"]["properties"]["labels"] == {
        "type": "object", "additionalProperties": {"type": "string"}}
    assert narrowed(_checked_schema(), [()]) == _checked_schema()


# --- the property: the whole check's findings, restricted to the declared fields --------------

def _rendered(field: tuple[str, ...]) -> str:
    """A declared field as findings name it: ``.key`` for a property, ``[key]`` for a map entry."""
    path, node = "", _checked_schema()
    for key in field:
        properties = node.get("properties") or {}
        if key in properties:
            path, node = (f"{path}.{key}" if path else key), properties[key]
        else:
            path, node = f"{path}[{key}]", node["additionalProperties"]
    return path


DECLARED = [_rendered(field) for field in declared_fields(MUTATIONS)]


def _on_declared_fields(path: str) -> bool:
    """At a declared field, on the way to one, or inside one."""
    return not path or any(
        path == field or field.startswith((f"{path}.", f"{path}[")) or path.startswith((f"{field}.", f"{field}["))
        for field in DECLARED)


@settings(max_examples=min(settings.default.max_examples, 300))
@given(st.data())
def test_the_findings_are_the_whole_checks_type_findings_on_the_declared_fields(data: st.DataObject):
    job = data.draw(st.sampled_from(JOBS))
    paths = _paths(job) + [field[:depth] for field in declared_fields(MUTATIONS) for depth in range(2, len(field) + 1)]
    path = data.draw(st.sampled_from(paths))
    node = _schema_at(path)
    changed = placed(job, path, data.draw(JSON | UNUSUAL if node is None else _shaped(node)))
    expected = [f for f in check_shape(changed) if f.problem is Problem.INVALID and _on_declared_fields(f.path)]
    assert check_mutation_shape(changed, MUTATIONS) == expected


def test_the_property_sees_declared_fields_inside_maps():
    """``_on_declared_fields`` keeps exactly the entries the mutations read."""
    assert _on_declared_fields(f"metadata.labels[{QUEUE_LABEL}]")
    assert _on_declared_fields("spec.mpiReplicaSpecs[Worker].template")
    assert not _on_declared_fields("metadata.labels[team]")
    assert not _on_declared_fields("spec.mpiReplicaSpecs[Worker].template.spec.containers")
    assert isinstance(_schema_at(("metadata", "labels", QUEUE_LABEL)), Mapping)


def _encodable(value: Any) -> bool:
    try:
        json.dumps(value)
    except TypeError:
        return False
    return True


def _pointer(field: tuple[str, ...]) -> str:
    return "".join("/" + key.replace("~", "~0").replace("/", "~1") for key in field)


POINTERS = [_pointer(field) for field in declared_fields(MUTATIONS)]


@settings(max_examples=min(settings.default.max_examples, 300))
@given(st.data())
def test_past_the_check_the_mutations_never_fail_and_patch_only_declared_fields(data: st.DataObject):
    """Why the check may be narrow: whatever the rest of the object holds, the mutations read
    and write only the declared fields (and the maps on the way to them)."""
    job = data.draw(st.sampled_from(JOBS))
    path = data.draw(st.sampled_from(_paths(job)))
    node = _schema_at(path)
    changed = placed(job, path, data.draw(JSON | UNUSUAL if node is None else _shaped(node)))
    assume(_encodable(changed))  # a request object is decoded JSON
    assume(not check_mutation_shape(changed, MUTATIONS))  # refused before any mutation runs
    result, patch = mutated(changed)
    jsonpatch.apply_patch(changed, patch)
    for op in patch:
        assert op["op"] == "add" or op["op"] == "replace"
        assert any(pointer == op["path"] or pointer.startswith(op["path"] + "/") for pointer in POINTERS), op


class _Unhashable(_Undeclared):
    __hash__ = None  # type: ignore[assignment]  # as a dataclass with eq and no frozen is
    fields = (("metadata", "labels"),)


def test_mutations_need_not_be_hashable():
    job = placed(mpijob(), ("metadata", "labels"), {"team": 7})
    assert narrow_lines(job) == []
    assert [messages.line(f) for f in check_mutation_shape(job, [_Unhashable()])] == [
        "[object-shape] metadata.labels[team]: Invalid value: 7: must be a string, not an integer"]
