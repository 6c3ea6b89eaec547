"""A private CA and serving certificates for the webhook, made with ``cryptography``.

The API server verifies the webhook against the ``caBundle`` of its configuration, so the
serving certificate must name the Service's DNS names and chain to that CA.
"""
from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KEY_TYPES = ("ecdsa-p256", "rsa-3072", "rsa-4096")
DEFAULT_KEY_TYPE = "ecdsa-p256"
DEFAULT_CA_DAYS = 3650
DEFAULT_SERVING_DAYS = 365

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


@dataclass(frozen=True)
class Issued:
    certificate: x509.Certificate
    key: PrivateKey

    def cert_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )


def new_key(key_type: str = DEFAULT_KEY_TYPE) -> PrivateKey:
    if key_type == "ecdsa-p256":
        return ec.generate_private_key(ec.SECP256R1())
    if key_type in ("rsa-3072", "rsa-4096"):
        return rsa.generate_private_key(public_exponent=65537, key_size=int(key_type.split("-")[1]))
    raise ValueError(f"unknown key type {key_type!r}; choose one of {', '.join(KEY_TYPES)}")


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def new_ca(common_name: str = "mpijob-webhook-ca", *, days: int = DEFAULT_CA_DAYS,
           key_type: str = DEFAULT_KEY_TYPE) -> Issued:
    key = new_key(key_type)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issued(cert, key)


def new_serving_cert(ca: Issued, dns_names: list[str], ip_addresses: list[str] = (), *,  # type: ignore[assignment]
                     days: int = DEFAULT_SERVING_DAYS, key_type: str = DEFAULT_KEY_TYPE) -> Issued:
    if not dns_names and not ip_addresses:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ip_addresses]
    common_name = dns_names[0] if dns_names else ip_addresses[0]
    return _leaf_cert(ca, common_name, sans, ExtendedKeyUsageOID.SERVER_AUTH, days, key_type)


def new_client_cert(ca: Issued, common_name: str, dns_names: list[str] = (), *,  # type: ignore[assignment]
                    days: int = DEFAULT_SERVING_DAYS, key_type: str = DEFAULT_KEY_TYPE,
                    organizations: tuple[str, ...] = ()) -> Issued:
    """A TLS client certificate (extendedKeyUsage clientAuth), e.g. the one the API server presents
    to the webhook when ``serve --client-ca-file`` is on. ``organizations`` are the groups a
    Kubernetes API server reads from it (``system:masters``)."""
    return _leaf_cert(ca, common_name, [x509.DNSName(n) for n in dns_names], ExtendedKeyUsageOID.CLIENT_AUTH,
                      days, key_type, organizations)


def _leaf_cert(ca: Issued, common_name: str, sans: list[x509.GeneralName], usage: x509.ObjectIdentifier,
               days: int, key_type: str, organizations: tuple[str, ...] = ()) -> Issued:
    """A certificate for one end of a TLS connection, signed by ``ca``, never outliving it."""
    key = new_key(key_type)
    now = _now()
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([*(x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations),
                                 x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64])]))
        .issuer_name(ca.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(min(now + dt.timedelta(days=days), ca.certificate.not_valid_after_utc))
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    builder = (
        builder
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=isinstance(key, rsa.RSAPrivateKey),
                                     key_cert_sign=False, crl_sign=False, content_commitment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
    )
    return Issued(builder.sign(ca.key, hashes.SHA256()), key)


def load_ca(cert_file: Path, key_file: Path) -> Issued:
    """An existing CA, to sign a renewed serving certificate that the same caBundle still trusts."""
    certificate = x509.load_pem_x509_certificate(Path(cert_file).read_bytes())
    key = serialization.load_pem_private_key(Path(key_file).read_bytes(), password=None)
    if not isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey)):
        raise ValueError(f"{key_file}: unsupported key type {type(key).__name__}; use an ECDSA or RSA key")
    if _spki(key.public_key()) != _spki(certificate.public_key()):
        raise ValueError(f"{key_file} is not the private key of {cert_file}")
    try:
        is_ca = certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    if not is_ca:
        raise ValueError(f"{cert_file} is not a CA certificate (basicConstraints CA:TRUE missing)")
    return Issued(certificate, key)


def _spki(public_key: object) -> bytes:
    return public_key.public_bytes(serialization.Encoding.DER,  # type: ignore[attr-defined]
                                   serialization.PublicFormat.SubjectPublicKeyInfo)


def write_private_key(path: Path, issued: Issued) -> None:
    """A private key file readable by its owner only, created that way (never briefly world-readable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_bytes(issued.key_pem())


def service_dns_names(service: str, namespace: str) -> list[str]:
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


@dataclass(frozen=True)
class Bundle:
    directory: Path

    @property
    def cert_file(self) -> Path:
        return self.directory / "tls.crt"

    @property
    def key_file(self) -> Path:
        return self.directory / "tls.key"

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.crt"


def write_bundle(directory: Path, ca: Issued, serving: Issued) -> Bundle:
    """tls.crt, tls.key and ca.crt, as a kubernetes.io/tls Secret mounts them."""
    directory.mkdir(parents=True, exist_ok=True)
    bundle = Bundle(directory)
    bundle.ca_file.write_bytes(ca.cert_pem())
    bundle.cert_file.write_bytes(serving.cert_pem())
    write_private_key(bundle.key_file, serving)
    return bundle


def dev_bundle(directory: Path) -> Bundle:
    """A throwaway CA and a localhost serving certificate, for ``serve --dev`` and tests."""
    ca = new_ca("mpijob-webhook-dev-ca", days=30)
    serving = new_serving_cert(ca, ["localhost"], ["127.0.0.1"], days=30)
    return write_bundle(directory, ca, serving)
