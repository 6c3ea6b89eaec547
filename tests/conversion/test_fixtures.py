"""The upstream examples: golden conversions, round trips both ways, and what /validate's rules
make of the converted jobs."""
from __future__ import annotations

import pytest
import yaml

from policies.conversion import PROBLEMS_ANNOTATION, convert
from policies.engine import evaluate
from policies.mpijob.pruning_defaulting import as_admitted
from testing.builders import context
from tests.conftest import captured_reviews
from tests.conversion import golden_files
from tests.conversion.common import HUB, SPOKES, older_upstream_jobs, stash_of, upstream_jobs, without_stash

GOLDEN_CASES = list(golden_files.cases())
OLDER = older_upstream_jobs()
HUB_JOBS = {**upstream_jobs(HUB), **{
    # Real stored objects, defaulted by the API server, with managedFields and status.
    name: review["request"]["objects"][0]
    for name, review in captured_reviews().items()
    if "conversion" in name and review["request"]["objects"][0]["apiVersion"] == HUB}}


@pytest.mark.parametrize(("fixture", "job", "target", "path"), GOLDEN_CASES,
                         ids=[f"{name}->{target.split('/')[1]}" for name, _, target, _ in GOLDEN_CASES])
def test_golden(fixture, job, target, path):
    assert path.exists(), f"no golden file {path.name}; write it with python3 -m tests.conversion.golden_files --write"
    assert without_stash(convert(job, target).obj) == yaml.safe_load(path.read_text())


def test_every_older_upstream_example_has_a_golden_file():
    assert {name for name, _, target, _ in GOLDEN_CASES if target == HUB} == set(OLDER)
    assert len(OLDER) == 5  # 3 v1alpha1, 1 v1alpha2, 1 v1: the reference set


def test_golden_files_are_current():
    assert golden_files.main([]) == 0


@pytest.mark.parametrize("name", OLDER)
def test_older_examples_round_trip_through_the_hub(name):
    job = OLDER[name]
    hub = convert(job, HUB).obj
    assert convert(hub, job["apiVersion"]).obj == job  # no stash left over: the exact input


@pytest.mark.parametrize("name", OLDER)
@pytest.mark.parametrize("other", SPOKES, ids=lambda v: v.split("/")[1])
def test_older_examples_round_trip_through_every_other_version(name, other):
    job = OLDER[name]
    there = convert(job, other).obj
    assert without_stash(convert(there, job["apiVersion"]).obj) == job


@pytest.mark.parametrize("name", HUB_JOBS)
@pytest.mark.parametrize("spoke", SPOKES, ids=lambda v: v.split("/")[1])
def test_hub_examples_round_trip_through_every_older_version(name, spoke):
    job = HUB_JOBS[name]
    view = convert(job, spoke).obj
    assert view["apiVersion"] == spoke
    assert convert(view, HUB).obj == job  # exactly: the stash is consumed on the way back


def test_a_v1alpha2_view_needs_no_stash_for_an_upstream_v2beta1_example():
    """v1alpha2 holds everything horovod-tensorflow-mnist uses: nothing is stashed."""
    job = upstream_jobs(HUB)["v2beta1/horovod-tensorflow-mnist.yaml"]
    assert stash_of(convert(job, "kubeflow.org/v1alpha2").obj) is None


# What the rules make of the converted examples. Each denial must explain a real problem of the
# example itself, never an artifact of the conversion.
EXPECTED_DENIALS = {
    # 2 workers of 4 GPUs asked with `replicas`: fine. :latest images warn (image-reference).
    "v1alpha1/mxnet-mnist-replicas.yaml": set(),
    "v1alpha1/tensorflow-benchmarks-custom-replicas.yaml": set(),
    "v1alpha1/tensorflow-benchmarks-gpus16.yaml": set(),
    "v1alpha2/horovod-tensorflow-mnist.yaml": set(),
    "v1/horovod-tensorflow-mnist.yaml": set(),
}


@pytest.mark.parametrize("name", OLDER)
def test_converted_examples_pass_validation(name):
    hub, _ = as_admitted(convert(OLDER[name], HUB).obj)
    verdict = evaluate(context(hub))
    assert verdict.error is None
    assert {f.rule for f in verdict.denials} == EXPECTED_DENIALS[name], [f.message for f in verdict.denials]


def test_gpus_on_one_node_is_denied_for_the_real_problem_only():
    """gpus: 4 fits one node: one worker with 4 GPUs, as the old operator ran it; v2beta1 policy
    wants at least 2 workers, and says so: that is the only denial."""
    job = yaml.safe_load(yaml.safe_dump(OLDER["v1alpha1/tensorflow-benchmarks-gpus16.yaml"]))
    job["spec"]["gpus"] = 4
    hub, _ = as_admitted(convert(job, HUB).obj)
    assert hub["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 1
    verdict = evaluate(context(hub))
    assert [(f.rule, f.path) for f in verdict.denials] == [("worker-count", "spec.mpiReplicaSpecs[Worker].replicas")]


def test_a_job_the_old_operator_refused_is_denied_by_conversion_problem():
    job = yaml.safe_load(yaml.safe_dump(OLDER["v1alpha1/tensorflow-benchmarks-gpus16.yaml"]))
    job["spec"]["gpus"] = 20
    hub, _ = as_admitted(convert(job, HUB).obj)
    assert PROBLEMS_ANNOTATION in hub["metadata"]["annotations"]
    verdict = evaluate(context(hub))
    assert [(f.rule, f.path, f.value) for f in verdict.denials] == [("conversion-problem", "spec.gpus", 20)]
    assert "not a multiple of 8 per node" in verdict.denials[0].message
    assert "Converted to 4 workers with 5 nvidia.com/gpu each" in verdict.denials[0].message
    assert "set spec.gpus to a multiple of 8 (e.g. 16 or 24)" in verdict.denials[0].message
