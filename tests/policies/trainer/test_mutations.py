"""The mutations on TrainJobs: one patch entry of our own (runtimePatches on v2.2+,
podTemplateOverrides on v2.1) targeting the launcher and node pods, the queue label on the
TrainJob; nothing the user, the runtime or Kueue set is replaced; idempotent; no patch when
nothing is missing; the patched TrainJob passes the upstream CRD schema and gets the values in
its effective job."""
from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from policies.cluster_view import StaticClusterView
from policies.engine import json_patch, mutate
from policies.config.rule_settings import Settings
from policies.registry import default_settings
from policies.trainer.api import ApiShape
from policies.trainer.effective_job import effective_job
from policies.trainer.own_patch import MANAGER
from policies.trainer.trainjob_review import attach, review_trainjob
from testing.builders import context
from tests.policies.trainer.trainer_data import runtime, trainjob
from tests.policies.trainer.trainjob_crd import trainjob_schema_errors, trainjob_v2_1_schema_errors

INJECT = "sidecar.istio.io/inject"
QUEUE = "kueue.x-k8s.io/queue-name"
CONFIGURED = (default_settings().with_mutation("kueue-queue-label", default_queue="common-queue")
              .with_mutation("restricted-service-account", service_account="mpi-restricted"))
DEEPSPEED = runtime("runtimes/v2.3.0/deepspeed_distributed.yaml")
CLUSTER = StaticClusterView(cluster_runtimes={"deepspeed-distributed": DEEPSPEED})
PINNED = {ApiShape.V2_1: "v2.1", ApiShape.V2_3: "v2.3"}


def run(job: dict[str, Any], shape: ApiShape = ApiShape.V2_3, settings: Settings = CONFIGURED,
        cluster: StaticClusterView = CLUSTER) -> tuple[dict[str, Any], list[dict[str, Any]], tuple[str, ...], tuple[str, ...]]:
    """(patched TrainJob, patch, mutations applied, warnings), through the engine."""
    request = copy.deepcopy(job)
    ctx = context(request, settings=settings, cluster=cluster)
    attach(ctx, review_trainjob(request, "team-a", cluster, pinned_shape=shape.value))
    result = mutate(ctx)
    assert result.error is None and not result.invalid
    assert request == job, "the request object was modified"
    patch = json_patch(request, result)
    patched = jsonpatch.apply_patch(request, patch)
    return patched, patch, result.applied, result.warnings


def own_entry(job: dict[str, Any]) -> dict[str, Any]:
    (entry,) = [p for p in job["spec"]["runtimePatches"] if p["manager"] == MANAGER]
    return entry


def test_v2_3_one_runtime_patch_entry_targets_launcher_and_node():
    patched, patch, applied, warnings = run(trainjob(numNodes=2))
    assert applied == ("istio-sidecar-off", "kueue-queue-label", "restricted-service-account")
    assert warnings == ()
    pod = {"metadata": {"labels": {INJECT: "false"}, "annotations": {INJECT: "false"}},
           "spec": {"serviceAccountName": "mpi-restricted"}}
    assert own_entry(patched) == {"manager": MANAGER, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "launcher", "template": {"spec": {"template": pod}}},
        {"name": "node", "template": {"spec": {"template": pod}}},
    ]}}}}
    assert patched["metadata"]["labels"] == {QUEUE: "common-queue"}
    assert trainjob_schema_errors(patched) == []
    # what the controller will build from it
    effective = effective_job(patched, DEEPSPEED, ApiShape.V2_3)
    for rj in effective.jobs:
        assert rj.pod_template["metadata"]["labels"][INJECT] == "false"
        assert rj.pod_template["metadata"]["annotations"][INJECT] == "false"
        assert rj.pod_spec["serviceAccountName"] == "mpi-restricted"
    # the user's object is otherwise untouched: the patch adds, never replaces or removes
    assert {op["op"] for op in patch} == {"add"}


def test_v2_1_one_pod_template_override_targets_launcher_and_node():
    rt = runtime("runtimes/v2.1.0-v2.2.1/deepspeed_distributed.yaml")
    cluster = StaticClusterView(cluster_runtimes={"deepspeed-distributed": rt})
    patched, _, applied, _ = run(trainjob(numNodes=2), ApiShape.V2_1, cluster=cluster)
    assert "runtimePatches" not in patched["spec"]
    assert patched["spec"]["podTemplateOverrides"] == [{
        "targetJobs": [{"name": "launcher"}, {"name": "node"}],
        "metadata": {"labels": {INJECT: "false"},
                     "annotations": {"mpijob-webhook.kubeflow.org/patched-by": MANAGER, INJECT: "false"}},
        "spec": {"serviceAccountName": "mpi-restricted"},
    }]
    assert trainjob_v2_1_schema_errors(patched) == []  # no field v2.1 lacks: nothing pruned from our entry
    effective = effective_job(patched, rt, ApiShape.V2_1)
    assert all(rj.pod_spec["serviceAccountName"] == "mpi-restricted" for rj in effective.jobs)
    assert all(rj.pod_template["metadata"]["labels"][INJECT] == "false" for rj in effective.jobs)


