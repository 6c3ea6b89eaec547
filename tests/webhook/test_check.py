"""``mpijob-webhook check``: the webhook's verdict on manifests, exit codes and the JSON report."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonpatch
import pytest
import yaml

from policies.registry import RULES
from testing.builders import mpijob
from tests.conftest import ROOT, UPSTREAM
from testing.kube_objects import namespace, resource_quota
from webhook.cli import main

CLUSTER_RULES = [r.id for r in RULES if r.needs_cluster]
RESULT_KEYS = ["source", "document", "apiVersion", "kind", "namespace", "name", "decision", "reason", "status",
               "findings", "warnings", "skipped", "mutations", "pruned"]
SLOTS_DENIAL = ("[slots-per-worker] spec.slotsPerWorker: Invalid value: 9: slotsPerWorker must be between 1 and 8 "
                "(asked 9); set spec.slotsPerWorker to 8, and use more workers for more ranks")


def write(path: Path, *objects: object) -> Path:
    path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    return path


def check_json(capsys, *args: str) -> tuple[int, dict]:
    code = main(["check", "--output", "json", *map(str, args)])
    return code, json.loads(capsys.readouterr().out)


def test_an_admissible_job_exits_0_and_previews_the_mutation(tmp_path, capsys):
    job = mpijob("pi")
    code, report = check_json(capsys, write(tmp_path / "pi.yaml", job))
    assert code == 0
    assert report["exitCode"] == 0
    assert report["summary"] == {"documents": 1, "admitted": 1, "denied": 0, "ignored": 0, "errors": 0}
    [result] = report["results"]
    assert list(result) == RESULT_KEYS
    assert result["decision"] == "admitted"
    assert result["findings"] == []
    assert result["skipped"] == CLUSTER_RULES
    assert "istio-sidecar-off" in result["mutations"]["applied"]
    mutated = jsonpatch.apply_patch(job, result["mutations"]["patch"])
    for role in ("Launcher", "Worker"):
        assert mutated["spec"]["mpiReplicaSpecs"][role]["template"]["metadata"]["labels"] == {
            "sidecar.istio.io/inject": "false"}


def test_a_denied_job_exits_1_with_the_webhooks_message(tmp_path, capsys):
    code, report = check_json(capsys, write(tmp_path / "pi.yaml", mpijob("pi", slots=9)))
    assert code == 1
    [result] = report["results"]
    assert result["decision"] == "denied"
    assert result["status"] == {"code": 422, "reason": "Invalid",
                                "message": f'MPIJob.kubeflow.org "pi" is invalid: {SLOTS_DENIAL}'}
    assert result["findings"] == [{"rule": "slots-per-worker", "action": "deny", "path": "spec.slotsPerWorker",
                                   "message": SLOTS_DENIAL}]


def test_the_text_report_lists_each_finding_and_a_summary(tmp_path, capsys):
    path = write(tmp_path / "pi.yaml", mpijob("pi", slots=9), {"apiVersion": "v1", "kind": "ConfigMap",
                                                              "metadata": {"name": "settings"}})
    assert main(["check", str(path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{path}[0] MPIJob default/pi: denied"
    assert lines[1] == f"  deny    {SLOTS_DENIAL}"
    assert lines[2] == f"  skipped {', '.join(CLUSTER_RULES)} (no --cluster-state given)"
    assert f"{path}[1] v1 ConfigMap default/settings: ignored (not an MPIJob)" in lines
    assert lines[-1] == "2 documents: 0 admitted, 1 denied, 1 ignored"


def test_a_policy_file_changes_the_verdict(tmp_path, capsys):
    policy = tmp_path / "policy.yaml"
    policy.write_text("rules:\n  slots-per-worker: warn\n")
    code, report = check_json(capsys, write(tmp_path / "pi.yaml", mpijob("pi", slots=9)), "--policy-file", policy)
    assert code == 0
    [result] = report["results"]
    assert result["decision"] == "admitted"
    assert result["findings"][0]["action"] == "warn"
    assert result["warnings"] == [SLOTS_DENIAL]


def test_an_exempt_namespace_is_admitted_unchecked(tmp_path, capsys):
    code, report = check_json(capsys, write(tmp_path / "pi.yaml", mpijob("pi", slots=9, namespace="kube-system")))
    assert code == 0
    assert report["results"][0]["reason"] == "exempt"


def test_pruned_fields_are_reported_with_a_hint(tmp_path, capsys):
    job = mpijob("pi", cleanPodPolicy="All")
    code, report = check_json(capsys, write(tmp_path / "pi.yaml", job))
    assert code == 0
    assert report["results"][0]["pruned"] == [{
        "path": "spec.cleanPodPolicy",
        "message": "unknown field: the API server drops it from a kubeflow.org/v2beta1 MPIJob; "
                   "did you mean spec.runPolicy.cleanPodPolicy?",
        "suggestion": "spec.runPolicy.cleanPodPolicy"}]


def test_cluster_rules_run_against_a_cluster_state_file(tmp_path, capsys):
    state = write(tmp_path / "cluster.yaml",
                  resource_quota("small", {"limits.cpu": 2}, namespace="team-a"),
                  namespace("team-a", {"team": "research"}))
    job = mpijob("pi", namespace="team-a")
    code, report = check_json(capsys, write(tmp_path / "pi.yaml", job), "--cluster-state", state)
    assert code == 1
    [result] = report["results"]
    assert result["skipped"] == []
    assert [(f["rule"], f["action"]) for f in result["findings"]] == [("resource-quota", "deny")]
    assert result["status"]["code"] == 403
    assert report["clusterState"] is True


def test_namespace_labels_from_the_cluster_state_select_overrides(tmp_path, capsys):
    policy = tmp_path / "policy.yaml"
    policy.write_text("overrides:\n- namespaceSelector: {matchLabels: {team: research}}\n"
                      "  rules: {slots-per-worker: audit}\n")
    state = write(tmp_path / "cluster.yaml", namespace("team-a", {"team": "research"}))
    job = mpijob("pi", slots=9, namespace="team-a")
    code, report = check_json(capsys, write(tmp_path / "pi.yaml", job), "--policy-file", policy,
                              "--cluster-state", state)
    assert code == 0
    assert [(f["rule"], f["action"]) for f in report["results"][0]["findings"]][0] == ("slots-per-worker", "audit")


@pytest.mark.parametrize(("content", "message"), [
    ("kind: [\n", "not valid YAML at line 2 column 1: expected the node content, but found '<stream end>'"),
    ("- just\n- a list\n", "expected a Kubernetes object (a mapping), got list"),
    ("metadata: {name: x}\n", "not a Kubernetes object: apiVersion and kind are required"),
    ("apiVersion: v1\nkind: List\nitems: [3]\n", "List.items must be a list of objects"),
], ids=["yaml", "not-a-mapping", "no-kind", "bad-list"])
def test_malformed_input_exits_2_with_a_reason(tmp_path, capsys, content, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text(content)
    good = write(tmp_path / "pi.yaml", mpijob("pi"))
    code, report = check_json(capsys, good, bad)
    assert code == 2
    assert report["exitCode"] == 2
    assert report["summary"]["admitted"] == 1  # the readable file is still reported
    [error] = report["errors"]
    assert error["source"] == str(bad)
    assert error["message"] == message


def test_a_missing_file_an_invalid_policy_and_unknown_cluster_kinds_exit_2(tmp_path, capsys):
    good = write(tmp_path / "pi.yaml", mpijob("pi"))
    code, report = check_json(capsys, tmp_path / "absent.yaml")
    assert (code, report["errors"][0]["message"]) == (2, "cannot be read: No such file or directory")
    policy = tmp_path / "policy.yaml"
    policy.write_text("rules: {worker-cont: warn}\n")
    code, report = check_json(capsys, good, "--policy-file", policy)
    assert code == 2
    assert report["errors"][0]["message"].startswith(
        "invalid policy: line 1: rules.worker-cont: unknown rule id 'worker-cont'; did you mean worker-count?")
    state = write(tmp_path / "cluster.yaml", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})
    code, report = check_json(capsys, good, "--cluster-state", state)
    assert code == 2
    assert report["errors"] == [{"source": str(state), "document": 0, "message":
                                 "kind Pod is not cluster state the rules read; expected one of ResourceQuota, "
                                 "LimitRange, Node, Namespace, LocalQueue, MPIJob, ClusterTrainingRuntime, "
                                 "TrainingRuntime, TrainJob"}]


def test_a_list_object_is_checked_item_by_item(tmp_path, capsys):
    path = write(tmp_path / "list.yaml", {"apiVersion": "v1", "kind": "List",
                                          "items": [mpijob("a"), mpijob("b", slots=9)]})
    code, report = check_json(capsys, path)
    assert code == 1
    assert [(r["name"], r["decision"]) for r in report["results"]] == [("a", "admitted"), ("b", "denied")]


@pytest.mark.parametrize("name", sorted(p.name for p in (UPSTREAM / "v2beta1").glob("*.yaml")))
def test_the_upstream_examples_are_admitted(capsys, name):
    code, report = check_json(capsys, UPSTREAM / "v2beta1" / name)
    assert code == 0, report
    assert report["results"][0]["pruned"] == []


def test_stdin_through_the_real_console_script():
    manifest = yaml.safe_dump(mpijob("pi", slots=9))
    run = subprocess.run([sys.executable, "-m", "webhook", "check", "-o", "json", "-"], input=manifest,
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert run.returncode == 1, run.stderr
    report = json.loads(run.stdout)
    assert report["results"][0]["source"] == "<stdin>"
    assert report["results"][0]["findings"][0]["message"] == SLOTS_DENIAL
