import pytest

from policies.interface import Problem
from policies.rules.worker_count import WorkerCount, WorkerCountParams
from policies.registry import default_settings
from testing.builders import context, mpijob

RULE = WorkerCount()
PATH = "spec.mpiReplicaSpecs[Worker]"


@pytest.mark.parametrize("workers", [2, 3, 64, 100], ids=lambda w: f"workers={w}")
def test_within_range_is_clean(workers):
    assert list(RULE.check(context(mpijob(workers=workers)))) == []


@pytest.mark.parametrize(("workers", "says", "fix"), [
    (101, "at most 100 workers are allowed (asked 101)", f"set {PATH}.replicas to 100 or fewer"),
    (1000, "at most 100 workers are allowed (asked 1000)", f"set {PATH}.replicas to 100 or fewer"),
    (1, "at least 2 workers are required for a distributed job (asked 1)", f"set {PATH}.replicas to 2 or more"),
    (0, "at least 2 workers are required for a distributed job (asked 0)", f"set {PATH}.replicas to 2 or more"),
    (-4, "(asked -4)", f"set {PATH}.replicas to 2 or more"),
], ids=["101", "1000", "one", "zero", "negative"])
def test_out_of_range_names_the_numbers_and_the_fix(workers, says, fix):
    (finding,) = RULE.check(context(mpijob(workers=workers)))
    assert finding.rule == "worker-count"
    assert finding.path == f"{PATH}.replicas"
    assert finding.problem is Problem.INVALID
    assert finding.value == workers
    assert says in finding.message
    assert fix in finding.message


def test_omitted_replicas_is_zero_to_the_operator():
    (finding,) = RULE.check(context(mpijob(workers=None)))
    assert finding.path == f"{PATH}.replicas"
    assert finding.problem is Problem.REQUIRED
    assert "starts 0 workers" in finding.message
    assert "is 0, not 1" in finding.message
    assert f"set {PATH}.replicas to a number between 2 and 100" in finding.message


def test_missing_worker_spec_is_required():
    job = mpijob()
    del job["spec"]["mpiReplicaSpecs"]["Worker"]
    (finding,) = RULE.check(context(job))
    assert (finding.path, finding.problem) == (PATH, Problem.REQUIRED)
    assert "unless spec.runLauncherAsWorker is true" in finding.message
    assert "replicas between 2 and 100" in finding.message


def test_launcher_may_run_alone_when_it_runs_as_worker():
    job = mpijob(runLauncherAsWorker=True)
    del job["spec"]["mpiReplicaSpecs"]["Worker"]
    assert list(RULE.check(context(job))) == []


def test_a_present_worker_spec_is_held_to_the_range_even_with_launcher_as_worker():
    (finding,) = RULE.check(context(mpijob(workers=101, runLauncherAsWorker=True)))
    assert "asked 101" in finding.message


@pytest.mark.parametrize(("bounds", "workers", "says"), [
    ({"max": 16}, 17, "at most 16 workers are allowed (asked 17)"),
    ({"min": 4}, 3, "at least 4 workers are required for a distributed job (asked 3)"),
    ({"min": 1}, 1, None),
], ids=["max-16", "min-4", "min-1"])
def test_admin_range_is_honoured(bounds, workers, says):
    settings = default_settings().with_rule("worker-count", **bounds)
    findings = list(RULE.check(context(mpijob(workers=workers), settings=settings)))
    if says is None:
        assert findings == []
    else:
        assert says in findings[0].message


def test_negative_minimum_is_refused():
    with pytest.raises(ValueError, match=r"min must be 0 or more \(got -1\)"):
        WorkerCountParams(min=-1)
