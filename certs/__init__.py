"""Certificate tooling: a CA and serving certificates for the webhook's TLS endpoint."""
