import copy

import pytest

from policies.mutations.istio_sidecar_off import IstioSidecarOff
from policies.registry import default_settings
from testing.builders import mpijob, run_mutation

MUTATION = IstioSidecarOff()
INJECT = "sidecar.istio.io/inject"
OFF = {"labels": {INJECT: "false"}, "annotations": {INJECT: "false"}}
KEEP_TRUE = default_settings().with_mutation("istio-sidecar-off", keep_explicit_true=True)


def template(job, replica_type):
    return job["spec"]["mpiReplicaSpecs"][replica_type]["template"]


def with_metadata(launcher=None, worker=None, **job_args):
    job = mpijob(**job_args)
    for replica_type, metadata in (("Launcher", launcher), ("Worker", worker)):
        if metadata is not None:
            template(job, replica_type)["metadata"] = metadata
    return job


def test_templates_without_metadata_get_label_and_annotation():
    job, outcome = run_mutation(MUTATION, mpijob())
    assert outcome.changed is True
    assert outcome.warnings == ()
    assert template(job, "Launcher")["metadata"] == OFF
    assert template(job, "Worker")["metadata"] == OFF
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"].pop("metadata")
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"].pop("metadata")
    assert job == mpijob()  # nothing else was touched


def test_existing_labels_and_annotations_are_kept():
    metadata = {"labels": {"app": "train", "example.com/a~b": "x"}, "annotations": {"note": "keep"}}
    job, outcome = run_mutation(MUTATION, with_metadata(launcher=metadata))
    assert outcome.changed is True
    assert template(job, "Launcher")["metadata"] == {
        "labels": {"app": "train", "example.com/a~b": "x", INJECT: "false"},
        "annotations": {"note": "keep", INJECT: "false"},
    }


@pytest.mark.parametrize("metadata", [{"labels": {}}, {"annotations": {"a": "b"}}, {"labels": None}],
                         ids=["empty-labels", "annotations-only", "null-labels"])
def test_missing_maps_are_created(metadata):
    job, _ = run_mutation(MUTATION, with_metadata(launcher=metadata, worker=copy.deepcopy(metadata)))
    for replica_type in ("Launcher", "Worker"):
        meta = template(job, replica_type)["metadata"]
        assert meta["labels"][INJECT] == "false"
        assert meta["annotations"][INJECT] == "false"


def test_already_off_is_unchanged():
    job = with_metadata(launcher=copy.deepcopy(OFF), worker=copy.deepcopy(OFF))
    edited, outcome = run_mutation(MUTATION, job)
    assert outcome.changed is False
    assert outcome.warnings == ()
    assert edited == job


def test_label_only_gets_the_annotation_too():
    job, outcome = run_mutation(MUTATION, with_metadata(launcher={"labels": {INJECT: "false"}}))
    assert outcome.changed is True
    assert template(job, "Launcher")["metadata"] == OFF


@pytest.mark.parametrize("field", ["labels", "annotations"])
@pytest.mark.parametrize("value", ["true", "TRUE", "yes", "y", "On"])
def test_explicit_true_is_overridden_with_a_warning(field, value):
    job, outcome = run_mutation(MUTATION, with_metadata(launcher={field: {INJECT: value}}))
    assert outcome.changed is True
    assert template(job, "Launcher")["metadata"] == OFF
    assert template(job, "Worker")["metadata"] == OFF
    (warning,) = outcome.warnings
    assert warning == (
        'sidecar.istio.io/inject "true" on the Launcher pod template was changed to "false": with a sidecar '
        "the launcher Job never completes (its sidecar keeps running) and SSH between ranks fails under strict mTLS"
    )
    assert len(f"[{MUTATION.id}] {warning}") <= 256


