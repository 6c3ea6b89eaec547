"""AdmissionReview in: parse and check the envelope, or say precisely why it cannot be used.

Anything wrong with the envelope itself is a ``BadReview`` (answered with a 4xx and a reason);
anything wrong with the *object* is the rules' business and becomes a denial.
"""
from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any

import orjson

from policies.interface import UserInfo

# Request too large (413): every reason and its words are here (the size limit, checked by
# ``refuse_declared_length`` and ``read_body``; the memory decoding would take, ``too_costly_to_decode``);
# webhook.routes answers them, webhook.body_budget prices them.
# controller-runtime's cap: no real AdmissionReview or ConversionReview comes near it.
MAX_BODY_BYTES = 7 * 1024 * 1024
TOO_LARGE = f"request body is larger than {MAX_BODY_BYTES // 2**20} MiB ({MAX_BODY_BYTES} bytes); no AdmissionReview or ConversionReview is"
ADMISSION_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
# A real AdmissionReview nests about 20 levels (pod template, managedFields); anything deeper
# than this is refused before code that recurses over the object sees it.
MAX_NESTING = 100
_TOO_DEEP = f"request body nests objects and lists more than {MAX_NESTING} levels deep; no AdmissionReview or ConversionReview does"
# The API server adds five random characters to generateName; the name rule checks the longest.
GENERATED_SUFFIX = "xxxxx"


