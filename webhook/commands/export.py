"""``mpijob-webhook export vap``: the policy file's static rules as ValidatingAdmissionPolicy
and ValidatingAdmissionPolicyBinding objects (admissionregistration.k8s.io/v1), for
``kubectl apply -f -``. See docs/vap.md."""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from policies.config import PolicyError
from policies.config.layered_policy import Policy
from policies.config.reader import default_policy
from policies.vap import DEFAULT_PREFIX, EXPORTED_RULES, KINDS, objects
from policies.vap.trainjob_objects import LONGEST_INFIX, TRAINJOB_DEFAULT_RULES, TRAINJOB_EXPORTED_RULES
from webhook.policy_reload import own_namespace, read_policy

# The longest name the prefix is put in front of: "-" + the TrainJob infix + rule id + "-" + the
# longest action.
_LONGEST_SUFFIX = 1 + LONGEST_INFIX + max(len(r) for r in (*EXPORTED_RULES, *TRAINJOB_EXPORTED_RULES)) + len("-audit")
_KINDS = {"all": KINDS, "mpijob": ("MPIJob",), "trainjob": ("TrainJob",)}
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
MAX_NAME = 253


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export", help="export the policy in another form (vap: ValidatingAdmissionPolicies)",
        description="Export the policy for enforcement without the webhook.",
    )
    kinds = parser.add_subparsers(dest="export_kind", required=True, metavar="KIND")
    vap = kinds.add_parser(
        "vap", help="print ValidatingAdmissionPolicies and bindings for the static rules",
        description="Print ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding objects that enforce, "
                    "inside the API server, the rules that need no cluster state, with the policy file's parameters, "
                    "actions and overrides: for MPIJobs " + ", ".join(EXPORTED_RULES) + "; for TrainJobs on an MPI "
                    "runtime (the runtime handed in as the policies' params) " + ", ".join(TRAINJOB_DEFAULT_RULES)
                    + ", and with --trainjob-rules all also " + ", ".join(
                        r for r in TRAINJOB_EXPORTED_RULES if r not in TRAINJOB_DEFAULT_RULES)
                    + ". Exit 0, or 2 when the policy file cannot be used.",
    )
    vap.add_argument("--policy-file", type=Path, metavar="FILE",
                     help="the policy file the webhook serves with (default: the built-in policy)")
    vap.add_argument("--name", default=DEFAULT_PREFIX, metavar="PREFIX",
                     help="prefix of the objects' names (default %(default)s): <prefix>-<rule>[-<action>]")
    vap.add_argument("--webhook-namespace", default=None, metavar="NAMESPACE",
                     help="the webhook's namespace, always exempt (default: as the server finds it, else "
                          "mpijob-webhook)")
    vap.add_argument("--kind", choices=tuple(_KINDS), default="all",
                     help="the jobs to export policies for (default %(default)s; the TrainJob policies need the "
                          "Kubeflow Trainer CRDs to do anything, see docs/vap.md)")
    vap.add_argument("--trainjob-rules", choices=("default", "all"), default="default",
                     help="the TrainJob rules to export: " + ", ".join(TRAINJOB_DEFAULT_RULES) + " (default), or "
                          "all of " + ", ".join(TRAINJOB_EXPORTED_RULES) + " (about 230 KB more to review; "
                          "docs/vap.md)")
    vap.add_argument("--output", "-o", choices=("yaml", "json"), default="yaml",
                     help="YAML documents, or one JSON v1 List (default %(default)s)")
    vap.set_defaults(run=run_vap, parser=vap)


def run_vap(args: argparse.Namespace) -> int:
    if not _PREFIX.match(args.name) or len(args.name) + _LONGEST_SUFFIX > MAX_NAME:
        args.parser.error(f"--name {args.name!r}: must be lowercase letters, digits, '-' or '.', start and end "
                          f"with a letter or digit, and at most {MAX_NAME - _LONGEST_SUFFIX} characters")
    try:
        policy = _policy(args.policy_file, args.webhook_namespace or own_namespace())
    except PolicyError as exc:
        print(exc, file=sys.stderr)
        return 2
    trainjob_rules = TRAINJOB_EXPORTED_RULES if args.trainjob_rules == "all" else TRAINJOB_DEFAULT_RULES
    exported = objects(policy, args.name, _KINDS[args.kind], trainjob_rules)
    if args.output == "json":
        json.dump({"apiVersion": "v1", "kind": "List", "items": exported}, sys.stdout, indent=2)
        print()
    else:
        sys.stdout.write(render_yaml(exported, args.policy_file))
    return 0


def _policy(path: Path | None, namespace: str) -> Policy:
    if path is None:
        return default_policy(namespace)
    return read_policy(path, namespace)[0]


def render_yaml(exported: list[dict[str, Any]], source: Path | None) -> str:
    origin = f"the policy file {source.name}" if source is not None else "the built-in policy"
    header = (f"# Generated by `mpijob-webhook export vap` from {origin}: regenerate it when the policy changes,\n"
              "# do not edit it. What it enforces, and what it leaves to the webhook: docs/vap.md.\n")
    return header + yaml.safe_dump_all(exported, sort_keys=False, width=120)
