"""HTTP, wire format and cluster state for the MPIJob admission webhook."""
from __future__ import annotations

from flask import Flask

from webhook.review import MAX_BODY_BYTES
from webhook.runtime import Runtime, default_runtime


def create_app(runtime: Runtime | None = None) -> Flask:
    from webhook.routes import around_requests, routes

    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES  # routes read bodies with review.read_body
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.extensions["mpijob-webhook"] = runtime or default_runtime()
    app.register_blueprint(routes)
    app.wsgi_app = around_requests(app)  # type: ignore[method-assign,assignment]
    return app
