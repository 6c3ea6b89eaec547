"""AdmissionReview out: the response envelope, in the API server's own terms and limits."""
from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, NotRequired, TypedDict

from policies import messages
from policies.interface import Action, Finding
from policies.engine import Verdict
from webhook.review import AdmissionRequest

# The API server truncates a warning over 256 characters and drops all beyond 4096 in total.
WARNING_MAX = 256
WARNINGS_TOTAL_MAX = 4096
_WARNING_PREFIX = re.compile(r"^\s*warning\s*:\s*", re.IGNORECASE)  # kubectl adds its own
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # not printable in the Warning header
# Keys become ``<webhook name>/<key>``: the key must be the name part of a qualified name.
_AUDIT_KEY = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_COMPACT = json.JSONEncoder(separators=(",", ":"))  # json.dumps would build one per call
_FIRED_BY = {Action.DENY: "denied-by", Action.WARN: "warned-by", Action.AUDIT: "audited-by"}
# The keys this webhook writes itself, all valid: only other keys need the pattern's check.
_OWN_AUDIT_KEYS = frozenset([*_FIRED_BY.values(), "skipped-rules", "mutated-by"])


# --- the shapes of what goes out, as the requests' dataclasses are of what comes in ---------
class StatusDetails(TypedDict):
    name: str
    group: str
    kind: str
    causes: list[dict[str, str]]  # reason, message, field: policies.messages.cause


class Status(TypedDict):
    """The metav1.Status of a refused admission request (``response.status``)."""

    status: Literal["Failure"]
    code: int
    reason: str
    message: str
    details: NotRequired[StatusDetails]


class StatusBody(TypedDict):
    """A metav1.Status on its own: the body of a 4xx or 500 that is not an AdmissionReview."""

    kind: Literal["Status"]
    apiVersion: Literal["v1"]
    status: Literal["Failure"]
    code: int
    reason: str
    message: str
    details: NotRequired[dict[str, Any]]  # e.g. retryAfterSeconds


class AdmissionResponse(TypedDict):
    uid: str
    allowed: bool
    patchType: NotRequired[Literal["JSONPatch"]]
    patch: NotRequired[str]  # base64 of the JSON Patch
    status: NotRequired[Status]
    warnings: NotRequired[list[str]]
    auditAnnotations: NotRequired[dict[str, str]]


class AdmissionReviewAnswer(TypedDict):
    apiVersion: str  # the request's: admission.k8s.io/v1 or v1beta1
    kind: Literal["AdmissionReview"]
    response: AdmissionResponse


def review(api_version: str, response: AdmissionResponse) -> AdmissionReviewAnswer:
    return _review(api_version, AdmissionResponse(**response))


def _review(api_version: str, response: AdmissionResponse) -> AdmissionReviewAnswer:
    """``review`` for a response dict built here, which needs no copy."""
    return {"apiVersion": api_version, "kind": "AdmissionReview", "response": response}


