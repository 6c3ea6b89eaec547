"""Gunicorn hooks for TLS: serve the certificate files as they are now, and say at start-up
which certificate is served and when it expires (expired certificates are the most common
webhook outage)."""
from __future__ import annotations

import logging
import ssl
import threading
from collections.abc import Callable
from typing import Any

from certs.inspection import EXPIRY_WARNING, describe_serving_cert, expires_soon
from certs.reloading import ReloadingServerContext, server_context_loader
from webhook import metrics

log = logging.getLogger("gunicorn.error")

SSLContextHook = Callable[[Any, Callable[[], ssl.SSLContext]], ssl.SSLContext]


def reloading_ssl_context() -> SSLContextHook:
    """gunicorn's ``ssl_context`` hook, called for every accepted connection by the gthread worker.

    The first call (in a worker, after fork) makes the reloading context from gunicorn's own
    factory, so gunicorn's TLS settings still apply; later calls hand out the current context.
    """
    lock = threading.Lock()
    reloading: list[ReloadingServerContext] = []

    def ssl_context(conf: Any, default_ssl_context_factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        if not reloading:
            with lock:
                if not reloading:
                    reloading.append(ReloadingServerContext(
                        conf.certfile, conf.keyfile, default_ssl_context_factory, log=log,
                        on_reload=metrics.set_certificate_expiry,
                        # --client-ca-file (gunicorn's ca_certs): renewed CAs are trusted without a restart
                        also_watch=(conf.ca_certs,) if conf.ca_certs else ()))
        return reloading[0].context()

    return ssl_context


def check_serving_certificate(server: Any) -> None:
    """gunicorn's ``on_starting`` hook (in the arbiter, once): refuse to start with a certificate
    and key that do not load together (every handshake would fail), and log which certificate is
    served and when it expires."""
    cert_file, key_file = server.cfg.certfile, server.cfg.keyfile
    try:
        server_context_loader(cert_file, key_file)()
    except (OSError, ssl.SSLError) as exc:
        server.log.error("cannot serve certificate %s with key %s: %s", cert_file, key_file, exc)
        raise SystemExit(1) from None
    if server.cfg.ca_certs:
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_verify_locations(cafile=server.cfg.ca_certs)
        except (OSError, ssl.SSLError) as exc:
            server.log.error("cannot load the client CA %s: %s", server.cfg.ca_certs, exc)
            raise SystemExit(1) from None
    description = describe_serving_cert(cert_file)
    if expires_soon(cert_file):
        server.log.warning("serving certificate: %s; it expires in less than %s days, renew it",
                           description, EXPIRY_WARNING.days)
    else:
        server.log.info("serving certificate: %s", description)
