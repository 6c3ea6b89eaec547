"""The exported policies answer like the webhook: for every job and namespace, the rule ids
the policies deny, warn and audit are those the webhook's static rules deny, warn and audit.

Every job here is one the API server would hand to admission (valid against the CRD schema)
and that passes the webhook's shape check; the policies are evaluated the way the API server
evaluates them (webhook.cel.policy_admission), and each evaluation is held to its CEL cost limits.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

import pytest

from policies.vap import objects
from tests.vap.corpus import ADMITTED, VIOLATIONS, boundary_jobs, namespaces, policies, upstream_jobs
from tests.vap.verdicts import admissible, on_update, vap_review, vap_verdict, webhook_lines, webhook_verdict

POLICIES = policies()
BUILT_IN = POLICIES["built-in"]


@lru_cache(maxsize=None)
def exported(policy_name: str) -> list[dict[str, Any]]:
    return objects(POLICIES[policy_name], kinds=("MPIJob",))  # the TrainJob ones: test_trainjob_parity.py


def assert_same_answer(policy_name: str, job: dict[str, Any], namespace: str, labels: dict[str, str]) -> None:
    assert admissible(job) == []
    result = vap_review(exported(policy_name), job, namespace, labels)
    expected = webhook_verdict(POLICIES[policy_name], job, namespace, labels)
    assert vap_verdict(result) == expected
    # Each message starts like the webhook's own line for a finding of that rule.
    lines = webhook_lines(POLICIES[policy_name], job, namespace, labels)
    for answer in result.answers:
        assert any(answer.message.startswith(line) for line in lines), (answer.message, lines)


@pytest.mark.parametrize("name", sorted(VIOLATIONS))
def test_every_violation_is_refused_with_the_webhooks_rule_id(name: str) -> None:
    rule, job = VIOLATIONS[name]
    assert rule in webhook_verdict(BUILT_IN, job, "team-a").get("deny", set()), "the variant must violate its rule"
    assert_same_answer("built-in", job, "team-a", {})


@pytest.mark.parametrize("name", sorted(ADMITTED))
def test_lookalikes_the_webhook_admits_are_admitted(name: str) -> None:
    job = ADMITTED[name]
    assert webhook_verdict(BUILT_IN, job, "team-a") == {}
    assert_same_answer("built-in", job, "team-a", {})


@pytest.mark.parametrize("name", sorted(upstream_jobs()))
def test_upstream_examples(name: str) -> None:
    job = upstream_jobs()[name]
    for policy_name in ("built-in", "examples", "actions-and-overrides"):
        for namespace, labels in namespaces(POLICIES[policy_name])[:3]:
            assert_same_answer(policy_name, job, namespace, labels)


CASES = [(policy_name, namespace, labels) for policy_name in sorted(POLICIES)
         for namespace, labels in namespaces(POLICIES[policy_name])]


@pytest.mark.parametrize(("policy_name", "namespace", "labels"), CASES,
                         ids=[f"{p}-{n}" for p, n, _ in CASES])
def test_each_policy_file_in_each_namespace(policy_name: str, namespace: str, labels: dict[str, str]) -> None:
    for job in boundary_jobs().values():
        assert_same_answer(policy_name, job, namespace, labels)


def test_the_namespaces_exercise_every_action_and_exemption() -> None:
    """The cases above would pass vacuously if no namespace gave a rule another action."""
    seen: set[str] = set()
    exempt = 0
    for policy_name, namespace, labels in CASES:
        for job in boundary_jobs().values():
            verdict = webhook_verdict(POLICIES[policy_name], job, namespace, labels)
            seen |= {action for action, rules in verdict.items() if rules}
        exempt += POLICIES[policy_name].is_exempt(namespace, labels)
    assert seen == {"deny", "warn", "audit"}
    assert exempt >= 3


# --- UPDATE: what the stored object already had is not this update's doing ------------------
def _updated(job: dict[str, Any], **labels: str) -> dict[str, Any]:
    changed = {**job, "metadata": {**job["metadata"], "labels": labels}}
    return changed


UPDATES = {
    "unchanged-violations-ratcheted": (VIOLATIONS["workers-101"][1], _updated(VIOLATIONS["workers-101"][1], a="b")),
    "gpus-unchanged-ratcheted": (VIOLATIONS["worker-gpus-fraction"][1],
                                 _updated(VIOLATIONS["worker-gpus-fraction"][1], a="b")),
    "unknown-key-kept-ratcheted": (VIOLATIONS["unknown-replica-type"][1],
                                   _updated(VIOLATIONS["unknown-replica-type"][1], a="b")),
    "min-resources-kept-ratcheted": (VIOLATIONS["min-resources-negative"][1],
                                     _updated(VIOLATIONS["min-resources-negative"][1], a="b")),
    "new-violation-enforced": (ADMITTED["worker-gpus-at-max"], VIOLATIONS["worker-gpus-over"][1]),
    "worse-violation-enforced": (VIOLATIONS["workers-101"][1], {**VIOLATIONS["workers-101"][1], "spec": {
        **VIOLATIONS["workers-101"][1]["spec"], "slotsPerWorker": 9}}),
    "managed-by-changed": (ADMITTED["managed-by-multikueue"], ADMITTED["restart-on-failure"]),
}


@pytest.mark.parametrize("name", sorted(UPDATES))
def test_updates_are_ratcheted_like_the_webhook(name: str) -> None:
    old, new = UPDATES[name]
    webhook = webhook_verdict(BUILT_IN, new, "team-a", operation="UPDATE", old=old)
    result = vap_review(exported("built-in"), new, "team-a", operation="UPDATE", old=old)
    assert on_update(vap_verdict(result)) == on_update(webhook)
    if name.endswith("ratcheted"):
        assert result.allowed and webhook.get("audit")
    else:
        assert not result.allowed
