"""``mpijob-webhook check`` on TrainJobs: runtimes from the same input or from --cluster-state."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import yaml

from tests.policies.trainer.trainer_data import DATA, runtime, trainjob
from webhook.cli import main

DEEPSPEED = DATA / "runtimes" / "v2.3.0" / "deepspeed_distributed.yaml"
ODH_RUNTIME = DATA / "examples" / "opendatahub" / "kftv2-mpi-ddp-sft-mpi-runtime.yaml"
ODH_TRAINJOB = DATA / "examples" / "opendatahub" / "kftv2-mpi-ddp-sft-trainjob.yaml"


def write(path: Path, *objects: object) -> Path:
    path.write_text(yaml.safe_dump_all(objects))
    return path


def check_json(capsys, *args: object) -> tuple[int, dict]:
    code = main(["check", "-o", "json", *map(str, args)])
    return code, json.loads(capsys.readouterr().out)


def test_runtime_beside_the_trainjob_in_another_file(tmp_path, capsys):
    job = write(tmp_path / "trainjob.yaml", trainjob(numNodes=120))
    code, report = check_json(capsys, job, DEEPSPEED)
    assert code == 1
    trainjob_result, runtime_result = report["results"]
    assert trainjob_result["decision"] == "denied"
    assert [(f["rule"], f["path"]) for f in trainjob_result["findings"]] == [("worker-count", "spec.trainer.numNodes")]
    assert runtime_result["decision"] == "ignored" and runtime_result["reason"] == "training-runtime"
    assert trainjob_result["mutations"]["applied"] == ["istio-sidecar-off"]


def test_runtime_in_the_same_file_after_the_trainjob(tmp_path, capsys):
    both = write(tmp_path / "all.yaml", trainjob(numNodes=4), runtime("runtimes/v2.3.0/deepspeed_distributed.yaml"))
    code, report = check_json(capsys, both)
    assert code == 0
    assert report["results"][0]["decision"] == "admitted"


def test_runtime_from_cluster_state_with_the_quota(tmp_path, capsys):
    from testing.kube_objects import resource_quota

    state = write(tmp_path / "cluster.yaml", runtime("runtimes/v2.3.0/deepspeed_distributed.yaml"),
                  resource_quota("gpus", {"requests.nvidia.com/gpu": 4}, namespace="default"))
    job = write(tmp_path / "trainjob.yaml", trainjob(numNodes=4, namespace="default",
                                                     resourcesPerNode={"limits": {"nvidia.com/gpu": 2}}))
    code, report = check_json(capsys, job, "--cluster-state", state)
    assert code == 1
    assert report["results"][0]["status"]["code"] == 403


def test_a_runtime_given_nowhere_is_said(tmp_path, capsys):
    code, report = check_json(capsys, write(tmp_path / "trainjob.yaml", trainjob(numNodes=4)))
    assert code == 0
    (finding,) = report["results"][0]["findings"]
    assert finding["rule"] == "cluster-state" and finding["path"] == "spec.runtimeRef.name"
    assert "ClusterTrainingRuntime deepspeed-distributed is not known" in finding["message"]


def test_the_opendatahub_benchmark_trainjob_and_runtime(tmp_path, capsys):
    # generateName "mpi-ddp-sft-": 2 nodes with 2 GPUs each on the benchmark's OpenMPI CUDA runtime
    code, report = check_json(capsys, ODH_TRAINJOB, ODH_RUNTIME)
    trainjob_result = report["results"][0]
    assert trainjob_result["kind"] == "TrainJob"
    assert trainjob_result["decision"] == "denied"  # 2 nodes with the launcher as one: 1 node pod, below 2
    assert [f["path"] for f in trainjob_result["findings"] if f["action"] == "deny"] == ["spec.trainer.numNodes"]


def test_the_console_script_reads_the_two_files(tmp_path):
    script = shutil.which("mpijob-webhook")
    assert script is not None, "put the virtualenv's bin on PATH"
    job = write(tmp_path / "trainjob.yaml", trainjob(numNodes=4))
    result = subprocess.run([script, "check", str(job), str(DEEPSPEED)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == "2 documents: 1 admitted, 0 denied, 1 ignored"
