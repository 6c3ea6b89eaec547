"""The two answers compared by the parity tests: the webhook's (its engine, the static rules
only) and the exported ValidatingAdmissionPolicies' (evaluated like the API server does),
each as rule ids by action."""
from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from policies import engine, registry
from policies.interface import RuleContext
from policies.cluster_view import StaticClusterView
from policies.config.layered_policy import Policy
from policies.mpijob.crd_type_check import check_shape
from policies.vap import EXPORTED_RULES
from testing.crd import schema_errors
from webhook.cel.policy_admission import Request, Review, review

STATIC_RULES = tuple(rule for rule in registry.RULES if rule.id in EXPORTED_RULES)
# Cluster state is available and empty: no LimitRange bounds GPUs, the parameter does.
EMPTY_CLUSTER = StaticClusterView()
GENERATED_SUFFIX = "xxxxx"
ACTIONS = {"Deny": "deny", "Warn": "warn", "Audit": "audit"}

Verdict = dict[str, set[str]]


def admissible(job: Mapping[str, Any]) -> list[str]:
    """Why the API server (CRD schema) or the webhook's shape check would refuse the job before
    any rule runs: such jobs never reach a policy, so they are not parity cases."""
    return [*schema_errors(job), *(f.message for f in check_shape(job))]


def _name(job: Mapping[str, Any]) -> tuple[str, bool]:
    meta = job.get("metadata") or {}
    if meta.get("name"):
        return meta["name"], False
    if meta.get("generateName"):
        return meta["generateName"] + GENERATED_SUFFIX, True
    return "", False


def webhook_verdict(policy: Policy, job: Mapping[str, Any], namespace: str, labels: Mapping[str, str] | None = None,
                    *, operation: str = "CREATE", old: Mapping[str, Any] | None = None) -> Verdict:
    settings = policy.settings_for(namespace, labels or {})
    if settings is None:
        return {}
    name, generated = _name(job)
    ctx = RuleContext(operation=operation, job=copy.deepcopy(job), namespace=namespace, name=name, settings=settings,
                      cluster=EMPTY_CLUSTER, old_job=copy.deepcopy(old) if old is not None else None,
                      generated_name=generated)
    outcome = engine.evaluate(ctx, STATIC_RULES)
    assert outcome.error is None, outcome.error
    return {action.value: set(ids) for action, ids in outcome.rules_by_action().items()}


def webhook_lines(policy: Policy, job: Mapping[str, Any], namespace: str,
                  labels: Mapping[str, str] | None = None) -> list[str]:
    """``[rule] path:`` of every finding the webhook reports."""
    settings = policy.settings_for(namespace, labels or {})
    if settings is None:
        return []
    name, generated = _name(job)
    ctx = RuleContext(operation="CREATE", job=job, namespace=namespace, name=name, settings=settings,
                      cluster=EMPTY_CLUSTER, generated_name=generated)
    return [f"[{o.finding.rule}] {o.finding.path}:" for o in engine.evaluate(ctx, STATIC_RULES).outcomes]


def vap_review(objects: list[dict[str, Any]], job: Mapping[str, Any], namespace: str,
               labels: Mapping[str, str] | None = None, *, operation: str = "CREATE",
               old: Mapping[str, Any] | None = None) -> Review:
    return review(objects, Request(job, namespace, old, operation, dict(labels or {})))


def vap_verdict(result: Review) -> Verdict:
    errors = [a.message for a in result.answers if a.error]
    assert errors == [], errors
    verdict: Verdict = {}
    for answer in result.answers:
        for action in answer.actions:
            verdict.setdefault(ACTIONS[action], set()).add(answer.rule)
    return verdict


def on_update(verdict: Verdict) -> Verdict:
    """What an UPDATE is answered with: the webhook audits a finding the stored object already
    had, the policy passes it; both deny and warn the same."""
    return {action: rules for action, rules in verdict.items() if action != "audit" and rules}
