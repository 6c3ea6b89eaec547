"""orjson decodes the request body when the room taken for it holds orjson's cost, and the answer
is exactly ``read_json_with_json``'s (json with our checks, the reference): the same value with
the same types, key order and float bits, or the same BadReview status and message."""
from __future__ import annotations

import json
import math
import struct
import tracemalloc
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testing.app_client import webhook
from testing.builders import admission_review, mpijob
from testing.reference_data import CAPTURED, upstream_v2beta1_jobs
from webhook import review
from webhook.body_budget import worst_cost
from webhook.review import MAX_NESTING, BadReview, read_json, read_json_with_json


def canonical(value: Any) -> Any:
    """``value`` with every type spelled out: dicts in their key order, floats by their bits."""
    if isinstance(value, dict):
        return ("dict", type(value), tuple((canonical(k), canonical(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("list", type(value), tuple(canonical(v) for v in value))
    if isinstance(value, float):
        return (type(value), struct.pack(">d", value))
    return (type(value), value)


def answer(read: Any, body: bytes) -> Any:
    """What ``read`` makes of ``body`` (as a bytearray, as the routes pass it), canonical."""
    buffer = bytearray(body)
    try:
        doc = read(buffer)
    except BadReview as exc:
        return ("BadReview", exc.status, exc.message)
    assert buffer == bytearray(), "the body is let go once decoded"
    return canonical(doc)


def fast(body: bytes | bytearray) -> Any:
    return read_json(body, orjson_fits=True)


def assert_same(body: bytes) -> None:
    assert answer(fast, body) == answer(read_json_with_json, body)


# --- arbitrary JSON documents, written out by hand -------------------------------------------

BOUNDARY_INTS = [sign * (base + offset) for base in (2**63, 2**64, 10**18, 10**19) for offset in (-2, -1, 0, 1)
                 for sign in (1, -1)]
WHITESPACE = st.text(st.sampled_from(" \t\n\r"), max_size=2)
LONE_SURROGATE_ESCAPES = st.sampled_from(["\\ud800", "\\udc00", "\\udbff", "\\udfff", "\\ud800\\u0041", "\\uDC12"])


@st.composite
def json_string(draw: st.DrawFn) -> str:
    """Any text (astral characters included) escaped or raw, sometimes with a lone surrogate escape."""
    text = draw(st.text(max_size=8))
    written = json.dumps(text, ensure_ascii=draw(st.booleans()))
    if draw(st.integers(0, 9)) == 0:
        at = draw(st.integers(1, len(written) - 1))
        if written[at - 1] != "\\":
            written = written[:at] + draw(LONE_SURROGATE_ESCAPES) + written[at:]
    return written


def float_text(value: float, form: int) -> str:
    if form == 0 or value == 0.0:
        return repr(value)
    return f"{value:.17e}" if form == 1 else f"{value:.17E}".replace("E+", "E")


json_number = (
    st.integers().map(str)
    | st.sampled_from(BOUNDARY_INTS).map(str)
    | st.builds(float_text, st.floats(allow_nan=False, allow_infinity=False), st.integers(0, 2))
    | st.sampled_from(["5e-324", "2.2250738585072014e-308", "1.7976931348623157e308", "1e309", "-1e400", "1e-400",
                       "-0.0", "-0", "0.0", "1E2", "1e+2", "0.1e-1"])
)
json_scalar = json_number | json_string() | st.sampled_from(["true", "false", "null"])


@st.composite
def json_list(draw: st.DrawFn, children: st.SearchStrategy[str]) -> str:
    items = draw(st.lists(children, max_size=4))
    return "[" + ",".join(draw(WHITESPACE) + item + draw(WHITESPACE) for item in items) + "]"


@st.composite
def json_object(draw: st.DrawFn, children: st.SearchStrategy[str]) -> str:
    """An object whose text may name a key more than once."""
    keys = draw(st.lists(json_string(), max_size=4))
    if keys and draw(st.booleans()):
        keys.append(draw(st.sampled_from(keys)))  # a duplicate: the last value wins, the first place stays
    pairs = [f"{draw(WHITESPACE)}{key}{draw(WHITESPACE)}:{draw(WHITESPACE)}{draw(children)}" for key in keys]
    return "{" + ",".join(pairs) + draw(WHITESPACE) + "}"


json_text = st.recursive(json_scalar, lambda children: json_list(children) | json_object(children), max_leaves=16)


@st.composite
def nested_about_the_limit(draw: st.DrawFn) -> str:
    """A document inside a chain of lists and objects of about the nesting limit."""
    text = draw(json_text)
    for _ in range(draw(st.integers(MAX_NESTING - 3, MAX_NESTING + 2))):
        text = f"[{text}]" if draw(st.booleans()) else f'{{"k":{text}}}'
    return text


@settings(max_examples=min(settings.default.max_examples, 1000))
@given(json_text | nested_about_the_limit(), WHITESPACE, WHITESPACE)
def test_any_json_document_is_read_as_json_reads_it(text: str, before: str, after: str):
    assert_same((before + text + after).encode())


@settings(max_examples=min(settings.default.max_examples, 300))
@given(nested_about_the_limit())
def test_documents_about_the_nesting_limit_are_read_as_json_reads_them(text: str):
    assert_same(text.encode())


# --- random byte edits of real review bodies -------------------------------------------------

def review_bodies() -> dict[str, bytes]:
    bodies = {path.name: path.read_bytes() for path in sorted(CAPTURED.glob("*.json"))}
    bodies |= {name: json.dumps(admission_review(job)).encode() for name, job in upstream_v2beta1_jobs().items()}
    return bodies


REVIEW_BODIES = review_bodies()
# Bytes that change what JSON reads: structure, digits, escapes, non-UTF-8 and UTF-8 lead bytes.
EDIT_BYTES = st.binary(max_size=4) | st.sampled_from(
    [b'"', b"\\", b"{", b"}", b"[", b"]", b",", b":", b"9" * 19, b"-", b"e", b".", b"\\ud800", b"\xed\xa0\x80",
     b"\xef\xbb\xbf", b"\x00", b"\xff", b"\xc3", b"NaN", b"Infinity", b"1e400", b" ", b"\t"])


@st.composite
def edited_review(draw: st.DrawFn) -> bytes:
    body = bytearray(REVIEW_BODIES[draw(st.sampled_from(sorted(REVIEW_BODIES)))])
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(body)))
        end = min(len(body), at + draw(st.integers(0, 3)))
        body[at:end] = draw(EDIT_BYTES)
    return bytes(body)


@settings(max_examples=min(settings.default.max_examples, 1000))
@given(edited_review())
def test_any_edit_of_a_review_body_is_read_as_json_reads_it(body: bytes):
    assert_same(body)


@pytest.mark.parametrize("name", sorted(REVIEW_BODIES))
def test_every_recorded_and_upstream_review_is_read_by_orjson_and_as_json_reads_it(name: str):
    body = REVIEW_BODIES[name]
    with mock.patch.object(review, "read_json_with_json", side_effect=AssertionError("json was asked")):
        doc = fast(bytearray(body))
    assert canonical(doc) == answer(read_json_with_json, body)


# --- what orjson refuses, and what is left for json -------------------------------------------

ORJSON_REFUSES = {
    "escaped lone high surrogate": b'{"a":"\\ud800"}',
    "escaped lone low surrogate": b'{"a":"\\udc00"}',
    "high surrogate before a BMP escape": b'{"a":"\\ud800\\u0041"}',
    "lone surrogate in a key": b'{"\\udfff":1}',
    "raw UTF-8 surrogate": b'{"a":"\xed\xa0\x80"}',
    "invalid UTF-8": b'{"a":"\xff"}',
    "truncated UTF-8": b'{"a":"\xc3"}',
    "overlong UTF-8": b'{"a":"\xc0\x80"}',
    "UTF-8 BOM": b'\xef\xbb\xbf{"a":1}',
    "UTF-16": '{"a":1}'.encode("utf-16"),
    "UTF-16-LE": '{"a":1}'.encode("utf-16-le"),
    "UTF-32": '{"a":1}'.encode("utf-32"),
    "NaN": b'{"a":NaN}',
    "Infinity": b'{"a":Infinity}',
    "-Infinity": b'{"a":-Infinity}',
    "control character": b'{"a":"\x01"}',
    "nesting 1025": b"[" * 1025 + b"]" * 1025,
    "a float beyond the double range": b'{"a":1e400}',
    "empty": b"",
    "truncated": b'{"a":',
}


@pytest.mark.parametrize("body", ORJSON_REFUSES.values(), ids=ORJSON_REFUSES.keys())
def test_what_orjson_refuses_is_answered_by_json(body: bytes):
    # Where orjson refuses, json's answer stands: the surrogate check and the strict UTF-8 decode
    # need not run after orjson accepted, since orjson refuses every body they refuse.
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(body)
    assert_same(body)


@pytest.mark.parametrize(("body", "message"), [
    (b'{"a":"\\ud800"}', "request body holds \\ud800, a lone UTF-16 surrogate escape"),
    (b'{"a":"\\ud800\\u0041"}', "request body holds \\ud800, a lone UTF-16 surrogate escape"),
    (b'{"a":"\xed\xa0\x80"}', "request body is not UTF-8 text: invalid continuation byte"),
    (b'{"a":NaN}', "request body is not valid JSON: NaN is not a JSON value"),
    (b"[" * 1025 + b"]" * 1025, "request body nests objects and lists more than 100 levels deep"),
])
def test_refusals_keep_their_words(body: bytes, message: str):
    with pytest.raises(BadReview) as refused:
        fast(bytearray(body))
    assert refused.value.status == 400 and refused.value.message.startswith(message)


def test_the_json_path_still_reads_a_bom_utf16_and_a_huge_float():
    assert fast(b'\xef\xbb\xbf{"a":1}') == {"a": 1}
    assert fast('{"a":"\U0001f600"}'.encode("utf-16")) == {"a": "\U0001f600"}
    assert fast(b'{"a":1e400}') == {"a": math.inf}


@pytest.mark.parametrize("number", [2**63 - 1, -2**63, 2**64 - 1, 0, -1, 10**18])
def test_a_64_bit_integer_is_an_int(number: int):
    doc = fast(f'{{"a":{number}}}'.encode())
    assert type(doc["a"]) is int and doc["a"] == number


@pytest.mark.parametrize("number", [2**64, -2**63 - 1, 10**29 + 1, -(10**40)])
def test_an_integer_beyond_64_bits_is_an_int_as_json_reads_it(number: int):
    # orjson alone would give a float (-9223372036854775809 -> -9.223372036854776e+18).
    assert type(orjson.loads(str(number))) is float
    doc = fast(f'{{"a":{number}}}'.encode())
    assert type(doc["a"]) is int and doc["a"] == number


def test_a_run_of_19_digits_anywhere_goes_to_json_and_18_does_not():
    for body in (b'{"a":"1234567890123456789"}', b'{"a":1234567890123456789}', b'{"a":0.1234567890123456789}'):
        with mock.patch.object(review, "read_json_with_json", wraps=read_json_with_json) as by_json:
            assert canonical(fast(bytearray(body))) == canonical(json.loads(body))
        assert by_json.call_count == 1, body
    with mock.patch.object(review, "read_json_with_json", side_effect=AssertionError("json was asked")):
        assert fast(b'{"a":"123456789012345678","b":123456789012345678}') == {
            "a": "123456789012345678", "b": 123456789012345678}


@pytest.mark.parametrize(("depth", "too_deep"), [(MAX_NESTING, False), (MAX_NESTING + 1, True), (1024, True)])
def test_the_nesting_limit_holds_for_what_orjson_accepts(depth: int, too_deep: bool):
    body = b'{"a":' * (depth - 1) + b"[]" + b"}" * (depth - 1)
    orjson.loads(body)  # accepted up to 1,024 levels
    if too_deep:
        with pytest.raises(BadReview) as refused:
            fast(bytearray(body))
        assert refused.value.message == review._TOO_DEEP
    else:
        assert fast(bytearray(body))
    assert_same(body)


def test_the_routes_decode_a_review_charged_whole_with_orjson_and_a_bigger_one_with_json():
    small = admission_review(mpijob())
    big = admission_review(mpijob())
    big["request"]["object"]["metadata"]["annotations"] = {"note": "x" * 70_000}  # over 66,054 bytes
    by_json = mock.patch.object(review, "read_json_with_json", side_effect=AssertionError("json was asked"))
    by_orjson = mock.patch.object(orjson, "loads", side_effect=AssertionError("orjson was asked"))
    with by_json:
        status, answer = webhook().post("/validate", small)
    assert (status, answer["response"]["uid"]) == (200, small["request"]["uid"])
    with by_orjson:
        status, answer = webhook().post("/validate", big)
    assert (status, answer["response"]["uid"]) == (200, big["request"]["uid"])


def test_without_a_whole_charge_the_body_is_read_by_json():
    with mock.patch.object(orjson, "loads", side_effect=AssertionError("orjson was asked")):
        assert read_json(bytearray(REVIEW_BODIES[sorted(REVIEW_BODIES)[0]]))["kind"] == "AdmissionReview"


# --- memory: within the whole charge ------------------------------------------------------------

def body_of(item: bytes, size: int) -> bytes:
    return b"[" + b",".join([item] * (size // (len(item) + 1))) + b"]"


# The shapes the budget's 253 bytes a byte was measured for (tests/webhook/test_body_budget.py),
# at sizes a whole charge is given to with the defaults (up to 66,054 bytes).
WORST_SHAPES = {
    "empty objects": b"{}", "one-key objects": b'{"":0}', "object in object": b'{"":{}}',
    "nested lists": b"[[[[[[]]]]]]", "nested one-key objects": b'{"":{"":{"":{"":{}}}}}',
    "numbers": b"1073741824", "floats": b"1.5", "short strings": b'"ab"', "escaped non-Latin-1": b'"\\u4e2d"',
}


def shaped(name: str, size: int) -> bytes:
    if name == "long ASCII string":
        return json.dumps({"a": "x" * (size - 10)}).encode()
    if name == "astral text":
        return json.dumps({"a": "x" * (size - 14) + "😀"}, ensure_ascii=False).encode()
    if name == "review":
        return json.dumps(admission_review(mpijob())).encode()
    return body_of(WORST_SHAPES[name], size)


def variant(body: bytes, kind: str) -> bytes:
    """``body`` as it is, with a value orjson refuses, or with a string of 19 digits (not given to orjson)."""
    extra = {"accepted": b"", "refused by orjson": b'"\\ud800"', "19 digits": b'"1234567890123456789"'}[kind]
    if not extra:
        return body
    return body[:-1] + b"," + extra + b"]" if body.endswith(b"]") else body[:-1] + b',"z":' + extra + b"}"


@pytest.mark.parametrize("kind", ["accepted", "refused by orjson", "19 digits"])
@pytest.mark.parametrize("size", [4096, 65536])
@pytest.mark.parametrize("name", [*WORST_SHAPES, "long ASCII string", "astral text", "review"])
def test_reading_a_body_takes_less_than_its_whole_charge(name: str, size: int, kind: str):
    body = variant(shaped(name, size), kind)
    if kind == "accepted":
        orjson.loads(body)  # the orjson path is the one measured
    tracemalloc.start()
    try:
        try:
            fast(bytearray(body))
        except BadReview:
            assert kind == "refused by orjson"
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # orjson: up to 49 bytes a body byte (json: up to 40); the whole charge is 253.
    assert peak <= worst_cost(len(body)), f"{peak / len(body):.1f} bytes a body byte"
    assert peak <= 60 * len(body) + 64 * 1024, f"{peak / len(body):.1f} bytes a body byte"
