from __future__ import annotations

import argparse
from pathlib import Path

from certs import authority


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "certs", help="make a CA and a serving certificate for the webhook Service",
        description="Writes tls.crt, tls.key and ca.crt for the Service's DNS names "
                    "(S, S.N, S.N.svc, S.N.svc.cluster.local).",
    )
    parser.add_argument("--service", required=True, help="the webhook's Service name")
    parser.add_argument("--namespace", required=True, help="the Service's namespace")
    parser.add_argument("--out", required=True, type=Path, help="directory to write the files to")
    parser.add_argument("--days", type=int, default=authority.DEFAULT_SERVING_DAYS,
                        help="serving certificate validity in days (default %(default)s)")
    parser.add_argument("--ca-days", type=int, default=authority.DEFAULT_CA_DAYS,
                        help="CA validity in days (default %(default)s)")
    parser.add_argument("--key-type", choices=authority.KEY_TYPES, default=authority.DEFAULT_KEY_TYPE,
                        help="key algorithm (default %(default)s; RSA for FIPS-minded clusters)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.days <= 0 or args.ca_days <= 0:
        raise SystemExit("mpijob-webhook certs: --days and --ca-days must be positive")
    ca = authority.new_ca(f"{args.service}.{args.namespace}-ca", days=args.ca_days, key_type=args.key_type)
    serving = authority.new_serving_cert(ca, authority.service_dns_names(args.service, args.namespace),
                                         days=args.days, key_type=args.key_type)
    bundle = authority.write_bundle(args.out, ca, serving)
    print(f"wrote {bundle.cert_file}, {bundle.key_file} and {bundle.ca_file}")
    return 0
