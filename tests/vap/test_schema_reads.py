"""Every read of the job in the exported CEL is one the API server can type-check against the
upstream CRD of the resource the policy matches (MPIJob; TrainJob once exported) and evaluate
without a "no such key" error: the field exists, an optional field or a map key is read only
where the expression proves it there, maps are indexed and objects selected, and quantities
(int-or-string) go through string() and quantity().

We cannot run an API server here; this is the closest check of what its type-checker and its
evaluation would say (tests/vap/schema_reads.py says what it models and what not)."""
from __future__ import annotations

from functools import cache

import pytest
import yaml

from testing.crd import openapi_schema
from testing.reference_data import TRAINER
from tests.vap.schema_reads import Checker, check_expression, policy_problems, unshared
from tests.vap.test_parity import POLICIES, exported

SCHEMA = openapi_schema()


@cache
def _trainjob_schema() -> dict:
    crd = yaml.safe_load((TRAINER / "crds" / "trainer.kubeflow.org_trainjobs.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    return version["schema"]["openAPIV3Schema"]


# The CRD schema each exported policy is type-checked with, by the resource it matches.
SCHEMAS = {("kubeflow.org", "mpijobs"): openapi_schema, ("trainer.kubeflow.org", "trainjobs"): _trainjob_schema}


def schema_of(policy: dict) -> dict:
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    matched = {(group, resource) for rule in rules for group in rule["apiGroups"] for resource in rule["resources"]}
    assert len(matched) == 1 and matched <= SCHEMAS.keys(), f"no CRD schema here for {sorted(matched)}"
    (key,) = matched
    return SCHEMAS[key]()
# Reads the checker cannot prove, each safe for the reason given: proving them would take the
# values of variables, which it does not follow.
TRUSTED = {
    "object.spec.runPolicy.schedulingPolicy.minResources[variables.badMinResource]":
        "only in the message of a failed minResources check, whose key is the first of this map's keys "
        "(a filter over the map) that failed it",
}
SPECS = "has(object.spec) && has(object.spec.mpiReplicaSpecs)"
WORKER = f"{SPECS} && 'Worker' in object.spec.mpiReplicaSpecs"
POD = "object.spec.mpiReplicaSpecs['Worker'].template.spec"
CONTAINERS = (f"{WORKER} && has(object.spec.mpiReplicaSpecs['Worker'].template) && "
              f"has({POD}) && {POD}.containers")


def _policies() -> list[tuple[str, dict]]:
    return [(name, policy) for name in sorted(POLICIES) for policy in exported(name)
            if policy["kind"] == "ValidatingAdmissionPolicy"]


@pytest.mark.parametrize(("name", "policy"), _policies(), ids=[f"{n}-{p['metadata']['name']}" for n, p in _policies()])
def test_every_read_of_the_job_is_in_the_crd_schema_and_proven_there(name: str, policy: dict) -> None:
    problems = [p for p in policy_problems(policy, schema_of(policy)) if not any(f": {read}: " in p for read in TRUSTED)]
    assert problems == []


def test_the_trusted_reads_are_still_there() -> None:
    """A read that no longer needs trust leaves the list: the list holds what is still taken on faith."""
    found = {read for _, policy in _policies() for problem in policy_problems(policy, schema_of(policy))
             for read in TRUSTED if f": {read}: " in problem}
    assert found == set(TRUSTED)


def test_the_checker_follows_the_job_into_the_containers() -> None:
    """It would pass vacuously if it lost track of what an expression reads."""
    checker = Checker(SCHEMA)
    for _, policy in _policies():
        if policy["metadata"]["name"] == "mpijob-webhook-gpus-per-worker":
            for variable in unshared(policy)["spec"]["variables"]:
                check_expression(checker, variable["expression"])
    assert {f"{POD}.containers", f"{POD}.initContainers", "c.resources", "c.resources.limits",
            "c.resources.limits[k]", "c.restartPolicy"} <= checker.reads


# --- the checker itself: each mistake it exists to find ----------------------------------------
GOOD = [
    f"{SPECS} && object.spec.mpiReplicaSpecs.all(k, has(object.spec.mpiReplicaSpecs[k].replicas))",
    f"{CONTAINERS}.all(c, !has(c.resources) || !has(c.resources.limits) || "
    "c.resources.limits.all(k, isQuantity(string(c.resources.limits[k]))))",
    "has(object.spec) && has(object.spec.slotsPerWorker) ? object.spec.slotsPerWorker > 1 : false",
    "!has(object.spec) || !has(object.spec.runPolicy) || !has(object.spec.runPolicy.managedBy) || "
    "object.spec.runPolicy.managedBy != ''",
    "request.operation == 'UPDATE' && has(oldObject.spec) && has(oldObject.spec.sshAuthMountPath)",
    "has(object.metadata.name) && object.metadata.name.size() > 0 && object.kind == 'MPIJob'",
    "has(object.spec) && has(object.spec.runPolicy) && has(object.spec.runPolicy.schedulingPolicy) && "
    "has(object.spec.runPolicy.schedulingPolicy.minResources) && "
    "object.spec.runPolicy.schedulingPolicy.minResources.all(k, "
    "type(object.spec.runPolicy.schedulingPolicy.minResources[k]) == string ? "
    "object.spec.runPolicy.schedulingPolicy.minResources[k] != '' : true)",
]

BROKEN = {
    "no-such-field": ("has(object.spec) && has(object.spec.slotPerWorker)", "no field 'slotPerWorker'"),
    "optional-unguarded": ("has(object.spec) && object.spec.slotsPerWorker > 1",
                           "object.spec.slotsPerWorker: optional field read"),
    "spec-unguarded": ("object.spec.mpiReplicaSpecs.size() > 0", "object.spec: optional field read"),
    "guard-on-the-wrong-side": ("has(object.spec) && (object.spec.slotsPerWorker > 1 || has(object.spec.slotsPerWorker))",
                                "object.spec.slotsPerWorker: optional field read"),
    "guard-in-the-else-branch": ("has(object.spec) && (has(object.spec.slotsPerWorker) ? 1 : object.spec.slotsPerWorker) > 0",
                                 "object.spec.slotsPerWorker: optional field read"),
    "map-selected-as-object": (f"{SPECS} && object.spec.mpiReplicaSpecs.Worker.replicas == 1",
                               "selected on a map"),
    "has-on-a-map-key": (f"{SPECS} && has(object.spec.mpiReplicaSpecs.Worker)", "has() on a map key"),
    "map-key-unguarded": (f"{SPECS} && has(object.spec.mpiReplicaSpecs['Worker'].replicas)",
                          "map key read where nothing proves it present"),
    "object-indexed-as-map": ("has(object.spec) && object.spec['runPolicy'] != null", "an object indexed like a map"),
    "container-resources-unguarded": (f"{CONTAINERS}.all(c, has(c.resources.limits))",
                                      "c.resources: optional field read"),
    "quantity-compared-as-int": (f"{CONTAINERS}.all(c, !has(c.resources) || !has(c.resources.limits) || "
                                 "c.resources.limits.all(k, c.resources.limits[k] < 2))",
                                 "int-or-string value used as it is"),
    "quantity-without-string": (f"{CONTAINERS}.all(c, !has(c.resources) || !has(c.resources.limits) || "
                                "c.resources.limits.all(k, quantity(c.resources.limits[k]).isInteger()))",
                                "int-or-string value used as it is"),
    "old-object-on-create": ("has(oldObject.spec)", "oldObject read where the request may be a CREATE"),
    "integer-compared-with-string": ("has(object.spec) && has(object.spec.slotsPerWorker) && "
                                     "object.spec.slotsPerWorker == '1'", "integer field compared with a string literal"),
}


@pytest.mark.parametrize("expression", GOOD)
def test_the_checker_accepts_guarded_reads(expression: str) -> None:
    assert check_expression(Checker(SCHEMA), expression) == []


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_the_checker_finds_each_mistake(name: str) -> None:
    expression, problem = BROKEN[name]
    found = check_expression(Checker(SCHEMA), expression)
    assert any(problem in p for p in found), found


def test_a_message_is_checked_where_its_validation_failed() -> None:
    validation = "!has(object.spec) || !has(object.spec.slotsPerWorker) || object.spec.slotsPerWorker < 9"

    def policy(message: str) -> dict:
        return {"spec": {"validations": [{"expression": validation, "messageExpression": message}]}}

    assert policy_problems(policy("string(object.spec.slotsPerWorker)"), SCHEMA) == []
    (problem,) = policy_problems(policy("string(object.spec.runLauncherAsWorker)"), SCHEMA)
    assert problem.startswith("validations[0].messageExpression: object.spec.runLauncherAsWorker: optional field")


def test_a_guard_removed_from_the_exported_policy_is_found() -> None:
    (policy,) = [p for _, p in _policies() if p["metadata"]["name"] == "mpijob-webhook-gpus-per-worker"][:1]
    broken = {**policy, "spec": {**policy["spec"], "variables": [
        {**v, "expression": v["expression"].replace("has(c.resources) && has(c.resources.limits)",
                                                    "has(c.resources.limits)")}
        for v in policy["spec"]["variables"]]}}
    assert broken != policy
    assert any("c.resources: optional field read" in p for p in policy_problems(broken, SCHEMA))


def test_a_policy_is_checked_against_the_crd_of_the_resource_it_matches() -> None:
    def policy(group: str, resource: str, expression: str) -> dict:
        return {"spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [group], "resources": [resource]}]},
                         "validations": [{"expression": expression}]}}

    mpijob_read = "!has(object.spec) || !has(object.spec.slotsPerWorker) || object.spec.slotsPerWorker < 9"
    trainjob_read = "!has(object.spec) || !has(object.spec.trainer) || !has(object.spec.trainer.numNodes)"
    mpi = policy("kubeflow.org", "mpijobs", mpijob_read)
    train = policy("trainer.kubeflow.org", "trainjobs", trainjob_read)
    assert policy_problems(mpi, schema_of(mpi)) == []
    assert policy_problems(train, schema_of(train)) == []
    wrong = policy("trainer.kubeflow.org", "trainjobs", mpijob_read)
    assert any("no field 'slotsPerWorker'" in p for p in policy_problems(wrong, schema_of(wrong)))
    with pytest.raises(AssertionError, match="no CRD schema here"):
        schema_of(policy("batch", "jobs", "true"))
