"""serve --client-ca-file / --client-name, end to end: real TLS, gunicorn, certificates from
certs.authority. Only a client whose certificate chains to the client CA and names an allowed
client gets a decision; the others get 401/403 (a metav1.Status), or a refused handshake, and
each refusal is counted in /metrics and written to the audit log. A replaced CA file is trusted
without a restart."""
from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from certs import authority
from testing.builders import admission_review, mpijob
from testing.tls_server import TlsServer, serving

ALLOWED = "kube-apiserver-webhook-client"


@dataclass
class Clients:
    directory: Path
    client_ca: authority.Issued

    def write(self, name: str, issued: authority.Issued) -> tuple[Path, Path]:
        cert, key = self.directory / f"{name}.crt", self.directory / f"{name}.key"
        cert.write_bytes(issued.cert_pem())
        authority.write_private_key(key, issued)
        return cert, key


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TlsServer, Clients]]:
    directory = tmp_path_factory.mktemp("client-auth")
    serving_ca = authority.new_ca("serving-ca")
    bundle = authority.write_bundle(directory / "tls", serving_ca,
                                    authority.new_serving_cert(serving_ca, ["localhost"], ["127.0.0.1"]))
    clients = Clients(directory, authority.new_ca("api-server-client-ca"))
    ca_file = directory / "client-ca.crt"
    ca_file.write_bytes(clients.client_ca.cert_pem())
    with serving(directory / "server", "--cert-file", str(bundle.cert_file), "--key-file", str(bundle.key_file),
                 "--workers", "1", "--threads", "4", "--client-ca-file", str(ca_file),
                 "--client-name", ALLOWED, "--client-name", "other-allowed.example",
                 ca_file=bundle.ca_file) as server:
        yield server, clients


def context(server: TlsServer, cert: tuple[Path, Path] | None) -> ssl.SSLContext:
    tls = server.ssl_context()
    if cert is not None:
        tls.load_cert_chain(*map(str, cert))
    return tls


CONVERSION_REVIEW = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                     "request": {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "desiredAPIVersion": "kubeflow.org/v2beta1",
                                 "objects": [mpijob()]}}


