import pytest

from policies.mutations.restricted_service_account import (
    RestrictedServiceAccount,
    RestrictedServiceAccountParams,
)
from policies.registry import default_settings
from testing.builders import mpijob, run_mutation

MUTATION = RestrictedServiceAccount()
RESTRICTED = default_settings().with_mutation("restricted-service-account", service_account="mpi-restricted")


def pod(job, replica_type):
    return job["spec"]["mpiReplicaSpecs"][replica_type]["template"]["spec"]


def with_pod_fields(launcher=None, worker=None):
    job = mpijob()
    pod(job, "Launcher").update(launcher or {})
    pod(job, "Worker").update(worker or {})
    return job


def test_token_is_turned_off_and_nothing_else_changes_by_default():
    job = mpijob()
    edited, outcome = run_mutation(MUTATION, job)
    assert outcome.changed is True
    assert outcome.warnings == ()
    for replica_type in ("Launcher", "Worker"):
        assert pod(edited, replica_type).pop("automountServiceAccountToken") is False
    assert edited == job


def test_explicit_false_is_unchanged():
    job = with_pod_fields({"automountServiceAccountToken": False}, {"automountServiceAccountToken": False})
    edited, outcome = run_mutation(MUTATION, job)
    assert outcome.changed is False
    assert edited == job


def test_explicit_true_is_kept_with_a_warning():
    job = with_pod_fields(worker={"automountServiceAccountToken": True})
    edited, outcome = run_mutation(MUTATION, job)
    assert pod(edited, "Worker")["automountServiceAccountToken"] is True
    assert pod(edited, "Launcher")["automountServiceAccountToken"] is False
    (warning,) = outcome.warnings
    assert warning == (
        "the Worker pod template set automountServiceAccountToken: true, so its pods get a Kubernetes API "
        "token; MPI pods talk over SSH and need none: remove it unless the training code calls the API"
    )
    assert len(f"[{MUTATION.id}] {warning}") <= 256


def test_both_templates_mounting_share_one_warning():
    token = {"automountServiceAccountToken": True}
    edited, outcome = run_mutation(MUTATION, with_pod_fields(dict(token), dict(token)))
    assert outcome.changed is False
    (warning,) = outcome.warnings
    assert warning.startswith("the Launcher and Worker pod templates set automountServiceAccountToken: true, "
                              "so their pods")
    assert len(f"[{MUTATION.id}] {warning}") <= 256


def test_configured_service_account_fills_templates_that_name_none():
    job, outcome = run_mutation(MUTATION, mpijob(), settings=RESTRICTED)
    assert outcome.changed is True
    for replica_type in ("Launcher", "Worker"):
        assert pod(job, replica_type)["serviceAccountName"] == "mpi-restricted"
        assert pod(job, replica_type)["automountServiceAccountToken"] is False


@pytest.mark.parametrize("named", [{"serviceAccountName": "trainer"}, {"serviceAccount": "legacy"},
                                   {"serviceAccountName": "", "serviceAccount": "legacy"}],
                         ids=["name", "deprecated-field", "empty-name-with-deprecated"])
def test_an_explicit_service_account_is_never_replaced(named):
    job = with_pod_fields(launcher=dict(named))
    edited, _ = run_mutation(MUTATION, job, settings=RESTRICTED)
    launcher = pod(edited, "Launcher")
    assert {k: launcher[k] for k in named} == named
    assert "serviceAccountName" not in named or launcher["serviceAccountName"] == named["serviceAccountName"]
    assert pod(edited, "Worker")["serviceAccountName"] == "mpi-restricted"


def test_an_empty_name_names_none():
    edited, outcome = run_mutation(MUTATION, with_pod_fields(launcher={"serviceAccountName": ""}), settings=RESTRICTED)
    assert outcome.changed is True
    assert pod(edited, "Launcher")["serviceAccountName"] == "mpi-restricted"


def test_templates_without_a_pod_spec_and_unknown_types_are_left_alone():
    job = mpijob()
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"] = {"metadata": {"labels": {"a": "b"}}}
    job["spec"]["mpiReplicaSpecs"]["Master"] = {"template": {"spec": {"containers": []}}}
    edited, _ = run_mutation(MUTATION, job, settings=RESTRICTED)
    assert edited["spec"]["mpiReplicaSpecs"]["Worker"] == job["spec"]["mpiReplicaSpecs"]["Worker"]
    assert edited["spec"]["mpiReplicaSpecs"]["Master"] == job["spec"]["mpiReplicaSpecs"]["Master"]
    assert pod(edited, "Launcher")["serviceAccountName"] == "mpi-restricted"


def test_no_worker_with_run_launcher_as_worker():
    job = mpijob(runLauncherAsWorker=True)
    del job["spec"]["mpiReplicaSpecs"]["Worker"]
    edited, outcome = run_mutation(MUTATION, job)
    assert outcome.changed is True
    assert set(edited["spec"]["mpiReplicaSpecs"]) == {"Launcher"}


@pytest.mark.parametrize("name", ["Trainer", "-x", "a_b", "", 7])
def test_bad_service_account_setting_is_refused_when_loaded(name):
    with pytest.raises(ValueError) as raised:
        RestrictedServiceAccountParams(service_account=name)
    assert str(raised.value) == (f"ServiceAccount name {name!r} is not valid: use lowercase letters, digits, "
                                 "'-' and '.', starting and ending with a letter or digit")


def test_second_pass_changes_nothing():
    once, _ = run_mutation(MUTATION, mpijob(), settings=RESTRICTED)
    twice, outcome = run_mutation(MUTATION, once, settings=RESTRICTED)
    assert outcome.changed is False
    assert twice == once
