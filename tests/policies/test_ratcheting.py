"""UPDATE ratcheting: problems the stored job already had do not block edits of it."""
import copy

from policies.interface import Action
from policies.cluster_view import StaticClusterView
from policies.engine import evaluate
from policies.registry import default_settings
from testing.builders import context, mpijob

TIGHT = default_settings().with_rule("worker-count", max=8)
EMPTY_CLUSTER = StaticClusterView()  # reachable, with no quotas: only the spec rules speak


def update(old, new, settings=TIGHT):
    return evaluate(context(new, old=old, operation="UPDATE", settings=settings, cluster=EMPTY_CLUSTER))


def with_workers(job, workers):
    job = copy.deepcopy(job)
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = workers
    return job


def test_kueue_unsuspending_a_job_admitted_under_an_older_policy_is_allowed():
    old = mpijob(workers=16)
    old["spec"]["runPolicy"]["suspend"] = True
    new = copy.deepcopy(old)
    new["spec"]["runPolicy"]["suspend"] = False
    verdict = update(old, new)
    assert verdict.allowed
    assert [(f.rule, f.path) for f in verdict.audits] == [("worker-count", "spec.mpiReplicaSpecs[Worker].replicas")]
    assert verdict.denials == () and verdict.warnings == ()


def test_changing_the_offending_field_to_another_bad_value_is_denied():
    old = mpijob(workers=16)
    verdict = update(old, with_workers(old, 20))
    assert not verdict.allowed
    (denial,) = verdict.denials
    assert denial.rule == "worker-count" and denial.value == 20


def test_a_new_problem_is_denied_while_the_old_one_stays_audited():
    old = mpijob(workers=16)
    new = copy.deepcopy(old)
    new["spec"]["slotsPerWorker"] = 9
    verdict = update(old, new)
    assert [f.rule for f in verdict.denials] == ["slots-per-worker"]
    assert [f.rule for f in verdict.audits] == ["worker-count"]


def test_create_is_never_ratcheted():
    verdict = evaluate(context(mpijob(workers=16), settings=TIGHT, cluster=EMPTY_CLUSTER))
    assert [f.rule for f in verdict.denials] == ["worker-count"]


def test_fixing_the_problem_leaves_nothing_to_report():
    old = mpijob(workers=16)
    verdict = update(old, with_workers(old, 8))
    assert verdict.outcomes == ()


def test_an_unreadable_stored_object_gives_no_free_pass():
    old = mpijob(workers=16)
    broken_old = copy.deepcopy(old)
    broken_old["spec"]["slotsPerWorker"] = "nine"
    new = copy.deepcopy(old)
    new["spec"]["runPolicy"]["suspend"] = True
    verdict = update(broken_old, new)
    assert [f.rule for f in verdict.denials] == ["worker-count"]
    assert all(o.action is Action.DENY for o in verdict.outcomes)
