"""Certificate rotation end to end: the real server (gunicorn, gthread workers, TLS) keeps answering
AdmissionReviews while its Secret volume is renewed, and serves the new certificate within seconds."""
from __future__ import annotations

import http.client
import json
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography import x509

from certs import authority
from tests.certs.secret_volume import SecretVolume
from tests.conftest import ROOT

REVIEW = (ROOT / "examples" / "review-pi.json").read_bytes()
REVIEW_UID = json.loads(REVIEW)["request"]["uid"]
ROTATION_DEADLINE = 3.0  # seconds until every new connection gets the renewed certificate (checks: 1 s)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Server:
    port: int
    process: subprocess.Popen
    log: Path
    health_port: int

    def output(self) -> str:
        return self.log.read_text()


@pytest.fixture
def ca() -> authority.Issued:
    return authority.new_ca("rotation-test-ca", days=3)


def serving(ca: authority.Issued, days: int = 1) -> authority.Issued:
    return authority.new_serving_cert(ca, ["localhost"], ["127.0.0.1"], days=days)


@pytest.fixture
def server(tmp_path: Path, ca: authority.Issued) -> Iterator[tuple[Server, SecretVolume, authority.Issued]]:
    volume = SecretVolume(tmp_path / "tls")
    first = serving(ca)
    volume.publish(ca, first)
    port, health_port = free_port(), free_port()
    log = tmp_path / "server.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "webhook", "serve", "--host", "127.0.0.1", "--port", str(port),
             "--health-port", str(health_port),
             "--cert-file", str(volume.cert_file), "--key-file", str(volume.key_file),
             "--workers", "2", "--threads", "4"],
            cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT)
    running = Server(port, process, log, health_port)
    try:
        wait_until_serving(running, ca)
        yield running, volume, first
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def client_context(ca: authority.Issued) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=ca.cert_pem().decode())


