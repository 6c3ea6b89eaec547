"""The deployed webhook (testing.deployed_webhook) while the real API server stops and starts again.

The Trainer's and Kueue's CRDs are not installed, and the webhook looks for them every 2 s, so
those looks hit the stopped API server: the failure once seen from outside, where such a kind
counted as cut off and, ``stale_after`` later, switched off every cluster check although the
ResourceQuota cache had resynced. ``--cluster-stale-after`` is shortened so that one 10 s outage
shows both answers docs/cluster-checks.md promises while the API server is down: the state
cached (the first ``stale_after`` seconds), then the cluster checks skipped with a warning.

Stopping the API server stops it for every test of the session: it is always started again (in a
``finally``), and the stops here are kept short."""
from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from testing.builders import admission_review
from testing.control_plane import ControlPlane
from testing.deployed_webhook import OPTIONAL_CRDS, DeployedWebhook, deployed_webhook, install_crds, remove_crds
from testing.kube_objects import gpu_job

STALE_AFTER = 6.0  # --cluster-stale-after
OUTAGE = 10.0
GRACE = 2.0  # from SIGTERM to SIGKILL: the API server stops soon, not after its own drain timeout
RECHECK = 2.0  # --crd-recheck-interval: the looks for the CRDs not installed hit the outage
GPU = "requests.nvidia.com/gpu"


@pytest.fixture(scope="module")
def webhook(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DeployedWebhook]:
    found = remove_crds(control_plane, list(OPTIONAL_CRDS))
    try:
        with deployed_webhook(control_plane, tmp_path_factory.mktemp("faults"), "--cluster-stale-after",
                              str(STALE_AFTER), "--crd-recheck-interval", str(RECHECK)) as deployed:
            deployed.wait_ready()
            yield deployed
    finally:
        install_crds(control_plane, *(OPTIONAL_CRDS[name] for name in found))


@pytest.fixture(scope="module")
def team(webhook: DeployedWebhook) -> str:
    namespace = webhook.namespace()
    set_gpu_quota(webhook, namespace, 8)
    verdict_within(webhook, namespace, allowed_gpus=8)
    return namespace


def set_gpu_quota(webhook: DeployedWebhook, namespace: str, gpus: int) -> None:
    webhook.plane.apply([{"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpus"},
                          "spec": {"hard": {GPU: str(gpus)}}}], "-n", namespace)


def review(webhook: DeployedWebhook, namespace: str, workers: int) -> dict[str, Any]:
    """The webhook's answer for ``workers`` × 2 GPUs, asked directly (the API server may be down)."""
    return webhook.server.review("/validate", admission_review(gpu_job(workers=workers), namespace=namespace))


def quota_refusal(answer: dict[str, Any]) -> str:
    return answer["status"]["message"] if not answer["allowed"] and "[resource-quota]" in answer["status"]["message"] \
        else ""


def verdict_within(webhook: DeployedWebhook, namespace: str, allowed_gpus: int, timeout: float = 30) -> float:
    """Seconds until the webhook admits ``allowed_gpus`` and refuses 2 more for quota (the state of
    a quota with that much free, as its cache has it)."""
    started = time.monotonic()
    while True:
        over = review(webhook, namespace, allowed_gpus // 2 + 1)
        within = review(webhook, namespace, allowed_gpus // 2)
        if f"hard {allowed_gpus}," in quota_refusal(over) and within["allowed"] and \
                not any("[cluster-state]" in w for w in within.get("warnings", [])):
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            pytest.fail(f"not within {timeout} s: over {over}, within {within}")
        time.sleep(0.1)


def cluster_state_warning(answer: dict[str, Any]) -> str:
    return next((w for w in answer.get("warnings", []) if w.startswith("[cluster-state]")), "")


def test_the_api_server_stopped_and_started_again(webhook: DeployedWebhook, team: str):
    plane = webhook.plane
    try:
        # Told to stop, it refuses new connections at once (the looks for the CRDs not installed
        # fail from here on) and keeps the open watches GRACE seconds, until it is killed.
        plane.stop_apiserver(grace=GRACE)
        stopped = time.monotonic()
        # down, for less than stale_after: ready, and the cached state still decides
        assert webhook.readiness()[0] == 200
        assert "hard 8," in quota_refusal(review(webhook, team, 5))
        # down for longer: still ready; the cluster checks are skipped and each answer says why
        time.sleep(max(0.0, stopped + STALE_AFTER + 1.5 - time.monotonic()))
        status, readiness = webhook.readiness()
        assert status == 200, readiness
        skipped = review(webhook, team, 5)
        assert skipped["allowed"] is True
        warning = cluster_state_warning(skipped)
        assert "cluster checks (limit-range, resource-quota, node-fit, kueue-queue, pod-security) were not run: lost the watch" \
            in warning
        assert "trainer.kubeflow.org" not in warning and "kueue.x-k8s.io" not in warning
        time.sleep(max(0.0, stopped + OUTAGE - time.monotonic()))
    finally:
        plane.start_apiserver()
    restarted = time.monotonic()
    set_gpu_quota(webhook, team, 4)
    verdict_within(webhook, team, allowed_gpus=4, timeout=15)
    assert time.monotonic() - restarted < 15  # the quota changed after the restart, seen in time
    # Longer than stale_after after the restart: the kinds that are not installed (looked for
    # during the outage) never switch the checks off.
    deadline = time.monotonic() + STALE_AFTER + 2 * RECHECK
    while time.monotonic() < deadline:
        answer = review(webhook, team, 3)
        assert cluster_state_warning(answer) == "" and "hard 4," in quota_refusal(answer), answer
        time.sleep(0.5)
    assert "(not installed)" in webhook.readiness()[1]["checks"]["cluster"]["detail"]


def test_a_burst_of_quota_updates_converges_on_the_last(webhook: DeployedWebhook, team: str):
    from kubernetes import client

    core = client.CoreV1Api(webhook.plane.api_client())
    for gpus in range(59, 9, -1):  # 50 updates, the last one 10
        core.patch_namespaced_resource_quota("gpus", team, {"spec": {"hard": {GPU: str(gpus)}}})
    verdict_within(webhook, team, allowed_gpus=10, timeout=15)
    stored = json.loads(webhook.plane.kubectl("get", "resourcequota", "gpus", "-n", team, "-o", "json").stdout)
    assert stored["spec"]["hard"][GPU] == "10"
    time.sleep(1.0)  # and it stays there: no late event of an earlier update overtakes it
    verdict_within(webhook, team, allowed_gpus=10, timeout=0.5)
