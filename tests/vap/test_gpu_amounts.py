"""The exported policy counts a GPU amount that is not a whole number of 0 or more as 0 in a
pod's total, as the webhook does: such an amount is reported on its own, and it neither lowers
nor raises what the pod asks for. Each finding the webhook reports is one the policy reports."""
from __future__ import annotations

from typing import Any

import pytest

from testing.builders import mpijob
from tests.vap.test_parity import BUILT_IN, exported
from tests.vap.verdicts import vap_review, webhook_lines


def worker_gpus(*limits: Any) -> dict[str, Any]:
    job = mpijob()
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"] = [
        {"name": f"c-{i}", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": amount}}}
        for i, amount in enumerate(limits)]
    return job


@pytest.mark.parametrize(("limits", "over"), [
    ((-1, 17), ["a worker pod may use at most 16 nvidia.com/gpu (asked 17)"]),
    (("500m", 17), ["a worker pod may use at most 16 nvidia.com/gpu (asked 17)"]),
    (("15.5", 1), []),
], ids=["negative", "fraction", "fraction-at-max"])
def test_amounts_that_are_not_whole_count_nothing_in_the_pod_total(limits: tuple[Any, ...], over: list[str]) -> None:
    job = worker_gpus(*limits)
    messages = [answer.message for answer in vap_review(exported("built-in"), job, "team-a").answers]
    assert sorted(m.split(": ", 1)[0] + ":" for m in messages) == sorted(webhook_lines(BUILT_IN, job, "team-a"))
    assert [m.split(": ", 3)[3].split(";")[0] for m in messages if "may use at most" in m] == over
