"""docs/security.md's "Authenticating the API server", followed to the letter on a real API server.

The client CA and certificate come from the doc's own ``openssl`` commands, the
AdmissionConfiguration and its kubeconfig are the doc's two YAML blocks (only their
``/etc/kubernetes/admission/`` folder moved), and the webhook runs with the doc's ``serve`` flags.
It is registered as the manifests register it: the webhook configurations of
``manifests/base/webhooks.yaml`` and the multi-version CRD of ``manifests/crd``, all through the
Service ``mpijob-webhook/mpijob-webhook`` port 443, the name the doc's kubeconfig user matches.
Without a kubelet or kube-proxy a ClusterIP leads nowhere, and an endpoint may not be a loopback
address, so the Service is of type ExternalName: ``localhost``, which the API server resolves as
``localhost:443`` (its service resolver without aggregator routing), the webhook listening on
127.0.0.1:443. Every connection stays on loopback.

A control plane of its own (module scope): the admission configuration is read only when the API
server starts, and the webhook configurations here fail closed for every MPIJob.
"""
from __future__ import annotations

import base64
import copy
import http.client
import json
import re
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from certs import authority
from testing import control_plane as plane_module
from testing.control_plane import ControlPlane
from testing.reference_data import ROOT, UPSTREAM
from testing.tls_server import TlsServer, serving

DOC = ROOT / "docs" / "security.md"
DOC_FOLDER = "/etc/kubernetes/admission/"
SERVICE, NAMESPACE = "mpijob-webhook", "mpijob-webhook"
SERVICE_PORT = 443  # the manifests' Service port, which the doc's kubeconfig user name implies
JOBS = "jobs"
PI = yaml.safe_load((UPSTREAM / "v2beta1" / "pi.yaml").read_text())
# kubectl's rendering of the webhook's 422 Status (its cause's field, then the cause's message)
SLOTS_MESSAGE = ('The MPIJob "too-many-slots" is invalid: spec.slotsPerWorker: [slots-per-worker] Invalid value: 9: '
                 "slotsPerWorker must be between 1 and 8 (asked 9); set spec.slotsPerWorker to 8")
CONVERGE_SECONDS = 30.0


# -- what the doc says --------------------------------------------------------------------------

def api_server_section() -> str:
    text = DOC.read_text()
    start = text.index("### The API server's side")
    return text[start:text.index("\n### ", start + 1)]


def code_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", api_server_section(), flags=re.S)


def serve_flags() -> dict[str, str]:
    """The doc's ``--client-ca-file`` and ``--client-name`` values (the serve line at the section's top)."""
    text = DOC.read_text()
    section = text[text.index("## Authenticating the API server"):]
    line = " ".join(re.search(r"```\n(mpijob-webhook serve .*?)```", section, flags=re.S)[1].replace("\\\n", " ").split())
    return dict(re.findall(r"(--client-(?:ca-file|name)) (\S+)", line))


def loopback_port_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass
class Setup:
    plane: ControlPlane
    folder: Path
    serving: authority.Bundle
    client_ca_file: Path

    def webhook(self, name: str, *flags: str) -> Any:
        """``serve`` with the doc's flags (and ``flags``) on 127.0.0.1:443, where the Service leads."""
        doc = serve_flags()
        return serving(self.folder / name, "--cert-file", str(self.serving.cert_file),
                       "--key-file", str(self.serving.key_file), "--workers", "1",
                       "--threads", "4", "--client-ca-file", str(self.client_ca_file),
                       "--client-name", doc["--client-name"], *flags, ca_file=self.serving.ca_file,
                       port=SERVICE_PORT)


def make_client_certificate(folder: Path) -> Path:
    """The doc's openssl commands, run as written; its ``kubectl create secret`` line is played by
    a folder holding the Secret's key, as the Deployment mounts it. Returns the CA file the
    webhook is given (``--client-ca-file``)."""
    lines = [line for line in code_blocks("bash")[0].replace("\\\n", " ").splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join(l for l in lines if not l.startswith("kubectl"))],
                            cwd=folder, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    [secret] = [line for line in lines if line.startswith("kubectl")]
    key, source = re.search(r"--from-file=([^=\s]+)=(\S+)", secret).groups()  # type: ignore[union-attr]
    mounted = folder / "client-ca-secret" / key
    assert Path(serve_flags()["--client-ca-file"]).name == key
    mounted.parent.mkdir()
    shutil.copyfile(folder / source, mounted)
    return mounted


def write_admission_configuration(folder: Path) -> Path:
    """The doc's two YAML blocks, with their folder moved to ``folder``; returns the configuration."""
    configuration, kubeconfig = (block.replace(DOC_FOLDER, f"{folder}/") for block in code_blocks("yaml"))
    (folder / "admission-config.yaml").write_text(configuration)
    (folder / "webhook-clients.kubeconfig").write_text(kubeconfig)
    assert yaml.safe_load(configuration)["kind"] == "AdmissionConfiguration"
    return folder / "admission-config.yaml"


