"""Hypothesis strategies for MPIJobs of every served version: random optional fields, random pod
templates, unknown annotations, and now and then a value of the wrong type (conversion must
still round-trip it). Kept small per example: the CI profile draws 10,000 of each."""
from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from policies.conversion import PROBLEMS_ANNOTATION
from policies.conversion.v1alpha1 import launcher_on_master_affinity, launcher_on_master_tolerations

NAMES = st.sampled_from(["mpi", "launcher", "worker", "sidecar", "main"])
IMAGES = st.sampled_from(["mpioperator/mpi-pi:openmpi", "horovod/horovod:0.28.1", "busybox"])
WORDS = st.sampled_from(["a", "b-c", "x/y", "mpi.run", "--flag", "2"])  # cheaper to draw than st.text
SMALL = st.integers(min_value=-2, max_value=40)
ODD = st.one_of(st.just("8"), st.just(None), st.just(True), st.just(2.5), st.just([]))


def sometimes_odd(strategy: st.SearchStrategy) -> st.SearchStrategy:
    """Mostly ``strategy``; rarely a value of the wrong type."""
    return st.one_of(strategy, strategy, strategy, strategy, strategy, strategy, strategy, ODD)


QUANTITY = st.one_of(st.integers(0, 16), st.sampled_from(["1", "500m", "2Gi", "4", "1.5", "8"]))
RESOURCE_LIST = st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), QUANTITY, max_size=3)
RESOURCES = st.fixed_dictionaries({}, optional={
    "limits": RESOURCE_LIST,
    "requests": RESOURCE_LIST,
    "claims": st.lists(st.fixed_dictionaries({"name": NAMES}), max_size=1),
})
CONTAINER = st.fixed_dictionaries({"name": NAMES, "image": IMAGES}, optional={
    "command": st.lists(WORDS, max_size=2),
    "args": st.lists(WORDS, max_size=2),
    "resources": RESOURCES,
    "ports": st.lists(st.fixed_dictionaries({"containerPort": st.sampled_from([22, 2222, 8080])},
                                            optional={"protocol": st.just("TCP")}), max_size=1),
})
TOLERATION = st.fixed_dictionaries({"key": WORDS}, optional={
    "operator": st.sampled_from(["Exists", "Equal"]), "effect": st.sampled_from(["NoSchedule", "NoExecute"])})
AFFINITY = st.fixed_dictionaries({"nodeAffinity": st.fixed_dictionaries({
    "requiredDuringSchedulingIgnoredDuringExecution": st.fixed_dictionaries({
        "nodeSelectorTerms": st.lists(st.fixed_dictionaries({"matchExpressions": st.lists(
            st.fixed_dictionaries({"key": WORDS, "operator": st.just("Exists")}), min_size=1, max_size=1)}),
            min_size=1, max_size=2)})})})
POD_SPEC = st.fixed_dictionaries({"containers": st.lists(CONTAINER, max_size=2)}, optional={
    "restartPolicy": st.sampled_from(["Never", "OnFailure", "Always"]),
    "tolerations": st.one_of(st.lists(TOLERATION, max_size=2), st.builds(launcher_on_master_tolerations)),
    "affinity": st.one_of(AFFINITY, st.builds(launcher_on_master_affinity)),
    "nodeSelector": st.dictionaries(WORDS, WORDS, min_size=1, max_size=1),
})
LABELS = st.dictionaries(WORDS, WORDS, min_size=1, max_size=2)
TEMPLATE = sometimes_odd(st.fixed_dictionaries({}, optional={
    "metadata": st.fixed_dictionaries({}, optional={"labels": LABELS, "annotations": LABELS}),
    "spec": POD_SPEC,
}))
# Unknown annotations, a damaged problem record, now and then a real-looking one.
ANNOTATIONS = st.dictionaries(
    st.one_of(WORDS, st.just(PROBLEMS_ANNOTATION)),
    st.one_of(WORDS, st.just('{"source":"x","problems":[],"about":[],"fingerprint":"-"}')),
    min_size=1, max_size=3)
