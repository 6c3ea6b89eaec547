"""The Trainer memos' bounded map: the least recently used entry goes first, a read counts as use,
and the entries' weights (about the bytes they hold) stay within a budget, so a client sending
many different TrainJobs near the body limit cannot make the memos hold hundreds of MB."""
from __future__ import annotations

import copy

from policies.trainer.api import ApiShape
from policies.trainer.bounded_memo import BUDGET, LARGEST_SHARE, BoundedMemo
from policies.trainer.effective_job_memo import EffectiveJobMemo, inputs_key
from policies.trainer.trainjob_workload import _pod_groups, trainjob_workload
from policies.trainer.type_check import WellTypedInputs
from tests.policies.trainer.trainer_data import runtime, trainjob

LARGEST = BUDGET // LARGEST_SHARE


def test_the_least_recently_used_entry_is_dropped_past_the_size():
    memo: BoundedMemo[str, int] = BoundedMemo(2)
    memo.put("a", 1)
    memo.put("b", 2)
    assert memo.get("a") == 1  # "b" is now the least recently used
    memo.put("c", 3)
    assert (memo.get("a"), memo.get("b"), memo.get("c")) == (1, None, 3)
    assert len(memo) == 2


def test_a_put_of_a_known_key_replaces_its_value_without_growing():
    memo: BoundedMemo[str, int] = BoundedMemo(2)
    memo.put("a", 1, 10)
    memo.put("a", 2, 20)
    assert (memo.get("a"), len(memo), memo.weight) == (2, 1, 20)
    memo.clear()
    assert (memo.get("a"), len(memo), memo.weight) == (None, 0, 0)


def test_the_least_recently_used_entries_go_until_the_weights_fit_the_budget():
    memo: BoundedMemo[str, int] = BoundedMemo(100, budget=100, largest=50)
    for key in "abcd":
        memo.put(key, 1, 30)
    assert [k for k in "abcd" if memo.get(k) is not None] == ["b", "c", "d"] and memo.weight == 90
    assert memo.get("b") == 1  # now "c" is the least recently used
    memo.put("e", 1, 50)
    assert [k for k in "abcde" if memo.get(k) is not None] == ["b", "e"] and memo.weight == 80


def test_an_entry_heavier_than_the_largest_share_is_not_remembered():
    memo: BoundedMemo[str, int] = BoundedMemo(100, budget=100, largest=50)
    memo.put("a", 1, 30)
    memo.put("big", 2, 51)
    assert (memo.get("big"), memo.get("a"), len(memo), memo.weight) == (None, 1, 1, 30)
    memo.put("a", 3, 51)  # a known key given a value too heavy to keep: the old value goes too
    assert (memo.get("a"), len(memo), memo.weight) == (None, 0, 0)
    assert LARGEST == 2**19  # real TrainJobs' spec inputs are a few KiB


# --- the memos ------------------------------------------------------------------------------
RUNTIME = runtime("runtimes/v2.3.0/deepspeed_distributed.yaml")


def large_trainjob(index: int, length: int) -> dict:
    """A TrainJob whose spec inputs are about ``length`` bytes: one long env value in a patch."""
    job = trainjob(numNodes=4)
    env = [{"name": "PAYLOAD", "value": f"{index:08d}" + "x" * length}]
    job["spec"]["runtimePatches"] = [{"manager": "example.com/team", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
            "containers": [{"name": "node", "env": env}]}}}}}]}}}}]
    return job


def test_many_large_trainjobs_keep_the_effective_job_memo_within_its_budget():
    memo = EffectiveJobMemo()
    jobs = [large_trainjob(i, LARGEST - 1024) for i in range(12)]
    assert all(len(inputs_key(job)) <= LARGEST for job in jobs)
    effective = [memo(job, RUNTIME, ApiShape.V2_3) for job in jobs]
    assert len(memo) == BUDGET // LARGEST < 12
    assert memo._entries.weight <= BUDGET
    # the most recent ones are still there: asked again, the very same frozen job comes back
    assert memo(copy.deepcopy(jobs[-1]), RUNTIME, ApiShape.V2_3) is effective[-1]
    assert memo(copy.deepcopy(jobs[0]), RUNTIME, ApiShape.V2_3) is not effective[0]


def test_a_trainjob_too_large_to_remember_is_still_worked_out():
    memo = EffectiveJobMemo()
    job = large_trainjob(0, LARGEST)
    first = memo(job, RUNTIME, ApiShape.V2_3)
    assert len(memo) == 0
    again = memo(job, RUNTIME, ApiShape.V2_3)
    assert again is not first and again == first
    assert first.node is not None and first.node.containers[0].container["env"][-1]["name"] == "PAYLOAD"


def test_the_pod_groups_of_a_too_large_trainjob_are_not_remembered():
    _pod_groups.clear()
    job = large_trainjob(0, LARGEST)
    effective = EffectiveJobMemo()(job, RUNTIME, ApiShape.V2_3)
    assert trainjob_workload(job, effective).workers.count == 3
    assert len(_pod_groups) == 0
    small = trainjob(numNodes=4)
    effective = EffectiveJobMemo()(small, RUNTIME, ApiShape.V2_3)
    assert trainjob_workload(small, effective).workers is trainjob_workload(small, effective).workers
    assert len(_pod_groups) == 1


def test_well_typed_inputs_keep_within_the_budget_and_skip_a_too_large_key():
    seen = WellTypedInputs()
    seen.add(b"x" * (LARGEST + 1))
    assert len(seen) == 0
    keys = [bytes([i]) * LARGEST for i in range(12)]
    for key in keys:
        seen.add(key)
    assert len(seen) == BUDGET // LARGEST and keys[-1] in seen and keys[0] not in seen
