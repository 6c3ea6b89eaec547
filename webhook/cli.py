"""``mpijob-webhook``: one console script, one module per subcommand under webhook/commands."""
from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Each module has register(subparsers), which adds its parser and sets ``run(args) -> int``.
COMMANDS = (
    "webhook.commands.serve",
    "webhook.commands.certs",
    "webhook.commands.policy",
    "webhook.commands.check",
    "webhook.commands.convert",
    "webhook.commands.export",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mpijob-webhook",
        description="Admission, mutation and conversion webhook for Kubeflow MPIJobs.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        importlib.import_module(module).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
