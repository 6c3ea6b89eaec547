"""The exported policies stay within the API server's CEL cost limits on the widest jobs we
support, and their cost grows with the job's size, never faster.

The limits (k8s.io/apiserver/pkg/apis/cel): PerCallLimit, 1,000,000 per expression, and
RuntimeCELCostBudget, 10,000,000 per evaluation of a (policy, binding). The estimate is
webhook.cel.cel_runtime's pessimistic model of cel-go's runtime cost; a margin of ten is kept so
that the model's approximations cannot matter.
"""
from __future__ import annotations

import copy
import json
from functools import lru_cache
from typing import Any

import pytest

from policies.vap import objects
from testing.builders import mpijob
from tests.vap.corpus import policies
from tests.vap.nesting import nested_walks, policy_expressions
from webhook.cel.policy_admission import PER_EVALUATION_BUDGET, PER_EXPRESSION_LIMIT, Request, Review, review
from webhook.cel.cel_runtime import compile_expression

MARGIN = 10
# etcd refuses objects over 1.5 MiB: no stored MPIJob is larger.
MAX_OBJECT_BYTES = 1536 * 1024
POLICIES = policies()


@lru_cache(maxsize=None)
def exported(name: str) -> list[dict[str, Any]]:
    return objects(POLICIES[name], kinds=("MPIJob",))  # the TrainJob ones: test_trainjob_cost.py


def wide_job(containers: int, init: int = 0, env: int = 0, *, violating: bool = False) -> dict[str, Any]:
    """Both pod templates with ``containers`` containers and ``init`` init containers (every
    fifth a sidecar), each with ``env`` variables; with ``violating``, every container also
    breaks gpus-per-worker, and the job every other exported rule."""
    job = mpijob("p" * 60 if violating else "p" * 50, workers=101 if violating else 100, slots=9 if violating else 8)
    gpus = "1.5" if violating else 1
    for replica in ("Launcher", "Worker"):
        pod = job["spec"]["mpiReplicaSpecs"][replica]["template"]["spec"]
        pod["containers"] = [{
            "name": f"c{i}", "image": "registry.example.com/team/mpi:1.0",
            "env": [{"name": f"VAR_{j}", "value": "v" * 16} for j in range(env)],
            "resources": {"limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": gpus}},
        } for i in range(containers)]
        pod["initContainers"] = [{
            "name": f"i{i}", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": 0}},
            **({"restartPolicy": "Always"} if i % 5 == 0 else {}),
        } for i in range(init)]
    job["spec"]["runPolicy"]["schedulingPolicy"] = {
        "minResources": {f"example.com/r{i}": "-1" if violating else "1" for i in range(50)}}
    if violating:
        job["spec"]["mpiReplicaSpecs"]["Master"] = {"replicas": 1}
        job["spec"]["runPolicy"].update(cleanPodPolicy="Sometimes", backoffLimit=-1, managedBy="example.com/x")
        job["spec"]["sshAuthMountPath"] = "relative"
    return job


def _review(policy: str, job: dict[str, Any], *, old: dict[str, Any] | None = None) -> Review:
    request = Request(job, "team-a", old, "UPDATE" if old is not None else "CREATE")
    return review(exported(policy), request)


def _worst(result: Review) -> tuple[int, int]:
    """(the costliest evaluation, the costliest single expression)."""
    return (max(m.total for m in result.meters.values()),
            max(max(m.per_expression.values()) for m in result.meters.values()))


SHAPES = {
    # 300 containers and 60 init containers per pod, short env lists: about 0.7 MB
    "300-containers": dict(containers=300, init=60, env=10),
    # few containers with long env lists: about 1.4 MB
    "long-env-lists": dict(containers=20, env=700),
    # the widest shape at a tenth of its size: the same checks reach every message in every run
    "30-containers": dict(containers=30, init=6, env=10),
}
# cel-python takes half a minute for one review of the widest shape: it runs under the ci profile.
CI_ONLY = {"300-containers"}


def _case(policy: str, shape: str, operation: str) -> Any:
    return pytest.param(policy, shape, operation, marks=[pytest.mark.ci_only] if shape in CI_ONLY else [])


CASES = [_case("built-in", shape, operation) for shape in sorted(SHAPES) for operation in ("CREATE", "UPDATE")]
# Several (rule, action) policies per rule: the same checks, more variables.
CASES += [_case("actions-and-overrides", shape, "CREATE") for shape in ("300-containers", "30-containers")]


@pytest.mark.parametrize(("policy", "shape", "operation"), CASES)
def test_the_widest_jobs_stay_far_within_the_budget(policy: str, shape: str, operation: str) -> None:
    job = wide_job(**SHAPES[shape], violating=True)
    assert len(json.dumps(job)) < MAX_OBJECT_BYTES
    # On UPDATE every check also reads the stored object: the costliest case is one that had
    # the same problems (each message is computed twice and the containers compared).
    result = _review(policy, job, old=copy.deepcopy(job) if operation == "UPDATE" else None)
    assert [a.message for a in result.answers if a.error] == []
    if operation == "CREATE":
        assert not result.allowed, "the job must reach every check's message"
    total, per_expression = _worst(result)
    print(f"{policy} {shape} {operation}: costliest evaluation {total}, costliest expression {per_expression}")
    assert total * MARGIN < PER_EVALUATION_BUDGET, total
    assert per_expression * MARGIN < PER_EXPRESSION_LIMIT, per_expression


def test_cost_grows_linearly_with_the_containers() -> None:
    costs = {n: _worst(_review("built-in", wide_job(n, n // 5, violating=True)))[0] for n in (25, 50, 100)}
    # Doubling the containers at most doubles the cost (plus the fixed part): no walk nests
    # another over the same containers.
    assert costs[50] < 2 * costs[25]
    assert costs[100] < 2 * costs[50]
    assert costs[100] > 1.5 * costs[50], "the cost must depend on the containers at all"


def test_env_lists_cost_nothing() -> None:
    """No exported check reads env: a job's env lists do not change what it costs."""
    short, long = (_worst(_review("built-in", wide_job(20, env=env, violating=True)))[0] for env in (0, 500))
    assert long == short


def test_no_expression_nests_a_walk_over_the_job_inside_another() -> None:
    """Bounded by construction: a comprehension inside another walks a part of the outer
    element (a container's resources, one key list), never the job again."""
    for name, expression in policy_expressions(exported("actions-and-overrides")):
        assert nested_walks(compile_expression(expression)) == [], (name, expression)


def test_the_nesting_check_finds_a_nested_walk() -> None:
    nested = "object.spec.a.all(c, object.spec.b.exists(d, d == c))"
    assert nested_walks(compile_expression(nested)) != []
    assert nested_walks(compile_expression("object.spec.a.all(c, c.b.exists(d, d == 1))")) == []
