"""``mpijob-webhook export vap`` for TrainJobs: the policies and bindings it prints, as objects
the API server accepts."""
from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from policies.vap.shared_parts import PREFIX as SHARED
from tests.vap.corpus import ACTIONS_POLICY
from tests.vap.schema_reads import unshared
from webhook.cli import main as cli

TRAINJOB_RULES = ("job-name", "launcher", "worker-count", "slots-per-worker", "training-runtime", "gpus-per-worker")
DEFAULT_RULES = ("launcher", "worker-count")
LABELS = {"app.kubernetes.io/part-of": "mpijob-webhook", "mpijob-webhook.kubeflow.org/exported-policy": "mpijob-webhook"}


def export(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict]:
    assert cli(["export", "vap", *args]) == 0
    return list(yaml.safe_load_all(capsys.readouterr().out))


def _named(documents: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in documents if d["kind"] == kind}


@pytest.mark.parametrize(("option", "rules"), [((), DEFAULT_RULES), (("--trainjob-rules", "all"), TRAINJOB_RULES)])
def test_each_rule_gets_a_policy_per_runtime_kind(capsys, option: tuple[str, ...], rules: tuple[str, ...]) -> None:
    documents = export(capsys, "--kind", "trainjob", *option)
    policies = _named(documents, "ValidatingAdmissionPolicy")
    assert list(policies) == ([f"mpijob-webhook-trainjob-{r}" for r in rules]
                              + [f"mpijob-webhook-trainjob-ns-{r}" for r in rules])
    assert list(_named(documents, "ValidatingAdmissionPolicyBinding")) == list(policies)


def test_the_default_export_is_a_part_of_the_whole(capsys) -> None:
    """Each rule is its own policies: the default export's objects are those of ``all``, word for word."""
    default = export(capsys)
    every = export(capsys, "--trainjob-rules", "all")
    assert [d for d in every if d in default] == default


