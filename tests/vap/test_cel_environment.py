"""The CEL environment the exported policies are checked in is the API server's (1.29–1.36):
every function declared as upstream declares it, and every exported expression compiles there.

`webhook/cel/cel_type_check.py` does what the API server does with a policy: compiles it when it is
created (object and params ``dyn``; a problem refuses the policy) and type-checks it against the
schema of the resource it matches (a problem is a ``status.typeChecking`` warning)."""
from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest
import yaml

from policies.vap import objects
from policies.vap.trainjob_objects import TRAINJOB_EXPORTED_RULES
from testing.crd import OBJECT_META, openapi_schema
from testing.reference_data import DATA, TRAINER
from tests.vap.corpus import policies
from webhook.cel import cel_type_check as type_check
from webhook.cel import declarations
from webhook.cel.policy_admission import PolicyRefused, Request, review

POLICIES = policies()
PARAM_CRDS = {"ClusterTrainingRuntime": "clustertrainingruntimes", "TrainingRuntime": "trainingruntimes"}


@cache
def _crd_schema(plural: str) -> dict[str, Any]:
    if plural == "mpijobs":
        return openapi_schema()
    crd = yaml.safe_load((TRAINER / "crds" / f"trainer.kubeflow.org_{plural}.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    return version["schema"]["openAPIV3Schema"]


def _typed(plural: str, objects_by_path: dict[str, Any]) -> type_check.Type:
    schema = _crd_schema(plural)
    root = {**schema, "properties": {**schema["properties"], "metadata": OBJECT_META}}
    return type_check.schema_type(root, plural, objects_by_path)


def schema_problems(policy: dict[str, Any]) -> list[str]:
    """The API server's type check of a policy against the CRDs of what it matches and its params."""
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    found: dict[str, Any] = {}
    job = _typed(rule["resources"][0], found)
    param_kind = policy["spec"].get("paramKind")
    params = _typed(PARAM_CRDS[param_kind["kind"]], found) if param_kind else type_check.DYN
    roots = {"object": job, "oldObject": job, "params": params, "namespaceObject": type_check.DYN}
    return type_check.policy_problems(policy, roots, found)


def exported_policies() -> list[tuple[str, dict[str, Any]]]:
    return [(f"{name}/{o['metadata']['name']}", o) for name in sorted(POLICIES) for o in objects(POLICIES[name], trainjob_rules=TRAINJOB_EXPORTED_RULES)
            if o["kind"] == "ValidatingAdmissionPolicy"]


EXPORTED = exported_policies()


@pytest.mark.parametrize(("name", "policy"), EXPORTED, ids=[n for n, _ in EXPORTED])
def test_every_exported_policy_compiles_as_the_api_server_compiles_it(name: str, policy: dict[str, Any]) -> None:
    assert type_check.compile_problems(policy) == []


@pytest.mark.parametrize(("name", "policy"), EXPORTED, ids=[n for n, _ in EXPORTED])
def test_every_exported_policy_type_checks_against_the_crds_without_warnings(name: str, policy: dict[str, Any]) -> None:
    assert schema_problems(policy) == []


def _policy(*validations: dict[str, str], variables: tuple[tuple[str, str], ...] = ()) -> dict[str, Any]:
    return {"spec": {"variables": [{"name": n, "expression": e} for n, e in variables],
                     "validations": list(validations)}}


@pytest.mark.parametrize(("expression", "problem"), [
    ("quantity('1').sign() >= 0", "found no matching overload for 'sign' applied to 'kubernetes.Quantity.()'"),
    ("isInteger(quantity('1'))", "found no matching overload for 'isInteger' applied to '(kubernetes.Quantity)'"),
    ("quantity('1').compareTo(1) == 0", "found no matching overload for 'compareTo' applied to 'kubernetes.Quantity.(int)'"),
    ("quantity('1').mul(2).isInteger()", "undeclared reference to 'mul'"),
    ("[1].includes(1)", "undeclared reference to 'includes'"),
    ("'a'.reverse() == 'a'", "undeclared reference to 'reverse'"),
    ("object.spec.all(i, v, v > 0)", "two-variable comprehension all(i, v, …) needs Kubernetes 1.32"),
    ("[1, 'a'].size() == 2", "expected type 'int' but found 'string'"),
    ("size('a') == 'b'", "found no matching overload for '_==_' applied to '(int, string)'"),
    ("['a'].join(1) == ''", "found no matching overload for 'join' applied to 'list(string).(int)'"),
])
def test_what_the_api_server_refuses_is_refused(expression: str, problem: str) -> None:
    assert type_check.compile_problems(_policy({"expression": expression})) == [f"validations[0].expression: {problem}"]


@pytest.mark.parametrize("expression", [
    "sign(quantity('1')) >= 0", "quantity(string(object.x)).isInteger()", "quantity('1').add(1).isLessThan(quantity('2'))",
    "[1, 2].max() == 2 && [1].sum() == 1 && [1].indexOf(1) == 0 && 'ab'.indexOf('b') == 1",
    "'a,b'.split(',').join('-') == 'a-b' && 'A'.lowerAscii() == 'a' && ' a '.trim() == 'a'",
    "'a'.find('a') == 'a' && isURL('https://x') && url('https://x').getHost() == 'x'",
    "object.spec.containers.map(c, c.name).exists(n, n.startsWith('a')) && has(object.spec.x)",
    "type(object.x) == string ? object.x.matches('^a') : int(object.x) > 0",
])
def test_what_the_api_server_compiles_compiles(expression: str) -> None:
    assert type_check.compile_problems(_policy({"expression": expression})) == []


def test_a_message_reading_a_variable_that_does_not_compile_is_refused_as_dyn() -> None:
    policy = _policy({"expression": "variables.bad == ''", "messageExpression": "variables.bad"},
                     variables=(("bad", "quantity('1').sign() > 0 ? 'x' : ''"),))
    assert type_check.compile_problems(policy) == [
        "variables.bad: found no matching overload for 'sign' applied to 'kubernetes.Quantity.()'",
        "validations[0].messageExpression: must evaluate to string but got dyn"]


def test_containers_and_init_containers_are_two_types_to_the_schema_type_check() -> None:
    pod = "object.spec.mpiReplicaSpecs['Worker'].template.spec"
    policy = {"spec": {"matchConstraints": {"resourceRules": [{"resources": ["mpijobs"]}]},
                       "validations": [{"expression": f"size({pod}.containers + {pod}.initContainers) > 0"},
                                       {"expression": f"size({pod}.containers.map(c, c.name) + "
                                                      f"{pod}.initContainers.map(c, c.name)) > 0"}]}}
    (problem,) = schema_problems(policy)
    assert problem.startswith("validations[0].expression: found no matching overload for '_+_' applied to "
                              "'(list(mpijobs.spec.mpiReplicaSpecs.@.template.spec.containers.@), ")


def test_the_evaluator_refuses_a_policy_the_api_server_would_not_create() -> None:
    policy = {"kind": "ValidatingAdmissionPolicy", "metadata": {"name": "p"},
              "spec": {"matchConstraints": {"resourceRules": [
                  {"apiGroups": ["kubeflow.org"], "resources": ["mpijobs"], "operations": ["CREATE"]}]},
                  "validations": [{"expression": "quantity('1').sign() == 1"}]}}
    binding = {"kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": "b"},
               "spec": {"policyName": "p", "validationActions": ["Deny"]}}
    with pytest.raises(PolicyRefused, match="'sign' applied to 'kubernetes.Quantity.\\(\\)'"):
        review([policy, binding], Request(obj={"kind": "MPIJob"}, namespace="a"))


def test_the_declarations_are_upstreams() -> None:
    """Every Kubernetes library overload, as transcribed from the upstream Go declarations into
    tests/data/cel (with the commits read)."""
    upstream = json.loads((DATA / "cel" / "kubernetes-cel-declarations.json").read_text())["overloads"]
    ours = [{"function": o.function, "style": "member" if o.member else "global", "arguments": list(o.arguments),
             "result": o.result, "since": "%d.%d" % o.since, "library": o.library}
            for o in declarations.FUNCTIONS if o.library.startswith("kubernetes.")]
    key = json.dumps
    assert sorted(map(key, ours)) == sorted(map(key, upstream))
    assert all(declarations.in_every_supported_version(o) for o in declarations.FUNCTIONS)
