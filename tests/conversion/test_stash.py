"""The lossless layer: diff and guarded replay, coupled groups, the annotation itself."""
from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.conversion import STASH_ANNOTATION, convert
from policies.conversion.stash import read, replay, same, write
from policies.conversion.stash import diff as stash_diff
from policies.conversion.tree import ABSENT, Tree, digest, display, get, json_writer, put
from tests.conversion.common import HUB, without_stash

JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(["a", "b", "name"])),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.sampled_from(["a", "b", "name", "x/y", "~"]), inner, max_size=3)),
    max_leaves=12)
# A few ms per example (two random trees each): a fifth of the profile's examples.
TREES = settings(max_examples=max(100, settings().max_examples // 5))


@TREES
@given(derived=st.dictionaries(st.sampled_from(["a", "b", "c"]), JSON, max_size=3),
       original=st.dictionaries(st.sampled_from(["a", "b", "c"]), JSON, max_size=3))
def test_replaying_the_diff_gives_the_original_and_leaves_the_input_alone(derived, original):
    frozen = copy.deepcopy(derived)
    edits = stash_diff(derived, original)
    restored, complete = replay(derived, edits)
    assert restored == original
    assert complete
    assert derived == frozen
    assert read({STASH_ANNOTATION: write({"v": edits})}) == {"v": edits}  # survives JSON


def test_an_edit_is_not_replayed_over_a_field_changed_since():
    derived = {"spec": {"image": "a", "name": "x"}}
    edits = stash_diff(derived, {"spec": {"image": "b", "name": "y"}})
    changed = {"spec": {"image": "c", "name": "x"}}
    restored, complete = replay(changed, edits)
    assert restored == {"spec": {"image": "c", "name": "y"}}  # image kept, name restored
    assert not complete


def test_a_coupled_group_is_replayed_whole_or_not_at_all():
    derived = {"spec": {"replicas": 2, "slots": 8, "image": "a"}}
    original = {"spec": {"gpus": 16, "image": "b"}}
    edits = stash_diff(derived, original)
    group = ((("spec", "gpus"), ("spec", "replicas"), ("spec", "slots")),)
    resized = {"spec": {"replicas": 3, "slots": 8, "image": "a"}}
    restored, _ = replay(resized, edits, group)
    assert restored == {"spec": {"replicas": 3, "slots": 8, "image": "b"}}  # no gpus beside replicas
    restored, complete = replay(derived, edits, group)
    assert restored == original and complete


def test_reordered_named_elements_are_replaced_whole():
    derived = [{"name": "mpi", "image": "a"}, {"name": "log", "image": "b"}]
    original = [{"name": "log", "image": "b"}, {"name": "mpi", "image": "a"}]
    assert stash_diff(derived, original) == [((), stash_diff(derived, None)[0][1], original)]
    renamed = [{"name": "launcher", "image": "a"}, {"name": "log", "image": "b"}]
    assert stash_diff(derived, renamed) == [((0, "name"), stash_diff("mpi", None)[0][1], "launcher")]


# --- the fast diff against the plain definition it replaced -----------------------------------
def _reference_same(left, right):
    if left is right:
        return True
    if isinstance(left, Mapping):
        return isinstance(right, Mapping) and left.keys() == right.keys() and all(
            _reference_same(value, right[key]) for key, value in left.items())
    if isinstance(left, list):
        return isinstance(right, list) and len(left) == len(right) and all(map(_reference_same, left, right))
    return type(left) is type(right) and left == right


def _reference_names(items):
    return [repr(item.get("name")) if isinstance(item, Mapping) else "" for item in items]


def _reference_diff(derived, original, path=()):
    """Compare everything first, then recurse: the simplest statement of what ``diff`` returns."""
    if _reference_same(derived, original):
        return []
    if isinstance(derived, Mapping) and isinstance(original, Mapping):
        edits = []
        for key, value in original.items():
            if key in derived:
                edits.extend(_reference_diff(derived[key], value, path + (key,)))
            else:
                edits.append((path + (key,), "-", value))
        edits.extend((path + (key,), digest(value), ABSENT) for key, value in derived.items() if key not in original)
        return edits
    if isinstance(derived, list) and isinstance(original, list) and len(derived) == len(original):
        names, other = _reference_names(derived), _reference_names(original)
        if names == other or sorted(names) != sorted(other):
            return [edit for index, pair in enumerate(zip(derived, original))
                    for edit in _reference_diff(*pair, path + (index,))]
    return [(path, digest(derived), original)]


# Leaves that ``==`` confuses (1, 1.0, true; 0.0 and -0.0), and named elements to reorder.
TRICKY = st.one_of(st.none(), st.booleans(), st.integers(-1, 2), st.sampled_from([0.0, -0.0, 1.0, 2.5, "a", "name"]))
TRICKY_JSON = st.recursive(TRICKY, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.lists(st.fixed_dictionaries({"name": st.sampled_from(["mpi", "log", 0.0, -0.0])}, optional={"image": inner}),
             max_size=3),
    st.dictionaries(st.sampled_from(["a", "b", "name"]), inner, max_size=3)), max_leaves=6)


def _near(data, value):
    """A tree like the converters make from ``value``: most subtrees shared, some rebuilt equal,
    some changed, keys dropped or added, lists reordered."""
    choice = data.draw(st.integers(0, 6))
    if choice == 0:
        return data.draw(TRICKY_JSON)
    if choice == 1:
        return value
    if choice == 2:
        return copy.deepcopy(value)
    if isinstance(value, dict):
        out = {key: _near(data, child) for key, child in value.items() if data.draw(st.integers(0, 5))}
        if data.draw(st.booleans()):
            out[data.draw(st.sampled_from(["a", "b", "c"]))] = data.draw(TRICKY_JSON)
        return out
    if isinstance(value, list):
        out = [_near(data, child) for child in value]
        return out[::-1] if data.draw(st.integers(0, 3)) == 0 else out
    return value


@TREES
@given(original=TRICKY_JSON, data=st.data())
def test_diff_finds_exactly_the_edits_of_the_plain_definition(original, data):
    derived = _near(data, original)
    assert stash_diff(derived, original) == _reference_diff(derived, original)
    assert stash_diff(original, derived) == _reference_diff(original, derived)
    assert same(derived, original) is _reference_same(derived, original)


class _ReferenceTree:
    """Copy-on-write by walking from the root for every edit: the plain definition of ``Tree``."""

    def __init__(self, root):
        self.root = dict(root)
        self._owned = {id(self.root)}

    def _own(self, parent, step, create):
        child = parent[step] if (isinstance(step, int) or step in parent) else ABSENT
        if child is ABSENT:
            if not create:
                return ABSENT
            child = {}
        elif not isinstance(child, (Mapping, list)):
            return ABSENT
        elif id(child) in self._owned:
            return child
        else:
            child = dict(child) if isinstance(child, Mapping) else list(child)
        parent[step] = child
        self._owned.add(id(child))
        return child

    def _parent(self, path, create):
        node = self.root
        for index, step in enumerate(path[:-1]):
            if isinstance(step, int):
                if not isinstance(node, list) or not 0 <= step < len(node):
                    return ABSENT
            elif not isinstance(node, dict):
                return ABSENT
            node = self._own(node, step, create and isinstance(path[index + 1], str))
            if node is ABSENT:
                return ABSENT
        return node

    def set(self, path, value):
        parent, last = self._parent(path, True), path[-1]
        if isinstance(last, int):
            if not isinstance(parent, list) or not 0 <= last < len(parent):
                return False
        elif not isinstance(parent, dict):
            return False
        parent[last] = value
        return True

    def remove(self, path):
        parent, last = self._parent(path, False), path[-1]
        if isinstance(last, str) and isinstance(parent, dict):
            parent.pop(last, None)


STEPS = st.lists(st.sampled_from(["a", "b", 0]), min_size=1, max_size=3).map(tuple)  # few steps: edits run into each other
TREE_EDITS = st.lists(st.tuples(st.booleans(), STEPS, TRICKY_JSON), max_size=6)


@TREES
@given(root=st.dictionaries(st.sampled_from(["a", "b", "name"]), TRICKY_JSON, max_size=3), edits=TREE_EDITS)
def test_tree_edits_end_as_the_plain_definitions_and_leave_the_input_alone(root, edits):
    frozen = copy.deepcopy(root)
    tree, reference = Tree(root), _ReferenceTree(copy.deepcopy(root))
    for is_set, path, value in edits:
        if is_set:
            assert tree.set(path, value) is reference.set(path, value)
        else:
            tree.remove(path)
            reference.remove(path)
    assert json.dumps(tree.root) == json.dumps(reference.root)  # key order too
    assert json.dumps(root) == json.dumps(frozen)


@TREES
@given(root=st.dictionaries(st.sampled_from(["a", "b"]), TRICKY_JSON, max_size=2),
       keys=st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=3).map(tuple), value=TRICKY)
