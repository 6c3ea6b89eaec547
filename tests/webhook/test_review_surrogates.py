"""Lone UTF-16 surrogates: json reads ``"\\ud800"`` as a str that no encoder can write, so a
review holding one anywhere is refused at parse time with a 400; pairs (characters beyond
U+FFFF) and text that only looks like an escape are read as before."""
from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from testing.builders import admission_review, mpijob
from testing.tls_server import TlsServer
from testing.app_client import webhook
from webhook.review import lone_surrogate

ENDPOINTS = ("/validate", "/mutate", "/convert")


def refusal(escape: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 400, "reason": "BadRequest",
            "message": f"request body holds {escape}, a lone UTF-16 surrogate escape (not part of a pair): it is "
                       "no Unicode character, and no Kubernetes client sends one"}


def with_uid(uid: str) -> dict[str, Any]:
    review = admission_review(mpijob())
    review["request"]["uid"] = uid
    return review


def with_annotation(value: str, key: str = "note") -> dict[str, Any]:
    job = mpijob()
    job["metadata"]["annotations"] = {key: value}
    return admission_review(job)


@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize(("review", "escape"), [
    (with_uid("\ud800"), "\\ud800"),
    (with_uid("abc\udfff"), "\\udfff"),
    (with_annotation("x\ud83d"), "\\ud83d"),  # a high half at the end of a string
    (with_annotation("\ude00\ud83d"), "\\ude00"),  # a pair in the wrong order
    (with_annotation("v", key="\udbff\udbff\udc00"), "\\udbff"),  # in a key, before a good pair
], ids=["uid", "uid-low", "value-high-at-end", "reversed-pair", "key"])
def test_a_lone_surrogate_anywhere_is_a_400(path: str, review: dict[str, Any], escape: str):
    assert webhook().post(path, json.dumps(review).encode()) == (400, refusal(escape))


def test_a_surrogate_encoded_as_raw_utf8_bytes_is_not_utf8_text():
    body = json.dumps(with_uid("UID")).encode().replace(b"UID", b"\xed\xa0\x80")
    status, answer = webhook().post("/validate", body)
    assert (status, answer["message"]) == (400, "request body is not UTF-8 text: invalid continuation byte")


@pytest.mark.parametrize("text", ["😀", "\\ud800", "\\\\ud800", "a\\", "\U0010ffff\U00010000"],
                         ids=["pair", "escaped-backslash", "two-escaped-backslashes", "trailing-backslash", "pairs"])
@pytest.mark.parametrize("ensure_ascii", [True, False], ids=["escaped", "raw"])
def test_pairs_and_look_alikes_are_read(text: str, ensure_ascii: bool):
    review = with_annotation(text)
    served = webhook()
    status, answer = served.post("/validate", json.dumps(review, ensure_ascii=ensure_ascii).encode())
    assert status == 200 and answer["response"]["allowed"] is True, answer
    assert served.last.request.object["metadata"]["annotations"]["note"] == text


def holds_lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(holds_lone_surrogate(k) or holds_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(holds_lone_surrogate(v) for v in value)
    return False


# Text heavy in backslashes, quotes and both halves of surrogate pairs, alone and paired.
tricky = st.text(st.sampled_from(["\\", '"', "u", "d", "8", "\ud800", "\udbff", "\udc00", "\udfff", "😀", "a"]),
                 max_size=12)
documents = st.recursive(st.none() | tricky, lambda inner: st.lists(inner, max_size=3)
                         | st.dictionaries(tricky, inner, max_size=3), max_leaves=8)


@given(documents, st.booleans(), st.sampled_from(["utf-8", "utf-16", "utf-32-be"]))
def test_the_byte_search_agrees_with_a_walk_of_the_document(doc: Any, ensure_ascii: bool, encoding: str):
    text = json.dumps(doc, ensure_ascii=ensure_ascii)
    try:
        body = text.encode(encoding)
    except UnicodeEncodeError:
        assume(False)  # a raw lone surrogate cannot be sent at all: only its escape can
    assert (lone_surrogate(body) is not None) is holds_lone_surrogate(json.loads(body))


def test_end_to_end_a_surrogate_is_refused_and_every_admission_is_audited(dev_server: TlsServer):
    """The attack that erased the audit trail: reviews with a lone surrogate in the uid sent
    between real admissions. Each is a 400; every admission answered has its audit line."""
    server = dev_server
    answered = []
    for i in range(20):
        status, answer = server.request("POST", "/validate", json.dumps(with_uid(f"evil-{i}-\ud800")).encode(),
                                        {"Content-Type": "application/json"})
        assert (status, json.loads(answer)) == (400, refusal("\\ud800"))
        review = admission_review(mpijob())
        assert server.review("/validate", review)["allowed"] is True
        answered.append(review["request"]["uid"])
    deadline = time.monotonic() + 10
    while True:
        audited = {json.loads(text)["uid"] for text in server.output().splitlines()
                   if text.startswith('{"log":"mpijob-webhook.audit"')}
        if set(answered) <= audited or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert set(answered) <= audited
    assert not any("evil" in uid for uid in audited)
