from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

from certs import authority
from webhook.input_files import unreadable


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
    renewal = parser.add_argument_group(
        "renewal", "keep the CA, so the caBundle the API server holds still trusts the renewed certificate")
    renewal.add_argument("--ca-key-out", type=Path, metavar="FILE",
                         help="also write the new CA's private key here (mode 0600), to renew with it later; "
                              "keep it outside the cluster")
    renewal.add_argument("--ca-cert", type=Path, metavar="FILE", help="sign with this existing CA certificate ...")
    renewal.add_argument("--ca-key", type=Path, metavar="FILE", help="... and its private key, instead of making a new CA")
    parser.set_defaults(run=run, parser=parser)


def _certificate_authority(args: argparse.Namespace) -> authority.Issued:
    if args.ca_cert or args.ca_key:
        if not (args.ca_cert and args.ca_key):
            args.parser.error("--ca-cert and --ca-key go together")
        if args.ca_key_out:
            args.parser.error("--ca-key-out is for a new CA; with --ca-cert the CA key already exists")
        for path in (args.ca_cert, args.ca_key):
            problem = unreadable(path)
            if problem:
                raise SystemExit(f"mpijob-webhook certs: {problem}")
        try:
            return authority.load_ca(args.ca_cert, args.ca_key)
        except (OSError, ValueError) as exc:
            raise SystemExit(f"mpijob-webhook certs: cannot use the CA: {exc}") from None
    ca = authority.new_ca(f"{args.service}.{args.namespace}-ca", days=args.ca_days, key_type=args.key_type)
    if args.ca_key_out:
        authority.write_private_key(args.ca_key_out, ca)
        print(f"wrote the CA key to {args.ca_key_out}: keep it safe, it signs certificates this webhook's "
              f"caBundle trusts")
    return ca


def run(args: argparse.Namespace) -> int:
    if args.days <= 0 or args.ca_days <= 0:
        raise SystemExit("mpijob-webhook certs: --days and --ca-days must be positive")
    ca = _certificate_authority(args)
    ca_expiry = ca.certificate.not_valid_after_utc
    if ca_expiry - dt.datetime.now(dt.timezone.utc) < dt.timedelta(days=args.days):
        print(f"note: the CA expires {ca_expiry:%Y-%m-%d}, before {args.days} days have passed; "
              f"the serving certificate ends with it", file=sys.stderr)
    serving = authority.new_serving_cert(ca, authority.service_dns_names(args.service, args.namespace),
                                         days=args.days, key_type=args.key_type)
    bundle = authority.write_bundle(args.out, ca, serving)
    print(f"wrote {bundle.cert_file}, {bundle.key_file} and {bundle.ca_file}")
    return 0
