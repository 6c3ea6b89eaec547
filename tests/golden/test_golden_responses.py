"""No behaviour change: every recorded API-server request and every upstream manifest, through
/validate, /mutate and /convert of the Flask app under fixed policies and a fixed cluster, must
give exactly the status and response body recorded in ``tests/golden/responses/``, byte for byte.

The recordings are the contract a refactoring keeps. A change that is meant to alter a response
re-records them (``GOLDEN_RECORD=1 pytest tests/golden``) and the diff shows every answer it moves.
"""
from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from policies.cluster_view import NO_CLUSTER, ClusterView, StaticClusterView
from policies.config.reader import parse_policy
from policies.config.layered_policy import Policy
from tests.conftest import UPSTREAM, captured_reviews, load_yaml_documents
from testing.crd import as_api_server_sends
from testing.kube_objects import (RUNNING, container_limits, local_queue, namespace, node, pod_limits,
                                resource_quota, stored_mpijob)
from testing.app_client import Webhook, webhook
from webhook.review import MAX_BODY_BYTES

RESPONSES = Path(__file__).resolve().parent / "responses"
RECORD = os.environ.get("GOLDEN_RECORD") == "1"
# The serialization the server uses: compact, keys in the order they were written, ASCII only.
COMPACT = json.JSONEncoder(separators=(",", ":"))

# A policy that makes most rules speak: tight limits, every action, overrides by namespace label.
STRICT_POLICY = """\
apiVersion: mpijob-webhook/v1
kind: Policy
clusterUnavailable: deny
rules:
  worker-count: {action: deny, params: {min: 4, max: 64}}
  slots-per-worker: {action: warn, params: {min: 2, max: 8}}
  gpus-per-worker: {params: {max: 8}}
  image-reference: {action: deny, params: {requireDigest: true}}
  node-fit: deny
  resource-quota: {params: {warnWhenQueued: true}}
  kueue-queue: warn
mutations:
  istio-sidecar-off: true
  kueue-queue-label:
    enabled: true
    params: {defaultQueue: default, queues: {team-a: team-a-queue}}
  restricted-service-account: {params: {serviceAccount: mpi-runner}}
overrides:
  - name: research
    namespaceSelector: {matchLabels: {team: research}}
    rules:
      launcher: warn
      worker-count: {params: {max: 100}}
"""


def roomy_cluster() -> StaticClusterView:
    """Room for every recorded job: quotas, ranges, nodes and a queue that all allow them."""
    return StaticClusterView(
        quotas={"team-a": [resource_quota("compute", {"limits.cpu": 64, "limits.memory": "256Gi", "pods": 50},
                                          {"limits.cpu": 4, "limits.memory": "8Gi", "pods": 3})]},
        ranges={"team-a": [limit_range_of(container_limits(max={"cpu": 16, "memory": "64Gi"}))]},
        namespaces={"team-a": namespace("team-a")},
        node_list=[node(f"node-{i}", {"cpu": 32, "memory": "128Gi", "pods": 110}) for i in range(3)],
        queues={"team-a": [local_queue("team-a-queue")]},
        jobs={"team-a": [stored_mpijob("earlier", conditions=RUNNING)]},
    )


def tight_cluster() -> StaticClusterView:
    """Short of everything: a nearly spent quota, small ranges and nodes, no matching queue."""
    return StaticClusterView(
        quotas={"team-a": [
            resource_quota("compute", {"limits.cpu": 3, "limits.memory": "3Gi", "pods": 4},
                           {"limits.cpu": 1, "limits.memory": "1Gi", "pods": 1}),
            resource_quota("gpu", {"requests.nvidia.com/gpu": 0}),
        ]},
        ranges={"team-a": [limit_range_of(container_limits(max={"cpu": "500m", "memory": "512Mi"}),
                                          pod_limits(max={"cpu": 2}))]},
        namespaces={"team-a": namespace("team-a", {"team": "research"})},
        node_list=[node("small", {"cpu": "500m", "memory": "512Mi", "pods": 110}),
                   node("tainted", {"cpu": 64, "memory": "256Gi", "pods": 110},
                        taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])],
        queues={"team-a": [local_queue("other-queue")]},
        jobs={"team-a": [stored_mpijob("running", workers=2, conditions=RUNNING),
                         stored_mpijob("suspended", workers=8, suspend=True)]},
    )


def limit_range_of(*items: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "limits", "namespace": "team-a"},
            "spec": {"limits": list(items)}}


SCENARIOS: dict[str, Callable[[], tuple[Policy, ClusterView]]] = {
    "default-policy-no-cluster": lambda: (Policy(), NO_CLUSTER),
    "default-policy-roomy-cluster": lambda: (Policy(), roomy_cluster()),
    "strict-policy-tight-cluster": lambda: (parse_policy(STRICT_POLICY), tight_cluster()),
}


# --- the requests ----------------------------------------------------------------------------

def _recorded() -> dict[str, dict[str, Any]]:
    return captured_reviews()


def _in_create_envelope(job: dict[str, Any], envelope: dict[str, Any]) -> dict[str, Any]:
    """``job`` in place of the object of a recorded CREATE, named like it."""
    review = copy.deepcopy(envelope)
    review["request"]["object"] = copy.deepcopy(job)
    review["request"]["name"] = job.get("metadata", {}).get("name", "")
    return review