def with_ca_bundle(client_config: dict[str, Any], ca: Path) -> None:
    client_config["caBundle"] = base64.b64encode(ca.read_bytes()).decode()


def registrations(ca: Path) -> list[dict[str, Any]]:
    """The manifests' MPIJob CRD and both webhook configurations, with the CA bundle an overlay adds."""
    crd = yaml.safe_load(subprocess.run([plane_module.kubectl_binary(), "kustomize", str(ROOT / "manifests" / "crd")],
                                        capture_output=True, text=True, check=True).stdout)
    with_ca_bundle(crd["spec"]["conversion"]["webhook"]["clientConfig"], ca)
    configurations = list(yaml.safe_load_all((ROOT / "manifests" / "base" / "webhooks.yaml").read_text()))
    for configuration in configurations:
        for webhook in configuration["webhooks"]:
            with_ca_bundle(webhook["clientConfig"], ca)
    return [crd, *configurations]


def wait_until_established(plane: ControlPlane, crd: str, timeout: float = 60) -> None:
    """(``kubectl wait`` fails outright while the new CRD has no conditions yet.)"""
    deadline = time.monotonic() + timeout

    def established() -> bool:
        status = json.loads(plane.kubectl("get", "crd", crd, "-o", "json").stdout)["status"]
        return any(c["type"] == "Established" and c["status"] == "True" for c in status.get("conditions") or ())
    while not established():
        assert time.monotonic() < deadline, f"CRD {crd} not established within {timeout}s"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    assets = plane_module.assets()
    if assets is None:
        pytest.skip(plane_module.SKIP_REASON)
    if shutil.which("openssl") is None:
        pytest.skip("needs openssl: docs/security.md issues the client certificate with it")
    if not loopback_port_free(SERVICE_PORT):
        pytest.skip(f"needs 127.0.0.1:{SERVICE_PORT} (root, and the port free): the Service leads there")
    folder = tmp_path_factory.mktemp("client-certificates")
    client_ca_file = make_client_certificate(folder)
    configuration = write_admission_configuration(folder)
    serving_ca = authority.new_ca("mpijob-webhook-serving-ca")
    bundle = authority.write_bundle(folder / "tls", serving_ca, authority.new_serving_cert(
        serving_ca, [*authority.service_dns_names(SERVICE, NAMESPACE), "localhost"], ["127.0.0.1"]))
    plane = ControlPlane(folder / "control-plane", assets, apiserver_extra_args=(
        f"--admission-control-config-file={configuration}",))
    try:
        plane.start()
        for namespace in (NAMESPACE, JOBS):
            plane.kubectl("create", "namespace", namespace)
        plane.apply([{"apiVersion": "v1", "kind": "Service", "metadata": {"name": SERVICE, "namespace": NAMESPACE},
                      "spec": {"type": "ExternalName", "externalName": "localhost",
                               "ports": [{"name": "https", "port": SERVICE_PORT}]}}])
        plane.apply(registrations(bundle.ca_file))
        wait_until_established(plane, "mpijobs.kubeflow.org")
        yield Setup(plane, folder, bundle, client_ca_file)
    finally:
        plane.stop()


@pytest.fixture
def webhook(setup: Setup) -> Iterator[TlsServer]:
    """The webhook as the doc configures it: /validate and /mutate need the client certificate.
    One per test, on the same port: the API server's kept-alive connections to the one before are
    gone with it, so a test's first call may need a retry (``eventually``)."""
    with setup.webhook("webhook") as server:
        yield server


# -- helpers --------------------------------------------------------------------------------------

def job(name: str, **spec: Any) -> dict[str, Any]:
    document = copy.deepcopy(PI)
    document["metadata"] = {"name": name, "namespace": JOBS}
    document["spec"].update(spec)
    return document


def dry_run(plane: ControlPlane, document: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return plane.kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(document), check=False)


def eventually(attempt: Callable[[], subprocess.CompletedProcess[str]],
               done: Callable[[subprocess.CompletedProcess[str]], bool]) -> subprocess.CompletedProcess[str]:
    """A kept-alive connection of the API server's to the webhook before this one fails one call; retry."""
    deadline = time.monotonic() + CONVERGE_SECONDS
    result = attempt()
    while not done(result) and time.monotonic() < deadline:
        time.sleep(0.5)
        result = attempt()
    return result


