"""Every upstream v2beta1 example is admitted under the default policy, and for every rule a
variant of each example that breaks it is denied by that rule alone, at the right field, with
the numbers in the message.

The examples are used as written: no CRD defaults applied (some lack slotsPerWorker,
sshAuthMountPath or mpiImplementation), exactly as a job converted from an older version arrives.
"""
from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from policies import messages
from policies.interface import Problem
from policies.engine import evaluate
from testing.builders import context
from tests.conftest import upstream_v2beta1_jobs

MANIFESTS = upstream_v2beta1_jobs()
LAUNCHER = "spec.mpiReplicaSpecs[Launcher]"
WORKER = "spec.mpiReplicaSpecs[Worker]"
CLUSTER_STATE = "cluster-state"  # cluster-aware rules report that they were skipped (no cluster here)


def test_the_upstream_examples_are_there():
    assert set(MANIFESTS) >= {"pi.yaml", "pi-intel.yaml", "horovod-tensorflow-mnist.yaml"}


@pytest.mark.parametrize("manifest", sorted(MANIFESTS))
def test_every_upstream_example_is_admitted_without_a_word(manifest):
    verdict = evaluate(context(copy.deepcopy(MANIFESTS[manifest])))
    assert verdict.allowed, [messages.line(f) for f in verdict.denials]
    assert [o.finding.rule for o in verdict.outcomes if o.finding.rule != CLUSTER_STATE] == []


@dataclass(frozen=True)
class Breaker:
    rule: str
    path: str
    says: tuple[str, ...]  # parts of the message line, numbers included
    edit: Callable[[dict], None]
    problem: Problem = Problem.INVALID
    context: dict = field(default_factory=dict)


def _replica(job: dict, role: str) -> dict:
    return job["spec"]["mpiReplicaSpecs"][role]


def _container(job: dict, role: str) -> dict:
    return _replica(job, role)["template"]["spec"]["containers"][0]


def _set_name(name: str) -> Callable[[dict], None]:
    return lambda job: job["metadata"].update(name=name)


def _generate_name(prefix: str) -> Callable[[dict], None]:
    def edit(job: dict) -> None:
        job["metadata"] = {"generateName": prefix}
    return edit


