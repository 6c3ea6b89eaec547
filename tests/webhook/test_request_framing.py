"""Where a request ends, found as its bytes arrive (webhook.request_framing): the event loop hands a
request to a thread at exactly that point, however the bytes are cut up on the way."""
from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.request_framing import (INVALID, TOO_LARGE, WAIT, Answer, ChunkedBody, declared_length, head_end,
                                     request_path)

HEAD = b"POST /validate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
BODY = b"5\r\nhello\r\n6;name=value\r\n world\r\n0\r\nX-Trailer: yes\r\n\r\n"
NEXT = b"GET /healthz HTTP/1.1\r\n\r\n"


def scan_as_it_arrives(data: bytes, cuts: list[int], limit: int = 1 << 20) -> tuple[int, int]:
    """Feed ``data`` to one scan, cut at ``cuts``: (the first answer that is not WAIT, and how
    much had arrived then)."""
    scan = ChunkedBody(len(HEAD))
    for end in sorted({*cuts, len(data)}):
        found = scan.scan(data[:end], limit)
        if found != WAIT:
            return found, end
    return WAIT, len(data)


@given(st.lists(st.integers(min_value=len(HEAD), max_value=len(HEAD + BODY + NEXT)), max_size=12))
def test_a_chunked_body_ends_where_its_trailers_end_however_it_arrives(cuts: list[int]):
    data = HEAD + BODY + NEXT
    found, arrived = scan_as_it_arrives(data, cuts)
    assert found == len(HEAD + BODY)
    assert arrived >= len(HEAD + BODY)


@pytest.mark.parametrize(("body", "end"), [
    (b"0\r\n\r\n", 5),
    (b"3\r\nabc\r\n0\r\n\r\n", 13),
    (b"3 ;ext\r\nabc\r\n0\r\n\r\n", 18),
    (b"0\r\nX-Trailer: value\n\r\n", 22),  # a bare LF in the trailers: the parser answers it
    (b"0\r\nX: y\n\n", 9),
])
def test_where_chunked_bodies_end(body: bytes, end: int):
    assert ChunkedBody(len(HEAD)).scan(HEAD + body, 100) == len(HEAD) + end


@pytest.mark.parametrize("body", [b"zz\r\n", b"-5\r\nhello\r\n", b"5\r\nhelloXX0\r\n\r\n", b"\r\n", b"5\n"])
def test_broken_chunked_framing_is_handed_over_at_once(body: bytes):
    """The thread's parser then answers it (400 with the reason), without waiting for more."""
    assert ChunkedBody(len(HEAD)).scan(HEAD + body, 100) == INVALID


def test_a_chunk_size_line_that_never_ends_is_handed_over():
    assert ChunkedBody(len(HEAD)).scan(HEAD + b"5" + b" " * 9000, 100) == INVALID
    assert ChunkedBody(len(HEAD)).scan(HEAD + b"5" + b" " * 100, 100) == WAIT


def test_a_chunked_body_over_the_limit_is_known_from_its_chunk_sizes():
    scan = ChunkedBody(len(HEAD))
    assert scan.scan(HEAD + b"40\r\n" + b"a" * 64 + b"\r\n", 100) == WAIT
    assert scan.scan(HEAD + b"40\r\n" + b"a" * 64 + b"\r\n" + b"40\r\n", 100) == TOO_LARGE


def test_the_end_of_a_head():
    assert head_end(b"GET / HTTP/1.1\r\nA: b\r\n\r\nbody", 0) == (20, 24)
    assert head_end(b"GET / HTTP/1.1\nA: b\n\nbody", 0) == (19, 21)
    assert head_end(b"GET / HTTP/1.1\r\nA: b\r\n", 0) == (-1, -1)


@pytest.mark.parametrize(("fields", "length"), [
    (b"POST / HTTP/1.1\r\ncontent-LENGTH: 12", 12),
    (b"POST / HTTP/1.1\r\nContent-Length:7340033", 7340033),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, Chunked", None),
    (b"POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked", None),
    (b"GET / HTTP/1.1\r\nHost: x", 0),
])
def test_the_declared_length(fields: bytes, length: int | None):
    assert declared_length(fields + b"\r\n\r\n", len(fields)) == length


@pytest.mark.parametrize(("head", "path"), [
    (b"POST /validate?timeout=10s HTTP/1.1\r\n", "/validate"),
    (b"POST /valid%61te HTTP/1.1\r\n", "/validate"),  # as gunicorn decodes PATH_INFO
    (b"POST https://host:8443/mutate HTTP/1.1\r\n", "/mutate"),
    (b"POST /validate\r\n", ""),
])
def test_the_path_client_authentication_looks_at(head: bytes, path: str):
    assert request_path(head) == path


def test_an_answer_from_the_loop_is_a_status_with_its_length():
    raw = Answer(429, "Too Many Requests", "TooManyRequests", 'no "room"', retry_after=1).encode()
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.split(b"\r\n") == [b"HTTP/1.1 429 Too Many Requests", b"Connection: close",
                                   b"Content-Type: application/json", b"Retry-After: 1",
                                   b"Content-Length: %d" % len(body)]
    assert json.loads(body) == {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 429,
                                "reason": "TooManyRequests", "message": 'no "room"',
                                "details": {"retryAfterSeconds": 1}}
