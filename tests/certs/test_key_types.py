"""``mpijob-webhook certs`` for each key type and validity: what the API server will check (SANs,
chain, serverAuth, validity) and what an admin renewing later needs (keep the CA)."""
from __future__ import annotations

import datetime as dt
import functools
import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID
from cryptography.x509.verification import PolicyBuilder, Store

from webhook.cli import main

SERVICE, NAMESPACE = "mpijob-webhook", "mpijob-webhook"
NAMES = ["mpijob-webhook", "mpijob-webhook.mpijob-webhook", "mpijob-webhook.mpijob-webhook.svc",
         "mpijob-webhook.mpijob-webhook.svc.cluster.local"]
KEY_SIZES = {"ecdsa-p256": None, "rsa-3072": 3072, "rsa-4096": 4096}


def make(out: Path, *extra: str) -> int:
    return main(["certs", "--service", SERVICE, "--namespace", NAMESPACE, "--out", str(out), *extra])


@functools.cache  # loading an RSA-4096 key checks it, which is slow: once per directory
def load(out: Path) -> tuple[x509.Certificate, x509.Certificate, object]:
    serving = x509.load_pem_x509_certificate((out / "tls.crt").read_bytes())
    ca = x509.load_pem_x509_certificate((out / "ca.crt").read_bytes())
    key = serialization.load_pem_private_key((out / "tls.key").read_bytes(), password=None)
    return serving, ca, key


def spki(public_key: object) -> bytes:
    return public_key.public_bytes(serialization.Encoding.DER,  # type: ignore[attr-defined]
                                   serialization.PublicFormat.SubjectPublicKeyInfo)


@pytest.fixture(scope="module", params=list(KEY_SIZES), ids=list(KEY_SIZES))
def issued(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    out = tmp_path_factory.mktemp(request.param)
    assert make(out, "--key-type", request.param, "--days", "30", "--ca-days", "400") == 0
    return request.param, out


def test_keys_are_of_the_asked_type(issued: tuple[str, Path]) -> None:
    key_type, out = issued
    serving, ca, key = load(out)
    for public_key in (serving.public_key(), ca.public_key(), key.public_key()):  # type: ignore[attr-defined]
        if KEY_SIZES[key_type] is None:
            assert isinstance(public_key, ec.EllipticCurvePublicKey)
            assert public_key.curve.name == "secp256r1"
        else:
            assert isinstance(public_key, rsa.RSAPublicKey)
            assert public_key.key_size == KEY_SIZES[key_type]


def test_the_key_belongs_to_the_certificate_and_is_private(issued: tuple[str, Path]) -> None:
    _, out = issued
    serving, _, key = load(out)
    assert spki(key.public_key()) == spki(serving.public_key())  # type: ignore[attr-defined]
    assert stat.S_IMODE((out / "tls.key").stat().st_mode) == 0o600


def test_serving_certificate_names_the_service(issued: tuple[str, Path]) -> None:
    _, out = issued
    serving, _, _ = load(out)
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == NAMES
    assert sans.get_values_for_type(x509.IPAddress) == []


def test_ca_flag_and_usages(issued: tuple[str, Path]) -> None:
    key_type, out = issued
    serving, ca, _ = load(out)
    ca_constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints)
    assert ca_constraints.critical and ca_constraints.value.ca is True
    assert ca.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign is True
    serving_constraints = serving.extensions.get_extension_for_class(x509.BasicConstraints)
    assert serving_constraints.value.ca is False
    assert list(serving.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH]
    usage = serving.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.digital_signature is True and usage.key_cert_sign is False
    assert usage.key_encipherment is (key_type != "ecdsa-p256")  # RSA key exchange needs it; ECDSA must not


def test_chain_verifies_for_every_service_name(issued: tuple[str, Path]) -> None:
    _, out = issued
    serving, ca, _ = load(out)
    for name in NAMES:
        verifier = PolicyBuilder().store(Store([ca])).build_server_verifier(x509.DNSName(name))
        chain = verifier.verify(serving, [])
        assert chain[-1] == ca
    other = PolicyBuilder().store(Store([ca])).build_server_verifier(x509.DNSName("other.mpijob-webhook.svc"))
    with pytest.raises(Exception, match="(?i)subject|name|san"):
        other.verify(serving, [])


