"""``mpijob-webhook check --vap`` on TrainJobs: what the exported policies alone answer, with the
runtimes given beside the TrainJob (or in the cluster state) handed in as their params."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.policies.trainer.trainer_data import runtime
from tests.vap.trainjob_corpus import job
from webhook.cli import main as cli

ODH = "runtimes/opendatahub/openmpi_cuda.yaml"


def _files(tmp_path: Path, *documents: dict) -> list[str]:
    paths = []
    for index, document in enumerate(documents):
        path = tmp_path / f"doc-{index}.yaml"
        path.write_text(yaml.safe_dump(document))
        paths.append(str(path))
    return paths


def test_a_trainjob_is_judged_with_the_runtime_given_beside_it(capsys, tmp_path: Path) -> None:
    code = cli(["check", "--vap", *_files(tmp_path, job(numNodes=120), runtime(ODH))])
    out = capsys.readouterr().out
    assert code == 1
    assert "  vap     denied by the exported policies alone" in out
    assert ("  vap deny    [worker-count] spec.trainer.numNodes: Invalid value: 120: at most 100 nodes besides the "
            "launcher's are allowed (asked 120: 119 besides the launcher's node); set spec.trainer.numNodes to 101 "
            "or fewer") in out


def test_a_runtime_problem_is_left_to_the_webhook_by_default(capsys, tmp_path: Path) -> None:
    """``check --vap`` answers with the default export, which leaves ``training-runtime`` to the
    webhook (docs/vap.md, "Left to the webhook")."""
    broken = runtime(ODH)
    broken["spec"]["mlPolicy"]["mpi"]["mpiImplementation"] = "Intel"
    cli(["check", "--vap", "-o", "json", *_files(tmp_path, job(numNodes=3), broken)])
    (result, _) = json.loads(capsys.readouterr().out)["results"]
    assert result["vap"] == {"decision": "admitted", "deny": [], "warn": [], "audit": []}
    assert [f["rule"] for f in result["findings"]] == ["training-runtime"]


def test_without_its_runtime_the_policies_admit_what_the_webhook_cannot_check(capsys, tmp_path: Path) -> None:
    cli(["check", "--vap", "-o", "json", *_files(tmp_path, job(numNodes=120))])
    (result,) = json.loads(capsys.readouterr().out)["results"]
    assert result["vap"] == {"decision": "admitted", "deny": [], "warn": [], "audit": []}
    assert [f["rule"] for f in result["findings"]] == ["cluster-state"]


def test_a_trainingruntime_of_the_cluster_state_is_read(capsys, tmp_path: Path) -> None:
    local = runtime(ODH)
    local["kind"] = "TrainingRuntime"
    local["metadata"] = {"name": "local", "namespace": "team-a"}
    local["spec"]["mlPolicy"]["numNodes"] = 2
    state = tmp_path / "cluster.yaml"
    state.write_text(yaml.safe_dump(local))
    (trainjob,) = _files(tmp_path, job("local", kind="TrainingRuntime", numNodes=3))
    cli(["check", "--vap", "-o", "json", "--cluster-state", str(state), trainjob])
    (result,) = json.loads(capsys.readouterr().out)["results"]
    assert [m.split(":")[0] for m in result["vap"]["deny"]] == ["[launcher] spec.runtimeRef.name"]
