"""The exported policies on a real kube-apiserver (v1.36, ``KUBEBUILDER_ASSETS``; skipped when
unset): created without error and without type-check warnings against the upstream CRDs, and
answering as the webhook does: static violations refused with the webhook's rule id and our
evaluator's message, upstream and the widest allowed jobs admitted within the cost budget, and
UPDATEs ratcheted.

One namespace, dry-run creates: the objects are stored only where a test needs them stored (the
job an UPDATE is ratcheted against, the runtimes the TrainJob policies take as params)."""
from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from policies.vap import objects
from policies.vap.trainjob_objects import TRAINJOB_EXPORTED_RULES
from policies.vap.trainjob_objects import TRAINJOB_EXPORTED_RULES
from testing.control_plane import ControlPlane
from testing.reference_data import ROOT, TRAINER
from tests.vap.corpus import VIOLATIONS, policies, upstream_jobs
from tests.vap.test_cost import wide_job
from tests.vap.trainjob_corpus import DECOYS, NAMESPACE, params_for, runtimes
from tests.vap.trainjob_corpus import VIOLATIONS as TRAINJOB_VIOLATIONS
from tests.vap.trainjob_verdicts import vap_review as trainjob_vap_review
from tests.vap.verdicts import vap_review

POLICIES = policies()
# Every TrainJob rule, not only the default export's (which is a part of it: each rule its own policies).
BUILT_IN = objects(POLICIES["built-in"], trainjob_rules=TRAINJOB_EXPORTED_RULES)
CRDS = [ROOT / "manifests" / "crd" / "upstream" / "mpijobs.kubeflow.org.yaml",
        *sorted((TRAINER / "crds").glob("*.yaml"))]
MPIJOBS = ("kubeflow.org", "v2beta1", "mpijobs")
TRAINJOBS = ("trainer.kubeflow.org", "v1alpha1", "trainjobs")
STORED = "stored-over-limit"  # stored before the policies: 101 workers (worker-count's max is 100)
SETTLE_TIMEOUT = 60.0


class Cluster:
    def __init__(self, plane: ControlPlane) -> None:
        from kubernetes import client
        self.plane = plane
        self.api = client.CustomObjectsApi(plane.api_client())
        self.runtimes: set[str] = set()  # the runtimes the API server stored

    def create(self, resource: tuple[str, str, str], body: dict[str, Any], *, dry_run: bool = True) -> str | None:
        """None when admitted, else the API server's message."""
        from kubernetes.client.exceptions import ApiException
        group, version, plural = resource
        try:
            self.api.create_namespaced_custom_object(group, version, NAMESPACE, plural, body,
                                                     **({"dry_run": "All"} if dry_run else {}))
        except ApiException as error:
            return str(json.loads(error.body).get("message"))
        return None

    def replace(self, body: dict[str, Any]) -> str | None:
        from kubernetes.client.exceptions import ApiException
        group, version, plural = MPIJOBS
        try:
            self.api.replace_namespaced_custom_object(group, version, NAMESPACE, plural, body["metadata"]["name"],
                                                      body, dry_run="All")
        except ApiException as error:
            return str(json.loads(error.body).get("message"))
        return None

    def stored_job(self) -> dict[str, Any]:
        group, version, plural = MPIJOBS
        return dict(self.api.get_namespaced_custom_object(group, version, NAMESPACE, plural, STORED))

    def typechecking(self, names: list[str]) -> dict[str, list[dict[str, Any]]]:
        """Each policy's status.typeChecking.expressionWarnings, once the controller has checked
        the policy's current generation."""
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while True:
            listed = json.loads(self.plane.kubectl("get", "validatingadmissionpolicies", "-o", "json").stdout)
            found = {p["metadata"]["name"]: p for p in listed["items"] if p["metadata"]["name"] in names}
            done = {name: p["status"]["typeChecking"].get("expressionWarnings", [])
                    for name, p in found.items()
                    if p.get("status", {}).get("observedGeneration") == p["metadata"]["generation"]
                    and "typeChecking" in p.get("status", {})}
            if len(done) == len(names):
                return done
            assert time.monotonic() < deadline, f"not type-checked within {SETTLE_TIMEOUT} s: {set(names) - set(done)}"
            time.sleep(0.5)


def _policy_names(documents: list[dict[str, Any]]) -> list[str]:
    return [d["metadata"]["name"] for d in documents if d["kind"] == "ValidatingAdmissionPolicy"]


