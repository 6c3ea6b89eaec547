"""ReloadingServerContext on its own: which certificate a TLS handshake gets after the files change."""
from __future__ import annotations

import logging
import os
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cryptography import x509

from certs import authority
from certs.reloading import ReloadingServerContext
from tests.certs.secret_volume import SecretVolume

HOSTS = {"sni": "localhost", "no-sni": None}


@pytest.fixture(scope="module")
def ca() -> authority.Issued:
    return authority.new_ca("reload-test-ca", days=2)


def serving(ca: authority.Issued) -> authority.Issued:
    return authority.new_serving_cert(ca, ["localhost"], ["127.0.0.1"], days=1)


@pytest.fixture
def volume(tmp_path: Path) -> SecretVolume:
    return SecretVolume(tmp_path / "tls")


class TLSServer:
    """Accepts connections and completes the handshake with the context ``pick()`` gives it."""

    def __init__(self, pick: Callable[[], ssl.SSLContext]) -> None:
        self.pick = pick
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.errors: list[Exception] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                raw, _ = self.listener.accept()
            except OSError:
                return
            try:
                with self.pick().wrap_socket(raw, server_side=True) as tls:
                    tls.sendall(b"ok")
            except (OSError, ssl.SSLError) as exc:
                self.errors.append(exc)

    def close(self) -> None:
        self.listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self.listener.close()
        self.thread.join(timeout=5)


@pytest.fixture
def served() -> Iterator[Callable[[Callable[[], ssl.SSLContext]], TLSServer]]:
    servers: list[TLSServer] = []

    def start(pick: Callable[[], ssl.SSLContext]) -> TLSServer:
        servers.append(TLSServer(pick))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def peer_serial(port: int, ca: authority.Issued, server_hostname: str | None) -> int:
    context = ssl.create_default_context(cadata=ca.cert_pem().decode())
    if server_hostname is None:
        context.check_hostname = False  # the chain is still verified
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=server_hostname) as tls:
            assert tls.recv(2) == b"ok"
            der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


@pytest.mark.parametrize("host", HOSTS.values(), ids=HOSTS.keys())
def test_a_server_that_keeps_its_first_context_serves_the_renewed_certificate(
        volume: SecretVolume, ca: authority.Issued, served, host: str | None) -> None:
    first, renewed = serving(ca), serving(ca)
    volume.publish(ca, first)
    reloading = ReloadingServerContext(volume.cert_file, volume.key_file, check_interval=0)
    only_context = reloading.context()
    server = served(lambda: only_context)  # never asks again: only the SNI callback can swap

    assert peer_serial(server.port, ca, host) == first.certificate.serial_number
    volume.publish(ca, renewed)
    assert peer_serial(server.port, ca, host) == renewed.certificate.serial_number
    assert server.errors == []


@pytest.mark.parametrize("host", HOSTS.values(), ids=HOSTS.keys())
def test_a_server_that_asks_per_connection_serves_the_renewed_certificate(
        volume: SecretVolume, ca: authority.Issued, served, host: str | None) -> None:
    first, renewed = serving(ca), serving(ca)
    volume.publish(ca, first)
    reloading = ReloadingServerContext(volume.cert_file, volume.key_file, check_interval=0)
    server = served(reloading.context)

    assert peer_serial(server.port, ca, host) == first.certificate.serial_number
    volume.publish(ca, renewed)
    assert peer_serial(server.port, ca, host) == renewed.certificate.serial_number
    assert server.errors == []


def test_unchanged_files_keep_the_same_context(volume: SecretVolume, ca: authority.Issued) -> None:
    volume.publish(ca, serving(ca))
    reloading = ReloadingServerContext(volume.cert_file, volume.key_file, check_interval=0)
    assert reloading.context() is reloading.context()


def test_a_key_that_does_not_match_yet_keeps_the_previous_certificate(
        volume: SecretVolume, ca: authority.Issued, caplog: pytest.LogCaptureFixture) -> None:
    first, renewed = serving(ca), serving(ca)
    volume.publish(ca, first)
    reloading = ReloadingServerContext(volume.cert_file, volume.key_file, check_interval=0)
    before = reloading.context()

    # A writer that replaces tls.crt first and tls.key a moment later.
    volume.publish_files({"tls.crt": renewed.cert_pem(), "tls.key": first.key_pem()})
    with caplog.at_level(logging.WARNING, logger="certs.reloading"):
        assert reloading.context() is before
        assert reloading.context() is before  # the same broken pair is not retried (or logged) again
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "still serving the previous certificate" in warnings[0]
    assert str(volume.cert_file) in warnings[0]

    volume.publish(ca, renewed)
    with caplog.at_level(logging.INFO, logger="certs.reloading"):
        after = reloading.context()
    assert after is not before
    assert f"serial {renewed.certificate.serial_number:x}" in caplog.records[-1].getMessage()


def test_files_missing_for_a_moment_keep_the_previous_certificate(volume: SecretVolume, ca: authority.Issued) -> None:
    volume.publish(ca, serving(ca))
    reloading = ReloadingServerContext(volume.cert_file, volume.key_file, check_interval=0)
    before = reloading.context()
    os.unlink(volume.directory / "..data")
    assert reloading.context() is before


def test_a_half_written_certificate_keeps_the_previous_one(volume: SecretVolume, ca: authority.Issued) -> None:
    first, renewed = serving(ca), serving(ca)
    volume.publish(ca, first)
    reloading = ReloadingServerContext(volume.cert_file, volume.key_file, check_interval=0)
    before = reloading.context()
    volume.publish_files({"tls.crt": renewed.cert_pem()[:100], "tls.key": renewed.key_pem()})
    assert reloading.context() is before


def test_files_are_looked_at_once_per_interval(volume: SecretVolume, ca: authority.Issued) -> None:
    now = [100.0]
    volume.publish(ca, serving(ca))
    reloading = ReloadingServerContext(volume.cert_file, volume.key_file, check_interval=1.0, clock=lambda: now[0])
    before = reloading.context()
    volume.publish(ca, serving(ca))
    now[0] += 0.5
    assert reloading.context() is before
    now[0] += 0.6
    assert reloading.context() is not before


def test_the_first_load_fails_loudly(tmp_path: Path, ca: authority.Issued) -> None:
    first, other = serving(ca), serving(ca)
    (tmp_path / "tls.crt").write_bytes(first.cert_pem())
    (tmp_path / "tls.key").write_bytes(other.key_pem())
    with pytest.raises(ssl.SSLError, match="KEY_VALUES_MISMATCH|key values mismatch"):
        ReloadingServerContext(tmp_path / "tls.crt", tmp_path / "tls.key")


def test_a_reload_is_reported_and_a_failing_report_does_not_undo_it(volume: SecretVolume, ca: authority.Issued) -> None:
    volume.publish(ca, serving(ca))
    reported: list[Path] = []

    def report(path: Path) -> None:
        reported.append(path)
        raise RuntimeError("metrics backend unavailable")

    reloading = ReloadingServerContext(volume.cert_file, volume.key_file, check_interval=0, on_reload=report)
    before = reloading.context()
    assert reported == []  # the first load is the server's start, reported by it
    volume.publish(ca, serving(ca))
    after = reloading.context()
    assert after is not before
    assert reported == [volume.cert_file]
    assert reloading.context() is after
