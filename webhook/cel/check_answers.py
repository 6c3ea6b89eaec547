"""``check --vap``: what the exported ValidatingAdmissionPolicies alone answer for a manifest,
evaluated as the API server evaluates them (webhook.cel), for a cluster whose webhook is down.

Only kubeflow.org/v2beta1 manifests reach the policies unchanged: a write in an older version
is converted by the webhook first, and with the webhook down the API server refuses it before
any policy runs.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from policies.config.layered_policy import Policy
from policies.mpijob.pruning_defaulting import as_admitted
from policies.vap import objects
from webhook.cel import MISSING
from webhook.cel import cel_runtime as evaluator

HUB = "kubeflow.org/v2beta1"

__all__ = ["MISSING", "answer", "available", "exported", "render"]


def available() -> bool:
    return evaluator.available()


def exported(policy: Policy) -> list[dict[str, Any]]:
    return objects(policy)


def answer(exported_objects: list[dict[str, Any]], obj: Mapping[str, Any], namespace: str,
           labels: Mapping[str, str]) -> dict[str, Any]:
    from webhook.cel.policy_admission import Request, review

    if obj.get("apiVersion") != HUB:
        return {"decision": "not-evaluated",
                "reason": f"written in {obj.get('apiVersion')}: the API server converts it through the webhook "
                          "before any policy runs, and refuses it while the webhook is down",
                "deny": [], "warn": [], "audit": []}
    admitted, _ = as_admitted(dict(obj))
    result = review(exported_objects, Request(admitted, namespace, namespace_labels=dict(labels)))
    return {
        "decision": "admitted" if result.allowed else "denied",
        "deny": result.messages("Deny"),
        "warn": result.messages("Warn"),
        "audit": result.messages("Audit"),
    }


def render(vap: Mapping[str, Any]) -> Iterator[str]:
    if vap["decision"] == "not-evaluated":
        yield f"  vap     not evaluated: {vap['reason']}"
        return
    yield f"  vap     {vap['decision']} by the exported policies alone"
    for action in ("deny", "warn", "audit"):
        for message in vap[action]:
            yield f"  vap {action:<7} {message}"
