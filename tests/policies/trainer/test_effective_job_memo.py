"""The memo of effective jobs gives what a fresh computation gives, for every runtime of the test
data and for random runtimes and TrainJobs; a changed runtime or a different TrainJob spec is
a new entry; what it hands out cannot be changed by a reader."""
from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from policies.trainer.api import ApiShape
from policies.trainer.effective_job import SPEC_INPUTS, effective_job
from policies.trainer.effective_job_memo import EffectiveJobMemo, inputs_key
from policies.trainer.read_only import read_only
from tests.policies.trainer.test_effective_job_golden import GOLDEN, RUNTIMES, standard_trainjob, summary
from tests.policies.trainer.test_effective_job_properties import runtimes, trainjobs
from tests.policies.trainer.trainer_data import runtime, trainjob

DEEPSPEED = "runtimes/v2.3.0/deepspeed_distributed.yaml"


@pytest.mark.parametrize("shape", list(ApiShape), ids=str)
@pytest.mark.parametrize("path", sorted(RUNTIMES))
def test_a_remembered_effective_job_is_the_golden_one(path: str, shape: ApiShape) -> None:
    memo = EffectiveJobMemo()
    rt = RUNTIMES[path]
    job = standard_trainjob(rt["metadata"]["name"])
    first = memo(job, rt, shape)
    again = memo(copy.deepcopy(job), rt, shape)  # another request with the same spec
    assert again is first and len(memo) == 1
    assert again == effective_job(job, rt, shape)
    golden = GOLDEN / f"{path.replace('/', '__').removesuffix('.yaml')}.{shape.value}.json"
    assert summary(again) == json.loads(golden.read_text())


def test_a_changed_runtime_gives_the_new_effective_job() -> None:
    memo = EffectiveJobMemo()
    old = runtime(DEEPSPEED)
    old["metadata"]["resourceVersion"] = "100"
    job = trainjob(numNodes=4)
    before = memo(job, old, ApiShape.V2_3)
    assert before.slots == 1
    # The watch cache replaces the object on every event: a new object, a new resourceVersion
    new = copy.deepcopy(old)
    new["metadata"]["resourceVersion"] = "101"
    new["spec"]["mlPolicy"]["mpi"]["numProcPerNode"] = 4
    after = memo(job, new, ApiShape.V2_3)
    assert after.slots == 4 and after == effective_job(job, new, ApiShape.V2_3)
    assert memo(job, old, ApiShape.V2_3) is before  # a view still holding the old one reads the old job


def test_two_trainjobs_with_different_patches_do_not_share_an_entry() -> None:
    memo = EffectiveJobMemo()
    rt = runtime(DEEPSPEED)

    def patched(zone: str) -> dict[str, Any]:
        job = trainjob(numNodes=2)
        job["spec"]["runtimePatches"] = [{"manager": "example.com/team", "trainingRuntimeSpec": {"template": {"spec": {
            "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
                "nodeSelector": {"zone": zone}}}}}}]}}}}]
        return job

    a, b = memo(patched("a"), rt, ApiShape.V2_3), memo(patched("b"), rt, ApiShape.V2_3)
    assert a.node is not None and b.node is not None
    assert (a.node.pod_spec["nodeSelector"], b.node.pod_spec["nodeSelector"]) == ({"zone": "a"}, {"zone": "b"})
    assert len(memo) == 2


def test_the_key_order_of_resources_is_part_of_the_key() -> None:
    # The controller counts the first resource named like a GPU, in map order
    memo = EffectiveJobMemo()
    rt = runtime(DEEPSPEED)
    one = trainjob(resourcesPerNode={"limits": {"nvidia.com/gpu": 2, "amd.com/gpu": 4}})
    other = trainjob(resourcesPerNode={"limits": {"amd.com/gpu": 4, "nvidia.com/gpu": 2}})
    assert (memo(one, rt, ApiShape.V2_3).slots, memo(other, rt, ApiShape.V2_3).slots) == (2, 4)


def test_the_api_shape_is_part_of_the_key() -> None:
    memo = EffectiveJobMemo()
    rt = runtime(DEEPSPEED)
    job = trainjob(resourcesPerNode={"limits": {"nvidia.com/gpu": 2}})
    replaced, merged = memo(job, rt, ApiShape.V2_2), memo(job, rt, ApiShape.V2_3)
    assert replaced == effective_job(job, rt, ApiShape.V2_2) and merged == effective_job(job, rt, ApiShape.V2_3)
    assert replaced != merged


