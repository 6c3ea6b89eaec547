"""The mutated TrainJob in the v2.1 shape (OpenShift AI 3.2–3.5) uses only fields and types v2.1
declares, so the API server prunes nothing of the webhook's podTemplateOverrides entry.

No v2.1 CRD is in the test data: the schema is written from v2.1's field list
(tests/data/trainer/v2.1-shape/, see tests/data/README.md). The first tests show it refuses what
v2.1 lacks, so that passing it means something."""
from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from policies.cluster_view import StaticClusterView
from policies.engine import json_patch, mutate
from policies.trainer.own_patch import MANAGER, V2_1_MARKER
from policies.trainer.trainjob_review import attach, review_trainjob
from testing.builders import context
from tests.policies.trainer.test_mutations import CONFIGURED, INJECT
from tests.policies.trainer.trainer_data import runtime, trainjob
from tests.policies.trainer.trainjob_crd import trainjob_schema_errors, trainjob_v2_1_schema_errors

V2_1_RUNTIME = runtime("runtimes/v2.1.0-v2.2.1/deepspeed_distributed.yaml")
CLUSTER = StaticClusterView(cluster_runtimes={"deepspeed-distributed": V2_1_RUNTIME})
OVERRIDE = {"targetJobs": [{"name": "node"}], "metadata": {"labels": {"team": "a"}},
            "spec": {"serviceAccountName": "team-sa", "nodeSelector": {"gpu": "a100"},
                     "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                     "containers": [{"name": "node", "env": [{"name": "X", "value": "1"}]}],
                     "imagePullSecrets": [{"name": "pull"}], "schedulingGates": [{"name": "wait"}]}}


def v2_1_trainjob(**spec: Any) -> dict[str, Any]:
    job = trainjob(numNodes=2, numProcPerNode="auto")
    job["spec"].update(spec)
    return job


def test_a_v2_1_trainjob_passes_and_the_v2_3_crd_would_prune_its_v2_1_fields():
    job = v2_1_trainjob(labels={"a": "b"}, annotations={"c": "d"}, podTemplateOverrides=[OVERRIDE])
    assert trainjob_v2_1_schema_errors(job) == []
    assert trainjob_schema_errors(job) == [
        "/spec: Additional properties are not allowed ('annotations', 'labels', 'podTemplateOverrides' were unexpected)",
        "/spec/trainer/numProcPerNode: 'auto' is not of type 'integer'",
    ]


NOT_IN_V2_1 = [
    ("runtimePatches", {"runtimePatches": [{"manager": MANAGER}]},
     ["/spec: Additional properties are not allowed ('runtimePatches' was unexpected)"]),
    ("activeDeadlineSeconds", {"activeDeadlineSeconds": 60},
     ["/spec: Additional properties are not allowed ('activeDeadlineSeconds' was unexpected)"]),
    ("override-manager", {"podTemplateOverrides": [{**OVERRIDE, "manager": MANAGER}]},
     ["/spec/podTemplateOverrides/0: Additional properties are not allowed ('manager' was unexpected)"]),
    ("override-token", {"podTemplateOverrides": [{**OVERRIDE, "spec": {"automountServiceAccountToken": False}}]},
     ["/spec/podTemplateOverrides/0/spec: Additional properties are not allowed "
      "('automountServiceAccountToken' was unexpected)"]),
    ("override-resources", {"podTemplateOverrides": [{**OVERRIDE, "spec": {"containers": [
        {"name": "node", "resources": {}}]}}]},
     ["/spec/podTemplateOverrides/0/spec/containers/0: Additional properties are not allowed "
      "('resources' was unexpected)"]),
    ("override-without-targets", {"podTemplateOverrides": [{"metadata": {"labels": {"a": "b"}}}]},
     ["/spec/podTemplateOverrides/0: 'targetJobs' is a required property"]),
    ("label-not-a-string", {"podTemplateOverrides": [{**OVERRIDE, "metadata": {"labels": {"a": 1}}}]},
     ["/spec/podTemplateOverrides/0/metadata/labels/a: 1 is not of type 'string'"]),
]


@pytest.mark.parametrize(("spec", "expected"), [c[1:] for c in NOT_IN_V2_1], ids=[c[0] for c in NOT_IN_V2_1])
def test_the_v2_1_schema_refuses_or_prunes_what_v2_1_does_not_have(spec, expected):
    assert trainjob_v2_1_schema_errors(v2_1_trainjob(**spec)) == expected


def mutated(job: dict[str, Any]) -> dict[str, Any]:
    request = copy.deepcopy(job)
    ctx = context(request, settings=CONFIGURED, cluster=CLUSTER)
    attach(ctx, review_trainjob(request, "team-a", CLUSTER, pinned_shape="v2.1"))
    result = mutate(ctx)
    assert result.error is None and not result.invalid
    return jsonpatch.apply_patch(request, json_patch(request, result))


CASES = {
    "nothing-set": v2_1_trainjob(),
    # the user's override names the node pods' ServiceAccount: ours adds it for the launcher alone
    "user-override-on-node": v2_1_trainjob(podTemplateOverrides=[OVERRIDE]),
    "spec-labels": v2_1_trainjob(labels={"team": "a"}, annotations={"owner": "b"}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_webhooks_override_uses_only_v2_1_fields(name):
    job = CASES[name]
    patched = mutated(job)
    assert trainjob_v2_1_schema_errors(patched) == []
    user = job["spec"].get("podTemplateOverrides", [])
    ours = patched["spec"]["podTemplateOverrides"][len(user):]
    assert patched["spec"]["podTemplateOverrides"][:len(user)] == user
    assert ours and all(o["metadata"]["annotations"][V2_1_MARKER] == MANAGER for o in ours)
    # what the entries set is exactly what v2.1 declares for an override, nothing else
    for entry in ours:
        assert set(entry) <= {"targetJobs", "metadata", "spec"}
        assert set(entry["metadata"]) <= {"labels", "annotations"}
        assert set(entry.get("spec", {})) <= {"serviceAccountName"}
    assert ours[0]["metadata"]["labels"][INJECT] == "false"


def test_the_user_override_case_targets_only_the_pods_that_lack_the_account():
    patched = mutated(CASES["user-override-on-node"])
    targets = [[t["name"] for t in o["targetJobs"]] for o in patched["spec"]["podTemplateOverrides"][1:]]
    accounts = [o.get("spec", {}).get("serviceAccountName") for o in patched["spec"]["podTemplateOverrides"][1:]]
    assert (targets, accounts) == ([["launcher", "node"], ["launcher"]], [None, "mpi-restricted"])
