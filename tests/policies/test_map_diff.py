"""The map-only patch (engine.map_diff) must be exactly the patch jsonpatch computes, in path
order, whenever it answers at all; anything it declines (removals, list edits) is jsonpatch's.
On the copy-on-write working copy the mutations edit, it gives the same patch as on an
independent copy, and the request is never modified."""
from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from policies.engine import MutationResult, _in_path_order, json_patch, map_diff
from policies.mutations.edits import WorkingCopy

KEYS = st.sampled_from(["a", "b", "c/d", "e~f", "labels", "sidecar.istio.io/inject"])
# Booleans, and integers that Python holds equal to no boolean: a subtree whose only change is
# true for 1 is equal to Python, and no mutation writes one (see map_diff). At a key of its own,
# 0 for false is a change (test below).
SCALARS = st.none() | st.booleans() | st.integers(2, 5) | st.sampled_from(["", "x", "false", "true"])
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=2) | st.dictionaries(KEYS, inner, max_size=3),
                      max_leaves=8)
MAPS = st.dictionaries(KEYS, VALUES, max_size=4)


def _edit(document: dict[str, Any], data: st.DataObject) -> dict[str, Any]:
    """Adds keys and replaces values at random depths of the maps (what mutations do), and now
    and then removes a key or edits a list (which map_diff must decline)."""
    edited = copy.deepcopy(document)
    for _ in range(data.draw(st.integers(1, 4))):
        node = edited
        while isinstance(node, dict) and node and data.draw(st.booleans()):
            child = node[data.draw(st.sampled_from(sorted(node)))]
            if not isinstance(child, (dict, list)):
                break
            node = child
        if isinstance(node, dict):
            action = data.draw(st.sampled_from(["set", "set", "remove"]))
            if action == "remove" and node:
                del node[data.draw(st.sampled_from(sorted(node)))]
            else:
                node[data.draw(KEYS)] = data.draw(VALUES)
        elif isinstance(node, list):
            node.append(data.draw(SCALARS))
    return edited


def _canonical(ops: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(op, sort_keys=True) for op in ops)


@settings(max_examples=min(settings.default.max_examples, 300))
@given(MAPS, st.data())
def test_map_diff_is_jsonpatchs_patch_or_declines(original: dict[str, Any], data: st.DataObject) -> None:
    edited = _edit(original, data)
    ops = map_diff(original, edited)
    assume(ops is not None)  # declined: the engine falls back to jsonpatch itself
    assert _canonical(ops) == _canonical(jsonpatch.make_patch(original, edited).patch)
    assert ops == _in_path_order(original, ops)
    assert jsonpatch.apply_patch(original, ops) == edited


def _edit_working_copy(job: WorkingCopy, data: st.DataObject) -> None:
    """What a mutation does: writes into maps ``writable`` hands out, at random depths, below
    existing maps or new ones; now and then a removal (which the diff must decline)."""
    for _ in range(data.draw(st.integers(1, 4))):
        path: list[str] = []
        node: Any = job
        while isinstance(node, dict) and node and data.draw(st.booleans()):
            key = data.draw(st.sampled_from(sorted(node)))
            path.append(key)
            node = node[key]
        path += data.draw(st.lists(KEYS, max_size=2))
        target = job.writable(tuple(path))
        if target is None:
            continue
        if target and data.draw(st.integers(0, 4)) == 0:
            del target[data.draw(st.sampled_from(sorted(target)))]
        else:
            target[data.draw(KEYS)] = data.draw(VALUES)


@settings(max_examples=min(settings.default.max_examples, 300))
@given(MAPS, st.data())
def test_patch_of_the_copy_on_write_working_copy(original: dict[str, Any], data: st.DataObject) -> None:
    request = copy.deepcopy(original)
    job = WorkingCopy(request)
    _edit_working_copy(job, data)
    assert json.dumps(request) == json.dumps(original)  # never modified, not even its key order
    patch = json_patch(request, MutationResult(job, applied=("edit",)))
    independent = json.loads(json.dumps(job))  # how the working copy used to be made
    assert patch == json_patch(original, MutationResult(independent, applied=("edit",)))
    if map_diff(request, job) is not None:
        assert patch == _in_path_order(original, jsonpatch.make_patch(original, independent).patch)
    assert jsonpatch.apply_patch(request, patch) == job
    assert json.dumps(request) == json.dumps(original)


def test_declines_a_removal_and_a_list_edit() -> None:
    assert map_diff({"a": 1, "b": 2}, {"a": 1}) is None
    assert map_diff({"a": [1, 2]}, {"a": [1]}) is None
    assert map_diff({"a": [{"x": 1}]}, {"a": [{"x": 2}]}) is None
    assert map_diff({"a": [1, 2]}, {"a": [2, 1, 3]}) is None
    # equal but not the request's own items: the copy-on-write copy never makes those, so the
    # diff does not try to match them up
    assert map_diff({"a": [{"x": 1}]}, {"a": [{"x": 1}, {"y": 2}]}) is None


def test_items_appended_to_a_list_of_the_requests_own_items_are_added_at_their_indices() -> None:
    # A TrainJob's own runtimePatches entry, appended after the user's (the working copy's list
    # holds the request's entries themselves)
    user, kueue = {"manager": "example.com/user", "x": {"a": [1]}}, {"manager": "kueue.x-k8s.io/manager"}
    request = {"spec": {"runtimePatches": [user, kueue], "trainer": {"numNodes": 2}}}
    ours = {"manager": "mpijob-webhook.kubeflow.org/mutations", "t": {"labels": {"a": "b"}}}
    mutated = {"spec": {**request["spec"], "runtimePatches": [user, kueue, ours, {"n": 1}]}}
    ops = map_diff(request, mutated)
    assert ops == [{"op": "add", "path": "/spec/runtimePatches/2", "value": ours},
                   {"op": "add", "path": "/spec/runtimePatches/3", "value": {"n": 1}}]
    assert ops == jsonpatch.make_patch(request, mutated).patch
    assert jsonpatch.apply_patch(request, ops) == mutated


@settings(max_examples=min(settings.default.max_examples, 200))
@given(st.lists(VALUES, max_size=4), st.lists(VALUES, min_size=1, max_size=3), st.data())
def test_appended_items_give_jsonpatchs_patch(items: list[Any], appended: list[Any], data: st.DataObject) -> None:
    key = data.draw(KEYS)
    request = {"spec": {key: items, "other": {"a": 1}}}
    mutated = {"spec": {**request["spec"], key: [*items, *appended]}}
    ops = map_diff(request, mutated)
    assert ops is not None
    assert ops == jsonpatch.make_patch(request, mutated).patch
    assert jsonpatch.apply_patch(request, ops) == mutated
    assert map_diff({"m": {"x": "1"}}, {"m": {"x": "1", "y/z": "2"}}) == [{"op": "add", "path": "/m/y~1z", "value": "2"}]


def test_a_boolean_replacing_a_number_is_a_change() -> None:
    assert map_diff({"a": 0, "b": 1}, {"a": False, "b": 1}) == [{"op": "replace", "path": "/a", "value": False}]
