from __future__ import annotations

import argparse
import logging
import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from certs import authority
from policies.config import PolicyError
from webhook import client_auth, create_app, memory_return, metrics, policy_reload
from webhook.body_budget import SMALL_CHARGE, MiB
from webhook.bootstrap import ServeOptions, build_runtime, flush_observers
from webhook.input_files import unreadable
from webhook.kind_watch import Timing
from webhook.last_good_policy import LastGoodPolicy
from webhook.server import WebhookServer, gunicorn_options

# Like gunicorn's own lines, with the logger's name: which worker said what.
LOG_FORMAT = "[%(asctime)s] [%(process)d] [%(levelname)s] %(name)s: %(message)s"


# The sample AdmissionReview of the checkout this runs from (an editable install, as the README's
# quickstart makes); an installed wheel carries no examples/ and prints no sample.
SAMPLE_REVIEW = Path(__file__).resolve().parents[2] / "examples" / "review-pi.json"


def sample_curl(ca_file: Path, review: Path, port: int) -> str:
    """One line to paste; given absolute paths, it works from whatever directory it is pasted in."""
    return (f"curl --cacert {shlex.quote(str(ca_file))} -H 'Content-Type: application/json' "
            f"--data @{shlex.quote(str(review))} https://localhost:{port}/validate")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve", help="serve the webhook over TLS",
        description="Serve the webhook over TLS with gunicorn: POST /validate and POST /mutate (AdmissionReviews), "
                    "POST /convert (ConversionReviews for the MPIJob CRD); and on a plain HTTP health port: "
                    "GET /healthz (liveness), GET /readyz (readiness: policy and cluster caches loaded) and "
                    "GET /metrics (Prometheus).",
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
    parser.add_argument("--client-timeout", type=float, default=ServeOptions.client_timeout, metavar="SECONDS",
                        help="seconds a client may take to send one request, TLS handshake included; slower "
                             "or silent clients are disconnected (default %(default)s)")
    parser.add_argument("--max-pending-connections", type=int, default=ServeOptions.max_pending_connections,
                        metavar="N", help="connections per worker still in their TLS handshake or first request "
                                          "head; past it the oldest is closed (default %(default)s)")
    parser.add_argument("--health-port", type=int, default=ServeOptions.health_port, metavar="PORT",
                        help="plain HTTP port for /healthz, /readyz and /metrics (kubelet probes, Prometheus; "
                             "default %(default)s)")
    parser.add_argument("--client-ca-file", type=Path, metavar="FILE",
                        help="accept /validate and /mutate only from clients with a TLS certificate issued by "
                             "this CA (PEM; re-read when it changes): the API server's. See docs/security.md")
    parser.add_argument("--client-name", dest="client_names", action="append", default=[], metavar="NAME",
                        help="with --client-ca-file: the client certificate's CN or a subjectAltName must be one "
                             "of these (repeat the flag for more names)")
    parser.add_argument("--client-auth-endpoint", dest="client_auth_paths", action="append",
                        choices=client_auth.AUTHENTICATABLE_PATHS, metavar="PATH",
                        help="with --client-ca-file: the endpoints that require the client certificate (repeat "
                             "the flag; default /validate and /mutate: the API server presents no client "
                             "certificate to CRD conversion webhooks, see docs/security.md)")
    parser.add_argument("--body-memory", type=int, default=ServeOptions.body_memory_mib, metavar="MIB",
                        help="memory (MiB) the request bodies of one worker may take at once while they are read and "
                             "decoded; a request that does not fit waits for room within its timeout, then gets a 429. "
                             "Keep workers x this + 150 under the container's memory limit (default %(default)s)")
    parser.add_argument("--policy-file", type=Path, metavar="FILE",
                        help="the admin's policy (YAML, e.g. a mounted ConfigMap key); re-read when it changes. "
                             "Default: the built-in policy. See `mpijob-webhook policy --help`")
    parser.add_argument("--policy-check-interval", type=float, default=ServeOptions.policy_check_seconds,
                        metavar="SECONDS", help="how often the policy file is checked for edits (default %(default)s)")
    parser.add_argument("--no-audit-log", dest="audit_log", action="store_false",
                        help="do not write the JSON audit line of every decision to stdout")
    parser.add_argument("--kubeconfig", type=Path, metavar="FILE",
                        help="read cluster state (quotas, LimitRanges, nodes, queues, MPIJobs) with this kubeconfig; "
                             "default: the pod's ServiceAccount in a cluster, none with --dev")
    parser.add_argument("--cluster-stale-after", type=float, default=Timing.stale_after, metavar="SECONDS",
                        help="skip the cluster checks that read a cache cut off from the API server for longer than "
                             "this (default %(default)s)")
    parser.add_argument("--crd-recheck-interval", type=float, default=Timing.absent_recheck, metavar="SECONDS",
                        help="how often to look again for an optional CRD (Kueue, Kubeflow Trainer) that is not "
                             "installed (default %(default)s)")
    parser.add_argument("--gpus-per-node", type=int, default=ServeOptions.gpus_per_node, metavar="N",
                        help="GPUs (processing units) per node for converting v1alpha1 jobs sized by gpus or "
                             "processingUnits that do not say (default %(default)s, as the v1alpha1 operator's manifest)")
    parser.set_defaults(run=run, parser=parser)


