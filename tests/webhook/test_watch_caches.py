"""The watch caches against a real list/watch protocol (``testing.kube_api_server``), driven by the real
``kubernetes`` client, and the cluster-aware rules reading them through /validate."""
from __future__ import annotations

import gc
import json
import threading
import time
from dataclasses import replace
from collections.abc import Callable, Iterator
from pathlib import Path

import kubernetes.client
import pytest

from policies.interface import Action
from policies.config.layered_policy import Policy
from policies.config.rule_settings import Settings
from policies.registry import default_settings
from testing.builders import admission_review, mpijob
from testing.kube_api_server import CORE, MPIJOBS, KubeAPI, local_queues
from testing.kube_objects import (
    RUNNING,
    container_limits,
    gpu_job,
    limit_range,
    local_queue,
    namespace,
    node,
    priority_class_scope,
    resource_quota,
    stored_mpijob,
)
from testing.app_client import webhook
from webhook.watch_caches import LOCAL_QUEUES, ClusterCaches, Informer, Timing, api_client

GPU = "requests.nvidia.com/gpu"
# Fast enough for tests: a lost watch makes the state unusable after 0.5 s, retries within 0.2 s.
FAST = Timing(stale_after=0.5, backoff_initial=0.02, backoff_max=0.2, absent_recheck=0.2)


# How long a test waits for the caches to catch up (the first list, an event) before it fails.
# The wait ends as soon as they have, so a generous bound costs nothing when they are fast: even
# the first caches of a test process sync in about 0.1 s (0.04 CPU-seconds; the kubernetes
# client's one-time import, about a CPU-second, is paid when this module is imported, and the
# caches no longer load its generated API classes). It is generous because a machine loaded by
# other work can stretch that many times over. A test that asserts how fast something is seen
# says so with its own bound (test_a_quota_update_is_seen_within_a_second).
SETTLE = 60.0


