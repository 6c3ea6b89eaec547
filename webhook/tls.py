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
from certs.reloading import ReloadingServerContext
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
                        on_reload=metrics.set_certificate_expiry))
        return reloading[0].context()

    return ssl_context


def log_serving_certificate(server: Any) -> None:
    """gunicorn's ``on_starting`` hook (in the arbiter, once)."""
    path = server.cfg.certfile
    description = describe_serving_cert(path)
    if expires_soon(path):
        server.log.warning("serving certificate: %s; it expires in less than %s days, renew it",
                           description, EXPIRY_WARNING.days)
    else:
        server.log.info("serving certificate: %s", description)
