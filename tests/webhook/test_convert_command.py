"""``mpijob-webhook convert``: converted YAML on stdout, explanations on stderr, exit 0 / 1 / 2."""
from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from policies.conversion import PROBLEMS_ANNOTATION, STASH_ANNOTATION, convert
from policies.conversion.tree import display
from tests.conftest import ROOT, UPSTREAM
from tests.conversion.common import without_stash
from webhook.cli import main

V1ALPHA1_EXAMPLES = sorted((UPSTREAM / "v1alpha1").glob("*.yaml"))
SSHD = "v2beta1 launchers use SSH: the worker image must run sshd"


def write(path: Path, *objects: object) -> Path:
    path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    return path


def run(capsys, *args: object) -> tuple[int, list[dict], str]:
    code = main(["convert", *map(str, args)])
    captured = capsys.readouterr()
    return code, [d for d in yaml.safe_load_all(captured.out) if d is not None], captured.err


def test_v1alpha1_examples_convert_and_need_attention_for_sshd(capsys):
    code, docs, err = run(capsys, *V1ALPHA1_EXAMPLES, "--to", "kubeflow.org/v2beta1")
    assert code == 1
    assert [d["metadata"]["name"] for d in docs] == [
        "mxnet-mnist-horovod-job", "tensorflow-benchmarks-16-custom", "tensorflow-benchmarks-16"]
    for doc, path in zip(docs, V1ALPHA1_EXAMPLES):
        assert doc == without_stash(convert(yaml.safe_load(path.read_text()), "kubeflow.org/v2beta1").obj)
        assert STASH_ANNOTATION not in doc["metadata"].get("annotations", {})  # clean manifests by default
    lines = err.splitlines()
    assert lines[0] == (f"{V1ALPHA1_EXAMPLES[0]}[0] MPIJob default/mxnet-mnist-horovod-job: "
                        "kubeflow.org/v1alpha1 -> kubeflow.org/v2beta1")
    assert err.count(SSHD) == 3


def test_a_v1_job_converts_and_needs_attention_only_for_sshd(capsys):
    code, [doc], err = run(capsys, UPSTREAM / "v1" / "horovod-tensorflow-mnist.yaml")  # --to defaults to v2beta1
    assert code == 1
    assert doc["apiVersion"] == "kubeflow.org/v2beta1"
    assert doc["spec"]["runPolicy"] == {"cleanPodPolicy": "Running"}
    assert err.splitlines() == [
        f"{UPSTREAM / 'v1' / 'horovod-tensorflow-mnist.yaml'}[0] MPIJob tensorflow-mnist: "
        "kubeflow.org/v1 -> kubeflow.org/v2beta1",
        "  attention: kubeflow.org/v1 workers ran `sleep` and the launcher reached them with `kubectl exec`; "
        "v2beta1 launchers use SSH: the worker image must run sshd (e.g. command /usr/sbin/sshd -De) with the SSH "
        "and MPI set-up of the mpi-operator v2 images"]


def test_a_conversion_with_nothing_to_point_out_exits_0(capsys):
    code, [doc], err = run(capsys, UPSTREAM / "v2beta1" / "horovod-tensorflow-mnist.yaml", "--to", "v1alpha2")
    assert code == 0
    assert doc["apiVersion"] == "kubeflow.org/v1alpha2"
    assert STASH_ANNOTATION not in doc["metadata"].get("annotations", {})
    assert err.splitlines() == [f"{UPSTREAM / 'v2beta1' / 'horovod-tensorflow-mnist.yaml'}[0] MPIJob tensorflow-mnist: "
                                "kubeflow.org/v2beta1 -> kubeflow.org/v1alpha2"]


