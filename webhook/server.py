"""Gunicorn, configured for an admission webhook: TLS, threaded workers (the API server keeps
its connections alive and reuses them), bounded request sizes and timeouts."""
from __future__ import annotations

import gc
import os
import ssl
from collections.abc import Callable
from typing import Any

from flask import Flask
from gunicorn.app.base import BaseApplication
from gunicorn.glogging import Logger

from webhook.body_budget import BodyBudget
from webhook.bootstrap import ServeOptions
from webhook import client_auth, metrics
from webhook.connections import Connection, bounded_clients
from webhook.request_framing import Answer
from webhook.tls import check_serving_certificate, reloading_ssl_context


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def gunicorn_options(options: ServeOptions) -> dict[str, Any]:
    return {
        # The TLS port, and the plain health port (probes and Prometheus: webhook.routes).
        "bind": [_address(options.host, options.port), _address(options.host, options.health_port)],
        "certfile": str(options.cert_file),
        "keyfile": str(options.key_file),
        # --client-ca-file: ask every client for a certificate, verified against this CA when given
        # (the admission endpoints then require one: webhook.client_auth).
        **({"ca_certs": str(options.client_ca_file), "cert_reqs": ssl.CERT_OPTIONAL}
           if options.client_ca_file is not None else {}),
        "on_starting": check_serving_certificate,
        # gthread, with handshakes and request heads read in the worker's event loop and every
        # client bounded (webhook.connections); renewed certificates (Secret volume updates) are
        # served without a restart.
        **bounded_clients(options.client_timeout, reloading_ssl_context(),
                          max_pending=options.max_pending_connections,
                          plain_ports=frozenset((options.health_port,)),
                          on_dropped=_dropped, on_counts=metrics.record_connections,
                          refuse_client=_head_refusal(options), arriving_room=_loaded_budget),
        # HTTP/2 would hold a thread for a connection's whole life.
        "http_protocols": "h1",
        "workers": options.workers,
        "threads": options.threads,
        # A worker that does not answer its arbiter for this long is replaced.
        "timeout": 30,
        "graceful_timeout": 20,
        # Longer than the API server's idle connection reuse, so it is the client that closes.
        "keepalive": 120,
        "limit_request_line": 8190,
        "limit_request_fields": 100,
        "limit_request_field_size": 8190,
        "accesslog": None,
        "errorlog": "-",
        "logger_class": _listening_logger(options),
        "loglevel": "info",
        "proc_name": "mpijob-webhook",
        # gunicornc's control socket: nothing in a pod uses it, it would need a writable $HOME
        # (the root filesystem is read-only) and servers of one user would share its path.
        "control_socket_disable": True,
        # The workers' heartbeat files: a tmpfs, so a read-only root filesystem works and a busy
        # disk cannot stall the heartbeat.
        "worker_tmp_dir": "/dev/shm" if os.path.isdir("/dev/shm") else None,
    }


# gunicorn's own start-up line; it names every bound socket https:// when TLS is on, the plain
# health port too.
_LISTENING = "Listening at: "


def _listening_logger(options: ServeOptions) -> type[Logger]:
    """gunicorn's logger, saying what each port is in its "Listening at" line: an admin who
    reads https:// for the health port points a probe or a ServiceMonitor at it with the wrong
    scheme."""
    described = (f"webhook HTTPS on https://{_address(options.host, options.port)}, "
                 f"health and metrics plain HTTP on http://{_address(options.host, options.health_port)}")

    class ListeningLogger(Logger):
        def info(self, msg: object, *args: object, **kwargs: Any) -> None:
            if isinstance(msg, str) and msg.startswith(_LISTENING) and args:
                args = (described, *args[1:])
            super().info(msg, *args, **kwargs)

    return ListeningLogger


def _head_refusal(options: ServeOptions) -> Callable[[Any, bytes], Answer | None] | None:
    """With client authentication: the 401 or 403 answering a request by its head, counted and
    audited as the route would (webhook.client_auth)."""
    if options.client_ca_file is None:
        return None
    auth = client_auth.ClientAuthentication(options.client_ca_file, frozenset(options.client_names),
                                            options.client_auth_paths)

    def refusal(sock: Any, head: bytes) -> Answer | None:
        refused = client_auth.refusal_by_head(auth, sock, head)
        if refused is None:
            return None
        client_auth.refuse(refused)
        if refused.code == 401:
            return Answer(401, "Unauthorized", "Unauthorized", refused.message)
        return Answer(403, "Forbidden", "Forbidden", refused.message)
    return refusal


# The body budget of the app this process loaded (WebhookServer.load): bodies arriving in the
# worker's event loop hold room in it too.
_budget: BodyBudget | None = None


def _loaded_budget() -> BodyBudget | None:
    return _budget


def _dropped(reason: str, connection: Connection) -> None:
    metrics.record_dropped_connection(reason)
    if reason == "untrusted_client_certificate":
        client_auth.refused_handshake(connection.peer())


class WebhookServer(BaseApplication):
    def __init__(self, app_factory: Callable[[], Flask], options: dict[str, Any]) -> None:
        self._factory = app_factory
        self._options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self._options.items():
            self.cfg.set(key, value)

    # gunicorn's stubs type a WSGI environ as a MutableMapping, Flask (and PEP 3333) as a dict.
    def load(self) -> Flask:  # type: ignore[override]
        global _budget
        app = self._factory()
        _budget = getattr(getattr(app, "extensions", {}).get("mpijob-webhook"), "body_budget", None)
        # Everything loaded so far (modules, the app) lives as long as the worker: left out of
        # the garbage collector's full collections, which would otherwise walk it all again and
        # again while requests wait (webhook.watch_caches does the same for the caches once listed).
        gc.freeze()
        return app
