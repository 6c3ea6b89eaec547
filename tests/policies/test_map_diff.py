"""The map-only patch (engine.map_diff) must be exactly the patch jsonpatch computes, whenever it
answers at all; anything it declines (removals, list edits) is jsonpatch's."""
from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.engine import map_diff

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


@settings(max_examples=300)
@given(MAPS, st.data())
def test_map_diff_is_jsonpatchs_patch_or_declines(original: dict[str, Any], data: st.DataObject) -> None:
    edited = _edit(original, data)
    ops = map_diff(original, edited)
    if ops is None:
        return
    assert _canonical(ops) == _canonical(jsonpatch.make_patch(original, edited).patch)
    assert jsonpatch.apply_patch(original, ops) == edited


def test_declines_a_removal_and_a_list_edit() -> None:
    assert map_diff({"a": 1, "b": 2}, {"a": 1}) is None
    assert map_diff({"a": [1]}, {"a": [1, 2]}) is None
    assert map_diff({"m": {"x": "1"}}, {"m": {"x": "1", "y/z": "2"}}) == [{"op": "add", "path": "/m/y~1z", "value": "2"}]


def test_a_boolean_replacing_a_number_is_a_change() -> None:
    assert map_diff({"a": 0, "b": 1}, {"a": False, "b": 1}) == [{"op": "replace", "path": "/a", "value": False}]
