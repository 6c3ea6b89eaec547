"""What Kueue writes to an MPIJob when it starts or stops it (kubernetes-sigs/kueue: the MPIJob
integration's RunWithPodSetsInfo / RestorePodSetsInfo over pkg/podset's Merge and
RestorePodSpec), told apart from every other change of the spec."""
from __future__ import annotations

import copy

import pytest

from policies.mpijob.kueue_changes import only_kueue_changes
from testing.builders import mpijob

FLAVOR = {"cloud.example.com/accelerator": "a100"}
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def suspended(job: dict) -> dict:
    job = copy.deepcopy(job)
    job["spec"].setdefault("runPolicy", {})["suspend"] = True
    return job


def admitted(job: dict, *, gates: bool = False) -> dict:
    """What RunWithPodSetsInfo makes of ``job``: suspend false, each template with the flavor's
    node labels and tolerations, the pod-set label (and, with topology-aware scheduling, a
    scheduling gate and the workload annotation)."""
    job = copy.deepcopy(job)
    job["spec"]["runPolicy"]["suspend"] = False
    for name, replica in job["spec"]["mpiReplicaSpecs"].items():
        template = replica["template"]
        metadata = template.setdefault("metadata", {})
        metadata.setdefault("labels", {})["kueue.x-k8s.io/podset"] = name.lower()
        template["spec"]["nodeSelector"] = {**template["spec"].get("nodeSelector", {}), **FLAVOR}
        template["spec"]["tolerations"] = [*template["spec"].get("tolerations", []), TOLERATION]
        if gates:
            metadata.setdefault("annotations", {})["kueue.x-k8s.io/workload"] = "mpijob-pi-3f2a1"
            template["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/topology"}]
    return job


QUEUED = suspended(mpijob(workers=2))


@pytest.mark.parametrize("gates", [False, True], ids=["flavor", "flavor-and-topology"])
def test_admitting_and_stopping_change_only_what_kueue_writes(gates: bool):
    running = admitted(QUEUED, gates=gates)
    assert only_kueue_changes(QUEUED, running)  # started
    assert only_kueue_changes(running, QUEUED)  # stopped: suspended, the templates restored


def test_a_go_client_s_empty_template_metadata_counts_as_none():
    running = admitted(QUEUED)
    for replica in running["spec"]["mpiReplicaSpecs"].values():
        replica["template"]["metadata"] = {"creationTimestamp": None}
    assert only_kueue_changes(QUEUED, running)


@pytest.mark.parametrize("edit", [
    lambda spec: spec["mpiReplicaSpecs"]["Worker"].__setitem__("replicas", 3),
    lambda spec: spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].__setitem__("image", "x:2"),
    lambda spec: spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"].__setitem__("affinity", {"nodeAffinity": {}}),
    lambda spec: spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"].__setitem__("priorityClassName", "high"),
    lambda spec: spec["mpiReplicaSpecs"]["Worker"]["template"].setdefault("metadata", {}).__setitem__("name", "w"),
    lambda spec: spec["runPolicy"].__setitem__("backoffLimit", 9),
    lambda spec: spec.__setitem__("slotsPerWorker", 2),
], ids=["replicas", "image", "affinity", "priority-class", "template-name", "backoff-limit", "slots"])
def test_anything_else_changed_with_it_is_not_only_kueue_s(edit):
    running = admitted(QUEUED)
    edit(running["spec"])
    assert not only_kueue_changes(QUEUED, running)


def test_the_same_fields_of_a_replica_type_kueue_has_no_pod_set_for_are_not_kueue_s():
    old = copy.deepcopy(QUEUED)
    old["spec"]["mpiReplicaSpecs"]["Extra"] = {"template": {"spec": {"containers": [{"name": "x"}]}}}
    new = admitted(old)
    assert not only_kueue_changes(old, new)


@pytest.mark.parametrize(("old", "new"), [(None, QUEUED), (QUEUED, []), ({"spec": "x"}, QUEUED),
                                          (QUEUED, {"spec": None})])
def test_what_is_not_shaped_like_an_mpijob_is_not_only_kueue_s(old, new):
    assert not only_kueue_changes(old, new)