def _in_namespace(obj: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"].pop("namespace", None)
    obj["metadata"]["namespace"] = NAMESPACE
    return obj


def _used_runtimes() -> list[dict[str, Any]]:
    named = {(tj.get("spec") or {}).get("runtimeRef", {}).get("name") for _, tj, shape in TRAINJOB_VIOLATIONS.values()
             if shape == "v2.3"}
    return [rt for rt in runtimes() if rt["metadata"]["name"] in named | set(DECOYS)]


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> Iterator[Cluster]:
    for crd in CRDS:
        control_plane.apply(crd.read_text())
    control_plane.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                          "crd/mpijobs.kubeflow.org", "crd/trainjobs.trainer.kubeflow.org",
                          "crd/trainingruntimes.trainer.kubeflow.org", "crd/clustertrainingruntimes.trainer.kubeflow.org")
    control_plane.kubectl("create", "namespace", NAMESPACE)
    found = Cluster(control_plane)
    stored = _in_namespace(_job(STORED, workers=101))
    assert found.create(MPIJOBS, stored, dry_run=False) is None
    others = {rt["metadata"]["namespace"] for rt in _used_runtimes() if rt["kind"] == "TrainingRuntime"} - {NAMESPACE}
    for namespace in sorted(others):  # a TrainingRuntime of the same name elsewhere must change nothing
        control_plane.kubectl("create", "namespace", namespace)
    for runtime in _used_runtimes():
        # Some test runtimes are broken in ways the runtime CRD itself refuses (intel-mpi):
        # those TrainJobs are skipped below.
        applied = control_plane.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(runtime), check=False)
        if applied.returncode == 0:
            found.runtimes.add(runtime["metadata"]["name"])
    control_plane.apply(BUILT_IN)
    _wait_enforced(found)
    try:
        yield found
    finally:
        control_plane.kubectl("delete", "-f", "-", "--wait=false", "--ignore-not-found",
                              input=yaml.safe_dump_all(BUILT_IN), check=False)
        for namespace in (NAMESPACE, *sorted(others)):
            control_plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def _job(name: str, **kwargs: Any) -> dict[str, Any]:
    from testing.builders import mpijob
    return mpijob(name, namespace=NAMESPACE, **kwargs)


def _wait_enforced(cluster: Cluster) -> None:
    """Bindings reach the admission plugin through an informer: wait until one refuses, for
    both kinds."""
    mpijob_rule, mpijob_violation = VIOLATIONS[sorted(VIOLATIONS)[0]]
    trainjob_rule, trainjob_violation, _ = TRAINJOB_VIOLATIONS["nodes-120"]
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while True:
        refused = (cluster.create(MPIJOBS, _in_namespace(mpijob_violation)) or "",
                   cluster.create(TRAINJOBS, _in_namespace(trainjob_violation)) or "")
        if f"[{mpijob_rule}]" in refused[0] and f"[{trainjob_rule}]" in refused[1]:
            return
        assert time.monotonic() < deadline, f"the policies did not take effect: {refused}"
        time.sleep(0.5)


def test_the_default_export_is_created_and_type_checks_without_warnings(cluster: Cluster) -> None:
    warnings = cluster.typechecking(_policy_names(BUILT_IN))
    assert {name: w for name, w in warnings.items() if w} == {}


