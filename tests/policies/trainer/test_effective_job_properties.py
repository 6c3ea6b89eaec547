"""The effective job matches a straightforward model of the Trainer controller's rules
(written from its code, release by release, step by step on the objects the generators make)
for random MPI runtimes and TrainJobs of both API shapes."""
from __future__ import annotations

import copy
import math
from decimal import Decimal

from hypothesis import assume, given
from hypothesis import strategies as st

from policies.trainer.api import ApiShape
from policies.trainer.effective_job import effective_job

ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
GPU = "nvidia.com/gpu"

counts = st.one_of(st.none(), st.integers(min_value=-2, max_value=12))
quantities = st.one_of(st.integers(min_value=0, max_value=8), st.sampled_from(["1", "2", "4", "500m", "1500m"]))
resource_lists = st.dictionaries(st.sampled_from([GPU, "cpu", "memory"]), quantities, max_size=3)
resources = st.one_of(st.none(), st.fixed_dictionaries({}, optional={"limits": resource_lists, "requests": resource_lists}))
selectors = st.dictionaries(st.sampled_from(["zone", "gpu", "pool"]), st.sampled_from(["a", "b"]), max_size=2)
tolerations = st.lists(st.fixed_dictionaries({"key": st.sampled_from(["gpu", "spot"]), "operator": st.just("Exists")}),
                       max_size=2)


@st.composite
def runtimes(draw):
    names = draw(st.permutations(["launcher", "node", "extra"]))
    names = names[:draw(st.integers(min_value=1, max_value=3))]
    jobs = []
    for name in names:
        pod_spec = {"containers": [{"name": draw(st.sampled_from(["node", "node", "other"])), "image": f"img-{name}"}]}
        container_resources = draw(resources)
        if container_resources is not None:
            pod_spec["containers"][0]["resources"] = container_resources
        if draw(st.booleans()):
            pod_spec["nodeSelector"] = draw(selectors)
        job_spec = {"template": {"spec": pod_spec}}
        parallelism = draw(counts)
        if parallelism is not None:
            job_spec["parallelism"] = parallelism
        job = {"name": name, "template": {"spec": job_spec}}
        replicas = draw(st.one_of(st.none(), st.integers(min_value=1, max_value=3)))
        if replicas is not None:
            job["replicas"] = replicas
        if draw(st.booleans()) if name != "launcher" else draw(st.integers(0, 4)) > 0:
            job["template"]["metadata"] = {"labels": {ANCESTOR: "trainer"}}
        jobs.append(job)
    mpi = {"mpiImplementation": "OpenMPI"}
    for key, strategy in (("numProcPerNode", st.integers(min_value=1, max_value=4)),
                          ("runLauncherAsNode", st.booleans())):
        value = draw(st.one_of(st.none(), strategy))
        if value is not None:
            mpi[key] = value
    policy = {"mpi": mpi}
    num_nodes = draw(counts)
    if num_nodes is not None:
        policy["numNodes"] = num_nodes
    return {"kind": "ClusterTrainingRuntime", "metadata": {"name": "rt"},
            "spec": {"mlPolicy": policy, "template": {"spec": {"replicatedJobs": jobs}}}}


@st.composite
def trainjobs(draw, job_names, shape):
    trainer = {}
    for key, strategy in (("numNodes", st.integers(min_value=-1, max_value=12)),
                          ("numProcPerNode", st.integers(min_value=0, max_value=8)),
                          ("resourcesPerNode", resources.filter(lambda r: r is not None)),
                          ("image", st.just("user/image:1"))):
        if draw(st.booleans()):
            trainer[key] = draw(strategy)
    spec = {"runtimeRef": {"name": "rt"}, "trainer": trainer}
    patches = draw(st.lists(st.tuples(st.lists(st.sampled_from(job_names), min_size=1, max_size=2, unique=True),
                                      selectors, st.one_of(st.none(), tolerations)), max_size=3))
    if shape is ApiShape.V2_1:
        spec["podTemplateOverrides"] = [
            {"targetJobs": [{"name": n} for n in targets], "spec": pod_patch(sel, tol)}
            for targets, sel, tol in patches]
    else:
        spec["runtimePatches"] = [
            {"manager": f"example.com/m{i}",
             "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
                 {"name": n, "template": {"spec": {"template": {"spec": pod_patch(sel, tol)}}}} for n in targets]}}}}
            for i, (targets, sel, tol) in enumerate(patches)]
    return {"kind": "TrainJob", "metadata": {"name": "job"}, "spec": spec}


def pod_patch(selector, toleration_list):
    return {"nodeSelector": selector, **({} if toleration_list is None else {"tolerations": toleration_list})}


# --- the model ------------------------------------------------------------------------------

def gpu_count(res):
    def first(values):
        for name, value in (values or {}).items():
            if "gpu" in name:
                return math.ceil(Decimal(str(value)[:-1]) / 1000 if str(value).endswith("m") else Decimal(str(value)))
        return 0
    if res is None:
        return 0
    return first(res.get("requests")) or first(res.get("limits"))


