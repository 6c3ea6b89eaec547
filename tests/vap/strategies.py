"""Hypothesis MPIJobs for the parity property: every field an exported rule reads, drawn
around the values where the rules' answers change, and always valid against the CRD schema
(the API server refuses anything else before a policy sees it)."""
from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from testing.builders import mpijob

NAMES = st.text(alphabet="ab-9Z_", min_size=1, max_size=8).map(lambda s: s)
GPU_AMOUNTS = st.sampled_from([0, 1, 2, 4, 8, 9, 16, 17, "1", "16", "17", "1.5", "500m", "-1", "2k"])


@st.composite
def names(draw: st.DrawFn) -> dict[str, Any]:
    """A name (or generateName) near the DNS-1035 length limits."""
    base = draw(st.sampled_from(["p", "pi", "Pi", "pi-", "9pi", "p_i", "pi-job"]))
    length = draw(st.sampled_from([1, 40, 52, 53, 54, 55, 58, 63]))
    name = (base * length)[:length] if length > len(base) else base
    if draw(st.booleans()) and draw(st.booleans()):
        return {"generateName": name}
    return {"name": name}


@st.composite
def containers(draw: st.DrawFn, *, gpu: str, init: bool = False) -> list[dict[str, Any]]:
    # An app container list is sometimes empty: the launcher and replica-spec rules refuse it.
    count = draw(st.integers(min_value=0, max_value=3) if init else st.sampled_from([1, 2, 3, 1, 2, 3, 0]))
    found = []
    for index in range(count):
        container: dict[str, Any] = {"name": f"{'init' if init else 'c'}-{index}", "image": "busybox"}
        limits, requests = {}, {}
        if draw(st.booleans()):
            limits[gpu] = draw(GPU_AMOUNTS)
        if draw(st.integers(0, 3)) == 0:
            requests[gpu] = draw(GPU_AMOUNTS)
        if draw(st.integers(0, 5)) == 0:
            limits["example.com/fpga"] = draw(st.sampled_from([1, "1", "0.5"]))
        if limits or requests:
            container["resources"] = {k: v for k, v in (("limits", limits), ("requests", requests)) if v}
        if init and draw(st.integers(0, 3)) == 0:
            container["restartPolicy"] = "Always"
        found.append(container)
    return found


def _replica(draw: st.DrawFn, gpu: str) -> dict[str, Any]:
    replica: dict[str, Any] = {"template": {"spec": {"containers": draw(containers(gpu=gpu))}}}
    init = draw(containers(gpu=gpu, init=True))
    if init:
        replica["template"]["spec"]["initContainers"] = init
    if draw(st.integers(0, 4)) == 0:
        replica["restartPolicy"] = draw(st.sampled_from(["Never", "OnFailure", "Always", "ExitCode"]))
    return replica


@st.composite
def jobs(draw: st.DrawFn) -> dict[str, Any]:
    gpu = draw(st.sampled_from(["nvidia.com/gpu", "amd.com/gpu"]))
    job = mpijob()
    job["metadata"] = draw(names())
    spec = job["spec"]
    launcher, worker = _replica(draw, gpu), _replica(draw, gpu)
    launcher_replicas = draw(st.sampled_from([None, 1, 1, 0, 2]))
    if launcher_replicas is not None:
        launcher["replicas"] = launcher_replicas
    workers = draw(st.sampled_from([None, 0, 1, 2, 3, 9, 10, 11, 64, 100, 101, 1000]))
    if workers is not None:
        worker["replicas"] = workers
    specs: dict[str, Any] = {}
    if draw(st.integers(0, 9)) > 0:
        specs["Launcher"] = launcher
    if draw(st.integers(0, 9)) > 0:
        specs["Worker"] = worker
    if draw(st.integers(0, 9)) == 0:
        specs[draw(st.sampled_from(["Master", "worker", "Launcher "]))] = {"replicas": 1}
    spec["mpiReplicaSpecs"] = specs
    spec["runLauncherAsWorker"] = draw(st.booleans())
    optional = {
        "slotsPerWorker": st.sampled_from([0, 1, 2, 8, 9]),
        "mpiImplementation": st.sampled_from(["OpenMPI", "Intel", "MPICH"]),
        "launcherCreationPolicy": st.sampled_from(["AtStartup", "WaitForWorkersReady", "Later"]),
        "sshAuthMountPath": st.sampled_from(["/root/.ssh", "", ".ssh", "~/.ssh", "/a/../b", "/a/..b"]),
    }
    for key, values in optional.items():
        if draw(st.booleans()):
            spec[key] = draw(values)
        else:
            spec.pop(key, None)
    run_policy: dict[str, Any] = {}
    if draw(st.booleans()):
        run_policy["cleanPodPolicy"] = draw(st.sampled_from(["All", "Running", "None", "running"]))
    for key in ("ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit"):
        if draw(st.integers(0, 3)) == 0:
            run_policy[key] = draw(st.sampled_from([-1, 0, 60]))
    if draw(st.booleans()):
        scheduling: dict[str, Any] = {"minResources": {"cpu": draw(st.sampled_from(["1", "-1", 2, "500m", "-500m"]))}}
        for key in ("minAvailable", "scheduleTimeoutSeconds"):
            if draw(st.booleans()):
                scheduling[key] = draw(st.sampled_from([-1, 0, 2]))
        run_policy["schedulingPolicy"] = scheduling
    if draw(st.integers(0, 3)) == 0:
        run_policy["managedBy"] = draw(st.sampled_from(["kubeflow.org/mpi-operator", "kueue.x-k8s.io/multikueue",
                                                        "example.com/other"]))
    spec["runPolicy"] = run_policy
    return job


def gpus_before_init(job: dict[str, Any]) -> bool:
    """Whether an init container with GPUs follows a sidecar with GPUs in some pod: the one
    count the exported policy leaves to the webhook (see policies.vap.rules.gpus_per_worker)."""
    for replica in (job["spec"].get("mpiReplicaSpecs") or {}).values():
        init = ((replica.get("template") or {}).get("spec") or {}).get("initContainers") or []
        sidecar_gpus = False
        for container in init:
            has_gpus = bool(((container.get("resources") or {}).get("limits") or {})) or bool(
                ((container.get("resources") or {}).get("requests") or {}))
            if container.get("restartPolicy") == "Always":
                sidecar_gpus = sidecar_gpus or has_gpus
            elif has_gpus and sidecar_gpus:
                return True
    return False
