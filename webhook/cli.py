"""``mpijob-webhook``: one console script, one module per subcommand under webhook/commands."""
from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

# Each module has register(subparsers), which adds its parser and sets ``run(args) -> int``.
COMMANDS = (
    "webhook.commands.serve",
    "webhook.commands.certs",
    "webhook.commands.policy",
    "webhook.commands.check",
    "webhook.commands.convert",
    "webhook.commands.export",
)
DISTRIBUTION = "mpijob-webhook"
# A shell reports a command that a closed pipe stopped (``| head``) with this status.
CLOSED_PIPE_EXIT = 128 + signal.SIGPIPE


class CommandParser(argparse.ArgumentParser):
    """Every parser of the command line, subcommands included (argparse makes them of the parent's
    class): options only by their full names (an abbreviation silently picks whichever option
    starts that way: ``--policy`` became ``--policy-file``), and an unknown argument reported by
    the (sub)command it was given to, with that command's usage."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        parsed, unknown = super().parse_known_args(args, namespace)
        if unknown:
            self.error(f"unrecognized arguments: {' '.join(unknown)}")
        return parsed, unknown


def version() -> str:
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="mpijob-webhook",
        description="Admission, mutation and conversion webhook for Kubeflow MPIJobs.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        importlib.import_module(module).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = int(args.run(args) or 0)
        sys.stdout.flush()  # a reader that went away is found out here, not at interpreter exit
    except BrokenPipeError:
        _quiet_closed_pipe()
    return code


def _quiet_closed_pipe() -> NoReturn:
    """The reader of stdout is gone (``… | head``): stop without a traceback, and without the
    interpreter's own complaint when it flushes stdout once more on the way out."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(CLOSED_PIPE_EXIT)


if __name__ == "__main__":
    sys.exit(main())
