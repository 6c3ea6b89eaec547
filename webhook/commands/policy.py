"""``mpijob-webhook policy``: the policy file's schema, its defaults, a validator for CI, and
what a given namespace ends up with."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from policies.config import PolicyError
from policies.config.json_schema import defaults_document, json_schema, to_plain
from policies.config.layered_policy import Policy
from webhook import plain_yaml
from webhook.policy_reload import read_policy


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "policy", help="the policy file: schema, defaults, validation",
        description="Work with the policy file that `serve --policy-file` reads.",
    )
    actions = parser.add_subparsers(dest="policy_command", required=True, metavar="ACTION")
    schema = actions.add_parser("schema", help="print the policy file's JSON Schema (generated from the rules)")
    schema.set_defaults(run=run_schema)
    defaults = actions.add_parser("defaults", help="print the built-in policy as a policy file, every setting spelled out")
    defaults.set_defaults(run=run_defaults)
    validate = actions.add_parser("validate", help="check policy files; exit 0 when all are valid, 2 otherwise")
    validate.add_argument("files", nargs="+", type=Path, metavar="FILE")
    validate.set_defaults(run=run_validate)
    show = actions.add_parser("show", help="print the settings in force in one namespace")
    show.add_argument("file", type=Path, metavar="FILE")
    show.add_argument("--namespace", required=True)
    show.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                      help="a label of the namespace (repeat for several)")
    show.set_defaults(run=run_show, parser=show)


def run_schema(args: argparse.Namespace) -> int:
    json.dump(json_schema(), sys.stdout, indent=2)
    print()
    return 0


def run_defaults(args: argparse.Namespace) -> int:
    plain_yaml.dump(defaults_document(), sys.stdout)
    return 0


def run_validate(args: argparse.Namespace) -> int:
    failed = False
    for path in args.files:
        try:
            policy, digest = read_policy(path)
        except PolicyError as exc:
            print(exc, file=sys.stderr)
            failed = True
            continue
        count = len(policy.overrides)
        print(f"{path}: valid (sha256 {digest}, {count} override{'s' if count != 1 else ''})")
    return 2 if failed else 0


def run_show(args: argparse.Namespace) -> int:
    labels = {}
    for item in args.label:
        key, sep, value = item.partition("=")
        if not sep:
            args.parser.error(f"--label {item!r}: expected KEY=VALUE")
        labels[key] = value
    try:
        policy, _ = read_policy(args.file)
    except PolicyError as exc:
        print(exc, file=sys.stderr)
        return 2
    plain_yaml.dump(effective(policy, args.namespace, labels), sys.stdout)
    return 0


def effective(policy: Policy, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    """What applies in ``namespace``: the overrides that matched (weakest first) and the result."""
    applied = [o.name for o in policy.applicable_overrides(namespace, labels)]
    settings = policy.settings_for(namespace, labels)
    if settings is None:
        return {"namespace": namespace, "exempt": True, "overrides": applied}
    return {
        "namespace": namespace,
        "exempt": False,
        "overrides": applied,
        "clusterUnavailable": settings.cluster_unavailable.value,
        "rules": {rule_id: {"action": c.action.value, "params": to_plain(c.params)} for rule_id, c in settings.rules.items()},
        "mutations": {mutation_id: {"enabled": c.enabled, "params": to_plain(c.params)}
                      for mutation_id, c in settings.mutations.items()},
    }
