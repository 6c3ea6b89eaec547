import copy

import pytest

from policies.interface import Problem
from policies.rules.run_policy import RunPolicy, RunPolicyParams
from policies.registry import default_settings
from testing.builders import context, mpijob

RULE = RunPolicy()


def job_with(**run_policy):
    return mpijob(runPolicy=run_policy)


@pytest.mark.parametrize("run_policy", [
    {}, {"cleanPodPolicy": "All"}, {"cleanPodPolicy": "Running"}, {"cleanPodPolicy": "None"},
    {"ttlSecondsAfterFinished": 0, "activeDeadlineSeconds": 3600, "backoffLimit": 6},
    {"managedBy": "kubeflow.org/mpi-operator"}, {"managedBy": "kueue.x-k8s.io/multikueue"},
    {"schedulingPolicy": {"minAvailable": 3, "scheduleTimeoutSeconds": 0, "queue": "q",
                          "minResources": {"cpu": "500m", "memory": "4Gi", "nvidia.com/gpu": 8}}},
    {"suspend": True},
], ids=["empty", "all", "running", "none", "counts", "mpi-operator", "multikueue", "scheduling", "suspend"])
def test_valid_run_policies_are_clean(run_policy):
    assert list(RULE.check(context(job_with(**run_policy)))) == []


def test_no_run_policy_at_all_is_clean():
    job = mpijob()
    del job["spec"]["runPolicy"]
    assert list(RULE.check(context(job))) == []


@pytest.mark.parametrize(("value", "fix"), [
    ("running", 'use "Running" (values are case-sensitive)'),
    ("OnCompletion", "use one of them, or leave it unset for the default"),
    ("", "use one of them"),
], ids=["lowercase", "unknown", "empty"])
def test_clean_pod_policy_values(value, fix):
    (finding,) = RULE.check(context(job_with(cleanPodPolicy=value)))
    assert finding.rule == "run-policy"
    assert finding.path == "spec.runPolicy.cleanPodPolicy"
    assert finding.problem is Problem.NOT_SUPPORTED
    assert finding.value == value
    assert 'supported values: "All", "Running", "None"' in finding.message
    assert fix in finding.message


@pytest.mark.parametrize(("field", "path"), [
    ("ttlSecondsAfterFinished", "spec.runPolicy.ttlSecondsAfterFinished"),
    ("activeDeadlineSeconds", "spec.runPolicy.activeDeadlineSeconds"),
    ("backoffLimit", "spec.runPolicy.backoffLimit"),
], ids=["ttl", "deadline", "backoff"])
@pytest.mark.parametrize("value", [-1, -3600], ids=["minus-one", "minus-hour"])
def test_negative_counts_are_refused(field, path, value):
    (finding,) = RULE.check(context(job_with(**{field: value})))
    assert (finding.path, finding.problem, finding.value) == (path, Problem.INVALID, value)
    assert f"must be greater than or equal to 0 (asked {value})" in finding.message
    assert f"set {path} to 0 or more" in finding.message


@pytest.mark.parametrize("field", ["minAvailable", "scheduleTimeoutSeconds"])
def test_negative_scheduling_numbers_are_refused(field):
    (finding,) = RULE.check(context(job_with(schedulingPolicy={field: -2})))
    assert finding.path == f"spec.runPolicy.schedulingPolicy.{field}"
    assert finding.value == -2
    assert "(asked -2)" in finding.message


@pytest.mark.parametrize(("resource", "value", "says"), [
    ("cpu", "-1", "must be greater than or equal to 0 (asked -1)"),
    ("nvidia.com/gpu", -4, "(asked -4)"),
    ("memory", "lots", "not a quantity"),
    ("memory", "4GB!", "not a quantity"),
], ids=["negative-cpu", "negative-gpu", "words", "garbage"])
def test_min_resources_must_be_non_negative_quantities(resource, value, says):
    (finding,) = RULE.check(context(job_with(schedulingPolicy={"minResources": {resource: value}})))
    assert finding.path == f"spec.runPolicy.schedulingPolicy.minResources[{resource}]"
    assert finding.problem is Problem.INVALID
    assert finding.value == value
    assert says in finding.message


