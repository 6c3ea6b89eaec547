"""Request bodies as a Kubernetes API server sends them: AdmissionReviews and ConversionReviews
built on envelopes recorded from a real API server (``tests/data/captured``), around every
upstream example MPIJob, a large job, and the objects a watch cache converts.

Each payload is encoded once, up front: the load generator only sends bytes.
"""
from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from policies.conversion import SERVED_VERSIONS
from policies.mpijob.reading import HUB_API_VERSION
from policies.mpijob.pruning_defaulting import as_admitted
from policies.trainer.api import detect_shape
from policies.trainer.effective_job import effective_job
from testing.builders import mpijob
from testing.reference_data import CAPTURED, TRAINER, UPSTREAM, load_yaml_documents

HUB = HUB_API_VERSION
TRAINER_DATA = TRAINER
TRAINJOB_GVK = {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": "TrainJob"}
SPOKE_VERSIONS = tuple(v for v in SERVED_VERSIONS if v != HUB)
RELIST_OBJECTS = 50


@dataclass(frozen=True)
class Payload:
    name: str  # what the report calls it
    path: str  # /validate | /mutate | /convert
    body: bytes
    objects: int = 1

    @property
    def kib(self) -> float:
        return len(self.body) / 1024


def _captured(name: str) -> dict[str, Any]:
    return json.loads((CAPTURED / f"{name}.request.json").read_text())


def _encode(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def upstream_jobs(version: str = "v2beta1") -> dict[str, dict[str, Any]]:
    """The upstream example manifests of one apiVersion, by file stem."""
    return {p.stem: load_yaml_documents(p)[0] for p in sorted((UPSTREAM / version).glob("*.yaml"))}


def large_job(workers: int = 100, env: int = 50, volumes: int = 20) -> dict[str, Any]:
    """A big but ordinary training job: ``workers`` GPU workers whose launcher and worker
    templates each carry ``env`` variables, ``volumes`` volumes (mounted), two init containers and
    a sidecar-free main container."""
    job = mpijob("large-train", workers=workers, image="registry.example.com/ml/train:2.4.1",
                 worker_resources={"limits": {"nvidia.com/gpu": 1, "cpu": 8, "memory": "32Gi"},
                                   "requests": {"cpu": 8, "memory": "32Gi"}})
    kinds: tuple[dict[str, Any], ...] = ({"emptyDir": {}}, {"configMap": {"name": "train-config"}}, {"secret": {"secretName": "train-secret"}},
             {"persistentVolumeClaim": {"claimName": "datasets"}})
    for spec in job["spec"]["mpiReplicaSpecs"].values():
        pod = spec["template"]["spec"]
        pod["volumes"] = [{"name": f"volume-{i}", **copy.deepcopy(kinds[i % len(kinds)])} for i in range(volumes)]
        mounts = [{"name": f"volume-{i}", "mountPath": f"/mnt/volume-{i}"} for i in range(volumes)]
        variables = [{"name": f"TRAIN_SETTING_{i}", "value": f"value-{i}"} for i in range(env)]
        pod["initContainers"] = [
            {"name": "fetch-data", "image": "registry.example.com/ml/fetch:1.2", "command": ["fetch", "/mnt/volume-3"],
             "env": variables[:10], "volumeMounts": mounts[:4],
             "resources": {"limits": {"cpu": 1, "memory": "1Gi"}}},
            {"name": "warm-cache", "image": "registry.example.com/ml/fetch:1.2", "command": ["warm"],
             "resources": {"limits": {"cpu": 1, "memory": "1Gi"}}},
        ]
        for container in pod["containers"]:
            container["env"] = variables
            container["volumeMounts"] = mounts
        pod["nodeSelector"] = {"node.kubernetes.io/instance-type": "gpu-8x"}
        pod["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return job


def _stored_metadata(template: Mapping[str, Any], name: str, namespace: str) -> dict[str, Any]:
    meta = copy.deepcopy(dict(template))
    meta.update(name=name, namespace=namespace)
    if "uid" in meta:
        meta["uid"] = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{namespace}/{name}"))
    return meta


def admission_review(endpoint: str, job: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """``job`` (a v2beta1 manifest) as the API server sends it to ``endpoint`` on CREATE: the
    mutating call sees metadata with name, namespace and managedFields only, the validating one
    also the uid, creationTimestamp and generation; CRD defaults are applied in both."""
    review = _captured("02-create-mutating" if endpoint == "/mutate" else "02-create-validating")
    request = review["request"]
    stored = as_admitted(job)[0]
    name = stored["metadata"]["name"]
    stored["metadata"] = _stored_metadata(request["object"]["metadata"], name, namespace)
    request.update(uid=str(uuid.uuid4()), name=name, namespace=namespace, object=stored)
    return review


def _stored(job: Mapping[str, Any], name: str, namespace: str) -> dict[str, Any]:
    """A v2beta1 job as read back from storage (what a watch cache converts)."""
    template = _captured("02-create-conversion-1")["request"]["objects"][0]["metadata"]
    stored = as_admitted(job)[0]
    stored["metadata"] = _stored_metadata(template, name, namespace)
    return stored


def conversion_review(objects: list[dict[str, Any]], desired: str) -> dict[str, Any]:
    review = _captured("02-create-conversion-1")
    review["request"].update(uid=str(uuid.uuid4()), desiredAPIVersion=desired, objects=objects)
    return review


def admission_payloads(endpoint: str, namespace: str) -> list[Payload]:
    """Every upstream v2beta1 example, then the large job."""
    jobs = {**upstream_jobs(), "large-job": large_job()}
    return [Payload(name, endpoint, _encode(admission_review(endpoint, job, namespace))) for name, job in jobs.items()]


def single_conversions(namespace: str) -> list[Payload]:
    """What the API server sends, one object per review: every upstream v2beta1 example to each
    other served version (a write, or a watch cache of that version), and every upstream example
    of an older version to v2beta1 (a write in that version)."""
    payloads = []
    for name, job in upstream_jobs().items():
        stored = _stored(job, name, namespace)
        for desired in SPOKE_VERSIONS:
            review = conversion_review([stored], desired)
            payloads.append(Payload(f"{name} to {desired.split('/')[1]}", "/convert", _encode(review)))
    for version in SPOKE_VERSIONS:
        short = version.split("/")[1]
        for name, job in upstream_jobs(short).items():
            written = copy.deepcopy(job)
            written["metadata"] = _stored_metadata(job.get("metadata") or {}, job["metadata"]["name"], namespace)
            review = conversion_review([written], HUB)
            payloads.append(Payload(f"{short} {name} to v2beta1", "/convert", _encode(review)))
    return payloads


def relist_conversion(namespace: str, objects: int = RELIST_OBJECTS) -> Payload:
    """One review of ``objects`` stored jobs to v1alpha2: the largest review a client could send."""
    examples = list(upstream_jobs().values())
    stored = [_stored(examples[i % len(examples)], f"job-{i:03d}", namespace) for i in range(objects)]
    return Payload(f"{objects} objects to v1alpha2", "/convert", _encode(conversion_review(stored, SPOKE_VERSIONS[1])),
                   objects=objects)


def worker_count_payloads(namespace: str, counts: tuple[int, ...] = (2, 100)) -> list[Payload]:
    """The same GPU job with different worker counts (for the cost growth table)."""
    payloads = []
    for workers in counts:
        job = mpijob("train", workers=workers, image="registry.example.com/ml/train:2.4.1",
                     worker_resources={"limits": {"nvidia.com/gpu": 1, "cpu": 4, "memory": "16Gi"}})
        payloads.append(Payload(f"{workers} workers", "/validate",
                                _encode(admission_review("/validate", job, namespace))))
    return payloads


# --- Kubeflow Trainer TrainJobs ---------------------------------------------------------------

def trainer_runtimes() -> list[dict[str, Any]]:
    """The MPI ClusterTrainingRuntimes the benchmark cluster holds: upstream's v2.3 DeepSpeed
    runtime and the Open Data Hub MPI benchmark's OpenMPI CUDA runtime."""
    return [load_yaml_documents(TRAINER_DATA / path)[0] for path in (
        "runtimes/v2.3.0/deepspeed_distributed.yaml", "examples/opendatahub/kftv2-mpi-ddp-sft-mpi-runtime.yaml")]


def trainjobs() -> dict[str, dict[str, Any]]:
    """TrainJobs on those runtimes: the Open Data Hub benchmark's (runtime patches on both jobs,
    10 env variables) and a plain one with GPUs per node."""
    benchmark = load_yaml_documents(TRAINER_DATA / "examples/opendatahub/kftv2-mpi-ddp-sft-trainjob.yaml")[0]
    benchmark["metadata"] = {"name": "mpi-ddp-sft"}
    benchmark["spec"]["trainer"]["numNodes"] = 4
    plain = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "train"},
             "spec": {"runtimeRef": {"name": "deepspeed-distributed"},
                      "trainer": {"numNodes": 8, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 2}}}}}
    return {"trainjob-odh-benchmark": benchmark, "trainjob-deepspeed": plain}


