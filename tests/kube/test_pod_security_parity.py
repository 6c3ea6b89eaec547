"""The job's verdict against the real API server's own PodSecurity admission: for one fixture of
every distinct pod in upstream's corpus (tests/data/pod-security), in a namespace labelled with
the fixture's level and version, the API server dry-run creates the pod itself, and /validate
judges an MPIJob whose Worker template is that pod (the Launcher runs upstream's base pod), in
the same namespace as the API server serves it. Needs the control plane (KUBEBUILDER_ASSETS)."""
from __future__ import annotations

import http.client
import json
import ssl
from typing import Any

import pytest

from policies.cluster_view import StaticClusterView
from policies.kube.pod_security import LevelVersion, evaluate_pod, forbidden_message, parse_version
from testing.app_client import webhook
from testing.builders import admission_review
from testing.control_plane import ControlPlane
from testing.pod_security_corpus import ENFORCE, REFUSED_BY_THE_SCHEMA, Fixture, base_pod, fixtures, job_with, pod

API_SERVER_MINOR = 36  # the control plane's version: it knows no policy version past v1.36


def sample() -> list[Fixture]:
    """Each distinct pod once, at the first level and version upstream lists it (up to v1.36)."""
    chosen: dict[str, Fixture] = {}
    for fixture in fixtures():
        if int(fixture.version.split(".")[1]) <= API_SERVER_MINOR:
            chosen.setdefault(fixture.pod, fixture)
    return list(chosen.values())


def post(plane: ControlPlane, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    context = ssl.create_default_context(cafile=str(plane.ca_file))
    context.load_cert_chain(str(plane.pki / "admin.crt"), str(plane.pki / "admin.key"))
    connection = http.client.HTTPSConnection("127.0.0.1", plane.apiserver_port, context=context, timeout=30)
    try:
        connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def names_the_same_checks(message: str, level: LevelVersion, results: list) -> bool:
    """The API server's message is ours word for word, or names the same checks in the same order:
    its pod strategy copies an AppArmor annotation into the container's securityContext before
    PodSecurity runs, so for such a pod its detail names the field too (the verdict is the same)."""
    expected = f'pods "p" is forbidden: {forbidden_message(level, results)}'
    if message == expected:
        return True
    head = f'pods "p" is forbidden: violates PodSecurity "{level}": '
    reasons = [r.forbidden_reason for r in results]  # "forbidden AppArmor profile" (its field and annotation: "…profiles")
    positions = [message.find(reason) for reason in reasons]
    return message.startswith(head) and -1 not in positions and positions == sorted(positions) and \
        all(r.check_id == "appArmorProfile" for r in results if r.forbidden_detail not in message)


@pytest.fixture(scope="module")
def namespaces(control_plane: ControlPlane) -> dict[str, dict[str, Any]]:
    """One namespace per level and version of the sample, as the API server stores it."""
    stored = {}
    for fixture in sample():
        if fixture.namespace in stored:
            continue
        name = f"pss-{fixture.namespace}"
        status, body = post(control_plane, "/api/v1/namespaces", {
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {
                ENFORCE: fixture.level, f"{ENFORCE}-version": fixture.version}}})
        assert status in (201, 409), body
        control_plane.wait_for_service_account("default", name)
        status, read = control_plane.get(f"/api/v1/namespaces/{name}")
        stored[fixture.namespace] = json.loads(read)
    return stored


def test_the_jobs_verdict_is_the_api_servers_for_the_pod_itself(control_plane, namespaces):
    view = StaticClusterView(namespaces={ns["metadata"]["name"]: ns for ns in namespaces.values()})
    app = webhook(cluster=view)
    differences = []
    for fixture in sample():
        name = f"pss-{fixture.namespace}"
        pod_object = {**pod(fixture.pod), "metadata": {**pod(fixture.pod)["metadata"], "name": "p"}}
        status, answer = post(control_plane, f"/api/v1/namespaces/{name}/pods?dryRun=All", pod_object)
        response = app.review("/validate", admission_review(
            job_with(base_pod(fixture.level, fixture.version), pod(fixture.pod)), namespace=name))["response"]
        outcomes = app.last.verdict.outcomes
        ours = [o.finding for o in outcomes if o.finding.rule == "pod-security"]
        if status == 422:  # the pod itself is invalid (procMount Unmasked without hostUsers: false): refused too
            if response["allowed"]:
                differences.append((fixture, "the API server finds the pod invalid, we admit its job", answer["message"]))
            continue
        if fixture.pod.startswith(REFUSED_BY_THE_SCHEMA) and {o.finding.rule for o in outcomes} == {"object-shape"}:
            if status == 201 or response["allowed"]:
                differences.append((fixture, status, "the MPIJob CRD's schema refuses the job"))
            continue
        if (status == 201) != (response["allowed"] and not ours):
            differences.append((fixture, status, answer.get("message"), [f.message for f in ours]))
            continue
        if status == 201:
            continue
        level = LevelVersion(fixture.level, parse_version(fixture.version))
        results = evaluate_pod(level, pod_object["metadata"], pod_object["spec"])
        if not names_the_same_checks(answer["message"], level, results):
            differences.append((fixture, "message", answer["message"], forbidden_message(level, results)))
        named = {f.message.split(": check ", 1)[1].split(",")[0].split(":")[0].split(";")[0] for f in ours}
        if named != {r.check_id for r in results} or not all(f.path.startswith("spec.mpiReplicaSpecs[Worker]")
                                                             for f in ours):
            differences.append((fixture, "checks named", sorted(named), [r.check_id for r in results]))
    assert differences == []
    assert len(sample()) > 300