METADATA = st.fixed_dictionaries({"name": st.sampled_from(["pi", "bench", "a-very-long-job-name"])}, optional={
    "namespace": st.sampled_from(["team-a", "default"]),
    "uid": st.sampled_from(["104e9c4c-e55e-4d59-a8ff-f5eddd2c40bf", "825c7df3-c2a8-414c-86b8-051976c67ee4"]),
    "generation": st.integers(1, 5),
    "labels": LABELS,
    "annotations": ANNOTATIONS,
    "creationTimestamp": st.just("2026-11-21T13:58:42Z"),
})
TIME = st.sampled_from(["2026-11-21T14:00:00Z", "2026-11-21T15:00:00Z"])
CONDITION = st.fixed_dictionaries({
    "type": st.sampled_from(["Created", "Running", "Restarting", "Succeeded", "Failed", "Suspended"]),
    "status": st.sampled_from(["True", "False", "Unknown"])}, optional={
    "reason": WORDS, "message": WORDS, "lastTransitionTime": TIME, "lastUpdateTime": TIME})
REPLICA_STATUS = st.fixed_dictionaries({}, optional={
    "active": st.integers(0, 4), "succeeded": st.integers(0, 2), "failed": st.integers(0, 2),
    "selector": WORDS, "labelSelector": st.fixed_dictionaries({"matchLabels": LABELS})})
JOB_STATUS = st.fixed_dictionaries({}, optional={
    "conditions": st.lists(CONDITION, max_size=3),
    "replicaStatuses": st.dictionaries(st.sampled_from(["Launcher", "Worker"]), REPLICA_STATUS, max_size=2),
    "startTime": TIME, "completionTime": TIME, "lastReconcileTime": TIME,
})
REPLICA_SPEC = sometimes_odd(st.fixed_dictionaries({}, optional={
    "replicas": sometimes_odd(SMALL),
    "restartPolicy": st.sampled_from(["Never", "OnFailure", "Always", "ExitCode"]),
    "template": TEMPLATE,
}))
REPLICA_SPECS = st.fixed_dictionaries({}, optional={
    "Launcher": REPLICA_SPEC, "Worker": REPLICA_SPEC, "Master": REPLICA_SPEC})
RUN_POLICY = sometimes_odd(st.fixed_dictionaries({}, optional={
    "cleanPodPolicy": st.sampled_from(["All", "Running", "None", "running"]),
    "ttlSecondsAfterFinished": SMALL, "activeDeadlineSeconds": SMALL, "backoffLimit": SMALL,
    "suspend": st.booleans(), "managedBy": st.sampled_from(["kubeflow.org/mpi-operator", "other"]),
    "schedulingPolicy": st.fixed_dictionaries({}, optional={"minAvailable": SMALL, "queue": WORDS}),
}))
UNKNOWN_FIELD = st.dictionaries(st.sampled_from(["gpu", "elasticPolicy", "extra"]), WORDS, max_size=1)


def job(api_version: str, spec: st.SearchStrategy, status: st.SearchStrategy) -> st.SearchStrategy:
    return st.fixed_dictionaries(
        {"apiVersion": st.just(api_version), "kind": st.just("MPIJob"), "metadata": METADATA},
        optional={"spec": spec, "status": status})


def _merged(fields: st.SearchStrategy, unknown: st.SearchStrategy = UNKNOWN_FIELD) -> st.SearchStrategy:
    return st.tuples(fields, unknown).map(lambda pair: {**pair[1], **pair[0]})


HUB_SPEC = _merged(st.fixed_dictionaries({}, optional={
    "slotsPerWorker": sometimes_odd(SMALL),
    "runLauncherAsWorker": st.booleans(),
    "sshAuthMountPath": st.sampled_from(["/root/.ssh", "/home/mpiuser/.ssh"]),
    "launcherCreationPolicy": st.sampled_from(["AtStartup", "WaitForWorkersReady"]),
    "mpiImplementation": st.sampled_from(["OpenMPI", "Intel", "MPICH", "Other"]),
    "runPolicy": RUN_POLICY,
    "mpiReplicaSpecs": sometimes_odd(REPLICA_SPECS),
}))
V1ALPHA1_SPEC = _merged(st.fixed_dictionaries({}, optional={
    "gpus": sometimes_odd(SMALL),
    "gpusPerNode": sometimes_odd(st.integers(0, 16)),
    "processingUnits": sometimes_odd(SMALL),
    "processingUnitsPerNode": sometimes_odd(st.integers(0, 16)),
    "processingResourceType": st.sampled_from(["nvidia.com/gpu", "cpu", "amd.com/gpu"]),
    "slotsPerWorker": sometimes_odd(SMALL),
    "launcherOnMaster": sometimes_odd(st.booleans()),
    "backoffLimit": SMALL,
    "activeDeadlineSeconds": SMALL,
    "replicas": sometimes_odd(SMALL),
    "template": TEMPLATE,
}))
V1ALPHA1_STATUS = sometimes_odd(st.fixed_dictionaries({}, optional={
    "launcherStatus": st.sampled_from(["Active", "Succeeded", "Failed", "Unknown"]),
    "workerReplicas": st.integers(0, 4),
    "startTime": TIME, "completionTime": TIME,
}))


