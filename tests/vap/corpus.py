"""The jobs, policies and namespaces the parity tests run on: the upstream examples, a
violating variant of every finding of every exported rule, the policy files of the tests and
of the repository, and for each policy namespaces that match each of its overrides."""
from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from policies.config.layered_policy import Policy
from policies.config.reader import default_policy, parse_policy
from policies.kube.label_selectors import NAMESPACE_NAME_LABEL
from testing.builders import mpijob
from testing.reference_data import ROOT, upstream_v2beta1_jobs
from testing.crd import as_api_server_sends

Job = dict[str, Any]
LAUNCHER, WORKER = "Launcher", "Worker"


def upstream_jobs() -> dict[str, Job]:
    return {f"upstream-{name}": as_api_server_sends(job) for name, job in upstream_v2beta1_jobs().items()}


def _pod(job: Job, replica: str) -> dict[str, Any]:
    return job["spec"]["mpiReplicaSpecs"][replica]["template"]["spec"]


def _edit(change: Callable[[Job], None], **kwargs: Any) -> Job:
    job = mpijob(**kwargs)
    change(job)
    return job


def _gpus(replica: str, limits: Any = None, requests: Any = None, *, name: str = "nvidia.com/gpu",
          container: int = 0) -> Callable[[Job], None]:
    def change(job: Job) -> None:
        containers = _pod(job, replica)["containers"]
        while len(containers) <= container:
            containers.append({"name": f"extra-{len(containers)}", "image": "busybox"})
        resources = containers[container].setdefault("resources", {})
        if limits is not None:
            resources.setdefault("limits", {})[name] = limits
        if requests is not None:
            resources.setdefault("requests", {})[name] = requests
    return change


def _set(path: tuple[str, ...], value: Any) -> Callable[[Job], None]:
    def change(job: Job) -> None:
        node = job
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return change


def _delete(path: tuple[str, ...]) -> Callable[[Job], None]:
    def change(job: Job) -> None:
        node = job
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
    return change


def _both(*changes: Callable[[Job], None]) -> Callable[[Job], None]:
    def change(job: Job) -> None:
        for each in changes:
            each(job)
    return change


SPECS = ("spec", "mpiReplicaSpecs")
RUN_POLICY = ("spec", "runPolicy")


def _generated(prefix: str) -> Callable[[Job], None]:
    def change(job: Job) -> None:
        job["metadata"] = {"generateName": prefix}
    return change


