"""The exported TrainJob policies answer like the webhook: for every TrainJob, runtime set and
namespace, the rule ids the policies deny, warn and audit are those the webhook's exported rules
give, except the findings docs/vap.md leaves to the webhook, where the policies admit.

The policies are evaluated as the API server evaluates them (webhook.cel.policy_admission): once
per runtime of the param kind, answers ANDed; the webhook is asked through its /validate with the
same runtimes in its cluster view. Every TrainJob is one the API server would hand to admission.
"""
from __future__ import annotations

import copy
from functools import lru_cache
from typing import Any

import pytest

from policies.config.layered_policy import Policy
from policies.vap import objects
from policies.vap.trainjob_objects import TRAINJOB_EXPORTED_RULES
from tests.vap.corpus import namespaces, policies
from tests.vap.trainjob_corpus import (
    ADMITTED,
    KUEUE,
    LEFT_TO_WEBHOOK,
    NAMESPACE,
    NODE_CONTAINER,
    V21_POLICY,
    VIOLATIONS,
    _patched,
    job,
    params_for,
    pod_patch,
    runtime_patch,
    runtimes,
    upstream_examples,
)
from tests.vap.verdicts import vap_verdict
from tests.vap.trainjob_verdicts import admissible, vap_review, webhook_answer, webhook_verdict
from tests.vap.verdicts import on_update

KUEUE_USERNAME = "system:serviceaccount:kueue-system:kueue-controller-manager"
POLICIES: dict[str, Policy] = {**policies(), "pinned-v2.1": V21_POLICY}
RUNTIMES = runtimes()


@lru_cache(maxsize=None)
def exported(policy_name: str) -> list[dict[str, Any]]:
    return objects(POLICIES[policy_name], kinds=("TrainJob",), trainjob_rules=TRAINJOB_EXPORTED_RULES)


def policy_for(shape: str) -> str:
    return "pinned-v2.1" if shape == "v2.1" else "built-in"


def assert_same_answer(policy_name: str, trainjob: dict[str, Any], shape: str, namespace: str = NAMESPACE,
                       labels: dict[str, str] | None = None) -> dict[str, set[str]]:
    assert admissible(trainjob, shape) == []
    result = vap_review(exported(policy_name), trainjob, params_for(trainjob, RUNTIMES), namespace, labels)
    expected, lines = webhook_answer(POLICIES[policy_name], trainjob, RUNTIMES, namespace, labels)
    assert vap_verdict(result) == expected
    # Each message starts like the webhook's own line for a finding of that rule.
    for answer in result.answers:
        assert any(answer.message.startswith(line) for line in lines), (answer.message, lines)
    return expected


@pytest.mark.parametrize("name", sorted(VIOLATIONS))
def test_every_violation_is_refused_with_the_webhooks_rule_id(name: str) -> None:
    rule, trainjob, shape = VIOLATIONS[name]
    verdict = assert_same_answer(policy_for(shape), trainjob, shape)
    assert rule in verdict.get("deny", set()), "the variant must violate its rule"


@pytest.mark.parametrize("name", sorted(ADMITTED))
def test_lookalikes_the_webhook_admits_are_admitted(name: str) -> None:
    trainjob, shape = ADMITTED[name]
    assert assert_same_answer(policy_for(shape), trainjob, shape) == {}


@pytest.mark.parametrize("name", sorted(upstream_examples()))
def test_upstream_examples_on_other_runtimes_are_not_checked(name: str) -> None:
    trainjob = copy.deepcopy(upstream_examples()[name])
    trainjob["spec"]["trainer"]["numNodes"] = 500  # would be refused on an MPI runtime
    assert assert_same_answer("built-in", trainjob, "v2.3") == {}


@pytest.mark.parametrize("name", sorted(LEFT_TO_WEBHOOK))
def test_what_is_left_to_the_webhook_is_admitted_by_the_policies(name: str) -> None:
    rule, trainjob, shape = LEFT_TO_WEBHOOK[name]
    policy_name = policy_for(shape)
    assert admissible(trainjob, shape) == []
    webhook, _ = webhook_answer(POLICIES[policy_name], trainjob, RUNTIMES, NAMESPACE, everything=True)
    assert rule in webhook.get("deny", set())
    result = vap_review(exported(policy_name), trainjob, params_for(trainjob, RUNTIMES), NAMESPACE)
    assert rule not in vap_verdict(result).get("deny", set())


def boundary_trainjobs() -> dict[str, dict[str, Any]]:
    """TrainJobs at the values the policies' parameters move."""
    return {
        "small": job(numNodes=3, numProcPerNode=1),
        "wide": job(numNodes=41, numProcPerNode=4),
        "gpus": job("deepspeed-distributed", numNodes=3, numProcPerNode=1, resourcesPerNode={"limits": {"nvidia.com/gpu": 6}}),
        "long-name": job(name="p" * 44, numNodes=12, numProcPerNode=2),
    }


CASES = [(policy_name, namespace, labels) for policy_name in sorted(POLICIES)
         for namespace, labels in namespaces(POLICIES[policy_name])]


