"""``mpijob-webhook serve`` with only the first N rules of the registry, to measure what each
group of rules costs. A policy file can make a rule milder (audit) but not switch it off, and an
audited rule still runs: taking rules out of the registry is the only way to see their cost.

    python3 -m bench.fewer_rules 0 --cert-file tls.crt --key-file tls.key ...   # shape check only
"""
from __future__ import annotations

import sys

from policies.registry import RULES
from webhook import cli
from webhook.bootstrap import ServeOptions
from webhook.commands import serve
from webhook.runtime import Runtime


def main(argv: list[str]) -> int:
    count, serve_args = int(argv[0]), argv[1:]
    full_runtime = serve.build_runtime

    def runtime_with_fewer_rules(options: ServeOptions) -> Runtime:
        runtime = full_runtime(options)
        runtime.admission.rules = RULES[:count]
        return runtime

    serve.build_runtime = runtime_with_fewer_rules  # serve looks it up when each worker starts
    return cli.main(["serve", *serve_args])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
