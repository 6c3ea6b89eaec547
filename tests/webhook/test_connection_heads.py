"""Which requests the event loop sends to the large-body threads (webhook.connections._large_body):
decided from the request head as case-blind patterns over its fields would decide it, whatever
the case, spacing and order of the fields."""
from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from webhook.request_framing import LARGE_BODY_BYTES, large_body as _large_body

# The definition: a Content-Length over the limit, or (without one) a chunked Transfer-Encoding.
REFERENCE_LENGTH = re.compile(rb"\r?\ncontent-length[ \t]*:[ \t]*(\d+)", re.IGNORECASE)
REFERENCE_CHUNKED = re.compile(rb"\r?\ntransfer-encoding[ \t]*:[^\r\n]*chunked", re.IGNORECASE)


def reference(head: bytes) -> bool:
    end = head.find(b"\r\n\r\n")
    fields = head[:end] if end >= 0 else head
    length = REFERENCE_LENGTH.search(fields)
    if length is not None:
        return int(length.group(1)) > LARGE_BODY_BYTES
    return REFERENCE_CHUNKED.search(fields) is not None


def any_case(text: str) -> st.SearchStrategy[bytes]:
    return st.lists(st.booleans(), min_size=len(text), max_size=len(text)).map(
        lambda upper: "".join(c.upper() if u else c for c, u in zip(text, upper)).encode())


spaces = st.sampled_from([b"", b" ", b"\t", b"  \t"])
lengths = st.sampled_from([0, 2967, LARGE_BODY_BYTES, LARGE_BODY_BYTES + 1, 10 * LARGE_BODY_BYTES]).map(
    lambda n: str(n).encode())
field = st.one_of(
    st.tuples(any_case("Content-Length"), spaces, spaces, lengths).map(lambda f: f[0] + f[1] + b":" + f[2] + f[3]),
    st.tuples(any_case("Transfer-Encoding"), spaces, st.sampled_from([b"chunked", b"gzip, chunked", b"gzip"]))
    .map(lambda f: f[0] + b":" + f[1] + f[2]),
    st.tuples(any_case("Content-Length-Extra"), lengths).map(lambda f: f[0] + b": " + f[1]),
    st.sampled_from([b"Host: 127.0.0.1:8443", b"Content-Type: application/json", b"X-Note: content-length: 9999999",
                     b"Accept: application/json"]),
)


@given(st.lists(field, max_size=5), st.sampled_from([b"\r\n", b"\n"]),
       st.sampled_from([b"", b'{"content-length: 99999999": 1}', b"\r\ncontent-length: 99999999"]))
def test_large_body_is_decided_as_the_case_blind_patterns_decide(fields: list[bytes], newline: bytes, after: bytes):
    head = b"POST /validate HTTP/1.1" + b"".join(newline + f for f in fields) + newline + newline + after
    assert _large_body(head) is reference(head)


def test_the_usual_heads():
    small = b"POST /validate?timeout=10s HTTP/1.1\r\nHost: x\r\nContent-Length: 2967\r\n\r\n{}"
    assert _large_body(small) is False
    assert _large_body(small.replace(b"2967", str(LARGE_BODY_BYTES + 1).encode())) is True
    assert _large_body(b"POST /validate HTTP/1.1\r\nTRANSFER-ENCODING: Chunked\r\n\r\n") is True
    assert _large_body(b"POST /validate HTTP/1.1\r\nHost: x\r\n\r\n") is False


@given(st.lists(field, max_size=5), st.sampled_from([b"\r\n", b"\n"]),
       st.sampled_from([b"", b'{"content-length: 99999999": 1}', b"\r\ncontent-length: 99999999"]))
def test_large_body_is_decided_the_same_with_the_end_of_the_fields_given(fields: list[bytes], newline: bytes,
                                                                         after: bytes):
    # The event loop passes the end it found the head by: its first CRLF CRLF, else the whole of what was read.
    head = b"POST /validate HTTP/1.1" + b"".join(newline + f for f in fields) + newline + newline + after
    end = head.find(b"\r\n\r\n")
    assert _large_body(head, end if end >= 0 else len(head)) is reference(head)
