"""The remembered effective jobs seen from the webhook: a runtime edited in the cluster changes
the next answer about a TrainJob on it, and what one request's mutations write never reaches the
next request about the same TrainJob."""
from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator
from pathlib import Path

import jsonpatch
import pytest

from policies.cluster_view import StaticClusterView
from policies.trainer.api import ApiShape
from policies.trainer.effective_job import effective_job
from policies.trainer.effective_job_memo import memoised_effective_job
from testing.app_client import webhook
from testing.kube_api_server import CORE, MPIJOBS, TRAINER, KubeAPI
from testing.kube_objects import namespace
from tests.policies.trainer.trainer_data import runtime, trainjob, trainjob_review
from tests.webhook.test_trainer_caches import eventually
from tests.webhook.test_watch_caches import start_caches
from webhook.watch_caches import ClusterCaches

DEEPSPEED = "runtimes/v2.3.0/deepspeed_distributed.yaml"


@pytest.fixture
def caches(tmp_path: Path) -> Iterator[tuple[KubeAPI, ClusterCaches]]:
    with KubeAPI((*CORE, MPIJOBS, *TRAINER)) as api:
        api.apply(namespace("team-a"))
        started = start_caches(api, tmp_path)
        try:
            assert started.wait_synced(15), started.readiness()
            yield api, started
        finally:
            started.stop()


def test_a_runtime_edited_in_the_cluster_changes_the_next_answer(caches: tuple[KubeAPI, ClusterCaches]) -> None:
    api, cluster = caches
    rt = runtime(DEEPSPEED)
    api.apply(rt)
    eventually(lambda: cluster.training_runtime("ClusterTrainingRuntime", "", "deepspeed-distributed") is not None)
    served = webhook(cluster=cluster)
    job = trainjob(numNodes=4, resourcesPerNode={"limits": {"nvidia.com/gpu": 2}})
    for _ in range(2):  # the second answer comes from the remembered effective job
        assert served.review("/validate", trainjob_review(job))["response"]["allowed"] is True
    rt["spec"]["mlPolicy"]["mpi"]["mpiImplementation"] = "Intel"
    api.apply(rt)
    eventually(lambda: cluster.training_runtime("ClusterTrainingRuntime", "", "deepspeed-distributed")
               ["spec"]["mlPolicy"]["mpi"]["mpiImplementation"] == "Intel")
    response = served.review("/validate", trainjob_review(job))["response"]
    assert response["allowed"] is False
    assert "Intel is not supported by the Trainer controller" in response["status"]["message"]


def test_one_requests_mutations_never_reach_the_next_request() -> None:
    rt = runtime(DEEPSPEED)
    served = webhook(cluster=StaticClusterView(cluster_runtimes={"deepspeed-distributed": rt}))
    job = trainjob(numNodes=4, resourcesPerNode={"limits": {"nvidia.com/gpu": 2}})
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team-queue"}
    patches = []
    for _ in range(3):
        response = served.review("/mutate", trainjob_review(copy.deepcopy(job)))["response"]
        patches.append(response.get("patch"))
        mutated = jsonpatch.apply_patch(job, json.loads(base64.b64decode(response["patch"])))
        assert served.review("/validate", trainjob_review(mutated))["response"]["allowed"] is True
    assert patches[0] is not None and patches == [patches[0]] * 3
    # what every request read is still what a fresh computation gives
    assert memoised_effective_job(job, rt, ApiShape.V2_3) == effective_job(job, rt, ApiShape.V2_3)


def test_requests_of_one_spec_share_the_remembered_job_by_the_text_of_their_inputs() -> None:
    # Each request is decoded afresh (other uid, name, strings the decoder shared or not): the key
    # of what its body decoded to is orjson's text of the inputs, which depends on their values only.
    from policies.trainer.effective_job_memo import decoded_inputs_key, inputs_key
    from policies.trainer.type_check import well_typed_inputs

    rt = runtime(DEEPSPEED)
    served = webhook(cluster=StaticClusterView(cluster_runtimes={"deepspeed-distributed": rt}))
    memoised_effective_job.clear()
    well_typed_inputs.clear()
    for name in ("first", "second", "third"):
        job = trainjob(name=name, numNodes=4, resourcesPerNode={"limits": {"nvidia.com/gpu": 2}})
        assert served.review("/validate", trainjob_review(job))["response"]["allowed"] is True
        request = served.last.request
        assert request.decoded_json is True and request.object["metadata"]["name"] == name
    key = decoded_inputs_key(job)
    assert isinstance(key, bytes) and key.startswith(b'{"runtimeRef":') and key != inputs_key(job)
    assert len(memoised_effective_job) == 1 and key in well_typed_inputs and len(well_typed_inputs) == 1


def test_objects_given_as_python_or_yaml_are_keyed_by_marshal() -> None:
    # Only what read_json decoded is known to hold no tuple, date or subclass, which orjson's
    # text would not tell apart from a list, a string or their base type (``check`` hands the
    # admission what YAML gave).
    from policies.trainer.effective_job_memo import inputs_key
    from policies.trainer.type_check import well_typed_inputs
    from webhook.review import parse_admission_review

    served = webhook(cluster=StaticClusterView(cluster_runtimes={"deepspeed-distributed": runtime(DEEPSPEED)}))
    well_typed_inputs.clear()
    job = trainjob(numNodes=4)
    request = parse_admission_review(trainjob_review(job))
    assert request.decoded_json is False
    assert served.admission.validate(request)["response"]["allowed"] is True
    assert inputs_key(job) in well_typed_inputs and len(well_typed_inputs) == 1
    assert parse_admission_review(trainjob_review(job), decoded_json=True).decoded_json is True