def trainjob_review(endpoint: str, job: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """``job`` as the API server sends a TrainJob CREATE to ``endpoint``: the recorded envelope,
    with the TrainJob's kind and resource."""
    review = _captured("02-create-mutating" if endpoint == "/mutate" else "02-create-validating")
    request = review["request"]
    stored = copy.deepcopy(dict(job))
    name = stored["metadata"]["name"]
    stored["metadata"] = _stored_metadata(request["object"]["metadata"], name, namespace)
    request.update(uid=str(uuid.uuid4()), name=name, namespace=namespace, object=stored, kind=TRAINJOB_GVK,
                   requestKind=TRAINJOB_GVK, resource={"group": TRAINJOB_GVK["group"],
                                                       "version": TRAINJOB_GVK["version"], "resource": "trainjobs"})
    request.pop("requestResource", None)
    return review


def trainjob_payloads(endpoint: str, namespace: str) -> list[Payload]:
    return [Payload(name, endpoint, _encode(trainjob_review(endpoint, job, namespace)))
            for name, job in trainjobs().items()]


def mpijob_twins() -> dict[str, dict[str, Any]]:
    """For each TrainJob payload, the MPIJob that runs the same pods: the effective job's launcher
    and node pod templates as its Launcher and Worker templates, with the same counts and slots.
    A TrainJob review minus its twin's is what the Trainer API itself costs (finding the runtime,
    working out the effective job, reading the result in the TrainJob's terms)."""
    runtimes = {rt["metadata"]["name"]: rt for rt in trainer_runtimes()}
    twins = {}
    for name, job in trainjobs().items():
        effective = effective_job(job, runtimes[job["spec"]["runtimeRef"]["name"]], detect_shape(job))
        launcher, node = effective.launcher, effective.node
        assert launcher is not None and node is not None, f"{name}: not an MPI runtime's job"
        twin = mpijob(str(job["metadata"]["name"]), workers=node.pods, slots=effective.slots,
                      mpiImplementation=effective.mpi_implementation, runLauncherAsWorker=effective.run_launcher_as_node,
                      sshAuthMountPath=effective.ssh_auth_mount_path)
        replicas = twin["spec"]["mpiReplicaSpecs"]
        replicas["Launcher"]["template"] = json.loads(json.dumps(launcher.pod_template))
        replicas["Worker"]["template"] = json.loads(json.dumps(node.pod_template))
        twins[f"mpijob-twin-of-{name}"] = twin
    return twins


def mpijob_twin_payloads(endpoint: str, namespace: str) -> list[Payload]:
    return [Payload(name, endpoint, _encode(admission_review(endpoint, job, namespace)))
            for name, job in mpijob_twins().items()]
