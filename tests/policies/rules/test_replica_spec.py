import pytest

from policies.interface import Problem
from policies.rules.replica_spec import ReplicaSpec
from testing.builders import context, mpijob

RULE = ReplicaSpec()
WORKER = "spec.mpiReplicaSpecs[Worker]"


def with_replica(key, value):
    job = mpijob()
    job["spec"]["mpiReplicaSpecs"][key] = value
    return job


def test_launcher_and_worker_are_clean():
    assert list(RULE.check(context(mpijob()))) == []


@pytest.mark.parametrize(("key", "fix"), [
    ("Master", "move its pod template to Launcher or Worker, or remove it"),
    ("PS", "move its pod template to Launcher or Worker, or remove it"),
    ("worker", 'rename it to "Worker"'),
    ("launcher", 'rename it to "Launcher"'),
    ("Workers", 'rename it to "Worker"'),
], ids=["master", "ps", "lowercase-worker", "lowercase-launcher", "plural"])
def test_unknown_replica_types_name_the_key_and_the_valid_ones(key, fix):
    (finding,) = RULE.check(context(with_replica(key, {"replicas": 1})))
    assert finding.rule == "replica-spec"
    assert finding.path == f"spec.mpiReplicaSpecs[{key}]"
    assert finding.problem is Problem.NOT_SUPPORTED
    assert finding.value == key
    assert 'only the replica types "Launcher", "Worker"' in finding.message
    assert fix in finding.message


@pytest.mark.parametrize("template", [{"spec": {"containers": []}}, {"spec": {}}, {}, None],
                         ids=["empty-list", "no-containers", "no-spec", "no-template"])
def test_worker_needs_a_container(template):
    job = mpijob()
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"] = template
    (finding,) = RULE.check(context(job))
    assert finding.path == f"{WORKER}.template.spec.containers"
    assert finding.problem is Problem.REQUIRED
    assert "the Worker pod template has no containers" in finding.message
    assert "sshd and the MPI ranks" in finding.message


@pytest.mark.parametrize(("policy", "explains"), [
    ("Always", "a restarted rank cannot rejoin the MPI job"),
    ("ExitCode", "refuses ExitCode"),
    ("Restart", "use one of them"),
    ("NEVER", 'use "Never"'),
], ids=["always", "exit-code", "unknown", "uppercase"])
def test_worker_restart_policy(policy, explains):
    job = mpijob()
    job["spec"]["mpiReplicaSpecs"]["Worker"]["restartPolicy"] = policy
    (finding,) = RULE.check(context(job))
    assert finding.path == f"{WORKER}.restartPolicy"
    assert finding.problem is Problem.NOT_SUPPORTED
    assert finding.value == policy
    assert 'supported values: "Never", "OnFailure"' in finding.message
    assert explains in finding.message


@pytest.mark.parametrize("policy", ["Never", "OnFailure", ""])
def test_worker_restart_policies_the_operator_accepts(policy):
    job = mpijob()
    job["spec"]["mpiReplicaSpecs"]["Worker"]["restartPolicy"] = policy
    assert list(RULE.check(context(job))) == []


def test_launcher_problems_and_missing_specs_belong_to_other_rules():
    job = mpijob()
    job["spec"]["mpiReplicaSpecs"]["Launcher"].update(restartPolicy="Always", template={})
    del job["spec"]["mpiReplicaSpecs"]["Worker"]
    assert list(RULE.check(context(job))) == []


def test_unknown_types_are_not_inspected_further():
    (finding,) = RULE.check(context(with_replica("Master", {"restartPolicy": "Always", "template": {}})))
    assert finding.path == "spec.mpiReplicaSpecs[Master]"
