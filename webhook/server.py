"""Gunicorn, configured for an admission webhook: TLS, threaded workers (the API server keeps
its connections alive and reuses them), bounded request sizes and timeouts."""
from __future__ import annotations

import gc
import os
from collections.abc import Callable
from typing import Any

from flask import Flask
from gunicorn.app.base import BaseApplication

from webhook.bootstrap import ServeOptions
from webhook.connections import bounded_clients
from webhook.tls import check_serving_certificate, reloading_ssl_context


def gunicorn_options(options: ServeOptions) -> dict[str, Any]:
    return {
        "bind": f"[{options.host}]:{options.port}" if ":" in options.host else f"{options.host}:{options.port}",
        "certfile": str(options.cert_file),
        "keyfile": str(options.key_file),
        "on_starting": check_serving_certificate,
        # gthread, with slow and idle clients bounded (webhook.connections); renewed certificates
        # (Secret volume updates) are served without a restart.
        **bounded_clients(options.client_timeout, reloading_ssl_context()),
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
        "loglevel": "info",
        "proc_name": "mpijob-webhook",
        # gunicornc's control socket: nothing in a pod uses it, it would need a writable $HOME
        # (the root filesystem is read-only) and servers of one user would share its path.
        "control_socket_disable": True,
        # The workers' heartbeat files: a tmpfs, so a read-only root filesystem works and a busy
        # disk cannot stall the heartbeat.
        "worker_tmp_dir": "/dev/shm" if os.path.isdir("/dev/shm") else None,
    }


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
        app = self._factory()
        # Everything loaded so far (modules, the app) lives as long as the worker: left out of
        # the garbage collector's full collections, which would otherwise walk it all again and
        # again while requests wait (webhook.watch_caches does the same for the caches once listed).
        gc.freeze()
        return app
