"""Certificate tooling: a CA and serving certificates for the webhook's TLS endpoint, and the
serving side of them at run time (reloading, expiry)."""
from certs.inspection import serving_cert_expiry

__all__ = ["serving_cert_expiry"]
