"""Manifests checked offline with the webhook's own admission logic, for CI pipelines.

Each MPIJob goes through what the API server would do on ``kubectl apply``: unknown fields are
pruned and schema defaults filled in (``policies.mpijob.pruning_defaulting``), the mutating webhook runs and
its patch is applied, and the validating webhook sees the result. Both calls are the real
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
from policies.interface import Action, Finding
from policies.cluster_view import ClusterView, StaticClusterView
from policies.engine import CLUSTER_STATE_RULE
from policies.mpijob.reading import GROUP, HUB_VERSION, KIND
from policies.config.layered_policy import Policy
from policies.mpijob.pruning_defaulting import as_admitted
from policies.trainer.api import GROUP as TRAINER_GROUP
from policies.trainer.api import TRAINJOB, TRAINJOBS
from webhook.admission import Decision
from webhook.review import parse_admission_review
from webhook.runtime import default_runtime

REPORT_API_VERSION = "mpijob-webhook/v1"
CHECK_USER = "mpijob-webhook-check"
NO_CLUSTER_STATE = "no --cluster-state given"
# Cluster objects the cluster-aware rules and the policy read: (kind, the resource ``kubectl get``
# names it by, what it is read for).
CLUSTER_STATE = (
    ("ResourceQuota", "resourcequotas", "quota hard limits and what is left, per namespace"),
    ("LimitRange", "limitranges", "container defaults and maximums (GPUs per pod too), per namespace"),
    ("Node", "nodes", "whether each pod fits on some node: allocatable resources, labels, taints"),
    ("Namespace", "namespaces", "namespace labels, which select the policy's per-namespace overrides"),
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
    """(ClusterTrainingRuntimes by name, TrainingRuntimes by namespace and name) among ``objects``."""
    cluster_wide: dict[str, Any] = {}
    namespaced: dict[str, dict[str, Any]] = {}
    for source, index, obj in objects:
        if obj.get("kind") not in RUNTIME_KINDS:
            continue
        listed = obj.get("metadata")
        meta: Mapping[str, Any] = listed if isinstance(listed, Mapping) else {}
        if not meta.get("name"):
            raise BadInput(source, f"a {obj['kind']} needs metadata.name", index)
        if obj["kind"] == "ClusterTrainingRuntime":
            cluster_wide[meta["name"]] = obj
        else:
            namespaced.setdefault(meta.get("namespace") or default_namespace, {})[meta["name"]] = obj
    return cluster_wide, namespaced


def with_runtimes(view: StaticClusterView, objects: Sequence[tuple[str, int, Mapping[str, Any]]],
                  default_namespace: str) -> StaticClusterView:
    """``view`` with the training runtimes among ``objects`` too (given beside the TrainJobs)."""
    cluster_wide, namespaced = training_runtimes(objects, default_namespace)
    if not cluster_wide and not namespaced:
        return view
    merged = {ns: dict(names) for ns, names in view.runtimes.items()}
    for ns, names in namespaced.items():
        merged.setdefault(ns, {}).update(names)
    return replace(view, cluster_runtimes={**view.cluster_runtimes, **cluster_wide}, runtimes=merged)


def unavailable_cluster() -> StaticClusterView:
    return StaticClusterView(available=False, unavailable_reason=NO_CLUSTER_STATE)


@dataclass
class Checker:
    """Checks one object at a time; ``cluster`` None: cluster-aware rules are skipped."""

    policy: Policy
    cluster: ClusterView | None = None
    namespace: str = "default"
    _decisions: list[Decision] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        policy = self.policy
        if self.cluster is None:  # skipped rules are reported as such, not as warnings or denials
            policy = policy.with_cluster_unavailable(Action.AUDIT)
        runtime = default_runtime(policy, self.cluster or unavailable_cluster())
        self._admission = runtime.admission
        self._admission.observers.append(self._decisions.append)

    def add_runtimes(self, objects: Sequence[tuple[str, int, Mapping[str, Any]]]) -> None:
        """Training runtimes given in the input beside the TrainJobs that name them."""
        view = self._admission.cluster
        if isinstance(view, StaticClusterView):
            self._admission.cluster = with_runtimes(view, objects, self.namespace)

    def check(self, obj: Mapping[str, Any], source: str, index: int) -> dict[str, Any]:
        group, _, version = str(obj["apiVersion"]).rpartition("/")
        metadata = obj.get("metadata")
        meta = metadata if isinstance(metadata, Mapping) else {}
        result: dict[str, Any] = {
            "source": source, "document": index, "apiVersion": obj["apiVersion"], "kind": obj["kind"],
            "namespace": meta.get("namespace") or self.namespace,
            "name": meta.get("name") or meta.get("generateName") or "",
        }
        if group == TRAINER_GROUP and obj["kind"] == TRAINJOB:
            return {**result, **self._admit(dict(obj), group, version, result["namespace"], TRAINJOB), "pruned": []}
        if group == TRAINER_GROUP and obj["kind"] in RUNTIME_KINDS:
            return {**result, "decision": "ignored", "reason": "training-runtime"}
        if group != GROUP or obj["kind"] != KIND:
            return {**result, "decision": "ignored", "reason": "not-mpijob"}
        pruned: list[dict[str, Any]] = []
        if version == HUB_VERSION:
            admitted, removed = as_admitted(obj)
            obj = admitted
            pruned = [{"path": p.path, "message": p.message, "suggestion": p.suggestion} for p in removed]
        return {**result, **self._admit(obj, group, version, result["namespace"]), "pruned": pruned}

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
                    or self.cluster is not None or o.finding.path == "spec.runtimeRef.name"]
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
