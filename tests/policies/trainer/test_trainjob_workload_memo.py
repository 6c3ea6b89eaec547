"""The pod groups of a TrainJob's view are remembered with its effective job: the same for every
request on the same effective job and ``numNodes``, worked out again for another ``numNodes``,
while the name, namespace, queue and lifecycle come from each request's own object."""
from __future__ import annotations

import copy

from policies.trainer.api import ApiShape
from policies.trainer.effective_job_memo import EffectiveJobMemo
from policies.trainer.trainjob_workload import pod_groups, trainjob_workload
from policies.workload import Role
from tests.policies.trainer.trainer_data import runtime, trainjob

DEEPSPEED = "runtimes/v2.3.0/deepspeed_distributed.yaml"


def test_requests_on_the_same_effective_job_share_its_pod_groups_and_keep_their_own_metadata() -> None:
    memo = EffectiveJobMemo()
    rt = runtime(DEEPSPEED)
    first = trainjob(numNodes=4, name="first")
    second = copy.deepcopy(first)
    second["metadata"].update(name="second", namespace="team-b", labels={"kueue.x-k8s.io/queue-name": "q"})
    second["spec"]["suspend"] = True
    effective = memo(first, rt, ApiShape.V2_3)
    assert memo(second, rt, ApiShape.V2_3) is effective
    one, two = trainjob_workload(first, effective), trainjob_workload(second, effective)
    assert two.workers is one.workers and two.launcher is one.launcher and two.slots is one.slots
    assert (one.name, one.namespace, one.queue, one.lifecycle.suspended) == ("first", "team-a", None, False)
    assert (two.name, two.namespace, two.queue, two.lifecycle.suspended) == ("second", "team-b", "q", True)
    assert two.object is second


def test_another_num_nodes_on_the_same_effective_job_gets_its_own_pod_groups() -> None:
    rt = runtime(DEEPSPEED)
    effective = EffectiveJobMemo()(trainjob(numNodes=4), rt, ApiShape.V2_3)
    four = trainjob_workload(trainjob(numNodes=4), effective)
    three = trainjob_workload(trainjob(numNodes=3), effective)  # a caller pairing it with another TrainJob
    not_whole = trainjob_workload(trainjob(numNodes="3"), effective)
    assert four.workers.role is Role.WORKER
    # the launcher runs as one of the nodes: one fewer node pod than numNodes
    assert (four.workers.count, three.workers.count, not_whole.workers.count) == (3, 2, None)
    assert three.workers is not four.workers and three.workers.count == pod_groups(effective, 3).workers.count
