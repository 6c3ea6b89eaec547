"""HTTP, wire format and cluster state for the MPIJob admission webhook."""
from __future__ import annotations

from flask import Flask

from webhook.runtime import Runtime, default_runtime

# controller-runtime's cap: no real AdmissionReview or ConversionReview comes near it.
MAX_BODY_BYTES = 7 * 1024 * 1024


def create_app(runtime: Runtime | None = None) -> Flask:
    from webhook.routes import routes

    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.extensions["mpijob-webhook"] = runtime or default_runtime()
    app.register_blueprint(routes)
    return app
