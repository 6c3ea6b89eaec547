import pytest

from policies.interface import Problem
from policies.rules.launcher import Launcher
from testing.builders import context, mpijob

RULE = Launcher()
PATH = "spec.mpiReplicaSpecs[Launcher]"


def launcher_job(**changes):
    job = mpijob()
    job["spec"]["mpiReplicaSpecs"]["Launcher"].update(changes)
    return job


@pytest.mark.parametrize("changes", [
    {}, {"replicas": None}, {"restartPolicy": "Never"}, {"restartPolicy": "OnFailure"}, {"restartPolicy": ""},
], ids=["defaults", "replicas-omitted", "never", "on-failure", "restart-empty"])
def test_valid_launcher_is_clean(changes):
    job = launcher_job(**changes)
    if changes.get("replicas", 1) is None:
        del job["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"]
    assert list(RULE.check(context(job))) == []


@pytest.mark.parametrize("missing", ["absent", "null"])
def test_missing_launcher_is_required(missing):
    job = mpijob()
    if missing == "absent":
        del job["spec"]["mpiReplicaSpecs"]["Launcher"]
    else:
        job["spec"]["mpiReplicaSpecs"]["Launcher"] = None
    (finding,) = RULE.check(context(job))
    assert (finding.rule, finding.path, finding.problem) == ("launcher", PATH, Problem.REQUIRED)
    assert "needs a Launcher replica spec" in finding.message
    assert f"add {PATH} with replicas: 1" in finding.message


@pytest.mark.parametrize("replicas", [0, 2, 5, -1], ids=lambda r: f"replicas={r}")
def test_replicas_other_than_one_are_refused(replicas):
    (finding,) = RULE.check(context(launcher_job(replicas=replicas)))
    assert finding.path == f"{PATH}.replicas"
    assert finding.problem is Problem.INVALID
    assert finding.value == replicas
    assert f"exactly 1 launcher (asked {replicas})" in finding.message
    assert f"set {PATH}.replicas to 1 or leave it unset" in finding.message


@pytest.mark.parametrize(("policy", "explains"), [
    ("Always", "the launcher is a batch Job"),
    ("ExitCode", "training-operator policy"),
    ("Sometimes", "use one of them, or leave it unset"),
    ("never", 'use "Never" (values are case-sensitive)'),
    ("onFailure", 'use "OnFailure"'),
], ids=["always", "exit-code", "unknown", "lowercase-never", "camel-on-failure"])
def test_restart_policy_must_be_never_or_on_failure(policy, explains):
    (finding,) = RULE.check(context(launcher_job(restartPolicy=policy)))
    assert finding.path == f"{PATH}.restartPolicy"
    assert finding.problem is Problem.NOT_SUPPORTED
    assert finding.value == policy
    assert 'supported values: "Never", "OnFailure"' in finding.message
    assert explains in finding.message


@pytest.mark.parametrize("template", [
    {"spec": {"containers": []}}, {"spec": {}}, {}, None,
], ids=["empty-list", "no-containers", "no-spec", "no-template"])
def test_launcher_needs_a_container(template):
    job = launcher_job(template=template)
    (finding,) = RULE.check(context(job))
    assert finding.path == f"{PATH}.template.spec.containers"
    assert finding.problem is Problem.REQUIRED
    assert "the Launcher pod template has no containers" in finding.message
    assert "runs mpirun" in finding.message


def test_every_launcher_problem_is_reported_at_once():
    job = launcher_job(replicas=3, restartPolicy="Always", template={"spec": {"containers": []}})
    paths = [f.path for f in RULE.check(context(job))]
    assert paths == [f"{PATH}.replicas", f"{PATH}.restartPolicy", f"{PATH}.template.spec.containers"]


def test_worker_problems_are_not_the_launchers_business():
    job = mpijob()
    job["spec"]["mpiReplicaSpecs"]["Worker"].update(restartPolicy="Always", template={"spec": {"containers": []}})
    assert list(RULE.check(context(job))) == []