def wait_until_serving(server: Server, ca: authority.Issued, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            pytest.fail(f"server exited with {server.process.returncode}:\n{server.output()}")
        try:
            connection = http.client.HTTPSConnection("127.0.0.1", server.port, context=client_context(ca), timeout=2)
            connection.request("GET", "/healthz")
            if connection.getresponse().status == 200:
                connection.close()
                return
        except OSError:
            time.sleep(0.1)
    pytest.fail(f"server did not answer within {timeout}s:\n{server.output()}")


@dataclass
class Outcomes:
    """What each request saw: (monotonic start, serial of the served certificate)."""
    served: list[tuple[float, int]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    kept_alive: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, started: float, serial: int) -> None:
        with self.lock:
            self.served.append((started, serial))

    def fail(self, what: str) -> None:
        with self.lock:
            self.failures.append(what)


def review(connection: http.client.HTTPSConnection) -> int:
    """POST one AdmissionReview; return the serial of the certificate the connection was served."""
    connection.request("POST", "/validate", body=REVIEW, headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    body = response.read()
    if response.status != 200:
        raise AssertionError(f"HTTP {response.status}: {body[:200]!r}")
    answer = json.loads(body)
    if answer["response"]["uid"] != REVIEW_UID:
        raise AssertionError(f"response for another request: {answer}")
    assert connection.sock is not None
    der = connection.sock.getpeercert(binary_form=True)
    return x509.load_der_x509_certificate(der).serial_number


def new_connection_loop(port: int, ca: authority.Issued, host: str, stop: threading.Event, outcomes: Outcomes) -> None:
    """One connection per review: every request goes through a TLS handshake. 127.0.0.1 sends no SNI."""
    context = client_context(ca)
    while not stop.is_set():
        started = time.monotonic()
        connection = http.client.HTTPSConnection(host, port, context=context, timeout=5)
        try:
            outcomes.record(started, review(connection))
        except Exception as exc:  # noqa: BLE001 - every failure is collected and asserted on
            outcomes.fail(f"new connection via {host}: {type(exc).__name__}: {exc}")
        finally:
            connection.close()


def keep_alive_loop(port: int, ca: authority.Issued, stop: threading.Event, outcomes: Outcomes) -> None:
    """One connection for all reviews, as the API server keeps its connections: opened before the renewal."""
    connection = http.client.HTTPSConnection("localhost", port, context=client_context(ca), timeout=5)
    try:
        while not stop.is_set():
            try:
                review(connection)
            except Exception as exc:  # noqa: BLE001
                outcomes.fail(f"kept-alive connection: {type(exc).__name__}: {exc}")
                return
            with outcomes.lock:
                outcomes.kept_alive += 1
            time.sleep(0.01)
    finally:
        connection.close()


def test_reviews_keep_succeeding_while_the_certificate_is_renewed(server, ca: authority.Issued) -> None:
    running, volume, first = server
    renewed = serving(ca, days=2)
    outcomes = Outcomes()
    stop = threading.Event()
    clients = [threading.Thread(target=new_connection_loop, args=(running.port, ca, host, stop, outcomes))
               for host in ("localhost", "127.0.0.1", "localhost")]
    clients.append(threading.Thread(target=keep_alive_loop, args=(running.port, ca, stop, outcomes)))
    for client in clients:
        client.start()
    try:
        time.sleep(1.0)
        renewed_at = time.monotonic()
        volume.publish(ca, renewed)
        time.sleep(ROTATION_DEADLINE + 1.0)
    finally:
        stop.set()
        for client in clients:
            client.join(timeout=10)

    assert outcomes.failures == []
    before = [serial for started, serial in outcomes.served if started < renewed_at]
    assert before and set(before) <= {first.certificate.serial_number, renewed.certificate.serial_number}
    assert first.certificate.serial_number in before
    late = [serial for started, serial in outcomes.served if started >= renewed_at + ROTATION_DEADLINE]
    assert late, "no request was made after the deadline"
    assert set(late) == {renewed.certificate.serial_number}
    first_renewed = min(started for started, serial in outcomes.served if serial == renewed.certificate.serial_number)
    assert first_renewed - renewed_at < ROTATION_DEADLINE
    assert outcomes.kept_alive > 10

    log = running.output()
    assert f"[INFO] reloaded serving certificate: {volume.cert_file}" in log
    assert f"serial {renewed.certificate.serial_number:x}" in log.split("reloaded serving certificate")[-1]
    assert certificate_expiry_metric(running, ca) == renewed.certificate.not_valid_after_utc.timestamp()


def certificate_expiry_metric(server: Server, ca: authority.Issued) -> float:
    connection = http.client.HTTPConnection("127.0.0.1", server.health_port, timeout=5)
    try:
        connection.request("GET", "/metrics")
        body = connection.getresponse().read().decode()
    finally:
        connection.close()
    (value,) = [float(line.split()[-1]) for line in body.splitlines()
                if line.startswith("mpijob_webhook_serving_certificate_expiration_timestamp_seconds")]
    return value


def test_start_up_log_names_the_certificate_and_its_expiry(server) -> None:
    running, volume, first = server
    expiry = first.certificate.not_valid_after_utc.isoformat()
    log = running.output()
    line = next(line for line in log.splitlines() if "serving certificate:" in line)
    assert f"serial {first.certificate.serial_number:x}" in line
    assert f"expires {expiry}" in line
    assert "names [localhost, 127.0.0.1]" in line
    # A certificate that expires within 15 days is logged as a warning (this one lasts 1 day).
    assert "[WARNING] serving certificate:" in line
    assert line.endswith("it expires in less than 15 days, renew it")


def test_a_key_that_is_not_the_certificates_stops_the_start(tmp_path: Path, ca: authority.Issued) -> None:
    first, other = serving(ca), serving(ca)
    volume = SecretVolume(tmp_path / "tls")
    volume.publish_files({"tls.crt": first.cert_pem(), "tls.key": other.key_pem()})
    done = subprocess.run(
        [sys.executable, "-m", "webhook", "serve", "--host", "127.0.0.1", "--port", str(free_port()),
         "--health-port", str(free_port()), "--cert-file", str(volume.cert_file), "--key-file", str(volume.key_file)],
        cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert f"cannot serve certificate {volume.cert_file} with key {volume.key_file}" in done.stderr
    assert "key values mismatch" in done.stderr.lower()
