"""The watch caches through API-server faults (``testing.kube_api_server``): a kind the cluster does
not serve, or one a job does not read, never switches off the checks of the kinds that are
healthy, and the caches reconnect soon after the API server is back instead of waiting out a long
backoff. The same faults on a real API server: tests/kube/test_apiserver_faults.py."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException

from testing.app_client import webhook
from testing.builders import admission_review
from testing.kube_api_server import CORE, MPIJOBS, TRAINER, KubeAPI
from testing.kube_objects import gpu_job, namespace, node, resource_quota
from testing.tls_server import free_port
from tests.policies.trainer.trainer_data import runtime, trainjob, trainjob_review
from tests.webhook.test_watch_caches import GPU, SETTLE, eventually, start_caches, validate
from webhook.kind_watch import Backoff, _unreachable
from webhook.watch_caches import (
    MPIJOB,
    RESOURCE_QUOTAS,
    TRAINING_RUNTIMES,
    TRAINJOB,
    ClusterCaches,
    Informer,
    Timing,
    api_client,
)

# A long backoff after HTTP errors (as in production, scaled down) and a short reconnect: an old
# informer, without the reconnect cap, would wait up to 5 s after each outage below.
FAULTS = Timing(stale_after=1.0, backoff_initial=0.1, backoff_max=5.0, reconnect_max=0.1, absent_recheck=0.05)


@pytest.fixture
def api() -> Iterator[KubeAPI]:
    with KubeAPI((*CORE, MPIJOBS)) as server:  # the Trainer's and Kueue's CRDs not installed
        server.apply(namespace("team-a"), node("gpu-1", {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"}),
                     resource_quota("team-cv-quota", {GPU: 32}, {GPU: 24}))
        yield server


@pytest.fixture
def caches(api: KubeAPI, tmp_path: Path) -> Iterator[ClusterCaches]:
    started = start_caches(api, tmp_path, FAULTS)
    try:
        assert started.wait_synced(SETTLE), started.readiness()
        yield started
    finally:
        started.stop()


def watch_availability(view: ClusterCaches, stop: threading.Event) -> list[str]:
    """Every reason ``view`` gave for being unavailable while ``stop`` is not set (polled)."""
    reasons: list[str] = []

    def poll() -> None:
        while not stop.is_set():
            reason = view.unavailable_reason
            if reason and reason not in reasons:
                reasons.append(reason)
            time.sleep(0.005)

    threading.Thread(target=poll, daemon=True).start()
    return reasons


def test_a_kind_not_installed_stays_not_installed_while_the_api_server_is_down(api: KubeAPI,
                                                                              caches: ClusterCaches):
    """The failure seen on a real cluster: the Trainer's runtimes not installed, their periodic
    look hit the stopped API server and counted as a lost watch, and after ``stale_after`` that
    one kind switched off every cluster check although the quotas had resynced."""
    runtimes = caches._informers[TRAINING_RUNTIMES.plural]
    looks = api.count("/apis/trainer.kubeflow.org/v1alpha1/trainingruntimes")
    stop = threading.Event()
    reasons = watch_availability(caches.for_job_kind(MPIJOB), stop)
    api.go_down()
    eventually(lambda: runtimes.last_error != "")  # it looked for the CRD again, and got no answer
    assert runtimes.absent and runtimes.cut_off_since is None and runtimes.problem(time.monotonic()) == ""
    api.come_back()
    api.apply(resource_quota("team-cv-quota", {GPU: 32}, {GPU: 30}))
    eventually(lambda: caches.resource_quotas("team-a")[0]["status"]["used"][GPU] == "30")
    eventually(lambda: api.count("/apis/trainer.kubeflow.org/v1alpha1/trainingruntimes") > looks + 1)
    eventually(lambda: caches.available)
    time.sleep(FAULTS.stale_after * 1.5)  # long enough for a runtime cache counted as cut off to turn stale
    stop.set()
    # the installed kinds may have been cut off for a moment; never a kind that is not installed
    assert [r for r in reasons if "trainer.kubeflow.org" in r or "kueue" in r] == []
    assert caches.available
    ready, detail = caches.readiness()
    assert ready and "0 trainingruntimes (not installed)" in detail
    response = validate(caches.for_job_kind(MPIJOB), gpu_job(workers=2))  # 4 GPUs, 2 free
    assert response["allowed"] is False
    assert "requested 4 (2 workers × 2), hard 32, used 30, available 2" in response["status"]["message"]


def test_a_runtime_cache_cut_off_switches_off_the_trainjob_checks_only(tmp_path: Path):
    with KubeAPI((*CORE, MPIJOBS, *TRAINER)) as api:
        api.apply(namespace("team-a"), resource_quota("team-cv-quota", {GPU: 32}, {GPU: 24}),
                  runtime("runtimes/v2.3.0/deepspeed_distributed.yaml"))
        caches = start_caches(api, tmp_path, FAULTS)
        try:
            assert caches.wait_synced(SETTLE), caches.readiness()
            eventually(lambda: caches.training_runtime("ClusterTrainingRuntime", "", "deepspeed-distributed"))
            api.forbidden.add(TRAINING_RUNTIMES.plural)
            api.drop_watches()  # its watch is started again, and refused
            trainjobs = caches.for_job_kind(TRAINJOB)
            eventually(lambda: not trainjobs.available)
            assert trainjobs.unavailable_reason.startswith("lost the watch on trainingruntimes.trainer.kubeflow.org")
            assert "HTTP 403: not allowed to list trainingruntimes" in trainjobs.unavailable_reason
            mpijobs = caches.for_job_kind(MPIJOB)
            assert mpijobs.available and mpijobs.unavailable_reason == ""
            # through /validate, wired as ``serve`` wires it (webhook.bootstrap)
            served = webhook(cluster=mpijobs, trainjob_cluster=trainjobs)
            mpijob_answer = served.review("/validate", admission_review(gpu_job(workers=20)))["response"]
            assert mpijob_answer["allowed"] is False and "[resource-quota]" in mpijob_answer["status"]["message"]
            trainjob_answer = served.review("/validate", trainjob_review(trainjob(numNodes=4)))["response"]
            (warning,) = [w for w in trainjob_answer["warnings"] if w.startswith("[cluster-state]")]
            assert "were not run: lost the watch on trainingruntimes.trainer.kubeflow.org" in warning
            api.forbidden.clear()
            eventually(lambda: trainjobs.available)
        finally:
            caches.stop()


def test_the_caches_reconnect_soon_after_a_long_outage(api: KubeAPI, caches: ClusterCaches):
    """Down for longer than the backoff after HTTP errors needs to grow (0.1 s doubling, to 5 s):
    a change made as the API server comes back is seen well within a second, not at the next
    retry of a grown backoff."""
    api.go_down()
    time.sleep(3.2)  # unreachable: retried at most reconnect_max apart all along, where the backoff
    # after HTTP errors would have grown to its next try at about 6 s
    api.come_back()
    api.apply(resource_quota("team-cv-quota", {GPU: 32}, {GPU: 31}))
    seen = eventually(lambda: caches.resource_quotas("team-a")[0]["status"]["used"][GPU] == "31", timeout=SETTLE)
    assert seen < 1.0
    assert eventually(lambda: caches.available) < 1.0  # every kind, not only the quotas


def test_a_refused_connection_counts_as_unreachable_an_http_error_does_not(api: KubeAPI, tmp_path: Path):
    """What the real client raises, not a hand-made exception."""
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    kubeconfig.write_text(kubeconfig.read_text().replace(api.url, f"http://127.0.0.1:{free_port()}"))  # nobody there
    informer = Informer(RESOURCE_QUOTAS, api_client(kubeconfig), FAULTS, threading.Event())
    with pytest.raises(Exception) as refused:
        informer._call("v1", limit=1)
    assert _unreachable(refused.value)
    api.forbidden.add(RESOURCE_QUOTAS.plural)
    answered = Informer(RESOURCE_QUOTAS, api_client(api.kubeconfig(tmp_path / "kubeconfig2")), FAULTS,
                        threading.Event())
    with pytest.raises(ApiException) as forbidden:
        answered._call("v1", limit=1)
    assert forbidden.value.status == 403 and not _unreachable(forbidden.value)


def test_the_backoff_grows_to_its_maximum_but_never_past_a_cap_and_starts_over_when_reset():
    backoff = Backoff(initial=1.0, maximum=30.0)
    waits = [backoff.next() for _ in range(7)]
    assert [round(w / b) for w, b in zip(waits, (1, 2, 4, 8, 16, 30, 30))] == [1] * 7
    assert all(0.8 * b <= w <= 1.2 * b for w, b in zip(waits, (1, 2, 4, 8, 16, 30, 30)))
    capped = [backoff.next(cap=2.0) for _ in range(3)]
    assert all(w <= 2.4 for w in capped)
    assert backoff.next() <= 4 * 1.2  # the cap kept it from growing: it grows again from there
    backoff.reset()
    assert backoff.next() <= 1.2
