"""Manifests checked offline with the webhook's own admission logic, for CI pipelines.

Each MPIJob goes through what the API server would do on ``kubectl apply``: unknown fields are
pruned and schema defaults filled in (``policies.mpijob.pruning_defaulting``), the mutating webhook runs and
its patch is applied, and the validating webhook sees the result. TrainJobs the same (pruned in
the v2.2+ shape only: ``policies.trainer.stored_trainjob``), against the training runtimes given,
each checked against the runtime CRD first (``policies.trainer.runtime_type_check``). Both calls are the real
``Admission`` with the given policy, so rules, messages and the patch are exactly the
webhook's. Cluster-aware rules read a file of cluster objects when one is given; otherwise they
are reported as skipped, never as a failure.
"""
from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import jsonpatch
import yaml

from policies import messages
from policies.interface import Action, Finding, Problem
from policies.messages import plural
from policies.cluster_view import ClusterView, StaticClusterView
from policies.engine import CLUSTER_STATE_RULE
from policies.mpijob.reading import GROUP, HUB_VERSION, KIND
from policies.config.layered_policy import Policy
from policies.mpijob.pruning_defaulting import PrunedField, as_admitted
from policies.trainer.api import (AUTO, CLUSTER_TRAINING_RUNTIME, TRAINJOB, TRAINJOBS, RuntimeRef, detect_shape,
                                  runtime_ref)
from policies.trainer.api import GROUP as TRAINER_GROUP
from policies.trainer.runtime_type_check import CheckedRuntime, check_runtime
from policies.trainer.stored_trainjob import as_stored_trainjob
from policies.trainer.trainjob_review import TRAINING_RUNTIME_RULE
from policies.trainer.type_check import check_trainjob_shape
from webhook.admission import Decision
from webhook.review import parse_admission_review
from webhook.runtime import default_runtime

REPORT_API_VERSION = "mpijob-webhook/v1"
CHECK_USER = "mpijob-webhook-check"
NO_CLUSTER_STATE = "no --cluster-state given"
RUNTIME_REF_PATH = "spec.runtimeRef.name"
RUNTIME_NOT_GIVEN = "runtime-not-given"  # a TrainJob's reason when its runtime is in no input
# Cluster objects the cluster-aware rules and the policy read: (kind, the resource ``kubectl get``
# names it by, what it is read for).
CLUSTER_STATE = (
    ("ResourceQuota", "resourcequotas", "quota hard limits and what is left, per namespace"),
    ("LimitRange", "limitranges", "container defaults and maximums (GPUs per pod too), per namespace"),
    ("Node", "nodes", "whether each pod fits on some node: allocatable resources, labels, taints"),
    ("Namespace", "namespaces", "namespace labels: they select the policy's per-namespace overrides, and "
                                "their pod-security.kubernetes.io labels are the levels pod-security checks"),
    ("LocalQueue", "localqueues.kueue.x-k8s.io", "Kueue's queues: whether a job's queue exists (any one: Kueue "
                                                 "is installed)"),
    ("MPIJob", "mpijobs.v2beta1.kubeflow.org", "the namespace's other MPIJobs: quota they claim before all their "
                                               "pods exist (in flight)"),
    ("ClusterTrainingRuntime", "clustertrainingruntimes.trainer.kubeflow.org",
     "the Kubeflow Trainer runtimes TrainJobs name (also read from the checked files)"),
    ("TrainingRuntime", "trainingruntimes.trainer.kubeflow.org", "the same, per namespace"),
    ("TrainJob", "trainjobs.trainer.kubeflow.org", "the namespace's other TrainJobs on MPI runtimes: quota in "
                                                   "flight, as for MPIJobs"),
)
CLUSTER_KINDS = tuple(kind for kind, _, _ in CLUSTER_STATE)
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")


class BadInput(Exception):
    """A file or document that cannot be checked at all (exit code 2)."""

    def __init__(self, source: str, message: str, document: int | None = None) -> None:
        super().__init__(message)
        self.source = source
        self.document = document
        self.message = message

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "document": self.document, "message": self.message}

    def __str__(self) -> str:
        where = self.source if self.document is None else f"{self.source}[{self.document}]"
        return f"{where}: {self.message}"


