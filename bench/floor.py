"""The floor: what the server stack alone costs. The same gunicorn configuration as ``serve``
(``webhook.server.gunicorn_options``: worker class, TLS context, keep-alive, limits) running the
least a webhook the API server accepts can do: parse the review, and answer "allowed" with its
uid (a conversion: every object back, stamped with the desired apiVersion), with no checks and
no policy. Whatever the webhook costs above this is ours to cut.

    python3 -m bench.floor --port 9443 --cert-file tls.crt --key-file tls.key --workers 1 --threads 8
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from flask import Flask, Response, request

from webhook.bootstrap import ServeOptions
from webhook.server import WebhookServer, gunicorn_options


def _reply(document: dict[str, Any]) -> Response:
    return Response(json.dumps(document, separators=(",", ":")), mimetype="application/json")


def allow() -> Response:
    review = json.loads(request.get_data())
    return _reply({"apiVersion": review["apiVersion"], "kind": "AdmissionReview",
                   "response": {"uid": review["request"]["uid"], "allowed": True}})


def convert() -> Response:
    review = json.loads(request.get_data())
    wanted = review["request"]["desiredAPIVersion"]
    objects = review["request"]["objects"]
    for obj in objects:
        obj["apiVersion"] = wanted
    return _reply({"apiVersion": review["apiVersion"], "kind": "ConversionReview",
                   "response": {"uid": review["request"]["uid"], "convertedObjects": objects,
                                "result": {"status": "Success"}}})


def create_floor_app() -> Flask:
    app = Flask(__name__)
    app.add_url_rule("/validate", "validate", allow, methods=["POST"])
    app.add_url_rule("/mutate", "mutate", allow, methods=["POST"])
    app.add_url_rule("/convert", "convert", convert, methods=["POST"])
    app.add_url_rule("/readyz", "readyz", lambda: _reply({"status": "ready"}))
    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--health-port", type=int, default=ServeOptions.health_port)
    parser.add_argument("--cert-file", type=Path, required=True)
    parser.add_argument("--key-file", type=Path, required=True)
    parser.add_argument("--workers", type=int, default=ServeOptions.workers)
    parser.add_argument("--threads", type=int, default=ServeOptions.threads)
    args = parser.parse_args(argv)
    options = ServeOptions(host=args.host, port=args.port, health_port=args.health_port, cert_file=args.cert_file,
                           key_file=args.key_file, workers=args.workers, threads=args.threads)
    WebhookServer(create_floor_app, gunicorn_options(options)).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