def test_the_policy_matches_trainjobs_and_takes_the_runtime_as_params(capsys) -> None:
    documents = export(capsys, "--kind", "trainjob")
    for name, kind in (("mpijob-webhook-trainjob-worker-count", "ClusterTrainingRuntime"),
                       ("mpijob-webhook-trainjob-ns-worker-count", "TrainingRuntime")):
        policy = _named(documents, "ValidatingAdmissionPolicy")[name]
        assert policy["metadata"] == {"name": name, "labels": {**LABELS, "mpijob-webhook.kubeflow.org/rule": "worker-count"}}
        spec = policy["spec"]
        assert list(spec) == ["failurePolicy", "paramKind", "matchConstraints", "variables", "validations"]
        assert spec["failurePolicy"] == "Fail"
        assert spec["paramKind"] == {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": kind}
        assert spec["matchConstraints"] == {"matchPolicy": "Equivalent", "resourceRules": [{
            "apiGroups": ["trainer.kubeflow.org"], "apiVersions": ["v1alpha1"], "operations": ["CREATE", "UPDATE"],
            "resources": ["trainjobs"], "scope": "Namespaced"}]}
        assert [v["name"] for v in spec["variables"] if not v["name"].startswith(SHARED)] == [
            "enforced", "param_min", "param_max", "runtimeJobs", "runtimeJobNames", "launcherAsNode", "runtimeLabel",
            *(f"{job}{v}" for job in ("launcher", "node") for v in ("Jobs", "CountSet", "Count", "Pods", "CountPath")),
            "kueueAdmission", "judged", "workers", "workersOld"]
        judged = next(v["expression"] for v in unshared(policy)["spec"]["variables"] if v["name"] == "judged")
        assert f"== '{kind}'" in judged and "has(params.spec.mlPolicy.mpi)" in judged
        assert "params.metadata.name == object.spec.runtimeRef.name" in judged
        (validation,) = spec["validations"]
        assert validation["expression"] == ("!variables.enforced || !variables.judged || (variables.workers == '' || "
                                            "variables.workers == variables.workersOld) || variables.kueueAdmission")
        assert validation["messageExpression"] == "variables.workers"
        assert validation["reason"] == "Invalid"
        binding = _named(documents, "ValidatingAdmissionPolicyBinding")[name]
        assert binding == {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": policy["metadata"],
            "spec": {"policyName": name, "validationActions": ["Deny"],
                     "paramRef": {"selector": {}, "parameterNotFoundAction": "Allow"},
                     "matchResources": {"namespaceSelector": {"matchExpressions": [{
                         "key": "kubernetes.io/metadata.name", "operator": "NotIn",
                         "values": ["kube-system", "mpijob-webhook"]}]}}},
        }


def test_the_kind_option_chooses_the_jobs(capsys) -> None:
    every = _named(export(capsys), "ValidatingAdmissionPolicy")
    mpijobs = _named(export(capsys, "--kind", "mpijob"), "ValidatingAdmissionPolicy")
    trainjobs = _named(export(capsys, "--kind", "trainjob"), "ValidatingAdmissionPolicy")
    assert list(every) == [*mpijobs, *trainjobs]
    assert not any("trainjob" in name for name in mpijobs)


def test_a_rule_with_several_actions_gets_a_policy_per_action_and_runtime_kind(capsys, tmp_path: Path) -> None:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(ACTIONS_POLICY)
    bindings = _named(export(capsys, "--policy-file", str(policy_file), "--name", "guard", "--kind", "trainjob"),
                      "ValidatingAdmissionPolicyBinding")
    assert {name: b["spec"]["validationActions"] for name, b in bindings.items() if "worker-count" in name} == {
        "guard-trainjob-worker-count-warn": ["Warn"], "guard-trainjob-worker-count-deny": ["Deny"],
        "guard-trainjob-ns-worker-count-warn": ["Warn"], "guard-trainjob-ns-worker-count-deny": ["Deny"]}


@pytest.mark.parametrize(("shape", "reads", "never"), [("v2.1", "podTemplateOverrides", "runtimePatches"),
                                                        ("v2.3", "runtimePatches", "podTemplateOverrides"),
                                                        ("auto", "podTemplateOverrides", "")])
def test_a_pinned_api_shape_reads_only_its_patch_list(capsys, tmp_path: Path, shape: str, reads: str,
                                                      never: str) -> None:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(f"rules:\n  training-runtime: {{params: {{apiShape: {shape}}}}}\n")
    documents = export(capsys, "--policy-file", str(policy_file), "--kind", "trainjob", "--trainjob-rules", "all")
    spec = _named(documents, "ValidatingAdmissionPolicy")["mpijob-webhook-trainjob-training-runtime"]["spec"]
    # What the checks read (Kueue's own entry is recognised whatever the shape: kueueAdmission)
    text = yaml.safe_dump([v for v in spec["variables"] if v["name"] != "kueueAdmission"])
    assert reads in text
    if never:
        assert never not in text


@pytest.mark.parametrize("version", ["1.30", "1.36"])
def test_every_exported_trainjob_object_is_valid_kubernetes(capsys, tmp_path: Path, version: str) -> None:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(ACTIONS_POLICY)
    for document in export(capsys, "--policy-file", str(policy_file), "--kind", "trainjob", "--trainjob-rules", "all"):
        kubernetes_validate.validate(document, version, strict=True)


def test_every_variable_name_is_declared_once(capsys) -> None:
    """A check's variables and the shared ones share one namespace: a clash would make an
    expression read another's value (or itself)."""
    for policy in _named(export(capsys, "--kind", "trainjob", "--trainjob-rules", "all"),
                         "ValidatingAdmissionPolicy").values():
        names = [v["name"] for v in policy["spec"]["variables"]]
        assert len(names) == len(set(names)), policy["metadata"]["name"]