def eventually(condition: Callable[[], object], timeout: float = SETTLE) -> float:
    """Seconds until ``condition()`` held; fails after ``timeout``."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            pytest.fail(f"not within {timeout} s: {condition}")
        time.sleep(0.005)
    return time.monotonic() - started


@pytest.fixture
def api() -> Iterator[KubeAPI]:
    with KubeAPI() as server:
        server.apply(namespace("team-a"), node("gpu-1", {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"}))
        yield server


def start_caches(api: KubeAPI, tmp_path: Path, timing: Timing = FAST) -> ClusterCaches:
    return ClusterCaches(api_client(api.kubeconfig(tmp_path / "kubeconfig")), timing=timing).start()


@pytest.fixture
def caches(api: KubeAPI, tmp_path: Path) -> Iterator[ClusterCaches]:
    started = start_caches(api, tmp_path)
    try:
        assert started.wait_synced(SETTLE), started.readiness()
        yield started
    finally:
        started.stop()


def validate(caches: ClusterCaches, job: dict, settings: Settings | None = None) -> dict:
    served = webhook(cluster=caches, policy=Policy(settings=settings) if settings else None)
    return served.review("/validate", admission_review(job))["response"]


# --- the caches ---------------------------------------------------------------------------

def test_lists_then_serves_objects_by_namespace(api: KubeAPI, caches: ClusterCaches):
    api.apply(resource_quota("gpus", {GPU: 32}), resource_quota("other", {"pods": 1}, namespace="team-b"))
    eventually(lambda: len(caches.resource_quotas("team-a")) == 1 and caches.resource_quotas("team-b"))
    (quota,) = caches.resource_quotas("team-a")
    assert quota["spec"]["hard"] == {GPU: "32"}
    assert caches.resource_quotas("nowhere") == ()
    assert caches.namespace("team-a")["metadata"]["labels"]["kubernetes.io/metadata.name"] == "team-a"
    (gpu_node,) = caches.nodes()
    assert set(gpu_node) == {"metadata", "spec", "status"}  # trimmed to what node-fit reads
    assert caches.local_queues("team-a") is None  # Kueue is not installed
    assert caches.available and caches.unavailable_reason == ""


def test_deletes_are_seen(api: KubeAPI, caches: ClusterCaches):
    quota = resource_quota("gpus", {GPU: 32})
    api.apply(quota)
    eventually(lambda: caches.resource_quotas("team-a"))
    api.delete(quota)
    eventually(lambda: caches.resource_quotas("team-a") == ())


def test_lists_in_pages(api: KubeAPI, caches: ClusterCaches, tmp_path: Path):
    api.apply(*(resource_quota("q", {"pods": 10}, namespace=f"ns-{i}") for i in range(1200)))
    fresh = start_caches(api, tmp_path)
    try:
        assert fresh.wait_synced(10)
        assert all(len(fresh.resource_quotas(f"ns-{i}")) == 1 for i in range(1200))
        assert api.count("/api/v1/resourcequotas", watch=False) == 1 + 3  # 500 + 500 + 200
    finally:
        fresh.stop()


def test_expired_watch_lists_again_and_misses_nothing(api: KubeAPI, caches: ClusterCaches):
    lists = api.count("/api/v1/resourcequotas", watch=False)
    api.go_down()  # the watch breaks; meanwhile the quota changes and history is compacted
    api.apply(resource_quota("gpus", {GPU: 64}))
    api.compact()
    api.come_back()
    eventually(lambda: caches.resource_quotas("team-a"))
    assert caches.resource_quotas("team-a")[0]["spec"]["hard"][GPU] == "64"
    assert api.count("/api/v1/resourcequotas", watch=False) == lists + 1


def test_expired_watch_answered_with_http_410_lists_again(api: KubeAPI, caches: ClusterCaches):
    api.gone_as_http_status = True
    lists = api.count("/api/v1/limitranges", watch=False)
    api.apply(namespace("team-b"))  # moves the version past the limitranges watch
    api.compact()
    api.drop_watches()
    eventually(lambda: api.count("/api/v1/limitranges", watch=False) == lists + 1)
    assert caches.available


def test_a_dropped_watch_resumes_without_listing_again(api: KubeAPI, caches: ClusterCaches):
    lists = api.count("/api/v1/resourcequotas", watch=False)
    watches = api.count("/api/v1/resourcequotas", watch=True)
    api.drop_watches()
    eventually(lambda: api.count("/api/v1/resourcequotas", watch=True) == watches + 1)
    api.apply(resource_quota("gpus", {GPU: 8}))
    eventually(lambda: caches.resource_quotas("team-a"))
    assert api.count("/api/v1/resourcequotas", watch=False) == lists


def test_bookmarks_keep_a_quiet_watch_resumable(api: KubeAPI, caches: ClusterCaches):
    lists = api.count("/api/v1/resourcequotas", watch=False)
    watches = api.count("/api/v1/resourcequotas", watch=True)
    version = api.apply(namespace("team-b"))  # other kinds move on; quotas stay quiet
    api.send_bookmarks()
    eventually(lambda: caches.resource_versions()["resourcequotas"] == str(version))
    api.compact()
    api.drop_watches()
    eventually(lambda: api.count("/api/v1/resourcequotas", watch=True) == watches + 1)
    time.sleep(0.1)
    assert api.count("/api/v1/resourcequotas", watch=False) == lists


def test_every_list_event_and_bookmark_reports_the_cache_in_sync(api: KubeAPI, tmp_path: Path):
    synced: list[str] = []
    caches = ClusterCaches(api_client(api.kubeconfig(tmp_path / "kubeconfig")), timing=FAST,
                           on_sync=synced.append).start()
    try:
        eventually(lambda: caches.synced)
        assert {"resourcequotas", "limitranges", "namespaces", "nodes", "mpijobs"} <= set(synced)
        before = synced.count("resourcequotas")
        api.send_bookmarks()  # a quiet cache is still current: the cache-age metric must not grow
        eventually(lambda: synced.count("resourcequotas") > before)
        before = synced.count("limitranges")
        api.apply(limit_range("limits", container_limits(max={"cpu": "4"})))
        eventually(lambda: synced.count("limitranges") > before)
    finally:
        caches.stop()


def test_snapshots_stay_the_same_objects_until_something_in_them_changes(api: KubeAPI, caches: ClusterCaches):
    """The rules derive data from what the caches hand out once per change (parsed quotas, node
    capacities), found by identity: unchanged state must come back as the very same objects."""
    api.apply(resource_quota("gpus", {GPU: 32}), resource_quota("other", {"pods": 1}, namespace="team-b"))
    eventually(lambda: caches.resource_quotas("team-a") and caches.resource_quotas("team-b"))
    quotas, nodes, jobs = caches.resource_quotas("team-a"), caches.nodes(), caches.mpijobs("team-a")
    assert caches.resource_quotas("team-a") is quotas and caches.nodes() is nodes and caches.mpijobs("team-a") is jobs
    # a node heartbeat moves only what node-fit does not read; another namespace's quota changes
    heartbeat = node("gpu-1", {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"})
    heartbeat["status"]["conditions"] = [{"type": "Ready", "status": "True",
                                          "lastHeartbeatTime": "2026-01-01T00:01:00Z"}]
    version = api.apply(heartbeat)
    api.apply(resource_quota("other", {"pods": 2}, namespace="team-b"))
    eventually(lambda: caches.resource_versions()["nodes"] == str(version))
    eventually(lambda: caches.resource_quotas("team-b")[0]["spec"]["hard"]["pods"] == "2")
    assert caches.nodes() is nodes
    assert caches.resource_quotas("team-a") is quotas
    # a change is a new snapshot
    api.apply(resource_quota("gpus", {GPU: 64}))
    eventually(lambda: caches.resource_quotas("team-a") is not quotas)
    assert caches.resource_quotas("team-a")[0]["spec"]["hard"][GPU] == "64"
    api.apply(node("gpu-1", {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "16"}))
    eventually(lambda: caches.nodes() is not nodes)


def test_kueue_installed_later_is_picked_up(api: KubeAPI, caches: ClusterCaches):
    assert caches.local_queues("team-a") is None
    api.install(local_queues("v1beta2"))
    api.apply({**local_queue("gpu"), "apiVersion": "kueue.x-k8s.io/v1beta2"})
    eventually(lambda: caches.local_queues("team-a"))
    assert [q["metadata"]["name"] for q in caches.local_queues("team-a")] == ["gpu"]
    eventually(lambda: api.count("/apis/kueue.x-k8s.io/v1beta2/localqueues", watch=True) >= 1)


def test_an_older_kueue_version_is_used_when_it_is_the_one_served(tmp_path: Path):
    with KubeAPI((*CORE, MPIJOBS, local_queues("v1beta1"))) as server:
        server.apply(local_queue("default"))
        caches = start_caches(server, tmp_path)
        try:
            assert caches.wait_synced(SETTLE)
            assert [q["metadata"]["name"] for q in caches.local_queues("team-a")] == ["default"]
        finally:
            caches.stop()


def test_not_ready_until_listed_then_ready(api: KubeAPI, tmp_path: Path):
    api.go_down()
    caches = start_caches(api, tmp_path)
    try:
        served = webhook(cluster=caches)
        served.client.application.extensions["mpijob-webhook"].readiness_checks["cluster"] = caches.readiness
        time.sleep(0.3)
        status, body = _get(served, "/readyz")
        assert status == 503
        assert "resourcequotas not listed yet" in body["checks"]["cluster"]["detail"]
        # meanwhile requests are answered at once, cluster rules skipped with a warning
        started = time.monotonic()
        response = served.review("/validate", admission_review(gpu_job()))["response"]
        assert time.monotonic() - started < 0.5
        assert response["allowed"] is True
        assert any("cluster checks (" in w and "not listed yet" in w for w in response["warnings"])
        api.come_back()
        assert caches.wait_synced(SETTLE)
        status, body = _get(served, "/readyz")
        assert status == 200 and body["checks"]["cluster"]["detail"].startswith("cluster state cached: 0 resourcequotas")
    finally:
        caches.stop()


def test_a_server_process_freezes_its_heap_once_the_caches_are_listed(api: KubeAPI, tmp_path: Path):
    """Full garbage collections then skip the cached objects (seconds of stalls under load)."""
    assert gc.get_freeze_count() == 0
    api.go_down()
    caches = ClusterCaches(api_client(api.kubeconfig(tmp_path / "kubeconfig")), timing=FAST,
                           freeze_heap=True).start()
    try:
        time.sleep(0.2)
        assert gc.get_freeze_count() == 0  # nothing listed yet: nothing worth freezing
        api.come_back()
        assert caches.wait_synced(SETTLE)
        eventually(lambda: gc.get_freeze_count() > 0)
        cached = caches.namespace("team-a")
        assert cached is not None and not any(o is cached for o in gc.get_objects())  # frozen, not tracked
    finally:
        caches.stop()
        gc.unfreeze()


def test_a_cache_listed_again_after_its_watch_expired_is_frozen_too(api: KubeAPI, tmp_path: Path):
    """A relist replaces a whole cache: left to the collector, the stalls would come back with it."""
    assert gc.get_freeze_count() == 0
    caches = ClusterCaches(api_client(api.kubeconfig(tmp_path / "kubeconfig")), timing=FAST,
                           freeze_heap=True).start()
    try:
        assert caches.wait_synced(SETTLE)
        eventually(lambda: gc.get_freeze_count() > 0)
        lists = api.count("/api/v1/resourcequotas", watch=False)
        api.go_down()  # the watch breaks; meanwhile a quota is created and history is compacted
        api.apply(resource_quota("gpus", {GPU: 64}))
        api.compact()
        api.come_back()
        eventually(lambda: caches.resource_quotas("team-a"))
        assert api.count("/api/v1/resourcequotas", watch=False) == lists + 1  # listed again
        relisted = caches.resource_quotas("team-a")[0]
        eventually(lambda: not any(o is relisted for o in gc.get_objects()))  # frozen, not tracked
    finally:
        caches.stop()
        gc.unfreeze()


def test_a_kind_not_served_is_reported_listed_once_not_on_every_look(api: KubeAPI, tmp_path: Path):
    """Each look for a CRD that is not installed would otherwise count as a new list (and freeze
    whatever requests hold at that moment)."""
    listed: list[str] = []
    stop = threading.Event()
    informer = Informer(LOCAL_QUEUES, api_client(api.kubeconfig(tmp_path / "kubeconfig")), FAST, stop,
                        on_synced=lambda: listed.append("localqueues"))
    thread = threading.Thread(target=informer.run, daemon=True)
    thread.start()
    try:
        eventually(lambda: informer.absent)
        eventually(lambda: api.count("/apis/kueue.x-k8s.io/v1beta1/localqueues", watch=False) >= 3)  # looked again
        assert listed == ["localqueues"]
        assert informer.synced and informer.absent
    finally:
        stop.set()
        thread.join(2)


def test_the_caches_list_and_watch_without_the_generated_api_classes(api: KubeAPI, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch):
    """Loading CoreV1Api and the models it names costs every worker about a CPU-second before it
    is ready: the caches call the API server through the client's ApiClient alone."""
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the caches loaded a generated API class")

    for generated in ("CoreV1Api", "CustomObjectsApi"):
        monkeypatch.setattr(kubernetes.client, generated, refuse)
    caches = start_caches(api, tmp_path)
    try:
        assert caches.wait_synced(SETTLE), caches.readiness()
        assert caches.namespace("team-a") is not None and len(caches.nodes()) == 1
        api.apply(namespace("team-b"))
        eventually(lambda: caches.namespace("team-b") is not None)  # the watch, too
    finally:
        caches.stop()


