"""From a parsed AdmissionRequest to a response: which requests are checked at all, with which
settings, and what is reported to the observers (audit log, metrics)."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from policies.interface import Mutation, Rule, RuleContext
from policies.cluster_view import ClusterView
from policies.conversion import advisory
from policies.engine import MutationResult, Verdict, evaluate, json_patch, mutate
from policies.mpijob.reading import HUB_VERSION
from policies.config.layered_policy import Policy
from policies.config.rule_settings import Settings
from policies.mpijob.pruning_defaulting import as_admitted
from webhook import responses
from webhook.responses import AdmissionReviewAnswer
from webhook.conversion_review import hub_converter
from webhook.review import AdmissionRequest

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
    observers: list[Observer] = field(default_factory=list)
    to_hub: HubConverter = hub_converter()  # the conversion webhook's own converter
    rules: Sequence[Rule] | None = None  # None: every rule of policies.registry
    mutations: Sequence[Mutation] | None = None  # None: every mutation of policies.registry

    # --- validating -------------------------------------------------------------------------
    def validate(self, req: AdmissionRequest) -> AdmissionReviewAnswer:
        return self._decide("validate", req, self._validate)

    def _validate(self, req: AdmissionRequest) -> tuple[AdmissionReviewAnswer, Decision]:
        passed = self._pass_through(req, "validate")
        if passed:
            return passed
        job = self._hub_object(req.object, req)
        if job is None:
            return self._allow(req, "validate", "older-version", warnings=[self._older_version_warning(req)])
        if req.operation == "UPDATE" and self._spec_unchanged(req):
            return self._allow(req, "validate", "unchanged-spec")
        settings = self._settings(req)
        if settings is None:
            return self._allow(req, "validate", "exempt")
        old = self._hub_object(req.old_object, req) if req.operation == "UPDATE" else None
        verdict = evaluate(self._context(req, job, settings, old), self.rules)
        decision = Decision("validate", req, verdict.allowed, "checked", verdict=verdict)
        return responses.from_verdict(req, verdict, extra_warnings=self._conversion_warnings(req)), decision

    # --- mutating ---------------------------------------------------------------------------
    def mutate(self, req: AdmissionRequest) -> AdmissionReviewAnswer:
        return self._decide("mutate", req, self._mutate)

    def _mutate(self, req: AdmissionRequest) -> tuple[AdmissionReviewAnswer, Decision]:
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
        result = mutate(self._context(req, req.object, settings, None), self.mutations)
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

    def _pass_through(self, req: AdmissionRequest, endpoint: str) -> tuple[AdmissionReviewAnswer, Decision] | None:
        if not req.is_mpijob:
            log.warning("%s called for %s/%s %s: not an MPIJob, allowed (check the webhook's rules)",
                        endpoint, req.group, req.version, req.kind)
            return self._allow(req, endpoint, "not-mpijob")
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

    def _settings(self, req: AdmissionRequest) -> Settings | None:
        namespace = self.cluster.namespace(req.namespace) if self.cluster.available else None
        labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
        return self.policy().settings_for(req.namespace, labels)

    def _context(self, req: AdmissionRequest, job: Any, settings: Settings, old: Any) -> RuleContext:
        return RuleContext(
            operation=req.operation, job=job, namespace=req.namespace, name=req.name,
            settings=settings, cluster=self.cluster, old_job=old if isinstance(old, Mapping) else None,
            generated_name=req.generated_name, user=req.user, dry_run=req.dry_run,
        )
