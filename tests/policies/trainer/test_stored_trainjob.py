"""A TrainJob manifest as the API server stores it (for ``check``): pruned and defaulted against
the v2.3.0 CRD in the v2.2+ shape, left as written in the v2.1 shape."""
from __future__ import annotations

import pytest

from policies.trainer.api import ApiShape
from policies.trainer.stored_trainjob import as_stored_trainjob, trainjob_crd_schema
from tests.policies.trainer.test_runtime_type_check import _extraction_tool
from tests.policies.trainer.trainer_data import DATA, trainjob


def test_the_carried_schema_is_the_upstream_crds_structure():
    tool = _extraction_tool()
    extracted = tool.extracted(DATA / "crds" / "trainer.kubeflow.org_trainjobs.yaml", "v1alpha1")
    assert tool.json.loads(tool.text(extracted)) == trainjob_crd_schema()


@pytest.mark.parametrize("shape", [ApiShape.V2_2, ApiShape.V2_3])
def test_the_v2_2_and_later_shape_is_pruned_and_defaulted(shape):
    job = trainjob(numNodes=4, numNode=5)
    job["spec"]["runtimeRef"] = {"name": "deepspeed-distributed"}
    stored, pruned = as_stored_trainjob(job, shape)
    assert [(p.path, p.suggestion) for p in pruned] == [("spec.trainer.numNode", "spec.trainer.numNodes")]
    assert stored["spec"] == {
        "runtimeRef": {"name": "deepspeed-distributed", "apiGroup": "trainer.kubeflow.org",
                       "kind": "ClusterTrainingRuntime"},
        "trainer": {"numNodes": 4}, "suspend": False, "managedBy": "trainer.kubeflow.org/trainjob-controller"}
    assert job["spec"]["trainer"]["numNode"] == 5  # the input is left alone


def test_the_v2_1_shape_is_left_as_written():
    job = trainjob(numNodes=4, numProcPerNode="2")
    job["spec"]["podTemplateOverrides"] = [{"targetJobs": [{"name": "node"}]}]
    stored, pruned = as_stored_trainjob(job, ApiShape.V2_1)
    assert (stored, pruned) == (job, [])
    assert stored is not job


def test_another_version_is_left_as_written():
    job = trainjob(numNode=5)
    job["apiVersion"] = "trainer.kubeflow.org/v1alpha2"
    assert as_stored_trainjob(job, ApiShape.V2_3) == (job, [])