def test_caches_leave_the_heap_alone_unless_asked(caches: ClusterCaches):
    assert caches.synced and gc.get_freeze_count() == 0


def test_missing_rbac_is_named_on_readyz(api: KubeAPI, tmp_path: Path):
    api.forbidden.add("nodes")
    caches = start_caches(api, tmp_path)
    try:
        expected = (False, "nodes not listed yet: HTTP 403: not allowed to list nodes (RBAC)")
        eventually(lambda: caches.readiness() == expected)  # every other kind is listed
        api.forbidden.clear()
        assert caches.wait_synced(SETTLE)
    finally:
        caches.stop()


def _get(served, path: str) -> tuple[int, dict]:
    answer = served.client.get(path)
    return answer.status_code, answer.get_json()


# --- the rules through the caches ---------------------------------------------------------

def test_gpu_quota_exceeded(api: KubeAPI, caches: ClusterCaches):
    api.apply(resource_quota("team-cv-quota", {GPU: 32}, {GPU: 24}))
    eventually(lambda: caches.resource_quotas("team-a"))
    response = validate(caches, gpu_job(workers=20))
    assert response["allowed"] is False
    status = response["status"]
    assert status["code"] == 403 and status["reason"] == "Forbidden"
    assert ("requests.nvidia.com/gpu requested 40 (20 workers × 2), hard 32, used 24, available 8. Suggestions: "
            "1. reduce spec.mpiReplicaSpecs[Worker].replicas to 4 to fit now; 2. at most 16 workers can ever fit "
            "this quota") in status["message"]


