"""The effective job of every MPI runtime of the test data, for one TrainJob per API shape,
against golden files; and the counts worked out by hand from the controller's code."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from policies.trainer.api import ApiShape
from policies.trainer.effective_job import EffectiveJob, effective_job
from tests.policies.trainer.trainer_data import mpi_runtimes, runtime, trainjob

GOLDEN = Path(__file__).parent / "golden"
RUNTIMES = mpi_runtimes()


def summary(job: EffectiveJob) -> dict:
    """What the rules read of an effective job, as plain data."""
    return {
        "shape": job.shape.value,
        "runtime": job.runtime.describe(),
        "slots": job.slots,
        "slotsWritten": job.slots_written and job.slots_written.path,
        "runLauncherAsNode": job.run_launcher_as_node,
        "mpiImplementation": job.mpi_implementation,
        "sshAuthMountPath": job.ssh_auth_mount_path,
        "jobs": [
            {
                "name": rj.name,
                "ancestor": rj.ancestor,
                "replicas": rj.replicas,
                "count": rj.count,
                "countWritten": [rj.count_written.path, rj.count_written.in_runtime],
                "pods": rj.pods,
                "containers": [
                    {"name": c.name, "init": c.init, "image": c.container.get("image"),
                     "imageWritten": c.image.path, "resources": c.container.get("resources"),
                     "resourcesWritten": c.resources.path, "command": c.container.get("command")}
                    for c in rj.containers
                ],
                "podFields": {key: w.path for key, w in sorted(rj.pod_fields.items())},
            }
            for rj in job.jobs
        ],
    }


def standard_trainjob(name: str) -> dict:
    return trainjob(name, numNodes=4, image="registry.example.com/team/train:1.0",
                    command=["mpirun", "python", "train.py"],
                    resourcesPerNode={"requests": {"nvidia.com/gpu": "2", "cpu": "8"},
                                      "limits": {"nvidia.com/gpu": "2"}})


@pytest.mark.parametrize("shape", [ApiShape.V2_1, ApiShape.V2_2, ApiShape.V2_3], ids=str)
@pytest.mark.parametrize("path", sorted(RUNTIMES))
def test_effective_job_matches_its_golden_file(path, shape):
    rt = RUNTIMES[path]
    got = summary(effective_job(standard_trainjob(rt["metadata"]["name"]), rt, shape))
    golden = GOLDEN / f"{path.replace('/', '__').removesuffix('.yaml')}.{shape.value}.json"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
    assert got == json.loads(golden.read_text())


def test_every_mpi_runtime_of_the_test_data_has_a_golden_file():
    assert len(RUNTIMES) == 9
    assert len(list(GOLDEN.glob("*.json"))) == 3 * len(RUNTIMES)


@pytest.mark.parametrize("shape", [ApiShape.V2_1, ApiShape.V2_3], ids=str)
def test_v2_3_deepspeed_with_four_nodes_runs_one_launcher_and_three_nodes_with_two_slots(shape):
    # The launcher runs ranks (runLauncherAsNode), so 4 nodes are the launcher and 3 node pods,
    # all four with 2 GPUs: 8 ranks.
    job = effective_job(trainjob(numNodes=4, resourcesPerNode={"limits": {"nvidia.com/gpu": 2}}),
                        runtime("runtimes/v2.3.0/deepspeed_distributed.yaml"), shape)
    assert [(rj.name, rj.pods) for rj in job.jobs] == [("node", 3), ("launcher", 1)]
    assert job.slots == 2
    for rj in job.jobs:
        assert rj.containers[0].container["resources"] == {"limits": {"nvidia.com/gpu": 2}}


def test_one_node_with_the_launcher_as_node_still_gets_a_node_pod():
    # max(numNodes - 1, 1): kubeflow/trainer#3954
    job = effective_job(trainjob(numNodes=1), runtime("runtimes/v2.3.0/mlx_distributed.yaml"), ApiShape.V2_3)
    assert (job.launcher.pods, job.node.pods) == (1, 1)


def test_without_num_nodes_the_node_job_keeps_its_template_parallelism():
    rt = runtime("runtimes/v2.3.0/mlx_distributed.yaml")
    rt["spec"]["mlPolicy"]["numNodes"] = 3  # applies to the launcher (the ancestor), not the nodes
    rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] = 5
    job = effective_job(trainjob(), rt, ApiShape.V2_3)
    assert (job.launcher.pods, job.node.pods) == (3, 5)
    assert job.node.count_written.path == "spec.template.spec.replicatedJobs[0].template.spec.parallelism"
    assert job.launcher.count_written.path == "spec.mlPolicy.numNodes"


def test_without_run_launcher_as_node_zero_nodes_is_taken_as_written():
    rt = runtime("runtimes/v2.0.1/mpi_distributed.yaml")
    rt["spec"]["mlPolicy"]["mpi"]["runLauncherAsNode"] = False
    assert effective_job(trainjob("mpi-distributed", numNodes=0), rt, ApiShape.V2_3).node.pods == 0
    assert effective_job(trainjob("mpi-distributed", numNodes=7), rt, ApiShape.V2_3).node.pods == 7


def test_resources_per_node_replace_on_v2_1_and_v2_2_and_merge_on_v2_3():
    rt = runtime("runtimes/opendatahub/openmpi_cuda.yaml")  # runtime: 1 GPU in limits and requests
    job = trainjob("openmpi-cuda", numNodes=2, resourcesPerNode={"limits": {"cpu": "4"}})
    replaced = effective_job(job, rt, ApiShape.V2_2).node.containers[0].container["resources"]
    merged = effective_job(job, rt, ApiShape.V2_3).node.containers[0].container["resources"]
    assert replaced == {"limits": {"cpu": "4"}}
    assert merged == {"limits": {"nvidia.com/gpu": "1", "cpu": "4"}, "requests": {"nvidia.com/gpu": "1"}}


def test_resources_per_node_reach_the_node_job_only_with_the_launcher_as_node():
    rt = runtime("runtimes/v2.0.1/mpi_distributed.yaml")
    rt["spec"]["mlPolicy"]["mpi"]["runLauncherAsNode"] = False
    job = effective_job(trainjob("mpi-distributed", numNodes=2, resourcesPerNode={"limits": {"cpu": "3"}}),
                        rt, ApiShape.V2_3)
    assert job.launcher.containers[0].container["resources"]["limits"]["cpu"] == "3"
    assert "cpu" not in (job.node.containers[0].container.get("resources") or {}).get("limits", {})
    assert job.node.containers[0].resources.in_runtime


@pytest.mark.parametrize(("per_node", "runtime_slots", "asked", "slots", "written"), [
    ({"limits": {"nvidia.com/gpu": 4}}, 1, None, 4, "spec.trainer.resourcesPerNode"),
    ({"requests": {"amd.com/gpu": "2"}, "limits": {"amd.com/gpu": "8"}}, 1, None, 2, "spec.trainer.resourcesPerNode"),
    ({"limits": {"nvidia.com/gpu": 1}}, 1, None, 1, "spec.mlPolicy.mpi.numProcPerNode"),
    ({"limits": {"nvidia.com/gpu": 4}}, 2, None, 2, "spec.mlPolicy.mpi.numProcPerNode"),
    ({"limits": {"nvidia.com/gpu": 4}}, 1, 3, 3, "spec.trainer.numProcPerNode"),
])
def test_slots_come_from_num_proc_per_node_else_the_runtime_else_the_gpus(per_node, runtime_slots, asked, slots, written):
    rt = runtime("runtimes/v2.3.0/deepspeed_distributed.yaml")
    rt["spec"]["mlPolicy"]["mpi"]["numProcPerNode"] = runtime_slots
    extra = {} if asked is None else {"numProcPerNode": asked}
    job = effective_job(trainjob(numNodes=2, resourcesPerNode=per_node, **extra), rt, ApiShape.V2_3)
    assert (job.slots, job.slots_written.path) == (slots, written)


def test_slots_follow_the_runtime_gpus_when_the_trainjob_gives_no_resources():
    rt = runtime("runtimes/opendatahub/openmpi_cuda.yaml")
    for rj in rt["spec"]["template"]["spec"]["replicatedJobs"]:
        rj["template"]["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "2"}}
    job = effective_job(trainjob("openmpi-cuda", numNodes=2), rt, ApiShape.V2_3)
    assert job.slots == 2
    assert job.slots_written.in_runtime
    assert job.slots_written.path == "spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0].resources"


def test_v2_1_string_num_proc_per_node_is_read_as_the_controller_reads_it():
    rt = runtime("runtimes/v2.1.0-v2.2.1/deepspeed_distributed.yaml")
    assert effective_job(trainjob(numProcPerNode="3"), rt, ApiShape.V2_1).slots == 3
    assert effective_job(trainjob(numProcPerNode="auto"), rt, ApiShape.V2_1).slots == 0


def test_patches_set_scheduling_fields_and_say_where():
    rt = runtime("runtimes/v2.3.0/deepspeed_distributed.yaml")
    job = trainjob(numNodes=2)
    job["spec"]["runtimePatches"] = [
        {"manager": "example.com/a", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
            {"name": "node", "template": {"spec": {"template": {"spec": {
                "nodeSelector": {"gpu": "a100"},
                "tolerations": [{"key": "gpu", "operator": "Exists"}],
            }}}}},
        ]}}}},
        {"manager": "example.com/b", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
            {"name": "node", "template": {"spec": {"template": {"spec": {
                "nodeSelector": {"zone": "b"},
                "tolerations": [{"key": "spot", "operator": "Exists"}],
            }}}}},
        ]}}}},
    ]
    for shape in (ApiShape.V2_2, ApiShape.V2_3):
        node = effective_job(job, rt, shape).node
        assert node.pod_spec["nodeSelector"] == {"gpu": "a100", "zone": "b"}  # maps merge
        assert node.pod_spec["tolerations"] == [{"key": "spot", "operator": "Exists"}]  # lists replace
        assert node.pod_fields["spec.tolerations"].path == (
            "spec.runtimePatches[1].trainingRuntimeSpec.template.spec.replicatedJobs[0]"
            ".template.spec.template.spec.tolerations")
        assert node.pod_fields["spec.securityContext"].in_runtime


def test_v2_1_pod_template_overrides_target_jobs_by_name():
    rt = runtime("runtimes/v2.1.0-v2.2.1/deepspeed_distributed.yaml")
    job = trainjob(numNodes=2)
    job["spec"]["podTemplateOverrides"] = [{
        "targetJobs": [{"name": "launcher"}, {"name": "node"}],
        "metadata": {"labels": {"sidecar.istio.io/inject": "false"}},
        "spec": {"serviceAccountName": "mpi", "containers": [{"name": "node", "env": [{"name": "A", "value": "1"}]}]},
    }]
    effective = effective_job(job, rt, ApiShape.V2_1)
    for rj in effective.jobs:
        assert rj.pod_template["metadata"]["labels"] == {"sidecar.istio.io/inject": "false"}
        assert rj.pod_spec["serviceAccountName"] == "mpi"
        node = rj.containers[0].container
        assert node["env"] == [{"name": "A", "value": "1"}] and node["image"]  # merged by name, image kept
        assert rj.pod_fields["spec.serviceAccountName"].path == "spec.podTemplateOverrides[0].spec.serviceAccountName"


def test_trainer_image_and_command_go_to_the_launcher_only():
    job = effective_job(standard_trainjob("deepspeed-distributed"),
                        runtime("runtimes/v2.3.0/deepspeed_distributed.yaml"), ApiShape.V2_3)
    launcher, node = job.launcher.containers[0], job.node.containers[0]
    assert launcher.container["image"] == "registry.example.com/team/train:1.0"
    assert launcher.image.path == "spec.trainer.image"
    assert node.container["image"] == "ghcr.io/kubeflow/trainer/deepspeed-runtime"
    assert node.container["command"] == ["/usr/sbin/sshd"]