def _init(replica: str, gpus: Any, *, sidecar: bool = False) -> Callable[[Job], None]:
    def change(job: Job) -> None:
        container: dict[str, Any] = {"name": "prepare", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
        if sidecar:
            container["restartPolicy"] = "Always"
        _pod(job, replica).setdefault("initContainers", []).append(container)
    return change


# name → (the rule the webhook reports, the job)
VIOLATIONS: dict[str, tuple[str, Job]] = {
    "name-not-a-label": ("job-name", mpijob("Pi_Job")),
    "name-ends-with-dash": ("job-name", mpijob("pi-")),
    "name-too-long-for-2-workers": ("job-name", mpijob("p" * 55)),
    "name-too-long-for-11-workers": ("job-name", mpijob("p" * 54, workers=11)),
    "generate-name-too-long": ("job-name", _edit(_generated("g" * 50 + "-"))),
    "generate-name-not-a-label": ("job-name", _edit(_generated("Gen-"))),
    "unknown-replica-type": ("replica-spec", _edit(_set((*SPECS, "Master"), {"replicas": 1, "template": {"spec": {
        "containers": [{"name": "m", "image": "busybox"}]}}}))),
    "lowercase-worker-key": ("replica-spec", _edit(_set((*SPECS, "worker"), {"replicas": 1}))),
    "worker-restart-always": ("replica-spec", _edit(_set((*SPECS, WORKER, "restartPolicy"), "Always"))),
    "worker-no-containers": ("replica-spec", _edit(_set((*SPECS, WORKER, "template", "spec", "containers"), []))),
    "launcher-missing": ("launcher", _edit(_delete((*SPECS, LAUNCHER)))),
    "launcher-replicas-2": ("launcher", _edit(_set((*SPECS, LAUNCHER, "replicas"), 2))),
    "launcher-restart-exit-code": ("launcher", _edit(_set((*SPECS, LAUNCHER, "restartPolicy"), "ExitCode"))),
    "launcher-no-containers": ("launcher", _edit(_set((*SPECS, LAUNCHER, "template", "spec", "containers"), []))),
    "worker-missing": ("worker-count", _edit(_delete((*SPECS, WORKER)))),
    "worker-replicas-unset": ("worker-count", mpijob(workers=None)),
    "workers-101": ("worker-count", mpijob(workers=101)),
    "workers-1": ("worker-count", mpijob(workers=1)),
    "slots-0": ("slots-per-worker", mpijob(slots=0)),
    "slots-9": ("slots-per-worker", mpijob(slots=9)),
    "launcher-creation-policy": ("mpi-settings", mpijob(launcherCreationPolicy="Later")),
    "ssh-path-empty": ("mpi-settings", mpijob(sshAuthMountPath="")),
    "ssh-path-relative": ("mpi-settings", mpijob(sshAuthMountPath=".ssh")),
    "ssh-path-dots": ("mpi-settings", mpijob(sshAuthMountPath="/home/../root/.ssh")),
    "clean-pod-policy": ("run-policy", _edit(_set((*RUN_POLICY, "cleanPodPolicy"), "running"))),
    "ttl-negative": ("run-policy", _edit(_set((*RUN_POLICY, "ttlSecondsAfterFinished"), -1))),
    "backoff-negative": ("run-policy", _edit(_set((*RUN_POLICY, "backoffLimit"), -3))),
    "min-available-negative": ("run-policy", _edit(_set((*RUN_POLICY, "schedulingPolicy"), {"minAvailable": -1}))),
    "min-resources-negative": ("run-policy", _edit(_set((*RUN_POLICY, "schedulingPolicy"), {
        "minResources": {"cpu": "4", "memory": "-1Gi"}}))),
    "managed-by-unknown": ("run-policy", _edit(_set((*RUN_POLICY, "managedBy"), "example.com/other"))),
    "worker-gpus-over": ("gpus-per-worker", _edit(_gpus(WORKER, 17))),
    "worker-gpus-string-over": ("gpus-per-worker", _edit(_gpus(WORKER, "20"))),
    "worker-gpus-two-containers": ("gpus-per-worker", _edit(_both(_gpus(WORKER, 9), _gpus(WORKER, 8, container=1)))),
    "worker-gpus-init-over": ("gpus-per-worker", _edit(_init(WORKER, 17))),
    "worker-gpus-sidecar-adds": ("gpus-per-worker", _edit(_both(_gpus(WORKER, 10), _init(WORKER, 7, sidecar=True)))),
    "worker-gpus-fraction": ("gpus-per-worker", _edit(_gpus(WORKER, "1.5"))),
    "worker-gpus-negative": ("gpus-per-worker", _edit(_gpus(WORKER, "-1"))),
    "worker-gpus-request-without-limit": ("gpus-per-worker", _edit(_gpus(WORKER, requests=2))),
    "worker-gpus-request-differs": ("gpus-per-worker", _edit(_gpus(WORKER, 2, 1))),
    "launcher-extended-fraction": ("gpus-per-worker", _edit(_gpus(LAUNCHER, "500m", name="example.com/fpga"))),
    "launcher-as-worker-gpus-over": ("gpus-per-worker", _edit(_gpus(LAUNCHER, 17), runLauncherAsWorker=True)),
}

# Jobs the webhook admits although they look close to a violation.
ADMITTED: dict[str, Job] = {
    "launcher-as-only-worker": _edit(_delete((*SPECS, WORKER)), runLauncherAsWorker=True),
    "name-54-for-10-workers": mpijob("p" * 54, workers=10),
    "name-53-for-11-workers": mpijob("p" * 53, workers=11),
    "worker-gpus-at-max": _edit(_gpus(WORKER, 16)),
    "worker-gpus-in-requests-equal": _edit(_gpus(WORKER, 4, "4")),
    "launcher-gpus-over-not-a-rank-pod": _edit(_gpus(LAUNCHER, 17)),
    "worker-gpus-two-vendors": _edit(_both(_gpus(WORKER, 8), _gpus(WORKER, 8, name="amd.com/gpu", container=1))),
    "init-gpus-within": _edit(_both(_gpus(WORKER, 16), _init(WORKER, 16))),
    "min-resources-valid": _edit(_set((*RUN_POLICY, "schedulingPolicy"), {"minResources": {"cpu": "4", "memory": 0}})),
    "managed-by-multikueue": _edit(_set((*RUN_POLICY, "managedBy"), "kueue.x-k8s.io/multikueue")),
    "restart-on-failure": _edit(_both(_set((*SPECS, WORKER, "restartPolicy"), "OnFailure"),
                                      _set((*SPECS, LAUNCHER, "restartPolicy"), "Never"))),
}

ACTIONS_POLICY = """\
exemptNamespaces: [kube-system, "sandbox-*"]
rules:
  worker-count: {action: warn, params: {min: 1, max: 8}}
  slots-per-worker: {action: audit, params: {max: 2}}
  gpus-per-worker: {params: {max: 4}}
  mpi-settings: {params: {implementations: [OpenMPI]}}
  run-policy: {params: {managedBy: [kubeflow.org/mpi-operator]}}
overrides:
  - name: research
    namespaceSelector: {matchLabels: {team: research}}
    rules:
      worker-count: {action: deny, params: {max: 32}}
      gpus-per-worker: {params: {max: 8}}
  - name: prod
    namespaceSelector:
      matchExpressions: [{key: tier, operator: In, values: [prod, staging]}, {key: legacy, operator: DoesNotExist}]
    rules:
      slots-per-worker: deny
      job-name: warn
  - name: not-gpu
    namespaceSelector:
      matchExpressions: [{key: accelerator, operator: NotIn, values: [a100]}]
    rules:
      gpus-per-worker: {action: audit, params: {max: 0}}
  - name: ci
    namespaces: [ci, "ci-*"]
    rules:
      worker-count: {params: {min: 2}}
      launcher: audit
  - name: by-name-label
    namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: named}}
    rules:
      mpi-settings: warn
  - name: frozen
    namespaceSelector: {matchExpressions: [{key: frozen, operator: Exists}]}
    exempt: true
"""


def policies() -> dict[str, Policy]:
    from tests.policies.test_layered_policy import POLICY as OVERRIDES_POLICY
    from tests.webhook.test_mutate_e2e import POLICY as MUTATIONS_POLICY

    return {
        "built-in": default_policy("mpijob-webhook"),
        "manifests-base": parse_policy((ROOT / "manifests" / "base" / "policy.yaml").read_text(),
                                       own_namespace="mpijob-webhook"),
        "examples": parse_policy((ROOT / "examples" / "policy.yaml").read_text(), own_namespace="mpijob-webhook"),
        "test-policy-overrides": OVERRIDES_POLICY,
        "test-mutations": parse_policy(MUTATIONS_POLICY, own_namespace="mpijob-webhook"),
        "actions-and-overrides": parse_policy(ACTIONS_POLICY, own_namespace="mpijob-webhook"),
    }


Namespace = tuple[str, dict[str, str]]


def namespaces(policy: Policy) -> list[Namespace]:
    """An ordinary namespace, each exempt one, and for each override a namespace it matches
    (plus one that every label override matches at once, so that layering is exercised)."""
    found: list[Namespace] = [("team-a", {}), *((_named(p), {}) for p in sorted(policy.exempt_namespaces))]
    all_labels: dict[str, str] = {}
    for index, override in enumerate(policy.overrides):
        if override.selector is None:
            found += [(_named(p), {}) for p in sorted(override.namespaces)]
            continue
        name, labels = f"selected-{index}", {}
        for key, value in override.selector.match_labels:
            if key == NAMESPACE_NAME_LABEL:
                name = value
            else:
                labels[key] = value
        for requirement in override.selector.match_expressions:
            if requirement.operator == "In":
                labels[requirement.key] = sorted(requirement.values)[0]
            elif requirement.operator == "Exists":
                labels[requirement.key] = "yes"
            elif requirement.operator == "NotIn":
                labels[requirement.key] = "other"
        found.append((name, labels))
        if not override.exempt:
            all_labels.update(labels)
    if all_labels:
        found.append(("selected-all", all_labels))
    return found


def _named(pattern: str) -> str:
    return pattern[:-1] + "x" if pattern.endswith("*") else pattern


def boundary_jobs() -> dict[str, Job]:
    """Jobs at the values the policies' parameters move: each is admitted by some policy in
    some namespace and refused by another."""
    return {
        "small": mpijob(workers=2, slots=1),
        "wide": _edit(_gpus(WORKER, 6), workers=40, slots=4, mpiImplementation="Intel",
                      runPolicy={"managedBy": "kueue.x-k8s.io/multikueue"}),
        "long-name": _edit(_gpus(WORKER, 1), name="p" * 54, workers=11, slots=2),
    }


def copied(job: Job) -> Job:
    return copy.deepcopy(job)