def allow(
    req: AdmissionRequest,
    *,
    warnings: Iterable[str] = (),
    audit: Mapping[str, str] | None = None,
    patch: Sequence[Mapping[str, Any]] | None = None,
) -> AdmissionReviewAnswer:
    response: AdmissionResponse = {"uid": req.uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(_COMPACT.encode(list(patch)).encode()).decode()
    return _review(req.api_version, _decorate(response, warnings, audit))


def deny(
    req: AdmissionRequest,
    *,
    code: int,
    reason: str,
    message: str,
    details: StatusDetails | None = None,
    warnings: Iterable[str] = (),
    audit: Mapping[str, str] | None = None,
) -> AdmissionReviewAnswer:
    return _denial(req.api_version, req.uid, _status(code, reason, message, details), warnings, audit)


def failed(
    api_version: str,
    uid: str,
    message: str,
    *,
    warnings: Iterable[str] = (),
    audit: Mapping[str, str] | None = None,
) -> AdmissionReviewAnswer:
    """Deciding failed: the request is refused, never let through unchecked (Kyverno
    CVE-2025-46342). HTTP 200 with code 500 in the body, so the API server refuses it whatever
    the webhook's failurePolicy, and shows the message."""
    return _denial(api_version, uid, _status(500, "InternalError", message), warnings, audit)


def unchecked_message(error: str, *, mutating: bool = False) -> str:
    done, instead = ("prepared", "admitted half-done") if mutating else ("checked", "admitted unchecked")
    return (f"the MPIJob could not be {done} and was refused rather than {instead}: {error}; "
            "retry, and tell the cluster administrator if it persists")


def _status(code: int, reason: str, message: str, details: StatusDetails | None = None) -> Status:
    status: Status = {"status": "Failure", "code": code, "reason": reason, "message": message}
    if details:
        status["details"] = StatusDetails(**details)
    return status


def _denial(api_version: str, uid: str, status: Status, warnings: Iterable[str],
            audit: Mapping[str, str] | None) -> AdmissionReviewAnswer:
    response: AdmissionResponse = {"uid": uid, "allowed": False, "status": Status(**status)}
    return _review(api_version, _decorate(response, warnings, audit))


def from_verdict(req: AdmissionRequest, verdict: Verdict, *,
                 extra_warnings: Iterable[str] = ()) -> AdmissionReviewAnswer:
    warnings = [*extra_warnings, *map(messages.line, verdict.warnings)]
    audit = audit_annotations(verdict)
    if verdict.error is not None:
        return failed(req.api_version, req.uid, unchecked_message(verdict.error), warnings=warnings, audit=audit)
    if verdict.allowed:
        return allow(req, warnings=warnings, audit=audit)
    return deny_findings(req, verdict.denials, policy=verdict.is_policy_denial, warnings=warnings, audit=audit)


def deny_findings(
    req: AdmissionRequest,
    findings: Sequence[Finding],
    *,
    policy: bool = False,
    warnings: Iterable[str] = (),
    audit: Mapping[str, str] | None = None,
) -> AdmissionReviewAnswer:
    """Field-value problems: 422 Invalid with causes, so kubectl prints them like native
    validation errors. Any policy problem (quota, node fit): 403 Forbidden, like quota admission."""
    name = req.name or "(unnamed)"
    lines = "\n".join(messages.line(f) for f in findings)
    details: StatusDetails = {"name": name, "group": req.group or "kubeflow.org", "kind": req.kind or "MPIJob",
               "causes": [messages.cause(f) for f in findings]}
    if policy:
        return deny(req, code=403, reason="Forbidden", message=f'{req.kind or "MPIJob"} "{name}" is forbidden: {lines}',
                    details=details, warnings=warnings, audit=audit)
    return deny(req, code=422, reason="Invalid", message=f'{req.kind or "MPIJob"}.{req.group or "kubeflow.org"} "{name}" is invalid: {lines}',
                details=details, warnings=warnings, audit=audit)


def audit_annotations(verdict: Verdict) -> dict[str, str]:
    """Keys become ``<webhook name>/<key>`` on the API server, so they must be plain names."""
    fired: dict[Action, dict[str, None]] = {}  # rule ids by action, each once, in order of firing
    for outcome in verdict.outcomes:
        rules = fired.get(outcome.action)
        if rules is None:
            rules = fired[outcome.action] = {}
        rules[outcome.finding.rule] = None
    annotations = {_FIRED_BY[action]: ",".join(rules) for action, rules in fired.items()}
    if verdict.skipped:
        annotations["skipped-rules"] = ",".join(verdict.skipped)
    return annotations


def limit_warnings(warnings: Iterable[str]) -> list[str]:
    """Within the API server's limits: each ≤ 256 characters, ≤ 4096 in all, no 'Warning:' prefix."""
    kept: list[str] = []
    total = 0
    for text in warnings:
        text = _one_line(text)
        if text[:1] in "wW":  # the prefix cannot start any other way (_one_line strips spaces)
            text = _WARNING_PREFIX.sub("", text)
        if not text or text in kept:
            continue
        if len(text) > WARNING_MAX:
            text = text[: WARNING_MAX - 3] + "..."
        if total + len(text) > WARNINGS_TOTAL_MAX:
            remaining = WARNINGS_TOTAL_MAX - total
            note = "more warnings were left out"
            if remaining >= len(note):
                kept.append(note)
            break
        kept.append(text)
        total += len(text)
    return kept


def _one_line(text: str) -> str:
    """Single spaces, nothing unprintable. Printable text has no whitespace but the space, so
    the usual message needs no more than that check."""
    if _printable(text) and "  " not in text and text[:1] != " " and text[-1:] != " ":
        return text
    return _CONTROL.sub("", " ".join(text.split()))


_PRINTABLE_ASCII = bytes(range(0x20, 0x7F))


def _printable(text: str) -> bool:
    """``text.isprintable()``, at less than half the cost for ASCII text (the usual warning):
    its bytes less the printable ones leave nothing."""
    if text.isascii():
        return not text.encode().translate(None, _PRINTABLE_ASCII)
    return text.isprintable()


def _decorate(response: AdmissionResponse, warnings: Iterable[str],
              audit: Mapping[str, str] | None) -> AdmissionResponse:
    limited = limit_warnings(warnings)
    if limited:
        response["warnings"] = limited
    if audit:
        if audit.keys() <= _OWN_AUDIT_KEYS:
            response["auditAnnotations"] = dict(audit)
        else:
            response["auditAnnotations"] = {k: v for k, v in audit.items() if _AUDIT_KEY.fullmatch(k)}
    return response
