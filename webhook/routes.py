"""HTTP: parse, decide, reply. No policy logic lives here."""
from __future__ import annotations

import json
import logging
import re
import ssl
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from flask import Blueprint, Flask, Response, current_app, request
from werkzeug.exceptions import ClientDisconnected, HTTPException
from werkzeug.wsgi import get_content_length, get_input_stream

from webhook import client_auth, metrics, responses
from webhook.conversion_review import parse_conversion_review
from webhook.body_budget import BodyBudget, NoRoom, decoding_cost, reading_cost
from webhook.responses import StatusBody
from webhook.review import (MAX_BODY_BYTES, TOO_LARGE, BadReview, identify, parse_admission_review, read_body,
                            read_json, refuse_declared_length, too_costly_to_decode)
from webhook.runtime import Runtime

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

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


def _read_body(budget: BodyBudget) -> Any:
    environ = request.environ  # read once: every access through the request proxy costs
    # The API server sends exactly this; anything else is parsed as werkzeug does.
    if environ.get("CONTENT_TYPE") != "application/json" and (request.mimetype or "").lower() != "application/json":
        got = repr(request.content_type) if request.content_type else "no Content-Type"
        raise BadReview(415, f"Content-Type must be application/json, got {got}")
    # Not request.stream: werkzeug's own limit silently truncates a body longer than it.
    stream = get_input_stream(environ, max_content_length=None)
    declared_length = get_content_length(environ)
    refuse_declared_length(declared_length)  # before taking any room for it
    # Room to read and decode the body in, before a byte of it is read (webhook.body_budget):
    # all a small body can cost at once, else what reading it costs; given back when the
    # request has been answered (around_requests).
    deadline = budget.deadline(requested_wait(environ.get("QUERY_STRING", "")))
    whole = budget.whole_charge(declared_length)
    if whole is not None:
        room = environ[_ROOM_KEY] = budget.reserve(whole, deadline, small=True)
    else:
        room = environ[_ROOM_KEY] = budget.reserve(reading_cost(declared_length, MAX_BODY_BYTES), deadline)
    try:
        body = read_body(stream, declared_length)
    except BadReview:
        raise
    except ClientDisconnected:
        raise BadReview(400, f"request body ended before the {declared_length} bytes its Content-Length "
                             "announced: the client stalled or went away") from None
    except OSError as exc:  # the client stalled or went away (webhook.connections)
        raise BadReview(408, f"request body did not arrive: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - the HTTP server refused the body's framing
        # gunicorn raises its own parse errors (bad chunk size or terminator, bad trailer) only
        # when the body is read, i.e. here: the client's mistake, not the webhook's.
        framing = "chunked framing" if declared_length is None else "framing"
        raise BadReview(400, f"request body could not be read: its {framing} is invalid: {exc}") from None
    if whole is None:  # a whole charge holds what decoding this body can cost: nothing to count
        cost = decoding_cost(body)
        if cost > budget.capacity:
            raise too_costly_to_decode(body, cost, budget.capacity)
        room.resize(cost, deadline)
    # For unexpected_error(): answer for this uid if anything fails. In the WSGI environ, a
    # plain dict, rather than on flask.g, reached through a context-local proxy. A whole charge
    # holds what orjson's decode costs; ``decoding_cost`` is an estimate of json's.
    review = environ[_REVIEW_KEY] = read_json(body, orjson_fits=whole is not None)
    return review


_REVIEW_KEY = "mpijob-webhook.review"
_ROOM_KEY = "mpijob-webhook.body-room"
ADMISSION_PATHS = ("/validate", "/mutate")
# What the plain health port serves (webhook.connections): probes and Prometheus, nothing that
# takes a request body. /metrics is served there only: it costs more than a probe and tells the
# policy's rules and their counts, which the NetworkPolicy keeps to the monitoring stack.
HEALTH_PATHS = frozenset(("/healthz", "/readyz", "/metrics"))


def refused_client(environ: WSGIEnvironment, runtime: Runtime) -> Response | None:
    """The answer to a request that came on the wrong port for its path, or from a client that
    may not call it (webhook.client_auth); None for any other."""
    sock = environ.get("gunicorn.socket")
    if sock is None:  # not under gunicorn (the Flask test client): every route, no client check
        return None
    path = environ.get("PATH_INFO", "")
    if not isinstance(sock, ssl.SSLSocket):
        if path in HEALTH_PATHS:
            return None
        return _json(status_body(404, "NotFound", f"{path} is not served on the health port; "
                                 "admission and conversion are served over TLS only"), 404)
    if path == "/metrics":
        return _json(status_body(404, "NotFound", "/metrics is served on the health port (--health-port)"), 404)
    auth = runtime.client_auth
    if auth is None or path not in auth.paths:
        return None
    peer = environ.get("REMOTE_ADDR", "")
    refusal = client_auth.check(auth, sock, path, f"{peer}:{environ.get('REMOTE_PORT', '')}")
    if refusal is None:
        return None
    client_auth.refuse(refusal)
    reason = "Unauthorized" if refusal.code == 401 else "Forbidden"
    return _json(status_body(refusal.code, reason, refusal.message), refusal.code)


# The API server tells the webhook how long it waits, as a Go duration: ?timeout=10s.
_TIMEOUT_PARAMETER = re.compile(r"(?:^|&)timeout=([0-9.a-zµ%]+)")
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?)(ns|us|µs|ms|s|m|h)")
_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
# Of the API server's timeout, what is left for reading, deciding and answering after a wait.
ANSWER_MARGIN = 1.0