def model(trainjob, runtime, shape):
    """Per job (name, pods, node container resources, nodeSelector, tolerations) and slots."""
    jobs = copy.deepcopy(runtime["spec"]["template"]["spec"]["replicatedJobs"])
    policy = runtime["spec"]["mlPolicy"]
    mpi = policy["mpi"]
    trainer = trainjob["spec"]["trainer"]
    # patches, in order; nodeSelector maps merge, tolerations lists replace
    entries = trainjob["spec"].get("podTemplateOverrides") or []
    for entry in entries:
        for job in jobs:
            if job["name"] in [t["name"] for t in entry["targetJobs"]]:
                pod = job["template"]["spec"]["template"]["spec"]
                pod["nodeSelector"] = {**pod.get("nodeSelector", {}), **entry["spec"]["nodeSelector"]}
                if "tolerations" in entry["spec"]:
                    pod["tolerations"] = entry["spec"]["tolerations"]
    for patch in trainjob["spec"].get("runtimePatches") or []:
        for job_patch in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
            for job in jobs:
                if job["name"] == job_patch["name"]:
                    pod = job["template"]["spec"]["template"]["spec"]
                    given = job_patch["template"]["spec"]["template"]["spec"]
                    pod["nodeSelector"] = {**pod.get("nodeSelector", {}), **given["nodeSelector"]}
                    if "tolerations" in given:
                        pod["tolerations"] = given["tolerations"]
    launcher_as_node = mpi.get("runLauncherAsNode", False)
    result = {}
    for job in jobs:
        is_trainer = (job["template"].get("metadata") or {}).get("labels", {}).get(ANCESTOR) == "trainer"
        if is_trainer:
            count, replicas = policy.get("numNodes", 1), 1
        else:
            count, replicas = job["template"]["spec"].get("parallelism", 1), job.get("replicas", 1)
        count = max(count, 1)
        if job["name"] == "node" and "numNodes" in trainer:
            count = max(trainer["numNodes"] - 1, 1) if launcher_as_node else trainer["numNodes"]
        pod = job["template"]["spec"]["template"]["spec"]
        container = pod["containers"][0]
        res = container.get("resources")
        if container["name"] == "node" and "resourcesPerNode" in trainer and (
                is_trainer or (launcher_as_node and job["name"] == "node")):
            given = trainer["resourcesPerNode"]
            if shape is ApiShape.V2_3:
                res = dict(res or {})
                for key in ("limits", "requests"):
                    if key in given:
                        res[key] = {**(res.get(key) or {}), **given[key]}
            elif given:
                res = given
        result[job["name"]] = (max(replicas, 0) * max(count, 0), res, pod.get("nodeSelector"), pod.get("tolerations"))
    if "numProcPerNode" in trainer:
        slots = trainer["numProcPerNode"]
    elif mpi.get("numProcPerNode", 1) != 1:
        slots = mpi["numProcPerNode"]
    else:
        if "resourcesPerNode" in trainer:
            res = trainer["resourcesPerNode"]
        else:
            res = next((job["template"]["spec"]["template"]["spec"]["containers"][0].get("resources")
                        for job in jobs
                        if (job["name"] == "node" or (job["template"].get("metadata") or {}).get("labels", {}).get(ANCESTOR) == "trainer")
                        and job["template"]["spec"]["template"]["spec"]["containers"][0]["name"] == "node"
                        and job["template"]["spec"]["template"]["spec"]["containers"][0].get("resources") is not None),
                       None)
        slots = gpu_count(res) if gpu_count(res) > 1 else 1
    return result, slots


@st.composite
def cases(draw):
    shape = draw(st.sampled_from(list(ApiShape)))
    runtime = draw(runtimes())
    names = [job["name"] for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]]
    return shape, runtime, draw(trainjobs(names, shape))


@given(cases())
def test_the_effective_job_is_what_the_controller_builds(case):
    shape, runtime, trainjob = case
    ancestors = [j for j in runtime["spec"]["template"]["spec"]["replicatedJobs"]
                 if (j["template"].get("metadata") or {}).get("labels", {}).get(ANCESTOR) == "trainer"]
    assume(len(ancestors) <= 1)  # the runtime webhook's rule; the model keeps one trainer job
    expected, slots = model(trainjob, runtime, shape)
    job = effective_job(trainjob, runtime, shape)
    got = {rj.name: (rj.pods, rj.containers[0].container.get("resources"), rj.pod_spec.get("nodeSelector"),
                     rj.pod_spec.get("tolerations")) for rj in job.jobs}
    assert got == expected
    assert job.slots == slots
    assert [rj.name for rj in job.jobs] == [j["name"] for j in runtime["spec"]["template"]["spec"]["replicatedJobs"]]


@given(cases())
def test_computing_it_changes_neither_object(case):
    shape, runtime, trainjob = case
    before = copy.deepcopy((runtime, trainjob))
    effective_job(trainjob, runtime, shape)
    assert (runtime, trainjob) == before
