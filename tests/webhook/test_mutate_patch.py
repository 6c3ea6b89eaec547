"""The JSONPatch /mutate returns: applied with ``jsonpatch`` to the request object it must give
exactly the expected job, valid for the upstream CRD, touching only our keys, and nothing more
on a second pass (also after the API server's defaulting)."""
from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from typing import Any

import jsonpatch
import pytest
from hypothesis import given

from policies.interface import Mutated, NoParams
from policies.cluster_view import NO_CLUSTER
from policies.engine import json_patch, mutate
from policies.mutations.edits import WorkingCopy
from policies.config.layered_policy import Policy
from policies.config.rule_settings import MutationConfig, Settings
from policies.registry import default_settings
from testing.builders import admission_review, context, mpijob, patch_of
from tests.conftest import ROOT, captured_reviews, upstream_v2beta1_jobs
from testing.crd import as_api_server_sends, schema_errors
from tests.mutation_cases import CAPPED, INJECT, QUEUE, Case, cases
from webhook.admission import Admission
from webhook.review import parse_admission_review

DEFAULTS = default_settings()
CONFIGURED = (DEFAULTS.with_mutation("kueue-queue-label", queues={"team-a": "team-a-queue"})
              .with_mutation("restricted-service-account", service_account="mpi-restricted"))
OFF = {"labels": {INJECT: "false"}, "annotations": {INJECT: "false"}}
# Every leaf a patch may set, as an escaped JSON Pointer: "/" in a key is "~1", "~" is "~0".
OUR_LEAVES = re.compile(
    r"/metadata/labels/kueue\.x-k8s\.io~1queue-name"
    r"|/spec/mpiReplicaSpecs/(Launcher|Worker)/template/"
    r"(metadata/(labels|annotations)/sidecar\.istio\.io~1inject|spec/(automountServiceAccountToken|serviceAccountName))"
)


def mutate_response(job: Any, settings: Settings = DEFAULTS, **review_args: Any) -> dict[str, Any]:
    admission = Admission(policy=lambda: Policy(settings=settings), cluster=NO_CLUSTER)
    return admission.mutate(parse_admission_review(admission_review(job, **review_args)))["response"]




def leaves(path: str, value: Any) -> list[str]:
    """The JSON Pointers of everything an ``add`` or ``replace`` sets (a map added whole counts
    for each of its entries; an empty map is a leaf of its own, and never one of ours)."""
    if isinstance(value, dict) and value:
        return [leaf for key, sub in value.items() for leaf in leaves(f"{path}/{_escape(key)}", sub)]
    return [path]


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def assert_only_ours(patch: list[dict[str, Any]]) -> None:
    for op in patch:
        assert op["op"] in ("add", "replace"), op
        for leaf in leaves(op["path"], op["value"]):
            assert OUR_LEAVES.fullmatch(leaf), f"patch touches {leaf}: {op}"


def assert_patch_gives(job: dict[str, Any], expected: dict[str, Any], settings: Settings,
                       namespace: str = "team-a") -> list[dict[str, Any]] | None:
    """The whole contract for one request object; returns the patch (None when there is none)."""
    response = mutate_response(job, settings, namespace=namespace)
    assert response["allowed"] is True
    patch = patch_of(response)
    if expected == job:
        assert patch is None, patch
        return None
    assert patch, "a change must come with a patch"
    assert_only_ours(patch)
    patched = jsonpatch.apply_patch(job, patch)
    assert patched == expected
    assert schema_errors(patched) == []
    for again in (patched, as_api_server_sends(patched)):
        assert patch_of(mutate_response(again, settings, namespace=namespace)) is None
    return patch


# --- generated jobs ---------------------------------------------------------------------------

@CAPPED
@given(cases())
def test_generated_jobs_get_exactly_the_expected_patch(case: Case):
    assert schema_errors(case.job) == []  # the generator itself makes only valid jobs
    assert_patch_gives(case.job, case.expected, case.settings, case.namespace)


@CAPPED
@given(cases())
def test_dry_run_gets_the_same_patch(case: Case):
    real = mutate_response(case.job, case.settings, namespace=case.namespace)
    dry = mutate_response(case.job, case.settings, namespace=case.namespace, dry_run=True)
    assert patch_of(dry) == patch_of(real)
    assert dry.get("warnings") == real.get("warnings")


# --- upstream manifests and recorded requests ------------------------------------------------

UPSTREAM = upstream_v2beta1_jobs()