@pytest.mark.parametrize("policy_name", ["examples", "actions-and-overrides"])
def test_the_export_of_a_policy_file_is_created_and_type_checks_without_warnings(cluster: Cluster,
                                                                                 policy_name: str) -> None:
    documents = objects(POLICIES[policy_name], prefix=f"t-{policy_name}", trainjob_rules=TRAINJOB_EXPORTED_RULES)
    policies_only = [d for d in documents if d["kind"] == "ValidatingAdmissionPolicy"]
    bindings = [d for d in documents if d["kind"] != "ValidatingAdmissionPolicy"]
    # The bindings are only validated (dry run): stored, they would answer the other tests too.
    cluster.plane.kubectl("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump_all(bindings))
    cluster.plane.apply(policies_only)
    try:
        warnings = cluster.typechecking(_policy_names(policies_only))
        assert {name: w for name, w in warnings.items() if w} == {}
    finally:
        cluster.plane.kubectl("delete", "-f", "-", "--wait=false", input=yaml.safe_dump_all(policies_only), check=False)


def _refused_before_admission(message: str) -> bool:
    """The API server's own validation (object names) refuses some jobs before any policy runs."""
    return " is invalid: " in message and "ValidatingAdmissionPolicy" not in message


def _our_messages(job: dict[str, Any], **kwargs: Any) -> list[str]:
    return vap_review(BUILT_IN, job, NAMESPACE, **kwargs).messages("Deny")


@pytest.mark.parametrize("name", sorted(VIOLATIONS))
def test_a_static_violation_is_refused_with_the_webhooks_rule_and_message(cluster: Cluster, name: str) -> None:
    rule, job = VIOLATIONS[name]
    job = _in_namespace(job)
    refused = cluster.create(MPIJOBS, job)
    assert refused is not None
    if _refused_before_admission(refused):
        return
    assert f"[{rule}]" in refused, refused
    if "name" not in job["metadata"]:
        return  # the API server names it before admission: the policy judges that name
    # The message our evaluator writes, up to the value (a generated name is only known there).
    heads = [m.split(": Invalid value")[0] for m in _our_messages(job) if m.startswith(f"[{rule}]")]
    assert heads and any(head in refused for head in heads), (refused, heads)


@pytest.mark.parametrize("name", sorted(n for n, (_, _, shape) in TRAINJOB_VIOLATIONS.items() if shape == "v2.3"))
def test_a_static_trainjob_violation_is_refused_with_a_webhook_rule_and_our_message(cluster: Cluster, name: str) -> None:
    rule, trainjob, _ = TRAINJOB_VIOLATIONS[name]
    runtime = trainjob["spec"]["runtimeRef"]["name"]
    if runtime not in cluster.runtimes:
        pytest.skip(f"the runtime CRD refuses the test runtime {runtime}")
    trainjob = _in_namespace(trainjob)
    refused = cluster.create(TRAINJOBS, trainjob)
    assert refused is not None
    if _refused_before_admission(refused):
        return
    # The API server stops at the first policy that denies: one of the rules ours deny.
    ours = trainjob_vap_review(BUILT_IN, trainjob, params_for(trainjob, runtimes()), NAMESPACE).messages("Deny")
    assert any(f"[{rule}]" in m for m in ours), ours
    if "name" not in trainjob["metadata"]:  # named by the API server: judged by that name
        assert any(m.split("]")[0] + "]" in refused for m in ours), (refused, ours)
    else:
        assert any(m in refused for m in ours), (refused, ours)


@pytest.mark.parametrize("name", sorted(upstream_jobs()))
def test_an_upstream_example_is_admitted(cluster: Cluster, name: str) -> None:
    assert cluster.create(MPIJOBS, _in_namespace(upstream_jobs()[name])) is None


def test_the_widest_job_allowed_is_admitted_within_the_cost_budget(cluster: Cluster) -> None:
    job = wide_job(300, 60, 10)  # 100 workers of 8 slots, the built-in maximums
    for replica in job["spec"]["mpiReplicaSpecs"].values():
        pod = replica["template"]["spec"]
        for container in pod["containers"][1:] + pod["initContainers"]:
            container["resources"]["limits"].pop("nvidia.com/gpu")  # one GPU container: 1 of at most 16
    assert cluster.create(MPIJOBS, _in_namespace(job)) is None


def test_the_widest_violating_job_is_refused_by_its_rules_not_by_the_cost_budget(cluster: Cluster) -> None:
    job = _in_namespace(wide_job(300, 60, 10, violating=True))
    refused = cluster.create(MPIJOBS, job)
    # The API server stops at the first policy that denies: one of ours, with our message.
    assert refused is not None and any(m in refused for m in _our_messages(job)), refused
    assert "cost" not in refused and "failed to evaluate" not in refused, refused


def test_an_update_keeping_a_stored_problem_is_admitted(cluster: Cluster) -> None:
    stored = cluster.stored_job()
    stored["metadata"].setdefault("labels", {})["touched"] = "yes"
    assert cluster.replace(stored) is None


def test_an_update_adding_a_problem_is_refused(cluster: Cluster) -> None:
    stored = cluster.stored_job()
    stored["spec"]["slotsPerWorker"] = 9
    refused = cluster.replace(stored)
    assert refused is not None and "[slots-per-worker]" in refused and "[worker-count]" not in refused, refused
