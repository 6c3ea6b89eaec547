"""End to end over TLS, the way the API server uses the two endpoints: /mutate on CREATE, the
patch applied, then /validate on the patched object, which must be allowed as it is."""
from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import jsonpatch
import pytest

from testing.builders import admission_review, mpijob, patch_of
from tests.conftest import captured_reviews, upstream_v2beta1_jobs
from testing.crd import as_api_server_sends, schema_errors
from testing.tls_server import TlsServer, serving

INJECT = "sidecar.istio.io/inject"
QUEUE = "kueue.x-k8s.io/queue-name"
OFF = {"labels": {INJECT: "false"}, "annotations": {INJECT: "false"}}
POLICY = """\
apiVersion: mpijob-webhook/v1
kind: Policy
mutations:
  kueue-queue-label: {params: {queues: {team-a: team-a-queue}, defaultQueue: common-queue}}
  restricted-service-account: {params: {serviceAccount: mpi-restricted}}
"""


@pytest.fixture(scope="module")
def configured_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    directory = tmp_path_factory.mktemp("configured-mutations")
    policy = directory / "policy.yaml"
    policy.write_text(POLICY)
    with serving(directory, "--dev", "--workers", "1", "--threads", "2", "--policy-file", str(policy)) as server:
        yield server




def mutate_then_validate(server: TlsServer, job: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the patched job, the /validate response for it); the patched job is mutated no further."""
    mutated = server.review("/mutate", admission_review(job))
    assert mutated["allowed"] is True
    patch = patch_of(mutated)
    assert patch, "every job here lacks something the mutations add"
    patched = jsonpatch.apply_patch(job, patch)
    assert schema_errors(patched) == []
    # The API server defaults the patched object, may call /mutate again, then calls /validate.
    stored = as_api_server_sends(patched)
    assert patch_of(server.review("/mutate", admission_review(stored))) is None
    return patched, server.review("/validate", admission_review(stored))


def tricky_jobs() -> dict[str, dict[str, Any]]:
    explicit_true = mpijob()
    explicit_true["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"] = {
        "labels": {INJECT: "true", "example.com/a~b": "x"}, "annotations": {"~1/~0": "y"}}
    explicit_token = mpijob()
    explicit_token["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["automountServiceAccountToken"] = True
    escaped_labels = mpijob()
    escaped_labels["metadata"]["labels"] = {"team/a": "b", "a~b": "c"}
    return {"explicit-true": explicit_true, "explicit-token": explicit_token, "escaped-labels": escaped_labels}


JOBS = {**{f"upstream-{name}": as_api_server_sends(job) for name, job in upstream_v2beta1_jobs().items()},
        **tricky_jobs()}


@pytest.mark.parametrize("name", sorted(JOBS))
def test_mutated_job_is_allowed_by_validate(dev_server: TlsServer, name: str):
    job = JOBS[name]
    before = dev_server.review("/validate", admission_review(job))
    assert before["allowed"] is True, before.get("status")
    patched, after = mutate_then_validate(dev_server, job)
    assert after["allowed"] is True, after.get("status")
    assert set(after.get("warnings", [])) <= set(before.get("warnings", []))
    for replica in patched["spec"]["mpiReplicaSpecs"].values():
        assert replica["template"]["metadata"]["labels"][INJECT] == "false"
        assert replica["template"]["metadata"]["annotations"][INJECT] == "false"


def test_explicit_choices_survive_the_round_trip(dev_server: TlsServer):
    jobs = tricky_jobs()
    worker, _ = mutate_then_validate(dev_server, jobs["explicit-true"])
    assert worker["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"] == {
        "labels": {INJECT: "false", "example.com/a~b": "x"}, "annotations": {"~1/~0": "y", INJECT: "false"}}
    token, _ = mutate_then_validate(dev_server, jobs["explicit-token"])
    launcher_pod = token["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    assert launcher_pod["automountServiceAccountToken"] is True
    labels, _ = mutate_then_validate(dev_server, jobs["escaped-labels"])
    assert labels["metadata"]["labels"] == {"team/a": "b", "a~b": "c"}


def test_explicit_true_warning_reaches_the_client(dev_server: TlsServer):
    response = dev_server.review("/mutate", admission_review(tricky_jobs()["explicit-true"]))
    assert response["warnings"] == [
        '[istio-sidecar-off] sidecar.istio.io/inject "true" on the Worker pod template was changed to "false": '
        "with a sidecar the launcher Job never completes (its sidecar keeps running) and SSH between ranks "
        "fails under strict mTLS"
    ]
    assert response["auditAnnotations"] == {"mutated-by": "istio-sidecar-off,restricted-service-account"}


def test_recorded_dry_run_gets_the_same_patch_as_the_real_create(dev_server: TlsServer):
    recorded = captured_reviews()
    real = dev_server.review("/mutate", recorded["02-create-mutating.request.json"])
    dry = dev_server.review("/mutate", copy.deepcopy(recorded["01-create-dryrun-mutating.request.json"]))
    assert patch_of(real) == patch_of(dry) is not None
    patched = jsonpatch.apply_patch(recorded["02-create-mutating.request.json"]["request"]["object"], patch_of(real))
    validate = dev_server.review("/validate", admission_review(patched))
    assert validate["allowed"] is True, validate.get("status")


def test_update_gets_no_patch_over_the_wire(dev_server: TlsServer):
    response = dev_server.review("/mutate", admission_review(mpijob(), operation="UPDATE", old=mpijob()))
    assert response == {"uid": response["uid"], "allowed": True}


@pytest.mark.parametrize(("namespace", "queue"), [("team-a", "team-a-queue"), ("team-b", "common-queue")])
def test_configured_queue_and_service_account(configured_server: TlsServer, namespace: str, queue: str):
    job = as_api_server_sends(upstream_v2beta1_jobs()["pi.yaml"])
    mutated = configured_server.review("/mutate", admission_review(job, namespace=namespace))
    patched = jsonpatch.apply_patch(job, patch_of(mutated))
    assert patched["metadata"]["labels"] == {QUEUE: queue}
    for replica in patched["spec"]["mpiReplicaSpecs"].values():
        assert replica["template"]["spec"]["serviceAccountName"] == "mpi-restricted"
        assert replica["template"]["spec"]["automountServiceAccountToken"] is False
    assert mutated["auditAnnotations"] == {
        "mutated-by": "istio-sidecar-off,kueue-queue-label,restricted-service-account"}
    stored = as_api_server_sends(patched)
    assert patch_of(configured_server.review("/mutate", admission_review(stored, namespace=namespace))) is None
    validated = configured_server.review("/validate", admission_review(stored, namespace=namespace))
    assert validated["allowed"] is True, validated.get("status")


def test_an_existing_queue_label_is_kept(configured_server: TlsServer):
    job = as_api_server_sends(upstream_v2beta1_jobs()["pi.yaml"])
    job["metadata"]["labels"] = {QUEUE: "users-queue"}
    mutated = configured_server.review("/mutate", admission_review(job))
    assert all("/metadata/labels" not in op["path"] for op in patch_of(mutated))