class BadReview(Exception):
    """The request cannot be answered as an AdmissionReview; ``status`` is the HTTP code."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    @property
    def reason(self) -> str:
        """The metav1.Status reason of ``status``."""
        return _REASONS.get(self.status, "BadRequest")


_REASONS = {400: "BadRequest", 408: "Timeout", 413: "RequestEntityTooLarge", 415: "UnsupportedMediaType"}
BAD_REVIEW_STATUSES = tuple(_REASONS)  # every status a BadReview answers with


def refuse_declared_length(declared_length: int | None, limit: int = MAX_BODY_BYTES) -> None:
    """A 413 for a body whose Content-Length is over ``limit``, before a byte of it is read."""
    if declared_length is not None and declared_length > limit:
        raise BadReview(413, TOO_LARGE)


def too_costly_to_decode(body: bytes | bytearray, cost: int, capacity: int) -> BadReview:
    """The 413 for a body whose decoding would take ``cost`` bytes of memory, more than the
    ``capacity`` a server decodes at once (webhook.body_budget): no amount of waiting makes it fit."""
    containers, separators = json_structure(body)
    return BadReview(413, f"request body would take about {cost // 2**20} MiB of memory to decode ({len(body)} bytes: "
                          f"{containers} objects and lists, {separators} commas and colons), more than the "
                          f"{capacity // 2**20} MiB this server decodes at once; no AdmissionReview does")


# Slotted and not frozen: built for every request, and a frozen dataclass sets each of its 15
# fields through object.__setattr__. Nothing writes to it after parse_admission_review.
@dataclass(slots=True)
class AdmissionRequest:
    api_version: str
    uid: str
    group: str
    version: str
    kind: str
    operation: str
    namespace: str
    name: str
    generated_name: bool
    object: Any
    old_object: Any
    dry_run: bool
    sub_resource: str
    user: UserInfo
    request_version: str  # the version the client wrote (requestKind), for matchPolicy Equivalent
    # object and old_object are what read_json decoded from the request body: dicts, lists, str,
    # int, float, bool and None only (no tuple, date or subclass, as Python or YAML could give),
    # which the TrainJob memos' key relies on (effective_job_memo.decoded_inputs_key).
    decoded_json: bool = False

    @property
    def is_mpijob(self) -> bool:
        return self.group == "kubeflow.org" and self.kind == "MPIJob"

    @property
    def is_trainjob(self) -> bool:
        return self.group == "trainer.kubeflow.org" and self.kind == "TrainJob"


def read_body(stream: IO[bytes], declared_length: int | None, limit: int = MAX_BODY_BYTES) -> bytearray:
    """The request body, refused (413) as soon as it is known to be longer than ``limit``: by
    its Content-Length before anything is read, or, for a body of unknown length (chunked), at
    byte ``limit + 1``: an endless body is never buffered beyond the limit. A body of known
    length is read up to that length, with no read to learn that nothing follows, straight into
    one buffer of that size (no list of pieces joined into a second copy at the end)."""
    refuse_declared_length(declared_length, limit)
    if declared_length is None:
        grown = bytearray()
        while chunk := stream.read(min(_READ_STEP, limit + 1 - len(grown))):
            grown += chunk
            if len(grown) > limit:
                raise BadReview(413, TOO_LARGE)
        return grown
    # calloc'd: pages the client never fills are never touched.
    body = bytearray(declared_length)
    size = 0
    with memoryview(body) as view:
        while size < declared_length and (chunk := stream.read(min(_READ_STEP, declared_length - size))):
            view[size:size + len(chunk)] = chunk
            size += len(chunk)
    if size < declared_length:  # a stream that ends early without saying so
        del body[size:]
    return body


_READ_STEP = 64 * 1024


def read_json(body: bytes | bytearray, *, orjson_fits: bool = False) -> Any:
    """The JSON document in ``body``, or a BadReview saying why there is none: exactly what
    ``read_json_with_json`` answers, at half its cost for an ordinary review when
    ``orjson_fits``: the room taken for the body holds what orjson's decode costs (a body
    charged its worst case, ``webhook.body_budget.worst_cost``; orjson's decode takes 10 to 13
    bytes a body byte more than json's, more than ``decoding_cost`` estimates for some shapes).

    orjson refuses every body json refuses with our checks (an invalid or non-UTF-8 body, a BOM,
    NaN or Infinity, a lone surrogate escaped or raw) and some it accepts: those are answered by
    ``read_json_with_json``, so every refusal is worded as before. Where both accept, they give
    equal values of the same types, except for an integer outside [-2**63, 2**64), which orjson
    reads as a float: a body with a run of 19 digits anywhere goes to json as well. orjson nests
    up to 1,024 levels, so the nesting limit is still checked here. A bytearray is emptied once
    decoded."""
    if orjson_fits and _LONG_DIGIT_RUN not in body.translate(_DIGITS_AS_ZEROS):
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
        else:
            too_deep = _nested_deeper_than(body, MAX_NESTING, "utf-8")
            if isinstance(body, bytearray):
                body.clear()
            if too_deep:
                raise BadReview(400, _TOO_DEEP)
            return doc
    return read_json_with_json(body)


# An integer outside [-2**63, 2**64), which orjson would read as a float, has at least 19
# digits: a body with 19 digits in a row (in a string or not) is read by json. A translation
# and a substring search: about 5 µs for a 3 KB review (a regular expression [0-9]{19}: 55 µs).
_DIGITS_AS_ZEROS = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGIT_RUN = b"0" * 19


def read_json_with_json(body: bytes | bytearray) -> Any:
    """The JSON document in ``body``, or a BadReview saying why there is none. A bytearray is
    emptied as soon as it is decoded: the body's bytes are not held while the document is built
    from its text, and the text is let go once the document is built. (For a body near the 7 MiB
    limit the three together would be a large part of what the request costs.)"""
    if not body:
        raise BadReview(400, "empty request body: expected an AdmissionReview or ConversionReview JSON document")
    encoding = _encoding(body)
    try:
        # What json.loads does, but strict: json.loads lets UTF-8-encoded surrogates through
        # ("surrogatepass"), which no client sends and no writer of that text downstream (audit
        # log, stdout) can encode.
        text = body.decode(encoding)
    except UnicodeDecodeError as exc:
        raise BadReview(400, f"request body is not UTF-8 text: {exc.reason}") from None
    # The checks that read the bytes at C speed run now, before the bytes are let go; they
    # count only once json has accepted the document (on anything else they mean nothing).
    utf8 = body if encoding in ("utf-8", "utf-8-sig") else text.encode("utf-8")
    too_deep = _nested_deeper_than(utf8, MAX_NESTING, "utf-8")
    surrogate = lone_surrogate(utf8, "utf-8")
    del utf8
    if isinstance(body, bytearray):
        body.clear()  # frees the buffer, whoever else refers to it
    try:
        # One decoder for all requests rather than one for each.
        doc = _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise BadReview(400, _json_problem(exc)) from None
    except RecursionError:
        raise BadReview(400, _TOO_DEEP) from None
    except ValueError as exc:  # a number too long to convert, NaN or Infinity
        raise BadReview(400, f"request body is not valid JSON: {str(exc).split(';')[0]}") from None
    finally:
        del text
    if too_deep:
        raise BadReview(400, _TOO_DEEP)
    if surrogate is not None:
        raise BadReview(400, f"request body holds {surrogate.decode()}, a lone UTF-16 surrogate escape (not part "
                             "of a pair): it is no Unicode character, and no Kubernetes client sends one")
    return doc


def _encoding(body: bytes | bytearray) -> str:
    """``json.detect_encoding(body)``, told at once for the usual body: a "{" and then a byte
    that is not NUL is UTF-8 (no byte order mark starts with "{", UTF-16 and UTF-32 put a NUL
    beside it)."""
    if body[:1] == b"{" and body[1:2] != b"\x00":
        return "utf-8"
    return json.detect_encoding(body)


def _json_problem(exc: json.JSONDecodeError) -> str:
    where = f"line {exc.lineno} column {exc.colno}"
    if exc.msg.startswith("Unterminated string"):
        return f"request body is truncated: the string that starts at {where} never ends"
    if exc.pos >= len(exc.doc.rstrip()):
        return f"request body is truncated: the JSON document ends at {where} before it is complete"
    return f"request body is not valid JSON: {exc.msg} at {where}"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_FEW_ESCAPES = 100
_BRACKETS = bytes.maketrans(b"{}", b"[]")
_NOT_MARKS = bytes(b for b in range(256) if b not in b'[]{}"')
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}",:')


def _nested_deeper_than(body: bytes | bytearray, limit: int, encoding: str | None = None, *,
                        piece_bytes: int = 1024 * 1024) -> bool:
    """Whether a body ``json.loads`` accepted nests objects and lists more than ``limit`` deep,
    read from its bytes at C speed (a walk of the decoded document costs more than the rules).
    No recursion and no pass per level: any shape up to the body limit is answered in
    milliseconds. The bytes are read ``piece_bytes`` at a time: what is copied on the way is
    a piece, not the whole body."""
    encoding = encoding or _encoding(body)
    if encoding not in ("utf-8", "utf-8-sig"):  # UTF-16 or UTF-32, which json.loads also reads
        body = body.decode(encoding, "surrogatepass").encode("utf-8", "surrogatepass")
    marks = _all_marks(body, piece_bytes, _NOT_MARKS)
    # Two quotes in a row have nothing between them: dropping them leaves every other quote
    # opening or closing as before, and in most bodies no quote at all.
    marks = marks.replace(b'""', b"")
    if b'"' in marks:
        marks = b"".join(marks.split(b'"')[::2])  # brackets inside strings
    return len(marks) > 2 * limit and _balanced_within(limit).fullmatch(marks) is None


def _pieces(body: bytes | bytearray, size: int) -> Iterator[bytes]:
    """``body`` in consecutive pieces of about ``size`` bytes, none of which ends inside an
    escape: a piece never ends on a backslash, so the next one never starts after one."""
    start, end_of_body = 0, len(body)
    while start < end_of_body:
        end = min(start + size, end_of_body)
        while end < end_of_body and body[end - 1] == 0x5C:  # a backslash
            end += 1
        yield bytes(body[start:end])
        start = end


def json_structure(body: bytes | bytearray, piece_bytes: int = 1024 * 1024) -> tuple[int, int]:
    """(objects and lists, commas and colons) of a UTF-8 JSON body, outside its strings: how
    many containers and values decoding it builds, read from the bytes at C speed and without
    copying more than a piece of it. For a body json would refuse, some count (never an error);
    for one in UTF-16 or UTF-32, every bracket, comma and colon byte, in strings or not."""
    if _encoding(body) not in ("utf-8", "utf-8-sig"):
        return body.count(b"{") + body.count(b"["), body.count(b",") + body.count(b":")
    marks = _all_marks(body, piece_bytes, _NOT_STRUCTURE)
    marks = marks.replace(b'""', b"")
    if b'"' in marks:
        marks = b"".join(marks.split(b'"')[::2])
    return marks.count(b"["), marks.count(b",") + marks.count(b":")


def _all_marks(body: bytes | bytearray, piece_bytes: int, delete: bytes) -> bytes:
    """``_marks`` of the whole body, read ``piece_bytes`` at a time: a body of one piece (any
    ordinary review) is read as it is, without a copy of it or a list of pieces to join."""
    if len(body) <= piece_bytes:
        return _marks(body, delete)
    return b"".join([_marks(piece, delete) for piece in _pieces(body, piece_bytes)])


def _marks(piece: bytes | bytearray, delete: bytes = _NOT_MARKS) -> bytes:
    """The brackets ({ read as [) and the quotes of ``piece`` that delimit strings (and every
    other byte ``delete`` keeps)."""
    # Every escape drops out, so that every quote left opens or closes a string: one pass of a
    # regular expression while escapes are few, as in any real review; bytes.replace when many.
    piece, escapes = _ESCAPE.subn(b"", piece, count=_FEW_ESCAPES)
    if escapes == _FEW_ESCAPES:
        piece = piece.replace(b"\\\\", b"").replace(b'\\"', b"")  # the only escapes that hide a quote
    # UTF-8 never has these bytes inside a character.
    return piece.translate(_BRACKETS, delete)


# A \\uD800-\\uDFFF escape: half of a UTF-16 pair, which JSON writes for characters beyond U+FFFF.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
# In text where no escaped backslash is left: a high half and the low half that completes it, or
# either half alone.
_SURROGATES = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?:(\\u[dD][c-fC-F][0-9a-fA-F]{2}))?|\\u[dD][c-fC-F][0-9a-fA-F]{2}")


def lone_surrogate(body: bytes | bytearray, encoding: str | None = None) -> bytes | None:
    """The first \\u escape of a UTF-16 surrogate that is not part of a pair in a body
    ``json.loads`` accepted, or None. json reads one as a str that holds a lone surrogate, which
    cannot be encoded (a log line that holds one fails to be written). One search at C speed
    when, as in any real review, the body has no surrogate escape at all."""
    encoding = encoding or _encoding(body)
    if encoding not in ("utf-8", "utf-8-sig"):
        body = body.decode(encoding).encode("utf-8")
    if _SURROGATE_ESCAPE.search(body) is None:
        return None
    # After an escaped backslash, "\\ud800" is text, not an escape: escaped backslashes become a
    # byte that neither starts nor pairs an escape, so every backslash left starts one.
    for match in _SURROGATES.finditer(body.replace(b"\\\\", b"_")):
        if match.group(1) is not None:
            continue  # a pair: one character beyond U+FFFF
        return match.group(0)[:6]
    return None


@functools.lru_cache(maxsize=4)
def _balanced_within(depth: int) -> re.Pattern[bytes]:
    """One pair of brackets holding pairs at most ``depth`` levels deep, itself included.
    Possessive repeats: a pair too deep fails the match at once, with no backtracking."""
    pattern = rb"\[\]"
    for _ in range(depth - 1):
        pattern = rb"\[(?:" + pattern + rb")*+\]"
    return re.compile(pattern)


# A decoded document's objects are dicts: checking for dict first spares the slower ABC check.
_MAPPING = (dict, Mapping)


def identify(doc: Any) -> tuple[str, str] | None:
    """(apiVersion to answer in, uid) of a decoded AdmissionReview, as far as it can be told;
    None when the document does not carry a uid."""
    if not isinstance(doc, _MAPPING) or not isinstance(doc.get("request"), _MAPPING):
        return None
    uid = doc["request"].get("uid")
    if not isinstance(uid, str) or not uid:
        return None
    api_version = doc.get("apiVersion")
    return (api_version if api_version in ADMISSION_VERSIONS else ADMISSION_VERSIONS[0]), uid


def review_envelope(doc: Any, kind: str, versions: tuple[str, ...]) -> tuple[str, Mapping[str, Any], str]:
    """(apiVersion, request, uid) of a review of ``kind`` (AdmissionReview, ConversionReview),
    or a BadReview naming the first thing that makes it unusable."""
    if not isinstance(doc, _MAPPING):
        raise BadReview(400, f"expected a JSON object of kind {kind}")
    api_version = doc.get("apiVersion")
    if doc.get("kind") != kind:
        raise BadReview(400, f"expected kind {kind}, got {_given(doc.get('kind'), 'no kind')}")
    if api_version not in versions:
        raise BadReview(400, f"unsupported {kind} apiVersion {_given(api_version, '(none given)')}; "
                             f"supported: {', '.join(versions)}")
    request = doc.get("request")
    if not isinstance(request, _MAPPING):
        raise BadReview(400, f"{kind} has no request object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview(400, f"{kind} request has no uid")
    return api_version, request, uid


def parse_admission_review(doc: Any, *, decoded_json: bool = False) -> AdmissionRequest:
    """The request of an AdmissionReview; ``decoded_json``: ``doc`` is what ``read_json`` returned."""
    api_version, request, uid = review_envelope(doc, "AdmissionReview", ADMISSION_VERSIONS)
    operation = request.get("operation")
    if operation not in OPERATIONS:
        raise BadReview(400, f"request.operation {_given(operation, '(none given)')} is not one of {', '.join(OPERATIONS)}")
    kind = _mapping(request, "kind", required=True)
    request_kind = _mapping(request, "requestKind") or kind
    obj = request.get("object")
    if obj is None and (operation == "CREATE" or operation == "UPDATE"):
        raise BadReview(400, f"request.object is required for {operation}")
    name, generated = _name(request, obj)
    # Positional, in field order: matching sixteen keywords costs a quarter of the whole parse.
    return AdmissionRequest(
        api_version,
        uid,
        _str(kind.get("group")),
        _str(kind.get("version")),
        _str(kind.get("kind")),
        operation,
        _str(request.get("namespace")),
        name,
        generated,  # generated_name
        obj,
        request.get("oldObject"),
        request.get("dryRun") is True,
        _str(request.get("subResource")),
        _user(request.get("userInfo")),
        _str(request_kind.get("version")),  # request_version
        decoded_json,
    )


def _mapping(request: Mapping[str, Any], key: str, *, required: bool = False) -> Mapping[str, Any]:
    value = request.get(key)
    if value is None and not required:
        return {}
    if not isinstance(value, _MAPPING):
        raise BadReview(400, f"request.{key} must be an object with group, version and kind")
    return value


def _given(value: Any, missing: str) -> str:
    return missing if value is None else repr(value)[:100]


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _name(request: Mapping[str, Any], obj: Any) -> tuple[str, bool]:
    """The object's name; with generateName (no name yet) the prefix plus five placeholders."""
    name = request.get("name")
    if name and isinstance(name, str):
        return name, False
    meta = obj.get("metadata") if isinstance(obj, _MAPPING) else None
    if isinstance(meta, _MAPPING):
        if _str(meta.get("name")):
            return meta["name"], False
        if _str(meta.get("generateName")):
            return meta["generateName"] + GENERATED_SUFFIX, True
    return "", False


def _user(info: Any) -> UserInfo:
    if not isinstance(info, _MAPPING):
        return UserInfo()
    groups = info.get("groups")
    extra = info.get("extra")
    return UserInfo(
        username=_str(info.get("username")),
        uid=_str(info.get("uid")),
        groups=tuple([g for g in groups if isinstance(g, str)]) if isinstance(groups, list) else (),
        extra=_extra(extra) if isinstance(extra, _MAPPING) else {},
    )


def _extra(extra: Mapping[str, Any]) -> dict[str, tuple[Any, ...]]:
    """userInfo.extra with every list value as a tuple (anything else left out)."""
    return {k: tuple(v) for k, v in extra.items() if isinstance(v, list)} if extra else {}