def test_what_it_hands_out_cannot_be_changed() -> None:
    memo = EffectiveJobMemo()
    rt = runtime(DEEPSPEED)
    job = trainjob(numNodes=2, resourcesPerNode={"limits": {"nvidia.com/gpu": 2}})
    shared = memo(job, rt, ApiShape.V2_3)
    node = shared.node
    assert node is not None
    container = node.containers[0].container
    with pytest.raises(TypeError, match="not to be changed"):
        node.pod_spec["nodeSelector"] = {"zone": "a"}  # type: ignore[index]
    with pytest.raises(TypeError):
        container["resources"]["limits"]["nvidia.com/gpu"] = 8
    with pytest.raises(TypeError):
        node.pod_spec["containers"].append({"name": "sidecar"})
    with pytest.raises(TypeError):
        node.pod_template.setdefault("metadata", {})  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        node.count = 100  # type: ignore[misc]
    # a copy is the reader's own, and writable
    mine = copy.deepcopy(node.pod_template)
    mine["spec"]["containers"].append({"name": "sidecar"})
    mine["spec"]["nodeSelector"] = {"zone": "a"}
    assert memo(job, rt, ApiShape.V2_3) is shared and shared == effective_job(job, rt, ApiShape.V2_3)
    # the container of the list is the very map its pod template lists
    assert container is node.pod_spec["containers"][0]


def test_it_shares_nothing_with_the_request_or_the_runtime() -> None:
    memo = EffectiveJobMemo()
    rt = runtime(DEEPSPEED)
    job = trainjob(numNodes=2, command=["mpirun", "train"], resourcesPerNode={"limits": {"nvidia.com/gpu": 2}})
    shared = memo(job, rt, ApiShape.V2_3)
    # the request that made the entry is then changed by its owner (a mutation's working copy
    # never does this, but nothing the next request reads may depend on it)
    job["spec"]["trainer"]["command"].append("--evil")
    rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0][
        "image"] = "evil"
    assert shared == effective_job(trainjob(numNodes=2, command=["mpirun", "train"],
                                            resourcesPerNode={"limits": {"nvidia.com/gpu": 2}}),
                                   runtime(DEEPSPEED), ApiShape.V2_3)


def test_the_least_recently_used_entry_goes_first() -> None:
    memo = EffectiveJobMemo(size=2)
    rt = runtime(DEEPSPEED)
    jobs = [trainjob(numNodes=n) for n in (1, 2, 3)]
    first = memo(jobs[0], rt, ApiShape.V2_3)
    memo(jobs[1], rt, ApiShape.V2_3)
    assert memo(jobs[0], rt, ApiShape.V2_3) is first  # used again: now the most recent
    memo(jobs[2], rt, ApiShape.V2_3)  # the third entry pushes out jobs[1]'s
    assert len(memo) == 2
    assert memo(jobs[0], rt, ApiShape.V2_3) is first
    assert len(memo) == 2


def test_a_spec_that_is_not_json_is_computed_and_not_kept() -> None:
    import datetime

    memo = EffectiveJobMemo()
    rt = runtime(DEEPSPEED)
    job = trainjob(numNodes=2)
    job["spec"]["trainer"]["env"] = [{"name": "WHEN", "value": datetime.date(2026, 1, 1)}]  # YAML reads dates
    assert memo(job, rt, ApiShape.V2_3) == effective_job(job, rt, ApiShape.V2_3)
    assert len(memo) == 0


class _Recording(Mapping[str, Any]):
    """A TrainJob spec that notes which of its fields are read."""

    def __init__(self, data: Mapping[str, Any], seen: set[str]) -> None:
        self._data, self._seen = data, seen

    def __getitem__(self, key: str) -> Any:
        self._seen.add(key)
        return self._data[key]

    def __contains__(self, key: object) -> bool:
        self._seen.add(str(key))
        return key in self._data

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("effective_job walked the whole spec: every field would be an input")

    def __len__(self) -> int:
        return len(self._data)