@pytest.mark.parametrize("settings", [DEFAULTS, CONFIGURED], ids=["default-policy", "queue-and-account"])
@pytest.mark.parametrize("name", sorted(UPSTREAM))
def test_upstream_manifests(name, settings):
    job = as_api_server_sends(UPSTREAM[name])
    expected = copy.deepcopy(job)
    if settings is CONFIGURED:
        expected["metadata"]["labels"] = {QUEUE: "team-a-queue"}
    for replica in expected["spec"]["mpiReplicaSpecs"].values():
        assert "metadata" not in replica["template"]  # what the expectation below assumes
        replica["template"]["metadata"] = copy.deepcopy(OFF)
        replica["template"]["spec"]["automountServiceAccountToken"] = False
        if settings is CONFIGURED:
            replica["template"]["spec"]["serviceAccountName"] = "mpi-restricted"
    assert_patch_gives(job, expected, settings)


def test_recorded_create_gets_the_minimal_patch_and_dry_run_the_same():
    recorded = captured_reviews()
    admission = Admission(policy=Policy, cluster=NO_CLUSTER)
    real = admission.mutate(parse_admission_review(recorded["02-create-mutating.request.json"]))["response"]
    dry = admission.mutate(parse_admission_review(recorded["01-create-dryrun-mutating.request.json"]))["response"]
    assert patch_of(real) == patch_of(dry) == [
        {"op": "add", "path": f"/spec/mpiReplicaSpecs/{replica_type}/template/{where}", "value": value}
        for replica_type in ("Launcher", "Worker")
        for where, value in (("metadata", OFF), ("spec/automountServiceAccountToken", False))
    ]
    assert real["auditAnnotations"] == {"mutated-by": "istio-sidecar-off,restricted-service-account"}


def test_recorded_generate_name_create_is_mutated():
    review = captured_reviews()["11-create-generatename-mutating.request.json"]
    response = Admission(policy=Policy, cluster=NO_CLUSTER).mutate(parse_admission_review(review))["response"]
    patched = jsonpatch.apply_patch(review["request"]["object"], patch_of(response))
    assert patched["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"] == OFF
    assert patched["metadata"]["generateName"] == "pi-gen-"


def test_recorded_older_version_gets_no_patch():
    review = captured_reviews()["07-create-v1alpha1-mutating.request.json"]
    response = Admission(policy=Policy, cluster=NO_CLUSTER).mutate(parse_admission_review(review))["response"]
    assert patch_of(response) is None


# --- exact patches for the cases the issue names ---------------------------------------------

def test_already_mutated_job_gets_a_bare_allow():
    job = mpijob()
    for replica in job["spec"]["mpiReplicaSpecs"].values():
        replica["template"]["metadata"] = copy.deepcopy(OFF)
        replica["template"]["spec"]["automountServiceAccountToken"] = False
    review = admission_review(job)
    response = Admission(policy=Policy, cluster=NO_CLUSTER).mutate(parse_admission_review(review))
    assert response == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                        "response": {"uid": review["request"]["uid"], "allowed": True}}


@pytest.mark.parametrize(("operation", "extra"), [
    ("UPDATE", {"old": mpijob()}), ("UPDATE", {"old": mpijob(), "sub_resource": "status"}),
    ("DELETE", {"old": mpijob()}), ("CONNECT", {}),
], ids=["update", "status-update", "delete", "connect"])
def test_only_create_is_mutated(operation, extra):
    job = None if operation == "DELETE" else mpijob()
    response = mutate_response(job, CONFIGURED, operation=operation, **extra)
    assert response["allowed"] is True
    assert patch_of(response) is None


def test_missing_labels_map_is_added_whole_with_the_key_escaped():
    job = mpijob()
    job["metadata"]["annotations"] = {"a/b": "c"}
    for replica in job["spec"]["mpiReplicaSpecs"].values():
        replica["template"]["metadata"] = copy.deepcopy(OFF)
        replica["template"]["spec"]["automountServiceAccountToken"] = False
    patch = patch_of(mutate_response(job, CONFIGURED.with_mutation("restricted-service-account",
                                                                    service_account=None)))
    assert patch == [{"op": "add", "path": "/metadata/labels", "value": {QUEUE: "team-a-queue"}}]


def test_key_into_existing_map_is_escaped():
    job = mpijob()
    job["metadata"]["labels"] = {"example.com/a~b": "x", "~1": "y"}
    patch = patch_of(mutate_response(job, CONFIGURED))
    assert {"op": "add", "path": "/metadata/labels/kueue.x-k8s.io~1queue-name", "value": "team-a-queue"} in patch
    assert jsonpatch.apply_patch(job, patch)["metadata"]["labels"] == {
        "example.com/a~b": "x", "~1": "y", QUEUE: "team-a-queue"}


def test_missing_metadata_is_added_whole():
    job = mpijob()
    del job["metadata"]
    patch = patch_of(mutate_response(job, CONFIGURED))
    assert {"op": "add", "path": "/metadata", "value": {"labels": {QUEUE: "team-a-queue"}}} in patch


