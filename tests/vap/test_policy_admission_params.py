"""Params as the API server hands them to a policy (webhook.cel.policy_admission): the objects
of the policy's paramKind that the binding's paramRef selects, each evaluated on its own, the
answers ANDed, and parameterNotFoundAction when none is found."""
from __future__ import annotations

from typing import Any

import pytest

from webhook.cel.policy_admission import Request, review

KIND = {"apiVersion": "example.com/v1", "kind": "Limit"}


def _policy(param_kind: dict[str, str] = KIND) -> dict[str, Any]:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "limit"},
            "spec": {"failurePolicy": "Fail", "paramKind": param_kind,
                     "matchConstraints": {"resourceRules": [{"apiGroups": ["kubeflow.org"], "apiVersions": ["v2beta1"],
                                                             "operations": ["CREATE"], "resources": ["mpijobs"]}]},
                     "validations": [{"expression": "object.spec.n <= params.max",
                                      "messageExpression": "'over ' + params.metadata.name"}]}}


def _binding(**param_ref: Any) -> dict[str, Any]:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": "limit"},
            "spec": {"policyName": "limit", "validationActions": ["Deny"], "paramRef": param_ref}}


def _param(name: str, maximum: int, namespace: str = "", **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if namespace:
        meta["namespace"] = namespace
    return {**KIND, "metadata": meta, "max": maximum}


def _messages(binding: dict[str, Any], params: list[dict[str, Any]], n: int = 5, namespace: str = "team-a",
              namespaced: bool = False) -> list[str]:
    request = Request({"kind": "MPIJob", "metadata": {"name": "x"}, "spec": {"n": n}}, namespace, params=tuple(params),
                      namespaced_param_kinds=frozenset({"Limit"}) if namespaced else frozenset())
    return sorted(a.message for a in review([_policy(), binding], request).answers)


ALL = {"selector": {}, "parameterNotFoundAction": "Allow"}


def test_every_param_is_evaluated_and_the_answers_anded() -> None:
    params = [_param("small", 3), _param("large", 10), _param("tiny", 1)]
    assert _messages(_binding(**ALL), params) == ["over small", "over tiny"]
    assert _messages(_binding(**ALL), params, n=1) == []


def test_a_selector_chooses_by_label_and_a_name_by_name() -> None:
    params = [_param("small", 3, tier="a"), _param("tiny", 1, tier="b")]
    assert _messages(_binding(selector={"matchLabels": {"tier": "b"}}, parameterNotFoundAction="Allow"),
                     params) == ["over tiny"]
    assert _messages(_binding(name="small", parameterNotFoundAction="Allow"), params) == ["over small"]


def test_a_namespaced_kind_reads_the_requests_namespace_unless_the_binding_names_one() -> None:
    params = [_param("here", 1, "team-a"), _param("there", 2, "team-b")]
    assert _messages(_binding(**ALL), params, namespaced=True) == ["over here"]
    assert _messages(_binding(**ALL, namespace="team-b"), params, namespaced=True) == ["over there"]
    assert _messages(_binding(**ALL), params, namespace="team-c", namespaced=True) == []


def test_a_cluster_scoped_kind_reads_only_objects_without_a_namespace() -> None:
    assert _messages(_binding(**ALL), [_param("global", 1), _param("local", 1, "team-a")]) == ["over global"]


@pytest.mark.parametrize(("action", "expected"), [
    ("Allow", []),
    ("Deny", ["no params found for policy binding with `Deny` parameterNotFoundAction"]),
])
def test_no_param_found_is_the_bindings_parameter_not_found_action(action: str, expected: list[str]) -> None:
    assert _messages(_binding(selector={}, parameterNotFoundAction=action), [_param("other", 1, "team-b")]) == expected
