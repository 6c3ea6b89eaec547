"""``mpijob-webhook check`` on TrainJobs: runtimes from the same input or from --cluster-state."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.policies.trainer.trainer_data import DATA, runtime, trainjob
from tests.conftest import console_script
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


def not_given(what: str, where: str, save: str) -> str:
    return (f"[cluster-state] spec.runtimeRef.name: {what} is in none of the files checked {where}: this TrainJob "
            "was not checked (worker count, slots, GPUs, quota, node fit); give the runtime in the same input "
            f"(`mpijob-webhook check trainjob.yaml runtime.yaml`, the runtime saved with `{save}`) or with "
            "--cluster-state FILE")


def test_a_runtime_given_nowhere_is_named_with_how_to_give_it(tmp_path):
    # Offline there is no watch cache to be behind: the message says which runtime is missing
    # and how to give it. Nothing was checked, which is said, not failed: exit 0, as for the
    # cluster rules skipped without --cluster-state.
    write(tmp_path / "trainjob.yaml", trainjob(numNodes=4))
    result = subprocess.run([str(console_script()), "check", "trainjob.yaml"], capture_output=True, text=True,
                            check=False, cwd=tmp_path)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines() == [
        "trainjob.yaml[0] TrainJob team-a/train: admitted (runtime-not-given)",
        "  audit   " + not_given("ClusterTrainingRuntime deepspeed-distributed", "and no --cluster-state was given",
                                 "kubectl get clustertrainingruntime deepspeed-distributed -o yaml > runtime.yaml"),
        "1 document: 1 admitted, 0 denied, 0 ignored",
    ]


def test_a_namespaced_runtime_missing_from_the_cluster_state_too_is_named(tmp_path, capsys):
    state = write(tmp_path / "cluster.yaml", runtime("runtimes/v2.3.0/deepspeed_distributed.yaml"))
    job = write(tmp_path / "trainjob.yaml", trainjob(numNodes=4, kind="TrainingRuntime", namespace="team-a"))
    code, report = check_json(capsys, job, "--cluster-state", state)
    assert code == 0
    (result,) = report["results"]
    assert (result["decision"], result["reason"]) == ("admitted", "runtime-not-given")
    assert result["findings"] == [{
        "rule": "cluster-state", "action": "warn", "path": "spec.runtimeRef.name",
        "message": not_given("TrainingRuntime deepspeed-distributed (namespace team-a)", "nor in --cluster-state",
                             "kubectl get trainingruntime deepspeed-distributed -n team-a -o yaml > runtime.yaml")}]


def test_the_opendatahub_benchmark_trainjob_and_runtime(tmp_path, capsys):
    # generateName "mpi-ddp-sft-": 2 nodes with 2 GPUs each on the benchmark's OpenMPI CUDA runtime
    code, report = check_json(capsys, ODH_TRAINJOB, ODH_RUNTIME)
    trainjob_result = report["results"][0]
    assert trainjob_result["kind"] == "TrainJob"
    assert trainjob_result["decision"] == "denied"  # 2 nodes with the launcher as one: 1 node pod, below 2
    assert [f["path"] for f in trainjob_result["findings"] if f["action"] == "deny"] == ["spec.trainer.numNodes"]


def test_the_console_script_reads_the_two_files(tmp_path):
    script = str(console_script())  # the one beside the running interpreter, not PATH's
    assert Path(script).is_file(), f"the mpijob-webhook console script is not installed at {script}: pip install -e ."
    job = write(tmp_path / "trainjob.yaml", trainjob(numNodes=4))
    result = subprocess.run([script, "check", str(job), str(DEEPSPEED)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == "2 documents: 1 admitted, 0 denied, 1 ignored"


# --- runtimes the API server would refuse or prune ------------------------------------------
# A runtime given to check is what a person wrote: before the TrainJobs are checked against it,
# it is checked against the runtime CRD, as the API server would check it.

def deepspeed(**mpi: object) -> dict:
    rt = runtime("runtimes/v2.3.0/deepspeed_distributed.yaml")
    rt["spec"]["mlPolicy"]["mpi"].update(mpi)
    return rt


REFUSED_SLOTS = 'spec.mlPolicy.mpi.numProcPerNode: Invalid value: "four": must be an integer, not a string'
REFUSED_LAUNCHER = 'spec.mlPolicy.mpi.runLauncherAsNode: Invalid value: "yes": must be true or false, not a string'


def refused_runtime_message(where: str, first: str, more: str = "") -> str:
    return (f'[training-runtime] spec.runtimeRef.name: Invalid value: "deepspeed-distributed": '
            f"ClusterTrainingRuntime deepspeed-distributed ({where}) would be refused by the API server: "
            f"{first}{more}; this TrainJob was not checked against it: fix the runtime and check again")


REFUSED_CASES = [
    # (id, runtime's mpi fields, the runtime's findings, the TrainJob's "and more")
    ("one-field", {"numProcPerNode": "four"}, [REFUSED_SLOTS], ""),
    ("two-fields", {"numProcPerNode": "four", "runLauncherAsNode": "yes"}, [REFUSED_SLOTS, REFUSED_LAUNCHER],
     " (and 1 more problem: see its own result)"),
]


@pytest.mark.parametrize(("mpi", "refused", "more"), [c[1:] for c in REFUSED_CASES], ids=[c[0] for c in REFUSED_CASES])
def test_a_runtime_the_api_server_would_refuse_is_denied_and_its_trainjobs_are_not_checked(tmp_path, capsys, mpi,
                                                                                         refused, more):
    runtime_file = write(tmp_path / "runtime.yaml", deepspeed(**mpi))
    job = write(tmp_path / "trainjob.yaml", trainjob(numNodes=4))
    code, report = check_json(capsys, job, runtime_file)
    assert (code, report["exitCode"], report["summary"]) == (1, 1, {"documents": 2, "admitted": 0, "denied": 2,
                                                                     "ignored": 0, "errors": 0})
    trainjob_result, runtime_result = report["results"]
    assert runtime_result == {
        "source": str(runtime_file), "document": 0, "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime", "namespace": None, "name": "deepspeed-distributed",
        "decision": "denied", "reason": "invalid-shape",
        "status": {"code": 422, "reason": "Invalid",
                   "message": 'ClusterTrainingRuntime.trainer.kubeflow.org "deepspeed-distributed" is invalid: '
                              + "; ".join(f"[object-shape] {line}" for line in refused)},
        "findings": [{"rule": "object-shape", "action": "deny", "path": line.split(":")[0],
                      "message": f"[object-shape] {line}"} for line in refused],
        "warnings": [], "skipped": [], "mutations": {"applied": [], "patch": []}, "pruned": [],
    }
    assert trainjob_result["decision"] == "denied" and trainjob_result["reason"] == "invalid-runtime"
    assert trainjob_result["status"] is None and trainjob_result["mutations"] == {"applied": [], "patch": []}
    assert trainjob_result["findings"] == [{
        "rule": "training-runtime", "action": "deny", "path": "spec.runtimeRef.name",
        "message": refused_runtime_message(f"{runtime_file}[0]", refused[0], more)}]


def test_the_text_report_names_the_runtime_and_its_field(tmp_path, capsys):
    both = write(tmp_path / "all.yaml", trainjob(numNodes=4, namespace="default"),
                 deepspeed(numProcPerNode="four", sshAuthMountpath="/x"))
    code = main(["check", str(both)])
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    where = f"{both}[1]"
    assert out == [
        f"{both}[0] TrainJob default/train: denied (invalid-runtime)",
        f"  deny    {refused_runtime_message(where, REFUSED_SLOTS)}",
        f"{where} ClusterTrainingRuntime deepspeed-distributed: denied",
        f"  deny    [object-shape] {REFUSED_SLOTS}",
        "  pruned  spec.mlPolicy.mpi.sshAuthMountpath: unknown field: the API server drops it from a "
        "trainer.kubeflow.org/v1alpha1 ClusterTrainingRuntime; did you mean spec.mlPolicy.mpi.sshAuthMountPath?",
        "2 documents: 0 admitted, 2 denied, 0 ignored",
    ]


def test_the_trainjob_own_type_problems_are_still_said_beside_its_refused_runtime(tmp_path, capsys):
    both = write(tmp_path / "all.yaml", trainjob(numNodes="four"), deepspeed(numProcPerNode="four"))
    code, report = check_json(capsys, both)
    assert code == 1
    assert [(f["rule"], f["path"]) for f in report["results"][0]["findings"]] == [
        ("object-shape", "spec.trainer.numNodes"), ("training-runtime", "spec.runtimeRef.name")]


def test_a_pruned_field_is_said_and_the_trainjob_is_checked_against_the_runtime_as_stored(tmp_path, capsys):
    # runLauncherAsNode misspelt: the API server drops it and defaults runLauncherAsNode to false, so
    # numNodes 101 means 101 node pods (over the 100 allowed), not 100 beside the launcher's node.
    misspelt = deepspeed(runLauncherAsnode=True)
    del misspelt["spec"]["mlPolicy"]["mpi"]["runLauncherAsNode"]
    runtime_file = write(tmp_path / "runtime.yaml", misspelt)
    code, report = check_json(capsys, write(tmp_path / "trainjob.yaml", trainjob(numNodes=101)), runtime_file)
    assert code == 1
    trainjob_result, runtime_result = report["results"]
    assert (runtime_result["decision"], runtime_result["reason"]) == ("ignored", "training-runtime")
    assert runtime_result["pruned"] == [{
        "path": "spec.mlPolicy.mpi.runLauncherAsnode",
        "message": "unknown field: the API server drops it from a trainer.kubeflow.org/v1alpha1 "
                   "ClusterTrainingRuntime; did you mean spec.mlPolicy.mpi.runLauncherAsNode?",
        "suggestion": "spec.mlPolicy.mpi.runLauncherAsNode"}]
    assert [(f["rule"], f["path"]) for f in trainjob_result["findings"]] == [("worker-count", "spec.trainer.numNodes")]
    # spelt right, the same TrainJob is admitted: 100 node pods beside the launcher's
    code, report = check_json(capsys, tmp_path / "trainjob.yaml", DEEPSPEED)
    assert (code, report["results"][0]["decision"]) == (0, "admitted")


def test_only_the_trainjobs_that_name_the_refused_runtime_are_affected(tmp_path, capsys):
    refused = deepspeed(numProcPerNode="four")
    refused["kind"] = "TrainingRuntime"
    refused["metadata"]["namespace"] = "team-a"
    jobs = write(tmp_path / "jobs.yaml", trainjob(numNodes=4, kind="TrainingRuntime", namespace="team-a"),
                 trainjob(numNodes=4, kind="TrainingRuntime", namespace="team-b"), trainjob(numNodes=4))
    code, report = check_json(capsys, jobs, write(tmp_path / "runtimes.yaml", refused), DEEPSPEED)
    assert code == 1
    team_a, team_b, cluster_wide, refused_result, _ = report["results"]
    assert team_a["reason"] == "invalid-runtime"
    assert team_b["decision"] == "admitted"  # no TrainingRuntime in team-b: the runtime is not known there
    assert [(f["rule"], f["path"]) for f in team_b["findings"]] == [("cluster-state", "spec.runtimeRef.name")]
    assert cluster_wide["decision"] == "admitted"
    assert (refused_result["namespace"], refused_result["decision"]) == ("team-a", "denied")


def test_a_runtime_given_again_valid_replaces_the_refused_one(tmp_path, capsys):
    both = write(tmp_path / "runtimes.yaml", deepspeed(numProcPerNode="four"), deepspeed())
    code, report = check_json(capsys, write(tmp_path / "trainjob.yaml", trainjob(numNodes=4)), both)
    assert [r["decision"] for r in report["results"]] == ["admitted", "denied", "ignored"]
    assert code == 1  # the refused document is still denied


CLUSTER_STATE_CASES = [
    ("refused", deepspeed(numProcPerNode="four"),
     2, "ClusterTrainingRuntime deepspeed-distributed would be refused by the API server, so no cluster holds it: "
        + REFUSED_SLOTS),
    ("two-refused-fields", deepspeed(numProcPerNode="four", runLauncherAsNode="yes"),
     2, "ClusterTrainingRuntime deepspeed-distributed would be refused by the API server, so no cluster holds it: "
        + f"{REFUSED_SLOTS}; {REFUSED_LAUNCHER}"),
    ("valid", deepspeed(), 0, None),
    # a field unknown to the CRD (one a newer Trainer may have) is pruned without a word: cluster
    # state comes from the API server, which stores what its own CRD declares
    ("unknown-field", deepspeed(newerField=True), 0, None),
]


@pytest.mark.parametrize(("state", "exit_code", "error"), [c[1:] for c in CLUSTER_STATE_CASES],
                         ids=[c[0] for c in CLUSTER_STATE_CASES])
def test_a_refused_runtime_in_the_cluster_state_is_bad_input(tmp_path, capsys, state, exit_code, error):
    cluster = write(tmp_path / "cluster.yaml", state)
    code, report = check_json(capsys, write(tmp_path / "trainjob.yaml", trainjob(numNodes=4)),
                              "--cluster-state", cluster)
    assert (code, report["exitCode"]) == (exit_code, exit_code)
    if error is None:
        assert report["errors"] == [] and report["results"][0]["decision"] == "admitted"
        assert report["results"][0]["findings"] == []
    else:
        assert report["errors"] == [{"source": str(cluster), "document": 0, "message": error}]
        assert report["results"] == []


def test_a_refused_runtime_in_the_cluster_state_is_said_on_stderr(tmp_path, capsys):
    cluster = write(tmp_path / "cluster.yaml", deepspeed(numProcPerNode="four"))
    code = main(["check", str(write(tmp_path / "trainjob.yaml", trainjob(numNodes=4))), "--cluster-state", str(cluster)])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err == (f"error: {cluster}[0]: ClusterTrainingRuntime deepspeed-distributed would be refused by "
                            f"the API server, so no cluster holds it: {REFUSED_SLOTS}\n")


def test_the_image_mismatch_hint_names_both_images_of_the_usual_runtime(tmp_path, capsys):
    job = write(tmp_path / "trainjob.yaml", trainjob(numNodes=4, image="example.com/train:1"))
    code, report = check_json(capsys, job, DEEPSPEED)
    assert code == 0
    (finding,) = report["results"][0]["findings"]
    assert finding == {
        "rule": "image-reference", "action": "warn", "path": "spec.runtimeRef.name",
        "message": '[image-reference] spec.runtimeRef.name: ClusterTrainingRuntime deepspeed-distributed: launcher '
                   'runs "example.com/train:1", nodes run "ghcr.io/kubeflow/trainer/deepspeed-runtime": '
                   "ranks may hit an MPI ABI mismatch; use one image for both, pinned by digest"}


# --- the TrainJob itself as the API server stores it ----------------------------------------
DROPPED_FROM_TRAINJOB = "unknown field: the API server drops it from a trainer.kubeflow.org/v1alpha1 TrainJob"


def own_patch(**pod_spec: object) -> dict:
    return {"manager": "example.com/team", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": pod_spec}}}}]}}}}


PRUNED_TRAINJOB_CASES = [
    # (id, TrainJob, what is pruned (path, suggestion), decision: what the webhook then decides)
    ("numNode", {"trainer": {"numNode": 120}}, [("spec.trainer.numNode", "spec.trainer.numNodes")], "denied"),
    ("runtimePatch", {"trainer": {"numNodes": 4}, "runtimePatch": []},
     [("spec.runtimePatch", "spec.runtimePatches")], "admitted"),
    ("patch-sets-resources", {"trainer": {"numNodes": 4},
                              "runtimePatches": [own_patch(containers=[{"name": "node", "resources": {}}])]},
     [("spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec"
       ".containers[0].resources", None)], "admitted"),
    ("nothing-unknown", {"trainer": {"numNodes": 4}, "runtimePatches": [own_patch(serviceAccountName="team-sa")]},
     [], "admitted"),
    # no v2.1 CRD is carried: a v2.1 TrainJob is checked as written, nothing is said pruned
    ("v2.1-shape", {"trainer": {"numNodes": 4, "numProcPerNode": "2"}, "labels": {"team": "a"},
                    "podTemplateOverrides": [{"targetJobs": [{"name": "node"}], "spec": {"serviceAccountName": "sa"}}]},
     [], "admitted"),
]


@pytest.mark.parametrize(("spec", "pruned", "decision"), [c[1:] for c in PRUNED_TRAINJOB_CASES],
                         ids=[c[0] for c in PRUNED_TRAINJOB_CASES])
def test_fields_the_trainjob_crd_does_not_declare_are_reported_as_pruned(tmp_path, capsys, spec, pruned, decision):
    job = trainjob()
    job["spec"].update(spec)
    code, report = check_json(capsys, write(tmp_path / "trainjob.yaml", job), DEEPSPEED)
    result = report["results"][0]
    assert result["pruned"] == [
        {"path": path, "message": DROPPED_FROM_TRAINJOB + (f"; did you mean {hint}?" if hint else ""),
         "suggestion": hint} for path, hint in pruned]
    assert (result["decision"], code) == (decision, 0 if decision == "admitted" else 1)


def test_a_misspelt_numnodes_leaves_the_runtimes_count_and_the_webhook_says_so(tmp_path, capsys):
    job = trainjob()
    job["spec"]["trainer"] = {"numNode": 4}
    code, report = check_json(capsys, write(tmp_path / "trainjob.yaml", job), DEEPSPEED)
    (finding,) = report["results"][0]["findings"]
    assert (code, finding["rule"], finding["path"]) == (1, "worker-count", "spec.trainer.numNodes")
    assert "Required value: not set, and the Trainer controller then runs 1 node pod" in finding["message"]


def test_a_policy_pinned_to_v2_1_is_not_pruned_against_the_v2_3_crd(tmp_path, capsys):
    policy = tmp_path / "policy.yaml"
    policy.write_text("rules:\n  training-runtime:\n    params:\n      apiShape: v2.1\n")
    job = trainjob(numNodes=4)
    job["spec"]["trainer"]["numNode"] = 4
    v2_1_runtime = write(tmp_path / "runtime.yaml", runtime("runtimes/v2.1.0-v2.2.1/deepspeed_distributed.yaml"))
    code, report = check_json(capsys, write(tmp_path / "trainjob.yaml", job), v2_1_runtime, "--policy-file", policy)
    assert (code, report["results"][0]["pruned"]) == (0, [])


def test_the_text_report_shows_a_trainjobs_pruned_field(tmp_path, capsys):
    job = trainjob(numNodes=4, namespace="default")
    job["spec"]["runtimePatch"] = []
    trainjob_file = write(tmp_path / "trainjob.yaml", job)
    assert main(["check", str(trainjob_file), str(DEEPSPEED)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == [f"{trainjob_file}[0] TrainJob default/train: admitted",
                         f"  pruned  spec.runtimePatch: {DROPPED_FROM_TRAINJOB}; did you mean spec.runtimePatches?"]


@pytest.mark.parametrize(("pinned", "runtime_file", "start"), [
    (None, "runtimes/v2.1.0-v2.2.1/deepspeed_distributed.yaml",
     'Invalid value: "auto": must be a whole number on an MPI runtime ("auto", "cpu" and "gpu" choose processes'),
    ("v2.3", "runtimes/v2.3.0/deepspeed_distributed.yaml",
     'Invalid value: "auto": must be an integer, not a string: from Trainer v2.2 on'),
])
def test_a_string_num_proc_per_node_is_quoted_as_written(tmp_path, capsys, pinned, runtime_file, start):
    # a string proves v2.1 unless the policy pins another shape
    job = write(tmp_path / "trainjob.yaml", trainjob(numNodes=3, numProcPerNode="auto"))
    given = write(tmp_path / "runtime.yaml", runtime(runtime_file))
    policy = []
    if pinned:
        (tmp_path / "policy.yaml").write_text(f"rules:\n  training-runtime:\n    params:\n      apiShape: {pinned}\n")
        policy = ["--policy-file", tmp_path / "policy.yaml"]
    code, report = check_json(capsys, job, given, *policy)
    (finding,) = report["results"][0]["findings"]
    assert (code, finding["rule"], finding["path"]) == (1, "training-runtime", "spec.trainer.numProcPerNode")
    assert finding["message"].startswith(f"[training-runtime] spec.trainer.numProcPerNode: {start}"), finding["message"]