def counter(server: TlsServer, name: str, *labels: str) -> dict[tuple[str, ...], float]:
    """One counter of the webhook's /metrics, summed by ``labels``."""
    status, body = server.health_request("/metrics")
    assert status == 200
    sums: dict[tuple[str, ...], float] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if family.name == name and sample.name.endswith("_total"):
                key = tuple(sample.labels[label] for label in labels)
                sums[key] = sums.get(key, 0) + sample.value
    return sums


def refusals(server: TlsServer) -> dict[tuple[str, ...], float]:
    return counter(server, "mpijob_webhook_refused_clients", "endpoint", "reason")


def post_directly(server: TlsServer, path: str, certificate: tuple[Path, Path] | None) -> tuple[int, dict[str, Any]]:
    context = server.ssl_context()
    if certificate is not None:
        context.load_cert_chain(*map(str, certificate))
    connection = http.client.HTTPSConnection("localhost", server.port, context=context, timeout=10)
    try:
        connection.request("POST", path, body=b"{}", headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


# -- the tests ------------------------------------------------------------------------------------

def test_the_api_server_presents_the_doc_s_certificate_and_gets_decisions(setup: Setup, webhook: TlsServer) -> None:
    denied = eventually(lambda: dry_run(setup.plane, job("too-many-slots", slotsPerWorker=9)),
                        lambda result: SLOTS_MESSAGE in result.stderr)
    assert denied.returncode == 1
    assert SLOTS_MESSAGE in denied.stderr
    admitted = dry_run(setup.plane, job("pi"))
    assert admitted.returncode == 0, admitted.stderr
    assert "mpijob.kubeflow.org/pi created (server dry run)" in admitted.stdout
    # both calls went through /mutate and /validate, with the certificate: no client was refused
    expected = {("validate", "denied"), ("validate", "allowed"), ("mutate", "allowed")}
    deadline = time.monotonic() + 5  # a worker's counts reach /metrics within a second or so
    while not expected <= set(answered := counter(webhook, "mpijob_webhook_requests", "endpoint", "decision")):
        assert time.monotonic() < deadline, answered
        time.sleep(0.2)
    assert not {key: n for key, n in refusals(webhook).items() if n}


def test_clients_without_the_certificate_are_refused(setup: Setup, webhook: TlsServer) -> None:
    for path in ("/validate", "/mutate"):
        status, answer = post_directly(webhook, path, None)
        assert (status, answer["kind"], answer["reason"], answer["code"]) == (401, "Status", "Unauthorized", 401)
    # a certificate of the cluster's own CA (the admin's) does not chain to the client CA
    admin = (setup.plane.pki / "admin.crt", setup.plane.pki / "admin.key")
    with pytest.raises((ssl.SSLError, ConnectionError)):
        post_directly(webhook, "/validate", admin)
    # the doc's certificate, presented directly, is let through to a decision (a 400 for the empty body)
    doc_certificate = (setup.folder / "mpijob-webhook-client.crt", setup.folder / "mpijob-webhook-client.key")
    assert post_directly(webhook, "/validate", doc_certificate)[0] == 400
    # a certificate of the client CA for another client: 403
    other = authority.new_client_cert(authority.load_ca(setup.folder / "client-ca.crt", setup.folder / "client-ca.key"),
                                      "someone-else")
    other_files = (setup.folder / "other.crt", setup.folder / "other.key")
    other_files[0].write_bytes(other.cert_pem())
    authority.write_private_key(other_files[1], other)
    status, answer = post_directly(webhook, "/validate", other_files)
    assert (status, answer["reason"]) == (403, "Forbidden")
    assert answer["message"] == ("the client certificate (commonName=someone-else) names none of the allowed clients "
                                 f"({serve_flags()['--client-name']})")
    counted = refusals(webhook)
    assert counted[("/validate", "client_name_not_allowed")] >= 1
    assert counted[("/validate", "no_client_certificate")] >= 1
    assert counted[("/mutate", "no_client_certificate")] >= 1
    assert counted[("handshake", "untrusted_client_certificate")] >= 1


def by_url(webhook: TlsServer, namespace: str, ca: Path, rule: dict[str, Any]) -> dict[str, Any]:
    """A ValidatingWebhookConfiguration "by-url" calling ``webhook`` at ``https://127.0.0.1:PORT``
    for ``rule`` in ``namespace`` only, failing closed."""
    configuration = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "by-url"},
        "webhooks": [{
            "name": "by-url.mpijob-webhook.kubeflow.org", "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": f"https://127.0.0.1:{webhook.port}/validate"},
            "rules": [{"operations": ["CREATE"], **rule}],
            "failurePolicy": "Fail", "sideEffects": "None", "timeoutSeconds": 5,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        }],
    }
    with_ca_bundle(configuration["webhooks"][0]["clientConfig"], ca)
    return configuration