def serve_options(args: argparse.Namespace) -> ServeOptions:
    """The parsed command line as ServeOptions; commands that extend serve add their flags here."""
    return ServeOptions(host=args.host, port=args.port, cert_file=args.cert_file, key_file=args.key_file,
                        dev=args.dev, workers=args.workers, threads=args.threads,
                        client_timeout=args.client_timeout, max_pending_connections=args.max_pending_connections,
                        health_port=args.health_port, client_ca_file=args.client_ca_file,
                        client_names=tuple(args.client_names),
                        client_auth_paths=frozenset(args.client_auth_paths or client_auth.DEFAULT_PATHS),
                        policy_file=args.policy_file,
                        policy_check_seconds=args.policy_check_interval, audit_log=args.audit_log,
                        kubeconfig=args.kubeconfig, gpus_per_node=args.gpus_per_node,
                        cluster_timing=Timing(stale_after=args.cluster_stale_after,
                                              absent_recheck=args.crd_recheck_interval),
                        body_memory_mib=args.body_memory)


def run(args: argparse.Namespace) -> int:
    if args.cert_file and not args.key_file:
        args.parser.error("--cert-file needs --key-file")
    if args.workers < 1 or args.threads < 1:
        args.parser.error("--workers and --threads must be at least 1")
    if not args.policy_check_interval > 0:
        args.parser.error("--policy-check-interval must be a positive number of seconds")
    if not args.client_timeout > 0:
        args.parser.error("--client-timeout must be a positive number of seconds")
    if not (args.cluster_stale_after > 0 and args.crd_recheck_interval > 0):
        args.parser.error("--cluster-stale-after and --crd-recheck-interval must be positive numbers of seconds")
    if args.gpus_per_node < 1:
        args.parser.error("--gpus-per-node must be at least 1")
    if args.max_pending_connections < 1:
        args.parser.error("--max-pending-connections must be at least 1")
    if not 0 < args.health_port < 65536 or args.health_port == args.port:
        args.parser.error("--health-port must be a port number other than --port")
    if (args.client_names or args.client_auth_paths) and args.client_ca_file is None:
        args.parser.error("--client-name and --client-auth-endpoint need --client-ca-file")
    if args.body_memory < SMALL_CHARGE // MiB:
        args.parser.error(f"--body-memory must be at least {SMALL_CHARGE // MiB} (MiB)")
    master = os.getpid()
    # --dev: a throwaway CA and serving key, removed again however the server stops short of
    # SIGKILL (gunicorn's master leaves through here on SIGTERM and SIGINT too).
    dev_dir = Path(tempfile.mkdtemp(prefix="mpijob-webhook-dev-")) if args.dev else None
    try:
        return _serve(args, master, dev_dir)
    finally:
        # Workers are forks of this process and leave through here too: only the master may
        # remove what every worker still reads.
        if dev_dir is not None and os.getpid() == master:
            shutil.rmtree(dev_dir, ignore_errors=True)


def _serve(args: argparse.Namespace, master: int, dev_dir: Path | None) -> int:
    if dev_dir is not None:
        bundle = authority.dev_bundle(dev_dir)
        args.cert_file, args.key_file = bundle.cert_file, bundle.key_file
        print(f"development CA: {bundle.ca_file}", flush=True)
        if SAMPLE_REVIEW.is_file():
            print("send it the sample review (from any directory):", flush=True)
            print(sample_curl(bundle.ca_file.resolve(), SAMPLE_REVIEW, args.port), flush=True)
    for path in (args.kubeconfig, args.cert_file, args.key_file, args.client_ca_file):
        problem = None if path is None else unreadable(path)
        if problem:
            print(f"mpijob-webhook serve: {problem}", file=sys.stderr)
            return 2
    options = serve_options(args)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, datefmt="%Y-%m-%d %H:%M:%S %z")
    # Where the workers keep the last good policy for those gunicorn starts later.
    last_good = LastGoodPolicy.make() if options.policy_file is not None else None
    if options.policy_file is not None:
        try:  # before any worker starts: a broken policy must stop the rollout, not the cluster
            policy_reload.load_at_startup(options.policy_file, last_good)
        except PolicyError as exc:
            print(f"mpijob-webhook serve: not starting: {exc}", file=sys.stderr)
            if last_good is not None:
                last_good.remove()
            return 2
    metrics_dir = metrics.prepare_multiprocess_dir()  # before gunicorn forks: workers share their samples
    memory_return.tune()  # before gunicorn forks: the workers inherit it
    server_options = {**gunicorn_options(options), "child_exit": metrics.child_exit, "worker_exit": flush_observers}
    try:
        WebhookServer(lambda: create_app(build_runtime(options)), server_options).run()
    finally:
        if os.getpid() == master:
            metrics.release_multiprocess_dir(metrics_dir)
            if last_good is not None:
                last_good.remove()
    return 0
