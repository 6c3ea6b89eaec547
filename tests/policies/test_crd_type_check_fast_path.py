"""The shape check's fast path (compiled from the schema, exact JSON types looked up without a
call) must accept exactly the objects the reporting walk finds nothing in: otherwise a type
problem would go unreported."""
from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.mpijob.crd_type_check import _checked_schema, _compile, _walk, _well_typed, check_shape
from testing.builders import mpijob
from tests.conftest import upstream_v2beta1_jobs

JOBS = [mpijob(), *upstream_v2beta1_jobs().values()]
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False) | st.sampled_from(["", "1", "4Gi", "x"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["name", "image", "replicas", "x"]),
                                                                inner, max_size=3),
    max_leaves=6,
)


class _Text(str):
    pass


class _Count(int):
    pass


# Values of types decoded JSON never has: they miss the exact-type lookup and take the general
# test, which must still agree with the walk (a bool is no integer, a tuple no list).
UNUSUAL = st.sampled_from([_Text("x"), _Count(2), True, 1.5, (), ("a",), b"x"]) | st.dictionaries(
    st.sampled_from(["name", "image", "x"]), st.sampled_from(["a", 1, None]), max_size=2
).flatmap(lambda d: st.sampled_from([OrderedDict(d), MappingProxyType(d)]))


def _schema_at(path: tuple) -> Mapping[str, Any] | None:
    """The schema node the walk checks the value at ``path`` against, if any."""
    node: Mapping[str, Any] = _checked_schema()
    for step in path:
        if isinstance(step, int):
            node = node.get("items")
        elif step in (node.get("properties") or {}):
            node = node["properties"][step]
        else:
            node = node.get("additionalProperties")
        if not isinstance(node, Mapping):
            return None
    return node


def _shaped(node: Mapping[str, Any], depth: int = 3) -> st.SearchStrategy[Any]:
    """Values mostly of the node's declared shape (valid deep down, where the fast path does its
    work), some of them wrong at any depth."""
    wrong = JSON | UNUSUAL
    if node.get("x-kubernetes-int-or-string"):
        return st.integers(-2, 2) | st.sampled_from(["1", "500m"]) | wrong
    kind = node.get("type")
    if depth == 0 or kind not in ("object", "array"):
        typed = {"string": st.sampled_from(["", "a"]), "integer": st.integers(-2, 2),
                 "number": st.floats(-2, 2) | st.integers(-2, 2), "boolean": st.booleans()}.get(kind)
        return wrong if typed is None else typed | typed | wrong
    if kind == "array":
        return st.lists(_shaped(node["items"], depth - 1) if "items" in node else JSON, max_size=3) | wrong
    properties = node.get("properties") or {}
    extra = node.get("additionalProperties")
    keys = sorted(properties) + ["unknownField"]

    def entry(key: str) -> st.SearchStrategy[tuple[str, Any]]:
        sub = properties.get(key, extra if isinstance(extra, Mapping) else None)
        return st.tuples(st.just(key), JSON if sub is None else _shaped(sub, depth - 1))

    required = st.fixed_dictionaries({key: _shaped(properties.get(key, {}), depth - 1)
                                      for key in node.get("required") or ()})
    optional = st.lists(st.sampled_from(keys).flatmap(entry), max_size=4).map(dict)
    return st.tuples(required, optional).map(lambda parts: {**parts[1], **parts[0]}) | wrong


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


def _replaced(job: dict, path: tuple, value: Any) -> Any:
    if not path:
        return value
    changed = copy.deepcopy(job)
    parent = changed
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = value
    return changed


def _walk_finds_nothing(job: Any) -> bool:
    return not list(_walk(job, _checked_schema(), ""))


@settings(max_examples=min(settings.default.max_examples, 300))
@given(st.data())
def test_fast_path_agrees_with_the_walk(data: st.DataObject) -> None:
    job = data.draw(st.sampled_from(JOBS))
    path = data.draw(st.sampled_from(_paths(job)))
    node = _schema_at(path)
    value = data.draw(JSON | UNUSUAL if node is None else _shaped(node))
    changed = _replaced(job, path, value)
    assert _well_typed()(changed) == _walk_finds_nothing(changed)


def test_a_wrong_type_deep_in_a_template_is_still_reported() -> None:
    job = mpijob()
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["ports"] = [{"containerPort": "22"}]
    assert _well_typed()(job) is False
    [finding] = check_shape(job)
    assert finding.path == "spec.mpiReplicaSpecs[Worker].template.spec.containers[0].ports[0].containerPort"
    assert finding.message == "must be an integer, not a string"


def test_every_upstream_example_takes_the_fast_path() -> None:
    assert all(_well_typed()(job) for job in JOBS)


@pytest.mark.parametrize("schema", [
    {"properties": {"name": {"type": "string"}}},
    {"items": {"type": "string"}},
    {"type": "object", "enum": [{}], "properties": {"name": {"type": "string"}}},
    {"type": "array", "enum": [[]], "items": {"type": "string"}},
], ids=["untyped-object", "untyped-list", "object-enum", "list-enum"])
def test_schema_forms_the_fast_path_would_check_unlike_the_walk_are_refused(schema: dict) -> None:
    with pytest.raises(ValueError, match="unsupported schema node"):
        _compile(schema)

