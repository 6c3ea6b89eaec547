"""AdmissionReview in: every way a request body can be unusable gets a 4xx whose whole body is a
metav1.Status naming the problem, on both endpoints; what parses is read the way the API server
means it."""
from __future__ import annotations

import copy
import io
import json
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from werkzeug.test import EnvironBuilder, run_wsgi_app

from testing.builders import admission_review, mpijob
from tests.conftest import captured_reviews
from testing.app_client import webhook
from webhook import MAX_BODY_BYTES
from policies.interface import UserInfo
from webhook.review import GENERATED_SUFFIX, AdmissionRequest, MAX_NESTING, BadReview, parse_admission_review, read_body, read_json

ENDPOINTS = ("/validate", "/mutate")
RECORDED_CREATE = captured_reviews()["02-create-validating.request.json"]


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason,
            "message": message}


def bad_request(message: str) -> dict[str, Any]:
    return status(400, "BadRequest", message)


def review_with(**request_changes: Any) -> dict[str, Any]:
    """The recorded CREATE with keys of ``request`` replaced (None: removed)."""
    review = copy.deepcopy(RECORDED_CREATE)
    for key, value in request_changes.items():
        if value is None:
            review["request"].pop(key, None)
        else:
            review["request"][key] = value
    return review


def nested(depth: int) -> bytes:
    """A valid AdmissionReview whose object nests ``depth`` lists inside metadata.managedFields."""
    review = copy.deepcopy(RECORDED_CREATE)
    review["request"]["object"]["metadata"]["managedFields"][0]["fieldsV1"] = "PLACEHOLDER"
    # review > request > object > metadata > managedFields > [0]: 6 levels around the placeholder
    return json.dumps(review).encode().replace(b'"PLACEHOLDER"', b"[" * (depth - 6) + b"]" * (depth - 6))


BODY_ERRORS = {
    "empty": (b"", "empty request body: expected an AdmissionReview or ConversionReview JSON document"),
    "not json": (b"hello", "request body is not valid JSON: Expecting value at line 1 column 1"),
    "only spaces": (b"   ", "request body is truncated: the JSON document ends at line 1 column 4 before it is complete"),
    "truncated in a string": (b'{"apiVersion": "admission.k8s.io/v1", "kind": "Admiss',
                              "request body is truncated: the string that starts at line 1 column 47 never ends"),
    "truncated between keys": (b'{"apiVersion": "admission.k8s.io/v1",',
                               "request body is truncated: the JSON document ends at line 1 column 38 before it is complete"),
    "truncated on a new line": (b'{\n  "kind": "AdmissionReview",\n  "request": {',
                                "request body is truncated: the JSON document ends at line 3 column 15 before it is complete"),
    "trailing garbage": (b'{"a": 1} x', "request body is not valid JSON: Extra data at line 1 column 10"),
    "not UTF-8": (b'\xc3\x28{}', "request body is not UTF-8 text: invalid continuation byte"),
    "NaN": (b'{"kind": NaN}', "request body is not valid JSON: NaN is not a JSON value"),
    "-Infinity": (b'[-Infinity]', "request body is not valid JSON: -Infinity is not a JSON value"),
    "a 5000 digit number": (b'{"kind": ' + b"7" * 5000 + b"}",
                            "request body is not valid JSON: Exceeds the limit (4300 digits) for integer string "
                            "conversion: value has 5000 digits"),
    "nested too deeply": (nested(MAX_NESTING + 1),
                          f"request body nests objects and lists more than {MAX_NESTING} levels deep; "
                          "no AdmissionReview or ConversionReview does"),
    "nested beyond the decoder": (b"[" * 100_000 + b"]" * 100_000,
                                  f"request body nests objects and lists more than {MAX_NESTING} levels deep; "
                                  "no AdmissionReview or ConversionReview does"),
    "a list": (b"[]", "expected a JSON object of kind AdmissionReview"),
    "null": (b"null", "expected a JSON object of kind AdmissionReview"),
    "a string": (b'"AdmissionReview"', "expected a JSON object of kind AdmissionReview"),
}

