"""Where a request ends, read from its bytes as they arrive in the worker's event loop
(``webhook.request_arrival``): the end of its head, how its body is framed (Content-Length,
chunked, none), where a chunked body ends, and the answers the loop gives without a thread.

Pure functions over bytes: no sockets, no gunicorn. They only find boundaries; gunicorn's parser
still parses the request in the thread and answers framing it refuses (a 400 with its reason).
Anything these cannot make sense of is handed to the thread at once, with what has arrived, so
that the parser's answer comes then, not at the deadline.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from urllib.parse import unquote

# A request head longer than this is refused (431) before any thread sees it: the API server's
# are well under 1 KiB, and gunicorn's own per-line and per-field limits apply after it.
MAX_HEAD_BYTES = 64 * 1024
# A chunk-size line (with its extensions) or a chunked body's trailer section longer than this
# is not a body gunicorn would read (its limit for a chunk-size line is 8190 bytes).
MAX_CHUNK_LINE = 8192
MAX_TRAILERS = 64 * 1024

# A request whose body is larger than this (or of unknown length: chunked) is served by the
# large-body threads, a quarter of the threads (at least one): a few clients sending maximum-size
# reviews then cannot take every thread, and the probes and ordinary reviews behind them are
# still answered promptly. The API server's reviews are a few KiB; one of a thousand-worker job
# with long environments is well under this.
LARGE_BODY_BYTES = 1024 * 1024


def _any_case(word: bytes) -> bytes:
    """A pattern matching ``word`` (lower-case ASCII) in any case: each letter a class of its two
    cases, as ``bytes.lower`` folds ASCII letters only."""
    return b"".join(b"[%c%c]" % (c, c - 32) if 97 <= c <= 122 else re.escape(bytes((c,))) for c in word)


# Searched for in the head's fields as they are: a pattern that starts with a literal is found by
# a scan at C speed, where a case-blind one that starts with an optional byte is tried at every
# offset, and letter classes spare lower-casing a copy of the fields first (docs/performance.md,
# "A served request, counted", and "The event loop, cut").
_CONTENT_LENGTH = re.compile(rb"\n" + _any_case(b"content-length") + rb"[ \t]*:[ \t]*(\d+)")
_CHUNKED = re.compile(rb"\n" + _any_case(b"transfer-encoding") + rb"[ \t]*:[^\r\n]*" + _any_case(b"chunked"))
_EXPECT_CONTINUE = re.compile(rb"\n" + _any_case(b"expect") + rb"[ \t]*:[ \t]*" + _any_case(b"100-continue"))
_HEX = frozenset(b"0123456789abcdefABCDEF")

# What a scan of a body says when it has not found the end: wait for more, hand the request to
# its thread as it is (the parser answers its framing), or refuse it (over the body limit).
WAIT = -1
INVALID = -2
TOO_LARGE = -3


def head_end(head: bytes | bytearray, start: int) -> tuple[int, int]:
    """Where the fields of the head in ``head`` end and where its body starts, searching from
    ``start``; (-1, -1) while the head is incomplete. A bare LF ends a line too as far as finding
    the end goes: gunicorn's parser then answers such a head with a 400 rather than the client
    waiting for its deadline."""
    end = head.find(b"\r\n\r\n", start)
    if end >= 0:
        return end, end + 4
    bare = head.find(b"\n\n", start)
    if bare >= 0:
        return bare, bare + 2
    return -1, -1


def declared_length(head: bytes | bytearray, fields_end: int) -> int | None:
    """The body's length from its Content-Length; None for a chunked body; 0 for none. A body
    that says both is chunked (RFC 9112 6.3; gunicorn refuses it, in the thread)."""
    if _CHUNKED.search(head, 0, fields_end) is not None:
        return None
    length = _CONTENT_LENGTH.search(head, 0, fields_end)
    return 0 if length is None else int(length.group(1))


def expects_continue(head: bytes | bytearray, fields_end: int) -> bool:
    """Whether the client waits for a 100 Continue before it sends its body (curl does for
    bodies over 1 MiB, for a second)."""
    return _EXPECT_CONTINUE.search(head, 0, fields_end) is not None


def request_path(head: bytes | bytearray) -> str:
    """The path of the request line, percent-decoded as gunicorn decodes PATH_INFO ('' when
    the line is not one gunicorn would accept: its parser answers that)."""
    line_end = head.find(b"\n")
    parts = bytes(head[:line_end if line_end >= 0 else len(head)]).rstrip(b"\r").split(b" ")
    if len(parts) != 3:
        return ""
    target = parts[1]
    if target.startswith((b"http://", b"https://")):  # absolute form: the path after the authority
        slash = target.find(b"/", target.find(b"//") + 2)
        target = target[slash:] if slash >= 0 else b"/"
    return unquote(target.split(b"?", 1)[0].split(b"#", 1)[0].decode("latin-1"), encoding="latin-1")


class ChunkedBody:
    """Where a chunked body ends, scanned as it arrives: each call goes on from where the last
    stopped, so a body is scanned once however it is cut up."""

    __slots__ = ("position", "size", "trailers")

    def __init__(self, start: int) -> None:
        self.position = start  # the next chunk-size line, or the trailer section
        self.size = 0  # data bytes so far
        self.trailers = False

    def scan(self, data: bytes | bytearray, limit: int) -> int:
        """Where the body in ``data`` ends (the offset just past it) once all of it is in; else
        WAIT, INVALID or TOO_LARGE (more than ``limit`` data bytes)."""
        while not self.trailers:
            position = self.position
            line_end = data.find(b"\r\n", position)
            # (a line not yet ended may end in the CR of its CRLF)
            line = data[position:line_end] if line_end >= 0 else data[position:].rstrip(b"\r")
            size_field = line.split(b";", 1)[0].rstrip(b" \t")
            if any(c not in _HEX for c in size_field) or (line_end >= 0 and not size_field):
                return INVALID
            if line_end < 0:
                return INVALID if len(data) - position > MAX_CHUNK_LINE else WAIT
            size = int(size_field, 16)
            if size == 0:
                self.position, self.trailers = line_end + 2, True
                break
            self.size += size
            if self.size > limit:
                return TOO_LARGE
            terminator = line_end + 2 + size
            if len(data) < terminator + 2:
                self.size -= size  # counted again when the rest of the chunk is in
                return WAIT
            if data[terminator:terminator + 2] != b"\r\n":
                return INVALID
            self.position = terminator + 2
        position = self.position
        if data[position:position + 2] == b"\r\n":
            return position + 2
        if data[position:position + 1] == b"\n":
            return position + 1
        # The trailer section ends at its first empty line (a bare LF ends a line here too, so that
        # the parser answers it); the line before it ends with a LF.
        ends = [found + size for found, size in ((data.find(b"\n\r\n", position - 1), 3),
                                                 (data.find(b"\n\n", position - 1), 2)) if found >= 0]
        if ends:
            return min(ends)
        return INVALID if len(data) - position > MAX_TRAILERS else WAIT


def large_body(head: bytes | bytearray, fields_end: int | None = None) -> bool:
    """Whether the request whose head (and maybe part of its body) is ``head`` brings a body
    over LARGE_BODY_BYTES, or one of unknown length. ``fields_end``: where its fields end (its
    first CRLF CRLF, else its length), if the caller has found it already."""
    if fields_end is None:
        fields_end = head.find(b"\r\n\r\n")
        if fields_end < 0:
            fields_end = len(head)
    length = _CONTENT_LENGTH.search(head, 0, fields_end)
    if length is not None:
        # Six digits are at most 999,999, under the limit: only a longer number is converted.
        return length.end() - length.start(1) > 6 and int(length.group(1)) > LARGE_BODY_BYTES
    return _CHUNKED.search(head, 0, fields_end) is not None


@dataclass(frozen=True)
class Answer:
    """An answer the event loop writes itself, then closes the connection: a metav1.Status."""
    code: int
    phrase: str  # the status line's reason phrase
    reason: str  # the Status's reason
    message: str
    retry_after: int = 0  # seconds, for a 429

    def encode(self) -> bytes:
        details = ',"details":{"retryAfterSeconds":%d}' % self.retry_after if self.retry_after else ""
        body = ('{"kind":"Status","apiVersion":"v1","status":"Failure","code":%d,"reason":"%s","message":%s%s}'
                % (self.code, self.reason, json.dumps(self.message), details)).encode()
        retry = b"Retry-After: %d\r\n" % self.retry_after if self.retry_after else b""
        return (b"HTTP/1.1 %d %s\r\nConnection: close\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n"
                % (self.code, self.phrase.encode(), retry, len(body)) + body)


HEAD_TOO_LARGE = Answer(431, "Request Header Fields Too Large", "RequestHeaderFieldsTooLarge",
                        f"request head longer than {MAX_HEAD_BYTES} bytes")
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def too_large(message: str) -> Answer:
    return Answer(413, "Content Too Large", "RequestEntityTooLarge", message)


def no_room(seconds: float) -> Answer:
    """As the route's 429 when the body budget has no room (webhook.body_budget): client-go waits
    and sends the request again."""
    return Answer(429, "Too Many Requests", "TooManyRequests",
                  f"no memory to receive this request's body within {seconds:g} s (other bodies hold it); try again",
                  retry_after=1)


def body_ended(declared: int) -> Answer:
    """The client closed its side before the whole body (a half-closed connection still reads)."""
    what = f"the {declared} bytes its Content-Length announced" if declared >= 0 else "the end of its chunked body"
    return Answer(400, "Bad Request", "BadRequest", f"request body ended before {what}: the client stopped sending")


def body_timeout(seconds: float) -> Answer:
    return Answer(408, "Request Timeout", "Timeout",
                  f"request body did not arrive: the client did not send its request within {seconds:g}s")


def body_stalled(seconds: float) -> Answer:
    return Answer(408, "Request Timeout", "Timeout",
                  f"request body stalled for over {seconds:g}s while other requests waited for the memory "
                  "it held; send the body without pausing")
