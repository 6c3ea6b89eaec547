"""The engine against the real thing: upstream's fixture pods created (dry run) in namespaces that
enforce each level and a sample of versions on a real v1.36 API server; its answer is the
engine's exactly: allowed when the engine finds nothing, else refused with the text
``forbidden_message`` makes. Skipped without a control plane (KUBEBUILDER_ASSETS)."""
from __future__ import annotations

import copy
import http.client
import json
import ssl
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from policies.kube.pod_security import ENFORCE_LABEL, ENFORCE_VERSION_LABEL, LevelVersion, evaluate_pod, \
    forbidden_message, parse_version
from testing.reference_data import PodSecurityFixture, pod_security_fixtures

API_SERVER = (1, 36)    # the control plane's version: its "latest" is policy v1.36
VERSIONS = ["v1.0", "v1.18", "v1.19", "v1.22", "v1.25", "v1.34", "v1.35", "latest", "v1.37"]


def fixtures_for(level: str, version: str) -> list[PodSecurityFixture]:
    """The fixtures of that version's folder (for "latest" and versions past upstream's, the newest)."""
    parsed = parse_version(version)
    newest = max(f.version for f in pod_security_fixtures())
    folder = newest if parsed is None or parsed > newest else parsed
    return [f for f in pod_security_fixtures() if f.level == level and f.version == folder]


def dry_run_create(control_plane: Any, namespace: str, pod: dict[str, Any]) -> tuple[int, str]:
    """POST the pod with dryRun=All, straight over HTTPS: the client library would refuse some
    fixtures itself (a scaleIO volume without its secretRef) before the API server sees them."""
    body = copy.deepcopy(pod)
    body["metadata"] = {**(body.get("metadata") or {}), "name": "test"}
    context = ssl.create_default_context(cafile=str(control_plane.ca_file))
    context.load_cert_chain(str(control_plane.pki / "admin.crt"), str(control_plane.pki / "admin.key"))
    connection = http.client.HTTPSConnection("127.0.0.1", control_plane.apiserver_port, context=context, timeout=30)
    try:
        connection.request("POST", f"/api/v1/namespaces/{namespace}/pods?dryRun=All", json.dumps(body),
                           {"Content-Type": "application/json"})
        response = connection.getresponse()
        answer = json.loads(response.read())
    finally:
        connection.close()
    return response.status, answer.get("message", "") if response.status != 201 else ""


def make_default_service_account(core: Any, namespace: str) -> None:
    """Pods need it; the controller manager makes it too, maybe first (faster than waiting for it)."""
    from kubernetes.client.exceptions import ApiException
    try:
        core.create_namespaced_service_account(namespace, {"metadata": {"name": "default"}})
    except ApiException as error:
        if error.status != 409:
            raise


@pytest.mark.parametrize("level", ["baseline", "restricted"])
def test_the_api_server_answers_each_fixture_as_the_engine_does(control_plane, level):
    from kubernetes import client
    core = client.CoreV1Api(control_plane.api_client())
    disagreements, invalid = [], []
    for version in VERSIONS:
        namespace = f"psa-{level}-{version.replace('.', '-')}"
        core.create_namespace({"metadata": {"name": namespace,
                                            "labels": {ENFORCE_LABEL: level, ENFORCE_VERSION_LABEL: version}}})
        make_default_service_account(core, namespace)
        level_version = LevelVersion(level, parse_version(version))
        fixtures = fixtures_for(level, version)
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda f: dry_run_create(control_plane, namespace, f.pod), fixtures))
        for fixture, (status, message) in zip(fixtures, answers):
            results = evaluate_pod(level_version, fixture.pod.get("metadata") or {}, fixture.pod["spec"],
                                   emulation_version=API_SERVER)
            if status == 422:       # invalid before PodSecurity is asked (upstream's failRequiresError)
                invalid.append(f"{version} {fixture.name}")
                continue
            expected = (403, f'pods "test" is forbidden: {forbidden_message(level_version, results)}') if results \
                else (201, "")
            if (status, message) != expected:
                disagreements.append(f"{version} {fixture}: server {status} {message!r}, engine {expected!r}")
        core.delete_namespace(namespace)
    assert not disagreements, "\n".join(disagreements)
    # Only the fixtures upstream marks as refused by validation itself (procMount in a user namespace).
    assert all("procmount" in name for name in invalid), invalid
