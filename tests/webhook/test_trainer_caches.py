"""The Kubeflow Trainer kinds in the watch caches: runtimes looked up by kind, namespace and
name, TrainJobs by namespace; the Trainer CRDs not installed count as listed (nothing there)."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testing.kube_api_server import CORE, MPIJOBS, TRAINER, KubeAPI
from testing.kube_objects import namespace
from tests.policies.trainer.trainer_data import runtime, trainjob
from tests.webhook.test_watch_caches import FAST, start_caches
from tests.webhook.test_watch_caches import eventually as _eventually
from webhook.watch_caches import ClusterCaches


def eventually(condition, timeout: float = 10.0) -> float:
    """Waits for a watch to deliver: generous, as the machine may be loaded; never a measure."""
    return _eventually(condition, timeout)


@pytest.fixture
def api() -> Iterator[KubeAPI]:
    with KubeAPI((*CORE, MPIJOBS, *TRAINER)) as server:
        server.apply(namespace("team-a"))
        yield server


@pytest.fixture
def caches(api: KubeAPI, tmp_path: Path) -> Iterator[ClusterCaches]:
    started = start_caches(api, tmp_path)
    try:
        assert started.wait_synced(15), started.readiness()
        yield started
    finally:
        started.stop()


def namespaced(obj: dict, ns: str) -> dict:
    return {**obj, "kind": "TrainingRuntime", "metadata": {**obj["metadata"], "namespace": ns}}


def test_runtimes_are_found_by_kind_namespace_and_name(api: KubeAPI, caches: ClusterCaches):
    cluster_wide = runtime("runtimes/v2.3.0/deepspeed_distributed.yaml")
    own = namespaced(runtime("runtimes/opendatahub/openmpi_cuda.yaml"), "team-a")
    api.apply(cluster_wide, own)
    eventually(lambda: caches.training_runtime("TrainingRuntime", "team-a", "openmpi-cuda") is not None)
    eventually(lambda: caches.training_runtime("ClusterTrainingRuntime", "", "deepspeed-distributed") is not None)
    found = caches.training_runtime("ClusterTrainingRuntime", "team-a", "deepspeed-distributed")
    assert found["spec"]["mlPolicy"]["mpi"]["runLauncherAsNode"] is True
    assert "managedFields" not in found["metadata"]
    # a TrainingRuntime is looked up in the TrainJob's namespace only, and kinds do not mix
    assert caches.training_runtime("TrainingRuntime", "team-b", "openmpi-cuda") is None
    assert caches.training_runtime("ClusterTrainingRuntime", "", "openmpi-cuda") is None
    assert caches.training_runtime("TrainingRuntime", "team-a", "deepspeed-distributed") is None


def test_runtime_changes_and_deletes_are_seen(api: KubeAPI, caches: ClusterCaches):
    rt = runtime("runtimes/v2.3.0/mlx_distributed.yaml")
    api.apply(rt)
    eventually(lambda: caches.training_runtime("ClusterTrainingRuntime", "", "mlx-distributed"))
    rt["spec"]["mlPolicy"]["mpi"]["numProcPerNode"] = 4
    api.apply(rt)
    eventually(lambda: caches.training_runtime("ClusterTrainingRuntime", "", "mlx-distributed")
               ["spec"]["mlPolicy"]["mpi"]["numProcPerNode"] == 4)
    api.delete(rt)
    eventually(lambda: caches.training_runtime("ClusterTrainingRuntime", "", "mlx-distributed") is None)


def test_trainjobs_are_cached_by_namespace(api: KubeAPI, caches: ClusterCaches):
    api.apply(trainjob(name="one"), trainjob(name="two", namespace="team-b"))
    eventually(lambda: len(caches.trainjobs("team-a")) == 1 and len(caches.trainjobs("team-b")) == 1)
    assert [j["metadata"]["name"] for j in caches.trainjobs("team-a")] == ["one"]


def test_without_the_trainer_crds_the_state_is_available_and_holds_no_runtime(tmp_path: Path):
    with KubeAPI((*CORE, MPIJOBS)) as server:
        server.apply(namespace("team-a"))
        caches = start_caches(server, tmp_path)
        try:
            assert caches.wait_synced(15), caches.readiness()
            assert caches.available
            assert caches.training_runtime("ClusterTrainingRuntime", "", "deepspeed-distributed") is None
            assert caches.trainjobs("team-a") == ()
            ready, detail = caches.readiness()
            assert ready and "0 clustertrainingruntimes (not installed)" in detail
        finally:
            caches.stop()


def test_trainer_installed_later_is_picked_up(tmp_path: Path):
    with KubeAPI((*CORE, MPIJOBS)) as server:
        caches = start_caches(server, tmp_path, FAST)
        try:
            assert caches.wait_synced(15)
            for resource in TRAINER:
                server.install(resource)
            server.apply(runtime("runtimes/v2.3.0/deepspeed_distributed.yaml"))
            eventually(lambda: caches.training_runtime("ClusterTrainingRuntime", "", "deepspeed-distributed"))
        finally:
            caches.stop()


def test_validate_reads_the_runtime_from_the_caches(api: KubeAPI, caches: ClusterCaches):
    from tests.policies.trainer.trainer_data import trainjob_review
    from testing.app_client import webhook

    served = webhook(cluster=caches)
    job = trainjob(numNodes=300)
    before = served.review("/validate", trainjob_review(job))["response"]
    assert before["allowed"] is True and before["warnings"][0].startswith("[cluster-state] spec.runtimeRef.name")
    api.apply(runtime("runtimes/v2.3.0/deepspeed_distributed.yaml"))
    eventually(lambda: caches.training_runtime("ClusterTrainingRuntime", "", "deepspeed-distributed"))
    after = served.review("/validate", trainjob_review(job))["response"]
    assert after["allowed"] is False
    assert after["status"]["details"]["causes"][0]["field"] == "spec.trainer.numNodes"


def test_serve_with_kubeconfig_checks_and_mutates_trainjobs_of_both_shapes(api: KubeAPI, tmp_path: Path):
    """gunicorn over TLS reading the runtimes and the quota through --kubeconfig: a v2.3 and a
    v2.1 TrainJob are mutated, the patch applied, the result admitted; one over the quota is
    refused with 403, one with too many nodes with 422, in the TrainJob's own fields."""
    import jsonpatch

    from testing.builders import patch_of
    from testing.kube_objects import resource_quota
    from testing.tls_server import serving
    from tests.policies.trainer.trainer_data import trainjob_review

    gpu = "nvidia.com/gpu"
    v2_1 = runtime("runtimes/v2.1.0-v2.2.1/deepspeed_distributed.yaml")
    v2_1["metadata"]["name"] = "deepspeed-v21"
    api.apply(runtime("runtimes/v2.3.0/deepspeed_distributed.yaml"), v2_1,
              resource_quota("gpus", {f"requests.{gpu}": 8}, namespace="team-a"))
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    with serving(tmp_path / "server", "--dev", "--kubeconfig", str(kubeconfig), "--workers", "1",
                 "--threads", "4", "--no-audit-log") as server:
        eventually(lambda: server.request("GET", "/readyz")[0] == 200, timeout=15)
        overrides = [{"targetJobs": [{"name": "node"}], "spec": {"nodeSelector": {"pool": "a"}}}]  # proves v2.1
        v2_1_job = trainjob("deepspeed-v21", numNodes=3, resourcesPerNode={"limits": {gpu: 2}})
        v2_1_job["spec"]["podTemplateOverrides"] = overrides
        for job, field in ((trainjob(numNodes=3, resourcesPerNode={"limits": {gpu: 2}}), "runtimePatches"),
                           (v2_1_job, "podTemplateOverrides")):
            eventually(lambda: "warnings" not in server.review("/validate", trainjob_review(job)))  # runtime cached
            patched = jsonpatch.apply_patch(job, patch_of(server.review("/mutate", trainjob_review(job))))
            assert len(patched["spec"][field]) == len(job["spec"].get(field, [])) + 1
            checked = server.review("/validate", trainjob_review(patched))
            assert checked["allowed"] is True and "warnings" not in checked
        over_quota = server.review("/validate", trainjob_review(trainjob(numNodes=5, resourcesPerNode={"limits": {gpu: 2}})))
        assert over_quota["status"]["code"] == 403
        assert over_quota["status"]["details"]["causes"][0]["field"] == "spec.trainer.numNodes"
        too_many = server.review("/validate", trainjob_review(trainjob(numNodes=120)))
        assert too_many["status"]["code"] == 422
        assert too_many["status"]["details"]["causes"][0]["message"].startswith(
            "[worker-count] Invalid value: 120: at most 100 nodes besides the launcher's are allowed")
