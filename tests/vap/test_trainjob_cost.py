"""The exported TrainJob policies stay within the API server's CEL cost limits on the widest
runtimes and TrainJobs we support, and their cost grows with their size, never faster.

The API server evaluates a TrainJob policy once per runtime of its param kind, each evaluation
with its own budget (RuntimeCELCostBudget, 10,000,000; PerCallLimit, 1,000,000 per expression):
the runtime the TrainJob names costs what its checks cost, every other runtime only the guard
that finds it is not the one. The estimate is webhook.cel.cel_runtime's pessimistic model of
cel-go's runtime cost, with the margin of tests/vap/test_cost.py.
"""
from __future__ import annotations

import copy
import json
from functools import lru_cache
from typing import Any

import pytest

from policies.vap import objects
from policies.vap.trainjob_objects import TRAINJOB_EXPORTED_RULES
from tests.policies.trainer.trainer_data import runtime
from tests.vap.corpus import policies
from tests.vap.test_cost import MARGIN, MAX_OBJECT_BYTES
from tests.vap.trainjob_corpus import job, runtime_patch
from tests.vap.trainjob_verdicts import vap_review
from webhook.cel.policy_admission import PER_EVALUATION_BUDGET, PER_EXPRESSION_LIMIT, Review

POLICIES = policies()


@lru_cache(maxsize=None)
def exported(name: str) -> list[dict[str, Any]]:
    return objects(POLICIES[name], kinds=("TrainJob",), trainjob_rules=TRAINJOB_EXPORTED_RULES)


def _containers(count: int, prefix: str = "c") -> list[dict[str, Any]]:
    return [{"name": f"{prefix}{i}", "image": "registry.example.com/team/mpi:1.0",
             "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": "1"}}} for i in range(count)]