def documents(text: str, source: str) -> list[tuple[int, dict[str, Any]]]:
    """(index, object) of every non-empty document of a multi-document YAML (or JSON) text;
    ``kind: List`` objects are unpacked."""
    try:
        loaded = list(yaml.safe_load_all(text))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise BadInput(source, f"not valid YAML{where}: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise BadInput(source, f"not valid YAML: {exc}") from None
    found = []
    for index, doc in enumerate(loaded):
        if doc is None:
            continue
        if not isinstance(doc, Mapping):
            raise BadInput(source, f"expected a Kubernetes object (a mapping), got {type(doc).__name__}", index)
        for item in _unpack(doc, source, index):
            if not isinstance(item.get("apiVersion"), str) or not isinstance(item.get("kind"), str):
                raise BadInput(source, "not a Kubernetes object: apiVersion and kind are required", index)
            found.append((index, item))
    return found


def _unpack(doc: Mapping[str, Any], source: str, index: int) -> Iterable[dict[str, Any]]:
    if isinstance(doc.get("kind"), str) and doc["kind"].endswith("List") and "items" in doc:
        items = doc["items"] or []
        if not isinstance(items, list) or not all(isinstance(i, Mapping) for i in items):
            raise BadInput(source, f"{doc['kind']}.items must be a list of objects", index)
        return [dict(i) for i in items]
    return [dict(doc)]


def cluster_view(objects: Sequence[tuple[str, int, Mapping[str, Any]]], default_namespace: str) -> StaticClusterView:
    """A ClusterView of (source, index, object) cluster objects. Kueue counts as installed when
    at least one LocalQueue is given."""
    quotas: dict[str, list[Any]] = {}
    ranges: dict[str, list[Any]] = {}
    queues: dict[str, list[Any]] | None = None
    jobs: dict[str, list[Any]] = {}
    trainjobs: dict[str, list[Any]] = {}
    namespaces: dict[str, Any] = {}
    nodes: list[Any] = []
    cluster_runtimes, runtimes = training_runtimes(objects, default_namespace)
    for source, index, obj in objects:
        kind = obj["kind"]
        metadata = obj.get("metadata")
        meta = metadata if isinstance(metadata, Mapping) else {}
        namespace = meta.get("namespace") or default_namespace
        if kind == "ResourceQuota":
            quotas.setdefault(namespace, []).append(obj)
        elif kind == "LimitRange":
            ranges.setdefault(namespace, []).append(obj)
        elif kind == "LocalQueue":
            queues = queues if queues is not None else {}
            queues.setdefault(namespace, []).append(obj)
        elif kind == "MPIJob":
            jobs.setdefault(namespace, []).append(obj)
        elif kind == TRAINJOB:
            trainjobs.setdefault(namespace, []).append(obj)
        elif kind in RUNTIME_KINDS:
            continue
        elif kind == "Namespace":
            if not meta.get("name"):
                raise BadInput(source, "a Namespace needs metadata.name", index)
            namespaces[meta["name"]] = obj
        elif kind == "Node":
            nodes.append(obj)
        else:
            raise BadInput(source, f"kind {kind} is not cluster state the rules read; expected one of "
                                   f"{', '.join(CLUSTER_KINDS)}", index)
    return StaticClusterView(quotas=quotas, ranges=ranges, namespaces=namespaces, node_list=tuple(nodes),
                             queues=queues, jobs=jobs, cluster_runtimes=cluster_runtimes, runtimes=runtimes,
                             train_jobs=trainjobs)


def training_runtimes(objects: Iterable[tuple[str, int, Mapping[str, Any]]], default_namespace: str
                      ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(ClusterTrainingRuntimes by name, TrainingRuntimes by namespace and name) among the
    cluster-state ``objects``, as the API server stores them. A runtime the API server would
    refuse cannot be cluster state: it is bad input, with the runtime and its fields named."""
    cluster_wide: dict[str, Any] = {}
    namespaced: dict[str, dict[str, Any]] = {}
    for source, index, obj in objects:
        if obj.get("kind") not in RUNTIME_KINDS:
            continue
        key = runtime_key(obj, source, index, default_namespace)
        checked = check_runtime(obj)
        if not checked.valid:
            raise BadInput(source, f"{key.describe()} would be refused by the API server, so no cluster holds it: "
                                   f"{refusals_of(checked.refused)}", index)
        if key.kind == CLUSTER_TRAINING_RUNTIME:
            cluster_wide[key.name] = checked.stored
        else:
            namespaced.setdefault(key.namespace, {})[key.name] = checked.stored
    return cluster_wide, namespaced


@dataclass(frozen=True)
class RuntimeKey:
    kind: str
    namespace: str  # "" for a ClusterTrainingRuntime
    name: str

    def describe(self) -> str:
        """As the webhook's messages name a runtime: ``ClusterTrainingRuntime mpi-cuda``."""
        return f"{self.kind} {self.name}"


def runtime_key(obj: Mapping[str, Any], source: str, index: int, default_namespace: str) -> RuntimeKey:
    listed = obj.get("metadata")
    meta: Mapping[str, Any] = listed if isinstance(listed, Mapping) else {}
    name, namespace = meta.get("name"), meta.get("namespace")
    if not name or not isinstance(name, str):
        raise BadInput(source, f"a {obj['kind']} needs metadata.name", index)
    if obj["kind"] == CLUSTER_TRAINING_RUNTIME:
        return RuntimeKey(obj["kind"], "", name)
    return RuntimeKey(obj["kind"], namespace if namespace and isinstance(namespace, str) else default_namespace, name)


def refusals_of(refused: Iterable[Finding]) -> str:
    """What the API server would refuse in a runtime, in one line: ``path: problem; …``."""
    return "; ".join(messages.line(finding).removeprefix(f"[{finding.rule}] ") for finding in refused)


def unavailable_cluster() -> StaticClusterView:
    return StaticClusterView(available=False, unavailable_reason=NO_CLUSTER_STATE)


@dataclass
class Checker:
    """Checks one object at a time; ``cluster`` None: cluster-aware rules are skipped."""

    policy: Policy
    cluster: ClusterView | None = None
    namespace: str = "default"
    _decisions: list[Decision] = field(default_factory=list, init=False, repr=False)
    # Runtimes of the input the API server would refuse: where each was given, and why
    _refused_runtimes: dict[RuntimeKey, tuple[str, CheckedRuntime]] = field(default_factory=dict, init=False,
                                                                             repr=False)

    def __post_init__(self) -> None:
        policy = self.policy
        if self.cluster is None:  # skipped rules are reported as such, not as warnings or denials
            policy = policy.with_cluster_unavailable(Action.AUDIT)
        runtime = default_runtime(policy, self.cluster or unavailable_cluster())
        self._admission = runtime.admission
        self._admission.observers.append(self._decisions.append)

    def add_runtimes(self, objects: Sequence[tuple[str, int, Mapping[str, Any]]]) -> None:
        """Training runtimes given in the input beside the TrainJobs that name them, as the API
        server would store them. One it would refuse is not added: the TrainJobs that name it
        are reported on it (``check`` of such a TrainJob), and the runtime's own result says why."""
        view = self._admission.cluster
        if not isinstance(view, StaticClusterView):
            return
        cluster_wide = dict(view.cluster_runtimes)
        namespaced = {ns: dict(names) for ns, names in view.runtimes.items()}
        for source, index, obj in objects:
            if not _is_runtime(obj):
                continue
            key = runtime_key(obj, source, index, self.namespace)
            checked = check_runtime(obj)
            if not checked.valid:
                self._refused_runtimes[key] = (f"{source}[{index}]", checked)
                continue
            self._refused_runtimes.pop(key, None)  # given again, valid: the later one counts
            if key.kind == CLUSTER_TRAINING_RUNTIME:
                cluster_wide[key.name] = checked.stored
            else:
                namespaced.setdefault(key.namespace, {})[key.name] = checked.stored
        self._admission.cluster = replace(view, cluster_runtimes=cluster_wide, runtimes=namespaced)

    def check(self, obj: Mapping[str, Any], source: str, index: int) -> dict[str, Any]:
        group, _, version = str(obj["apiVersion"]).rpartition("/")
        metadata = obj.get("metadata")
        meta = metadata if isinstance(metadata, Mapping) else {}
        cluster_scoped = group == TRAINER_GROUP and obj["kind"] == CLUSTER_TRAINING_RUNTIME
        result: dict[str, Any] = {
            "source": source, "document": index, "apiVersion": obj["apiVersion"], "kind": obj["kind"],
            "namespace": None if cluster_scoped else meta.get("namespace") or self.namespace,
            "name": meta.get("name") or meta.get("generateName") or "",
        }
        if group == TRAINER_GROUP and obj["kind"] == TRAINJOB:
            return {**result, **self._check_trainjob(obj, version, result["namespace"])}
        if _is_runtime(obj):
            return {**result, **_runtime_outcome(obj, result["name"])}
        if group != GROUP or obj["kind"] != KIND:
            return {**result, "decision": "ignored", "reason": "not-mpijob"}
        pruned: list[dict[str, Any]] = []
        if version == HUB_VERSION:
            admitted, removed = as_admitted(obj)
            obj = admitted
            pruned = [_pruned(p) for p in removed]
        return {**result, **self._admit(obj, group, version, result["namespace"]), "pruned": pruned}

    def _check_trainjob(self, trainjob: Mapping[str, Any], version: str, namespace: str) -> dict[str, Any]:
        """As stored (pruned and defaulted; the v2.2+ shape only), then as the webhooks see it, or,
        on a runtime of the input the API server would refuse, not at all."""
        stored, removed = as_stored_trainjob(trainjob, detect_shape(trainjob, self._pinned_shape(namespace)))
        pruned = [_pruned(p) for p in removed]
        refused = self._refused_runtime(stored, namespace)
        if refused is not None:
            return {**_on_refused_runtime(stored, *refused), "pruned": pruned}
        outcome = self._admit(stored, TRAINER_GROUP, version, namespace, TRAINJOB)
        return {**self._said_offline(outcome, stored, namespace), "pruned": pruned}

    def _said_offline(self, outcome: dict[str, Any], trainjob: Mapping[str, Any], namespace: str) -> dict[str, Any]:
        """The webhook's answer for a runtime its cache does not hold ("not created yet, or its
        watch cache is behind") in ``check``'s terms: which runtime was given nowhere, and how to
        give it. Nothing was checked: reason ``runtime-not-given``; admitted or denied as the
        webhook would (skipped without --cluster-state, like the cluster rules)."""
        findings = outcome["findings"]
        missing = [i for i, f in enumerate(findings) if f["rule"] == CLUSTER_STATE_RULE
                   and f["path"] == RUNTIME_REF_PATH]
        if not missing:
            return outcome
        said = Finding(CLUSTER_STATE_RULE, RUNTIME_REF_PATH,
                       runtime_not_given(runtime_ref(trainjob), namespace, self.cluster is not None), Problem.POLICY)
        findings = [{**f, "message": messages.line(said)} if i in missing else f for i, f in enumerate(findings)]
        return {**outcome, "reason": RUNTIME_NOT_GIVEN, "findings": findings}

    def _pinned_shape(self, namespace: str) -> str:
        """The TrainJob API shape the policy pins in ``namespace`` (``auto`` when it pins none)."""
        settings = self.policy.settings_for(namespace)
        return AUTO if settings is None else str(settings.params(TRAINING_RUNTIME_RULE).api_shape)

    def _refused_runtime(self, trainjob: Mapping[str, Any], namespace: str
                         ) -> tuple[RuntimeKey, str, CheckedRuntime] | None:
        """The input's runtime ``trainjob`` names, when the API server would refuse it."""
        ref = runtime_ref(trainjob)
        key = RuntimeKey(ref.kind, namespace if ref.namespaced else "", ref.name)
        found = self._refused_runtimes.get(key) if ref.supported else None
        return None if found is None else (key, *found)

    def _admit(self, obj: Mapping[str, Any], group: str, version: str, namespace: str,
               kind: str = KIND) -> dict[str, Any]:
        mutating = self._call("mutate", obj, group, version, namespace, kind)
        mutation = mutating[1].mutation
        patch: list[dict[str, Any]] = []
        if "patch" in mutating[0]:
            original = obj
            patch = json.loads(base64.b64decode(mutating[0]["patch"]))
            obj = jsonpatch.apply_patch(original, patch)
            patch = _stable(patch, original, obj)
        mutations = {"applied": list(mutation.applied) if mutation else [], "patch": patch}
        if not mutating[0]["allowed"]:
            findings = [_finding(f, Action.DENY) for f in (mutation.invalid if mutation else ())]
            return _outcome(mutating, findings, [], mutating[0].get("warnings", []), mutations)
        validating = self._call("validate", obj, group, version, namespace, kind)
        verdict = validating[1].verdict
        outcomes = verdict.outcomes if verdict else ()
        # A TrainJob's runtime missing from the input is said even without cluster state
        findings = [_finding(o.finding, o.action) for o in outcomes if o.finding.rule != CLUSTER_STATE_RULE
                    or self.cluster is not None or o.finding.path == RUNTIME_REF_PATH]
        warnings = [*mutating[0].get("warnings", []), *validating[0].get("warnings", [])]
        return _outcome(validating, findings, list(verdict.skipped) if verdict else [], warnings, mutations)

    def _call(self, endpoint: str, obj: Mapping[str, Any], group: str, version: str,
              namespace: str, kind: str = KIND) -> tuple[dict[str, Any], Decision]:
        review: dict[str, Any] = {
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": f"check-{endpoint}", "operation": "CREATE", "namespace": namespace,
                "kind": {"group": group, "version": version, "kind": kind},
                "resource": {"group": group, "version": version,
                             "resource": TRAINJOBS if kind == TRAINJOB else "mpijobs"},
                "userInfo": {"username": CHECK_USER}, "object": obj, "oldObject": None, "dryRun": True,
            },
        }
        name = (obj.get("metadata") or {}).get("name")
        if name:
            review["request"]["name"] = name
        self._decisions.clear()
        answer = getattr(self._admission, endpoint)(parse_admission_review(review))
        return answer["response"], self._decisions[-1]


def runtime_not_given(ref: RuntimeRef, namespace: str, cluster_state: bool) -> str:
    """What ``check`` says of a TrainJob whose runtime is in none of its inputs."""
    resource = "trainingruntime" if ref.namespaced else "clustertrainingruntime"
    what = f"{ref.describe()} (namespace {namespace})" if ref.namespaced else ref.describe()
    save = f"kubectl get {resource} {ref.name}{f' -n {namespace}' if ref.namespaced else ''} -o yaml > runtime.yaml"
    where = "nor in --cluster-state" if cluster_state else "and no --cluster-state was given"
    return (f"{what} is in none of the files checked {where}: this TrainJob was not checked (worker count, slots, "
            f"GPUs, quota, node fit); give the runtime in the same input (`mpijob-webhook check trainjob.yaml "
            f"runtime.yaml`, the runtime saved with `{save}`) or with --cluster-state FILE")


def _is_runtime(obj: Mapping[str, Any]) -> bool:
    return str(obj["apiVersion"]).rpartition("/")[0] == TRAINER_GROUP and obj["kind"] in RUNTIME_KINDS


def _runtime_outcome(runtime: Mapping[str, Any], name: str) -> dict[str, Any]:
    """A runtime's own result: read for the TrainJobs (``ignored``) with what the API server
    would prune from it, or ``denied`` with what it would refuse, as the API server says it."""
    checked = check_runtime(runtime)
    pruned = [_pruned(p) for p in checked.pruned]
    if checked.valid:
        return {"decision": "ignored", "reason": "training-runtime", "pruned": pruned}
    lines = [messages.line(f) for f in checked.refused]
    status = {"code": 422, "reason": "Invalid",
              "message": f'{runtime["kind"]}.{TRAINER_GROUP} "{name}" is invalid: {"; ".join(lines)}'}
    return {"decision": "denied", "reason": "invalid-shape", "status": status,
            "findings": [_finding(f, Action.DENY) for f in checked.refused], "warnings": [], "skipped": [],
            "mutations": {"applied": [], "patch": []}, "pruned": pruned}


def _on_refused_runtime(trainjob: Mapping[str, Any], runtime: RuntimeKey, where: str,
                        checked: CheckedRuntime) -> dict[str, Any]:
    """A TrainJob on a runtime of the input the API server would refuse: no cluster can hold
    that runtime, so no verdict on the TrainJob would mean anything (and upstream's webhook
    refuses a TrainJob whose runtime does not exist). Its own type problems are still said."""
    first, *rest = checked.refused
    more = f" (and {plural(len(rest), 'more problem')}: see its own result)" if rest else ""
    problem = Finding(TRAINING_RUNTIME_RULE, "spec.runtimeRef.name",
                      f"{runtime.describe()} ({where}) would be refused by the API server: "
                      f"{refusals_of((first,))}{more}; this TrainJob was not checked against it: fix the runtime "
                      f"and check again", Problem.INVALID, runtime.name)
    own = check_trainjob_shape(trainjob)
    return {"decision": "denied", "reason": "invalid-runtime", "status": None,
            "findings": [_finding(f, Action.DENY) for f in (*own, problem)], "warnings": [], "skipped": [],
            "mutations": {"applied": [], "patch": []}}


def _pruned(field: PrunedField) -> dict[str, Any]:
    return {"path": field.path, "message": field.message, "suggestion": field.suggestion}


def _stable(patch: list[dict[str, Any]], original: Mapping[str, Any], result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The patch ordered by path, when that order gives the same result: the order of
    independent operations follows Python's hash seed, and CI diffs reports across runs."""
    ordered = sorted(patch, key=lambda op: op["path"])
    try:
        same = jsonpatch.apply_patch(original, ordered) == result
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException):
        same = False
    return ordered if same else patch


def _finding(finding: Finding, action: Action) -> dict[str, Any]:
    return {"rule": finding.rule, "action": action.value, "path": finding.path, "message": messages.line(finding)}


def _outcome(call: tuple[dict[str, Any], Decision], findings: list[dict[str, Any]], skipped: list[str],
             warnings: list[str], mutations: dict[str, Any]) -> dict[str, Any]:
    response, decision = call
    status = response.get("status")
    return {
        "decision": "admitted" if response["allowed"] else "denied",
        "reason": decision.reason,
        "status": {k: status[k] for k in ("code", "reason", "message")} if status else None,
        "findings": findings,
        "warnings": warnings,
        "skipped": skipped,
        "mutations": mutations,
    }


@dataclass(frozen=True)
class Report:
    results: tuple[dict[str, Any], ...]
    errors: tuple[BadInput, ...]
    cluster_state: bool

    @property
    def exit_code(self) -> int:
        if self.errors:
            return 2
        return 1 if any(r["decision"] == "denied" for r in self.results) else 0

    def summary(self) -> dict[str, int]:
        count = {d: sum(1 for r in self.results if r["decision"] == d) for d in ("admitted", "denied", "ignored")}
        return {"documents": len(self.results), **count, "errors": len(self.errors)}

    def to_json(self) -> dict[str, Any]:
        return {
            "apiVersion": REPORT_API_VERSION,
            "kind": "CheckReport",
            "exitCode": self.exit_code,
            "summary": self.summary(),
            "clusterState": self.cluster_state,
            "results": list(self.results),
            "errors": [e.to_json() for e in self.errors],
        }

    def with_error(self, error: BadInput) -> Report:
        return replace(self, errors=(*self.errors, error))