def assert_failed_closed_without_a_certificate(plane: ControlPlane, webhook: TlsServer, ca_name: str,
                                               attempt: Callable[[], subprocess.CompletedProcess[str]]) -> None:
    before = refusals(webhook).get(("/validate", "no_client_certificate"), 0)
    refused = eventually(attempt, lambda result: "by-url" in result.stderr)
    assert refused.returncode == 1
    # the API server passes on the message of the webhook's 401 Status
    assert ('Internal error occurred: failed calling webhook "by-url.mpijob-webhook.kubeflow.org": failed to call '
            f"webhook: /validate needs a TLS client certificate issued by the CA in {ca_name}; the connection "
            "presented none") in refused.stderr
    assert refusals(webhook)[("/validate", "no_client_certificate")] > before


def test_a_webhook_the_kubeconfig_does_not_name_gets_no_certificate_and_fails_closed(
        setup: Setup, webhook: TlsServer) -> None:
    """Registered by URL (``127.0.0.1:PORT``), the webhook matches no user of the doc's kubeconfig:
    the API server calls it with no certificate, as with no admission configuration at all."""
    namespace = "unnamed-webhook"
    setup.plane.kubectl("create", "namespace", namespace)
    setup.plane.apply([by_url(webhook, namespace, setup.serving.ca_file, {
        "apiGroups": ["kubeflow.org"], "apiVersions": ["v2beta1"], "resources": ["mpijobs"]})])
    try:
        valid = job("pi") | {"metadata": {"name": "pi", "namespace": namespace}}
        assert_failed_closed_without_a_certificate(setup.plane, webhook, setup.client_ca_file.name,
                                                   lambda: dry_run(setup.plane, valid))
    finally:
        setup.plane.kubectl("delete", "validatingwebhookconfiguration", "by-url", check=False)


def test_an_api_server_without_the_admission_configuration_fails_closed(
        setup: Setup, webhook: TlsServer, control_plane: ControlPlane, kube_namespace: str) -> None:
    """The session's control plane has no ``--admission-control-config-file``. The webhook's 401
    does not depend on the kind (it reads no body), so a ConfigMap create in one namespace stands
    for an MPIJob: that plane needs no MPIJob CRD, and its other tests are not affected."""
    control_plane.apply([by_url(webhook, kube_namespace, setup.serving.ca_file, {
        "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]})])
    try:
        assert_failed_closed_without_a_certificate(control_plane, webhook, setup.client_ca_file.name, lambda: (
            control_plane.kubectl("create", "configmap", "c", "-n", kube_namespace, "--dry-run=server", check=False)))
    finally:
        control_plane.kubectl("delete", "validatingwebhookconfiguration", "by-url", check=False)


def conversion_read(plane: ControlPlane, name: str) -> subprocess.CompletedProcess[str]:
    """A v2beta1 job read as v1alpha2: the API server calls /convert."""
    return plane.kubectl("get", "mpijobs.v1alpha2.kubeflow.org", name, "-n", JOBS, "-o", "json", check=False)


def test_the_api_server_presents_no_certificate_to_the_conversion_webhook(setup: Setup) -> None:
    """What docs/security.md says of /convert, on the real API server: its CRD conversion client
    ignores the admission configuration's kubeconfig, so /convert stays open by default, and
    asking for a certificate there (``--client-auth-endpoint /convert``) breaks conversion."""
    with setup.webhook("convert-open") as webhook:
        eventually(lambda: setup.plane.kubectl("apply", "-f", "-", input=json.dumps(job("stored")), check=False),
                   lambda result: result.returncode == 0)
        converted = eventually(lambda: conversion_read(setup.plane, "stored"), lambda result: result.returncode == 0)
        assert converted.returncode == 0, converted.stderr
        assert json.loads(converted.stdout)["apiVersion"] == "kubeflow.org/v1alpha2"
        assert not {key: n for key, n in refusals(webhook).items() if n}
    with setup.webhook("convert-authenticated", "--client-auth-endpoint", "/validate", "--client-auth-endpoint",
                       "/mutate", "--client-auth-endpoint", "/convert") as strict:
        refused = eventually(lambda: conversion_read(setup.plane, "stored"),
                             lambda result: "conversion webhook" in result.stderr)
        assert refused.returncode == 1
        assert ("conversion webhook for kubeflow.org/v2beta1, Kind=MPIJob failed: /convert needs a TLS client "
                f"certificate issued by the CA in {setup.client_ca_file.name}; the connection presented none"
                ) in refused.stderr
        assert refusals(strict)[("/convert", "no_client_certificate")] >= 1
        # admission, on the same webhook and the same API server, still presents the certificate
        denied = dry_run(setup.plane, job("too-many-slots", slotsPerWorker=9))
        assert SLOTS_MESSAGE in denied.stderr
        assert refusals(strict).get(("/validate", "no_client_certificate"), 0) == 0