def _in_conversion_envelope(objects: list[dict[str, Any]], desired: str, envelope: dict[str, Any]) -> dict[str, Any]:
    review = copy.deepcopy(envelope)
    review["request"]["desiredAPIVersion"] = desired
    review["request"]["objects"] = copy.deepcopy(objects)
    return review


VERSIONS = ("v1alpha1", "v1alpha2", "v1", "v2beta1")


def requests() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(case name, endpoint, request body): every recorded review to the endpoints it was sent
    to (admission reviews to both), and every upstream manifest in the recorded envelopes."""
    recorded = _recorded()
    for name, review in recorded.items():
        stem = name.removesuffix(".request.json")
        if review.get("kind") == "ConversionReview":
            yield f"captured-{stem}", "convert", review
        else:
            for endpoint in ("validate", "mutate"):
                yield f"captured-{stem}", endpoint, review
    creates = {"v2beta1": (recorded["02-create-validating.request.json"], recorded["02-create-mutating.request.json"]),
               "v1alpha1": (recorded["07-create-v1alpha1-mutating.request.json"],) * 2}
    conversion = recorded["02-create-conversion-1.request.json"]
    for version in VERSIONS:
        for path in sorted((UPSTREAM / version).glob("*.yaml")):
            job = load_yaml_documents(path)[0]
            stem = f"upstream-{version}-{path.stem}"
            for desired in VERSIONS:
                yield f"{stem}", f"convert-to-{desired}", _in_conversion_envelope([job], f"kubeflow.org/{desired}", conversion)
            if version not in creates:
                continue
            forms = {"as-written": job}
            if version == "v2beta1":
                forms["as-api-server-sends"] = as_api_server_sends(job)
            for form, sent in forms.items():
                for endpoint, envelope in zip(("validate", "mutate"), creates[version]):
                    yield f"{stem}", f"{endpoint}-{form}", _in_create_envelope(sent, envelope)


def bad_requests() -> Iterator[tuple[str, str, bytes, str | None]]:
    """(endpoint, what, body, Content-Type): requests no API server sends, answered with a 4xx."""
    too_large = b"{" + b" " * MAX_BODY_BYTES + b"}"
    bodies = {"empty": b"", "not-json": b"{not json", "a-list": b"[]", "no-request": b'{"kind":"AdmissionReview"}',
              "too-deep": b"[" * 200 + b"]" * 200, "too-large": too_large}
    for endpoint in ("validate", "mutate", "convert"):
        for what, body in bodies.items():
            yield endpoint, what, body, "application/json"
        yield endpoint, "form-content-type", b"{}", "application/x-www-form-urlencoded"
        yield endpoint, "no-content-type", b"{}", None


def answers() -> dict[str, dict[str, Any]]:
    """Per case, every answer: ``{"<scenario> <endpoint>": {"status": …, "body": …, "bytes": n}}``."""
    served: dict[str, Webhook] = {}
    for scenario, make in SCENARIOS.items():
        policy, cluster = make()
        served[scenario] = webhook(policy=policy, cluster=cluster)
    results: dict[str, dict[str, Any]] = {}
    for case, endpoint, body in requests():
        path = "/" + endpoint.split("-", 1)[0]
        scenarios = list(SCENARIOS) if path != "/convert" else [next(iter(SCENARIOS))]  # policy-free
        for scenario in scenarios:
            answer = served[scenario].client.post(path, data=json.dumps(body), headers={"Content-Type": "application/json"})
            raw = answer.get_data(as_text=True)
            results.setdefault(case, {})[f"{scenario} {endpoint}"] = {"status": answer.status_code, "raw": raw}
    client = served[next(iter(SCENARIOS))].client
    for endpoint, what, data, content_type in bad_requests():
        answer = client.post(f"/{endpoint}", data=data, headers={"Content-Type": content_type} if content_type else {})
        results.setdefault("bad-requests", {})[f"{endpoint} {what}"] = {
            "status": answer.status_code, "raw": answer.get_data(as_text=True)}
    return results


ANSWERS = answers()


def test_every_case_is_recorded_and_nothing_else():
    if RECORD:
        RESPONSES.mkdir(parents=True, exist_ok=True)
        for stale in RESPONSES.glob("*.json"):
            stale.unlink()
        for case, got in ANSWERS.items():
            document = {key: {"status": a["status"], "body": json.loads(a["raw"])} for key, a in got.items()}
            (RESPONSES / f"{case}.json").write_text(json.dumps(document, indent=1) + "\n")
    assert sorted(p.stem for p in RESPONSES.glob("*.json")) == sorted(ANSWERS)
    assert len(ANSWERS) >= 28


@pytest.mark.parametrize("case", sorted(ANSWERS))
def test_responses_are_byte_for_byte_the_recorded_ones(case: str):
    recorded = json.loads((RESPONSES / f"{case}.json").read_text())
    got = ANSWERS[case]
    assert sorted(got) == sorted(recorded)
    for key, answer in got.items():
        expected = recorded[key]
        # The readable comparison first, then the bytes: key order and number formatting count too.
        assert (answer["status"], json.loads(answer["raw"])) == (expected["status"], expected["body"]), key
        assert answer["raw"] == COMPACT.encode(expected["body"]), key