@pytest.mark.parametrize("shape", [ApiShape.V2_1, ApiShape.V2_3], ids=str)
def test_a_second_call_changes_nothing(shape):
    patched, _, _, _ = run(trainjob(numNodes=2), shape)
    again, patch, applied, warnings = run(patched, shape)
    assert (patch, applied, warnings) == ([], (), ())


def test_our_entry_from_an_earlier_review_is_copied_once_and_completed():
    # patched before the restricted ServiceAccount was configured: the entry has the Istio settings only
    earlier = default_settings().with_mutation("kueue-queue-label", default_queue="common-queue")
    first, _, _, _ = run(trainjob(numNodes=2), settings=earlier)
    assert "spec" not in own_entry(first)["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"][
        "spec"]["template"]
    patched, patch, applied, _ = run(first)  # run() checks that the request itself was not changed
    assert applied == ("restricted-service-account",)
    assert [op["path"] for op in patch] == [
        "/spec/runtimePatches/0/trainingRuntimeSpec/template/spec/replicatedJobs/0/template/spec/template/spec",
        "/spec/runtimePatches/0/trainingRuntimeSpec/template/spec/replicatedJobs/1/template/spec/template/spec"]
    assert len(patched["spec"]["runtimePatches"]) == 1
    assert all(rj["template"]["spec"]["template"]["spec"] == {"serviceAccountName": "mpi-restricted"}
               for rj in own_entry(patched)["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"])


def test_nothing_missing_gives_no_patch():
    rt = copy.deepcopy(DEEPSPEED)
    for rj in rt["spec"]["template"]["spec"]["replicatedJobs"]:
        pod = rj["template"]["spec"]["template"]
        pod["metadata"] = {"labels": {INJECT: "false"}, "annotations": {INJECT: "false"}}
        pod["spec"]["serviceAccountName"] = "runtime-account"
    cluster = StaticClusterView(cluster_runtimes={"deepspeed-distributed": rt})
    job = trainjob(numNodes=2)
    job["metadata"]["labels"] = {QUEUE: "team-queue"}
    _, patch, applied, _ = run(job, cluster=cluster)
    assert (patch, applied) == ([], ())


def test_what_the_user_and_kueue_set_is_never_replaced():
    job = trainjob(numNodes=2)
    job["metadata"]["labels"] = {QUEUE: ""}  # even an empty queue label is the user's
    user = {"manager": "example.com/team", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": {"serviceAccountName": "team-sa"}}}}}]}}}}
    kueue = {"manager": "kueue.x-k8s.io/manager"}
    job["spec"]["runtimePatches"] = [user, kueue]
    patched, patch, _, _ = run(job)
    assert patched["spec"]["runtimePatches"][:2] == [user, kueue]
    assert patched["metadata"]["labels"] == {QUEUE: ""}
    jobs = {rj["name"]: rj["template"]["spec"]["template"] for rj in
            own_entry(patched)["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]}
    assert "spec" not in jobs["node"]  # the node pods keep the user's ServiceAccount
    assert jobs["launcher"]["spec"] == {"serviceAccountName": "mpi-restricted"}
    effective = effective_job(patched, DEEPSPEED, ApiShape.V2_3)
    assert effective.node.pod_spec["serviceAccountName"] == "team-sa"
    assert all(op["path"].startswith("/spec/runtimePatches/2") or op["op"] == "add" for op in patch)
    assert trainjob_schema_errors(patched) == []


def test_an_explicit_sidecar_request_is_overridden_with_a_warning_unless_the_policy_keeps_it():
    job = trainjob(numNodes=2)
    job["spec"]["runtimePatches"] = [{"manager": "example.com/team", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "launcher", "template": {"spec": {"template": {
            "metadata": {"labels": {INJECT: "true"}}}}}}]}}}}]
    patched, _, _, warnings = run(job)
    assert effective_job(patched, DEEPSPEED, ApiShape.V2_3).launcher.pod_template["metadata"]["labels"][INJECT] == "false"
    assert any(w.startswith("[istio-sidecar-off] sidecar.istio.io/inject \"true\" on the launcher pod template")
               for w in warnings)
    keep = CONFIGURED.with_mutation("istio-sidecar-off", keep_explicit_true=True)
    kept, _, _, warnings = run(job, settings=keep)
    effective = effective_job(kept, DEEPSPEED, ApiShape.V2_3)
    assert effective.launcher.pod_template["metadata"]["labels"][INJECT] == "true"
    assert effective.node.pod_template["metadata"]["labels"][INJECT] == "false"
    assert any("kept on the launcher pod template" in w for w in warnings)


def test_a_trainjob_on_a_runtime_that_is_not_mpi_or_not_found_gets_no_pod_patch():
    torch = copy.deepcopy(DEEPSPEED)
    torch["spec"]["mlPolicy"] = {"numNodes": 1, "torch": {}}
    for cluster in (StaticClusterView(cluster_runtimes={"deepspeed-distributed": torch}), StaticClusterView()):
        patched, _, applied, _ = run(trainjob(numNodes=2), cluster=cluster)
        assert "runtimePatches" not in patched["spec"]
        assert "istio-sidecar-off" not in applied and "restricted-service-account" not in applied