def test_every_run_policy_problem_is_reported_at_once():
    job = job_with(cleanPodPolicy="x", backoffLimit=-1, ttlSecondsAfterFinished=-1,
                   schedulingPolicy={"minAvailable": -1, "minResources": {"cpu": "-1"}}, managedBy="me")
    assert len(list(RULE.check(context(job)))) == 6


@pytest.mark.parametrize("value", ["kubeflow.org/training-operator", "kueue.x-k8s.io/multiKueue", ""],
                         ids=["training-operator", "wrong-case", "empty"])
def test_managed_by_must_name_a_controller_that_runs_mpijobs(value):
    (finding,) = RULE.check(context(job_with(managedBy=value)))
    assert finding.path == "spec.runPolicy.managedBy"
    assert finding.problem is Problem.NOT_SUPPORTED
    assert finding.value == value
    assert '"kubeflow.org/mpi-operator", "kueue.x-k8s.io/multikueue"' in finding.message


def test_admin_can_narrow_managed_by():
    settings = default_settings().with_rule("run-policy", managed_by=("kubeflow.org/mpi-operator",))
    (finding,) = RULE.check(context(job_with(managedBy="kueue.x-k8s.io/multikueue"), settings=settings))
    assert 'supported values: "kubeflow.org/mpi-operator";' in finding.message


def update(old_value, new_value):
    old = job_with(**({"managedBy": old_value} if old_value is not None else {}))
    new = copy.deepcopy(old)
    new["spec"]["runPolicy"].pop("managedBy", None)
    if new_value is not None:
        new["spec"]["runPolicy"]["managedBy"] = new_value
    new["spec"]["runPolicy"]["suspend"] = True
    return list(RULE.check(context(new, operation="UPDATE", old=old)))


@pytest.mark.parametrize(("old", "new", "shown", "back_to"), [
    ("kueue.x-k8s.io/multikueue", "kubeflow.org/mpi-operator", "kubeflow.org/mpi-operator", "kueue.x-k8s.io/multikueue"),
    ("kubeflow.org/mpi-operator", "kueue.x-k8s.io/multikueue", "kueue.x-k8s.io/multikueue", "kubeflow.org/mpi-operator"),
    (None, "kueue.x-k8s.io/multikueue", "kueue.x-k8s.io/multikueue", "kubeflow.org/mpi-operator"),
    ("kueue.x-k8s.io/multikueue", None, "kubeflow.org/mpi-operator", "kueue.x-k8s.io/multikueue"),
], ids=["to-operator", "to-multikueue", "unset-to-multikueue", "multikueue-removed"])
def test_managed_by_is_immutable_on_update(old, new, shown, back_to):
    (finding,) = update(old, new)
    assert finding.path == "spec.runPolicy.managedBy"
    assert finding.problem is Problem.INVALID
    assert finding.value == shown
    assert "field is immutable" in finding.message
    assert f'set spec.runPolicy.managedBy back to "{back_to}"' in finding.message


@pytest.mark.parametrize(("old", "new"), [
    (None, "kubeflow.org/mpi-operator"), ("kubeflow.org/mpi-operator", None),
    ("kueue.x-k8s.io/multikueue", "kueue.x-k8s.io/multikueue"), (None, None),
], ids=["made-explicit", "made-implicit", "unchanged", "never-set"])
def test_managed_by_edits_that_keep_the_controller_are_fine(old, new):
    assert update(old, new) == []


def test_managed_by_change_is_not_checked_on_create():
    job = job_with(managedBy="kueue.x-k8s.io/multikueue")
    assert list(RULE.check(context(job, operation="CREATE", old=job_with()))) == []


@pytest.mark.parametrize("old", [{}, {"spec": []}, {"spec": {"runPolicy": "x"}}, {"spec": {"runPolicy": {"managedBy": 7}}}],
                         ids=["empty", "spec-list", "run-policy-string", "managed-by-number"])
def test_a_malformed_stored_object_does_not_break_the_check(old):
    job = job_with(managedBy="kueue.x-k8s.io/multikueue")
    (finding,) = RULE.check(context(job, operation="UPDATE", old=old))
    assert 'back to "kubeflow.org/mpi-operator"' in finding.message


def test_admin_cannot_allow_a_controller_the_operator_does_not_know():
    with pytest.raises(ValueError, match=r'managedBy must be one or more of .* \(not "example.com/x"\)'):
        RunPolicyParams(managed_by=("example.com/x",))
