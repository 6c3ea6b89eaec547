"""The certificates as a newcomer gets them: the installed ``mpijob-webhook certs`` console script
with its defaults, ``python3 -m certs``, and the throwaway pair of ``serve --dev``. (Every key type
and validity option is in test_key_types.py.)"""
from __future__ import annotations

import datetime as dt
import ipaddress
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID
from cryptography.x509.verification import PolicyBuilder, Store

from certs import authority
from tests.conftest import ROOT, console_script

SERVICE, NAMESPACE = "mpi-admission", "ml-platform"


def read(out: Path) -> tuple[x509.Certificate, x509.Certificate, bytes]:
    serving = x509.load_pem_x509_certificate((out / "tls.crt").read_bytes())
    ca = x509.load_pem_x509_certificate((out / "ca.crt").read_bytes())
    key = serialization.load_pem_private_key((out / "tls.key").read_bytes(), password=None)
    return serving, ca, public_der(key.public_key())


def public_der(public_key) -> bytes:
    return public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def days_left(cert: x509.Certificate) -> float:
    return (cert.not_valid_after_utc - dt.datetime.now(dt.timezone.utc)) / dt.timedelta(days=1)


def verifies(serving: x509.Certificate, ca: x509.Certificate, name: x509.GeneralName) -> bool:
    verifier = PolicyBuilder().store(Store([ca])).build_server_verifier(name)
    try:
        return verifier.verify(serving, [])[-1] == ca
    except Exception:  # noqa: BLE001 - any verification failure
        return False


@pytest.mark.parametrize("command", [[str(console_script())], [sys.executable, "-m", "certs"]],
                         ids=["console-script", "python-m-certs"])
def test_certs_command_makes_a_ca_and_a_serving_certificate_for_the_service(command: list[str], tmp_path: Path):
    if not Path(command[0]).is_file():
        pytest.fail(f"the mpijob-webhook console script is not installed at {command[0]}: pip install -e .")
    out = tmp_path / "tls"
    args = [] if command[-1] == "certs" else ["certs"]
    done = subprocess.run([*command, *args, "--service", SERVICE, "--namespace", NAMESPACE, "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"wrote {out / 'tls.crt'}, {out / 'tls.key'} and {out / 'ca.crt'}"
    serving, ca, key = read(out)
    names = [SERVICE, f"{SERVICE}.{NAMESPACE}", f"{SERVICE}.{NAMESPACE}.svc", f"{SERVICE}.{NAMESPACE}.svc.cluster.local"]
    assert serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName) == names
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert serving.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    assert list(serving.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH]
    assert key == public_der(serving.public_key())
    assert all(verifies(serving, ca, x509.DNSName(name)) for name in names)
    assert not verifies(serving, ca, x509.DNSName(f"{SERVICE}.other.svc"))
    # defaults: the serving certificate for a year, the CA for ten
    assert 364 < days_left(serving) <= 365 and 3649 < days_left(ca) <= 3650


def test_running_it_again_replaces_the_files(tmp_path: Path):
    from webhook.cli import main

    assert main(["certs", "--service", SERVICE, "--namespace", NAMESPACE, "--out", str(tmp_path)]) == 0
    first = read(tmp_path)
    assert main(["certs", "--service", SERVICE, "--namespace", NAMESPACE, "--out", str(tmp_path)]) == 0
    second = read(tmp_path)
    assert first[0].serial_number != second[0].serial_number and second[2] == public_der(second[0].public_key())
    assert verifies(second[0], second[1], x509.DNSName(SERVICE))


def test_dev_bundle_serves_localhost_by_name_and_address(tmp_path: Path):
    bundle = authority.dev_bundle(tmp_path)
    serving, ca, key = read(bundle.directory)
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert verifies(serving, ca, x509.DNSName("localhost"))
    assert verifies(serving, ca, x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    assert key == public_der(serving.public_key())
    assert 29 < days_left(serving) <= 30  # throwaway
    assert (bundle.ca_file, bundle.cert_file, bundle.key_file) == (
        tmp_path / "ca.crt", tmp_path / "tls.crt", tmp_path / "tls.key")