def test_a_quota_update_is_seen_within_a_second(api: KubeAPI, caches: ClusterCaches):
    api.apply(resource_quota("team-cv-quota", {GPU: 32}, {GPU: 24}))
    eventually(lambda: caches.resource_quotas("team-a"))
    assert validate(caches, gpu_job(workers=8))["allowed"] is False
    api.apply(resource_quota("team-cv-quota", {GPU: 64}, {GPU: 24}))
    seconds = eventually(lambda: validate(caches, gpu_job(workers=8))["allowed"], timeout=1.0)
    assert seconds < 1.0


def test_pods_count_quota(api: KubeAPI, caches: ClusterCaches):
    api.apply(resource_quota("pods", {"pods": 10}, {"pods": 6}))
    eventually(lambda: caches.resource_quotas("team-a"))
    response = validate(caches, gpu_job(workers=4))
    assert "pods requested 5 (launcher 1 + 4 workers × 1), hard 10, used 6, available 4" in response["status"]["message"]
    assert "reduce spec.mpiReplicaSpecs[Worker].replicas to 3 to fit now" in response["status"]["message"]
    assert validate(caches, gpu_job(workers=3))["allowed"] is True


def test_scoped_quotas_count_only_the_pods_they_match(api: KubeAPI, caches: ClusterCaches):
    api.apply(resource_quota("high-priority", {GPU: 8}, selector=[priority_class_scope("In", "high-priority")]),
              resource_quota("short-jobs", {"pods": 2}, scopes=["Terminating"]))
    eventually(lambda: len(caches.resource_quotas("team-a")) == 2)
    assert validate(caches, gpu_job(workers=6))["allowed"] is True  # neither quota matches these pods
    job = gpu_job(workers=6)
    for replica in job["spec"]["mpiReplicaSpecs"].values():
        replica["template"]["spec"]["priorityClassName"] = "high-priority"
    message = validate(caches, job)["status"]["message"]
    assert "ResourceQuota high-priority: requests.nvidia.com/gpu requested 12 (6 workers × 2), hard 8, used 0" in message
    assert "short-jobs" not in message


