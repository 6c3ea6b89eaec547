"""The nesting limit is read from the body's bytes: it must agree with a walk of the decoded
document for any JSON, whatever its strings hold, and answer any body up to the size limit fast."""
from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.review import MAX_BODY_BYTES, MAX_NESTING, _encoding, _nested_deeper_than, json_structure


def walked_deeper_than(doc: Any, limit: int) -> bool:
    """The reference: a walk of the decoded document, counting objects and lists."""
    stack = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                if depth >= limit:
                    return True
                stack.append((child, depth + 1))
    return False


# Strings full of what could be mistaken for structure: brackets, quotes, backslashes, escapes.
tricky_text = st.text(st.sampled_from('[]{}"\\/ \n\tu0:,') | st.characters(exclude_categories=("Cs",)), max_size=12)
scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | tricky_text
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(tricky_text, children, max_size=3),
    max_leaves=12,
)


@st.composite
def wrapped(draw: st.DrawFn) -> Any:
    """A value inside a chain of lists and objects, so that depths around the limit are common."""
    value = draw(json_values)
    for key in draw(st.lists(st.none() | tricky_text, max_size=9)):
        value = [value] if key is None else {key: value}
    return value


@st.composite
def encoded(draw: st.DrawFn, doc: Any) -> bytes:
    """``doc`` as a client may send it: escaped or raw Unicode, compact or indented, and in any
    encoding json.loads reads."""
    text = json.dumps(doc, ensure_ascii=draw(st.booleans()), indent=draw(st.sampled_from([None, 0, 2])))
    return text.encode(draw(st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be",
                                              "utf-32", "utf-32-le", "utf-32-be"])))


# About 8 ms an example, most of it drawing nested documents: 2,000 at most in CI.
@settings(max_examples=min(settings.default.max_examples, 2000))
@given(st.data(), wrapped(), st.integers(min_value=1, max_value=10))
def test_nesting_read_from_the_bytes_agrees_with_a_walk_of_the_document(data: st.DataObject, doc: Any, limit: int):
    body = data.draw(encoded(doc))
    assert json.loads(body) == doc
    assert _nested_deeper_than(body, limit) is walked_deeper_than(doc, limit)


# The body is read a piece at a time (a megabyte in the server): pieces of a few bytes split it
# everywhere, next to escapes, runs of backslashes and quotes included.
@settings(max_examples=min(settings.default.max_examples, 1000))
@given(st.data(), wrapped(), st.integers(min_value=1, max_value=10), st.integers(min_value=1, max_value=7))
def test_nesting_read_in_small_pieces_agrees_with_a_walk_of_the_document(data: st.DataObject, doc: Any, limit: int,
                                                                         piece_bytes: int):
    body = data.draw(encoded(doc))
    assert _nested_deeper_than(body, limit, piece_bytes=piece_bytes) is walked_deeper_than(doc, limit)
    assert _nested_deeper_than(bytearray(body), limit, piece_bytes=piece_bytes) is walked_deeper_than(doc, limit)


@pytest.mark.parametrize(("body", "deeper"), [
    (b"7", False),
    (b"[]", False),
    (b"[[]]", True),
    (b'["[[[", {"]]]": "\\"[["}]', True),
    (b'["\\\\", ["\\\\\\"["]]', True),
    (b'[{"a": "\\\\"}]', True),
    (b'{"a": "\\\\", "b": "["}', False),
], ids=["scalar", "one list", "two lists", "brackets in strings", "escaped backslash and quote",
        "escaped backslash ends a string", "bracket after an escaped backslash"])
def test_nesting_examples_at_a_limit_of_one(body: bytes, deeper: bool):
    assert _nested_deeper_than(body, 1) is deeper


def _chain(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def _filled(unit: bytes) -> bytes:
    """A list of ``unit`` repeated up to the body limit."""
    return b"[" + b",".join([unit] * (MAX_BODY_BYTES // (len(unit) + 1) - 1)) + b"]"


def _ladder(levels: int, side_depth: int) -> bytes:
    """A chain of ``levels`` lists, each also holding a chain of ``side_depth`` lists."""
    body = b"0"
    for _ in range(levels):
        body = b"[" + _chain(side_depth) + b"," + body + b"]"
    return body


ADVERSARIAL = {
    "wide": (_filled(b"[]"), False),
    "objects": (_filled(b'{"a":{"b":[]}}'), False),
    "chains at the limit": (_filled(_chain(MAX_NESTING - 1)), False),
    "chains beyond it": (_filled(_chain(MAX_NESTING + 1)), True),
    "ladders": (_filled(_ladder(MAX_NESTING + 1, MAX_NESTING - 2)), True),
    "brackets in strings": (_filled(b'"' + b"[" * 200 + b'"'), False),
    "escaped backslashes": (_filled(b'"' + b"\\\\" * 50 + b'"'), False),
    "escaped quotes": (_filled(b'"\\""'), False),
}


@pytest.mark.parametrize(("body", "deeper"), ADVERSARIAL.values(), ids=ADVERSARIAL.keys())
def test_nesting_of_a_body_at_the_size_limit_is_read_fast(body: bytes, deeper: bool):
    assert len(body) <= MAX_BODY_BYTES
    started = time.process_time()
    assert _nested_deeper_than(body, MAX_NESTING) is deeper
    assert time.process_time() - started < 0.5  # about 50 ms; json.loads takes longer


@given(st.binary(max_size=6) | st.binary(max_size=5).map(lambda tail: b"{" + tail))
def test_the_encoding_is_told_as_json_loads_tells_it(body: bytes) -> None:
    assert _encoding(body) == json.detect_encoding(body)


def counted(doc: Any) -> tuple[int, int]:
    """(objects and lists, commas and colons) json.dumps writes for ``doc``."""
    if isinstance(doc, list):
        inner = [counted(v) for v in doc]
        return 1 + sum(c for c, _ in inner), max(len(doc) - 1, 0) + sum(s for _, s in inner)
    if isinstance(doc, dict):
        inner = [counted(v) for v in doc.values()]
        return 1 + sum(c for c, _ in inner), max(len(doc) - 1, 0) + len(doc) + sum(s for _, s in inner)
    return 0, 0


@settings(max_examples=min(settings.default.max_examples, 1000))
@given(wrapped(), st.booleans(), st.integers(min_value=1, max_value=7))
def test_the_structure_is_counted_outside_strings(doc: Any, ensure_ascii: bool, piece_bytes: int):
    body = json.dumps(doc, ensure_ascii=ensure_ascii).encode()
    assert json_structure(body, piece_bytes) == counted(doc)
