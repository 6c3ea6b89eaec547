"""Properties of the wire format, through Flask's test client: whatever arrives (bytes, any JSON,
a recorded review with parts deleted or replaced at any depth), the answer is never a 5xx; a 200
is a well-formed AdmissionReview for the request's uid, in its version, with a boolean
``allowed``; anything else is a metav1.Status with the same code."""
from __future__ import annotations

import base64
import copy
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import captured_reviews
from webhook import create_app
from webhook.review import ADMISSION_VERSIONS, OPERATIONS
from webhook.responses import WARNING_MAX, WARNINGS_TOTAL_MAX

CLIENT = create_app().test_client()
ENDPOINTS = ("/validate", "/mutate")
RECORDED = [review for review in captured_reviews().values() if review.get("kind") == "AdmissionReview"]


def at_most(examples: int) -> settings:
    """The profile's number of examples, but no more than ``examples``: drawing nested JSON and
    running every rule and mutation costs 4 to 13 ms an example, too much for 10,000 in CI."""
    return settings(max_examples=min(settings.default.max_examples, examples),
                    suppress_health_check=[HealthCheck.too_slow])


scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=10,
)
# Cheap to draw: a scalar or one flat list or map.
flat_values = scalars | st.lists(scalars, max_size=3) | st.dictionaries(st.text(max_size=6), scalars, max_size=3)
# Documents that get past the first checks more often than random JSON does.
review_like = st.fixed_dictionaries(
    {},
    optional={
        "apiVersion": st.sampled_from(ADMISSION_VERSIONS) | flat_values,
        "kind": st.just("AdmissionReview") | flat_values,
        "request": st.fixed_dictionaries({}, optional={
            "uid": st.text(max_size=8) | flat_values,
            "operation": st.sampled_from(OPERATIONS) | flat_values,
            "kind": st.just({"group": "kubeflow.org", "version": "v2beta1", "kind": "MPIJob"}) | flat_values,
            "requestKind": flat_values,
            "subResource": st.sampled_from(["", "status", "scale"]) | flat_values,
            "name": flat_values, "namespace": st.sampled_from(["team-a", "kube-system"]) | flat_values,
            "object": flat_values, "oldObject": flat_values, "dryRun": flat_values, "userInfo": flat_values,
        }) | flat_values,
    },
)


def sent_review(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


def assert_well_formed(path: str, body: bytes, content_type: str = "application/json") -> None:
    http = CLIENT.post(path, data=body, content_type=content_type)
    assert http.status_code < 500, http.get_data(as_text=True)[:500]
    assert http.mimetype == "application/json"
    answer = json.loads(http.get_data())
    if http.status_code != 200:
        assert (answer["kind"], answer["apiVersion"], answer["status"], answer["code"]) == (
            "Status", "v1", "Failure", http.status_code)
        assert isinstance(answer["message"], str) and answer["message"]
        return
    sent = sent_review(body)
    response = answer["response"]
    assert (answer["kind"], answer["apiVersion"]) == ("AdmissionReview", sent["apiVersion"])
    assert response["uid"] == sent["request"]["uid"]
    assert isinstance(response["allowed"], bool)
    if not response["allowed"]:
        assert isinstance(response["status"]["code"], int) and response["status"]["code"] >= 400
        assert isinstance(response["status"]["message"], str)
    warnings = response.get("warnings", [])
    assert all(isinstance(w, str) and 0 < len(w) <= WARNING_MAX for w in warnings)
    assert sum(map(len, warnings)) <= WARNINGS_TOTAL_MAX
    if "patch" in response:
        assert response["patchType"] == "JSONPatch"
        assert isinstance(json.loads(base64.b64decode(response["patch"], validate=True)), list)


@given(body=st.binary(max_size=512), path=st.sampled_from(ENDPOINTS))
def test_arbitrary_bytes_never_give_a_5xx(body: bytes, path: str):
    assert_well_formed(path, body)


@at_most(2_000)
@given(body=st.binary(max_size=64), path=st.sampled_from(ENDPOINTS),
       content_type=st.sampled_from(["text/plain", "application/json; charset=latin-1", "", "application/x-yaml"]))
def test_arbitrary_content_types_never_give_a_5xx(body: bytes, path: str, content_type: str):
    assert_well_formed(path, body, content_type)


@at_most(5_000)
@given(doc=json_values, path=st.sampled_from(ENDPOINTS))
def test_arbitrary_json_never_gives_a_5xx(doc: Any, path: str):
    assert_well_formed(path, json.dumps(doc).encode())


@at_most(5_000)
@given(doc=review_like, path=st.sampled_from(ENDPOINTS))
def test_arbitrary_review_like_json_never_gives_a_5xx(doc: dict[str, Any], path: str):
    assert_well_formed(path, json.dumps(doc).encode())


def mutate_somewhere(doc: Any, data: st.DataObject) -> None:
    """Walk down from the top, choosing a key or index at each level; delete or replace the
    item where the walk stops."""
    node = doc
    while isinstance(node, (dict, list)) and node:
        key = data.draw(st.sampled_from(list(node) if isinstance(node, dict) else range(len(node))))
        child = node[key]
        if isinstance(child, (dict, list)) and child and data.draw(st.booleans()):
            node = child
            continue
        if data.draw(st.booleans()):
            del node[key]
        else:
            node[key] = data.draw(json_values)
        return


@at_most(1_000)
@given(data=st.data(), review=st.sampled_from(RECORDED), path=st.sampled_from(ENDPOINTS),
       changes=st.integers(min_value=1, max_value=4))
def test_recorded_reviews_changed_anywhere_never_give_a_5xx(data: st.DataObject, review: dict[str, Any],
                                                           path: str, changes: int):
    changed = copy.deepcopy(review)
    for _ in range(changes):
        mutate_somewhere(changed, data)
    assert_well_formed(path, json.dumps(changed).encode())


@at_most(1_000)
@given(data=st.data(), review=st.sampled_from([r for r in RECORDED if r["request"].get("object")]),
       path=st.sampled_from(ENDPOINTS))
def test_recorded_objects_changed_anywhere_never_give_a_5xx(data: st.DataObject, review: dict[str, Any], path: str):
    """The same, aimed at the object the rules read (the review's envelope stays intact)."""
    changed = copy.deepcopy(review)
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        mutate_somewhere(changed["request"]["object"], data)
    assert_well_formed(path, json.dumps(changed).encode())

