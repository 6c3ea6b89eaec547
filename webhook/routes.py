"""HTTP: parse, decide, reply. No policy logic lives here."""
from __future__ import annotations

import json
import logging
from typing import Any

from flask import Blueprint, Response, current_app, request
from werkzeug.exceptions import ClientDisconnected, HTTPException
from werkzeug.wsgi import get_content_length, get_input_stream

from webhook import metrics, responses
from webhook.conversion_review import parse_conversion_review
from webhook.review import TOO_LARGE, BadReview, identify, parse_admission_review, read_body, read_json
from webhook.responses import StatusBody
from webhook.runtime import Runtime

log = logging.getLogger(__name__)
routes = Blueprint("routes", __name__)


def runtime() -> Runtime:
    return current_app.extensions["mpijob-webhook"]


# What flask.json.dumps gives with the app's settings (keys in order, ASCII only), without
# the cost of looking the provider up and building an encoder for every response.
_ENCODER = json.JSONEncoder(separators=(",", ":"))


def _json(payload: Any, status: int = 200) -> Response:
    # content_type rather than mimetype: the same header, without werkzeug working it out again.
    return Response(_ENCODER.encode(payload), status, content_type="application/json")


def status_body(code: int, reason: str, message: str) -> StatusBody:
    """A metav1.Status, so any 4xx we return still reads well in the API server's logs."""
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": message}


def _read_body() -> Any:
    environ = request.environ  # read once: every access through the request proxy costs
    # The API server sends exactly this; anything else is parsed as werkzeug does.
    if environ.get("CONTENT_TYPE") != "application/json" and (request.mimetype or "").lower() != "application/json":
        got = repr(request.content_type) if request.content_type else "no Content-Type"
        raise BadReview(415, f"Content-Type must be application/json, got {got}")
    # Not request.stream: werkzeug's own limit silently truncates a body longer than it.
    stream = get_input_stream(environ, max_content_length=None)
    declared_length = get_content_length(environ)
    try:
        body = read_body(stream, declared_length)
    except ClientDisconnected:
        raise BadReview(400, f"request body ended before the {declared_length} bytes its Content-Length "
                             "announced: the client stalled or went away") from None
    except OSError as exc:  # the client stalled or went away (webhook.connections)
        raise BadReview(408, f"request body did not arrive: {exc}") from None
    # For unexpected_error(): answer for this uid if anything fails. In the WSGI environ, a
    # plain dict, rather than on flask.g, reached through a context-local proxy.
    review = environ[_REVIEW_KEY] = read_json(body)
    return review


_REVIEW_KEY = "mpijob-webhook.review"
ADMISSION_PATHS = ("/validate", "/mutate")


@routes.post("/validate")
def validate() -> Response:
    return _json(runtime().admission.validate(parse_admission_review(_read_body())))


@routes.post("/mutate")
def mutate() -> Response:
    return _json(runtime().admission.mutate(parse_admission_review(_read_body())))


@routes.post("/convert")
def convert() -> Response:
    return _json(runtime().conversion.review(parse_conversion_review(_read_body())))


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
    reasons = {400: "BadRequest", 408: "Timeout", 413: "RequestEntityTooLarge", 415: "UnsupportedMediaType"}
    return _json(status_body(exc.status, reasons.get(exc.status, "BadRequest"), exc.message), exc.status)


@routes.app_errorhandler(HTTPException)
def http_error(exc: HTTPException) -> Response:
    code = exc.code or 500
    message = exc.description or exc.name
    if code == 413:
        message = TOO_LARGE
    return _json(status_body(code, exc.name.replace(" ", ""), message), code)


@routes.app_errorhandler(Exception)
def unexpected_error(exc: Exception) -> Response:
    """The last line: no failure outside the rules becomes an HTML page or a silent allow. An
    admission request whose uid is known is refused in an AdmissionReview (code 500 in the body);
    anything else gets a metav1.Status."""
    log.exception("%s %s failed", request.method, request.path)
    error = f"{type(exc).__name__}: {exc}"[:300]
    known = identify(request.environ.get(_REVIEW_KEY)) if request.path in ADMISSION_PATHS else None
    if known:
        api_version, uid = known
        return _json(responses.failed(api_version, uid, responses.unchecked_message(
            f"internal error in the webhook ({error})", mutating=request.path == "/mutate")))
    return _json(status_body(500, "InternalError", f"internal error in the webhook: {error}"), 500)
