"""Kueue's own updates of an MPIJob through /validate, in the envelope a Kubernetes 1.36 API server
sent for an UPDATE (tests/data/captured/04b…): starting a queued job (suspend false and the
flavor on the pod templates) or stopping it is never denied when Kueue's identity sends it;
the same update from anyone else, or one from Kueue that changes more, is checked as usual. A
ServiceAccount named like Kueue's that the policy does not list is told about in the log."""
from __future__ import annotations

import copy
import logging
import threading
import uuid

import pytest

from policies.cluster_view import StaticClusterView
from policies.config.reader import parse_policy
from testing.app_client import Webhook, webhook
from testing.builders import mpijob
from testing.kube_objects import namespace, node
from testing.reference_data import captured_reviews
from tests.policies.test_kueue_changes import admitted, suspended
from webhook import audit
from webhook.unlisted_kueue import UnlistedKueue, policy_line

ENVELOPE = captured_reviews()["04b-patch-spec-v2beta1-validating.request.json"]
KUEUE = "system:serviceaccount:kueue-system:kueue-controller-manager"
RHOAI_KUEUE = "system:serviceaccount:redhat-ods-applications:kueue-controller-manager"
# node-fit tightened to deny after the job was queued; no node carries the flavor's label.
POLICY = parse_policy("rules:\n  node-fit: deny\n")
CLUSTER = StaticClusterView(namespaces={"team-a": namespace("team-a")},
                            node_list=[node("n1", {"cpu": 16, "memory": "64Gi", "pods": 110})])
QUEUED = suspended(mpijob(workers=2))
RUNNING = admitted(QUEUED)
NOT_DENIED = (f"not denied: Kueue ({KUEUE}) started or stopped the job, changing only runPolicy.suspend and the pod "
              "templates' scheduling fields; the findings below deny this update from anyone else")


def update(old: dict, new: dict, username: str) -> dict:
    """The recorded UPDATE review, carrying ``old`` → ``new`` from ``username``."""
    review = copy.deepcopy(ENVELOPE)
    request = review["request"]
    request.update(uid=str(uuid.uuid4()), name=new["metadata"]["name"], object=new, oldObject=old,
                   options={"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions", "fieldManager": "kueue"})
    namespace_of = username.split(":")[2] if username.startswith("system:serviceaccount:") else ""
    request["userInfo"] = {"username": username, "groups": [
        *(["system:serviceaccounts", f"system:serviceaccounts:{namespace_of}"] if namespace_of else []),
        "system:authenticated"]}
    return review


@pytest.fixture
def served() -> Webhook:
    return webhook(policy=POLICY, cluster=CLUSTER)


def node_fit_lines(answer: dict) -> list[str]:
    return [w for w in answer["response"].get("warnings", []) if w.startswith("[node-fit]")]


def test_kueue_admitting_a_queued_job_is_not_denied_and_what_it_found_is_said(served: Webhook):
    answer = served.review("/validate", update(QUEUED, RUNNING, KUEUE))["response"]
    assert answer["allowed"] is True
    assert answer["warnings"][0] == NOT_DENIED and len(NOT_DENIED) <= 256  # the API server cuts longer ones
    assert node_fit_lines({"response": answer}) == [
        f"[node-fit] spec.mpiReplicaSpecs[{role}].template.spec: no node can ever run a {role} pod: no label "
        "cloud.example.com/accelerator=a100 on 1 of 1 node; fix its nodeSelector, affinity or tolerations"
        for role in ("Launcher", "Worker")]
    assert answer["auditAnnotations"]["warned-by"] == "node-fit"
    assert "denied-by" not in answer["auditAnnotations"]
    assert served.last.reason == "kueue-admission"
    logged = audit.record(served.last)
    assert (logged["decision"], logged["reason"], logged["user"]["username"]) == ("allowed", "kueue-admission", KUEUE)
    assert {(r["rule"], r["action"]) for r in logged["rules"]} == {("node-fit", "warn")}


def test_the_same_update_from_anyone_else_is_checked_as_usual(served: Webhook):
    answer = served.review("/validate", update(QUEUED, RUNNING, "kubernetes-admin"))["response"]
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 403
    assert [c["field"] for c in answer["status"]["details"]["causes"]] == [
        "spec.mpiReplicaSpecs[Launcher].template.spec", "spec.mpiReplicaSpecs[Worker].template.spec"]
    assert answer["auditAnnotations"]["denied-by"] == "node-fit"
    assert served.last.reason == "checked"


@pytest.mark.parametrize("edit", [
    lambda spec: spec["mpiReplicaSpecs"]["Worker"].__setitem__("replicas", 3),
    lambda spec: spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].__setitem__("image", "x:2"),
], ids=["worker-count", "image"])
def test_kueue_changing_more_than_kueue_changes_is_checked_as_usual(served: Webhook, edit):
    running = copy.deepcopy(RUNNING)
    edit(running["spec"])
    answer = served.review("/validate", update(QUEUED, running, KUEUE))["response"]
    assert answer["allowed"] is False
    assert answer["auditAnnotations"]["denied-by"] == "node-fit"
    assert NOT_DENIED not in answer.get("warnings", [])
    assert served.last.reason == "checked"


def test_kueue_stopping_a_job_restores_the_templates_and_is_kueue_s_too(served: Webhook):
    """Preemption or eviction: suspend true and the templates as they were before admission."""
    answer = served.review("/validate", update(RUNNING, QUEUED, KUEUE))["response"]
    assert answer["allowed"] is True
    assert served.last.reason == "kueue-admission"
    assert NOT_DENIED not in answer.get("warnings", [])  # nothing would have denied it: nothing to explain


