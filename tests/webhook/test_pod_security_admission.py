"""``pod-security`` through /validate: the answer the API server gets for an MPIJob or a TrainJob
in a namespace with PodSecurity labels (denial, warning, audit annotation), and ``check
--cluster-state`` with Namespace objects."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from policies.cluster_view import StaticClusterView
from policies.config.layered_policy import Policy
from policies.registry import default_settings
from testing.app_client import webhook
from testing.builders import admission_review, mpijob
from testing.kube_objects import namespace
from tests.policies.trainer.trainer_data import runtime, trainjob, trainjob_review
from webhook.cli import main

LABEL = "pod-security.kubernetes.io/"
WORKER = "spec.mpiReplicaSpecs[Worker].template.spec.containers[0].securityContext"
DEEPSPEED = runtime("runtimes/v2.3.0/deepspeed_distributed.yaml")  # launcher and node: no securityContext hardening


def privileged_job(name: str = "pi") -> dict:
    job = mpijob(name)
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    return job


def validate(obj: dict, labels: dict, review=admission_review) -> dict:
    served = webhook(cluster=StaticClusterView(namespaces={"team-a": namespace("team-a", labels)},
                                               cluster_runtimes={"deepspeed-distributed": DEEPSPEED}),
                     policy=Policy(settings=default_settings().with_rule("training-runtime", api_shape="v2.3")))
    return served.review("/validate", review(obj))["response"]


def test_an_enforce_violation_is_denied_403_naming_replica_container_field_and_fix():
    response = validate(privileged_job(), {LABEL + "enforce": "baseline"})
    assert response["allowed"] is False
    assert response["status"]["code"] == 403 and response["status"]["reason"] == "Forbidden"
    assert response["status"]["message"] == (
        'MPIJob "pi" is forbidden: [pod-security] '
        f"{WORKER}.privileged: the Worker pods violate PodSecurity \"baseline:latest\" of namespace team-a "
        '(pod-security.kubernetes.io/enforce): check privileged, container "mpi-worker"; allowed: false, or unset; '
        "set securityContext.privileged: false, or remove it")
    assert response["auditAnnotations"]["denied-by"] == "pod-security"


def test_a_warn_namespace_admits_with_a_warning():
    response = validate(privileged_job(), {LABEL + "warn": "baseline"})
    assert response["allowed"] is True
    assert response["warnings"] == [
        f"[pod-security] {WORKER}.privileged: Worker pods would violate PodSecurity \"baseline:latest\" (warn label): "
        "check privileged; set securityContext.privileged: false, or remove it"]
    assert response["auditAnnotations"]["warned-by"] == "pod-security"


def test_an_audit_namespace_admits_silently_with_an_audit_entry():
    response = validate(privileged_job(), {LABEL + "audit": "baseline"})
    assert response["allowed"] is True and "warnings" not in response
    assert response["auditAnnotations"]["audited-by"] == "pod-security"


def test_a_trainjob_is_judged_by_its_effective_templates():
    job = trainjob(numNodes=3)
    assert validate(job, {LABEL + "enforce": "baseline"}, trainjob_review)["allowed"] is True
    response = validate(job, {LABEL + "enforce": "restricted"}, trainjob_review)
    assert response["allowed"] is False and response["status"]["code"] == 403
    lines = response["status"]["message"].split("\n")
    # the runtime's fields, named with the runtime, reported at the TrainJob's field that chose it
    assert lines[0].startswith("TrainJob \"train\" is forbidden: [pod-security] "
                               "spec.runtimeRef.name: ClusterTrainingRuntime deepspeed-distributed: spec.template.spec."
                               "replicatedJobs[")
    assert any("the TrainJob's node pods violate PodSecurity \"restricted:latest\"" in line for line in lines)
    assert any("the TrainJob's launcher pods violate PodSecurity \"restricted:latest\"" in line for line in lines)
    # a pod field a patch of the TrainJob writes is reported at the patch
    job["spec"]["runtimePatches"] = [{"manager": "example.com/team", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {"hostNetwork": True}}}}}]}}}}]
    response = validate(job, {LABEL + "enforce": "baseline"}, trainjob_review)
    assert response["allowed"] is False
    assert response["status"]["message"].startswith(
        'TrainJob "train" is forbidden: [pod-security] spec.runtimePatches[0].trainingRuntimeSpec.'
        "template.spec.replicatedJobs[0].template.spec.template.spec.hostNetwork: the TrainJob's node pods violate "
        'PodSecurity "baseline:latest" of namespace team-a (pod-security.kubernetes.io/enforce): check hostNamespaces')


def test_check_reads_pod_security_labels_from_namespace_objects(tmp_path: Path, capsys):
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(yaml.safe_dump_all([{**privileged_job(), "metadata": {"name": "pi", "namespace": "secure"}},
                                        {**privileged_job("open"), "metadata": {"name": "open", "namespace": "open"}}]))
    state = tmp_path / "state.yaml"
    state.write_text(yaml.safe_dump_all([namespace("secure", {LABEL + "enforce": "baseline"}),
                                         namespace("open", {LABEL + "warn": "baseline"})]))
    code = main(["check", "--output", "json", "--cluster-state", str(state), str(jobs)])
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    denied, warned = report["results"]
    assert denied["decision"] == "denied" and denied["status"]["code"] == 403
    assert [(f["rule"], f["path"], f["action"]) for f in denied["findings"]] == [
        ("pod-security", f"{WORKER}.privileged", "deny")]
    assert warned["decision"] == "admitted"
    assert [(f["rule"], f["action"]) for f in warned["findings"]] == [("pod-security", "warn")]
    assert "pod-security" not in warned["skipped"]