def test_a_job_the_old_operator_refused_is_converted_and_explained(tmp_path, capsys):
    job = yaml.safe_load((UPSTREAM / "v1alpha1" / "tensorflow-benchmarks-gpus16.yaml").read_text())
    job["spec"]["gpus"] = 12
    code, [doc], err = run(capsys, write(tmp_path / "bench.yaml", job), "--gpus-per-node", "4")
    assert code == 1
    assert doc["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 3  # 12 over 4-GPU nodes: a valid total
    assert PROBLEMS_ANNOTATION not in doc["metadata"].get("annotations", {})
    assert doc["spec"]["slotsPerWorker"] == 4
    assert "  problem:" not in err  # 12 is a multiple of 4

    code, [doc], err = run(capsys, tmp_path / "bench.yaml")  # 8 per node by default
    assert code == 1
    assert doc["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
    assert ("  problem: spec.gpus: 12: not a multiple of 8 per node (the webhook's --gpus-per-node; set "
            "spec.gpusPerNode to change it)") in err
    assert "(converted anyway; fix it before applying)" in err


def test_converting_to_an_older_version_names_what_it_cannot_hold(capsys):
    code, [doc], err = run(capsys, UPSTREAM / "v2beta1" / "pi.yaml", "--to", "v1alpha1")
    assert code == 1
    assert doc["apiVersion"] == "kubeflow.org/v1alpha1"
    assert ("attention: kubeflow.org/v1alpha1 cannot hold spec.runPolicy.cleanPodPolicy, "
            "spec.runPolicy.ttlSecondsAfterFinished, spec.sshAuthMountPath, ") in err
    assert "spec.mpiReplicaSpecs[Worker].template.spec.containers[0].command" in err
    assert "dropped (--keep-conversion-data keeps them in an annotation)" in err


def test_keep_conversion_data_converts_back_without_loss(tmp_path, capsys):
    pi = yaml.safe_load((UPSTREAM / "v2beta1" / "pi.yaml").read_text())
    code, [old], err = run(capsys, UPSTREAM / "v2beta1" / "pi.yaml", "--to", "v1alpha1", "--keep-conversion-data")
    assert STASH_ANNOTATION in old["metadata"]["annotations"]
    assert "kept in the mpijob-webhook.kubeflow.org/conversion-data annotation" in err
    code, [back], _ = run(capsys, write(tmp_path / "old.yaml", old), "--to", "v2beta1")
    assert back == pi


def test_other_objects_and_lists_pass_through(tmp_path, capsys):
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}}
    job = yaml.safe_load((UPSTREAM / "v1" / "horovod-tensorflow-mnist.yaml").read_text())
    listed = {"apiVersion": "v1", "kind": "List", "items": [job]}
    code, docs, err = run(capsys, write(tmp_path / "all.yaml", service, listed))
    assert code == 1  # the v1 job: sshd
    assert docs[0] == service
    assert docs[1]["apiVersion"] == "kubeflow.org/v2beta1"
    assert f"{tmp_path / 'all.yaml'}[0] v1 Service x: not an MPIJob, unchanged" in err


def test_a_job_already_in_the_target_version_is_unchanged(capsys):
    code, [doc], err = run(capsys, UPSTREAM / "v2beta1" / "pi.yaml")
    assert code == 0
    assert doc == yaml.safe_load((UPSTREAM / "v2beta1" / "pi.yaml").read_text())
    assert "already kubeflow.org/v2beta1, unchanged" in err


def test_stdin(capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO((UPSTREAM / "v1alpha2" / "horovod-tensorflow-mnist.yaml").read_text()))
    code, [doc], err = run(capsys, "-")
    assert code == 1
    assert doc["apiVersion"] == "kubeflow.org/v2beta1"
    assert err.startswith("<stdin>[0] MPIJob tensorflow-mnist: kubeflow.org/v1alpha2 -> kubeflow.org/v2beta1")


@pytest.mark.parametrize(("content", "message"), [
    ("kind: [", "<file>: not valid YAML at line 1 column 8: expected the node content"),
    ("- 1\n- 2\n", "<file>[0]: expected a Kubernetes object (a mapping), got list"),
    ("apiVersion: kubeflow.org/v3\nkind: MPIJob\nmetadata: {name: x}\n",
     "<file>[0]: apiVersion 'kubeflow.org/v3' is not an MPIJob version this webhook converts"),
    ("apiVersion: kubeflow.org/v1\nkind: MPIJob\nmetadata: [x]\n", "<file>[0]: metadata must be an object"),
], ids=["yaml", "not-a-mapping", "unknown-version", "bad-metadata"])
def test_bad_input_exits_2_and_prints_nothing(tmp_path, capsys, content, message):
    good = UPSTREAM / "v1" / "horovod-tensorflow-mnist.yaml"
    bad = tmp_path / "bad.yaml"
    bad.write_text(content)
    code, docs, err = run(capsys, good, bad)
    assert code == 2
    assert docs == []
    assert f"error: {message.replace('<file>', str(bad))}" in err