def test_without_a_restricted_service_account_configured_the_pods_keep_theirs():
    settings = default_settings()
    patched, _, applied, _ = run(trainjob(numNodes=2), settings=settings)
    assert applied == ("istio-sidecar-off",)
    for rj in own_entry(patched)["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
        assert "spec" not in rj["template"]["spec"]["template"]


def test_a_runtime_that_turns_the_token_on_is_warned_about():
    rt = copy.deepcopy(DEEPSPEED)
    rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "automountServiceAccountToken"] = True
    _, _, _, warnings = run(trainjob(numNodes=2), cluster=StaticClusterView(cluster_runtimes={"deepspeed-distributed": rt}))
    assert any(w.startswith("[restricted-service-account] the node pod template set automountServiceAccountToken: true")
               for w in warnings)


def test_a_full_patch_list_gets_no_entry_and_a_warning():
    job = trainjob(numNodes=2)
    job["spec"]["runtimePatches"] = [{"manager": f"example.com/m{i}"} for i in range(16)]
    patched, _, applied, warnings = run(job)
    assert patched["spec"]["runtimePatches"] == job["spec"]["runtimePatches"]
    assert applied == ("kueue-queue-label",)
    assert sum("already has 16 entries" in w for w in warnings) == 2


# --- properties -----------------------------------------------------------------------------

labels = st.sampled_from([None, {}, {INJECT: "false"}, {INJECT: "true"}, {INJECT: "maybe"}, {"app": "x"}])
accounts = st.sampled_from([None, "", "team-sa"])


@st.composite
def patched_trainjobs(draw):
    shape = draw(st.sampled_from([ApiShape.V2_1, ApiShape.V2_3]))
    job = trainjob(numNodes=draw(st.integers(1, 8)))
    if draw(st.booleans()):
        job["metadata"]["labels"] = {QUEUE: draw(st.sampled_from(["", "q", "common-queue"]))}
    entries = []
    for _ in range(draw(st.integers(0, 2))):
        targets = draw(st.lists(st.sampled_from(["launcher", "node"]), min_size=1, max_size=2, unique=True))
        pod: dict[str, Any] = {}
        label = draw(labels)
        if label is not None:
            pod["metadata"] = {"labels": label}
        account = draw(accounts)
        if account is not None:
            pod["spec"] = {"serviceAccountName": account}
        if shape is ApiShape.V2_1:
            entries.append({"targetJobs": [{"name": t} for t in targets], **pod})
        else:
            entries.append({"manager": f"example.com/m{len(entries)}", "trainingRuntimeSpec": {"template": {"spec": {
                "replicatedJobs": [{"name": t, "template": {"spec": {"template": pod}}} for t in targets]}}}})
    if entries:
        job["spec"]["podTemplateOverrides" if shape is ApiShape.V2_1 else "runtimePatches"] = entries
    settings = CONFIGURED.with_mutation("istio-sidecar-off", keep_explicit_true=draw(st.booleans()))
    return shape, job, settings


@given(patched_trainjobs())
def test_the_mutation_is_idempotent_and_only_adds(case):
    shape, job, settings = case
    rt = runtime("runtimes/v2.1.0-v2.2.1/deepspeed_distributed.yaml") if shape is ApiShape.V2_1 else DEEPSPEED
    cluster = StaticClusterView(cluster_runtimes={"deepspeed-distributed": rt})
    patched, patch, _, _ = run(job, shape, settings, cluster)
    again, second, applied, _ = run(patched, shape, settings, cluster)
    assert (second, applied) == ([], ())
    field = "podTemplateOverrides" if shape is ApiShape.V2_1 else "runtimePatches"
    before = job["spec"].get(field, [])
    assert patched["spec"].get(field, [])[:len(before)] == before  # the user's entries untouched
    assert len(patched["spec"].get(field, [])) - len(before) <= (2 if shape is ApiShape.V2_1 else 1)
    if shape is ApiShape.V2_1:
        assert trainjob_v2_1_schema_errors(patched) == []
    else:
        assert trainjob_schema_errors(patched) == []
    # every pod now has what the policy asks, except what the user set and the policy keeps
    before_jobs = {rj.name: rj for rj in effective_job(job, rt, shape).jobs}
    for rj in effective_job(patched, rt, shape).jobs:
        old = before_jobs[rj.name]
        old_account = old.pod_spec.get("serviceAccountName")
        assert rj.pod_spec.get("serviceAccountName") == (old_account or "mpi-restricted")
        old_label = ((old.pod_template.get("metadata") or {}).get("labels") or {}).get(INJECT)
        kept = settings.params("istio-sidecar-off").keep_explicit_true and old_label == "true"
        assert rj.pod_template["metadata"]["labels"][INJECT] == ("true" if kept else "false")
    assume(patch)
