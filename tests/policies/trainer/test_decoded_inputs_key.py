"""The key of a decoded request's spec inputs (``decoded_inputs_key``: orjson's text) is exact:
two TrainJobs decoded from JSON get the same key only when the inputs of their effective jobs are
the same values, of the same types, maps in the same order; and it depends on nothing else (who
else holds a part of the spec, which strings the decoder shared)."""
from __future__ import annotations

import copy
import json
import marshal
import math
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from policies.trainer.api import ApiShape
from policies.trainer.effective_job import SPEC_INPUTS
from policies.trainer.effective_job_memo import EffectiveJobMemo, decoded_inputs_key, inputs_key
from policies.trainer.type_check import check_trainjob_shape, well_typed_inputs
from tests.policies.trainer.test_well_typed_inputs import BAD_PATCH
from tests.policies.trainer.trainer_data import runtime, trainjob

DEEPSPEED = "runtimes/v2.3.0/deepspeed_distributed.yaml"


@pytest.fixture(autouse=True)
def _fresh() -> Any:
    well_typed_inputs.clear()
    yield
    well_typed_inputs.clear()


def _decoded(job: Any) -> Any:
    """``job`` as a request body decodes: its JSON text read back by ``json.loads``."""
    return json.loads(json.dumps(job))


def _exact(value: Any) -> bytes:
    """A value written with its types and map order (marshal: ``1``, ``1.0`` and ``True`` differ)."""
    return marshal.dumps(value, 2)


def _inputs(job: Any) -> dict[str, Any]:
    return {name: job["spec"][name] for name in SPEC_INPUTS if job["spec"].get(name) is not None}


@pytest.mark.parametrize("values", [(1, 1.0, True), ("1", 1), (0.0, -0.0, 0, False), ("", [], {}), (1e16, 10**16),
                                    ("null", "None", "")], ids=repr)
def test_values_that_compare_equal_but_differ_in_type_have_their_own_keys(values: tuple[Any, ...]) -> None:
    keys = {decoded_inputs_key(_decoded(trainjob(numNodes=value))) for value in values}
    assert len(keys) == len(values)


def test_the_same_maps_in_another_order_have_another_key() -> None:
    first = _decoded(trainjob(resourcesPerNode={"limits": {"nvidia.com/gpu": 1, "amd.com/gpu": 2}}))
    second = _decoded(trainjob(resourcesPerNode={"limits": {"amd.com/gpu": 2, "nvidia.com/gpu": 1}}))
    assert first == second and decoded_inputs_key(first) != decoded_inputs_key(second)


def test_shared_or_unshared_strings_and_other_holders_give_the_same_key() -> None:
    env = [{"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "OMP_NUM_THREADS", "value": "INFO"}]
    patch = {"manager": "example.com/x", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [{"name": "node", "env": env}]}}}}}]}}}}
    job = trainjob(numNodes=2)
    job["spec"]["runtimePatches"] = [patch]
    decoded = _decoded(job)  # json.loads shares the key strings between the maps of one document
    unshared = copy.deepcopy(job)
    for item in unshared["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0][
            "template"]["spec"]["template"]["spec"]["containers"][0]["env"]:
        item["value"] = "".join(["IN", "FO"])  # a string of its own, not the one the other item holds
    alone = decoded_inputs_key(copy.deepcopy(decoded))
    held = (decoded["spec"]["trainer"], decoded["spec"]["runtimePatches"][0], list(decoded["spec"].values()))
    assert decoded_inputs_key(decoded) == decoded_inputs_key(unshared) == alone and held


def test_an_absent_input_and_a_null_one_share_a_key_as_the_effective_job_reads_them() -> None:
    job = trainjob(numNodes=2)
    nulls = copy.deepcopy(job)
    nulls["spec"].update(runtimePatches=None, podTemplateOverrides=None)
    assert decoded_inputs_key(job) == decoded_inputs_key(nulls) == b'{"runtimeRef":' + json.dumps(
        job["spec"]["runtimeRef"], separators=(",", ":")).encode() + b',"trainer":{"numNodes":2}}'


@pytest.mark.parametrize("value", [None, math.nan, math.inf, -math.inf, "/dev/null", 2**64, {"a": None}], ids=repr)
def test_what_orjson_cannot_write_exactly_gets_the_marshal_key(value: Any) -> None:
    # orjson writes None, NaN and both infinities as null; larger ints than 64 bits it refuses
    job = trainjob(numNodes=2, resourcesPerNode={"limits": {"cpu": value}})
    assert decoded_inputs_key(job) == inputs_key(job)