BREAKERS = {
    "name-too-long": Breaker(
        "job-name", "metadata.name",
        ("-worker-1\" (64 characters) is over the 63 allowed", "with 2 workers the name may be at most 54 characters",
         "shorten it by 1"),
        _set_name("n" * 55)),
    "name-not-a-label": Breaker(
        "job-name", "metadata.name", ('Invalid value: "Pi.v2"', "DNS-1035 label", 'e.g. "pi-v2"'),
        _set_name("Pi.v2")),
    "generate-name-too-long": Breaker(
        "job-name", "metadata.generateName",
        ("appends 5 random characters", "the prefix may be at most 49 characters: it is too long by 3"),
        _generate_name("g" * 52), context={"name": "g" * 52 + "xxxxx", "generated_name": True}),
    "two-launchers": Breaker(
        "launcher", f"{LAUNCHER}.replicas", ("Invalid value: 2", "exactly 1 launcher (asked 2)", "to 1"),
        lambda job: _replica(job, "Launcher").update(replicas=2)),
    "no-launcher": Breaker(
        "launcher", LAUNCHER, ("Required value", "needs a Launcher replica spec"),
        lambda job: job["spec"]["mpiReplicaSpecs"].pop("Launcher"), Problem.REQUIRED),
    "launcher-restarts-always": Breaker(
        "launcher", f"{LAUNCHER}.restartPolicy", ('Unsupported value: "Always"', '"Never", "OnFailure"'),
        lambda job: _replica(job, "Launcher").update(restartPolicy="Always"), Problem.NOT_SUPPORTED),
    "too-many-workers": Breaker(
        "worker-count", f"{WORKER}.replicas",
        ("Invalid value: 101", "at most 100 workers are allowed (asked 101)", "to 100 or fewer"),
        lambda job: _replica(job, "Worker").update(replicas=101)),
    "one-worker": Breaker(
        "worker-count", f"{WORKER}.replicas", ("Invalid value: 1", "at least 2 workers", "(asked 1)", "to 2 or more"),
        lambda job: _replica(job, "Worker").update(replicas=1)),
    "workers-omitted": Breaker(
        "worker-count", f"{WORKER}.replicas", ("Required value", "starts 0 workers", "between 2 and 100"),
        lambda job: _replica(job, "Worker").pop("replicas"), Problem.REQUIRED),
    "master-replica": Breaker(
        "replica-spec", "spec.mpiReplicaSpecs[Master]", ('Unsupported value: "Master"', '"Launcher", "Worker"'),
        lambda job: job["spec"]["mpiReplicaSpecs"].update(Master=copy.deepcopy(_replica(job, "Worker"))),
        Problem.NOT_SUPPORTED),
    "worker-without-containers": Breaker(
        "replica-spec", f"{WORKER}.template.spec.containers", ("Required value", "no containers"),
        lambda job: _replica(job, "Worker")["template"]["spec"].update(containers=[]), Problem.REQUIRED),
    "nine-slots": Breaker(
        "slots-per-worker", "spec.slotsPerWorker", ("Invalid value: 9", "between 1 and 8 (asked 9)", "to 8"),
        lambda job: job["spec"].update(slotsPerWorker=9)),
    "unknown-mpi": Breaker(
        "mpi-settings", "spec.mpiImplementation", ('Unsupported value: "MVAPICH"', '"OpenMPI", "Intel", "MPICH"'),
        lambda job: job["spec"].update(mpiImplementation="MVAPICH"), Problem.NOT_SUPPORTED),
    "relative-ssh-path": Breaker(
        "mpi-settings", "spec.sshAuthMountPath", ('Invalid value: "home/mpiuser/.ssh"', '"/home/mpiuser/.ssh"'),
        lambda job: job["spec"].update(sshAuthMountPath="home/mpiuser/.ssh")),
    "negative-backoff": Breaker(
        "run-policy", "spec.runPolicy.backoffLimit",
        ("Invalid value: -1", "greater than or equal to 0 (asked -1)", "to 0 or more"),
        lambda job: job["spec"].setdefault("runPolicy", {}).update(backoffLimit=-1)),
    "clean-pod-policy-case": Breaker(
        "run-policy", "spec.runPolicy.cleanPodPolicy", ('Unsupported value: "running"', 'use "Running"'),
        lambda job: job["spec"].setdefault("runPolicy", {}).update(cleanPodPolicy="running"), Problem.NOT_SUPPORTED),
    "uppercase-image": Breaker(
        "image-reference", f"{WORKER}.template.spec.containers[0].image", ("must be lowercase", "use \""),
        lambda job: _container(job, "Worker").update(image=_container(job, "Worker")["image"].replace("m", "M", 1))),
    "no-image": Breaker(
        "image-reference", f"{LAUNCHER}.template.spec.containers[0].image", ("Required value", "needs an image"),
        lambda job: _container(job, "Launcher").pop("image"), Problem.REQUIRED),
    "seventeen-gpus": Breaker(
        "gpus-per-worker", f"{WORKER}.template.spec.containers[0].resources.limits[nvidia.com/gpu]",
        ("Invalid value: 17", "at most 16 nvidia.com/gpu (asked 17)", "to keep 34 in total use 3 workers"),
        lambda job: _container(job, "Worker")["resources"]["limits"].update({"nvidia.com/gpu": 17})),
    "gpu-request-differs": Breaker(
        "gpus-per-worker", f"{WORKER}.template.spec.containers[0].resources.limits[nvidia.com/gpu]",
        ("request 1 differs from its limit 2", "requests equal to limits"),
        lambda job: _container(job, "Worker")["resources"].update(
            limits={"nvidia.com/gpu": 2}, requests={"nvidia.com/gpu": 1})),
}


@pytest.mark.parametrize("breaker", sorted(BREAKERS))
@pytest.mark.parametrize("manifest", sorted(MANIFESTS))
def test_a_variant_breaking_one_rule_is_denied_by_that_rule(manifest, breaker):
    case = BREAKERS[breaker]
    job = copy.deepcopy(MANIFESTS[manifest])
    case.edit(job)
    verdict = evaluate(context(job, **case.context))
    assert not verdict.allowed
    assert {f.rule for f in verdict.denials} == {case.rule}, [messages.line(f) for f in verdict.denials]
    (finding,) = [f for f in verdict.denials if f.path == case.path]
    assert finding.problem is case.problem
    line = messages.line(finding)
    assert line.startswith(f"[{case.rule}] {case.path}: ")
    for part in case.says:
        assert part in line
    cause = messages.cause(finding)
    assert (cause["field"], cause["reason"]) == (case.path, case.problem.cause)
    assert not verdict.is_policy_denial  # field values: 422 Invalid with causes, not 403


@pytest.mark.parametrize("manifest", sorted(MANIFESTS))
def test_different_launcher_and_worker_images_only_warn(manifest):
    job = copy.deepcopy(MANIFESTS[manifest])
    _container(job, "Worker")["image"] = "quay.io/other/mpi:2"
    verdict = evaluate(context(job))
    assert verdict.allowed
    (warning,) = [f for f in verdict.warnings if f.rule == "image-reference"]
    assert warning.path == f"{WORKER}.template.spec.containers[0].image"
    assert 'workers run "quay.io/other/mpi:2"' in warning.message
    assert len(messages.line(warning)) <= 256
