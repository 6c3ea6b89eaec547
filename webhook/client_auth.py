"""Optional authentication of the API server by its TLS client certificate
(``serve --client-ca-file F [--client-name NAME ...]``).

The TLS port then asks every client for a certificate (``CERT_OPTIONAL``: probes for humans and
``/healthz`` still work without one). OpenSSL checks a presented certificate against the CA
during the handshake; one that does not chain to it (or has expired) ends the handshake with an
``unknown_ca``/``bad_certificate`` alert, which the worker counts and audits as refused
(``refused_handshake``). The admission endpoints (and ``/convert`` when asked for: see
``DEFAULT_PATHS`` for why not by default) then accept only a request on
a connection that presented a verified certificate (else 401) whose subject CN or one of whose
subjectAltNames (DNS, IP, URI) is one of the configured names, if any are (else 403). Both
answers are a metav1.Status, the way the API server reads a webhook's error answer, given by
the worker's event loop as soon as the request head is in (``refusal_by_head``), and the
connection is closed: the body is never read, and an unauthenticated client gets no decision,
costs no parsing and never holds a thread (``webhook.request_arrival``). The route checks again
(``webhook.routes``), for a server run without that worker.

The CA file is re-read when it changes, like the serving certificate (``webhook.tls``).
"""
from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webhook import metrics
from webhook.request_framing import request_path

# The endpoints that may require an authenticated client; probes and metrics never do.
AUTHENTICATABLE_PATHS = ("/validate", "/mutate", "/convert")
# Those that do unless told otherwise. Not /convert: the API server calls a CRD's conversion
# webhook through a client that has no kubeconfig (apiextensions-apiserver's webhook converter
# resolves authentication from an empty file), so it never presents a client certificate there,
# and requiring one would fail every read and write of an MPIJob in another version.
DEFAULT_PATHS = frozenset(("/validate", "/mutate"))


# (endpoint, reason) of every Refusal this module makes: the metrics' label values.
REFUSALS = (*((path, reason) for path in AUTHENTICATABLE_PATHS
              for reason in ("no_client_certificate", "client_name_not_allowed")),
            ("handshake", "untrusted_client_certificate"))


@dataclass(frozen=True)
class ClientAuthentication:
    ca_file: Path
    names: frozenset[str] = field(default_factory=frozenset)
    paths: frozenset[str] = DEFAULT_PATHS


@dataclass(frozen=True)
class Refusal:
    """A client refused by client authentication: what the audit log and the answer say."""
    endpoint: str  # the path, or "handshake" when its certificate did not verify
    code: int  # 401 or 403 (0 for a handshake: no HTTP answer)
    reason: str  # no_client_certificate, client_name_not_allowed, untrusted_client_certificate
    message: str
    peer: str  # address:port
    subject: str = ""  # the certificate's subject, when it had a verified one


# Called with every Refusal: the process's audit log (one per server process; see
# webhook.bootstrap), set with observe_refusals.
_observer: Callable[[Refusal], None] | None = None


def observe_refusals(observer: Callable[[Refusal], None] | None) -> None:
    global _observer
    _observer = observer


def check(auth: ClientAuthentication, sock: Any, endpoint: str, peer: str) -> Refusal | None:
    """None if the connection's verified client certificate may call ``endpoint``; else why not."""
    certificate = sock.getpeercert() if isinstance(sock, ssl.SSLSocket) else None
    if not certificate:
        return Refusal(endpoint, 401, "no_client_certificate",
                       f"{endpoint} needs a TLS client certificate issued by the CA in {auth.ca_file.name}; "
                       "the connection presented none", peer)
    subject = describe_subject(certificate)
    if auth.names:
        presented = identity_names(certificate)
        if not presented & auth.names:
            return Refusal(endpoint, 403, "client_name_not_allowed",
                           f"the client certificate ({subject}) names none of the allowed clients "
                           f"({', '.join(sorted(auth.names))})", peer, subject)
    return None


def refusal_by_head(auth: ClientAuthentication, sock: Any, head: bytes) -> Refusal | None:
    """``check`` for a request of which only the head (``head``: its fields) has arrived."""
    path = request_path(head)
    if path not in auth.paths:
        return None
    try:
        peer = "%s:%s" % sock.getpeername()[:2]
    except OSError:
        peer = ""
    return check(auth, sock, path, peer)


def identity_names(certificate: dict[str, Any]) -> frozenset[str]:
    """The subject's commonName(s) and every DNS, IP and URI subjectAltName."""
    names = {value for rdn in certificate.get("subject", ()) for key, value in rdn if key == "commonName"}
    names.update(value for kind, value in certificate.get("subjectAltName", ())
                 if kind in ("DNS", "IP Address", "URI"))
    return frozenset(names)


def describe_subject(certificate: dict[str, Any]) -> str:
    return ",".join(f"{key}={value}" for rdn in certificate.get("subject", ()) for key, value in rdn)


def refuse(refusal: Refusal) -> None:
    """Count and report a refusal (metrics, and the audit log)."""
    metrics.record_refused_client(refusal.endpoint, refusal.reason)
    if _observer is not None:
        _observer(refusal)


def refused_handshake(peer: str) -> None:
    """A client's certificate did not verify against the CA: the handshake was refused."""
    refuse(Refusal("handshake", 0, "untrusted_client_certificate",
                   "the client certificate does not chain to the configured client CA", peer))
