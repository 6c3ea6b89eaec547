"""The TrainJob type check walks the spec fields the effective job is computed from only once per
exact value: a TrainJob whose inputs were found well typed before is checked for the rest, and
finds exactly what the whole check finds."""
from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.trainer.effective_job_memo import inputs_key
from policies.trainer.type_check import check_trainjob_shape, well_typed_inputs
from tests.policies.trainer.trainer_data import trainjob

BAD_PATCH = [{"manager": "example.com/x", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
    {"name": "node", "template": {"spec": {"template": {"spec": {"tolerations": "all"}}}}}]}}}}]


@pytest.fixture(autouse=True)
def _fresh() -> Any:
    well_typed_inputs.clear()
    yield
    well_typed_inputs.clear()


def _fields(trainjob_obj: Any, key: bytes | str | None) -> list[str]:
    return [f.path for f in check_trainjob_shape(trainjob_obj, key)]


def test_known_inputs_are_not_checked_again_but_the_rest_is() -> None:
    good = trainjob(numNodes=2, resourcesPerNode={"limits": {"nvidia.com/gpu": 2}})
    assert check_trainjob_shape(good, inputs_key(good)) == [] and len(well_typed_inputs) == 1
    # the same inputs, other fields of the wrong type: found as by the whole check
    bad = copy.deepcopy(good)
    bad["metadata"]["labels"] = {"team": 7}
    bad["spec"]["suspend"] = "yes"
    assert inputs_key(bad) in well_typed_inputs
    assert check_trainjob_shape(bad, inputs_key(bad)) == check_trainjob_shape(bad)
    assert _fields(bad, inputs_key(bad)) == ["metadata.labels[team]", "spec.suspend"]
    # a spec that is not even a map has the key of a spec without inputs, once found well typed
    no_inputs = {"metadata": {"name": "empty"}, "spec": {}}
    assert check_trainjob_shape(no_inputs, inputs_key(no_inputs)) == []
    bad["spec"] = "all of it"
    assert inputs_key(bad) == inputs_key(no_inputs)
    assert _fields(bad, inputs_key(bad)) == _fields(bad, None) == ["metadata.labels[team]", "spec"]


@pytest.mark.parametrize("change", ["numNodes", "patch"])
def test_inputs_of_the_wrong_type_are_never_remembered(change: str) -> None:
    job = trainjob(numNodes="four") if change == "numNodes" else trainjob(numNodes=2)
    if change == "patch":
        job["spec"]["runtimePatches"] = copy.deepcopy(BAD_PATCH)
    expected = ["spec.trainer.numNodes"] if change == "numNodes" else [
        "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec.tolerations"]
    for _ in range(2):
        assert _fields(job, inputs_key(job)) == expected
    assert len(well_typed_inputs) == 0


def test_well_typed_inputs_with_a_bad_field_elsewhere_are_not_remembered() -> None:
    job = trainjob(numNodes=2)
    job["spec"]["managedBy"] = 3
    assert _fields(job, inputs_key(job)) == ["spec.managedBy"] and len(well_typed_inputs) == 0


def test_values_that_compare_equal_but_differ_in_type_are_checked_on_their_own() -> None:
    whole = trainjob(numNodes=1)
    assert check_trainjob_shape(whole, inputs_key(whole)) == []
    for value in (1.0, True, "1"):
        job = trainjob(numNodes=value)
        assert job == whole or value == "1"
        assert _fields(job, inputs_key(job)) == ["spec.trainer.numNodes"], value


def test_a_key_of_json_text_is_never_remembered() -> None:
    job = trainjob(numNodes=2)
    text = '[{"name":"deepspeed-distributed"}]'
    assert check_trainjob_shape(job, text) == [] and len(well_typed_inputs) == 0


def test_the_least_recently_used_key_goes_first() -> None:
    from policies.trainer.type_check import WellTypedInputs

    known = WellTypedInputs(size=2)
    known.add(b"a")
    known.add(b"b")
    assert b"a" in known  # used again: now the most recent
    known.add(b"c")
    assert (b"a" in known, b"b" in known, b"c" in known, len(known)) == (True, False, True, 2)


_values = st.one_of(st.none(), st.booleans(), st.integers(-2, 3), st.floats(allow_nan=False, width=16),
                    st.text(max_size=2), st.lists(st.integers(0, 2), max_size=2), st.dictionaries(st.text(max_size=1), st.integers(0, 2), max_size=2))


@given(st.dictionaries(st.sampled_from(["numNodes", "numProcPerNode", "image", "command", "env"]), _values),
       st.one_of(st.none(), st.just(BAD_PATCH), st.just([])), st.one_of(st.none(), _values))
def test_with_or_without_the_key_the_findings_are_the_same(trainer: dict[str, Any], patches: Any, labels: Any) -> None:
    job = trainjob(**trainer)
    if patches is not None:
        job["spec"]["runtimePatches"] = copy.deepcopy(patches)
    if labels is not None:
        job["metadata"]["labels"] = labels
    key = inputs_key(job)
    whole = check_trainjob_shape(job)
    assert check_trainjob_shape(job, key) == whole  # first: found and maybe remembered
    assert check_trainjob_shape(job, key) == whole  # again: maybe from what was remembered
    # a twin with the same inputs and well-typed labels: remembered, then the bad labels found again
    twin = {**job, "metadata": {"name": "twin"}}
    assert check_trainjob_shape(twin, key) == check_trainjob_shape(twin)
    assert check_trainjob_shape(job, key) == whole
