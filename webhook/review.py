"""AdmissionReview in: parse and check the envelope, or say precisely why it cannot be used.

Anything wrong with the envelope itself is a ``BadReview`` (answered with a 4xx and a reason);
anything wrong with the *object* is the rules' business and becomes a denial.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from policies.base import UserInfo

ADMISSION_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
# The API server adds five random characters to generateName; the name rule checks the longest.
GENERATED_SUFFIX = "xxxxx"


class BadReview(Exception):
    """The request cannot be answered as an AdmissionReview; ``status`` is the HTTP code."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class AdmissionRequest:
    api_version: str
    uid: str
    group: str
    version: str
    kind: str
    operation: str
    namespace: str
    name: str
    generated_name: bool
    object: Any
    old_object: Any
    dry_run: bool
    sub_resource: str
    user: UserInfo
    request_version: str  # the version the client wrote (requestKind), for matchPolicy Equivalent

    @property
    def is_mpijob(self) -> bool:
        return self.group == "kubeflow.org" and self.kind == "MPIJob"


def read_json(body: bytes) -> Any:
    if not body:
        raise BadReview(400, "empty request body: expected an AdmissionReview JSON document")
    try:
        return json.loads(body)
    except UnicodeDecodeError as exc:
        raise BadReview(400, f"request body is not UTF-8 text: {exc.reason}") from None
    except json.JSONDecodeError as exc:
        raise BadReview(400, f"request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise BadReview(400, "request body is nested too deeply to be an AdmissionReview") from None


def parse_admission_review(doc: Any) -> AdmissionRequest:
    if not isinstance(doc, Mapping):
        raise BadReview(400, "expected a JSON object of kind AdmissionReview")
    api_version = doc.get("apiVersion")
    if doc.get("kind") != "AdmissionReview":
        raise BadReview(400, f"expected kind AdmissionReview, got {doc.get('kind')!r}")
    if api_version not in ADMISSION_VERSIONS:
        raise BadReview(400, f"unsupported AdmissionReview apiVersion {api_version!r}; supported: {', '.join(ADMISSION_VERSIONS)}")
    request = doc.get("request")
    if not isinstance(request, Mapping):
        raise BadReview(400, "AdmissionReview has no request object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview(400, "AdmissionReview request has no uid")
    operation = request.get("operation")
    if operation not in OPERATIONS:
        raise BadReview(400, f"request.operation {operation!r} is not one of {', '.join(OPERATIONS)}")
    kind = _mapping(request, "kind", required=True)
    request_kind = _mapping(request, "requestKind") or kind
    obj = request.get("object")
    if operation in ("CREATE", "UPDATE") and obj is None:
        raise BadReview(400, f"request.object is required for {operation}")
    name, generated = _name(request, obj)
    return AdmissionRequest(
        api_version=api_version,
        uid=uid,
        group=_str(kind.get("group")),
        version=_str(kind.get("version")),
        kind=_str(kind.get("kind")),
        operation=operation,
        namespace=_str(request.get("namespace")),
        name=name,
        generated_name=generated,
        object=obj,
        old_object=request.get("oldObject"),
        dry_run=request.get("dryRun") is True,
        sub_resource=_str(request.get("subResource")),
        user=_user(request.get("userInfo")),
        request_version=_str(request_kind.get("version")),
    )


def _mapping(request: Mapping[str, Any], key: str, *, required: bool = False) -> Mapping[str, Any]:
    value = request.get(key)
    if value is None and not required:
        return {}
    if not isinstance(value, Mapping):
        raise BadReview(400, f"request.{key} must be an object with group, version and kind")
    return value


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _name(request: Mapping[str, Any], obj: Any) -> tuple[str, bool]:
    """The object's name; with generateName (no name yet) the prefix plus five placeholders."""
    if _str(request.get("name")):
        return request["name"], False
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if isinstance(meta, Mapping):
        if _str(meta.get("name")):
            return meta["name"], False
        if _str(meta.get("generateName")):
            return meta["generateName"] + GENERATED_SUFFIX, True
    return "", False


def _user(info: Any) -> UserInfo:
    if not isinstance(info, Mapping):
        return UserInfo()
    groups = info.get("groups")
    extra = info.get("extra")
    return UserInfo(
        username=_str(info.get("username")),
        uid=_str(info.get("uid")),
        groups=tuple(g for g in groups if isinstance(g, str)) if isinstance(groups, list) else (),
        extra={k: tuple(v) for k, v in extra.items() if isinstance(v, list)} if isinstance(extra, Mapping) else {},
    )