def test_both_templates_asking_are_named_in_one_warning():
    ask = {"labels": {INJECT: "true"}, "annotations": {INJECT: "true"}}
    job, outcome = run_mutation(MUTATION, with_metadata(launcher=copy.deepcopy(ask), worker=copy.deepcopy(ask)))
    assert template(job, "Launcher")["metadata"] == OFF
    assert template(job, "Worker")["metadata"] == OFF
    (warning,) = outcome.warnings
    assert warning.startswith('sidecar.istio.io/inject "true" on the Launcher and Worker pod templates was changed')
    assert len(f"[{MUTATION.id}] {warning}") <= 256


def test_label_false_with_annotation_true_counts_as_asking():
    """Istio prefers the label, but OpenShift Service Mesh 2 reads the annotation: both must say no."""
    job, outcome = run_mutation(MUTATION, with_metadata(
        worker={"labels": {INJECT: "false"}, "annotations": {INJECT: "true"}}))
    assert template(job, "Worker")["metadata"] == OFF
    assert "on the Worker pod template was changed" in outcome.warnings[0]


@pytest.mark.parametrize("value", ["no", "False", "", "maybe"])
def test_other_values_become_false_without_a_warning(value):
    job, outcome = run_mutation(MUTATION, with_metadata(launcher={"labels": {INJECT: value}}))
    assert outcome.changed is True
    assert outcome.warnings == ()
    assert template(job, "Launcher")["metadata"] == OFF


def test_keep_explicit_true_leaves_that_template_alone_and_warns():
    ask = {"annotations": {INJECT: "true"}}
    job, outcome = run_mutation(MUTATION, with_metadata(launcher=copy.deepcopy(ask)), settings=KEEP_TRUE)
    assert outcome.changed is True  # the Worker still gets switched off
    assert template(job, "Launcher")["metadata"] == ask  # no label "false" that would win over it
    assert template(job, "Worker")["metadata"] == OFF
    (warning,) = outcome.warnings
    assert warning == (
        'sidecar.istio.io/inject "true" kept on the Launcher pod template as the policy allows, but the launcher '
        'Job never completes (its sidecar keeps running) and SSH between ranks fails under strict mTLS; set "false" to fix'
    )
    assert len(f"[{MUTATION.id}] {warning}") <= 256


def test_keep_explicit_true_changes_nothing_when_every_template_asks():
    ask = {"labels": {INJECT: "true"}}
    job = with_metadata(launcher=copy.deepcopy(ask), worker=copy.deepcopy(ask))
    edited, outcome = run_mutation(MUTATION, job, settings=KEEP_TRUE)
    assert outcome.changed is False
    assert edited == job
    (warning,) = outcome.warnings
    assert warning.startswith('sidecar.istio.io/inject "true" kept on the Launcher and Worker pod templates')
    assert len(f"[{MUTATION.id}] {warning}") <= 256


def test_no_worker_with_run_launcher_as_worker():
    job = mpijob(runLauncherAsWorker=True)
    del job["spec"]["mpiReplicaSpecs"]["Worker"]
    edited, outcome = run_mutation(MUTATION, job)
    assert outcome.changed is True
    assert set(edited["spec"]["mpiReplicaSpecs"]) == {"Launcher"}
    assert template(edited, "Launcher")["metadata"] == OFF


def test_unknown_replica_types_and_missing_templates_are_not_touched():
    job = mpijob()
    job["spec"]["mpiReplicaSpecs"]["Master"] = {"replicas": 1, "template": {"spec": {"containers": []}}}
    job["spec"]["mpiReplicaSpecs"]["Worker"] = {"replicas": 2}
    edited, _ = run_mutation(MUTATION, job)
    assert edited["spec"]["mpiReplicaSpecs"]["Master"] == job["spec"]["mpiReplicaSpecs"]["Master"]
    assert edited["spec"]["mpiReplicaSpecs"]["Worker"] == {"replicas": 2}
    assert template(edited, "Launcher")["metadata"] == OFF


def test_second_pass_changes_nothing():
    once, _ = run_mutation(MUTATION, with_metadata(launcher={"labels": {INJECT: "true"}}))
    twice, outcome = run_mutation(MUTATION, once)
    assert outcome == type(outcome)(changed=False, warnings=())
    assert twice == once
