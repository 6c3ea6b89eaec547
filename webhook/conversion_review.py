"""ConversionReview in and out (``apiextensions.k8s.io/v1`` and ``v1beta1``), around the pure
converters of ``policies.conversion``.

A malformed envelope is a ``BadReview`` (4xx with a reason, like the admission routes). A
malformed *object* (not a mapping, not an MPIJob of a served version) or an unknown desired
version answers ``result.status: Failed`` with a message naming the object: the API server then
fails the read or write that needed it, which is right for garbage and never happens for a
well-formed MPIJob (conversion itself does not fail; see ``policies.conversion``).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, NotRequired, TypedDict

from policies.conversion import (
    DEFAULT_OPTIONS,
    SERVED_VERSIONS,
    ConversionError,
    ConversionOptions,
    check_desired,
    convert,
)
from policies.mpijob.reading import HUB_API_VERSION
from webhook.review import BadReview, review_envelope

log = logging.getLogger(__name__)

CONVERSION_VERSIONS = ("apiextensions.k8s.io/v1", "apiextensions.k8s.io/v1beta1")
SUCCESS: Final = "Success"
FAILED: Final = "Failed"


# The shape of the answer, as ConversionRequest is of the request.
class ConversionResult(TypedDict):
    status: Literal["Success", "Failed"]
    message: NotRequired[str]


class ConversionResponse(TypedDict):
    uid: str
    convertedObjects: list[dict[str, Any]]
    result: ConversionResult


class ConversionReviewAnswer(TypedDict):
    apiVersion: str  # the request's: apiextensions.k8s.io/v1 or v1beta1
    kind: Literal["ConversionReview"]
    response: ConversionResponse

# (from apiVersion, to apiVersion, "success" | "failed") for every object: the metrics hook.
ConversionObserver = Callable[[str, str, str], None]


@dataclass(frozen=True)
class ConversionRequest:
    api_version: str
    uid: str
    desired: Any  # checked per review, so that a bad value is answered as Failed, not 400
    objects: list[Any]


def parse_conversion_review(doc: Any) -> ConversionRequest:
    api_version, request, uid = review_envelope(doc, "ConversionReview", CONVERSION_VERSIONS)
    objects = request.get("objects")
    if not isinstance(objects, list):
        raise BadReview(400, "ConversionReview request.objects must be a list")
    return ConversionRequest(api_version, uid, request.get("desiredAPIVersion"), objects)


def _failure(index: int, obj: Any, error: str) -> str:
    """Which object failed, as precisely as the object allows."""
    if isinstance(obj, Mapping):
        found = obj.get("metadata")
        metadata = found if isinstance(found, Mapping) else {}
        name = "/".join(str(p) for p in (metadata.get("namespace"), metadata.get("name")) if p)
        if name:
            return f"objects[{index}] ({obj.get('apiVersion')} {obj.get('kind')} {name}): {error}"
    return f"objects[{index}]: {error}"


@dataclass
class ConversionWebhook:
    """Answers ConversionReviews for one server process."""

    options: ConversionOptions = DEFAULT_OPTIONS
    observers: list[ConversionObserver] = field(default_factory=list)

    def review(self, req: ConversionRequest) -> ConversionReviewAnswer:
        started = time.perf_counter()
        response = self._respond(req)
        elapsed = time.perf_counter() - started
        if response["result"]["status"] != SUCCESS:
            log.warning("conversion %s to %r failed after %.1f ms: %s", req.uid, req.desired, elapsed * 1000,
                        response["result"]["message"])
        return {"apiVersion": req.api_version, "kind": "ConversionReview", "response": response}

    def _respond(self, req: ConversionRequest) -> ConversionResponse:
        try:
            desired = check_desired(req.desired)
        except ConversionError as exc:
            return self._failed(req, str(exc))
        converted: list[dict[str, Any]] = []
        for index, obj in enumerate(req.objects):
            try:
                converted.append(convert(obj, desired, self.options).obj)
            except ConversionError as exc:
                self._observe(obj, desired, "failed")
                return self._failed(req, _failure(index, obj, str(exc)))
            except Exception as exc:  # noqa: BLE001 - a bug answers Failed with a reason, never a 500
                log.exception("converting objects[%d] of %s failed", index, req.uid)
                self._observe(obj, desired, "failed")
                return self._failed(req, _failure(index, obj, f"internal error: {type(exc).__name__}: {exc}"[:400]))
            self._observe(obj, desired, "success")
        return {"uid": req.uid, "convertedObjects": converted, "result": {"status": SUCCESS}}

    @staticmethod
    def _failed(req: ConversionRequest, message: str) -> ConversionResponse:
        return {"uid": req.uid, "convertedObjects": [], "result": {"status": FAILED, "message": message}}

    def _observe(self, obj: Any, desired: str, result: str) -> None:
        source = obj.get("apiVersion") if isinstance(obj, Mapping) else None
        source = source if source in SERVED_VERSIONS else "unknown"  # bounded label values
        for observer in self.observers:
            try:
                observer(source, desired, result)
            except Exception:  # noqa: BLE001 - a metrics sink failing must not change the answer
                log.exception("conversion observer failed")


def hub_converter(options: ConversionOptions = DEFAULT_OPTIONS) -> Callable[[Mapping[str, Any]], dict[str, Any] | None]:
    """The admission webhook's ``to_hub`` hook: an older MPIJob in its v2beta1 form, or None
    when the object is not one this webhook can read (the admission then says so)."""
    def to_hub(obj: Mapping[str, Any]) -> dict[str, Any] | None:
        try:
            return convert(obj, HUB_API_VERSION, options).obj
        except ConversionError:
            return None

    return to_hub