def test_a_kueue_update_that_only_ratchets_keeps_its_audit_entries(served: Webhook):
    """A finding the queued job already had is recorded (audited-by), as for any update."""
    queued = suspended(mpijob(workers=2, slots=9))
    answer = served.review("/validate", update(queued, admitted(queued), KUEUE))["response"]
    assert answer["allowed"] is True
    assert answer["auditAnnotations"]["audited-by"] == "slots-per-worker"


# --- Kueue under a ServiceAccount the policy does not list (OpenShift AI 2.x) ----------------

def test_an_unlisted_kueue_is_checked_as_usual_and_named_once_with_the_line_to_add(
        served: Webhook, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.WARNING, logger="webhook.unlisted_kueue")
    first = served.review("/validate", update(QUEUED, RUNNING, RHOAI_KUEUE))["response"]
    again = served.review("/validate", update(QUEUED, RUNNING, RHOAI_KUEUE))["response"]
    assert first["allowed"] is again["allowed"] is False
    line = ('kueueUsernames: ["system:serviceaccount:kueue-system:kueue-controller-manager", '
            '"system:serviceaccount:openshift-kueue-operator:kueue-controller-manager", '
            '"system:serviceaccount:redhat-ods-applications:kueue-controller-manager"]')
    assert [r.getMessage() for r in caplog.records] == [
        f"MPIJob team-a/pi was updated by {RHOAI_KUEUE} changing only what Kueue changes when it starts or stops a "
        "job, but the policy's kueueUsernames does not name it: its updates are checked like a user's, and a job it "
        "admitted can be refused. If it is your Kueue (OpenShift AI 2.x runs its own in redhat-ods-applications), "
        f"set this line in the policy file (it replaces the list): {line} (said once per identity and worker)"]
    trusted = webhook(policy=parse_policy(line + "\nrules:\n  node-fit: deny\n"), cluster=CLUSTER)
    assert trusted.review("/validate", update(QUEUED, RUNNING, RHOAI_KUEUE))["response"]["allowed"] is True
    assert trusted.last.reason == "kueue-admission"


@pytest.mark.parametrize("username", [
    "kubernetes-admin",
    "system:serviceaccount:redhat-ods-applications:kueue-webhook",
    "system:serviceaccount::kueue-controller-manager",
    "system:serviceaccount:team-a:default",
])
def test_nothing_is_logged_for_identities_not_named_like_kueue(served: Webhook, caplog: pytest.LogCaptureFixture,
                                                               username: str):
    caplog.set_level(logging.WARNING, logger="webhook.unlisted_kueue")
    served.review("/validate", update(QUEUED, RUNNING, username))
    assert caplog.records == []


def test_nothing_is_logged_when_the_unlisted_kueue_changes_more(served: Webhook, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.WARNING, logger="webhook.unlisted_kueue")
    running = copy.deepcopy(RUNNING)
    running["spec"]["slotsPerWorker"] = 2
    served.review("/validate", update(QUEUED, running, RHOAI_KUEUE))
    assert caplog.records == []


def test_the_line_to_add_is_a_valid_policy_that_keeps_the_names_listed():
    line = policy_line(["system:serviceaccount:queues:kueue"], RHOAI_KUEUE)
    assert parse_policy(line + "\n").kueue_usernames == {"system:serviceaccount:queues:kueue", RHOAI_KUEUE}


def test_each_identity_is_warned_about_once_from_any_thread_and_the_memory_is_bounded(
        caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.WARNING, logger="webhook.unlisted_kueue")
    hints = UnlistedKueue(max_identities=3)
    start = threading.Barrier(8)
    said: list[bool] = []

    def report() -> None:
        start.wait()
        said.append(hints.saw(RHOAI_KUEUE, (), "MPIJob team-a/pi"))

    threads = [threading.Thread(target=report) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(said) == [False] * 7 + [True]
    others = [f"system:serviceaccount:ns-{i}:kueue-controller-manager" for i in range(5)]
    assert [hints.saw(name, (), "MPIJob team-a/pi") for name in others] == [True, True, False, False, False]
    assert len(caplog.records) == 3


def test_kueues_trainjob_admission_from_an_unlisted_service_account_is_checked_and_named_in_the_log(
        caplog: pytest.LogCaptureFixture):
    """The same hint for TrainJobs: only suspend changed, by a Kueue the policy does not list."""
    from testing.kube_objects import resource_quota
    from tests.policies.trainer.trainer_data import trainjob
    from tests.webhook.test_trainjob_admission import GPU, cluster, validate

    caplog.set_level(logging.WARNING, logger="webhook.unlisted_kueue")
    view = cluster(quotas={"team-a": [resource_quota("gpus", {f"requests.{GPU}": 1})]})
    old = trainjob(numNodes=4, resourcesPerNode={"limits": {GPU: 2}})
    old["spec"]["suspend"] = True
    started = copy.deepcopy(old)
    started["spec"]["suspend"] = False
    response, decision = validate(started, view=view, operation="UPDATE", old=old, username=RHOAI_KUEUE)
    assert response["allowed"] is False and decision.reason == "checked"
    (said,) = [r.getMessage() for r in caplog.records]
    assert said.startswith(f"TrainJob team-a/{started['metadata']['name']} was updated by {RHOAI_KUEUE} changing only")
    assert said.endswith(f'"{RHOAI_KUEUE}"] (said once per identity and worker)')