def test_a_missing_file_exits_2(tmp_path, capsys):
    code, docs, err = run(capsys, tmp_path / "nope.yaml")
    assert (code, docs) == (2, [])
    assert f"error: {tmp_path / 'nope.yaml'}: cannot be read" in err


@pytest.mark.parametrize("args", [["--to", "v3"], ["--gpus-per-node", "0"], ["--gpus-per-node", "many"]])
def test_bad_options_are_usage_errors(args, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["convert", str(UPSTREAM / "v1" / "horovod-tensorflow-mnist.yaml"), *args])
    assert exit_info.value.code == 2
    assert "mpijob-webhook convert: error: argument" in capsys.readouterr().err


def test_the_console_script_runs_it():
    result = subprocess.run([sys.executable, "-m", "webhook", "convert", str(V1ALPHA1_EXAMPLES[2])],
                            capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.returncode == 1
    assert yaml.safe_load(result.stdout)["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
    assert SSHD in result.stderr


# --- output people commit, and every field it loses named ----------------------------------------
SHARED_TEMPLATE_V1ALPHA1 = {
    "apiVersion": "kubeflow.org/v1alpha1", "kind": "MPIJob", "metadata": {"name": "anchors"},
    "spec": {"replicas": 2, "template": {"spec": {
        "securityContext": {"runAsUser": 1000},
        "containers": [{"name": "main", "image": "example.com/train:1", "securityContext": {"runAsNonRoot": True},
                        "env": [{"name": "A", "value": "b"}]}]}}},
}


def anchors_and_aliases(text: str) -> list[str]:
    """Every anchor (``&id001``) and alias (``*id001``) in a YAML stream, read by the YAML parser."""
    return [f"{type(event).__name__} {event.anchor}" for event in yaml.parse(text)
            if getattr(event, "anchor", None) is not None]


@pytest.mark.parametrize("target", ["v2beta1", "v1", "v1alpha2", "v1alpha1"])
def test_converted_yaml_has_no_anchors_or_aliases(tmp_path, capsys, target):
    """One v1alpha1 template becomes the Launcher's and the Worker's: the same subtrees twice,
    which a YAML writer would otherwise print once with an anchor and then as aliases."""
    shared = write(tmp_path / "shared.yaml", SHARED_TEMPLATE_V1ALPHA1)
    examples = sorted(p for p in UPSTREAM.glob("v*/*.yaml"))
    main(["convert", "--to", target, str(shared), *map(str, examples)])
    out = capsys.readouterr().out
    assert anchors_and_aliases(out) == []
    docs = [d for d in yaml.safe_load_all(out) if d is not None]
    assert len(docs) == 1 + len(examples)
    if target == "v2beta1":
        launcher, worker = (docs[0]["spec"]["mpiReplicaSpecs"][r]["template"]["spec"] for r in ("Launcher", "Worker"))
        assert launcher["securityContext"] == worker["securityContext"] == {"runAsUser": 1000}
        assert launcher["containers"][0]["env"] == worker["containers"][0]["env"] == [{"name": "A", "value": "b"}]


def test_policy_yaml_has_no_anchors_or_aliases(capsys):
    main(["policy", "defaults"])
    assert anchors_and_aliases(capsys.readouterr().out) == []


def test_converting_to_v1alpha1_names_every_field_it_cannot_hold(tmp_path, capsys):
    job = yaml.safe_load((UPSTREAM / "v2beta1" / "pi.yaml").read_text())
    job["spec"]["runPolicy"].update(activeDeadlineSeconds=600, backoffLimit=3, suspend=True,
                                    schedulingPolicy={"minAvailable": 3, "queue": "team-a"})
    job["spec"].update(mpiImplementation="Intel", launcherCreationPolicy="WaitForWorkersReady",
                       runLauncherAsWorker=False)
    for role in ("Launcher", "Worker"):
        job["spec"]["mpiReplicaSpecs"][role]["template"]["metadata"] = {"labels": {"role": role.lower()}}
    expected = [display(path) for path in convert(job, "kubeflow.org/v1alpha1").dropped]
    assert len(expected) > 8  # more than were ever listed before "and N more"
    code, _, err = run(capsys, write(tmp_path / "big.yaml", job), "--to", "v1alpha1")
    assert code == 1
    assert (f"  attention: kubeflow.org/v1alpha1 cannot hold {', '.join(expected)}: "
            "dropped (--keep-conversion-data keeps them in an annotation)") in err.splitlines()
    assert " more" not in err