def replicated_spec(distribution: bool) -> st.SearchStrategy:
    fields: dict[str, Any] = {
        "slotsPerWorker": sometimes_odd(SMALL),
        "cleanPodPolicy": st.sampled_from(["All", "Running", "None"]),
        "backoffLimit": SMALL,
        "activeDeadlineSeconds": SMALL,
        "mainContainer": sometimes_odd(NAMES),
        "runPolicy": RUN_POLICY,
        "mpiReplicaSpecs": sometimes_odd(REPLICA_SPECS),
    }
    if distribution:
        fields["mpiDistribution"] = st.sampled_from(["OpenMPI", "IntelMPI", "MPICH", "intel_mpi", "LAM"])
    return _merged(st.fixed_dictionaries({}, optional=fields))


JOBS = {
    "kubeflow.org/v2beta1": job("kubeflow.org/v2beta1", sometimes_odd(HUB_SPEC), JOB_STATUS),
    "kubeflow.org/v1alpha1": job("kubeflow.org/v1alpha1", sometimes_odd(V1ALPHA1_SPEC), V1ALPHA1_STATUS),
    "kubeflow.org/v1alpha2": job("kubeflow.org/v1alpha2", sometimes_odd(replicated_spec(True)), JOB_STATUS),
    "kubeflow.org/v1": job("kubeflow.org/v1", sometimes_odd(replicated_spec(False)), JOB_STATUS),
}


def _with_worker(pair: tuple[dict[str, Any], dict[str, Any]]) -> dict[str, Any]:
    obj, worker = pair
    spec = obj["spec"] = obj["spec"] if isinstance(obj.get("spec"), dict) else {}
    specs = spec["mpiReplicaSpecs"] = spec["mpiReplicaSpecs"] if isinstance(spec.get("mpiReplicaSpecs"), dict) else {}
    specs["Worker"] = worker
    return obj


def _with_sizing(pair: tuple[dict[str, Any], dict[str, Any]]) -> dict[str, Any]:
    obj, sizing = pair
    obj["spec"] = {**(obj["spec"] if isinstance(obj.get("spec"), dict) else {}), **sizing}
    return obj


# Jobs with a worker count to edit: the staleness properties are about that count. The rest of
# the object is as random as ever.
WORKER = st.fixed_dictionaries({"replicas": st.integers(0, 40)}, optional={
    "restartPolicy": st.sampled_from(["Never", "OnFailure"]), "template": TEMPLATE})
V1ALPHA1_SIZING = st.one_of(
    st.fixed_dictionaries({"replicas": st.integers(1, 40)}),
    st.fixed_dictionaries({"gpus": st.integers(1, 64)}, optional={"gpusPerNode": st.integers(1, 16)}),
    st.fixed_dictionaries({"processingUnits": st.integers(1, 64)}, optional={
        "processingUnitsPerNode": st.integers(1, 16), "processingResourceType": st.sampled_from(["nvidia.com/gpu", "cpu"])}),
    # replicas written beside the gpus they derive from, often equal to the derived count
    st.fixed_dictionaries({"gpus": st.sampled_from([1, 2, 4, 8, 16]), "gpusPerNode": st.sampled_from([1, 2, 4, 8]),
                           "replicas": st.integers(1, 4)}),
)
JOBS_WITH_WORKERS = {
    "kubeflow.org/v2beta1": st.tuples(JOBS["kubeflow.org/v2beta1"], WORKER).map(_with_worker),
    "kubeflow.org/v1alpha1": st.tuples(JOBS["kubeflow.org/v1alpha1"], V1ALPHA1_SIZING).map(_with_sizing),
}
