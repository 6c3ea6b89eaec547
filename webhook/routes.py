"""HTTP: parse, decide, reply. No policy logic lives here."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Blueprint, Response, current_app, json, request
from werkzeug.exceptions import HTTPException

from webhook import metrics
from webhook.review import BadReview, parse_admission_review, read_json
from webhook.runtime import Runtime

routes = Blueprint("routes", __name__)


def runtime() -> Runtime:
    return current_app.extensions["mpijob-webhook"]


def _json(payload: Any, status: int = 200) -> Response:
    return Response(json.dumps(payload, separators=(",", ":")), status=status, mimetype="application/json")


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    """A metav1.Status, so any 4xx we return still reads well in the API server's logs."""
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": message}


def _read_body() -> Any:
    content_type = (request.mimetype or "").lower()
    if content_type != "application/json":
        raise BadReview(415, f"Content-Type must be application/json, got {request.content_type or 'none'!r}")
    return read_json(request.get_data(cache=False))


def _admission(handle: Callable[[Runtime, Any], dict[str, Any]]) -> Response:
    return _json(handle(runtime(), parse_admission_review(_read_body())))


@routes.post("/validate")
def validate() -> Response:
    return _admission(lambda rt, req: rt.admission.validate(req))


@routes.post("/mutate")
def mutate() -> Response:
    return _admission(lambda rt, req: rt.admission.mutate(req))


@routes.get("/healthz")
def healthz() -> Response:
    return _json({"status": "ok"})


@routes.get("/readyz")
def readyz() -> Response:
    ready, checks = runtime().readiness()
    return _json({"status": "ready" if ready else "not ready", "checks": checks}, 200 if ready else 503)


@routes.get("/metrics")
def metrics_endpoint() -> Response:
    body, content_type = metrics.exposition(request.headers.get("Accept"))
    return Response(body, content_type=content_type)


@routes.app_errorhandler(BadReview)
def bad_review(exc: BadReview) -> Response:
    metrics.record_bad_request(request.path.lstrip("/"), exc.status)
    reasons = {400: "BadRequest", 413: "RequestEntityTooLarge", 415: "UnsupportedMediaType"}
    return _json(status_body(exc.status, reasons.get(exc.status, "BadRequest"), exc.message), exc.status)


@routes.app_errorhandler(HTTPException)
def http_error(exc: HTTPException) -> Response:
    code = exc.code or 500
    message = exc.description or exc.name
    if code == 413:
        message = f"request body is larger than {current_app.config['MAX_CONTENT_LENGTH']} bytes; an AdmissionReview never is"
    return _json(status_body(code, exc.name.replace(" ", ""), message), code)