def requested_wait(query: str) -> float | None:
    """Seconds the client may still wait for a body to get room: its ``timeout`` query
    parameter (the API server's webhook timeout) less ``ANSWER_MARGIN``; None if it gives none."""
    found = _TIMEOUT_PARAMETER.search(query) if query else None
    if found is None:
        return None
    text = found.group(1).replace("%C2%B5", "µ")
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + unit for n, unit in parts) != text:
        return None  # not a Go duration: ignored, as anything else in the query is
    return sum(float(n) * _SECONDS[unit] for n, unit in parts) - ANSWER_MARGIN


def around_requests(app: Flask) -> WSGIApplication:
    """``app``'s WSGI callable inside what every request passes through: first, whether its
    port and client may call its path (``refused_client``: answered without Flask seeing it);
    last, once it is answered (the response built, its body not yet sent: where Flask runs its
    teardown hooks), its document goes, and so does the room its body held. A WSGI wrapper
    rather than Flask's before- and teardown hooks: each hook costs every request the calls
    that look it up and run it (docs/performance.md)."""
    wsgi_app = app.wsgi_app
    extensions = app.extensions

    def answer(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        try:
            refused = refused_client(environ, extensions["mpijob-webhook"])
        except Exception as exc:  # noqa: BLE001 - as unexpected_error answers: a Status, not a page
            log.exception("%s %s failed", environ.get("REQUEST_METHOD"), environ.get("PATH_INFO"))
            refused = _json(status_body(500, "InternalError", f"internal error in the webhook: {_error(exc)}"), 500)
        if refused is not None:
            return refused(environ, start_response)
        try:
            return wsgi_app(environ, start_response)
        finally:
            environ.pop(_REVIEW_KEY, None)
            room = environ.pop(_ROOM_KEY, None)
            if room is not None:
                room.release()
    return answer


@routes.post("/validate")
def validate() -> Response:
    served = runtime()  # once: each look-up goes through Flask's context proxy
    return _json(served.admission.validate(parse_admission_review(_read_body(served.body_budget), decoded_json=True)))


@routes.post("/mutate")
def mutate() -> Response:
    served = runtime()  # once: each look-up goes through Flask's context proxy
    return _json(served.admission.mutate(parse_admission_review(_read_body(served.body_budget), decoded_json=True)))


@routes.post("/convert")
def convert() -> Response:
    served = runtime()  # once: each look-up goes through Flask's context proxy
    return _json(served.conversion.review(parse_conversion_review(_read_body(served.body_budget))))


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
    return _json(status_body(exc.status, exc.reason, exc.message), exc.status)


@routes.app_errorhandler(NoRoom)
def no_room(exc: NoRoom) -> Response:
    """429 with Retry-After: client-go (the API server's webhook client) waits and sends the
    request again within its own timeout, as it does for the API server's own load shedding."""
    metrics.record_bad_request(request.path.lstrip("/"), 429)
    _discard_body(request.environ)
    body = status_body(429, "TooManyRequests", exc.message)
    body["details"] = {"retryAfterSeconds": exc.retry_after}
    answer = _json(body, 429)
    answer.headers["Retry-After"] = str(exc.retry_after)
    return answer


def _discard_body(environ: dict[str, Any]) -> None:
    """Read what is left of a body of known length (at most the body limit), keeping none of
    it: a client still sending a body it was refused before it was read gets the answer, not a
    reset connection, and the connection can carry its next request."""
    length = get_content_length(environ)
    if length is None or length > MAX_BODY_BYTES:
        return  # a chunked or oversized body: the connection is closed instead
    stream = get_input_stream(environ, max_content_length=None)
    try:
        while stream.read(64 * 1024):
            pass
    except Exception:  # noqa: BLE001 - a client gone or cut at its deadline: nothing to answer then
        pass


@routes.app_errorhandler(HTTPException)
def http_error(exc: HTTPException) -> Response:
    code = exc.code or 500
    message = exc.description or exc.name
    if code == 413:  # werkzeug's own limit (MAX_CONTENT_LENGTH): the same words as ours
        message = TOO_LARGE
    return _json(status_body(code, exc.name.replace(" ", ""), message), code)


@routes.app_errorhandler(Exception)
def unexpected_error(exc: Exception) -> Response:
    """The last line: no failure outside the rules becomes an HTML page or a silent allow. An
    admission request whose uid is known is refused in an AdmissionReview (code 500 in the body);
    anything else gets a metav1.Status."""
    log.exception("%s %s failed", request.method, request.path)
    error = _error(exc)
    known = identify(request.environ.get(_REVIEW_KEY)) if request.path in ADMISSION_PATHS else None
    if known:
        api_version, uid = known
        return _json(responses.failed(api_version, uid, responses.unchecked_message(
            f"internal error in the webhook ({error})", mutating=request.path == "/mutate")))
    return _json(status_body(500, "InternalError", f"internal error in the webhook: {error}"), 500)


def _error(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]