def wide_runtime(containers: int, jobs: int = 2, name: str = "wide") -> dict[str, Any]:
    """An MPI runtime whose launcher and node jobs (and ``jobs - 2`` more) each run ``containers``
    containers (in the node job the first is node, without resources: resourcesPerNode decides
    it; none in the launcher), with every other problem training-runtime and launcher know."""
    wide = runtime("runtimes/opendatahub/openmpi_cuda.yaml")
    wide["metadata"] = {"name": name}
    wide["spec"]["mlPolicy"]["numNodes"] = 2
    wide["spec"]["mlPolicy"]["mpi"].update(mpiImplementation="Intel", numProcPerNode=1)
    template = wide["spec"]["template"]["spec"]
    template["replicatedJobs"] += [copy.deepcopy(template["replicatedJobs"][1]) for _ in range(jobs - 2)]
    for index, replicated in enumerate(template["replicatedJobs"]):
        if index >= 2:
            replicated["name"] = f"aux-{index}"
        replicated["template"]["spec"]["template"]["spec"]["containers"] = _containers(containers)
    template["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["containers"][0] = {"name": "node"}
    return wide


def wide_trainjob(containers: int, patches: int, jobs: int = 2, env: int = 0) -> dict[str, Any]:
    """A TrainJob that breaks every exported check, with ``patches`` runtimePatches entries
    patching each job's pod template with ``containers`` containers (none named node)."""
    trainjob = job("wide", name="p" * 50, numNodes=120, numProcPerNode=9, resourcesPerNode={"limits": {
                   "nvidia.com/gpu": "1.5"}}, env=[{"name": f"VAR_{i}", "value": "v" * 16} for i in range(env)])
    names = ["launcher", "node", *(f"aux-{i}" for i in range(2, jobs))]
    trainjob["spec"]["runtimePatches"] = [runtime_patch(f"team-{p}", {
        name: {"spec": {"template": {"spec": {"containers": [{"name": c["name"]} for c in _containers(containers)]}}}}
        for name in names}) for p in range(patches)]
    return trainjob


def _review(trainjob: dict[str, Any], runtimes: list[dict[str, Any]], policy: str = "built-in",
            old: dict[str, Any] | None = None) -> Review:
    return vap_review(exported(policy), trainjob, runtimes, "team-a",
                      operation="UPDATE" if old is not None else "CREATE", old=old)


def _worst(result: Review, runtime_name: str = "wide") -> tuple[int, int]:
    meters = [m for key, m in result.meters.items() if key.endswith("/" + runtime_name)]
    return max(m.total for m in meters), max(max(m.per_expression.values()) for m in meters)


SHAPES = {
    # 300 containers in each of launcher and node, 16 patches of both (the CRD's maximum)
    "300-containers-16-patches": dict(containers=300, patches=16),
    # 20 replicated jobs of 50 containers, each patched by 16 entries
    "20-jobs": dict(containers=50, patches=16, jobs=20),
    # both smaller (a tenth of the containers; a quarter of the patches across the 20 jobs): the
    # same checks and walks in every run
    "30-containers-16-patches": dict(containers=30, patches=16),
    "20-jobs-4-patches": dict(containers=5, patches=4, jobs=20),
}
# cel-python takes 10 to 25 s for one review of the widest shapes: they run under the ci profile.
CI_ONLY = {"300-containers-16-patches", "20-jobs"}


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
@pytest.mark.parametrize("shape", [pytest.param(shape, marks=[pytest.mark.ci_only] if shape in CI_ONLY else [])
                                   for shape in sorted(SHAPES)])
def test_the_widest_trainjobs_stay_far_within_the_budget(shape: str, operation: str) -> None:
    trainjob = wide_trainjob(**SHAPES[shape])
    wide = wide_runtime(SHAPES[shape]["containers"], SHAPES[shape].get("jobs", 2))
    assert len(json.dumps(trainjob)) < MAX_OBJECT_BYTES and len(json.dumps(wide)) < MAX_OBJECT_BYTES
    result = _review(trainjob, [wide], old=copy.deepcopy(trainjob) if operation == "UPDATE" else None)
    assert [a.message for a in result.answers if a.error] == []
    if operation == "CREATE":
        assert {a.rule for a in result.answers} == {"job-name", "launcher", "worker-count", "slots-per-worker",
                                                    "training-runtime", "gpus-per-worker"}, "every check must fail"
    total, per_expression = _worst(result)
    print(f"{shape} {operation}: costliest evaluation {total}, costliest expression {per_expression}")
    assert total * MARGIN < PER_EVALUATION_BUDGET, total
    assert per_expression * MARGIN < PER_EXPRESSION_LIMIT, per_expression


def test_cost_grows_linearly_with_the_containers_and_patches() -> None:
    costs = {n: _worst(_review(wide_trainjob(n, n // 10), [wide_runtime(n)]))[0] for n in (40, 80, 160)}
    # Containers and patches both double: the patches' containers four times over, the cost
    # at most that (no walk over the runtime nests inside a walk over the patches).
    assert costs[80] < 4 * costs[40]
    assert costs[160] < 4 * costs[80]
    assert costs[160] > 1.5 * costs[80], "the cost must depend on the size at all"


def test_a_runtime_the_trainjob_does_not_name_costs_only_the_guard() -> None:
    """Each runtime of the cluster is an evaluation: those the TrainJob does not name stop at
    the guard, whatever their size."""
    result = _review(wide_trainjob(10, 1), [wide_runtime(10), wide_runtime(300, name="other")])
    assert _worst(result, "other")[0] < 200


def test_env_lists_cost_nothing() -> None:
    wide = wide_runtime(20)
    short, long = (_worst(_review(wide_trainjob(20, 2, env=env), [wide]))[0] for env in (0, 500))
    assert long == short


def test_no_expression_nests_a_walk_inside_another_over_something_else() -> None:
    """Bounded by construction, as the MPIJob policies: a comprehension inside another walks a
    part of the outer element (a patch's jobs, a job's containers), never the runtime's jobs
    inside the patches."""
    from tests.vap.nesting import nested_walks, policy_expressions
    from webhook.cel.cel_runtime import compile_expression

    for name, expression in policy_expressions(exported("actions-and-overrides")):
        assert nested_walks(compile_expression(expression)) == [], (name, expression[:200])