ENVELOPE_ERRORS = {
    "no kind": ({**RECORDED_CREATE, "kind": None}, "expected kind AdmissionReview, got no kind"),
    "wrong kind": ({**RECORDED_CREATE, "kind": "ConversionReview"},
                   "expected kind AdmissionReview, got 'ConversionReview'"),
    "unknown apiVersion": ({**RECORDED_CREATE, "apiVersion": "admission.k8s.io/v2"},
                           "unsupported AdmissionReview apiVersion 'admission.k8s.io/v2'; "
                           "supported: admission.k8s.io/v1, admission.k8s.io/v1beta1"),
    "no apiVersion": ({k: v for k, v in RECORDED_CREATE.items() if k != "apiVersion"},
                      "unsupported AdmissionReview apiVersion (none given); "
                      "supported: admission.k8s.io/v1, admission.k8s.io/v1beta1"),
    "a long apiVersion is cut": ({**RECORDED_CREATE, "apiVersion": "v" * 500},
                                 "unsupported AdmissionReview apiVersion '" + "v" * 99 + "; "
                                 "supported: admission.k8s.io/v1, admission.k8s.io/v1beta1"),
    "no request": ({k: v for k, v in RECORDED_CREATE.items() if k != "request"},
                   "AdmissionReview has no request object"),
    "request is a list": ({**RECORDED_CREATE, "request": []}, "AdmissionReview has no request object"),
    "no uid": (review_with(uid=None), "AdmissionReview request has no uid"),
    "empty uid": (review_with(uid=""), "AdmissionReview request has no uid"),
    "numeric uid": (review_with(uid=42), "AdmissionReview request has no uid"),
    "unknown operation": (review_with(operation="PATCH"),
                          "request.operation 'PATCH' is not one of CREATE, UPDATE, DELETE, CONNECT"),
    "no operation": (review_with(operation=None),
                     "request.operation (none given) is not one of CREATE, UPDATE, DELETE, CONNECT"),
    "no kind in the request": (review_with(kind=None), "request.kind must be an object with group, version and kind"),
    "requestKind a string": (review_with(requestKind="MPIJob"),
                             "request.requestKind must be an object with group, version and kind"),
    "CREATE without object": (review_with(object=None), "request.object is required for CREATE"),
    "UPDATE without object": (review_with(operation="UPDATE", object=None, oldObject=mpijob()),
                              "request.object is required for UPDATE"),
}


@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize(("body", "message"), BODY_ERRORS.values(), ids=BODY_ERRORS.keys())
def test_unreadable_body_is_a_400_naming_the_problem(path: str, body: bytes, message: str):
    assert webhook().post(path, body) == (400, bad_request(message))


@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize(("review", "message"), ENVELOPE_ERRORS.values(), ids=ENVELOPE_ERRORS.keys())
def test_unusable_envelope_is_a_400_naming_the_problem(path: str, review: dict[str, Any], message: str):
    served = webhook()
    assert served.post(path, review) == (400, bad_request(message))
    assert served.decisions == []  # nothing was decided, nothing reported as a decision


def test_deepest_allowed_nesting_is_read():
    assert webhook().post("/validate", nested(MAX_NESTING))[0] == 200


@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize(("content_type", "shown"), [
    ("text/plain", "'text/plain'"),
    ("application/x-www-form-urlencoded", "'application/x-www-form-urlencoded'"),
    ("application/yaml", "'application/yaml'"),
    (None, "no Content-Type"),
], ids=["text", "form", "yaml", "none"])
def test_wrong_content_type_is_a_415(path: str, content_type: str | None, shown: str):
    answer = webhook().post(path, RECORDED_CREATE, content_type=content_type)
    assert answer == (415, status(415, "UnsupportedMediaType", f"Content-Type must be application/json, got {shown}"))


def test_json_content_type_with_parameters_is_accepted():
    assert webhook().post("/validate", RECORDED_CREATE, content_type="application/json; charset=utf-8")[0] == 200


TOO_LARGE = status(413, "RequestEntityTooLarge",
                   "request body is larger than 7 MiB (7340032 bytes); no AdmissionReview or ConversionReview is")


class EndlessBody:
    """A request body that never ends, counting what the server reads of it."""

    def __init__(self, chunk: int = 64 * 1024) -> None:
        self.chunk = b" " * chunk
        self.read_bytes = 0

    def read(self, size: int = -1) -> bytes:
        data = self.chunk if size < 0 else self.chunk[:size]
        self.read_bytes += len(data)
        return data

    def __iter__(self) -> Iterator[bytes]:
        while True:
            yield self.read()