def post_validate(server: TlsServer, cert: tuple[Path, Path] | None, path: str = "/validate") -> tuple[int, dict]:
    review = CONVERSION_REVIEW if path == "/convert" else admission_review(mpijob())
    connection = http.client.HTTPSConnection("localhost", server.port, context=context(server, cert), timeout=10)
    try:
        connection.request("POST", path, body=json.dumps(review).encode(),
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def refused_counts(server: TlsServer) -> dict[tuple[str, str], float]:
    status, body = server.health_request("/metrics")
    assert status == 200
    return {(s.labels["endpoint"], s.labels["reason"]): s.value
            for family in text_string_to_metric_families(body.decode()) for s in family.samples
            if s.name == "mpijob_webhook_refused_clients_total"}


def audit_refusals(server: TlsServer) -> list[dict]:
    lines = [json.loads(line) for line in server.output().splitlines() if line.startswith('{"log":"mpijob-webhook.audit"')]
    return [line for line in lines if line["decision"] == "refused"]


def eventually(check, timeout: float = 5.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.1)


def test_a_certificate_from_the_client_ca_naming_an_allowed_client_gets_decisions(setup):
    server, clients = setup
    for name, issued in {"by-cn": authority.new_client_cert(clients.client_ca, ALLOWED),
                         "by-san": authority.new_client_cert(clients.client_ca, "something-else",
                                                             ["other-allowed.example"])}.items():
        status, answer = post_validate(server, clients.write(name, issued))
        assert status == 200, answer
        assert answer["response"]["allowed"] is True


def test_no_certificate_is_a_401_and_a_wrong_name_a_403_both_counted_and_audited(setup):
    server, clients = setup
    before = refused_counts(server)
    status, answer = post_validate(server, None)
    assert (status, answer) == (401, {
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 401, "reason": "Unauthorized",
        "message": "/validate needs a TLS client certificate issued by the CA in client-ca.crt; "
                   "the connection presented none"})
    intruder = clients.write("intruder", authority.new_client_cert(clients.client_ca, "intruder"))
    status, answer = post_validate(server, intruder)
    assert status == 403
    assert answer["reason"] == "Forbidden"
    assert answer["message"] == ("the client certificate (commonName=intruder) names none of the allowed clients "
                                 f"({ALLOWED}, other-allowed.example)")
    after = refused_counts(server)
    assert after.get(("/validate", "no_client_certificate"), 0) == before.get(("/validate", "no_client_certificate"), 0) + 1
    assert after.get(("/validate", "client_name_not_allowed"), 0) == before.get(("/validate", "client_name_not_allowed"), 0) + 1
    expected = {(401, "no_client_certificate", ""), (403, "client_name_not_allowed", "commonName=intruder")}

    def refused_validations() -> list[dict]:
        found = [r for r in audit_refusals(server) if r["endpoint"] == "/validate"]
        return found if {(r["code"], r["reason"], r["client"]["certificate"]) for r in found} >= expected else []

    refusals = eventually(refused_validations)  # the audit log is written every 0.1 s
    assert {(r["code"], r["reason"], r["client"]["certificate"]) for r in refusals} >= expected
    assert all(r["client"]["address"].startswith("127.0.0.1:") for r in refusals)
    assert "uid" not in refusals[0]  # the body of a refused request is never read


def test_mutate_needs_the_certificate_too_and_convert_does_not_by_default(setup):
    server, _ = setup
    status, answer = post_validate(server, None, "/mutate")
    assert (status, answer["reason"]) == (401, "Unauthorized")
    # The API server presents no client certificate to CRD conversion webhooks (docs/security.md).
    status, answer = post_validate(server, None, "/convert")
    assert status == 200 and answer["response"]["result"] == {"status": "Success"}


def test_the_endpoints_to_authenticate_can_be_chosen(tmp_path: Path):
    serving_ca = authority.new_ca("serving-ca")
    bundle = authority.write_bundle(tmp_path / "tls", serving_ca,
                                    authority.new_serving_cert(serving_ca, ["localhost"], ["127.0.0.1"]))
    ca_file = tmp_path / "client-ca.crt"
    ca_file.write_bytes(authority.new_ca("client-ca").cert_pem())
    with serving(tmp_path / "server", "--cert-file", str(bundle.cert_file), "--key-file", str(bundle.key_file),
                 "--workers", "1", "--threads", "2", "--client-ca-file", str(ca_file),
                 "--client-auth-endpoint", "/convert", ca_file=bundle.ca_file) as server:
        assert post_validate(server, None, "/convert")[0] == 401
        assert post_validate(server, None, "/validate")[0] == 200
        assert post_validate(server, None, "/mutate")[0] == 200


def test_probes_need_no_certificate(setup):
    server, _ = setup
    assert server.request("GET", "/healthz") == (200, b'{"status":"ok"}')
    assert server.health_request("/healthz") == (200, b'{"status":"ok"}')
    assert server.health_request("/readyz")[0] == 200


def test_a_certificate_from_another_ca_is_refused_in_the_handshake(setup):
    server, clients = setup
    stranger_ca = authority.new_ca("stranger-ca")
    stranger = clients.write("stranger", authority.new_client_cert(stranger_ca, ALLOWED))
    before = refused_counts(server).get(("handshake", "untrusted_client_certificate"), 0)
    with pytest.raises((ssl.SSLError, ConnectionError, http.client.RemoteDisconnected)):
        post_validate(server, stranger)
    assert eventually(lambda: refused_counts(server).get(("handshake", "untrusted_client_certificate"), 0) == before + 1)
    assert eventually(lambda: any(r["endpoint"] == "handshake" and r["reason"] == "untrusted_client_certificate"
                                  for r in audit_refusals(server)))


def test_the_health_port_serves_no_admission_and_the_tls_port_no_metrics(setup):
    server, clients = setup
    connection = http.client.HTTPConnection("127.0.0.1", server.health_port, timeout=10)
    try:
        connection.request("POST", "/validate", body=b"{}", headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == 404
        assert json.loads(response.read())["message"] == (
            "/validate is not served on the health port; admission and conversion are served over TLS only")
    finally:
        connection.close()
    status, body = server.request("GET", "/metrics")
    assert status == 404
    assert json.loads(body)["message"] == "/metrics is served on the health port (--health-port)"


def test_a_replaced_client_ca_is_trusted_without_a_restart(setup):
    server, clients = setup
    ca_file = clients.directory / "client-ca.crt"
    old = clients.write("old-ca-client", authority.new_client_cert(clients.client_ca, ALLOWED))
    renewed_ca = authority.new_ca("api-server-client-ca-2")
    new = clients.write("new-ca-client", authority.new_client_cert(renewed_ca, ALLOWED))
    replacement = ca_file.with_suffix(".new")
    replacement.write_bytes(renewed_ca.cert_pem())
    os.replace(replacement, ca_file)  # as the kubelet swaps a mounted Secret's files

    def new_ca_accepted() -> bool:
        try:
            return post_validate(server, new)[0] == 200
        except (ssl.SSLError, ConnectionError, http.client.HTTPException):
            return False

    assert eventually(new_ca_accepted, timeout=10)
    with pytest.raises((ssl.SSLError, ConnectionError, http.client.RemoteDisconnected)):
        post_validate(server, old)
    assert "reloaded serving certificate" in server.output()
    clients.client_ca = renewed_ca


def raw_connection(server: TlsServer, cert: tuple[Path, Path] | None) -> ssl.SSLSocket:
    return context(server, cert).wrap_socket(socket.create_connection(("127.0.0.1", server.port), timeout=10),
                                             server_hostname="localhost")


STALLING_HEAD = (b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 100000\r\n\r\n{")


@pytest.mark.parametrize(("name", "status_line"), [(None, b"HTTP/1.1 401 Unauthorized"),
                                                   ("intruder", b"HTTP/1.1 403 Forbidden")])
def test_a_refused_client_is_answered_right_after_its_head_and_its_body_is_never_waited_for(
        setup, name: str | None, status_line: bytes):
    server, clients = setup
    cert = None if name is None else clients.write(name, authority.new_client_cert(clients.client_ca, name))
    sock = raw_connection(server, cert)
    try:
        started = time.monotonic()
        sock.sendall(STALLING_HEAD)  # and one byte of the 100,000 it announces
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except OSError:
            pass
        assert time.monotonic() - started < 1.0  # not the client timeout: the body was not waited for
        assert answer.split(b"\r\n", 1)[0] == status_line
        assert b"Connection: close" in answer
    finally:
        sock.close()


def test_clients_without_a_certificate_stalling_their_body_hold_no_thread(setup):
    server, clients = setup
    allowed = clients.write("allowed", authority.new_client_cert(clients.client_ca, ALLOWED))
    stalled = []
    try:
        for _ in range(32):  # eight times the threads
            sock = raw_connection(server, None)
            sock.sendall(STALLING_HEAD)
            stalled.append(sock)
        for _ in range(3):
            started = time.monotonic()
            status, answer = post_validate(server, allowed)
            assert status == 200, answer
            assert time.monotonic() - started < 1.0
        started = time.monotonic()
        assert server.health_request("/healthz")[0] == 200
        assert time.monotonic() - started < 1.0
    finally:
        for sock in stalled:
            sock.close()
