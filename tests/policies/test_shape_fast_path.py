"""The shape check's fast path (one compiled closure per schema node) must accept exactly the
objects the reporting walk finds nothing in: otherwise a type problem would go unreported."""
from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from policies.shape import _checked_schema, _walk, _well_typed, check_shape
from tests.builders import mpijob
from tests.conftest import upstream_v2beta1_jobs

JOBS = [mpijob(), *upstream_v2beta1_jobs().values()]
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False) | st.sampled_from(["", "1", "4Gi", "x"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["name", "image", "replicas", "x"]),
                                                                inner, max_size=3),
    max_leaves=6,
)


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


@settings(max_examples=300)
@given(st.data())
def test_fast_path_agrees_with_the_walk(data: st.DataObject) -> None:
    job = data.draw(st.sampled_from(JOBS))
    path = data.draw(st.sampled_from(_paths(job)))
    changed = _replaced(job, path, data.draw(JSON))
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