def test_limit_range_defaulting_changes_the_verdict(api: KubeAPI, caches: ClusterCaches):
    api.apply(resource_quota("gpus", {GPU: 8}))
    eventually(lambda: caches.resource_quotas("team-a"))
    job = mpijob(workers=2, worker_resources={"limits": {"cpu": 1}})  # no GPUs asked for
    assert validate(caches, job)["allowed"] is True
    api.apply(limit_range("gpu-max", container_limits(max={"nvidia.com/gpu": "4"})))
    eventually(lambda: caches.limit_ranges("team-a"))
    message = validate(caches, job)["status"]["message"]
    assert ("requests.nvidia.com/gpu requested 12 (launcher 4 + 2 workers × 4, defaults of LimitRange gpu-max "
            "included), hard 8, used 0, available 8") in message


def test_two_jobs_back_to_back_cannot_both_pass(api: KubeAPI, caches: ClusterCaches):
    api.apply(resource_quota("team-cv-quota", {GPU: 32}, {GPU: 24}))
    eventually(lambda: caches.resource_quotas("team-a"))
    first = gpu_job("first", workers=4)
    assert validate(caches, first)["allowed"] is True
    # the API server stores it; its pods do not exist yet, so status.used has not moved
    api.apply(stored_mpijob("first", workers=4, worker_resources={"limits": {"nvidia.com/gpu": 2}}))
    eventually(lambda: caches.mpijobs("team-a"))
    second = validate(caches, gpu_job("second", workers=4))
    assert second["allowed"] is False
    assert "used 24 + 8 for MPIJobs accepted but not started yet (first), available 0" in second["status"]["message"]
    # once its pods run they are in status.used, and the job is no longer counted twice
    api.apply(stored_mpijob("first", workers=4, conditions=RUNNING, worker_resources={"limits": {"nvidia.com/gpu": 2}}),
              resource_quota("team-cv-quota", {GPU: 32}, {GPU: 32}))
    eventually(lambda: "used 32, available 0" in (validate(caches, gpu_job("second", workers=4))
                                                 .get("status", {}).get("message", "")))


