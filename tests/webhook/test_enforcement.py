"""What each action does to the answer (deny, warn, audit), mutations on and off, dry-run
requests, exempt namespaces and label overrides, through the real Admission flow."""
from __future__ import annotations

import base64
import json

import jsonpatch
import pytest

from policies.cluster_view import StaticClusterView
from policies.config.reader import parse_policy
from policies.registry import MUTATION_IDS
from testing.builders import admission_review, mpijob
from testing.kube_objects import namespace
from webhook.admission import Decision
from webhook.review import parse_admission_review
from webhook.runtime import default_runtime

SLOTS = ("[slots-per-worker] spec.slotsPerWorker: Invalid value: 9: slotsPerWorker must be between 1 and 8 "
         "(asked 9); set spec.slotsPerWorker to 8, and use more workers for more ranks")
CLUSTER = StaticClusterView(namespaces={"team-r": namespace("team-r", {"team": "research"})})


def admit(policy_text: str, review: dict, endpoint: str = "validate") -> tuple[dict, Decision]:
    decisions: list[Decision] = []
    runtime = default_runtime(parse_policy(policy_text), CLUSTER)
    runtime.admission.observers.append(decisions.append)
    answer = getattr(runtime.admission, endpoint)(parse_admission_review(review))
    [decision] = decisions
    return answer["response"], decision


def test_deny_refuses_with_the_finding():
    response, decision = admit("rules: {slots-per-worker: deny}", admission_review(mpijob(slots=9)))
    assert response["allowed"] is False
    assert response["status"]["code"] == 422
    assert response["status"]["message"] == f'MPIJob.kubeflow.org "pi" is invalid: {SLOTS}'
    assert response["auditAnnotations"] == {"denied-by": "slots-per-worker"}
    assert decision.verdict.rules_by_action() == {"deny": ("slots-per-worker",)}


def test_warn_admits_with_the_finding_as_a_warning():
    response, decision = admit("rules: {slots-per-worker: warn}", admission_review(mpijob(slots=9)))
    assert response["allowed"] is True
    assert response["warnings"] == [SLOTS]
    assert response["auditAnnotations"] == {"warned-by": "slots-per-worker"}
    assert decision.allowed


def test_audit_admits_silently_and_records_the_finding():
    response, decision = admit("rules: {slots-per-worker: audit}", admission_review(mpijob(slots=9)))
    assert response["allowed"] is True
    assert "warnings" not in response
    assert "status" not in response
    assert response["auditAnnotations"] == {"audited-by": "slots-per-worker"}
    assert [(o.finding.rule, o.action.value) for o in decision.verdict.outcomes] == [("slots-per-worker", "audit")]


def test_a_dry_run_gets_the_same_answer_and_is_marked_as_one():
    policy = "rules: {slots-per-worker: deny}"
    real, _ = admit(policy, admission_review(mpijob(slots=9)))
    dry, decision = admit(policy, admission_review(mpijob(slots=9), dry_run=True))
    assert decision.request.dry_run is True
    assert {k: v for k, v in dry.items() if k != "uid"} == {k: v for k, v in real.items() if k != "uid"}


def test_an_exempt_namespace_is_not_checked():
    response, decision = admit("exemptNamespaces: [sandbox]", admission_review(mpijob(slots=9), namespace="sandbox"))
    assert response == {"uid": response["uid"], "allowed": True}
    assert (decision.reason, decision.verdict) == ("exempt", None)


def test_a_label_override_applies_in_namespaces_with_the_label():
    policy = "overrides:\n- namespaceSelector: {matchLabels: {team: research}}\n  rules: {slots-per-worker: warn}\n"
    elsewhere, _ = admit(policy, admission_review(mpijob(slots=9), namespace="team-a"))
    research, _ = admit(policy, admission_review(mpijob(slots=9), namespace="team-r"))
    assert elsewhere["allowed"] is False
    assert research["allowed"] is True
    assert research["warnings"] == [SLOTS]


def mutated(response: dict, job: dict) -> dict:
    patch = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    return jsonpatch.apply_patch(job, patch)


def test_mutations_run_when_enabled():
    job = mpijob()
    response, decision = admit("mutations: {istio-sidecar-off: true}", admission_review(job), "mutate")
    assert "istio-sidecar-off" in decision.mutation.applied
    result = mutated(response, job)
    for role in ("Launcher", "Worker"):
        metadata = result["spec"]["mpiReplicaSpecs"][role]["template"]["metadata"]
        assert metadata["labels"]["sidecar.istio.io/inject"] == "false"


def test_a_disabled_mutation_leaves_its_fields_alone():
    job = mpijob()
    response, decision = admit("mutations: {istio-sidecar-off: false}", admission_review(job), "mutate")
    assert "istio-sidecar-off" not in decision.mutation.applied
    result = mutated(response, job)
    for role in ("Launcher", "Worker"):
        template = result["spec"]["mpiReplicaSpecs"][role]["template"]
        assert "sidecar.istio.io/inject" not in json.dumps(template.get("metadata", {}))


def test_all_mutations_off_means_no_patch():
    policy = "mutations: {" + ", ".join(f"{m}: false" for m in MUTATION_IDS) + "}"
    response, decision = admit(policy, admission_review(mpijob()), "mutate")
    assert response == {"uid": response["uid"], "allowed": True}
    assert decision.mutation.applied == ()


@pytest.mark.parametrize("dry_run", [False, True])
def test_mutations_apply_to_dry_runs_alike(dry_run):
    response, decision = admit("{}", admission_review(mpijob(), dry_run=dry_run), "mutate")
    assert decision.request.dry_run is dry_run
    assert "istio-sidecar-off" in decision.mutation.applied
    assert response["patchType"] == "JSONPatch"
