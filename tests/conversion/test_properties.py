"""Round trips over generated objects of every version, compared whole (the stash aside).

No HTTP here: the converters are called directly, so that the CI profile's 10,000 examples per
test stay cheap."""
from __future__ import annotations

import copy
import json

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from policies.conversion import convert
from tests.conversion.common import HUB, VERSIONS, as_json, without_stash
from tests.conversion.strategies import JOBS, JOBS_WITH_WORKERS

# The staleness properties draw more than one object per example: a tenth of the round trips.
EDITS = settings(max_examples=max(100, settings().max_examples // 10))


def _metadata_except_labels_and_annotations(obj: dict) -> dict:
    return {k: v for k, v in obj["metadata"].items() if k not in ("labels", "annotations")}


@pytest.mark.parametrize("source", VERSIONS, ids=lambda v: v.split("/")[1])
@given(data=st.data())
def test_every_conversion_round_trips_to_the_identical_object(source, data):
    """One object per example, taken to every other version and back, and through a chain of
    every other version (v1alpha1 → v2beta1 → v1alpha2 → v1 → v2beta1 → v1alpha1): each time
    the identical object, stash aside; only labels and annotations of metadata ever differ."""
    obj = data.draw(JOBS[source])
    frozen = copy.deepcopy(obj)
    for target in VERSIONS:
        if target == source:
            continue
        there = convert(obj, target).obj
        assert (there["apiVersion"], there["kind"]) == (target, "MPIJob")
        assert _metadata_except_labels_and_annotations(there) == _metadata_except_labels_and_annotations(obj)
        assert there["metadata"].get("labels") == obj["metadata"].get("labels")
        json.dumps(there)  # plain JSON, stash included
        back = convert(there, source).obj
        assert as_json(without_stash(back)) == as_json(without_stash(obj)), f"via {target}"
    current = obj
    for version in (*[v for v in VERSIONS if v != source], source):
        current = convert(current, version).obj
    assert as_json(without_stash(current)) == as_json(without_stash(obj)), "through every version"
    assert obj == frozen, "conversion modified its input"


@EDITS
@given(obj=JOBS_WITH_WORKERS["kubeflow.org/v1alpha1"], replicas=st.integers(1, 50))
# Found by the long profile: replicas as derived from gpus (so no edit recorded for it) and gpus
# stashed; the edited worker count must still keep the stashed gpus out of the view.
@example(obj={"apiVersion": "kubeflow.org/v1alpha1", "kind": "MPIJob", "metadata": {"name": "pi"},
              "spec": {"gpus": "8", "gpusPerNode": "8", "replicas": 1}}, replicas=2)
def test_a_worker_count_edited_in_v2beta1_shows_in_the_v1alpha1_view(obj, replicas):
    """Stashed v1alpha1 sizing is not replayed over a later v2beta1 edit: the view is consistent."""
    hub = convert(obj, HUB).obj
    worker = hub["spec"]["mpiReplicaSpecs"].get("Worker")
    assume(worker is not None and worker.get("replicas") != replicas)  # else nothing is edited
    edited = copy.deepcopy(hub)
    edited["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = replicas
    view = convert(edited, "kubeflow.org/v1alpha1").obj
    assert view["spec"]["replicas"] == replicas
    assert view["spec"].get("gpus") is None and view["spec"].get("processingUnits") is None  # null is unset
    assert convert(view, HUB).obj["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == replicas


@pytest.mark.parametrize("spoke", ["kubeflow.org/v1alpha2", "kubeflow.org/v1"], ids=lambda v: v.split("/")[1])
@EDITS
@given(data=st.data(), replicas=st.integers(1, 50))
def test_a_worker_count_edited_in_the_spoke_reaches_v2beta1(spoke, data, replicas):
    hub = data.draw(JOBS_WITH_WORKERS[HUB])
    view = convert(hub, spoke).obj
    specs = view.get("spec", {}).get("mpiReplicaSpecs") if isinstance(view.get("spec"), dict) else None
    assume(isinstance(specs, dict) and isinstance(specs.get("Worker"), dict))  # a worker count to edit
    edited = copy.deepcopy(view)
    edited["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = replicas
    assert convert(edited, HUB).obj["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == replicas