def streamed(path: str, body: Any, content_length: int | None = None, *, terminated: bool = True) -> tuple[int, Any]:
    """POST ``body`` the way gunicorn hands it over: a stream that the server ends (chunked
    transfer encoding), with or without a declared length (``terminated=False``: a server that
    leaves the Content-Length to the app). The test client cannot send a body of unknown
    length, so the app is called as a WSGI application."""
    environ = EnvironBuilder(path=path, method="POST", content_type="application/json").get_environ()
    environ["wsgi.input"] = body
    if terminated:
        environ["wsgi.input_terminated"] = True
    environ.pop("CONTENT_LENGTH", None)
    if content_length is not None:
        environ["CONTENT_LENGTH"] = str(content_length)
    app_iter, status_line, _ = run_wsgi_app(webhook().client.application, environ)
    return int(status_line.split()[0]), json.loads(b"".join(app_iter))


@pytest.mark.parametrize("path", ENDPOINTS)
def test_declared_length_over_7_mib_is_refused_before_reading(path: str):
    body = EndlessBody()
    assert streamed(path, body, content_length=MAX_BODY_BYTES + 1) == (413, TOO_LARGE)
    assert body.read_bytes == 0


@pytest.mark.parametrize("path", ENDPOINTS)
def test_endless_chunked_body_is_cut_at_7_mib_with_bounded_memory_and_time(path: str):
    body = EndlessBody()
    tracemalloc.start()
    started = time.perf_counter()
    try:
        answer = streamed(path, body)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert answer == (413, TOO_LARGE)
    assert MAX_BODY_BYTES <= body.read_bytes <= MAX_BODY_BYTES + 2 * len(body.chunk)
    assert peak < 3 * MAX_BODY_BYTES
    assert time.perf_counter() - started < 10


class ReadOnce(io.BytesIO):
    """A connection kept open after the body: a second read would wait for the client."""

    reads = 0

    def read(self, size: int | None = -1) -> bytes:
        self.reads += 1
        assert self.reads == 1, "read again after the body's Content-Length"
        return super().read(size)


def test_a_body_of_known_length_is_read_without_waiting_for_more():
    assert read_body(ReadOnce(b'{"kind": "AdmissionReview"}'), 27) == b'{"kind": "AdmissionReview"}'


def test_body_shorter_than_its_content_length_is_a_400():
    answer = streamed("/validate", io.BytesIO(b'{"kind": "AdmissionReview"}'), content_length=1000, terminated=False)
    assert answer == (400, bad_request("request body ended before the 1000 bytes its Content-Length announced: "
                                       "the client stalled or went away"))


class StalledBody:
    """What a client cut off for being too slow looks like to the app (webhook.connections)."""

    def read(self, size: int = -1) -> bytes:
        raise ConnectionResetError(104, "client did not send its request within 10s")


def test_body_that_stalls_is_a_408_not_a_500():
    answer = streamed("/mutate", StalledBody())
    assert answer == (408, status(408, "Timeout", "request body did not arrive: "
                                                  "[Errno 104] client did not send its request within 10s"))


def test_body_of_exactly_7_mib_is_read():
    review = copy.deepcopy(RECORDED_CREATE)
    review["request"]["object"]["metadata"]["annotations"] = {"padding": ""}
    size = len(json.dumps(review).encode())
    review["request"]["object"]["metadata"]["annotations"]["padding"] = "x" * (MAX_BODY_BYTES - size)
    body = json.dumps(review).encode()
    assert len(body) == MAX_BODY_BYTES
    assert webhook().post("/validate", body)[0] == 200


def test_other_methods_and_paths_get_a_status_not_html():
    client = webhook().client
    missing = client.get("/nope")
    assert (missing.status_code, missing.get_json()["reason"], missing.mimetype) == (404, "NotFound", "application/json")
    wrong = client.get("/validate")
    assert (wrong.status_code, wrong.get_json()["reason"], wrong.mimetype) == (405, "MethodNotAllowed", "application/json")


# --- what a readable review means ---------------------------------------------------------------

def test_recorded_create_is_read_as_sent():
    req = parse_admission_review(RECORDED_CREATE)
    assert (req.api_version, req.uid, req.group, req.version, req.kind, req.operation) == (
        "admission.k8s.io/v1", RECORDED_CREATE["request"]["uid"], "kubeflow.org", "v2beta1", "MPIJob", "CREATE")
    assert (req.namespace, req.name, req.generated_name, req.dry_run, req.sub_resource) == ("team-a", "pi", False, False, "")
    assert req.object == RECORDED_CREATE["request"]["object"]
    assert req.old_object is None
    assert req.user.username == RECORDED_CREATE["request"]["userInfo"]["username"]
    assert req.request_version == "v2beta1"