@pytest.mark.parametrize("shape", list(ApiShape), ids=str)
def test_the_memo_keys_on_every_spec_field_the_effective_job_reads(shape: ApiShape) -> None:
    rt = runtime(DEEPSPEED)
    job = trainjob(numNodes=2, resourcesPerNode={"limits": {"nvidia.com/gpu": 2}})
    job["spec"].update(runtimePatches=[], podTemplateOverrides=[], suspend=True, managedBy="x", labels={"a": "b"})
    seen: set[str] = set()
    effective_job({**job, "spec": _Recording(job["spec"], seen)}, rt, shape)
    assert seen <= set(SPEC_INPUTS), f"effective_job reads {sorted(seen - set(SPEC_INPUTS))}: add to SPEC_INPUTS"
    assert inputs_key(job) != inputs_key({**job, "spec": {**job["spec"], "trainer": {"numNodes": 3}}})


@st.composite
def memo_cases(draw: st.DrawFn) -> tuple[ApiShape, dict[str, Any], list[dict[str, Any]]]:
    shape = draw(st.sampled_from(list(ApiShape)))
    rt = draw(runtimes())
    names = [job["name"] for job in rt["spec"]["template"]["spec"]["replicatedJobs"]]
    return shape, rt, draw(st.lists(trainjobs(names, shape), min_size=2, max_size=4))


@given(memo_cases(), st.data())
def test_remembered_is_computed_for_random_runtimes_and_trainjobs(case: tuple[ApiShape, dict[str, Any], list[dict[str, Any]]],
                                                                  data: st.DataObject) -> None:
    shape, rt, jobs = case
    assume(len({inputs_key(job) for job in jobs}) > 1)  # at least two different specs on one runtime
    memo = EffectiveJobMemo(size=data.draw(st.integers(1, 4)))
    # requests in any order, some of them repeated
    for job in data.draw(st.lists(st.sampled_from(jobs), min_size=len(jobs), max_size=2 * len(jobs))) + jobs:
        assert memo(job, rt, shape) == effective_job(job, rt, shape)
    # the runtime changed: a new object with other content
    changed = copy.deepcopy(rt)
    changed["spec"]["mlPolicy"]["numNodes"] = data.draw(st.integers(1, 5))
    changed["spec"]["mlPolicy"]["mpi"]["numProcPerNode"] = data.draw(st.integers(1, 5))
    for job in jobs:
        assert memo(job, changed, shape) == effective_job(job, changed, shape)


@pytest.mark.parametrize("values", [(1, 1.0, True), ("1", 1), (0.0, -0.0, 0, False), (None, "", [], {})], ids=repr)
def test_values_that_compare_equal_but_differ_in_type_have_their_own_keys(values: tuple[Any, ...]) -> None:
    keys = {inputs_key(trainjob(numNodes=value)) for value in values}
    assert len(keys) == len(values)


def test_the_same_maps_in_another_order_have_another_key() -> None:
    # the controller takes the first GPU resource in map order
    first = trainjob(resourcesPerNode={"limits": {"nvidia.com/gpu": 1, "amd.com/gpu": 2}})
    second = trainjob(resourcesPerNode={"limits": {"amd.com/gpu": 2, "nvidia.com/gpu": 1}})
    assert first == second and inputs_key(first) != inputs_key(second)


def test_the_key_does_not_depend_on_who_else_holds_a_part_of_the_spec() -> None:
    job = trainjob(numNodes=2, resourcesPerNode={"limits": {"nvidia.com/gpu": 2}})
    job["spec"]["runtimePatches"] = [{"manager": "kueue", "trainingRuntimeSpec": {"template": {"spec": {}}}}]
    alone = inputs_key(copy.deepcopy(job))
    held = (job["spec"]["trainer"], job["spec"]["runtimePatches"][0], list(job["spec"]["trainer"].values()))
    assert inputs_key(job) == alone and held


def test_maps_of_other_types_are_keyed_by_their_json_text() -> None:
    memo = EffectiveJobMemo()
    rt = runtime(DEEPSPEED)
    job = trainjob(numNodes=2)
    shared = {**job, "spec": read_only(job["spec"])}  # what a memo or a cache may hand out
    assert isinstance(inputs_key(shared), str) and isinstance(inputs_key(job), bytes)
    assert memo(shared, rt, ApiShape.V2_3) is memo(read_only(job), rt, ApiShape.V2_3)
    assert len(memo) == 1
