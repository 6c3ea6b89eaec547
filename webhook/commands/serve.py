from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from certs import authority
from webhook import create_app
from webhook.bootstrap import ServeOptions, build_runtime
from webhook.server import WebhookServer, gunicorn_options


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve", help="serve the webhook over TLS",
        description="Serve /validate, /mutate, /healthz and /readyz over TLS with gunicorn.",
    )
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on (default %(default)s)")
    parser.add_argument("--port", type=int, default=8443, help="port to listen on (default %(default)s)")
    tls = parser.add_mutually_exclusive_group(required=True)
    tls.add_argument("--cert-file", type=Path, help="serving certificate (PEM), e.g. tls.crt of a kubernetes.io/tls Secret")
    tls.add_argument("--dev", action="store_true",
                     help="make a throwaway CA and a localhost certificate; serve the default policy without a cluster")
    parser.add_argument("--key-file", type=Path, help="private key (PEM) of --cert-file")
    parser.add_argument("--workers", type=int, default=ServeOptions.workers, help="worker processes (default %(default)s)")
    parser.add_argument("--threads", type=int, default=ServeOptions.threads, help="threads per worker (default %(default)s)")
    parser.set_defaults(run=run, parser=parser)


def serve_options(args: argparse.Namespace) -> ServeOptions:
    """The parsed command line as ServeOptions; commands that extend serve add their flags here."""
    return ServeOptions(host=args.host, port=args.port, cert_file=args.cert_file, key_file=args.key_file,
                        dev=args.dev, workers=args.workers, threads=args.threads)


def run(args: argparse.Namespace) -> int:
    if args.cert_file and not args.key_file:
        args.parser.error("--cert-file needs --key-file")
    if args.workers < 1 or args.threads < 1:
        args.parser.error("--workers and --threads must be at least 1")
    if args.dev:
        bundle = authority.dev_bundle(Path(tempfile.mkdtemp(prefix="mpijob-webhook-dev-")))
        args.cert_file, args.key_file = bundle.cert_file, bundle.key_file
        print(f"development CA: {bundle.ca_file}", flush=True)
        print(f"try: curl --cacert {bundle.ca_file} -H 'Content-Type: application/json' "
              f"--data @examples/review-pi.json https://localhost:{args.port}/validate", flush=True)
    for path in (args.cert_file, args.key_file):
        if not Path(path).is_file():
            print(f"mpijob-webhook serve: {path} does not exist or is not a file", file=sys.stderr)
            return 2
    options = serve_options(args)
    WebhookServer(lambda: create_app(build_runtime(options)), gunicorn_options(options)).run()
    return 0