def test_put_sets_a_path_of_keys_as_tree_set_does(root, keys, value):
    frozen = copy.deepcopy(root)
    tree = Tree(root)
    owned = dict(root)
    assert put(owned, keys, value) is tree.set(keys, value)
    assert json.dumps(owned) == json.dumps(tree.root)
    assert json.dumps(root) == json.dumps(frozen)


@given(value=st.one_of(TRICKY_JSON, st.text(max_size=80), st.integers(), st.floats()))
def test_fingerprints_and_json_text_are_those_json_dumps_gives(value):
    """Fingerprints are stored in annotations: the fast paths must never change one."""
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    expected = hashlib.blake2b(canonical.encode(), digest_size=8).hexdigest()
    assert digest(value) == expected
    assert digest(value) == expected  # remembered or not
    assert json_writer(sort_keys=True)(value) == canonical
    assert json_writer(sort_keys=False)(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@pytest.mark.parametrize("value", ["not json", '{"format": 2, "versions": {}}', '{"format": 1}',
                                   '{"format": 1, "versions": {"v": [[[], "-"]]}}', '[1, 2]', 7])
def test_a_damaged_or_foreign_stash_counts_as_none(value):
    assert read({STASH_ANNOTATION: value}) == {}
    obj = {"apiVersion": HUB, "kind": "MPIJob", "metadata": {"name": "pi", "annotations": {STASH_ANNOTATION: value}},
           "spec": {"slotsPerWorker": 1}}
    converted = convert(obj, "kubeflow.org/v1").obj  # never fails
    assert converted["spec"]["slotsPerWorker"] == 1


def test_other_versions_entries_ride_along():
    """A v1alpha1 job read as v1 and written back keeps what restores its v1alpha1 form."""
    v1alpha1 = {"apiVersion": "kubeflow.org/v1alpha1", "kind": "MPIJob", "metadata": {"name": "b"},
                "spec": {"gpus": 16, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}
    hub = convert(v1alpha1, HUB).obj
    as_v1 = convert(hub, "kubeflow.org/v1").obj
    assert set(json.loads(as_v1["metadata"]["annotations"][STASH_ANNOTATION])["versions"]) == {
        "kubeflow.org/v1alpha1", "kubeflow.org/v2beta1"}
    assert convert(convert(as_v1, HUB).obj, "kubeflow.org/v1alpha1").obj == v1alpha1


def test_the_stash_is_valid_json_in_one_annotation_and_nothing_else_in_metadata_moves():
    hub = {"apiVersion": HUB, "kind": "MPIJob",
           "metadata": {"name": "pi", "namespace": "a", "uid": "u", "labels": {"x": "y"}, "annotations": {"k": "v"}},
           "spec": {"sshAuthMountPath": "/home/mpiuser/.ssh"}}
    view = convert(hub, "kubeflow.org/v1alpha1").obj
    assert {k: v for k, v in view["metadata"].items() if k != "annotations"} == \
        {"name": "pi", "namespace": "a", "uid": "u", "labels": {"x": "y"}}
    assert view["metadata"]["annotations"]["k"] == "v"
    assert json.loads(view["metadata"]["annotations"][STASH_ANNOTATION])["format"] == 1
    assert without_stash(view)["metadata"]["annotations"] == {"k": "v"}


def test_tree_copies_only_the_path_it_writes():
    shared = {"untouched": {"deep": [1, 2]}}
    root = {"a": {"b": {"c": 1}}, "other": shared}
    tree = Tree(root)
    tree.set(("a", "b", "c"), 2)
    tree.set(("a", "new", "leaf"), 3)
    assert tree.root == {"a": {"b": {"c": 2}, "new": {"leaf": 3}}, "other": shared}
    assert tree.root["other"] is shared
    assert root == {"a": {"b": {"c": 1}}, "other": shared}
    assert tree.set(("a", "b", "c", "too-deep"), 1) is False  # a scalar in the way stays
    assert tree.set(("list", 3), 1) is False and get(tree.root, ("list",)) is ABSENT  # no invented elements
    assert display(("spec", "containers", 0, "image")) == "spec.containers[0].image"
