"""From a parsed AdmissionRequest to a response: which requests are checked at all, with which
settings, and what is reported to the observers (audit log, metrics)."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from policies.interface import Action, Finding, Mutation, Problem, Rule, RuleContext
from policies.cluster_view import ClusterView
from policies.conversion import advisory
from policies.engine import CLUSTER_STATE_RULE, MutationResult, Outcome, Verdict, evaluate, json_patch, mutate
from policies.mpijob.reading import HUB_VERSION
from policies.config.layered_policy import Policy
from policies.config.rule_settings import Settings
from policies.mpijob.kueue_changes import only_kueue_changes
from policies.mpijob.pruning_defaulting import as_admitted
from policies.registry import TRAINJOB_RULES
from policies.trainer.api import KUEUE_MANAGER, KUEUE_POD_SET
from policies.trainer.trainjob_review import TRAINING_RUNTIME_RULE, TrainJobReview, attach, review_trainjob
from policies.trainer.effective_job_memo import decoded_inputs_key, inputs_key_or_none
from policies.trainer.type_check import check_trainjob_shape
from webhook import responses
from webhook.responses import AdmissionReviewAnswer
from webhook.conversion_review import hub_converter
from webhook.review import AdmissionRequest
from webhook.unlisted_kueue import UnlistedKueue, kueue_service_account

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Decision:
    """What one admission call decided, for the audit log and metrics. Made once per request
    (slotted, not frozen: cheaper to build) and complete, ``seconds`` included, before any
    observer sees it; observers only read it."""

    endpoint: str  # validate | mutate
    request: AdmissionRequest
    allowed: bool
    reason: str  # checked | exempt | not-mpijob | skipped-operation | unchanged-spec | older-version | …
    verdict: Verdict | None = None
    mutation: MutationResult | None = None
    patch_ops: int = 0
    seconds: float = 0.0


Observer = Callable[[Decision], None]
# Turns an MPIJob of another apiVersion into its v2beta1 form; None when it cannot.
HubConverter = Callable[[Mapping[str, Any]], "Mapping[str, Any] | None"]


@dataclass
class Admission:
    policy: Callable[[], Policy]
    cluster: ClusterView
    # What TrainJobs are checked against (None: ``cluster``): the same caches, where the Trainer's
    # runtimes also decide whether cluster state is available (watch_caches.ClusterCaches.for_job_kind).
    trainjob_cluster: ClusterView | None = None
    observers: list[Observer] = field(default_factory=list)
    to_hub: HubConverter = hub_converter()  # the conversion webhook's own converter
    rules: Sequence[Rule] | None = None  # None: every rule of policies.registry
    mutations: Sequence[Mutation] | None = None  # None: every mutation of policies.registry
    unlisted_kueue: UnlistedKueue = field(default_factory=UnlistedKueue)

    # --- validating -------------------------------------------------------------------------
    def validate(self, req: AdmissionRequest) -> AdmissionReviewAnswer:
        return self._decide("validate", req, self._validate)

    def _validate(self, req: AdmissionRequest) -> tuple[AdmissionReviewAnswer, Decision]:
        if not req.is_mpijob:  # routed by kind first: an MPIJob never asks whether it is a TrainJob
            return self._validate_trainjob(req) if req.is_trainjob else self._not_ours(req, "validate")
        passed = self._pass_through(req, "validate")
        if passed:
            return passed
        job = self._hub_object(req.object, req)
        if job is None:
            return self._allow(req, "validate", "older-version", warnings=[self._older_version_warning(req)])
        if req.operation == "UPDATE" and self._spec_unchanged(req):
            return self._allow(req, "validate", "unchanged-spec")
        policy = self.policy()
        settings = self._settings(req, policy)
        if settings is None:
            return self._allow(req, "validate", "exempt")
        old = self._hub_object(req.old_object, req) if req.operation == "UPDATE" else None
        verdict = evaluate(self._context(req, job, settings, old), self.rules)
        if old is not None and self._by_kueue(req, policy, old, job):
            verdict, note = _not_denied_for_kueue(verdict, req.user.username)
            decision = Decision("validate", req, verdict.allowed, "kueue-admission", verdict=verdict)
            return responses.from_verdict(req, verdict, extra_warnings=note), decision
        decision = Decision("validate", req, verdict.allowed, "checked", verdict=verdict)
        return responses.from_verdict(req, verdict, extra_warnings=self._conversion_warnings(req)), decision

    def _by_kueue(self, req: AdmissionRequest, policy: Policy, old: Any, job: Any) -> bool:
        """Kueue starting or stopping an MPIJob: an UPDATE from one of the policy's
        ``kueueUsernames`` that changes only what Kueue writes (``policies.mpijob.kueue_changes``).
        Those fields are Kueue's by convention only, and anyone allowed to update an MPIJob can
        write them: from anyone else the same update is checked like any other. A ServiceAccount
        named like Kueue's that the list does not name gets the same check, and a warning in the
        log (``webhook.unlisted_kueue``)."""
        username = req.user.username
        if username in policy.kueue_usernames:
            return only_kueue_changes(old, job)
        if kueue_service_account(username) and only_kueue_changes(old, job):
            self.unlisted_kueue.saw(username, policy.kueue_usernames, f"{req.kind} {req.namespace}/{req.name}")
        return False

    # --- mutating ---------------------------------------------------------------------------
    def mutate(self, req: AdmissionRequest) -> AdmissionReviewAnswer:
        return self._decide("mutate", req, self._mutate)

    def _mutate(self, req: AdmissionRequest) -> tuple[AdmissionReviewAnswer, Decision]:
        if req.is_mpijob:
            passed = self._pass_through(req, "mutate")
            if passed:
                return passed
            if req.operation != "CREATE":
                return self._allow(req, "mutate", "skipped-operation")
            if req.version != HUB_VERSION:
                # A patch must be in the version of the object the API server sent, and our
                # mutations are written for v2beta1: patching a converted copy and translating the
                # patch back is not sound (v1alpha1 has no launcher template to add a label to).
                # Registered for v2beta1 with matchPolicy Equivalent, this webhook gets v2beta1
                # objects converted from any version, and those it mutates.
                return self._allow(req, "mutate", "older-version")
            settings = self._settings(req)
            if settings is None:
                return self._allow(req, "mutate", "exempt")
            ctx = self._context(req, req.object, settings, None)
        elif req.is_trainjob:
            prepared = self._trainjob_to_mutate(req)
            if not isinstance(prepared, RuleContext):
                return prepared
            ctx = prepared
        else:
            return self._not_ours(req, "mutate")
        result = mutate(ctx, self.mutations)
        if result.invalid:
            response = responses.deny_findings(req, result.invalid)
            return response, Decision("mutate", req, False, "invalid-shape", mutation=result)
        if result.error is not None:
            response = responses.failed(req.api_version, req.uid,
                                        responses.unchecked_message(result.error, mutating=True))
            return response, Decision("mutate", req, False, "error", mutation=result)
        patch = json_patch(req.object, result)
        audit = {"mutated-by": ",".join(result.applied)} if result.applied else None
        response = responses.allow(req, warnings=result.warnings, audit=audit, patch=patch)
        return response, Decision("mutate", req, True, "checked", mutation=result, patch_ops=len(patch))

    # --- TrainJobs (Kubeflow Trainer v2) ---------------------------------------------------
    def _validate_trainjob(self, req: AdmissionRequest) -> tuple[AdmissionReviewAnswer, Decision]:
        """Only TrainJobs on an MPI runtime are checked, by the same rules and policy as MPIJobs;
        the others pass untouched. A runtime the cache does not hold is the cluster-state case."""
        passed = self._pass_through(req, "validate")
        if passed:
            return passed
        if not isinstance(req.object, Mapping):
            return self._allow(req, "validate", "not-mpi-runtime")
        if req.operation == "UPDATE" and self._spec_unchanged(req):
            return self._allow(req, "validate", "unchanged-spec")
        policy = self.policy()
        if req.operation == "UPDATE" and req.user.username in policy.kueue_usernames and self._kueue_admission(req):
            return self._allow(req, "validate", "kueue-admission")
        if req.operation == "UPDATE" and kueue_service_account(req.user.username) and self._kueue_admission(req):
            self.unlisted_kueue.saw(req.user.username, policy.kueue_usernames, f"{req.kind} {req.namespace}/{req.name}")
        settings = self._settings(req, policy)
        if settings is None:
            return self._allow(req, "validate", "exempt")
        key = self._inputs_key(req, req.object)
        invalid = self._trainjob_shape(req, "validate", key)
        if invalid:
            return invalid
        old = req.old_object if req.operation == "UPDATE" and isinstance(req.old_object, Mapping) else None
        old_key = self._inputs_key(req, old) if old is not None else None
        if old is not None and check_trainjob_shape(old, old_key):
            old = None  # a stored object the rules cannot read: nothing to ratchet against
        review = self._review(req, req.object, settings, old, key)
        if review.runtime is None:
            if not review.runtime_ref.supported:
                return self._allow(req, "validate", "not-mpi-runtime")  # not ours: upstream refuses it
            verdict = Verdict((Outcome(self._runtime_unknown(review), settings.cluster_unavailable),))
            decision = Decision("validate", req, verdict.allowed, "checked", verdict=verdict)
            return responses.from_verdict(req, verdict), decision
        if review.effective is None:
            return self._allow(req, "validate", "not-mpi-runtime")
        old_review = self._review(req, old, settings, None, old_key) if old is not None else None
        ctx = self._context(req, req.object, settings, old if old_review is not None and old_review.is_mpi else None)
        attach(ctx, review, old_review if old_review is not None and old_review.is_mpi else None)
        rules = TRAINJOB_RULES if self.rules is None else self.rules
        if review.multikueue:  # its pods run in another cluster: only what does not depend on this one
            rules = tuple(rule for rule in rules if not rule.needs_cluster)
        verdict = evaluate(ctx, rules, shape_check=None)
        decision = Decision("validate", req, verdict.allowed, "checked", verdict=verdict)
        return responses.from_verdict(req, verdict), decision

    def _trainjob_to_mutate(self, req: AdmissionRequest) -> RuleContext | tuple[AdmissionReviewAnswer, Decision]:
        """The context the mutations get for a TrainJob, or the answer when none run."""
        passed = self._pass_through(req, "mutate")
        if passed:
            return passed
        if req.operation != "CREATE":
            return self._allow(req, "mutate", "skipped-operation")
        if not isinstance(req.object, Mapping):
            return self._allow(req, "mutate", "not-mpi-runtime")
        settings = self._settings(req)
        if settings is None:
            return self._allow(req, "mutate", "exempt")
        key = self._inputs_key(req, req.object)
        invalid = self._trainjob_shape(req, "mutate", key)
        if invalid:
            return invalid
        review = self._review(req, req.object, settings, None, key)
        if review.runtime is not None and review.effective is None:
            return self._allow(req, "mutate", "not-mpi-runtime")
        if review.runtime is None and not review.runtime_ref.supported:
            return self._allow(req, "mutate", "not-mpi-runtime")
        # A runtime not cached yet: the queue label still applies; the pod mutations need the
        # runtime's templates and are left out (/validate says the runtime is unknown).
        ctx = self._context(req, req.object, settings, None)
        attach(ctx, review)
        return ctx

    @staticmethod
    def _inputs_key(req: AdmissionRequest, obj: Mapping[str, Any]) -> bytes | str | None:
        """The key of the effective-job memo and the well-typed inputs for ``obj`` (the request's
        object or oldObject), computed once per object: orjson's text for what the body decoded
        to, ``marshal``'s bytes for objects given as Python or YAML (``check``), which may hold
        types that text does not tell apart (a tuple from a list)."""
        return decoded_inputs_key(obj) if req.decoded_json else inputs_key_or_none(obj)

    def _trainjob_shape(self, req: AdmissionRequest, endpoint: str,
                        inputs_key: bytes | str | None) -> tuple[AdmissionReviewAnswer, Decision] | None:
        """A TrainJob whose fields the webhook reads have the wrong types: refused with their
        paths, nothing else runs (the runtime could not even be chosen safely). ``inputs_key``,
        the key of the effective-job memo, is computed once per object and serves both."""
        findings = check_trainjob_shape(req.object, inputs_key)
        if not findings:
            return None
        return responses.deny_findings(req, findings), Decision(endpoint, req, False, "invalid-shape")

    def _review(self, req: AdmissionRequest, obj: Mapping[str, Any], settings: Settings,
                old: Mapping[str, Any] | None, inputs_key: bytes | str | None) -> TrainJobReview:
        pinned = settings.params(TRAINING_RUNTIME_RULE).api_shape
        return review_trainjob(obj, req.namespace, self._trainjob_view, pinned_shape=pinned, old_trainjob=old,
                               inputs_key=inputs_key)

    def _runtime_unknown(self, review: TrainJobReview) -> Finding:
        view = self._trainjob_view
        reason = "" if view.available else f" ({view.unavailable_reason})"
        return Finding(
            CLUSTER_STATE_RULE, "spec.runtimeRef.name",
            f"{review.runtime_label} is not known to the webhook{reason}: it is not created yet, or its watch "
            "cache is behind; the TrainJob was not checked (worker count, slots, GPUs, quota, node fit)",
            Problem.POLICY)

    @staticmethod
    def _kueue_admission(req: AdmissionRequest) -> bool:
        """Kueue admitting or stopping a TrainJob: only its own entries (v2.2+: the
        ``runtimePatches`` entry of its manager; v2.1, Kueue 0.16 and before: the
        ``podTemplateOverrides`` entries labelled with their pod set) and ``spec.suspend``
        changed. Never blocked, or a queued job could never start. Those entries are Kueue's
        by name only, which anyone can write: the caller asks this only of requests from
        Kueue's own identity (the policy's ``kueueUsernames``); from anyone else the same
        change is checked like any other UPDATE."""
        old, new = req.old_object, req.object
        if not isinstance(old, Mapping) or not isinstance(new, Mapping):
            return False
        old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
        if not isinstance(old_spec, Mapping) or not isinstance(new_spec, Mapping):
            return False
        ignored = ("suspend", "runtimePatches", "podTemplateOverrides")
        if {k: v for k, v in old_spec.items() if k not in ignored} != \
                {k: v for k, v in new_spec.items() if k not in ignored}:
            return False
        return _without_kueue(old_spec.get("runtimePatches")) == _without_kueue(new_spec.get("runtimePatches")) \
            and _without_kueue_overrides(old_spec.get("podTemplateOverrides")) == \
            _without_kueue_overrides(new_spec.get("podTemplateOverrides"))

    # --- shared -----------------------------------------------------------------------------
    def _decide(self, endpoint: str, req: AdmissionRequest,
                decide: Callable[[AdmissionRequest], tuple[AdmissionReviewAnswer, Decision]]) -> AdmissionReviewAnswer:
        """The response to ``req``; its decision, timed, goes to the observers. Whatever fails
        while deciding (policy lookup, cluster view, conversion, patch) refuses the request: an
        error never turns into a silent allow. An observer failing changes nothing."""
        started = time.perf_counter()
        try:
            response, decision = decide(req)
        except Exception as exc:  # noqa: BLE001 - refuse, never allow unchecked
            log.exception("%s of request %s failed", endpoint, req.uid)
            error = f"{type(exc).__name__}: {exc}"[:300]
            message = responses.unchecked_message(error, mutating=endpoint == "mutate")
            response = responses.failed(req.api_version, req.uid, message)
            decision = Decision(endpoint, req, False, "error")
        decision.seconds = time.perf_counter() - started
        for observer in self.observers:
            try:
                observer(decision)
            except Exception:  # noqa: BLE001 - an audit sink failing must not change the verdict
                log.exception("decision observer failed")
        return response

    def _not_ours(self, req: AdmissionRequest, endpoint: str) -> tuple[AdmissionReviewAnswer, Decision]:
        """Neither an MPIJob nor a TrainJob: the webhook's registration sends it by mistake."""
        log.warning("%s called for %s/%s %s: not an MPIJob, allowed (check the webhook's rules)",
                    endpoint, req.group, req.version, req.kind)
        return self._allow(req, endpoint, "not-mpijob")

    def _pass_through(self, req: AdmissionRequest, endpoint: str) -> tuple[AdmissionReviewAnswer, Decision] | None:
        """Operations and subresources no rule or mutation is about (of an MPIJob or a TrainJob)."""
        if req.operation in ("DELETE", "CONNECT") or req.sub_resource:
            return self._allow(req, endpoint, "skipped-operation")
        return None

    def _allow(self, req: AdmissionRequest, endpoint: str, reason: str,
               warnings: list[str] | None = None) -> tuple[AdmissionReviewAnswer, Decision]:
        return responses.allow(req, warnings=warnings or ()), Decision(endpoint, req, True, reason)

    def _hub_object(self, obj: Any, req: AdmissionRequest) -> Any:
        """The object in v2beta1 form, as the API server will store it; None when it is of an
        older version we cannot convert.

        A converted object (by us, or by the API server for a webhook registered with
        matchPolicy Equivalent) is neither pruned nor defaulted, and may carry fields of the
        version it was written in (``spec.replicas`` of v1alpha1): the rules judge the object
        that will be stored, as they do for objects written in v2beta1."""
        if not isinstance(obj, Mapping):
            return obj
        if req.version == HUB_VERSION:
            converted = req.request_version not in ("", HUB_VERSION)
            return as_admitted(obj)[0] if converted else obj
        hub = self.to_hub(obj)
        return None if hub is None else as_admitted(hub)[0]

    @staticmethod
    def _conversion_warnings(req: AdmissionRequest) -> list[str]:
        """A job written in an older version is checked as v2beta1; on create, say so (the field
        paths are v2beta1's) and what the user must know before it runs."""
        written = req.request_version or req.version
        if written == HUB_VERSION or req.operation != "CREATE":
            return []
        note = f"checked as kubeflow.org/{HUB_VERSION} (converted from kubeflow.org/{written}); field paths refer to that form"
        extra = advisory(f"kubeflow.org/{written}")
        return [note, extra] if extra else [note]

    @staticmethod
    def _older_version_warning(req: AdmissionRequest) -> str:
        return (f"kubeflow.org/{req.version} MPIJobs are not validated by this webhook; "
                f"write the job as kubeflow.org/{HUB_VERSION} to have it checked before it runs")

    @staticmethod
    def _spec_unchanged(req: AdmissionRequest) -> bool:
        """Metadata-only edits (labels, finalizers) of existing jobs are never blocked.
        A deletionTimestamp earns nothing here: only an identical spec passes."""
        old = req.old_object
        return isinstance(old, Mapping) and isinstance(req.object, Mapping) and \
            req.object.get("spec") == old.get("spec")

    def _settings(self, req: AdmissionRequest, policy: Policy | None = None) -> Settings | None:
        view = self._cluster_for(req)
        namespace = view.namespace(req.namespace) if view.available else None
        labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
        return (policy or self.policy()).settings_for(req.namespace, labels)

    @property
    def _trainjob_view(self) -> ClusterView:
        return self.cluster if self.trainjob_cluster is None else self.trainjob_cluster

    def _cluster_for(self, req: AdmissionRequest) -> ClusterView:
        return self._trainjob_view if req.is_trainjob else self.cluster

    def _context(self, req: AdmissionRequest, job: Any, settings: Settings, old: Any) -> RuleContext:
        return RuleContext(
            operation=req.operation, job=job, namespace=req.namespace, name=req.name,
            settings=settings, cluster=self._cluster_for(req), old_job=old if isinstance(old, Mapping) else None,
            generated_name=req.generated_name, user=req.user, dry_run=req.dry_run,
        )