def test_template_label_is_added_next_to_existing_ones_and_true_is_replaced():
    job = mpijob()
    template = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]
    template["metadata"] = {"labels": {"app": "x", INJECT: "true"}, "annotations": {"a~b/c": "d"}}
    response = mutate_response(job)
    launcher_ops = [op for op in patch_of(response) if "/Launcher/template/metadata" in op["path"]]
    assert sorted(launcher_ops, key=lambda op: op["path"]) == [
        {"op": "add", "path": "/spec/mpiReplicaSpecs/Launcher/template/metadata/annotations/sidecar.istio.io~1inject",
         "value": "false"},
        {"op": "replace", "path": "/spec/mpiReplicaSpecs/Launcher/template/metadata/labels/sidecar.istio.io~1inject",
         "value": "false"},
    ]
    assert response["warnings"] == [
        '[istio-sidecar-off] sidecar.istio.io/inject "true" on the Launcher pod template was changed to "false": '
        "with a sidecar the launcher Job never completes (its sidecar keeps running) and SSH between ranks fails "
        "under strict mTLS"
    ]


class _TildeSlashLabel:
    """A mutation that writes a key needing both escapes, which none of ours does."""

    id = "tilde-slash-label"
    Params = NoParams
    enabled_by_default = True

    def apply(self, job: WorkingCopy, ctx: Any) -> Mutated:
        job.writable(("metadata", "labels"))["example.com/a~b"] = "v"
        return Mutated(changed=True)


def test_patch_escapes_tilde_and_slash():
    mutation = _TildeSlashLabel()
    settings = Settings(DEFAULTS.rules, {**DEFAULTS.mutations, mutation.id: MutationConfig(True, NoParams())})
    job = mpijob()
    job["metadata"]["labels"] = {"app": "x"}
    result = mutate(context(job, settings=settings), mutations=[mutation])
    patch = json_patch(job, result)
    assert patch == [{"op": "add", "path": "/metadata/labels/example.com~1a~0b", "value": "v"}]
    assert jsonpatch.apply_patch(job, patch)["metadata"]["labels"] == {"app": "x", "example.com/a~b": "v"}


# Imports only what the patch needs, so each interpreter starts in a fraction of a second.
PATCH_OF_RECORDED_CREATE = """
import json, sys
from policies.interface import RuleContext
from policies.cluster_view import NO_CLUSTER
from policies.engine import json_patch, mutate
from policies.mutations.istio_sidecar_off import IstioSidecarOff
from policies.mutations.restricted_service_account import RestrictedServiceAccount
from policies.config.rule_settings import MutationConfig, Settings
mutations = [IstioSidecarOff(), RestrictedServiceAccount()]
settings = Settings({}, {m.id: MutationConfig(True, m.Params()) for m in mutations})
job = json.load(sys.stdin)["request"]["object"]
ctx = RuleContext("CREATE", job, "team-a", "pi", settings, NO_CLUSTER)
print(json.dumps(json_patch(job, mutate(ctx, mutations))))
"""
# Without the ordering, these two seeds give the operations in different orders.
HASH_SEEDS = ("2", "3")


def test_patch_is_the_same_in_every_server_process():
    """Every gunicorn worker has its own string hash seed; the patch must not depend on it."""
    review = json.dumps(captured_reviews()["02-create-mutating.request.json"])
    patches = [
        subprocess.run([sys.executable, "-c", PATCH_OF_RECORDED_CREATE], input=review, cwd=ROOT, check=True,
                       capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": seed}).stdout
        for seed in HASH_SEEDS
    ]
    assert patches[0] == patches[1]
    assert [op["path"] for op in json.loads(patches[0])] == sorted(op["path"] for op in json.loads(patches[0]))


class _ListEdit:
    """Edits a list and a map at once: list operations depend on their order."""

    id = "list-edit"
    Params = NoParams
    enabled_by_default = True

    def apply(self, job: WorkingCopy, ctx: Any) -> Mutated:
        pod = job.writable(("spec", "mpiReplicaSpecs", "Worker", "template", "spec"))
        pod["containers"] = copy.deepcopy(pod["containers"])  # a list is edited on a copy of its own
        container = pod["containers"][0]
        container["args"] = ["-f", "/etc/sshd", *container["args"][1:], "-x", "-y"]
        job.writable(("metadata",))["labels"] = {"edited": "yes"}
        return Mutated(changed=True)


def test_patch_with_list_edits_keeps_an_order_that_applies():
    mutation = _ListEdit()
    settings = Settings(DEFAULTS.rules, {**DEFAULTS.mutations, mutation.id: MutationConfig(True, NoParams())})
    job = mpijob()
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"] = ["-De", "-a", "-b"]
    before = copy.deepcopy(job)
    result = mutate(context(job, settings=settings), mutations=[mutation])
    assert jsonpatch.apply_patch(job, json_patch(job, result)) == result.job
    assert job == before
    assert result.job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"] == [
        "-f", "/etc/sshd", "-a", "-b", "-x", "-y"]
