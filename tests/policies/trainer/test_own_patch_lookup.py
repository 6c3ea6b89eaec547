"""Our entry's pod templates are looked up once per request and target set; the next mutation of
the same request reuses them only while the spec still holds the list they are in."""
from __future__ import annotations

import copy

from policies.mutations.edits import WorkingCopy
from policies.trainer import own_patch
from policies.trainer.api import ApiShape

TARGETS = ["launcher", "node"]
USER_ENTRY = {"manager": "example.com/user", "trainingRuntimeSpec": {}}


def request() -> dict:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "t"},
            "spec": {"runtimeRef": {"name": "r"}, "runtimePatches": [copy.deepcopy(USER_ENTRY)]}}


def pods_of(entry: dict) -> dict:
    return {j["name"]: j["template"]["spec"]["template"]
            for j in entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]}


def test_the_second_edit_of_a_request_writes_into_the_entry_the_first_made():
    original = request()
    job = WorkingCopy(original)
    assert own_patch.set_on_pods(job, ApiShape.V2_3, TARGETS, "metadata", "labels", "false", "a")
    assert own_patch.set_on_pods(job, ApiShape.V2_3, TARGETS, "spec", "serviceAccountName", "sa")
    entries = job["spec"]["runtimePatches"]
    assert [e["manager"] for e in entries] == ["example.com/user", own_patch.MANAGER]
    assert pods_of(entries[1]) == {name: {"metadata": {"labels": {"a": "false"}}, "spec": {"serviceAccountName": "sa"}}
                                   for name in TARGETS}
    assert original == request()  # the request is never written to


def test_a_list_replaced_between_edits_is_searched_again():
    job = WorkingCopy(request())
    own_patch.set_on_pods(job, ApiShape.V2_3, TARGETS, "metadata", "labels", "false", "a")
    replaced = job["spec"]["runtimePatches"] = [copy.deepcopy(USER_ENTRY)]
    own_patch.set_on_pods(job, ApiShape.V2_3, TARGETS, "spec", "serviceAccountName", "sa")
    assert job["spec"]["runtimePatches"] is not replaced  # a list of the request's entries: copied
    entries = job["spec"]["runtimePatches"]
    assert [e["manager"] for e in entries] == ["example.com/user", own_patch.MANAGER]
    assert pods_of(entries[1]) == {name: {"spec": {"serviceAccountName": "sa"}} for name in TARGETS}


def test_other_targets_get_their_own_pod_templates_in_the_same_entry():
    job = WorkingCopy(request())
    own_patch.set_on_pods(job, ApiShape.V2_3, TARGETS, "metadata", "labels", "false", "a")
    own_patch.set_on_pods(job, ApiShape.V2_3, ["node"], "spec", "serviceAccountName", "sa")
    entries = job["spec"]["runtimePatches"]
    assert len(entries) == 2
    assert pods_of(entries[1]) == {"launcher": {"metadata": {"labels": {"a": "false"}}},
                                   "node": {"metadata": {"labels": {"a": "false"}}, "spec": {"serviceAccountName": "sa"}}}