def test_subclasses_of_json_types_get_the_key_of_other_types() -> None:
    # not what a body decodes to; orjson would write them as their base types
    from policies.trainer.effective_job_memo import inputs_key_or_none
    from policies.trainer.read_only import ReadOnlyDict

    class Name(str):
        pass

    class Count(int):
        pass

    for value in (ReadOnlyDict({"nvidia.com/gpu": 1}), Name("x"), Count(1)):
        job = trainjob(numNodes=2, resourcesPerNode={"limits": value})
        assert decoded_inputs_key(job) == inputs_key_or_none(job)
    assert isinstance(decoded_inputs_key(trainjob(resourcesPerNode=ReadOnlyDict({"limits": {}}))), str)


def test_none_nan_and_infinity_have_their_own_keys() -> None:
    keys = {decoded_inputs_key(trainjob(numNodes=value)) for value in (None, math.nan, math.inf, -math.inf)}
    assert len(keys) == 4


def test_the_text_and_the_marshal_bytes_never_meet() -> None:
    job = trainjob(numNodes=2)
    text, written = decoded_inputs_key(job), inputs_key(job)
    assert isinstance(text, bytes) and isinstance(written, bytes)
    assert text[:1] == b"{" and written[:1] == b"["


_json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.integers(), st.sampled_from([0.0, -0.0, 1.0, 0.5]),
                          st.floats(), st.text(max_size=3), st.sampled_from(["null", "1", "true", ""]))
_json_values = st.recursive(_json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["a", "b", "c", "null", "1"]), inner, max_size=3)),
    max_leaves=8)
_specs = st.fixed_dictionaries({}, optional={name: _json_values for name in SPEC_INPUTS})


@given(_specs)
def test_the_text_reads_back_as_the_very_inputs(spec: dict[str, Any]) -> None:
    job = {"spec": spec}
    key = decoded_inputs_key(job)
    if isinstance(key, bytes) and key[:1] == b"{":
        assert _exact(json.loads(key)) == _exact(_inputs(job))
    else:
        assert key == inputs_key(job)


@given(_specs, st.data())
def test_two_specs_share_a_key_exactly_when_their_inputs_are_the_same(first: dict[str, Any], data: st.DataObject) -> None:
    second = data.draw(st.one_of(st.just(copy.deepcopy(first)), _specs), label="second")
    same = _exact(_inputs({"spec": first})) == _exact(_inputs({"spec": second}))
    assert (decoded_inputs_key({"spec": first}) == decoded_inputs_key({"spec": second})) == same


@given(_specs)
def test_a_spec_and_its_decoded_copy_share_a_key(spec: dict[str, Any]) -> None:
    assume(all(not isinstance(v, float) or math.isfinite(v) for v in _leaves(spec)))  # JSON text has no NaN
    assert decoded_inputs_key({"spec": spec}) == decoded_inputs_key(_decoded({"spec": spec}))


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    if isinstance(value, list):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


def test_the_memo_finds_a_decoded_request_by_its_key() -> None:
    memo = EffectiveJobMemo()
    rt = runtime(DEEPSPEED)
    first, second = (_decoded(trainjob(numNodes=2, name=name)) for name in ("a", "b"))
    job = memo(first, rt, ApiShape.V2_3, decoded_inputs_key(first))
    assert memo(second, rt, ApiShape.V2_3, decoded_inputs_key(second)) is job and len(memo) == 1


@given(st.dictionaries(st.sampled_from(["numNodes", "numProcPerNode", "image", "command", "env"]), _json_values),
       st.one_of(st.none(), st.just(BAD_PATCH), st.just([])), st.one_of(st.none(), _json_values))
def test_with_or_without_the_decoded_key_the_type_findings_are_the_same(trainer: dict[str, Any], patches: Any,
                                                                       labels: Any) -> None:
    job = trainjob(**trainer)
    if patches is not None:
        job["spec"]["runtimePatches"] = copy.deepcopy(patches)
    if labels is not None:
        job["metadata"]["labels"] = labels
    assume(all(not isinstance(v, float) or math.isfinite(v) for v in _leaves(job)))  # JSON text has no NaN
    job = _decoded(job)
    key = decoded_inputs_key(job)
    whole = check_trainjob_shape(job)
    assert check_trainjob_shape(job, key) == whole  # first: found and maybe remembered
    assert check_trainjob_shape(job, key) == whole  # again: maybe from what was remembered
    twin = {**job, "metadata": {"name": "twin"}}  # the same inputs, well-typed labels
    assert check_trainjob_shape(twin, key) == check_trainjob_shape(twin)
    assert check_trainjob_shape(job, key) == whole