def _not_denied_for_kueue(verdict: Verdict, username: str) -> tuple[Verdict, list[str]]:
    """Kueue's update is never denied, or a job it admitted could never start (nor one it
    preempts stop): every denial becomes a warning, in the answer, the audit annotations
    (``warned-by``), the audit log and the metrics. A rule that failed still refuses the
    request: nothing is allowed unchecked. With the warnings, one line saying why they do not
    block (none when nothing would have)."""
    if not verdict.denials:
        return verdict, []
    outcomes = tuple(Outcome(o.finding, Action.WARN) if o.action is Action.DENY else o for o in verdict.outcomes)
    note = (f"not denied: Kueue ({username}) started or stopped the job, changing only runPolicy.suspend and the pod "
            "templates' scheduling fields; the findings below deny this update from anyone else")
    return replace(verdict, outcomes=outcomes), [note]


def _without_kueue_overrides(overrides: Any) -> list[Any]:
    """A v2.1 podTemplateOverrides list without Kueue's entries: those whose metadata labels
    name a pod set (``kueue.x-k8s.io/podset``, how Kueue finds and removes its own)."""
    if not isinstance(overrides, list):
        return [] if overrides is None else [overrides]
    return [o for o in overrides if not (isinstance(o, Mapping) and _labels_of(o).get(KUEUE_POD_SET))]


def _labels_of(override: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = override.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}


def _without_kueue(patches: Any) -> list[Any]:
    """A runtimePatches list without Kueue's own entry."""
    if not isinstance(patches, list):
        return [] if patches is None else [patches]
    return [p for p in patches if not (isinstance(p, Mapping) and p.get("manager") == KUEUE_MANAGER)]
