"""End to end: ``python3 -m webhook serve --dev`` in a subprocess (gunicorn, real TLS), its printed
CA the only trust anchor, reviews posted over HTTPS the way the API server posts them."""
from __future__ import annotations

import copy
import http.client
import json
import os
import re
import select
import shlex
import signal
import socket
import ssl
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from testing.builders import admission_review, mpijob
from tests.conftest import ROOT, captured_reviews
from testing.tls_server import TlsServer, serving
from webhook import create_app
from webhook.commands.serve import SAMPLE_REVIEW, sample_curl
from webhook.review import MAX_BODY_BYTES, TOO_LARGE

RECORDED = captured_reviews()
EXAMPLE = json.loads((ROOT / "examples" / "review-pi.json").read_text())
API_SERVER_HEADERS = {"Content-Type": "application/json", "Accept": "application/json",
                      "User-Agent": "kube-apiserver-admission"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    with serving(tmp_path_factory.mktemp("end-to-end"), "--dev", "--workers", "2", "--threads", "4") as server:
        yield server


def post(server: TlsServer, path: str, review: dict) -> dict:
    status, body = server.request("POST", f"{path}?timeout=10s", json.dumps(review).encode(), API_SERVER_HEADERS)
    assert status == 200, body
    return json.loads(body)


def in_process(path: str, review: dict) -> dict:
    return create_app().test_client().post(path, json=review).get_json()


def test_health_and_readiness(served: TlsServer):
    assert served.request("GET", "/healthz") == (200, b'{"status":"ok"}')
    status, body = served.request("GET", "/readyz")
    ready = json.loads(body)
    assert (status, ready["status"]) == (200, "ready")
    assert ready["checks"] and all(check["ready"] is True for check in ready["checks"].values())


def test_the_printed_ca_is_what_verifies_the_server(served: TlsServer):
    printed = re.search(r"^development CA: (.+)$", served.output(), re.MULTILINE)
    assert printed and Path(printed.group(1)) == served.ca_file and served.ca_file.is_file()
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as raw:
        with pytest.raises(ssl.SSLCertVerificationError):
            ssl.create_default_context().wrap_socket(raw, server_hostname="localhost")
    for name in ("localhost", "127.0.0.1"):  # both are in the certificate
        with socket.create_connection(("127.0.0.1", served.port), timeout=10) as raw:
            with served.ssl_context().wrap_socket(raw, server_hostname=name) as tls:
                assert tls.version() in ("TLSv1.2", "TLSv1.3")
                assert tls.getpeercert()["subject"] == ((("commonName", "localhost"),),)


def test_the_printed_curl_line_works_from_any_directory(served: TlsServer):
    """The line to paste names its files by absolute path; sent as curl would send it, the sample
    review is admitted."""
    output = served.output().splitlines()
    curl = output[output.index("send it the sample review (from any directory):") + 1]
    assert curl == sample_curl(served.ca_file.resolve(), SAMPLE_REVIEW, served.port)
    words = shlex.split(curl)
    ca = Path(words[words.index("--cacert") + 1])
    sample = Path(words[words.index("--data") + 1].removeprefix("@"))
    headers = dict([words[words.index("-H") + 1].split(": ", 1)])
    url = urllib.parse.urlsplit(words[-1])
    assert ca.is_absolute() and sample.is_absolute() and sample == ROOT.resolve() / "examples" / "review-pi.json"
    assert (url.scheme, url.hostname, url.port, url.path) == ("https", "localhost", served.port, "/validate")
    connection = http.client.HTTPSConnection(url.hostname, url.port, timeout=10,
                                             context=ssl.create_default_context(cafile=str(ca)))
    try:
        connection.request("POST", url.path, body=sample.read_bytes(), headers=headers)
        response = connection.getresponse()
        answer = json.loads(response.read())
    finally:
        connection.close()
    assert (response.status, answer["response"]["uid"], answer["response"]["allowed"]) == (
        200, EXAMPLE["request"]["uid"], True)


def test_the_example_create_is_allowed_exactly_as_in_process(served: TlsServer):
    answer = post(served, "/validate", EXAMPLE)
    assert answer == in_process("/validate", EXAMPLE)
    response = answer["response"]
    assert (answer["apiVersion"], answer["kind"], response["uid"], response["allowed"]) == (
        "admission.k8s.io/v1", "AdmissionReview", EXAMPLE["request"]["uid"], True)
    assert "status" not in response
    # serve --dev has no cluster: the cluster checks are skipped, and the answer says so
    assert [w[:32] for w in response["warnings"]] == ["[cluster-state] cluster checks ("]


def test_a_label_update_is_allowed_with_nothing_to_say(served: TlsServer):
    review = RECORDED["03b-label-v2beta1-validating.request.json"]
    assert post(served, "/validate", review) == {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "response": {"uid": review["request"]["uid"], "allowed": True}}


def test_an_invalid_job_is_denied_with_the_field_and_the_numbers(served: TlsServer):
    review = admission_review(mpijob(slots=9))
    response = post(served, "/validate", review)["response"]
    message = ("slotsPerWorker must be between 1 and 8 (asked 9); set spec.slotsPerWorker to 8, "
               "and use more workers for more ranks")
    assert (response["uid"], response["allowed"]) == (review["request"]["uid"], False)
    assert response["status"] == {
        "status": "Failure", "code": 422, "reason": "Invalid",
        "message": f'MPIJob.kubeflow.org "pi" is invalid: [slots-per-worker] spec.slotsPerWorker: Invalid value: 9: {message}',
        "details": {"name": "pi", "group": "kubeflow.org", "kind": "MPIJob", "causes": [
            {"reason": "FieldValueInvalid", "message": f"[slots-per-worker] Invalid value: 9: {message}",
             "field": "spec.slotsPerWorker"}]},
    }
    assert response["auditAnnotations"]["denied-by"] == "slots-per-worker"


def test_v1beta1_reviews_are_answered_in_v1beta1(served: TlsServer):
    review = RECORDED["13-create-v1beta1-review-validating-v1beta1.request.json"]
    for path in ("/validate", "/mutate"):
        answer = post(served, path, review)
        assert (answer["apiVersion"], answer["response"]["uid"], answer["response"]["allowed"]) == (
            "admission.k8s.io/v1beta1", review["request"]["uid"], True)


def test_one_kept_alive_connection_serves_many_reviews(served: TlsServer):
    import http.client

    connection = http.client.HTTPSConnection("localhost", served.port, context=served.ssl_context(), timeout=10)
    try:
        for name in ("02-create-mutating.request.json", "02-create-validating.request.json"):
            for path in ("/mutate", "/validate"):
                connection.request("POST", path, json.dumps(RECORDED[name]), API_SERVER_HEADERS)
                response = connection.getresponse()
                assert response.status == 200
                assert json.loads(response.read())["response"]["uid"] == RECORDED[name]["request"]["uid"]
    finally:
        connection.close()


def status_of(body: bytes) -> tuple[int, str]:
    answer = json.loads(body)
    return answer["code"], answer["message"]


def test_bad_bodies_get_a_status_over_the_wire(served: TlsServer):
    assert status_of(served.request("POST", "/validate", b'{"apiVersion":', API_SERVER_HEADERS)[1]) == (
        400, "request body is truncated: the JSON document ends at line 1 column 15 before it is complete")
    assert status_of(served.request("POST", "/mutate", b"{}", {"Content-Type": "text/plain"})[1]) == (
        415, "Content-Type must be application/json, got 'text/plain'")


def raw_tls(server: TlsServer) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    return server.ssl_context().wrap_socket(raw, server_hostname="localhost")


def read_response(sock: ssl.SSLSocket, deadline: float) -> bytes:
    received = b""
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except (ConnectionError, ssl.SSLError):
            break
        if not chunk:
            break
        received += chunk
        if b"\r\n\r\n" in received and received.rstrip().endswith(b"}"):
            break
    return received


def test_declared_oversized_body_is_refused_before_it_is_sent(served: TlsServer):
    with raw_tls(served) as sock:
        sock.sendall(b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {MAX_BODY_BYTES + 1}\r\n\r\n".encode())
        response = read_response(sock, time.monotonic() + 10)
    assert response.startswith(b"HTTP/1.1 413 ")
    assert status_of(response.partition(b"\r\n\r\n")[2]) == (413, TOO_LARGE)


def test_endless_chunked_body_is_cut_at_7_mib(served: TlsServer):
    chunk = b" " * 65536
    framed = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    sent = 0
    with raw_tls(served) as sock:
        sock.sendall(b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        started = time.monotonic()
        sock.setblocking(False)
        pending = memoryview(framed)
        answered = b""
        while time.monotonic() - started < 20 and not answered:
            readable, writable, _ = select.select([sock], [sock], [], 1)
            if readable:  # TLS session tickets, or the answer while the body is still being sent
                try:
                    answered = sock.recv(65536)
                except ssl.SSLWantReadError:
                    pass
                continue
            if writable:
                try:
                    written = sock.send(pending)
                except (ssl.SSLWantWriteError, BlockingIOError):
                    continue
                sent += written
                pending = pending[written:] or memoryview(framed)
        sock.setblocking(True)
        response = answered + read_response(sock, time.monotonic() + 10)
    assert response.startswith(b"HTTP/1.1 413 ")
    assert status_of(response.partition(b"\r\n\r\n")[2]) == (413, TOO_LARGE)
    assert MAX_BODY_BYTES < sent < 3 * MAX_BODY_BYTES  # refused once past the limit, not at the end
    assert time.monotonic() - started < 20


def test_serve_stops_cleanly_with_its_workers(tmp_path: Path):
    with serving(tmp_path, "--dev", "--workers", "2", "--threads", "2") as server:
        review = copy.deepcopy(EXAMPLE)
        assert post(server, "/mutate", review)["response"]["allowed"] is True
        workers = booted_workers(server, 2)
        dev_dir = server.ca_file.parent  # the throwaway CA, serving certificate and private key
        assert dev_dir.name.startswith("mpijob-webhook-dev-") and (dev_dir / "tls.key").is_file()
    assert server.process.returncode == 0  # stopped by SIGTERM
    assert not dev_dir.exists()
    assert "Shutting down: Master" in server.output()
    assert "Traceback" not in server.output()
    assert not any(pid_alive(pid) for pid in workers)


def booted_workers(server: TlsServer, count: int) -> list[int]:
    """The pids of the first ``count`` workers the server booted, once it has booted that many."""
    deadline = time.monotonic() + 15
    while len(pids := re.findall(r"Booting worker with pid: (\d+)", server.output())) < count:
        assert time.monotonic() < deadline, server.output()
        time.sleep(0.1)
    return [int(pid) for pid in pids[:count]]


def test_workers_replaced_by_a_reload_keep_serving(tmp_path: Path):
    """SIGHUP replaces every worker; the ones leaving must not take shared state with them."""
    with serving(tmp_path, "--dev", "--workers", "2", "--threads", "2") as server:
        old = booted_workers(server, 2)
        os.kill(server.process.pid, signal.SIGHUP)
        new = booted_workers(server, 4)[2:]
        deadline = time.monotonic() + 15
        while any(pid_alive(pid) for pid in old):
            assert time.monotonic() < deadline, server.output()
            time.sleep(0.1)
        for _ in range(4):
            assert post(server, "/validate", EXAMPLE)["response"]["allowed"] is True
        assert all(pid_alive(pid) for pid in new), server.output()
        status, metrics_text = server.health_request("/metrics")
        assert status == 200 and metrics_text
    assert server.process.returncode == 0, server.output()
    assert "Traceback" not in server.output()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