def test_generate_name_without_name_reads_as_prefix_and_five_characters():
    recorded = captured_reviews()["11-create-generatename-mutating.request.json"]
    assert "name" not in recorded["request"]
    req = parse_admission_review(recorded)
    assert (req.name, req.generated_name) == ("pi-gen-" + GENERATED_SUFFIX, True)
    assert len(GENERATED_SUFFIX) == 5


def test_delete_carries_no_object_and_is_readable():
    req = parse_admission_review(captured_reviews()["09b-delete-v2beta1-validating.request.json"])
    assert (req.operation, req.object, req.name) == ("DELETE", None, "pi-ssa-new")
    assert req.old_object["metadata"]["name"] == "pi-ssa-new"


def test_dry_run_and_subresource_are_read():
    assert parse_admission_review(captured_reviews()["01-create-dryrun-validating.request.json"]).dry_run is True
    assert parse_admission_review(captured_reviews()["05b-status-patch-v2beta1-validating.request.json"]).sub_resource == "status"


def test_odd_user_info_is_read_without_failing():
    review = admission_review(mpijob())
    review["request"]["userInfo"] = {"username": 7, "groups": ["a", 1, None], "extra": {"k": ["v"], "bad": "x"}}
    user = parse_admission_review(review).user
    assert (user.username, user.groups, dict(user.extra)) == ("", ("a",), {"k": ("v",)})


def test_read_json_raises_bad_review_with_status():
    with pytest.raises(BadReview) as raised:
        read_json(b"{")
    assert (raised.value.status, raised.value.message) == (
        400, "request body is truncated: the JSON document ends at line 1 column 2 before it is complete")


# --- the parse against a plain reference reading ------------------------------------------------

def _reference_parse(review: dict[str, Any]) -> AdmissionRequest:
    """Field by field, by name, as the API server documents the request."""
    request = review["request"]
    text = lambda value: value if isinstance(value, str) else ""  # noqa: E731
    kind = request["kind"]
    request_kind = request.get("requestKind") or kind
    obj = request.get("object")
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    if text(request.get("name")):
        name, generated = request["name"], False
    elif text(meta.get("name")):
        name, generated = meta["name"], False
    elif text(meta.get("generateName")):
        name, generated = meta["generateName"] + GENERATED_SUFFIX, True
    else:
        name, generated = "", False
    info = request.get("userInfo")
    user = UserInfo()
    if isinstance(info, dict):
        groups, extra = info.get("groups"), info.get("extra")
        user = UserInfo(
            username=text(info.get("username")), uid=text(info.get("uid")),
            groups=tuple(g for g in groups if isinstance(g, str)) if isinstance(groups, list) else (),
            extra={k: tuple(v) for k, v in extra.items() if isinstance(v, list)} if isinstance(extra, dict) else {})
    return AdmissionRequest(
        api_version=review["apiVersion"], uid=request["uid"], group=text(kind.get("group")),
        version=text(kind.get("version")), kind=text(kind.get("kind")), operation=request["operation"],
        namespace=text(request.get("namespace")), name=name, generated_name=generated, object=obj,
        old_object=request.get("oldObject"), dry_run=request.get("dryRun") is True,
        sub_resource=text(request.get("subResource")), user=user, request_version=text(request_kind.get("version")))


_ANY = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
_TEXTISH = st.text(max_size=8) | _ANY
_GVK = st.fixed_dictionaries({}, optional={"group": _TEXTISH, "version": _TEXTISH, "kind": _TEXTISH})


@given(
    operation=st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT"]),
    kind=_GVK, request_kind=st.none() | _GVK,
    fields=st.fixed_dictionaries({}, optional={
        "name": _TEXTISH, "namespace": _TEXTISH, "subResource": _TEXTISH, "dryRun": _ANY, "oldObject": _ANY}),
    metadata=st.none() | _ANY | st.fixed_dictionaries({}, optional={"name": _TEXTISH, "generateName": _TEXTISH}),
    user=_ANY | st.fixed_dictionaries({}, optional={
        "username": _TEXTISH, "uid": _TEXTISH, "groups": _ANY | st.lists(_TEXTISH, max_size=3),
        "extra": _ANY | st.dictionaries(st.text(max_size=5), _ANY | st.lists(st.text(max_size=5), max_size=2),
                                        max_size=3)}),
)
def test_any_readable_review_is_read_as_the_reference_reads_it(operation, kind, request_kind, fields, metadata, user):
    request = {"uid": "u-1", "operation": operation, "kind": kind, "userInfo": user,
               "object": {"metadata": metadata}, **fields}
    if request_kind is not None:
        request["requestKind"] = request_kind
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    assert parse_admission_review(review) == _reference_parse(review)
