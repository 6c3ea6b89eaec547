"""The two answers the TrainJob parity tests compare: the webhook's (its /validate, with only the
exported rules, the runtimes in its cluster view) and the exported TrainJob policies' (evaluated
as the API server evaluates them, the runtimes handed in as params), each as rule ids by action."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from policies import registry
from policies.cluster_view import StaticClusterView
from policies.config.layered_policy import Policy
from policies.trainer.api import CLUSTER_TRAINING_RUNTIME, TRAINING_RUNTIME
from policies.trainer.type_check import check_trainjob_shape
from policies.vap.trainjob_objects import TRAINJOB_EXPORTED_RULES
from testing.app_client import webhook
from tests.policies.trainer.trainer_data import trainjob_review
from tests.policies.trainer.trainjob_crd import trainjob_schema_errors, trainjob_v2_1_schema_errors
from tests.vap.verdicts import Verdict
from webhook.cel.policy_admission import Request, Review, review

STATIC_TRAINJOB_RULES = tuple(rule for rule in registry.TRAINJOB_RULES if rule.id in TRAINJOB_EXPORTED_RULES)
Runtime = Mapping[str, Any]


def admissible(trainjob: Mapping[str, Any], shape: str = "v2.3") -> list[str]:
    """Why the API server (the v2.3.0 CRD schema, or the v2.1 shape's) or the webhook's type check
    would refuse it first."""
    schema = trainjob_v2_1_schema_errors if shape == "v2.1" else trainjob_schema_errors
    return [*schema(trainjob), *(f.message for f in check_trainjob_shape(trainjob))]


def _view(runtimes: Sequence[Runtime], namespace: str, labels: Mapping[str, str]) -> StaticClusterView:
    cluster = {r["metadata"]["name"]: r for r in runtimes if r["kind"] == CLUSTER_TRAINING_RUNTIME}
    local: dict[str, dict[str, Runtime]] = {}
    for r in runtimes:
        if r["kind"] == TRAINING_RUNTIME:
            local.setdefault(r["metadata"].get("namespace", ""), {})[r["metadata"]["name"]] = r
    return StaticClusterView(cluster_runtimes=cluster, runtimes=local,
                             namespaces={namespace: {"metadata": {"name": namespace, "labels": dict(labels)}}})


def per_node_decides(trainjob: Mapping[str, Any], runtimes: Sequence[Runtime]) -> bool:
    """Whether resourcesPerNode alone decides the GPUs of the pods that get it (the case
    ``gpus-per-worker`` is exported for; docs/vap.md): given, received by a runtime node
    container without resources of its own, and no patch writing such resources or the ancestor
    label."""
    spec = trainjob.get("spec") or {}
    if "resourcesPerNode" not in (spec.get("trainer") or {}):
        return False
    ref = spec.get("runtimeRef") or {}
    found = [r for r in runtimes if r["metadata"]["name"] == ref.get("name")
             and r["kind"] == (ref.get("kind") or "ClusterTrainingRuntime")]
    if not found:
        return False
    rt = found[0]
    jobs = {j.get("name"): j for j in rt["spec"].get("template", {}).get("spec", {}).get("replicatedJobs", [])}

    def node_container(job: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        pod = ((((job or {}).get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
        return next((c for c in pod.get("containers") or [] if c.get("name") == "node"), None)

    launcher = jobs.get("launcher")
    labels = (((launcher or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}
    receivers = []
    if labels.get("trainer.kubeflow.org/trainjob-ancestor-step") == "trainer" and node_container(launcher):
        receivers.append(node_container(launcher))
    if (rt["spec"]["mlPolicy"].get("mpi") or {}).get("runLauncherAsNode") is True and node_container(jobs.get("node")):
        receivers.append(node_container(jobs.get("node")))
    patches = str(spec.get("runtimePatches", "")) + str(spec.get("podTemplateOverrides", ""))
    return bool(receivers) and all("resources" not in c for c in receivers if c) and "resources" not in patches \
        and "trainjob-ancestor-step" not in patches


def webhook_answer(policy: Policy, trainjob: Mapping[str, Any], runtimes: Sequence[Runtime], namespace: str,
                   labels: Mapping[str, str] | None = None, *, operation: str = "CREATE",
                   old: Mapping[str, Any] | None = None, everything: bool = False,
                   username: str = "alice") -> tuple[Verdict, list[str]]:
    """(rule ids by action, ``[rule] path:`` of every finding) of the webhook's /validate, for
    the rules exported for this TrainJob (``everything``: also where a rule is left to the webhook)."""
    served = webhook(rules=STATIC_TRAINJOB_RULES, policy=policy, cluster=_view(runtimes, namespace, labels or {}))
    served.review("/validate", trainjob_review(trainjob, operation=operation, old=old, namespace=namespace,
                                               username=username))
    verdict = served.last.verdict
    if verdict is None:
        return {}, []
    assert verdict.error is None, verdict.error
    found: Verdict = {}
    lines = []
    exported = set(TRAINJOB_EXPORTED_RULES)
    if not everything and not per_node_decides(trainjob, runtimes):
        exported.discard("gpus-per-worker")  # left to the webhook
    for outcome in verdict.outcomes:
        if outcome.finding.rule in exported:
            found.setdefault(outcome.action.value, set()).add(outcome.finding.rule)
            lines.append(f"[{outcome.finding.rule}] {outcome.finding.path}:")
    return found, lines


def webhook_verdict(policy: Policy, trainjob: Mapping[str, Any], runtimes: Sequence[Runtime], namespace: str,
                    labels: Mapping[str, str] | None = None, **update: Any) -> Verdict:
    return webhook_answer(policy, trainjob, runtimes, namespace, labels, **update)[0]


def vap_review(objects: list[dict[str, Any]], trainjob: Mapping[str, Any], runtimes: Sequence[Runtime],
               namespace: str, labels: Mapping[str, str] | None = None, *, operation: str = "CREATE",
               old: Mapping[str, Any] | None = None, username: str = "alice") -> Review:
    return review(objects, Request(trainjob, namespace, old, operation, dict(labels or {}),
                                   group="trainer.kubeflow.org", version="v1alpha1", resource="trainjobs",
                                   username=username,
                                   params=tuple(runtimes), namespaced_param_kinds=frozenset({TRAINING_RUNTIME})))