def test_validity_is_what_was_asked(issued: tuple[str, Path]) -> None:
    _, out = issued
    serving, ca, _ = load(out)
    now = dt.datetime.now(dt.timezone.utc)
    assert serving.not_valid_before_utc <= now <= serving.not_valid_after_utc
    assert abs(serving.not_valid_after_utc - (now + dt.timedelta(days=30))) < dt.timedelta(minutes=5)
    assert abs(ca.not_valid_after_utc - (now + dt.timedelta(days=400))) < dt.timedelta(minutes=5)
    # Backdated a few minutes, for API servers whose clock is a little behind.
    assert now - serving.not_valid_before_utc < dt.timedelta(minutes=10)


def test_openssl_serves_it_and_a_client_trusting_the_ca_accepts_it(issued: tuple[str, Path]) -> None:
    """What the API server does: connect with the Service's name as SNI, verify against caBundle."""
    _, out = issued
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(out / "tls.crt", out / "tls.key")
    with socket.create_server(("127.0.0.1", 0)) as listener:
        def accept() -> None:
            raw, _ = listener.accept()
            with server_context.wrap_socket(raw, server_side=True) as tls:
                tls.sendall(b"ok")
        thread = threading.Thread(target=accept)
        thread.start()
        client = ssl.create_default_context(cafile=str(out / "ca.crt"))
        with socket.create_connection(listener.getsockname(), timeout=5) as raw:
            with client.wrap_socket(raw, server_hostname=NAMES[2]) as tls:
                assert tls.recv(2) == b"ok"
        thread.join(timeout=5)


def test_serving_certificate_never_outlives_its_ca(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert make(tmp_path, "--days", "100", "--ca-days", "10") == 0
    serving, ca, _ = load(tmp_path)
    assert serving.not_valid_after_utc == ca.not_valid_after_utc
    assert "the serving certificate ends with it" in capsys.readouterr().err


def test_renewal_with_the_kept_ca_is_trusted_by_the_same_ca_bundle(tmp_path: Path) -> None:
    first, renewed = tmp_path / "first", tmp_path / "renewed"
    ca_key = tmp_path / "private" / "ca.key"
    assert make(first, "--ca-key-out", str(ca_key)) == 0
    assert stat.S_IMODE(ca_key.stat().st_mode) == 0o600
    assert make(renewed, "--ca-cert", str(first / "ca.crt"), "--ca-key", str(ca_key), "--key-type", "rsa-3072") == 0

    old_serving, ca, _ = load(first)
    new_serving, same_ca, _ = load(renewed)
    assert same_ca == ca
    assert new_serving.serial_number != old_serving.serial_number
    verifier = PolicyBuilder().store(Store([ca])).build_server_verifier(x509.DNSName(NAMES[2]))
    verifier.verify(new_serving, [])


@pytest.mark.parametrize(("args", "message"), [
    (["--days", "0"], "--days and --ca-days must be positive"),
    (["--ca-days", "-1"], "--days and --ca-days must be positive"),
    (["--ca-cert", "ca.crt"], "--ca-cert and --ca-key go together"),
    (["--key-type", "dsa-1024"], "invalid choice: 'dsa-1024'"),
], ids=["days", "ca-days", "ca-cert-alone", "key-type"])
def test_bad_options_are_refused_with_a_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               args: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as exited:
        make(tmp_path / "out", *args)
    assert exited.value.code != 0
    assert message in f"{exited.value.code}{capsys.readouterr().err}"
    assert not (tmp_path / "out" / "tls.key").exists()


def test_a_ca_key_that_is_not_the_cas_is_refused(tmp_path: Path) -> None:
    assert make(tmp_path / "a", "--ca-key-out", str(tmp_path / "a.key")) == 0
    assert make(tmp_path / "b", "--ca-key-out", str(tmp_path / "b.key")) == 0
    with pytest.raises(SystemExit, match="b.key is not the private key of .*a/ca.crt"):
        make(tmp_path / "c", "--ca-cert", str(tmp_path / "a" / "ca.crt"), "--ca-key", str(tmp_path / "b.key"))


def test_a_serving_certificate_is_not_accepted_as_a_ca(tmp_path: Path) -> None:
    assert make(tmp_path / "a") == 0
    with pytest.raises(SystemExit, match="is not a CA certificate"):
        make(tmp_path / "c", "--ca-cert", str(tmp_path / "a" / "tls.crt"), "--ca-key", str(tmp_path / "a" / "tls.key"))
