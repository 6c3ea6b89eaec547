"""The webhook as the manifests deploy it, on a real API server: the manifests' RBAC and nothing
more (a token of their ServiceAccount), called by the API server through the manifests' webhook
configurations. It becomes ready without the optional integrations' CRDs (Kueue, the Trainer),
answers quota checks, and picks the integrations up once their CRDs are installed."""
from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testing.builders import mpijob
from testing.control_plane import ControlPlane
from testing.deployed_webhook import (
    MANIFESTS,
    OPTIONAL_CRDS,
    DeployedWebhook,
    deployed_webhook,
    install_crds,
    remove_crds,
)
from testing.kube_objects import gpu_job
from testing.reference_data import ROOT

RECHECK = 2.0  # --crd-recheck-interval: how soon a CRD installed later is looked for
TRAINER_EXAMPLE = ROOT / "tests" / "data" / "trainer" / "examples" / "opendatahub"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


@pytest.fixture(scope="module")
def webhook(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DeployedWebhook]:
    found = remove_crds(control_plane, list(OPTIONAL_CRDS))
    try:
        with deployed_webhook(control_plane, tmp_path_factory.mktemp("deployed"), "--crd-recheck-interval",
                              str(RECHECK), "--policy-file", str(MANIFESTS / "policy.yaml")) as deployed:
            yield deployed
    finally:  # the cluster as this module found it, for the modules after it
        install_crds(control_plane, *(OPTIONAL_CRDS[name] for name in found))


@pytest.fixture(scope="module")
def team(webhook: DeployedWebhook) -> str:
    """A namespace with 8 GPUs of quota, none used, as the webhook's cache has it."""
    namespace = webhook.namespace()
    webhook.plane.apply([{"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpus"},
                          "spec": {"hard": {"requests.nvidia.com/gpu": "8"}}}], "-n", namespace)
    used = eventually(lambda: quota_used(webhook, namespace), "the quota controller to fill status.used")
    assert used == {"requests.nvidia.com/gpu": "0"}
    return namespace


def quota_used(webhook: DeployedWebhook, namespace: str) -> dict[str, str] | None:
    stored = json.loads(webhook.plane.kubectl("get", "resourcequota", "gpus", "-n", namespace, "-o", "json").stdout)
    return (stored.get("status") or {}).get("used")


def eventually(condition: Any, what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout} s for {what}")
        time.sleep(0.2)


def cluster_detail(webhook: DeployedWebhook) -> str:
    return webhook.readiness()[1]["checks"]["cluster"]["detail"]


def test_ready_without_the_optional_integrations_crds(webhook: DeployedWebhook):
    readiness = webhook.wait_ready()
    detail = readiness["checks"]["cluster"]["detail"]
    for plural in ("localqueues", "clustertrainingruntimes", "trainingruntimes", "trainjobs"):
        assert f"0 {plural} (not installed)" in detail
    assert "mpijobs (not installed)" not in detail  # the MPIJob CRD is installed


def test_a_job_over_the_quota_is_refused_through_the_api_server(webhook: DeployedWebhook, team: str):
    refused = webhook.dry_run(gpu_job("too-big", workers=5, gpus=2), team)  # 10 GPUs, 8 free
    assert refused.returncode == 1
    assert 'admission webhook "validate.mpijob-webhook.kubeflow.org" denied the request' in refused.stderr
    assert "[resource-quota]" in refused.stderr
    assert "requested 10 (5 workers × 2), hard 8, used 0, available 8" in refused.stderr
    admitted = webhook.dry_run(gpu_job("fits", workers=4, gpus=2), team)  # 8 GPUs
    assert admitted.returncode == 0, admitted.stderr
    assert "mpijob.kubeflow.org/fits created (server dry run)" in admitted.stdout


def test_optional_crds_installed_later_are_picked_up(webhook: DeployedWebhook, team: str):
    install_crds(webhook.plane, *OPTIONAL_CRDS.values())
    eventually(lambda: "(not installed)" not in cluster_detail(webhook), "the webhook to list the new CRDs",
               timeout=RECHECK * 5 + 10)
    webhook.plane.apply([{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                          "metadata": {"name": "team-queue"}, "spec": {"clusterQueue": "cq"}}], "-n", team)
    job = mpijob("queued", workers=2)
    job["metadata"]["labels"] = {QUEUE_LABEL: "no-such-queue"}

    def warned() -> str:
        answer = webhook.dry_run(job, team)
        assert answer.returncode == 0, answer.stderr
        return answer.stderr if "LocalQueues here: team-queue" in answer.stderr else ""

    warning = eventually(warned, "the LocalQueue in the webhook's cache", timeout=10)
    assert re.search(r'Warning: \[kueue-queue\] .*LocalQueue "no-such-queue" does not exist in namespace '
                     + team, warning)


def test_a_trainjob_on_a_runtime_installed_later_is_checked(webhook: DeployedWebhook, team: str):
    runtime = yaml.safe_load((TRAINER_EXAMPLE / "kftv2-mpi-ddp-sft-mpi-runtime.yaml").read_text())
    (trainjob,) = [doc for doc in yaml.safe_load_all((TRAINER_EXAMPLE / "kftv2-mpi-ddp-sft-trainjob.yaml")
                                                     .read_text()) if doc and doc.get("kind") == "TrainJob"]
    webhook.plane.apply([runtime])
    del trainjob["metadata"]["generateName"], trainjob["metadata"]["namespace"]
    trainjob["metadata"]["name"] = "sft"
    trainjob["spec"]["trainer"]["numNodes"] = 5  # 2 GPUs per node: 10, with 8 free

    def refused() -> str:
        answer = webhook.dry_run(trainjob, team)
        return answer.stderr if "[resource-quota]" in answer.stderr else ""

    assert "trainer.numNodes" in eventually(refused, "the runtime in the webhook's cache", timeout=10)
    trainjob["spec"]["trainer"]["numNodes"] = 3  # 6 GPUs
    admitted = webhook.dry_run(trainjob, team)
    assert admitted.returncode == 0, admitted.stderr


def test_no_request_of_the_webhook_was_forbidden(webhook: DeployedWebhook):
    """Its own RBAC is enough for everything it reads: no 403 in its log (the audit lines, which
    record the webhook's own refusals, aside)."""
    log_lines = [line for line in webhook.server.output().splitlines() if not line.startswith("{")]
    assert [line for line in log_lines if re.search(r"\b403\b|forbidden", line, re.IGNORECASE)] == []
    assert any("resourcequotas: listed" in line for line in log_lines)