@pytest.mark.parametrize(("policy_name", "namespace", "labels"), CASES, ids=[f"{p}-{n}" for p, n, _ in CASES])
def test_each_policy_file_in_each_namespace(policy_name: str, namespace: str, labels: dict[str, str]) -> None:
    for trainjob in boundary_trainjobs().values():
        assert_same_answer(policy_name, {**trainjob, "metadata": {**trainjob["metadata"], "namespace": namespace}},
                           "v2.3", namespace, labels)


def test_the_namespaces_exercise_every_action() -> None:
    """The cases above would pass vacuously if no namespace gave a rule another action."""
    seen: set[str] = set()
    for policy_name, namespace, labels in CASES:
        for trainjob in boundary_trainjobs().values():
            verdict = webhook_verdict(POLICIES[policy_name], trainjob, RUNTIMES, namespace, labels)
            seen |= {action for action, rules in verdict.items() if rules}
    assert seen == {"deny", "warn", "audit"}


# --- UPDATE ---------------------------------------------------------------------------------
def _relabelled(trainjob: dict[str, Any]) -> dict[str, Any]:
    return {**trainjob, "metadata": {**trainjob["metadata"], "labels": {"a": "b"}}}


def _kueue_admits(trainjob: dict[str, Any]) -> dict[str, Any]:
    admitted = copy.deepcopy(trainjob)
    admitted["spec"]["suspend"] = False
    admitted["spec"]["runtimePatches"] = [*admitted["spec"].get("runtimePatches", []), KUEUE]
    return admitted


def _kueue_admits_v2_1(trainjob: dict[str, Any]) -> dict[str, Any]:
    """Kueue 0.16 on Trainer v2.1: its own podTemplateOverrides entries, labelled with the pod set."""
    admitted = copy.deepcopy(trainjob)
    admitted["spec"]["podTemplateOverrides"] = [
        *admitted["spec"].get("podTemplateOverrides", []),
        *({"targetJobs": [{"name": name}], "metadata": {"labels": {"kueue.x-k8s.io/podset": name}},
           "spec": {"nodeSelector": {"pool": "a100"}}} for name in ("launcher", "node"))]
    return admitted


def _suspended(trainjob: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(trainjob)
    out["spec"]["suspend"] = True
    return out


def _without_patches(trainjob: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(trainjob)
    del out["spec"]["runtimePatches"]
    return out


KUEUE_NAMED_FIX = _patched(job("node-container-renamed", numNodes=3),
                           runtime_patch("kueue.x-k8s.io/manager", {"node": pod_patch(NODE_CONTAINER)}))
NODES_120 = VIOLATIONS["nodes-120"][1]
SLOTS_9 = VIOLATIONS["slots-9"][1]
UPDATES = {
    "unchanged-violation-ratcheted": (NODES_120, _relabelled(NODES_120)),
    "kueue-admits-a-violating-job": (_suspended(SLOTS_9), _kueue_admits(SLOTS_9)),
    "kueue-admission-of-a-patched-job": (_suspended(VIOLATIONS["own-mutation-patch-kept"][1]),
                                         _kueue_admits(VIOLATIONS["own-mutation-patch-kept"][1])),
    "kueue-admits-a-violating-v2-1-job": (_suspended(VIOLATIONS["slots-string-9-v21"][1]),
                                          _kueue_admits_v2_1(_suspended(VIOLATIONS["slots-string-9-v21"][1]))),
    # Kueue's entry written by a user: checked, not Kueue's admission (ratcheted like any update)
    "user-writes-kueues-entry-ratcheted": (_suspended(SLOTS_9), _kueue_admits(SLOTS_9)),
    # an entry under Kueue's name that made the runtime usable (it adds the node container),
    # taken out again: Kueue stopping the job passes, a user doing the same is checked
    "kueue-removes-its-entry": (_suspended(KUEUE_NAMED_FIX), _without_patches(KUEUE_NAMED_FIX)),
    "user-removes-an-entry-under-kueues-name-enforced": (_suspended(KUEUE_NAMED_FIX), _without_patches(KUEUE_NAMED_FIX)),
    "new-violation-enforced": (job(numNodes=3), job(numNodes=3, numProcPerNode=9)),
    "worse-violation-enforced": (NODES_120, job(numNodes=130)),
    "suspend-flip-and-more-nodes": (_suspended(job(numNodes=3)), job(numNodes=120)),
}


@pytest.mark.parametrize("name", sorted(UPDATES))
def test_updates_are_ratcheted_like_the_webhook(name: str) -> None:
    old, new = UPDATES[name]
    username = KUEUE_USERNAME if name.startswith("kueue") else "alice"
    webhook = webhook_verdict(POLICIES["built-in"], new, RUNTIMES, NAMESPACE, operation="UPDATE", old=old,
                              username=username)
    result = vap_review(exported("built-in"), new, params_for(new, RUNTIMES), NAMESPACE, operation="UPDATE", old=old,
                        username=username)
    assert on_update(vap_verdict(result)) == on_update(webhook)
    assert result.allowed is (name.endswith("ratcheted") or name.startswith("kueue"))
