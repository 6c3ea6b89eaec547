"""What the logs and the expiry metric read from the serving certificate on disk."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from certs import authority, serving_cert_expiry
from certs.inspection import describe_serving_cert, expires_soon


@pytest.fixture(scope="module")
def ca() -> authority.Issued:
    return authority.new_ca("inspection-test-ca", days=100)


def test_expiry_is_the_leafs_even_in_a_chain_file(tmp_path: Path, ca: authority.Issued) -> None:
    leaf = authority.new_serving_cert(ca, ["mpijob-webhook.mpijob-webhook.svc"], days=20)
    chain = tmp_path / "tls.crt"
    chain.write_bytes(leaf.cert_pem() + ca.cert_pem())  # cert-manager writes leaf then issuer
    expiry = serving_cert_expiry(chain)
    assert expiry == leaf.certificate.not_valid_after_utc
    assert expiry.tzinfo is not None and expiry.utcoffset() == dt.timedelta(0)


def test_description_names_subject_sans_serial_and_time_left(tmp_path: Path, ca: authority.Issued) -> None:
    leaf = authority.new_serving_cert(ca, ["a.svc", "b.svc"], ["10.0.0.1"], days=20)
    path = tmp_path / "tls.crt"
    path.write_bytes(leaf.cert_pem())
    now = leaf.certificate.not_valid_after_utc - dt.timedelta(days=19, hours=1)
    assert describe_serving_cert(path, now) == (
        f"{path}: subject CN=a.svc, names [a.svc, b.svc, 10.0.0.1], serial {leaf.certificate.serial_number:x}, "
        f"expires {leaf.certificate.not_valid_after_utc.isoformat()} (in 19 days)")
    later = leaf.certificate.not_valid_after_utc
    assert describe_serving_cert(path, later - dt.timedelta(hours=5)).endswith("(in 5 hours)")
    assert describe_serving_cert(path, later + dt.timedelta(days=3, hours=1)).endswith("(EXPIRED 3 days ago)")
    assert describe_serving_cert(path, later + dt.timedelta(hours=1)).endswith("(EXPIRED)")


def test_expires_soon_below_fifteen_days(tmp_path: Path, ca: authority.Issued) -> None:
    leaf = authority.new_serving_cert(ca, ["a.svc"], days=30)
    path = tmp_path / "tls.crt"
    path.write_bytes(leaf.cert_pem())
    expiry = leaf.certificate.not_valid_after_utc
    assert not expires_soon(path, expiry - dt.timedelta(days=15, minutes=1))
    assert expires_soon(path, expiry - dt.timedelta(days=14, hours=23))
