"""``check --vap``: what the exported ValidatingAdmissionPolicies alone answer for a manifest,
evaluated as the API server evaluates them (webhook.cel), for a cluster whose webhook is down.

Only kubeflow.org/v2beta1 manifests reach the policies unchanged: a write in an older version
is converted by the webhook first, and with the webhook down the API server refuses it before
any policy runs. A TrainJob (trainer.kubeflow.org/v1alpha1) is evaluated with the training
runtimes given (in the input or the cluster state) as the policies' params, as the API server
hands them in.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from policies.config.layered_policy import Policy
from policies.mpijob.pruning_defaulting import as_admitted
from policies.trainer.api import API_VERSION as TRAINER_API_VERSION, GROUP as TRAINER_GROUP, TRAINING_RUNTIME, TRAINJOB
from policies.trainer.api import TRAINJOBS, VERSION as TRAINER_VERSION, detect_shape
from policies.trainer.runtime_type_check import check_runtime
from policies.trainer.stored_trainjob import as_stored_trainjob
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
           labels: Mapping[str, str], runtimes: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """What the policies answer for ``obj`` (an MPIJob, or a TrainJob whose training runtimes,
    every one the cluster would hold, are ``runtimes``)."""
    from webhook.cel.policy_admission import Request, review

    if obj.get("kind") == TRAINJOB:
        if obj.get("apiVersion") != TRAINER_API_VERSION:
            return _not_evaluated(f"written in {obj.get('apiVersion')}: the exported policies match "
                                  f"{TRAINER_API_VERSION} TrainJobs")
        # As the API server holds them: the TrainJob pruned and defaulted, the runtimes it would
        # refuse absent and the others as stored.
        stored, _ = as_stored_trainjob(obj, detect_shape(obj))
        held = tuple(checked.stored for checked in map(check_runtime, runtimes) if checked.valid)
        request = Request(stored, namespace, namespace_labels=dict(labels), group=TRAINER_GROUP,
                          version=TRAINER_VERSION, resource=TRAINJOBS, params=held,
                          namespaced_param_kinds=frozenset({TRAINING_RUNTIME}))
    elif obj.get("apiVersion") != HUB:
        return _not_evaluated(f"written in {obj.get('apiVersion')}: the API server converts it through the webhook "
                              "before any policy runs, and refuses it while the webhook is down")
    else:
        admitted, _ = as_admitted(dict(obj))
        request = Request(admitted, namespace, namespace_labels=dict(labels))
    result = review(exported_objects, request)
    return {
        "decision": "admitted" if result.allowed else "denied",
        "deny": result.messages("Deny"),
        "warn": result.messages("Warn"),
        "audit": result.messages("Audit"),
    }


def _not_evaluated(reason: str) -> dict[str, Any]:
    return {"decision": "not-evaluated", "reason": reason, "deny": [], "warn": [], "audit": []}


def render(vap: Mapping[str, Any]) -> Iterator[str]:
    if vap["decision"] == "not-evaluated":
        yield f"  vap     not evaluated: {vap['reason']}"
        return
    yield f"  vap     {vap['decision']} by the exported policies alone"
    for action in ("deny", "warn", "audit"):
        for message in vap[action]:
            yield f"  vap {action:<7} {message}"
