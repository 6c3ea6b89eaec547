"""What the serving certificate on disk says: when it expires, whom it names. For logs and metrics."""
from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

from cryptography import x509

# Below this, start-up and reloads log a warning (the alert in the monitoring overlay uses the same).
EXPIRY_WARNING = dt.timedelta(days=15)


def load_leaf_certificate(path: str | os.PathLike[str]) -> x509.Certificate:
    """The first certificate of a PEM file: the serving certificate of a tls.crt chain."""
    certificates = x509.load_pem_x509_certificates(Path(path).read_bytes())
    return certificates[0]


def serving_cert_expiry(path: str | os.PathLike[str]) -> dt.datetime:
    """When the serving certificate in ``path`` stops being valid (timezone-aware, UTC)."""
    return load_leaf_certificate(path).not_valid_after_utc


def describe_serving_cert(path: str | os.PathLike[str], now: dt.datetime | None = None) -> str:
    certificate = load_leaf_certificate(path)
    now = now or dt.datetime.now(dt.timezone.utc)
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        sans = ", ".join(str(n.value) for n in names)
    except x509.ExtensionNotFound:
        sans = "none"
    expiry = certificate.not_valid_after_utc
    left = expiry - now
    return (f"{path}: subject {certificate.subject.rfc4514_string()}, names [{sans}], "
            f"serial {certificate.serial_number:x}, expires {expiry.isoformat()} "
            f"({_days(left)})")


def expires_soon(path: str | os.PathLike[str], now: dt.datetime | None = None) -> bool:
    now = now or dt.datetime.now(dt.timezone.utc)
    return serving_cert_expiry(path) - now < EXPIRY_WARNING


def _days(left: dt.timedelta) -> str:
    if left.total_seconds() <= 0:
        ago = -left
        return f"EXPIRED {ago.days} days ago" if ago.days >= 1 else "EXPIRED"
    return f"in {left.days} days" if left.days >= 1 else f"in {int(left.total_seconds() // 3600)} hours"