def test_kueue_managed_job_gets_a_warning(api: KubeAPI, caches: ClusterCaches):
    api.install(local_queues("v1beta2"))
    api.apply(resource_quota("team-cv-quota", {GPU: 32}, {GPU: 24}),
              {**local_queue("team-queue"), "apiVersion": "kueue.x-k8s.io/v1beta2"})
    eventually(lambda: caches.resource_quotas("team-a") and caches.local_queues("team-a"))
    job = gpu_job(workers=6)
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team-queue"}
    job["spec"]["runPolicy"]["suspend"] = True  # as Kueue's own webhook leaves it
    response = validate(caches, job)
    assert response["allowed"] is True
    assert response["warnings"] == [
        "[resource-quota] spec.mpiReplicaSpecs[Worker].replicas: needs requests.nvidia.com/gpu 12 (6 workers × 2) "
        "but ResourceQuota team-cv-quota has 8 of 32 free; its pods will wait until the quota has room, "
        "or use 4 workers"]
    job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "no-such-queue"
    warnings = validate(caches, job)["warnings"]
    assert any(w.startswith('[kueue-queue] metadata.labels[kueue.x-k8s.io/queue-name]: LocalQueue "no-such-queue" '
                            "does not exist in namespace team-a (LocalQueues here: team-queue)") for w in warnings)


def test_node_fit_warning(api: KubeAPI, caches: ClusterCaches):
    job = gpu_job(workers=2, gpus=16)
    warnings = validate(caches, job)["warnings"]
    assert ("[node-fit] spec.mpiReplicaSpecs[Worker].template.spec: no matching node can hold a Worker pod "
            "(nvidia.com/gpu 16); largest of 1 matching: gpu-1 with nvidia.com/gpu 8; use more, smaller pods or "
            "larger nodes") in warnings


def test_a_node_change_is_seen_on_the_next_request(api: KubeAPI, caches: ClusterCaches):
    job = gpu_job(workers=2, gpus=16)
    assert any(w.startswith("[node-fit]") for w in validate(caches, job)["warnings"])
    api.apply(node("gpu-1", {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "16"}))
    eventually(lambda: not any(w.startswith("[node-fit]") for w in validate(caches, job).get("warnings", [])))


def test_api_down_skips_cluster_rules_with_a_warning(api: KubeAPI, caches: ClusterCaches):
    api.apply(resource_quota("team-cv-quota", {GPU: 32}, {GPU: 24}))
    eventually(lambda: caches.resource_quotas("team-a"))
    api.go_down()
    eventually(lambda: not caches.available)
    assert caches.unavailable_reason.startswith("lost the watch on ")
    response = validate(caches, gpu_job(workers=20))
    assert response["allowed"] is True
    (warning,) = [w for w in response["warnings"] if w.startswith("[cluster-state]")]
    assert "cluster checks (limit-range, resource-quota, node-fit, kueue-queue, pod-security) were not run" in warning
    assert "lost the watch on" in warning
    strict = replace(default_settings(), cluster_unavailable=Action.DENY)
    denied = validate(caches, gpu_job(workers=20), strict)
    assert denied["allowed"] is False and "were not run" in denied["status"]["message"]
    api.come_back()
    eventually(lambda: caches.available)
    assert validate(caches, gpu_job(workers=20))["allowed"] is False


# --- the real server ----------------------------------------------------------------------

def test_serve_with_kubeconfig_end_to_end(api: KubeAPI, tmp_path: Path):
    """gunicorn over TLS reading the cluster through --kubeconfig: ready once the first lists are
    in (the not-ready phase is covered in-process above), then a job over quota is refused."""
    from testing.tls_server import serving

    api.apply(resource_quota("team-cv-quota", {GPU: 32}, {GPU: 24}))
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    with serving(tmp_path / "server", "--dev", "--kubeconfig", str(kubeconfig), "--workers", "1",
                 "--threads", "4", "--no-audit-log") as server:
        eventually(lambda: server.request("GET", "/readyz")[0] == 200, timeout=15)
        readiness = json.loads(server.request("GET", "/readyz")[1])
        assert readiness["checks"]["cluster"]["detail"].startswith("cluster state cached: 1 resourcequotas")
        response = server.review("/validate", admission_review(gpu_job(workers=20)))
        assert response["allowed"] is False and response["status"]["code"] == 403
        assert "requested 40 (20 workers × 2), hard 32, used 24, available 8" in response["status"]["message"]
